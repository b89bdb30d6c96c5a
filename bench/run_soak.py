#!/usr/bin/env python3
"""A soak of `flowline run`: an endless generated input for a fixed time, RSS and open file descriptors
sampled every second (issue 16, item 4).

    python3 bench/run_soak.py --flow FLOW.yml [--seconds 600] [--warmup 60] [--flowline build/src/flowline]
                              [--rate 0] [--json OUT.json]

The input is generated here and piped to `flowline run FLOW --input /dev/stdin --input-format lines`:
line i is "soak document i: " followed by words cycling through a fixed vocabulary (10 to 40 words, so
the encoder sees varied lengths). --rate 0 writes as fast as the flow takes it (the pipe's backpressure
paces it); --rate N writes N lines per second. After --seconds the generator closes the pipe and the run
must end by itself, exit 0, within 120 s, having answered every line written.

Every second: VmRSS and the number of entries in /proc/PID/fd. Growth after warm-up is (last 10 s mean -
the 10 s mean right after --warmup) / that mean; the soak passes when both growths are at most 5%. Prints
a line every 30 s, then the summary; exit 0 when it passes, 1 otherwise.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORDS = ("river stone quiet morning lantern harbor violet engine paper window garden silver thunder "
         "meadow candle orbit whisper marble forest ladder").split()


def proc_figures(pid):
    """(RSS in MiB, open file descriptors) of pid, or None once it is gone."""
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    m = re.search(r"VmRSS:\s+(\d+) kB", status)
    return (int(m.group(1)) / 1024.0 if m else 0.0), fds


def generate(proc, seconds, rate, counter):
    """Writes lines to proc's stdin until `seconds` have passed, then closes it."""
    t0 = time.monotonic()
    end = t0 + seconds
    i = 0
    batch = []
    try:
        while time.monotonic() < end:
            n = 10 + i % 31
            words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(n))
            batch.append(f"soak document {i}: {words}\n")
            i += 1
            if len(batch) >= (max(1, rate // 100) if rate else 256):
                proc.stdin.write("".join(batch))
                batch.clear()
                counter[0] = i
                if rate:
                    time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
        if batch:
            proc.stdin.write("".join(batch))
        counter[0] = i
    except BrokenPipeError:
        counter[1] = "the flow closed its input early"
    finally:
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass


def window_mean(samples, start, end):
    values = [v for t, v in samples if start <= t < end]
    return sum(values) / len(values) if values else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flow", required=True)
    p.add_argument("--flowline", default=str(ROOT / "build/src/flowline"))
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--warmup", type=float, default=60)
    p.add_argument("--rate", type=int, default=0, help="lines per second (0: as fast as the flow takes them)")
    p.add_argument("--json", help="write the samples and the result here")
    args = p.parse_args()

    cmd = [args.flowline, "run", args.flow, "--input", "/dev/stdin", "--input-format", "lines", "--progress",
           "never"]
    print("run_soak: " + " ".join(cmd), flush=True)
    log = tempfile.TemporaryFile(mode="w+")  # not a pipe: nobody reads it until the end
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=log, text=True, bufsize=1 << 16)
    counter = [0, None]
    writer = threading.Thread(target=generate, args=(proc, args.seconds, args.rate, counter), daemon=True)
    start = time.monotonic()
    writer.start()
    rss, fds = [], []
    next_report = 30.0
    while proc.poll() is None:
        figures = proc_figures(proc.pid)
        t = time.monotonic() - start
        if figures:
            rss.append((t, figures[0]))
            fds.append((t, figures[1]))
        if t >= next_report and figures:
            print(f"[{t:7.0f} s] {counter[0]:>11,} lines written   rss {figures[0]:8.1f} MiB   fds {figures[1]}",
                  flush=True)
            next_report += 30.0
        if t > args.seconds + 120:
            proc.kill()
            print("run_soak: FAILED: the run did not end within 120 s of its input closing", file=sys.stderr)
            return 1
        time.sleep(1.0)
    writer.join(timeout=10)
    log.seek(0)
    stderr = log.read()
    m = re.search(r"(\d+) docs in \d+ steps done in .*?\(([\d.]+) docs/s", stderr)
    answered = int(m.group(1)) if m else -1
    w0, w1 = args.warmup, args.warmup + 10
    t_end = rss[-1][0] if rss else 0
    growth = {}
    for name, samples in (("rss_mib", rss), ("fds", fds)):
        first, last = window_mean(samples, w0, w1), window_mean(samples, t_end - 10, t_end + 1)
        growth[name] = {"after_warmup": first, "end": last, "growth_pct": (last - first) / first * 100 if first else 0}
    ok = (proc.returncode == 0 and answered == counter[0] and counter[1] is None
          and all(g["growth_pct"] <= 5.0 for g in growth.values()))
    print(f"run_soak: {counter[0]:,} lines written, {answered:,} answered"
          f"{f' ({float(m.group(2)):,.0f} docs/s)' if m else ''}; exit {proc.returncode}")
    for name, g in growth.items():
        print(f"run_soak: {name}: {g['after_warmup']:.1f} after warm-up, {g['end']:.1f} at the end, "
              f"growth {g['growth_pct']:+.2f}%")
    if counter[1]:
        print(f"run_soak: {counter[1]}")
    if not m:
        print(stderr[-2000:], file=sys.stderr)
    print(f"run_soak: {'passed' if ok else 'FAILED'}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"lines": counter[0], "answered": answered, "exit": proc.returncode,
                                                       "growth": growth, "rss": rss, "fds": fds, "passed": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
