"""GPU encode benchmark, one command on the GPU machine (after scripts/gpu-run.sh has built flowline):
side by side on the same GPU, (a) flowline's encode flow from YAML run by the launcher, (b)
sentence-transformers encode() in Python with the same weights, fp32 and fp16, batch 32/128/512, and
(c) the bare LibTorch loop over the same encoder (bench/bare_encode). Workloads: the scenarios' 10,000
copies of one sentence, the 6,001 corpus paragraphs, and the corpus a hundred times over (600,100 paragraphs,
seconds of steady state; at twenty copies a run lasted one second and NVML's utilisation, averaged over
its own sampling period, mixed in the ramp-up and drain).
flowline runs with and without CUDA graphs, and the bare loop with and without them. GPU utilisation is
sampled with NVML every 20 ms (for flowline, only within its post() window, from --stats-json); peak
memory is NVML's used memory above the idle baseline. --quick: fewer settings, no sentence-transformers.

  python3 bench/encode_gpu.py --build build-gpu --model models/all-MiniLM-L6-v2 --corpus .device/corpus --out $OUT

Writes encode_gpu.csv and encode_gpu.png to --out and prints the table.
"""
import csv
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from corpus import corpus  # noqa: E402
from gpu_bench import gpu_parser  # noqa: E402

SEED = "Using a GPU allows you to significantly speed up encoding."
STEADY_COPIES = 100


