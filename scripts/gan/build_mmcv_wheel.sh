#!/usr/bin/env bash
# Build an mmcv-full 1.7.2 wheel (CPU ops) against the torch installed in a given Python
# environment, once, and keep it in a wheelhouse for later runs / CI.
#
#   scripts/gan/build_mmcv_wheel.sh [PYTHON]        (or PYTHON=/path/to/python ...)
#
# PYTHON's environment must already have torch installed (this project: torch==2.14.1).
# The wheel lands in ${EXPERIMENTS_WHEELHOUSE:-$HOME/.cache/experiments/wheels}, next to a
# stamp file <wheel>.torch holding the torch version it was compiled against (mmcv's C++ ops
# are tied to torch's ABI) and the build recipe. If a wheel for this torch is there, nothing
# is built.
# The last line on stdout is the wheel's path; all progress goes to stderr.
#
# Why a source build: mmcv-full 1.7.2 is an sdist only. Its setup.py hard-codes
# -std=c++14 / -std=c++17, which torch 2.14's headers reject ("C++20 or later compatible
# compiler is required"), so the flags are patched to -std=c++20. It imports pkg_resources,
# hence setuptools<81. Its metadata names opencv-python (GUI build, needs libGL) unless cv2 is
# importable at build time (then no OpenCV at all); patched to name opencv-python-headless.
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
# Build recipe: 1 = -std=c++20 patch; 2 = also names opencv-python-headless in the metadata.
# A cached wheel from another recipe is reused (the compiled ops are the same), with a note.
RECIPE=2

mkdir -p "$WHEELHOUSE"
# One build at a time per wheelhouse (parallel CI jobs wait, then reuse the wheel).
exec 9>"$WHEELHOUSE/.mmcv-build.lock"
if command -v flock >/dev/null && ! flock -n 9; then
  log "another build holds $WHEELHOUSE/.mmcv-build.lock; waiting for it"
  flock 9
fi

cached_torch="" cached_recipe=""
if [ -f "$stamp" ]; then
  read -r line <"$stamp" || true
  case $line in
    torch=*) cached_torch=${line#torch=}; cached_torch=${cached_torch%% *}; cached_recipe=${line##*recipe=} ;;
    *) cached_torch=$line; cached_recipe=1 ;;  # first stamp format: the torch version only
  esac
fi
if [ -f "$wheel" ] && [ "$cached_torch" = "$torch_version" ]; then
  log "cached: $wheel (torch $torch_version, recipe $cached_recipe); nothing to build"
  if [ "$cached_recipe" != "$RECIPE" ]; then
    log "note: recipe $cached_recipe wheel; its metadata may name opencv-python (harmless with" \
        "--no-deps installs; 'pip check' reports it). Delete $wheel to rebuild with recipe $RECIPE."
  fi
  echo "$wheel"
  exit 0
fi
if [ -f "$wheel" ]; then
  log "rebuilding $wheel_name: cached one is for torch '${cached_torch:-unknown}', need '$torch_version'"
fi

log "building mmcv-full $MMCV_VERSION for $pytag, torch $torch_version, MAX_JOBS=$MAX_JOBS"
"$PY" -m pip install --quiet "setuptools<81" wheel ninja

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mmcv-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

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
echo "torch=$torch_version recipe=$RECIPE" > "$wheel.torch"
log "compiled in $((t2 - t1)) s, total $(( $(date +%s) - t0 )) s -> $wheel"
echo "$wheel"
