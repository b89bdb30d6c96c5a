"""CPU encode per architecture: flowline against sentence-transformers (issue 29's CPU target: each
architecture within 10% of sentence-transformers' throughput or faster). Random weights of each real shape
(bench/models_gpu.py's shapes and checkpoints), the tokenizer of --model on both sides, fp32, the same number
of threads, one after the other in one run; each side's best batch size.

  .venv/bin/python bench/models_cpu.py [--threads 2] [--docs 400] [--only minilm-l6,mpnet-base,...]

Needs transformers and sentence-transformers beside LibTorch (scripts/setup-reference.sh's .venv-ref) and a
built launcher (build/src/flowline).
"""
import argparse
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))
from corpus import corpus  # noqa: E402
from encode_cpu import flowline_run  # noqa: E402
from models_gpu import make_checkpoint, shapes  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--docs", type=int, default=400, help="corpus paragraphs, spread over the books")
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus"))
    parser.add_argument("--model", default=str(ROOT / "models/all-MiniLM-L6-v2"), help="whose tokenizer both use")
    parser.add_argument("--launcher", default=str(ROOT / "build/src/flowline"))
    parser.add_argument("--only", default="minilm-l6,mpnet-base,xlm-roberta-base,modernbert-base",
                        help="comma-separated shape names (qwen3-0.6b too, slowly)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)

    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)
    paragraphs = [t.replace("\r", " ").replace("\n", " ") for _, _, t in corpus(args.corpus)]
    texts = paragraphs[::max(1, len(paragraphs) // args.docs)][:args.docs]
    work = pathlib.Path(tempfile.mkdtemp(prefix="models_cpu_"))
    texts_file = work / "texts.txt"
    texts_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
    rows = []
    for name, config in shapes().items():
        if name not in args.only.split(","):
            continue
        folder = work / name
        make_checkpoint(name, config, pathlib.Path(args.model), folder)
        model = SentenceTransformer(str(folder), device="cpu")
        model.encode(texts[:32], batch_size=32)  # warm-up
        st = (0.0, 0)
        for batch in (16, 32, 64):
            for _ in range(args.repeats):
                start = time.perf_counter()
                model.encode(texts, batch_size=batch)
                st = max(st, (len(texts) / (time.perf_counter() - start), batch))
        del model
        flowline = (0.0, 0)
        for batch in (32, 64):
            for _ in range(args.repeats):
                n, rate = flowline_run(args, batch, 256, model=folder, texts_file=texts_file)
                assert n == len(texts), n
                flowline = max(flowline, (rate, batch))
        rows.append((name, st, flowline))
        print(f"{name}: sentence-transformers {st[0]:.1f} docs/s (batch {st[1]}), flowline {flowline[0]:.1f} docs/s "
              f"(batch {flowline[1]}), {flowline[0] / st[0]:.2f}x", flush=True)

    print(f"\nCPU encode, {len(texts)} corpus paragraphs, fp32, {args.threads} threads, best of {args.repeats} per batch")
    print(f"{'shape':18} {'sentence-transformers':>22} {'flowline':>10} {'x':>6}  target >= 0.90")
    for name, st, flowline in rows:
        ratio = flowline[0] / st[0]
        print(f"{name:18} {st[0]:22.1f} {flowline[0]:10.1f} {ratio:6.2f}  {'met' if ratio >= 0.9 else 'NOT met'}")


if __name__ == "__main__":
    main()
