"""Several GPUs: the encode flow with `devices: all` against one GPU, and queue-fed dispatch against a
static split when one replica is slowed on purpose. Run on a machine with 2 or more GPUs, after
scripts/gpu-run.sh has built flowline:

  python3 bench/multi_gpu.py --build build-gpu --model models/all-MiniLM-L6-v2 --corpus .device/corpus --out $OUT

1. Scaling: flows/encode-multi.yml over the corpus --copies times over (default 100: 600,100 paragraphs),
   fp16, with CUDA_VISIBLE_DEVICES limited to one GPU and then all of them, for each of --settings
   (replicas per GPU, batch, request; best of --runs runs each). Target: >= 1.9x. On two GPUs also one
   process per GPU at once, for comparison. Each run prints where its time went (posting thread, replicas).
2. A slow replica: 2 replicas on 2 GPUs, followed by 2 replicas of Delay (the test plugin, in the build
   tree's bench/encode-multi-slow.yml), replica 1 of which sleeps FLOWLINE_DELAY_MS per batch.
   - each replica's own rate: the flow with only that replica (one on GPU 0, one slowed on GPU 1);
   - queue-fed: both replicas in one flow, fed from its one queue. Target: >= 95% of the sum of the rates;
   - static split: two processes, each given half the input (what a fixed per-GPU split does), at once;
     its rate is the input over the slower half's time.
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from corpus import corpus  # noqa: E402
from gpu_bench import gpu_parser  # noqa: E402


def launch(args, input_path, replicas, gpus, delay_ms=0, delay_replica=-1, batch=256, request=1024, stats=None):
    extra = ["--stats-json", str(stats)] if stats else []
    env = dict(os.environ, FLOWLINE_MODEL=str(args.model), FLOWLINE_DTYPE="fp16", FLOWLINE_BATCH_SIZE=str(batch),
               FLOWLINE_REQUEST_SIZE=str(request), FLOWLINE_REPLICAS=str(replicas), FLOWLINE_DELAY_MS=str(delay_ms),
               FLOWLINE_DELAY_REPLICA=str(delay_replica), CUDA_VISIBLE_DEVICES=gpus)
    # A slowed run uses the bench flow with Delay after the encoder; the encoder itself has no delay knob.
    flow = pathlib.Path(args.build) / "bench/encode-multi-slow.yml" if delay_ms > 0 else ROOT / "flows/encode-multi.yml"
    return subprocess.Popen([str(pathlib.Path(args.build) / "src/flowline"), "run", str(flow),
                             "--input", str(input_path), "--input-format", "paragraphs", "--progress", "never", "--stats"] + extra,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def rate_of(proc):
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(err[-3000:])
    m = re.search(r"(\d+) docs in \d+ steps done in ([\d.]+)s \(([\d.]+) docs/s", err)
    return int(m.group(1)), float(m.group(3)), err


def run(args, input_path, replicas, gpus, **kw):
    stats = pathlib.Path(args.out) / "stats-multi.json"
    docs, rate, err = rate_of(launch(args, input_path, replicas, gpus, stats=stats, **kw))
    print("    " + time_split(json.loads(stats.read_text())), flush=True)
    return docs, rate, err


def time_split(stats):
    """Where the time of a run went: the posting thread's reading and delivering, and the replicas' (summed)
    tokenizing, enqueueing and waiting for their GPU."""
    reps = stats["replicas"]
    total = {k: sum(r["metrics"].get(k, 0) for r in reps)
             for k in ("tokenize_seconds", "enqueue_seconds", "wait_seconds")}
    return (f"{stats['documents']} docs in {stats['seconds']:.3f} s; posting thread: read {stats['source_seconds']:.3f} s, "
            f"deliver {stats['deliver_seconds']:.3f} s; {len(reps)} replicas: tokenize {total['tokenize_seconds']:.3f} s, "
            f"enqueue {total['enqueue_seconds']:.3f} s, wait {total['wait_seconds']:.3f} s")


def main():
    p = gpu_parser()
    p.add_argument("--delay-ms", type=int, default=20)
    p.add_argument("--settings", default="4:1024:1024,6:1024:1024",
                   help="scaling settings, comma-separated REPLICAS_PER_GPU:BATCH:REQUEST")
    p.add_argument("--runs", type=int, default=2, help="runs per scaling setting (best is kept)")
    p.add_argument("--copies", type=int, default=100,
                   help="the scaling input is the corpus this many times over (100: 600,100 paragraphs, seconds of "
                        "steady state; at 20 a two-GPU run lasts about half a second and its ramp-up and drain weigh)")
    p.add_argument("--skip-slow", action="store_true", help="only the scaling part")
    a = p.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    gpus = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True)
    n = len(gpus.stdout.split())
    all_gpus = ",".join(str(i) for i in range(n))
    paragraphs = [t for _, _, t in corpus(a.corpus)]
    scaled = out / f"corpus-x{a.copies}.txt"
    scaled.write_text("\n\n".join(paragraphs * a.copies) + "\n")
    big = out / "corpus-x20.txt"
    big.write_text("\n\n".join(paragraphs * 20) + "\n")
    halves = [out / "half-0.txt", out / "half-1.txt"]
    whole = paragraphs * 20
    halves[0].write_text("\n\n".join(whole[: len(whole) // 2]) + "\n")
    halves[1].write_text("\n\n".join(whole[len(whole) // 2:]) + "\n")

    per_process = out / f"corpus-x{max(50, a.copies // 2)}.txt"
    per_process.write_text("\n\n".join(paragraphs * max(50, a.copies // 2)) + "\n")

    def best_of(runs, *args, **kw):
        results = [run(a, *args, **kw) for _ in range(runs)]
        return max(results, key=lambda r: r[1])

    for per_gpu, batch, request in (tuple(int(x) for x in s.split(":")) for s in a.settings.split(",")):
        print(f"== scaling over {n} GPUs ({len(paragraphs) * a.copies} paragraphs, fp16, batch {batch}, request {request}, "
              f"{per_gpu} replicas per GPU, best of {a.runs})")
        _, one, _ = best_of(a.runs, scaled, per_gpu, "0", batch=batch, request=request)
        _, every, err = best_of(a.runs, scaled, per_gpu * n, all_gpus, batch=batch, request=request)
        print(err[err.find("executor "):][:1500])
        print(f"one GPU: {one:,.0f} docs/s; {n} GPUs (devices: all): {every:,.0f} docs/s; scaling {every / one:.2f}x "
              f"(target >= 1.9x on 2 GPUs)", flush=True)
        if n == 2:
            # For comparison: one process per GPU at the same time (what a user would otherwise script), each
            # on half the scaling input (at least the corpus 50 times over, so that their start-up skew is small
            # against the run); the rate is all documents over the time from the first post() start to the
            # last post() end.
            stats = [out / f"stats-process-{g}.json" for g in range(2)]
            procs = [launch(a, per_process, per_gpu, str(g), batch=batch, request=request, stats=stats[g])
                     for g in range(2)]
            for proc in procs:
                rate_of(proc)
            windows = [(s["post_ended_unix"] - s["seconds"], s["post_ended_unix"], s["documents"])
                       for s in (json.loads(f.read_text()) for f in stats)]
            span = max(w[1] for w in windows) - min(w[0] for w in windows)
            overlap = min(w[1] for w in windows) - max(w[0] for w in windows)
            both = sum(w[2] for w in windows) / span
            print(f"one process per GPU ({windows[0][2]} docs each, at once; their post() windows overlap "
                  f"{overlap / span * 100:.0f}%): {both:,.0f} docs/s = {both / one:.2f}x one GPU", flush=True)

    if a.skip_slow:
        return
    print(f"\n== one replica slowed by {a.delay_ms} ms per batch (2 replicas on GPUs 0 and 1)")
    _, fast, _ = run(a, big, 1, "0")
    _, slow, _ = run(a, big, 1, "1", delay_ms=a.delay_ms, delay_replica=0)
    _, queue_fed, err = run(a, big, 2, "0,1", delay_ms=a.delay_ms, delay_replica=1)
    print(err[err.find("executor "):][:1200])
    start = time.perf_counter()
    procs = [launch(a, halves[0], 1, "0"), launch(a, halves[1], 1, "1", delay_ms=a.delay_ms, delay_replica=0)]
    results = [rate_of(proc) for proc in procs]
    wall = time.perf_counter() - start
    # Each process's own post() time (model load excluded), as for the other figures.
    static = len(whole) / max(d / r for d, r, _ in results)
    print(f"replica rates alone: fast {fast:,.0f} docs/s, slowed {slow:,.0f} docs/s; sum {fast + slow:,.0f} docs/s")
    print(f"queue-fed (one flow, one queue): {queue_fed:,.0f} docs/s = {queue_fed / (fast + slow) * 100:.1f}% of the sum "
          f"(target >= 95%)")
    print(f"static split (two processes, half the input each): {static:,.0f} docs/s = "
          f"{static / (fast + slow) * 100:.1f}% of the sum; twice the slow rate is {2 * slow:,.0f} "
          f"(processes' wall time {wall:.1f} s, model loads included)")


if __name__ == "__main__":
    main()
