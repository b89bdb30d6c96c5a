"""The main job at GPU speed, with the output file written (issue 12), and the runtime before/after a change
(issue 18), side by side in one run on the GPU machine (after scripts/gpu-run.sh has built build-gpu):

  1. outputs: the encoder alone (no --output) against the same flow writing .jsonl, .npy and .safetensors,
     on the corpus x50 (300,050 paragraphs) and on 200,000 short sentences (4-20 words); fp16, the best
     settings of docs/benchmarks.md (8 replicas, batch and request 1024).
  2. shipped: flows/encode.yml as shipped (fp32, its own settings, its JSONL written) against fp32 settings
     chosen by hand doing the same job (the encode-bench flow with --output .jsonl).
  3. before/after (--before BUILD): on each workload, the same encode-bench flow run by another build's launcher (with that
     tree's flow file), alternating, best of --runs.

Each figure is documents / (the launcher's post() window + the time after it until every executor closed and
the output file was complete), read from --stats-json (before/after: the post() window alone, which both
launchers report); model load, warm-up and CUDA graph capture are outside it.

  python3 bench/encode_outputs.py --build build-gpu --model models/all-MiniLM-L6-v2 --corpus .device/corpus \
      --out $OUT [--before build-before --before-root /tmp/before] [--runs 2] [--skip outputs,shipped,before]
"""
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from corpus import corpus  # noqa: E402
from gpu_bench import gpu_parser  # noqa: E402

BEST = dict(dtype="fp16", replicas=8, batch=1024, request=1024)


def short_sentences(paragraphs, count, seed=7):
    """`count` lines of 4-20 words cut from the corpus, the same every run."""
    words = " ".join(paragraphs).split()
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        n = rng.randint(4, 20)
        start = rng.randrange(0, len(words) - n)
        lines.append(" ".join(words[start:start + n]))
    return lines


def run(launcher, flow, input_path, fmt, env_settings, output=None, sets=(), out_dir=None):
    """One fresh `flowline run`; returns (docs/s, documents, post seconds, output finish seconds) or None."""
    stats_path = pathlib.Path(out_dir) / "stats-outputs.json"
    env = dict(os.environ)
    env.update({k: str(v) for k, v in env_settings.items()})
    cmd = [str(launcher), "run", str(flow), "--input", str(input_path), "--input-format", fmt, "--progress", "never",
           "--stats-json", str(stats_path)]
    if output:
        cmd += ["--output", str(output), "--overwrite"]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        print("    failed:", done.stderr[-1500:], flush=True)
        return None
    stats = json.loads(stats_path.read_text())
    finish = stats.get("after_post_seconds", 0.0)
    seconds = stats["seconds"] + finish
    return stats["documents"] / seconds, stats["documents"], stats["seconds"], finish


def best_of(runs, *args, **kwargs):
    best = None
    for _ in range(runs):
        r = run(*args, **kwargs)
        if r and (best is None or r[0] > best[0]):
            best = r
    return best


def env_for(model, dtype, replicas, batch, request, tokens=0):
    return dict(FLOWLINE_DEVICE="cuda", FLOWLINE_MODEL=model, FLOWLINE_DTYPE=dtype, FLOWLINE_REPLICAS=replicas,
                FLOWLINE_BATCH_SIZE=batch, FLOWLINE_MAX_BATCH_TOKENS=tokens, FLOWLINE_REQUEST_SIZE=request)


def report(rows, label, result, reference=None):
    if result is None:
        rows.append((label, None, ""))
        print(f"{label:58} failed", flush=True)
        return
    rate, docs, seconds, finish = result
    share = f"{100 * rate / reference:5.1f}% of the encoder alone" if reference else ""
    rows.append((label, rate, share))
    print(f"{label:58} {rate:10.0f} docs/s  ({docs} docs, post {seconds:.3f} s + output {finish:.3f} s) {share}",
          flush=True)


