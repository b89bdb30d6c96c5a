#!/usr/bin/env bash
# 2-GPU scaling of an older tree ("before") and this one ("after"), alternating, on the GPU machine.
# Run from the repository root with .device carried; BEFORE is a `git archive` tarball of the older commit
# (issue 19 used 2c08bd6: CMakeLists.txt cmake src include executors bench flows scripts examples
# tests/plugins/testing_executors). Each side runs its own bench/multi_gpu.py; logs go to $OUT.
#   bash bench/multi_gpu_before_after.sh [BEFORE=.device/before.tar.gz] [SETTINGS=4:1024:1024]
set -uo pipefail
BEFORE="${1:-.device/before.tar.gz}"
SETTINGS="${2:-4:1024:1024}"
OUT="${OUT:-/tmp/multi-before-after}"; mkdir -p "$OUT"
T0=$(date +%s)
mkdir -p /tmp/before && tar xzf "$BEFORE" -C /tmp/before
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
(cmake -S /tmp/before -B /tmp/before/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$TP \
  -DTORCH_CUDA_ARCH_LIST=9.0 -DFLOWLINE_UTF8PROC_ROOT=$PWD/.device/utf8proc -DFLOWLINE_STB_ROOT=$PWD/.device/stb \
  -DFLOWLINE_CORPUS_DIR=$PWD/.device/corpus -DFLOWLINE_BUILD_TESTS=OFF -DFLOWLINE_BUILD_EXAMPLES=OFF -Wno-dev \
  && cmake --build /tmp/before/build -j16) >"$OUT/before-build.log" 2>&1 || { tail -30 "$OUT/before-build.log"; exit 1; }
echo "before built at $(( $(date +%s) - T0 )) s"
FLOWLINE_CTEST=0 bash scripts/gpu-run.sh
echo "after built at $(( $(date +%s) - T0 )) s"
M=$PWD/models/all-MiniLM-L6-v2; mkdir -p /tmp/m-after /tmp/m-before
for round in 1 2; do
  for side in after before; do
    # stay inside the device's 10-minute limit per command
    [ $(( $(date +%s) - T0 )) -gt 480 ] && { echo "time up"; break 2; }
    if [ $side = after ]; then S=bench/multi_gpu.py; B=build-gpu; else S=/tmp/before/bench/multi_gpu.py; B=/tmp/before/build; fi
    echo "==> round $round $side ($(( $(date +%s) - T0 )) s)"
    python3 $S --build $B --model $M --corpus $PWD/.device/corpus --out /tmp/m-$side --skip-slow \
      --settings "$SETTINGS" --runs 2 2>&1 | tee -a "$OUT/multi-$side.log"
  done
done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
