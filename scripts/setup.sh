#!/usr/bin/env bash
# Create .venv (Python 3.11) and install the project with its test tools.
# Idempotent: an existing .venv is reused, pip's wheel cache (~/.cache/pip) makes re-runs fast,
# torch/torchvision come from this machine's local wheel index when it has one.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PYTHON=$candidate; break
    fi
  done
fi
[ -n "$PYTHON" ] || { echo "setup: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2; exit 1; }

# A venv made without ensurepip (Debian without python3.11-venv) has no pip: make it again.
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  "$PYTHON" -m venv --clear .venv || {
    echo "setup: cannot create a venv; on Debian: apt-get install python3.11-venv" >&2; exit 1; }
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# A regular (non-editable) install: the tests exercise exactly what users install.
.venv/bin/python -m pip install --quiet ".[test]" 2> >(grep -v "^WARNING: Location" >&2)
echo "setup: $(.venv/bin/python -c 'import experiments, torch, spikingjelly; print("experiments", experiments.__version__, "| torch", torch.__version__)')"
