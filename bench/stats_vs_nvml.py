"""Runs the encode flow with --stats-json on the GPU while sampling NVML, and prints flowline's CUDA
allocator figures next to NVML's used memory (process start and CUDA context included in NVML's).

  python3 bench/stats_vs_nvml.py --build build-gpu --model models/all-MiniLM-L6-v2 --corpus .device/corpus --out $OUT
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from encode_gpu import NvmlSampler  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build-gpu")
    p.add_argument("--model", default="models/all-MiniLM-L6-v2")
    p.add_argument("--corpus", default=".device/corpus")
    p.add_argument("--out", default=os.environ.get("OUT", "out-gpu"))
    a = p.parse_args()
    for replicas, batch in ((1, 256), (2, 512)):
        stats_path = pathlib.Path(a.out) / f"stats-{replicas}x{batch}.json"
        env = dict(os.environ, FLOWLINE_DEVICE="cuda", FLOWLINE_MODEL=a.model, FLOWLINE_DTYPE="fp16",
                   FLOWLINE_BATCH_SIZE=str(batch), FLOWLINE_MAX_BATCH_TOKENS="0", FLOWLINE_REQUEST_SIZE="1024",
                   FLOWLINE_REPLICAS=str(replicas))
        with NvmlSampler() as s:
            r = subprocess.run([f"{a.build}/src/flowline", "run", str(ROOT / "flows/encode-bench.yml"), "--input", a.corpus,
                                "--input-format", "paragraphs", "--progress", "never", "--stats", "--stats-json",
                                str(stats_path)], env=env, capture_output=True, text=True)
        print(r.stderr[-1500:])
        stats = json.loads(stats_path.read_text())
        rep = stats["replicas"][0]
        mib = lambda b: b / 2**20  # noqa: E731
        print(f"replicas {replicas} batch {batch}: flowline load {mib(rep['gpu_load_bytes']):.1f} MiB, peak allocated "
              f"{mib(rep['gpu_peak_allocated_bytes']):.1f} MiB, peak reserved {mib(rep['gpu_peak_reserved_bytes']):.1f} MiB; "
              f"NVML peak used above idle {s.peak_mib():.1f} MiB (includes the CUDA context)")


if __name__ == "__main__":
    main()
