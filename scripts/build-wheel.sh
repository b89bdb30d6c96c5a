#!/usr/bin/env bash
# Builds a wheel of the Python package flowline (python/, docs/python.md) from the build folder:
#
#   bash scripts/build-wheel.sh [OUT_DIR]      # default build/wheels; prints the wheel's path
#
# Builds the extension and flowline's libraries and executors (targets flowline_python, flowline_programs) in
# FLOWLINE_BUILD_DIR (default build, configured by scripts/setup.sh), installs them into a staging folder
# and packs flowline/ with its own libraries in flowline/lib (python/make_wheel.py).
#
# What the wheel depends on: torch==2.11.0 installed beside it (its LibTorch is the one the package loads:
# no second copy ships), numpy, the same Python minor version as the build's (the tag says it), and the
# system libraries flowline links on Debian 12 (libyaml-cpp0.7, libboost-json1.81, libspdlog1.10, libfmt9,
# libutf8proc2, ...): a wheel for machines set up like this one, not a manylinux wheel.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${FLOWLINE_BUILD_DIR:-build}"
OUT_DIR="${1:-$BUILD_DIR/wheels}"
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  echo "build-wheel.sh: no configured build in $BUILD_DIR: run scripts/setup.sh first (it configures and builds)" >&2
  exit 1
fi
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt"; }
PYTHON="$(cache Python_EXECUTABLE)"
if [ -z "$PYTHON" ] || [ "$(cache FLOWLINE_PYTHON)" = OFF ]; then
  echo "build-wheel.sh: $BUILD_DIR builds no Python package (FLOWLINE_PYTHON=$(cache FLOWLINE_PYTHON)): pip install nanobind into the venv, then cmake $BUILD_DIR -DFLOWLINE_PYTHON=ON" >&2
  exit 1
fi
# Configure again: a build configured before nanobind was installed has no flowline_python target yet.
cmake "$BUILD_DIR" >/dev/null
if ! cmake --build "$BUILD_DIR" --target help | grep -q '^flowline_python:'; then
  echo "build-wheel.sh: $BUILD_DIR has no flowline_python target: $PYTHON lacks nanobind or Python's headers" \
    "(cmake's output says which): $PYTHON -m pip install nanobind, or run scripts/setup.sh" >&2
  exit 1
fi
cmake --build "$BUILD_DIR" --target flowline_python flowline_programs
STAGE="$BUILD_DIR/python-stage"
rm -rf "$STAGE"
cmake --install "$BUILD_DIR" --prefix "$STAGE" --strip >/dev/null
cmake --install "$BUILD_DIR" --prefix "$STAGE" --component python --strip >/dev/null
TORCH_BUILT="$(sed -n 's/^TORCH_VERSION = "\([^"+]*\).*/\1/p' "$BUILD_DIR/python/flowline/_build_info.py")"
"$PYTHON" python/make_wheel.py --stage "$STAGE" --out "$OUT_DIR" --version "$(cache CMAKE_PROJECT_VERSION)" \
  --torch "$TORCH_BUILT"
