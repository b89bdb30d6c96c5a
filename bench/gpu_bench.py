"""What the GPU benchmarks (encode_gpu.py, encode_outputs.py, multi_gpu.py) share: their common options,
with the defaults that scripts/gpu-run.sh and .device (scripts/prepare-device.sh) give on the GPU machine."""
import argparse
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def gpu_parser():
    """An argument parser with --build, --model, --corpus and --out; each script adds its own options."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=str(ROOT / "build-gpu"))
    parser.add_argument("--model", default=str(ROOT / "models/all-MiniLM-L6-v2"))
    parser.add_argument("--corpus", default=str(ROOT / ".device/corpus"))
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "out-gpu")))
    return parser
