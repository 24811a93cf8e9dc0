#!/usr/bin/env bash
# Copy prebuilt mmcv-full wheels (with their .torch stamps) from a read-only folder into the
# wheelhouse, where build_mmcv_wheel.sh looks first. Only fills a gap: a wheel already in the
# wheelhouse is kept. A missing or empty source folder is not an error (the build is the
# fallback); build_mmcv_wheel.sh still checks the stamp against the installed torch.
#
#   scripts/gan/seed_wheelhouse.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: seed_wheelhouse.sh SOURCE_DIR}
WHEELHOUSE=${EXPERIMENTS_WHEELHOUSE:-$HOME/.cache/experiments/wheels}
shopt -s nullglob
wheels=("$src"/mmcv_full-*.whl)
[ ${#wheels[@]} -gt 0 ] || { echo "seed_wheelhouse: no mmcv-full wheel in $src; it will be built" >&2; exit 0; }
mkdir -p "$WHEELHOUSE"
for wheel in "${wheels[@]}"; do
  name=$(basename "$wheel")
  [ -f "$wheel.torch" ] || { echo "seed_wheelhouse: $name has no .torch stamp; skipped" >&2; continue; }
  if [ -f "$WHEELHOUSE/$name" ]; then
    echo "seed_wheelhouse: $name already in $WHEELHOUSE" >&2
    continue
  fi
  # cp, then chmod: the shared copy is read-only and the wheelhouse must stay writable.
  cp "$wheel" "$WHEELHOUSE/$name.tmp" && cp "$wheel.torch" "$WHEELHOUSE/$name.torch"
  mv "$WHEELHOUSE/$name.tmp" "$WHEELHOUSE/$name"
  chmod u+w "$WHEELHOUSE/$name" "$WHEELHOUSE/$name.torch"
  echo "seed_wheelhouse: copied $name ($(cat "$wheel.torch")) into $WHEELHOUSE" >&2
done
