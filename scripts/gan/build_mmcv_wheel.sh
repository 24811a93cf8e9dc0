#!/usr/bin/env bash
# Build an mmcv-full 1.7.2 wheel (CPU ops) against the torch installed in a given Python
# environment, once, and keep it in a wheelhouse for later runs / CI.
#
#   scripts/gan/build_mmcv_wheel.sh [PYTHON]        (or PYTHON=/path/to/python ...)
#
# PYTHON's environment must already have torch installed (this project: torch==2.14.1).
# The wheel lands in ${EXPERIMENTS_WHEELHOUSE:-$HOME/.cache/experiments/wheels}, next to a
# stamp file <wheel>.torch holding the torch version it was compiled against (mmcv's C++ ops
# are tied to torch's ABI) and this recipe's version. If a wheel with a matching stamp is
# there, nothing is built.
# The last line on stdout is the wheel's path; all progress goes to stderr.
#
# Why a source build: mmcv-full 1.7.2 is an sdist only. Its setup.py hard-codes
# -std=c++14 / -std=c++17, which torch 2.14's headers reject ("C++20 or later compatible
# compiler is required"), so the flags are patched to -std=c++20. It imports pkg_resources,
# hence setuptools<81. Its metadata would name opencv-python or opencv-python-headless
# depending on what the build env has installed; patched to always name the headless one.
# 20-28 min on 2 cores (MAX_JOBS=2).
set -euo pipefail

PY=${1:-${PYTHON:-python3}}
MMCV_VERSION=${MMCV_VERSION:-1.7.2}
WHEELHOUSE=${EXPERIMENTS_WHEELHOUSE:-$HOME/.cache/experiments/wheels}
export MAX_JOBS=${MAX_JOBS:-2}

log() { echo "build_mmcv_wheel: $*" >&2; }
t0=$(date +%s)

command -v "$PY" >/dev/null || { log "no such python: $PY"; exit 1; }
torch_version=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) \
  || { log "torch is not importable with $PY; install torch first (e.g. pip install torch==2.14.1)"; exit 1; }
pytag=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
wheel_name="mmcv_full-${MMCV_VERSION}-${pytag}-${pytag}-linux_$(uname -m).whl"
wheel="$WHEELHOUSE/$wheel_name"
stamp="$wheel.torch"
RECIPE=2  # bump when the build recipe changes: cached wheels with another recipe are rebuilt
want_stamp="torch=$torch_version recipe=$RECIPE"

mkdir -p "$WHEELHOUSE"
# One build at a time per wheelhouse (parallel CI jobs wait, then reuse the wheel).
exec 9>"$WHEELHOUSE/.mmcv-build.lock"
if command -v flock >/dev/null; then flock 9; fi

if [ -f "$wheel" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want_stamp" ]; then
  log "cached: $wheel (torch $torch_version); nothing to build"
  echo "$wheel"
  exit 0
fi
if [ -f "$wheel" ]; then
  log "rebuilding $wheel_name: cached one is '$(cat "$stamp" 2>/dev/null || echo unknown)', need '$want_stamp'"
fi

log "building mmcv-full $MMCV_VERSION for $pytag, torch $torch_version, MAX_JOBS=$MAX_JOBS"
"$PY" -m pip install --quiet "setuptools<81" wheel ninja

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mmcv-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# pip download prepares metadata by running setup.py, which needs pkg_resources and torch:
# hence --no-build-isolation in an env that has setuptools<81 and torch.
"$PY" -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation \
  "mmcv-full==$MMCV_VERSION" -d "$tmp/sdist"
tar -xzf "$tmp"/sdist/mmcv-full-"$MMCV_VERSION".tar.gz -C "$tmp"
src="$tmp/mmcv-full-$MMCV_VERSION"

sed -i -E -e 's/-std=c\+\+1[47]/-std=c++20/g' \
  -e "s/'opencv-python>=3'\)\]/'opencv-python-headless>=3')]/" "$src/setup.py"
if grep -qE -- '-std=c\+\+1[47]' "$src/setup.py" || ! grep -q -- '-std=c++20' "$src/setup.py" \
   || grep -q "'opencv-python>=3'" "$src/setup.py"; then
  log "patching setup.py (-std flags, opencv requirement) failed"; exit 1
fi

t1=$(date +%s)
# FORCE_CUDA=0: a CPU-ops build even where a CUDA toolkit (nvcc) is installed.
MMCV_WITH_OPS=1 FORCE_CUDA=0 "$PY" -m pip wheel --no-deps --no-build-isolation \
  -w "$tmp/dist" "$src" >&2
t2=$(date +%s)

built=$(ls "$tmp"/dist/mmcv_full-"$MMCV_VERSION"-*.whl)
cp "$built" "$wheel.partial"
mv -f "$wheel.partial" "$WHEELHOUSE/$(basename "$built")"
wheel="$WHEELHOUSE/$(basename "$built")"
echo "$want_stamp" > "$wheel.torch"
log "compiled in $((t2 - t1)) s, total $(( $(date +%s) - t0 )) s -> $wheel"
echo "$wheel"
