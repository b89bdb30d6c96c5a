#!/usr/bin/env bash
# Builds an older tree for before/after runs in one session on the GPU machine (bench/models_gpu.py
# --before): a `git archive` tarball of the older commit unpacked into DIR and built into DIR/build with
# the flags of scripts/gpu-run.sh, only what `flowline run` of a SentenceEncoder flow needs. Run from the
# repository root with .device carried.
#   git archive --format=tar.gz -o .device/before.tar.gz <commit> CMakeLists.txt cmake src include python \
#       executors bench flows scripts examples tests/plugins tests/CMakeLists.txt      (here)
#   bash bench/build_before.sh .device/before.tar.gz /tmp/before          (there)
set -euo pipefail
TARBALL="${1:?a git archive tarball}"
DIR="${2:?a folder to build in}"
ROOT="$(pwd)"
# A fresh folder each time: unpacked over an older tree, the archive's files (dated at their commit) would be
# older than that tree's objects, and ninja would rebuild nothing.
rm -rf "$DIR" && mkdir -p "$DIR" && tar -xzf "$TARBALL" -C "$DIR"
TORCH_PREFIX="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
export FLOWLINE_DRAGONBOX_ROOT="$ROOT/.device/dragonbox"
# The image decoders from .device/imagelibs, as scripts/gpu-run.sh finds them (their .pc files say /usr).
images="$ROOT/.device/imagelibs/usr"
if [ -d "$images" ]; then
  sed -i "s#^\(prefix\|exec_prefix\|libdir\|includedir\)=/usr#\1=$images#" "$images"/lib/x86_64-linux-gnu/pkgconfig/*.pc
  export PKG_CONFIG_PATH="$images/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
fi
cmake -S "$DIR" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  -DTORCH_CUDA_ARCH_LIST=9.0 -DFLOWLINE_CUDA=ON -DFLOWLINE_UTF8PROC_ROOT="$ROOT/.device/utf8proc" \
  -DFLOWLINE_STB_ROOT="$ROOT/.device/stb" -DFLOWLINE_PROMETHEUS_ROOT="$ROOT/.device/prometheus" \
  -DFLOWLINE_PCRE2_ROOT="$ROOT/.device/pcre2" -DFLOWLINE_BUILD_TESTS=OFF -DFLOWLINE_BUILD_EXAMPLES=OFF -Wno-dev \
  >"$DIR/configure.log" 2>&1 ||
  { tail -30 "$DIR/configure.log"; exit 1; }
# FLOWLINE_BEFORE_TARGETS adds targets (e.g. "flowline_programs http_load" for bench/search_gpu.py --build).
# shellcheck disable=SC2086
cmake --build "$DIR/build" -j"$(nproc)" --target flowline flowline_sentence_encoder_plugin flowline_models_cuda \
  ${FLOWLINE_BEFORE_TARGETS:-} \
  >"$DIR/build.log" 2>&1 || { grep -E -A5 "error|FAILED" "$DIR/build.log" | head -40; exit 1; }
echo "build_before: $DIR/build"
