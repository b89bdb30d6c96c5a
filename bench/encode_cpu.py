"""CPU encode benchmark: flowline's encode flow (YAML, run by the launcher) against sentence-transformers'
encode() (best of batch 32/128/512), on the same corpus paragraphs, with the same number of threads, one
after the other in one run. Prints a table and the ratio.

  .venv/bin/python bench/encode_cpu.py [--threads 2] [--corpus ../shared/data/corpus] [--repeats 2]
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from corpus import corpus  # noqa: E402


def flowline_run(args, batch_size, request_size, model=None, texts_file=None):
    """flows/encode-bench.yml on the CPU in fp32, one replica: (docs, docs/s). Over the corpus's paragraphs
    with args.model, or over texts_file (one document a line) with `model`."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads), FLOWLINE_REPLICAS="1",
               FLOWLINE_DEVICE="cpu", FLOWLINE_MODEL=str(model or args.model), FLOWLINE_DTYPE="fp32",
               FLOWLINE_BATCH_SIZE=str(batch_size), FLOWLINE_MAX_BATCH_TOKENS="0",
               FLOWLINE_REQUEST_SIZE=str(request_size))
    source = ["--input", str(texts_file)] if texts_file else ["--input", str(args.corpus), "--input-format", "paragraphs"]
    out = subprocess.run([str(args.launcher), "run", str(ROOT / "flows/encode-bench.yml"), *source, "--progress", "never"],
                         env=env, capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) docs in \d+ steps done in .*?\(([\d.]+) docs/s", out.stderr)
    return int(m.group(1)), float(m.group(2))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus"))
    parser.add_argument("--model", default=str(ROOT / "models/all-MiniLM-L6-v2"))
    parser.add_argument("--launcher", default=str(ROOT / "build/src/flowline"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-st", action="store_true", help="only run flowline")
    args = parser.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)  # numpy's BLAS, read when torch loads numpy

    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)
    texts = [t for _, _, t in corpus(args.corpus)]
    rows = []
    model = SentenceTransformer(args.model, device="cpu")
    # Work to do: tokens of every paragraph, and the FLOPs of the dense layers (2 x params per token) plus
    # attention (4 x L x hidden per token per layer), to relate docs/s to the machine's GEMM ceiling.
    cfg = model[0].auto_model.config
    lengths = [len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]]
    h, inter, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    dense = 2 * layers * (4 * h * h + 2 * h * inter)
    flops = sum(n * dense + layers * 4 * n * n * h for n in lengths)
    x, w = torch.randn(4096, h), torch.randn(inter, h)
    torch.nn.functional.linear(x, w)
    start = time.perf_counter()
    for _ in range(20):
        torch.nn.functional.linear(x, w)
    ceiling = 20 * 2 * 4096 * h * inter / (time.perf_counter() - start)
    # The same product through a second BLAS (numpy's OpenBLAS), so the ceiling is not one library's.
    xn, wn = x.numpy(), w.numpy().T.copy()
    xn @ wn
    start = time.perf_counter()
    for _ in range(20):
        xn @ wn
    openblas = 20 * 2 * 4096 * h * inter / (time.perf_counter() - start)
    print(f"  {sum(lengths)} tokens, {flops / 1e12:.2f} TFLOP; GEMM ceiling {ceiling / 1e9:.0f} GFLOP/s (LibTorch's "
          f"MKL; OpenBLAS {openblas / 1e9:.0f}) => at most {len(texts) / (flops / max(ceiling, openblas)):.0f} docs/s",
          flush=True)
    model.encode(texts[:64], batch_size=32)  # warm-up
    for batch in (() if args.skip_st else (32, 128, 512)):
        best = 0.0
        for _ in range(args.repeats):
            start = time.perf_counter()
            emb = model.encode(texts, batch_size=batch)
            best = max(best, len(texts) / (time.perf_counter() - start))
        assert emb.shape == (len(texts), 384)
        rows.append(("sentence-transformers encode()", f"batch {batch}", best))
        print(f"  sentence-transformers batch {batch}: {best:.1f} docs/s", flush=True)
    del model
    for batch, request in ((64, 256), (128, 512)):
        best = 0.0
        for _ in range(args.repeats):
            n, rate = flowline_run(args, batch, request)
            assert n == len(texts), n
            best = max(best, rate)
        rows.append(("flowline flows/encode-bench.yml", f"batch {batch}, request {request}", best))
        print(f"  flowline batch {batch} request {request}: {best:.1f} docs/s", flush=True)

    print(f"\nCPU encode, {len(texts)} corpus paragraphs ({sum(lengths)} tokens), fp32, {args.threads} threads, "
          f"best of {args.repeats}; GEMM ceiling {ceiling / 1e9:.0f} GFLOP/s")
    print(f"{'pipeline':34} {'setting':24} {'docs/s':>9} {'GFLOP/s':>8}")
    for name, setting, rate in rows:
        print(f"{name:34} {setting:24} {rate:9.1f} {rate * flops / len(texts) / 1e9:8.1f}")
    if not args.skip_st:
        st_best = max(r[2] for r in rows if r[0].startswith("sentence"))
        fl_best = max(r[2] for r in rows if r[0].startswith("flowline"))
        print(f"flowline / sentence-transformers (best each): {fl_best / st_best:.2f}x")


if __name__ == "__main__":
    main()