class NvmlSampler:
    """Samples GPU utilisation and used memory of device 0 in a thread."""

    def __init__(self, index=0):
        import pynvml
        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.baseline = pynvml.nvmlDeviceGetMemoryInfo(self.handle).used

    def __enter__(self):
        self.util, self.mem, self.stop = [], [], False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def run(self):
        while not self.stop:
            self.util.append((time.time(), self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu))
            self.mem.append(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
            time.sleep(0.02)

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join()

    def busy(self, window=None):
        """Mean utilisation: within `window` (start, end) in wall-clock seconds when given (the processing of
        a flowline run), otherwise over the samples less the first and last tenth (start-up, drain)."""
        if window:
            s = [u for t, u in self.util if window[0] <= t <= window[1]] or [0]
        else:
            u = [u for _, u in self.util]
            s = u[len(u) // 10: len(u) - len(u) // 10] or u or [0]
        return sum(s) / len(s)

    def peak_mib(self):
        return (max(self.mem or [self.baseline]) - self.baseline) / 2**20


def run_flowline(args, input_path, fmt, dtype, batch, request, replicas, tokens, sets=()):
    env = dict(os.environ, FLOWLINE_DEVICE="cuda", FLOWLINE_MODEL=str(args.model), FLOWLINE_DTYPE=dtype,
               FLOWLINE_BATCH_SIZE=str(batch), FLOWLINE_MAX_BATCH_TOKENS=str(tokens), FLOWLINE_REQUEST_SIZE=str(request),
               FLOWLINE_REPLICAS=str(replicas))
    stats_path = pathlib.Path(args.out) / "stats-bench.json"
    extra = [a for s in sets for a in ("--set", s)]
    # Best of --runs runs, each a fresh process: docs/s is measured by the launcher over post() (text in,
    # embeddings on the host), after model load, warm-up and CUDA graph capture. GPU busy is NVML's
    # utilisation within the post() window only.
    best = None
    for _ in range(args.runs):
        with NvmlSampler() as s:
            out = subprocess.run([str(pathlib.Path(args.build) / "src/flowline"), "run", str(ROOT / "flows/encode-bench.yml"),
                                  "--input", str(input_path), "--input-format", fmt, "--progress", "never",
                                  "--stats-json", str(stats_path)] + extra, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr[-2000:])
            return None
        m = re.search(r"(\d+) docs in \d+ steps done in .*?\(([\d.]+) docs/s", out.stderr)
        stats = json.loads(stats_path.read_text())
        reps = stats["replicas"]
        p50 = max(r["batch_ms_p50"] for r in reps)
        p99 = max(r["batch_ms_p99"] for r in reps)
        window = (stats["post_ended_unix"] - stats["seconds"], stats["post_ended_unix"])
        split = {k: sum(r["metrics"].get(k, 0) for r in reps)
                 for k in ("tokenize_seconds", "enqueue_seconds", "launch_seconds", "wait_seconds", "graph_passes",
                           "forward_passes")}
        result = (float(m.group(2)), s.busy(window), s.peak_mib(), f"{p50:.2f}", f"{p99:.2f}")
        print(f"    {float(m.group(2)):10.0f} docs/s in {stats['seconds']:.3f} s; replicas' time: tokenize "
              f"{split['tokenize_seconds']:.3f} s, enqueue {split['enqueue_seconds']:.3f} s (launch "
              f"{split['launch_seconds']:.3f} s), wait {split['wait_seconds']:.3f} s; "
              f"{split['graph_passes']:.0f} of {split['forward_passes']:.0f} passes from CUDA graphs", flush=True)
        if best is None or result[0] > best[0]:
            best = result
    return best


def run_bare(args, input_path, fmt, dtype, batch, copies=1, graph_tokens=0):
    with NvmlSampler() as s:
        out = subprocess.run([str(pathlib.Path(args.build) / "bench/bare_encode"), "--model", str(args.model), "--input",
                              str(input_path), "--format", fmt, "--device", "cuda", "--dtype", dtype, "--batch-size",
                              str(batch), "--repeats", "3" if copies <= 20 else "1", "--copies", str(copies),
                              "--cuda-graph-max-tokens", str(graph_tokens)], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr[-2000:])
        return None
    for line in out.stdout.splitlines():
        if "tokenizing" in line or "captured" in line:
            print("   ", line, flush=True)
    m = re.search(r"best (\d+) docs/s, batch p50 ([\d.]+) ms, p99 ([\d.]+) ms", out.stdout)
    return float(m.group(1)), s.busy(), s.peak_mib(), m.group(2), m.group(3)


def run_st(model, texts, batch):
    import torch
    torch.cuda.synchronize()
    with NvmlSampler() as s:
        best, lat = 0.0, []
        for _ in range(2):
            start = time.perf_counter()
            model.encode(texts, batch_size=batch, convert_to_numpy=True)
            best = max(best, len(texts) / (time.perf_counter() - start))
    return best, s.busy(), s.peak_mib(), "", ""


def main():
    parser = gpu_parser()
    parser.add_argument("--skip-st", action="store_true")
    parser.add_argument("--quick", action="store_true", help="fewer settings, no sentence-transformers")
    parser.add_argument("--runs", type=int, default=2, help="flowline runs per setting (best is kept)")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seed_file = out / "seed-10000.txt"
    seed_file.write_text((SEED + "\n") * 10000)
    paragraphs = [t for _, _, t in corpus(args.corpus)]
    # Steady state: the corpus a hundred times over, long enough for NVML's utilisation.
    steady_file = out / f"corpus-x{STEADY_COPIES}.txt"
    steady_file.write_text("\n\n".join(paragraphs * STEADY_COPIES) + "\n")
    workloads = {"seed 10k": (seed_file, "lines", [SEED] * 10000),
                 "corpus 6001": (pathlib.Path(args.corpus), "paragraphs", paragraphs)}
    rows = []

    def add(workload, pipeline, setting, result):
        if result is None:
            return
        rate, busy, peak, p50, p99 = result
        rows.append(dict(workload=workload, pipeline=pipeline, setting=setting, docs_per_s=round(rate, 1),
                         gpu_busy_pct=round(busy, 1), peak_mem_mib=round(peak, 1), batch_p50_ms=p50, batch_p99_ms=p99))
        print(f"{workload:12} {pipeline:22} {setting:34} {rate:10.0f} docs/s  busy {busy:5.1f}%  peak {peak:7.1f} MiB", flush=True)

    no_graphs = ("encoder.cuda_graphs=false",)
    for name, (path, fmt, texts) in workloads.items():
        if not args.quick:
            # The replicas-per-GPU sweep (the plot's right panel).
            for replicas in (1, 2, 4):
                add(name, "flowline replicas", f"fp16 batch 256 req 1024 x{replicas} replicas",
                    run_flowline(args, path, fmt, "fp16", 256, 1024, replicas, 0))
            add(name, "flowline (YAML)", "bf16 batch 1024 req 1024 x4",
                run_flowline(args, path, fmt, "bf16", 1024, 1024, 4, 0))
        else:
            add(name, "flowline replicas", "fp16 batch 256 req 1024 x4 replicas",
                run_flowline(args, path, fmt, "fp16", 256, 1024, 4, 0))
        for replicas, batch, request in ((4, 1024, 1024), (8, 1024, 1024)) + (((8, 512, 512), (8, 256, 256)) if args.quick else ()):
            add(name, "flowline (YAML)", f"fp16 batch {batch} req {request} x{replicas}",
                run_flowline(args, path, fmt, "fp16", batch, request, replicas, 0))
        add(name, "flowline, no CUDA graphs", "fp16 batch 1024 req 1024 x4",
            run_flowline(args, path, fmt, "fp16", 1024, 1024, 4, 0, no_graphs))
        for dtype, batch in (("fp16", 256), ("fp16", 1024)) + ((("fp32", 1024),) if not args.quick else ()):
            add(name, "bare LibTorch loop", f"{dtype} batch {batch}", run_bare(args, path, fmt, dtype, batch))
        for batch in (1024,) if not args.quick else (256, 1024):
            add(name, "bare loop, CUDA graphs", f"fp16 batch {batch} graphs 16384",
                run_bare(args, path, fmt, "fp16", batch, graph_tokens=16384))
    steady = f"corpus x{STEADY_COPIES}"
    for replicas, batch, request in ((4, 1024, 1024), (8, 1024, 1024), (8, 256, 512)):
        add(steady, "flowline (YAML)", f"fp16 batch {batch} req {request} x{replicas} replicas",
            run_flowline(args, steady_file, "paragraphs", "fp16", batch, request, replicas, 0))
    add(steady, "flowline, no CUDA graphs", "fp16 batch 1024 req 1024 x8 replicas",
        run_flowline(args, steady_file, "paragraphs", "fp16", 1024, 1024, 8, 0, no_graphs))
    add(steady, "bare LibTorch loop", "fp16 batch 256",
        run_bare(args, pathlib.Path(args.corpus), "paragraphs", "fp16", 256, copies=STEADY_COPIES))
    add(steady, "bare loop, CUDA graphs", "fp16 batch 256 graphs 16384",
        run_bare(args, pathlib.Path(args.corpus), "paragraphs", "fp16", 256, copies=STEADY_COPIES, graph_tokens=16384))
    if not args.skip_st and not args.quick:
        import torch
        from sentence_transformers import SentenceTransformer
        for dtype in ("fp32", "fp16"):
            model = SentenceTransformer(args.model, device="cuda")
            model = model.half() if dtype == "fp16" else model.float()
            model.encode(["warm up"] * 64)
            for name, (path, fmt, texts) in workloads.items():
                for batch in (32, 128, 512):
                    add(name, "sentence-transformers", f"{dtype} batch {batch}", run_st(model, texts, batch))
            del model
            torch.cuda.empty_cache()

    with open(out / "encode_gpu.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 4, figsize=(26, 6))
        sweep = axes[3]
        for workload in workloads:
            points = sorted((int(re.search(r"x(\d+) replicas", r["setting"]).group(1)), r["docs_per_s"])
                            for r in rows if r["workload"] == workload and r["pipeline"] == "flowline replicas")
            if points:
                sweep.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=workload)
        sweep.set_xticks([1, 2, 4])
        sweep.set_xlabel("replicas on one GPU (fp16, batch 256, request 1024)")
        sweep.set_ylabel("docs/s")
        sweep.set_title("replicas-per-GPU sweep")
        sweep.legend()
        for ax, workload in zip(axes, list(workloads) + [steady]):
            best = {}
            for r in rows:
                if r["workload"] == workload:
                    best[r["pipeline"]] = max(best.get(r["pipeline"], 0), r["docs_per_s"])
            ax.barh(list(best.keys()), list(best.values()), color="tab:blue")
            ax.set_title(f"{workload}: best docs/s per pipeline")
            ax.set_xlabel("docs/s (text to embeddings on the host)")
        fig.tight_layout()
        fig.savefig(out / "encode_gpu.png", dpi=90)
    except Exception as e:  # the table and CSV matter more than the picture
        print("plot failed:", e)
    print(f"\n{'workload':12} {'pipeline':22} {'setting':34} {'docs/s':>10} {'busy%':>6} {'peakMiB':>8} {'p50ms':>6} {'p99ms':>6}")
    for r in rows:
        print(f"{r['workload']:12} {r['pipeline']:22} {r['setting']:34} {r['docs_per_s']:10.0f} {r['gpu_busy_pct']:6.1f} "
              f"{r['peak_mem_mib']:8.1f} {r['batch_p50_ms']:>6} {r['batch_p99_ms']:>6}")


if __name__ == "__main__":
    main()
