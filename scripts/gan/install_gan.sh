#!/usr/bin/env bash
# Install MMGeneration 0.7.3 (+ mmcv-full 1.7.2 with CPU ops, mmcls 0.25.0) into a venv.
#
#   scripts/gan/install_gan.sh [VENV_DIR]     (default: $VENV, else the repo's .venv)
#
# The venv must already have torch (this project: torch==2.14.1, torchvision==0.29.1).
# mmcv-full comes from the wheelhouse ${EXPERIMENTS_WHEELHOUSE:-$HOME/.cache/experiments/wheels};
# when it has no wheel for this torch, build_mmcv_wheel.sh builds one (20-28 min on 2 cores, once).
# Idempotent: a second run only confirms what is installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
VENV=${1:-${VENV:-$here/../../.venv}}
PY="$VENV/bin/python"
log() { echo "install_gan: $*" >&2; }
t0=$(date +%s)

[ -x "$PY" ] || { log "no python at $PY (create the venv first, e.g. scripts/setup.sh)"; exit 1; }
"$PY" -c 'import torch' 2>/dev/null || { log "torch is not installed in $VENV"; exit 1; }
pip_install() { "$PY" -m pip install --quiet "$@" 2> >(grep -v "^WARNING: Location" >&2); }

# 1. mmcv-full: cached wheel (or build it). --no-deps: its runtime needs, pinned, come from
#    requirements-gan.txt.
wheel=$(bash "$here/build_mmcv_wheel.sh" "$PY" | tail -n 1)
pip_install --no-deps "$wheel"

# 2. Runtime needs (pinned), and setuptools<81 (mmgen's setup.py build; pkg_resources).
pip_install "setuptools<81" wheel -r "$here/requirements-gan.txt"

# 3. mmgen 0.7.3: an sdist whose setup.py imports torch -> --no-build-isolation; it declares
#    no dependencies. mmcls 0.25.0 (imported by mmgen's data pipelines): --no-deps, since its
#    own needs (matplotlib, numpy, packaging) are in requirements-gan.txt.
pip_install --no-deps --no-build-isolation mmgen==0.7.3 mmcls==0.25.0

# 4. Smoke test: compiled CPU ops load, packages import, mmgen's bundled configs are present.
"$PY" - <<'PY'
import os, sys
import mmcv, mmcv.ops, mmcls, mmgen, torch
from mmcv.ops import nms  # needs the compiled mmcv._ext
cfg_dir = os.path.join(os.path.dirname(mmgen.__file__), ".mim", "configs")
assert os.path.isfile(os.path.join(cfg_dir, "dcgan", "dcgan_mnist-64_b128x1_Glr4e-4_Dlr1e-4_5k.py")), cfg_dir
# (no importlib.util.find_spec here: it would import mmgen.models, which fails without ada/)
ada = os.path.isdir(os.path.join(os.path.dirname(mmgen.__file__), "models", "architectures", "stylegan", "ada"))
print(f"install_gan: torch {torch.__version__} | mmcv-full {mmcv.__version__} (ops ok) | "
      f"mmgen {mmgen.__version__} | mmcls {mmcls.__version__} | "
      f"stylegan/ada package {'present' if ada else 'MISSING (as in every mmgen 0.7.x on PyPI)'}",
      file=sys.stderr)
PY
log "done in $(( $(date +%s) - t0 )) s"
