"""`import flowline` and flowline.SentenceEncoder.encode() from Python beside `flowline run` (issue 53 §1, §4).

On the same texts in the same run, alternating: `flowline run` of a one-SentenceEncoder flow (its own
--stats-json docs/s: the post, model loading excluded) and SentenceEncoder(...).encode(texts) in this process
(loaded once before; the call timed). Both are the same executor with the same settings (device, request
size 1024, batch size auto: 64 on the CPU, replicas auto), so their embeddings are checked equal bit for bit.
Also `import flowline` in a fresh interpreter: its time (median of 5) and the process's wall time against a
bare `python -c pass`. Texts: the corpus' paragraphs as the launcher reads them (a NoOp flow writes them),
the first --limit of them, --copies times. The launcher links jemalloc; this process has glibc's malloc
unless jemalloc is preloaded: run it both ways (LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2).
On a shared machine wall-clock rates swing with the other load; documents per CPU-second (this process's
CPU clock around encode; the launcher's children CPU time less that of a one-text run) are steadier.

  PYTHONPATH=build/python .venv/bin/python bench/python_encode.py [--limit 2000] [--rounds 2] [--device cpu]
      [--model models/all-MiniLM-L6-v2] [--corpus ../shared/data/corpus] [--launcher build/src/flowline]
      [--dtype fp16] [--copies 1] [--st 64,256,1024 --st-texts 30005]

--st also times sentence-transformers' own encode of the model (in this process, fp16 with .half() when --dtype
fp16, on --device) at each of the given batch sizes over the first --st-texts texts (its rate does not depend on
how many repeats of the corpus it sees), after a warm-up, and prints encode's best against its best (issue 53
§4: >= 25x) and the cosine of its embeddings to flowline's over those texts.
"""
import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent


def import_seconds(runs=5):
    code = "import time; t = time.perf_counter(); import flowline; print(time.perf_counter() - t)"
    inside, wall, bare = [], [], []
    for _ in range(runs):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
        wall.append(time.perf_counter() - t)
        inside.append(float(out.strip().splitlines()[-1]))
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - t)
    return statistics.median(inside), statistics.median(wall), statistics.median(bare)


def corpus_texts(launcher, corpus, work, limit, copies):
    flow = work / "noop.yml"
    flow.write_text(json.dumps({"executors": [{"name": "noop", "uses": "NoOp"}]}))
    out = work / "paragraphs.jsonl"
    subprocess.run([launcher, "run", str(flow), "--input", corpus, "--input-format", "paragraphs", "--output",
                    str(out), "--overwrite", "--progress", "never"], check=True, capture_output=True)
    texts = [json.loads(line)["text"] for line in out.read_text(encoding="utf-8").splitlines()][:limit]
    return texts * copies


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def launcher_run(launcher, flow, inputs, work):
    """(docs/s of the post, CPU seconds of the whole process, the embeddings)."""
    stats, out = work / "stats.json", work / "run.npy"
    cpu = children_cpu()
    subprocess.run([launcher, "run", str(flow), "--input", str(inputs), "--input-format", "jsonl", "--output",
                    str(out), "--overwrite", "--progress", "never", "--stats-json", str(stats)], check=True,
                   capture_output=True)
    cpu = children_cpu() - cpu
    figures = json.loads(stats.read_text())
    return figures["documents"] / figures["seconds"], cpu, np.load(out)


