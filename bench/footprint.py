"""What a flowline process costs before it does any work (issue 19's targets): wall time and peak resident
memory of `flowline run` on a three-NoOp flow with one document, of `flowline validate` (that flow, and
flows/encode.yml), of bench/torch_floor (c10 + torch_cpu adding two tensors: what LibTorch alone costs,
the floor under every figure here), and optionally of the CPU SentenceEncoder over the corpus
paragraphs; plus which GPU libraries a CPU-only run maps.

Each figure is the best (lowest) of --runs fresh processes. Peak RSS is the kernel's ru_maxrss of the
process (os.wait4). The mapped libraries are read from /proc/PID/maps while the NoOp flow waits on its
input FIFO, by the suite's own helper (tests/launcher/cpu_run_maps.py).

  .venv/bin/python bench/footprint.py [--build build] [--runs 5] [--encoder] [--corpus ../shared/data/corpus]
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests/launcher"))
from cpu_run_maps import run_and_read_maps  # noqa: E402  (the suite's reading of /proc/PID/maps)

# The PyPI wheel's libtorch_cpu.so itself needs these two (its profiler, kineto, is built with CUPTI): every
# process that links LibTorch maps them, whatever it runs.
NEEDED_BY_TORCH_CPU = {"libcudart.so.13", "libcupti.so.13"}

NOOP_FLOW = """executors:
  - {name: a, uses: NoOp}
  - {name: b, uses: NoOp}
  - {name: c, uses: NoOp}
"""


def measure(cmd, env=None):
    """Runs `cmd` to the end; returns (wall seconds, peak RSS MiB, exit code, stderr)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()))
    reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode, err[0].decode(errors="replace")


def best(runs, cmd, env=None):
    results = [measure(cmd, env) for _ in range(runs)]
    failed = [r for r in results if r[2] != 0]
    if failed:
        sys.exit(f"footprint: {' '.join(map(str, cmd))} failed ({failed[0][2]}): {failed[0][3][-800:]}")
    return min(r[0] for r in results), min(r[1] for r in results), results[0][3]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--encoder", action="store_true", help="also the CPU SentenceEncoder over the corpus")
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus"))
    args = parser.parse_args()
    launcher = pathlib.Path(args.build) / "src/flowline"
    with tempfile.TemporaryDirectory() as tmp:
        scratch = pathlib.Path(tmp)
        flow = scratch / "noop.yml"
        flow.write_text(NOOP_FLOW)
        one = scratch / "one.txt"
        one.write_text("one document\n")
        rows = []
        wall, rss, _ = best(args.runs, [str(pathlib.Path(args.build) / "bench/torch_floor")])
        rows.append(("bench/torch_floor: c10 + torch_cpu, adds two tensors (the floor)", wall, rss))
        wall, rss, _ = best(args.runs, [str(launcher), "run", str(flow), "--input", str(one), "--input-format",
                                        "lines", "--progress", "never"])
        rows.append(("flowline run, three NoOp executors, one document", wall, rss))
        wall, rss, _ = best(args.runs, [str(launcher), "validate", str(flow)])
        rows.append(("flowline validate, three NoOp executors", wall, rss))
        wall, rss, _ = best(args.runs, [str(launcher), "validate", str(ROOT / "flows/encode.yml")])
        rows.append(("flowline validate flows/encode.yml (device auto: looks for a GPU)", wall, rss))
        if args.encoder:
            env = dict(os.environ, FLOWLINE_OUT_DIR=str(scratch))
            wall, rss, err = best(1, [str(launcher), "run", str(ROOT / "flows/encode.yml"), "--input", args.corpus,
                                      "--input-format", "paragraphs", "--progress", "never", "--overwrite"], env)
            rate = re.search(r"\(([\d.]+) docs/s", err)
            rows.append((f"flowline run flows/encode.yml on the CPU, corpus paragraphs "
                         f"({rate.group(1) if rate else '?'} docs/s)", wall, rss))
        maps_dir = scratch / "maps"
        maps_dir.mkdir()
        libraries = run_and_read_maps(str(launcher), str(flow), str(maps_dir))["gpu_libraries"]
    print(f"{'what':70} {'wall s':>8} {'peak RSS MiB':>13}   (best of {args.runs})")
    for label, wall, rss in rows:
        print(f"{label:70} {wall:8.3f} {rss:13.1f}")
    own = [name for name in libraries if name not in NEEDED_BY_TORCH_CPU]
    needed = [name for name in libraries if name in NEEDED_BY_TORCH_CPU]
    print(f"GPU libraries mapped by a CPU-only flow: {len(own)}" + (f" ({', '.join(own)})" if own else "") +
          f"; besides, needed by libtorch_cpu.so itself: {', '.join(needed) or 'none'}")


if __name__ == "__main__":
    main()