def outputs(args, rows, workloads):
    launcher = pathlib.Path(args.build) / "src/flowline"
    flow = ROOT / "flows/encode-bench.yml"
    env = env_for(args.model, **BEST)
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
        for name, (path, fmt) in workloads.items():
            alone = best_of(args.runs, launcher, flow, path, fmt, env, out_dir=tmp)
            report(rows, f"{name}: encoder alone (no output)", alone)
            for ext in ("jsonl", "npy", "safetensors"):
                target = pathlib.Path(tmp) / f"out.{ext}"
                result = best_of(args.runs, launcher, flow, path, fmt, env, output=target, out_dir=tmp)
                report(rows, f"{name}: with --output .{ext}", result, alone[0] if alone else None)
                size = sum(p.stat().st_size for p in pathlib.Path(tmp).glob("out.*") if p.is_file())
                print(f"    wrote {size / 2**20:.0f} MiB", flush=True)
                for p in pathlib.Path(tmp).glob("out.*"):
                    p.unlink()


def shipped(args, rows, workloads):
    launcher = pathlib.Path(args.build) / "src/flowline"
    name = "corpus x50"
    path, fmt = workloads[name]
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
        # As shipped: no variables but the output folder, so nothing is written into the tree.
        out_env = {"FLOWLINE_OUT_DIR": tmp}
        result = best_of(args.runs, launcher, ROOT / "flows/encode.yml", path, fmt, out_env, out_dir=tmp)
        report(rows, f"{name}: flows/encode.yml as shipped (fp32, JSONL written)", result)
        bench = ROOT / "flows/encode-bench.yml"
        for replicas, batch, request in ((1, 256, 256), (4, 512, 1024), (8, 1024, 1024), (4, 1024, 1024)):
            r = best_of(args.runs, launcher, bench, path, fmt, env_for(args.model, "fp32", replicas, batch, request),
                        output=pathlib.Path(tmp) / "hand.jsonl", out_dir=tmp)
            report(rows, f"{name}: fp32 by hand, x{replicas} batch {batch} req {request}, JSONL written", r)


def before_after(args, rows, workloads):
    env = env_for(args.model, **BEST)
    sides = {"after": (pathlib.Path(args.build) / "src/flowline", ROOT / "flows/encode-bench.yml"),
             "before": (pathlib.Path(args.before) / "src/flowline", pathlib.Path(args.before_root) / "flows/encode-bench.yml")}
    for name, (path, fmt) in workloads.items():
        best = {}
        with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
            for _ in range(args.runs):
                for side, (launcher, flow) in sides.items():
                    r = run(launcher, flow, path, fmt, env, out_dir=tmp)
                    if r:  # post() window only: the older launcher does not report the time after it
                        r = (r[1] / r[2], r[1], r[2], 0.0)
                        print(f"    {name}, {side}: {r[0]:10.0f} docs/s", flush=True)
                    if r and (side not in best or r[0] > best[side][0]):
                        best[side] = r
        for side in ("before", "after"):
            report(rows, f"{name}: encoder alone, {side} (best of {args.runs})", best.get(side))


def main():
    parser = gpu_parser()
    parser.add_argument("--scratch", default="/tmp", help="where the output files are written")
    parser.add_argument("--before", help="another build folder, for the before/after comparison")
    parser.add_argument("--before-root", help="that build's source tree (its flows/)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--skip", default="", help="comma-separated: outputs, shipped, before")
    args = parser.parse_args()
    args.model = str(pathlib.Path(args.model).resolve())
    skip = set(filter(None, args.skip.split(",")))
    work = pathlib.Path(args.scratch) / "encode-outputs-inputs"
    work.mkdir(parents=True, exist_ok=True)
    paragraphs = [t for _, _, t in corpus(args.corpus)]
    corpus50 = work / "corpus-x50.txt"
    corpus50.write_text("\n\n".join(paragraphs * 50) + "\n")
    sentences = work / "short-200k.txt"
    sentences.write_text("\n".join(short_sentences(paragraphs, 200_000)) + "\n")
    workloads = {"corpus x50": (corpus50, "paragraphs"), "short 200k": (sentences, "lines")}
    rows = []
    started = time.time()
    if "outputs" not in skip:
        outputs(args, rows, workloads)
    if "shipped" not in skip:
        shipped(args, rows, workloads)
    if args.before and "before" not in skip:
        before_after(args, rows, workloads)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "encode_outputs.tsv", "w") as f:
        f.write("what\tdocs_per_s\tnote\n")
        for label, rate, note in rows:
            f.write(f"{label}\t{'' if rate is None else round(rate)}\t{note}\n")
    print(f"encode_outputs: {len(rows)} figures in {time.time() - started:.0f} s; {out / 'encode_outputs.tsv'}")


if __name__ == "__main__":
    main()
