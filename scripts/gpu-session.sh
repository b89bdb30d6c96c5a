#!/usr/bin/env bash
# The one-H100 session: build and test (scripts/gpu-run.sh), then the profile of the scenarios' Alice
# paragraphs at batch 50 and 300, the NVML cross-check and the GPU benchmark. Everything works in
# /tmp/gpu-work; the files worth keeping are copied to $OUT as each step ends (at most 8 come back).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KEEP="${OUT:-$ROOT/out-gpu}"
export OUT=/tmp/gpu-work
mkdir -p "$OUT" "$KEEP"
ALICE=.device/corpus/alice-in-wonderland.txt
export FLOWLINE_MODEL_DIR="$ROOT/models" FLOWLINE_OUT_DIR="$OUT"
{
  bash scripts/gpu-run.sh
  cp "$OUT/ctest.log" "$KEEP/"
  echo "==> flowline profile (fp32, as flows/encode.yml says)"
  build-gpu/src/flowline profile flows/encode.yml --input "$ALICE" --input-format paragraphs --batch-sizes 50,300 \
    --json "$KEEP/profile.json" --plot "$KEEP/profile.png"
  echo "==> flowline profile (fp16, more batch sizes)"
  build-gpu/src/flowline profile flows/encode.yml --input "$ALICE" --input-format paragraphs --batch-sizes 50,100,300,1000 \
    --set encoder.dtype=fp16 --json "$OUT/profile-fp16.json" --plot "$KEEP/profile-fp16.png"
  echo "==> profile against NVML sampled from outside"
  python3 bench/stats_vs_nvml.py --build build-gpu --models models --alice "$ALICE" --out "$OUT"
  echo "==> GPU benchmark"
  python3 bench/encode_gpu.py --build build-gpu --model models/all-MiniLM-L6-v2 --corpus .device/corpus --out "$OUT" --runs "${BENCH_RUNS:-1}"
  cp "$OUT/encode_gpu.csv" "$OUT/encode_gpu.png" "$KEEP/" 2>/dev/null
} 2>&1 | tee "$KEEP/session.txt"