def sentence_transformers_rate(args, texts, ours):
    """sentence-transformers' best docs/s over its batch sizes on `texts`; prints each and the cosines to `ours`."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(args.model, device=args.device)
    if args.dtype == "fp16":
        model.half()
    elif args.dtype == "bf16":
        model.bfloat16()
    model.encode(texts[:2048], batch_size=256)  # warm-up: kernels, allocator
    best = 0.0
    for batch in (int(b) for b in args.st.split(",")):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        theirs = model.encode(texts, batch_size=batch, convert_to_numpy=True)
        rate = len(texts) / (time.perf_counter() - t)
        a = theirs.astype(np.float64)
        b = ours.astype(np.float64)
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        print(f"sentence-transformers encode, batch {batch}: {rate:.1f} docs/s ({len(texts)} texts); "
              f"cosine to flowline's min {cos.min():.6f}")
        best = max(best, rate)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launcher", default=str(ROOT / "build/src/flowline"))
    parser.add_argument("--model", default=str(ROOT / "models/all-MiniLM-L6-v2"))
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus"))
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--st", default="", help="sentence-transformers' batch sizes to time (comma-separated)")
    parser.add_argument("--st-texts", type=int, default=30005)
    args = parser.parse_args()

    median_import, median_wall, median_bare = import_seconds()
    print(f"import flowline: {median_import * 1000:.0f} ms (median of 5); process wall {median_wall * 1000:.0f} ms "
          f"vs python -c pass {median_bare * 1000:.0f} ms")

    import flowline

    # The launcher links jemalloc (src/CMakeLists.txt says why); a Python process has glibc's malloc unless
    # jemalloc is preloaded (LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2).
    allocator = "jemalloc" if "libjemalloc" in open("/proc/self/maps").read() else "glibc malloc"
    print(f"this Python's allocator: {allocator}")

    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        texts = corpus_texts(args.launcher, args.corpus, work, args.limit, args.copies)
        inputs = work / "texts.jsonl"
        inputs.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        encoder_with = {"model": args.model, "batch_size": "auto"}
        if args.dtype:
            encoder_with["dtype"] = args.dtype
        flow = work / "encode.yml"
        flow.write_text(json.dumps({"with": {"request_size": 1024}, "executors": [
            {"name": "encoder", "uses": "SentenceEncoder", "device": args.device, "replicas": "auto",
             "with": encoder_with}]}))
        encoder = flowline.SentenceEncoder(args.model, device=args.device, dtype=args.dtype)
        # The launcher's CPU seconds for starting, loading and warming up: a run of one text.
        one = work / "one.jsonl"
        one.write_text(json.dumps({"text": texts[0]}) + "\n", encoding="utf-8")
        fixed_cpu = min(launcher_run(args.launcher, flow, one, work)[1] for _ in range(2))
        runs, python, runs_cpu, python_cpu = [], [], [], []
        for r in range(args.rounds):
            run_rate, run_cpu, expected = launcher_run(args.launcher, flow, inputs, work)
            t, c = time.perf_counter(), time.process_time()
            got = encoder.encode(texts)
            python_rate = len(texts) / (time.perf_counter() - t)
            python_per_cpu = len(texts) / (time.process_time() - c)
            run_per_cpu = len(texts) / max(run_cpu - fixed_cpu, 1e-9)
            same = np.array_equal(got, expected)
            print(f"round {r + 1}: flowline run {run_rate:.1f} docs/s ({run_per_cpu:.1f} per CPU-s), "
                  f"SentenceEncoder.encode {python_rate:.1f} docs/s ({python_per_cpu:.1f} per CPU-s); "
                  f"embeddings bit-identical: {same}")
            runs.append(run_rate)
            python.append(python_rate)
            runs_cpu.append(run_per_cpu)
            python_cpu.append(python_per_cpu)
        encoder.close()
    best_run, best_python = max(runs), max(python)
    if args.st:
        st_rate = sentence_transformers_rate(args, texts[:args.st_texts], got[:args.st_texts])
        print(f"encode {best_python:.1f} docs/s against sentence-transformers' best {st_rate:.1f}: "
              f"{best_python / st_rate:.1f}x")
    print(f"best of {args.rounds}: flowline run {best_run:.1f} docs/s, encode {best_python:.1f} docs/s, "
          f"ratio {best_python / best_run:.3f} ({len(texts)} texts, device {args.device})")
    med_run, med_python = statistics.median(runs_cpu), statistics.median(python_cpu)
    print(f"per CPU-second (median of {args.rounds}; the launcher's start, load and warm-up taken out): flowline run "
          f"{med_run:.1f}, encode {med_python:.1f}, ratio {med_python / med_run:.3f}")


if __name__ == "__main__":
    main()
