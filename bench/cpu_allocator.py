#!/usr/bin/env python3
"""The CPU encoder under glibc malloc settings (issue 16's soak finding): throughput and peak RSS of
`flowline run` on the corpus paragraphs, one fresh process per setting, settings alternating round by round.

glibc raises its mmap threshold each time a large block allocated with mmap is freed (up to 32 MiB on 64-bit
machines), so after a while LibTorch's activation tensors of a few MiB come from the heap instead, and the
heap keeps what fragmentation leaves behind: RSS climbs in steps for minutes. A fixed threshold
(GLIBC_TUNABLES=glibc.malloc.mmap_threshold=N) turns that adjustment off. This measures what each choice
costs in docs/s and saves in memory.

  python3 bench/cpu_allocator.py --flowline build/src/flowline --model models/all-MiniLM-L6-v2 \\
      --corpus ../shared/data/corpus [--rounds 2] [--settings default,mmap_threshold=131072,...] [--docs 2000]

Each setting is "default" (glibc's own behaviour, no tunables), "jemalloc" (Debian's libjemalloc2
preloaded, with its defaults; "jemalloc:OPTS" sets MALLOC_CONF=OPTS with '+' between options), or a ':'-separated list of
glibc.malloc tunables without the prefix. Prints docs/s (from --stats) and peak RSS (ru_maxrss) per run
and the best of each setting.
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from corpus import corpus  # noqa: E402

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"  # Debian's libjemalloc2
DEFAULT_SETTINGS = "default,mmap_threshold=131072,mmap_threshold=1048576,mmap_threshold=4194304,arena_max=2"


def run_once(args, flow, input_path, setting):
    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    env.pop("LD_PRELOAD", None)
    env.pop("MALLOC_CONF", None)
    if setting.startswith("jemalloc"):
        env["LD_PRELOAD"] = JEMALLOC
        if ":" in setting:
            env["MALLOC_CONF"] = setting.split(":", 1)[1].replace("+", ",")
    elif setting != "default":
        env["GLIBC_TUNABLES"] = ":".join("glibc.malloc." + t for t in setting.split(":"))
    proc = subprocess.Popen([args.flowline, "run", str(flow), "--input", str(input_path), "--input-format", "lines",
                             "--progress", "never", "--stats"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{setting}: flowline run failed:\n{err[-2000:]}")
    m = re.search(r"(\d+) docs in \d+ steps done in ([\d.]+)s \(([\d.]+) docs/s", err)
    return float(m.group(3)), usage.ru_maxrss / 1024.0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flowline", default=str(ROOT / "build/src/flowline"))
    p.add_argument("--model", default=str(ROOT / "models/all-MiniLM-L6-v2"))
    p.add_argument("--corpus", required=True, help="the folder of the five books")
    p.add_argument("--docs", type=int, default=2000, help="the first N corpus paragraphs (0: all 6,001)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--settings", default=DEFAULT_SETTINGS)
    args = p.parse_args()
    texts = [text for _, _, text in corpus(args.corpus)]
    if args.docs:
        texts = texts[: args.docs]
    settings = args.settings.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        flow = pathlib.Path(tmp) / "enc.yml"
        flow.write_text("executors:\n  - name: encoder\n    uses: SentenceEncoder\n    device: cpu\n"
                        f"    with: {{model: {args.model}, batch_size: {args.batch_size}}}\n")
        input_path = pathlib.Path(tmp) / "input.txt"
        input_path.write_text("".join(" ".join(t.split()) + "\n" for t in texts))
        print(f"{len(texts)} paragraphs, batch {args.batch_size}, {args.rounds} rounds, cpu count {os.cpu_count()}")
        best = {s: (0.0, float("inf")) for s in settings}
        for r in range(args.rounds):
            for s in settings:
                rate, rss = run_once(args, flow, input_path, s)
                best[s] = (max(best[s][0], rate), min(best[s][1], rss))
                print(f"  round {r + 1}  {s:40s} {rate:9.1f} docs/s  peak RSS {rss:8.1f} MiB", flush=True)
        print("best of each:")
        for s in settings:
            print(f"  {s:40s} {best[s][0]:9.1f} docs/s  peak RSS {best[s][1]:8.1f} MiB")


if __name__ == "__main__":
    main()
