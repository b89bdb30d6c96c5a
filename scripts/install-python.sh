#!/usr/bin/env bash
# Installs the Python package flowline (python/, docs/python.md) into a virtualenv:
#
#   bash scripts/install-python.sh VENV
#
# VENV missing: it is created with python3 -m venv and the project's pinned torch (torch==2.11.0: with its
# NVIDIA wheels where an NVIDIA driver is present, else the light install scripts/setup.sh makes: the wheel
# alone plus the two small NVIDIA wheels libtorch_cpu.so needs) and numpy. VENV present: its torch must be
# 2.11.0 and its Python the build's minor version (the extension is built for one). The package is the wheel
# of scripts/build-wheel.sh, built from the existing build folder (FLOWLINE_BUILD_DIR, default build; set up
# with scripts/setup.sh when there is none), then pip-installed into VENV without dependencies.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -ne 1 ]; then
  echo "usage: scripts/install-python.sh VENV" >&2
  exit 2
fi
VENV="$(realpath -m "$1")"
cd "$ROOT"
BUILD_DIR="${FLOWLINE_BUILD_DIR:-build}"
TORCH_VERSION=2.11.0
LIGHT_WHEELS=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85)  # as scripts/setup.sh's light install

if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  echo "==> no build in $BUILD_DIR: scripts/setup.sh sets one up"
  FLOWLINE_BUILD_TARGET=flowline_python bash scripts/setup.sh
fi
BUILD_PYTHON="$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")"
if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV with torch==$TORCH_VERSION"
  python3 -m venv "$VENV"
  if [ -e /dev/nvidiactl ] || nvidia-smi -L >/dev/null 2>&1; then
    "$VENV/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" numpy
  else
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "torch==$TORCH_VERSION" "${LIGHT_WHEELS[@]}"
    "$VENV/bin/pip" install -q --disable-pip-version-check numpy
  fi
fi
version_of() { "$1" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'; }
if [ "$(version_of "$VENV/bin/python")" != "$(version_of "$BUILD_PYTHON")" ]; then
  echo "install-python.sh: $VENV has Python $(version_of "$VENV/bin/python"), the build's extension is for" \
    "$(version_of "$BUILD_PYTHON") ($BUILD_PYTHON): make VENV with that Python" >&2
  exit 1
fi
installed_torch="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)"
if [ "${installed_torch%%+*}" != "$TORCH_VERSION" ]; then
  echo "install-python.sh: $VENV has torch '${installed_torch:-none}', flowline needs torch==$TORCH_VERSION" \
    "(its LibTorch is the one the package loads): $VENV/bin/pip install torch==$TORCH_VERSION" >&2
  exit 1
fi
WHEEL="$(bash scripts/build-wheel.sh "$BUILD_DIR/wheels" | tail -n 1)"
echo "==> installing $WHEEL into $VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall "$WHEEL"
(cd / && "$VENV/bin/python" -c 'import flowline; print("flowline", flowline.__file__)')
