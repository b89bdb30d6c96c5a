"""Checks `flowline profile` against NVML readings taken from outside, around the same runs.

For each batch size it runs `flowline profile flows/encode.yml --input ALICE --batch-sizes B` on the GPU
while this script samples NVML's used memory of the GPU every 5 ms from its own process, then prints the
profile's figures next to NVML's: memory in use before start, and the total peak (profile: in use before
start + memory outside the caching allocator + the allocator's peak reserved) against NVML's highest
reading. Target: within 5%.

  python3 bench/stats_vs_nvml.py --build build-gpu --models models --alice .device/corpus/alice-in-wonderland.txt --out $OUT
"""
import argparse
import json
import os
import pathlib
import subprocess
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


class UsedMemorySampler:
    def __init__(self, index=0, period=0.005):
        import pynvml
        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.period = period

    def used(self):
        return self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used

    def __enter__(self):
        self.before = self.used()
        self.peak, self.stop = self.before, False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, self.used())
            time.sleep(self.period)

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build-gpu")
    p.add_argument("--models", default="models")
    p.add_argument("--alice", default=".device/corpus/alice-in-wonderland.txt")
    p.add_argument("--batch-sizes", default="50,300")
    p.add_argument("--out", default=os.environ.get("OUT", "out-gpu"))
    a = p.parse_args()
    out = pathlib.Path(a.out)
    env = dict(os.environ, FLOWLINE_MODEL_DIR=str(pathlib.Path(a.models).resolve()), FLOWLINE_OUT_DIR=str(out))
    mib = 2**20
    print(f"{'batch':>6} {'before: profile':>16} {'NVML':>9} {'peak: profile':>14} {'NVML':>9} {'difference':>11}")
    worst = 0.0
    for b in a.batch_sizes.split(","):
        json_path = out / f"profile-{b}.json"
        with UsedMemorySampler() as s:
            r = subprocess.run([f"{a.build}/src/flowline", "profile", str(ROOT / "flows/encode.yml"), "--input", a.alice,
                                "--input-format", "paragraphs", "--batch-sizes", b, "--json", str(json_path), "--plot", ""],
                               env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-1500:], r.stderr[-1500:])
            continue
        run = json.loads(json_path.read_text())["runs"][0]
        diff = (run["total_peak_mib"] - s.peak / mib) / (s.peak / mib) * 100
        worst = max(worst, abs(diff))
        print(f"{b:>6} {run['gpu_in_use_before_start_mib']:16.1f} {s.before / mib:9.1f} {run['total_peak_mib']:14.1f} "
              f"{s.peak / mib:9.1f} {diff:+10.2f}%", flush=True)
    print(f"worst difference {worst:.2f}% (target: within 5%)")


if __name__ == "__main__":
    main()
