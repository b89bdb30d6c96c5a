#!/usr/bin/env python3
"""Goldens for the tokenizer's id-to-token look-up and its decoders (tests/models/test_tokenizer_decoders.cpp),
from Python `tokenizers` (0.23: its id_to_token gives a normalized added token's normalized content; run from
.venv-ref, which has it). Committed as tests/data/tokenizers/decode-goldens.json; re-run when a tokenizer file
or this script changes:

  .venv-ref/bin/python scripts/tokenizer_decode_reference.py --corpus /work/shared/data/corpus

For each tokenizer file the tests hold (those of tests/models/test_tokenizers.cpp and the tiny checkpoints'):
- id_to_token for every id from 0 to a few past the largest (absent ones too), as one FNV-1a hash, with a
  sample of ids written out (all added tokens among them) so that a difference is readable;
- the model's continuing_subword_prefix as transformers' pipeline reads it;
- decoder.decode over token lists: whole encodings of texts of scripts/tokenizer_reference.py's set (specials
  included), and spans of 1 to 5 consecutive tokens as the token-classification pipeline groups them; under
  the file's own decoder and others of its family (every decoder type, Sequence-nested ones, edge options),
  each result as a 32-bit FNV-1a hash (the first few written out). Every single token of the vocabulary is
  decoded too (one hash per decoder). A decode that Python cannot do (a Strip past the token: a panic) is
  recorded as null.
"""
import argparse
import importlib.util
import json
import os
import pathlib
import random

os.environ.setdefault("RUST_BACKTRACE", "0")  # the Strip cases that panic on purpose

import tokenizers
from tokenizers import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/tokenizers/decode-goldens.json"
TEXTS = 60
MAX_TOKENS = 64
SPANS = 3
SHOWN = 4

FILES = [("minilm", "models/all-MiniLM-L6-v2/tokenizer.json"), ("tiny-bert", "tests/data/tiny-bert/tokenizer.json"),
         ("tiny-qwen3", "tests/data/tiny-models/qwen3/tokenizer.json"),
         ("tiny-xlm-roberta-unigram", "tests/data/tiny-models/xlm-roberta-unigram/tokenizer.json")] + [
    (kind, f"tests/data/tokenizers/{kind}/tokenizer.json") for kind in (
        "wordpiece-cased", "wordpiece-lower", "wordpiece-whitespace", "wordpiece-added-options", "unigram-xlmr",
        "unigram-byte-fallback", "unigram-prepend-first", "unigram-whitespace-first", "unigram-xlmr-first",
        "bpe-bytelevel-roberta", "bpe-bytelevel-modernbert", "bpe-split-qwen", "bpe-bytefallback-llama")]

SPACE = "\u2581"
LLAMA = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": SPACE}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
# Decoders by the model's family, besides the file's own.
FAMILY = {
    "WordPiece": [
        {"type": "WordPiece", "prefix": "##", "cleanup": True},
        {"type": "WordPiece", "prefix": "##", "cleanup": False},
        {"type": "WordPiece", "prefix": "", "cleanup": True},
        {"type": "CTC", "pad_token": "[PAD]", "word_delimiter_token": "##", "cleanup": True},
        {"type": "CTC", "pad_token": "[PAD]", "word_delimiter_token": "[SEP]", "cleanup": False},
        {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"Regex": "#+"}, "content": "-"},
                                          {"type": "Strip", "content": "-", "start": 1, "stop": 0},
                                          {"type": "BPEDecoder", "suffix": "s"}]},
    ],
    "BPE": [
        BYTE_LEVEL,
        LLAMA,
        {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, BYTE_LEVEL]},
        {"type": "BPEDecoder", "suffix": "\u0120"},
        {"type": "Sequence", "decoders": [BYTE_LEVEL, {"type": "Strip", "content": " ", "start": 2, "stop": 1}]},
        {"type": "Metaspace", "replacement": "\u0120", "prepend_scheme": "first", "split": True},
    ],
    "Unigram": [
        {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True},
        {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "never", "split": True},
        {"type": "Metaspace", "replacement": SPACE, "add_prefix_space": True},
        {"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first"},
                                          {"type": "ByteFallback"}, {"type": "Fuse"}]},
        LLAMA,
        {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"Regex": "\u2581+(?=\\p{L})"}, "content": "_"},
                                          {"type": "Fuse"},
                                          {"type": "Strip", "content": "_", "start": 3, "stop": 2}]},
        {"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": True},
    ],
}


def fnv64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def fnv32(text) -> str:
    return None if text is None else fnv64(text.encode("utf-8"))[8:]


def make_decoder(spec):
    return Tokenizer.from_str(json.dumps(
        {"version": "1.0", "model": {"type": "WordPiece", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]",
                                                      "continuing_subword_prefix": "##",
                                                      "max_input_chars_per_word": 100},
         "decoder": spec})).decoder


def decode(decoder, tokens):
    if decoder is None:
        return " ".join(tokens)
    try:
        return decoder.decode(tokens)
    except BaseException:  # a panic in Rust (pyo3's PanicException derives from BaseException)
        return None


def texts_of(corpus):
    spec = importlib.util.spec_from_file_location("reference", ROOT / "scripts/tokenizer_reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    texts = reference.make_texts(corpus)
    rng = random.Random(41)
    return texts[:23] + rng.sample(texts[23:], TEXTS - 23)


def golden(name, path, texts):
    source = json.loads((ROOT / path).read_text(encoding="utf-8"))
    tok = Tokenizer.from_file(str(ROOT / path))
    tok.no_padding()
    tok.no_truncation()
    vocab = tok.get_vocab(with_added_tokens=True)
    last = max(vocab.values()) + 3
    joined = "\n".join(tok.id_to_token(i) if tok.id_to_token(i) is not None else "\x01" for i in range(last + 1))
    rng = random.Random(name)
    sample = sorted({a["id"] for a in source.get("added_tokens", [])} | set(rng.sample(range(last + 1), 40)) |
                    {0, last})
    model = tok.model
    out = {"name": name, "path": path, "ids": last + 1, "id_to_token_hash": fnv64(joined.encode("utf-8")),
           "sample": [[i, tok.id_to_token(i)] for i in sample],
           "continuing_subword_prefix": getattr(model, "continuing_subword_prefix", None) or ""}
    cases = []
    for text in texts:
        ids = tok.encode(text).ids[:MAX_TOKENS]
        cases.append(ids)
        for _ in range(SPANS):
            if ids:
                start = rng.randrange(len(ids))
                cases.append(ids[start:start + rng.randint(1, 5)])
    out["cases"] = cases
    specs = [source.get("decoder")] + FAMILY[source["model"]["type"]]
    out["decoders"] = []
    for spec in specs:
        decoder = None if spec is None else make_decoder(spec)
        results = [decode(decoder, [tok.id_to_token(i) for i in ids]) for ids in cases]
        singles = ["\x02" if tok.id_to_token(i) is None else decode(decoder, [tok.id_to_token(i)])
                   for i in range(last - 2)]
        out["decoders"].append({
            "decoder": spec, "hashes": [fnv32(r) for r in results], "shown": results[:SHOWN],
            "singles_hash": fnv64("\n".join("\x01" if r is None else r for r in singles).encode("utf-8"))})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=pathlib.Path, required=True)
    args = parser.parse_args()
    texts = texts_of(args.corpus)
    files = [golden(name, path, texts) for name, path in FILES if (ROOT / path).exists()]
    OUT.write_text(json.dumps({"tokenizers": tokenizers.__version__, "files": files}, ensure_ascii=False) + "\n",
                   encoding="utf-8")


if __name__ == "__main__":
    main()
