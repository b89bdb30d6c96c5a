"""Parity of flowline's SentenceEncoder with sentence-transformers on a REAL checkpoint (issue 49 §5): the corpus's
paragraphs (all 6,001, or --docs of them spread over the five books) encoded by both, the cosine of each pair of
embeddings, the minimum against a bound.

  scripts/get-model.sh all-mpnet-base-v2 /tmp/models/all-mpnet-base-v2
  .venv-ref/bin/python scripts/real_model_parity.py --model /tmp/models/all-mpnet-base-v2 [--docs 500]
  python3 scripts/real_model_parity.py --model DIR --device cuda --dtype fp16      # the GPU machine

flowline: `flowline run flows/encode-bench.yml` (one SentenceEncoder, the model's own max_seq_length) with
`--output E.npy`, at --dtype on --device. sentence-transformers: `SentenceTransformer(DIR, device=...)` in fp32,
`encode(texts, batch_size=32)` — the reference is always fp32, so a GPU run at fp16/bf16 measures flowline's
half-precision error against exact numbers. Bounds: fp32 ≥ 0.99999 (the bound the tiny-checkpoint tests use),
fp16 ≥ 0.999 and bf16 ≥ 0.995 (test_models' GPU bounds). Exit 1 when the minimum is below the bound.
Needs torch, numpy and sentence-transformers in the interpreter (.venv-ref here; the GPU machine has them).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from corpus import corpus  # noqa: E402

BOUNDS = {"fp32": 0.99999, "fp16": 0.999, "bf16": 0.995}


def spread(texts, count):
    """`count` texts taken evenly over the whole list (so every book is in), in their order."""
    if count <= 0 or count >= len(texts):
        return texts
    step = len(texts) / count
    return [texts[int(i * step)] for i in range(count)]


def run_flowline(args, texts, tmp):
    source = tmp / "texts.jsonl"
    with open(source, "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": str(i), "text": text}) + "\n")
    out = tmp / "flowline.npy"
    env = dict(os.environ, FLOWLINE_REPLICAS="1", FLOWLINE_DEVICE=args.device, FLOWLINE_MODEL=str(args.model),
               FLOWLINE_DTYPE=args.dtype, FLOWLINE_BATCH_SIZE="32", FLOWLINE_MAX_BATCH_TOKENS="0")
    command = [str(args.launcher), "run", str(ROOT / "flows/encode-bench.yml"), "--input", str(source), "--output",
               str(out), "--progress", "never"]
    print("$ " + " ".join(command), flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"flowline run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    print(f"flowline: {len(texts)} texts in {time.perf_counter() - start:.1f} s", flush=True)
    import numpy as np
    return np.load(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a sentence-transformers folder with real weights")
    parser.add_argument("--docs", type=int, default=0, help="paragraphs spread over the corpus (0: all)")
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="fp32", choices=sorted(BOUNDS))
    parser.add_argument("--launcher", default=str(ROOT / "build/src/flowline"))
    parser.add_argument("--out", help="a JSON file for the figures")
    args = parser.parse_args()

    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    texts = spread([t for _, _, t in corpus(args.corpus)], args.docs)
    with tempfile.TemporaryDirectory() as tmp:
        ours = run_flowline(args, texts, pathlib.Path(tmp)).astype(np.float64)
    start = time.perf_counter()
    reference = SentenceTransformer(str(args.model), device=args.device)
    theirs = reference.encode(texts, batch_size=32, convert_to_numpy=True).astype(np.float64)
    print(f"sentence-transformers: {len(texts)} texts in {time.perf_counter() - start:.1f} s (torch "
          f"{torch.__version__})", flush=True)
    if ours.shape != theirs.shape:
        raise SystemExit(f"shapes differ: flowline {ours.shape}, sentence-transformers {theirs.shape}")
    cos = (ours * theirs).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
    worst = int(cos.argmin())
    bound = BOUNDS[args.dtype]
    figures = {"model": str(args.model), "texts": len(texts), "device": args.device, "dtype": args.dtype,
               "cos_min": float(cos.min()), "cos_mean": float(cos.mean()), "cos_p001": float(np.quantile(cos, 0.001)),
               "max_abs_diff": float(np.abs(ours - theirs).max()), "worst_text_chars": len(texts[worst]),
               "bound": bound, "holds": bool(cos.min() >= bound)}
    print(json.dumps(figures, indent=1))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if figures["holds"] else 1


if __name__ == "__main__":
    sys.exit(main())
