"""Writes the reference data flowline's SentenceEncoder tests compare against, using the Python packages
users would otherwise use (the Hugging Face fast tokenizer and sentence-transformers), on the CPU in fp32.

  .venv/bin/python scripts/make_goldens.py [--model models/all-MiniLM-L6-v2] [--corpus ../shared/data/corpus]

Outputs (committed) in tests/data/goldens/:
  tokens.jsonl               token ids for all 6,001 corpus paragraphs and the hard cases
  embedding_texts.jsonl      the texts of the embedding goldens (500 paragraphs + hard cases), in order
  embeddings.safetensors     their sentence-transformers embeddings, float32 [N, 384]
"""
import argparse
import json
import pathlib
import sys

import torch
from safetensors.torch import save_file
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from corpus import HARD_CASES, corpus  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(ROOT / "models/all-MiniLM-L6-v2"))
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus"))
    parser.add_argument("--out", default=str(ROOT / "tests/data/goldens"))
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    model = SentenceTransformer(args.model, device="cpu")
    max_len = model.max_seq_length
    tokenizer = AutoTokenizer.from_pretrained(args.model, use_fast=True)
    paragraphs = corpus(args.corpus)
    assert len(paragraphs) == 6001, len(paragraphs)

    with open(out / "tokens.jsonl", "w", encoding="utf-8") as f:
        f.write(json.dumps({"max_length": max_len}) + "\n")
        for book, index, text in paragraphs:
            ids = tokenizer(text, truncation=True, max_length=max_len)["input_ids"]
            f.write(json.dumps({"book": book, "index": index, "text": text, "ids": ids}, ensure_ascii=False) + "\n")
        for text in HARD_CASES:
            ids = tokenizer(text, truncation=True, max_length=max_len)["input_ids"]
            f.write(json.dumps({"book": "hard", "index": -1, "text": text, "ids": ids}, ensure_ascii=False) + "\n")

    chosen = [paragraphs[i * 12] for i in range(500)]
    texts = [t for _, _, t in chosen] + HARD_CASES
    with torch.inference_mode():
        emb = model.encode(texts, batch_size=32, convert_to_tensor=True).float().cpu().contiguous()
    with open(out / "embedding_texts.jsonl", "w", encoding="utf-8") as f:
        for (book, index, text) in chosen:
            f.write(json.dumps({"book": book, "index": index, "text": text}, ensure_ascii=False) + "\n")
        for text in HARD_CASES:
            f.write(json.dumps({"book": "hard", "index": -1, "text": text}, ensure_ascii=False) + "\n")
    save_file({"embeddings": emb}, str(out / "embeddings.safetensors"))
    print(f"wrote {len(paragraphs) + len(HARD_CASES)} token goldens and {len(texts)} embedding goldens to {out}")


if __name__ == "__main__":
    main()
