#!/usr/bin/env bash
# One command for the GPU machine: build flowline against its LibTorch, run the test suite (GPU tests
# included), then what is named in $@ (e.g. benchmarks). Logs go to $OUT when set.
#   carry: .device (scripts/prepare-device.sh makes it)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/out-gpu}"
mkdir -p "$OUT" models
ln -sfn "$ROOT/.device/model/all-MiniLM-L6-v2" models/all-MiniLM-L6-v2
export FLOWLINE_UTF8PROC_ROOT="$ROOT/.device/utf8proc"
export FLOWLINE_PCRE2_ROOT="$ROOT/.device/pcre2"
export FLOWLINE_STB_ROOT="$ROOT/.device/stb"
export FLOWLINE_PROMETHEUS_ROOT="$ROOT/.device/prometheus"
export FLOWLINE_DRAGONBOX_ROOT="$ROOT/.device/dragonbox"
# flowline::images' decoders from .device/imagelibs (Debian's, unpacked): their pkg-config files say /usr.
images="$ROOT/.device/imagelibs/usr"
if [ -d "$images" ]; then
  sed -i "s#^\(prefix\|exec_prefix\|libdir\|includedir\)=/usr#\1=$images#" "$images"/lib/x86_64-linux-gnu/pkgconfig/*.pc
  export PKG_CONFIG_PATH="$images/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$images/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
TORCH_PREFIX="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# gRPC: the machine has none; .device/grpc.tar.xz (scripts/prepare-device.sh --grpc) brings Debian's, and
# the gateway's gRPC front and bench/grpc_load are then built too.
grpc_args=()
if [ -f .device/grpc.tar.xz ]; then
  bundle="$ROOT/build-gpu-grpc"
  if [ ! -f "$bundle/lib/libgrpc++.so.1.51" ]; then mkdir -p "$bundle" && tar -xJf .device/grpc.tar.xz -C "$bundle"; fi
  export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  grpc_args=(-DFLOWLINE_GRPC=ON -DgRPC_DIR="$ROOT/scripts/gpu-grpc" -DFLOWLINE_GRPC_BUNDLE="$bundle"
    -DProtobuf_INCLUDE_DIR="$bundle/include" -DProtobuf_LIBRARY="$bundle/lib/libprotobuf.so.32"
    -DProtobuf_PROTOC_LIBRARY="$bundle/lib/libprotoc.so.32" -DProtobuf_PROTOC_EXECUTABLE="$bundle/bin/protoc")
fi
# PostgreSQL: the machine has none; .device/pginstall.tar.xz (scripts/prepare-device.sh --pg) brings pgserver's
# build (server, pgvector, libpq), so the PgVectorWriter is built and bench/seed3_pg.py can start a server.
if [ -f .device/pginstall.tar.xz ]; then
  pgroot="$ROOT/build-gpu-pg"
  if [ ! -x "$pgroot/pgserver/pginstall/bin/postgres" ]; then mkdir -p "$pgroot" && tar -xJf .device/pginstall.tar.xz -C "$pgroot"; fi
  export LD_LIBRARY_PATH="$pgroot/pgserver/pginstall/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  grpc_args+=(-DPostgreSQL_ROOT="$pgroot/pgserver/pginstall")
fi
# nvJPEG: .device/nvjpeg.tar.xz (scripts/prepare-device.sh --nvjpeg) brings libnvjpeg.so.13; the ClipEncoder finds
# it through FLOWLINE_NVJPEG (without it, the tests' nvJPEG cases skip and images are decoded on the CPU).
if [ -f .device/nvjpeg.tar.xz ]; then
  mkdir -p build-gpu-nvjpeg
  [ -f build-gpu-nvjpeg/libnvjpeg.so.13 ] || tar -xJf .device/nvjpeg.tar.xz -C build-gpu-nvjpeg
  export FLOWLINE_NVJPEG="$ROOT/build-gpu-nvjpeg/libnvjpeg.so.13"
fi
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  -DTORCH_CUDA_ARCH_LIST=9.0 -DFLOWLINE_CUDA=ON -DFLOWLINE_UTF8PROC_ROOT="$FLOWLINE_UTF8PROC_ROOT" -DFLOWLINE_STB_ROOT="$FLOWLINE_STB_ROOT" \
  -DFLOWLINE_PROMETHEUS_ROOT="$FLOWLINE_PROMETHEUS_ROOT" -DFLOWLINE_PCRE2_ROOT="$FLOWLINE_PCRE2_ROOT" \
  -DFLOWLINE_CORPUS_DIR="$ROOT/.device/corpus" "${grpc_args[@]}" -Wno-dev >"$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
# FLOWLINE_GPU_TARGETS="t1 t2" builds only those targets and the GPU part (a short run); the default builds
# everything.
cmake --build build-gpu -j"$(nproc)" ${FLOWLINE_GPU_TARGETS:+--target $FLOWLINE_GPU_TARGETS flowline_models_cuda} >"$OUT/build.log" 2>&1 || { grep -E -A5 "error|FAILED" "$OUT/build.log" | head -60; exit 1; }
echo "built in $(( $(date +%s) - start )) s"
# The CPU fp32 golden test needs the fp32 weights, which do not travel; the GPU test covers fp16/bf16.
# FLOWLINE_CTEST=0 skips the whole suite (the GPU tests below still run).
if [ "${FLOWLINE_CTEST:-1}" != 0 ]; then
  (cd build-gpu && ctest -j8 --timeout 300 -E "on the CPU in fp32" --output-on-failure >"$OUT/ctest.log" 2>&1; tail -n 4 "$OUT/ctest.log")
  grep -E "worst cosine|FAILED|Failed" "$OUT/ctest.log" | head -20
fi
# The model executors' GPU checks, where they were built (FLOWLINE_GPU_TARGETS may leave them out).
if [ -x build-gpu/tests/test_sentence_encoder ]; then
  build-gpu/tests/test_sentence_encoder "[gpu]" -s 2>&1 | grep -E "worst cosine|passed|failed" | head
fi
if [ -x build-gpu/tests/test_torch_module ]; then build-gpu/tests/test_torch_module "[gpu]" 2>&1 | tail -2; fi
if [ -x build-gpu/tests/test_gpu_decode ]; then
  build-gpu/tests/test_gpu_decode "[gpu]" -s 2>&1 | grep -E -A2 "largest difference|lowest cosine|FAILED|passed|failed|skip" | head -20
fi
for cmd in "$@"; do echo "==> $cmd"; eval "$cmd"; done
