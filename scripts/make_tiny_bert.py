"""Makes a tiny, randomly initialised BERT sentence-transformers checkpoint for fast unit tests, and its
golden embeddings for three pooling set-ups, computed by sentence-transformers on the CPU in fp32.

  .venv/bin/python scripts/make_tiny_bert.py

Outputs (committed): tests/data/tiny-bert/ (a complete checkpoint folder: config, safetensors weights,
vocab, tokenizer and sentence-transformers module configs) and tests/data/tiny-bert-goldens/
(texts.jsonl and embeddings.safetensors with tensors mean_normalize, cls, max).
"""
import collections
import json
import pathlib
import shutil
import sys
import tempfile

import torch
from safetensors.torch import save_file
from sentence_transformers import SentenceTransformer, models
from transformers import AutoTokenizer, BertConfig, BertModel, BertTokenizerFast

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from corpus import HARD_CASES, corpus  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent



def mark_random(folder):
    """The RANDOM_WEIGHTS marker (flowline/model_folder.hpp): executors started on this folder warn that what
    it computes is meaningless."""
    (pathlib.Path(folder) / "RANDOM_WEIGHTS").write_text(
        "Random weights of a real shape, made by a script for the tests: what this model computes is meaningless.\n")

def main():
    torch.manual_seed(1234)
    real = AutoTokenizer.from_pretrained(str(ROOT / "models/all-MiniLM-L6-v2"), use_fast=True)
    paragraphs = corpus(ROOT.parent / "shared/data/corpus")
    # Vocabulary: specials, every single character piece of the real vocabulary that is ASCII, and the
    # 1,500 most frequent pieces of the corpus.
    counts = collections.Counter()
    for _, _, text in paragraphs[:1500]:
        counts.update(real.tokenize(text))
    real_vocab = [line.rstrip("\n") for line in open(ROOT / "models/all-MiniLM-L6-v2/vocab.txt", encoding="utf-8")]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    singles = [t for t in real_vocab if (len(t) == 1 and t.isascii()) or (len(t) == 3 and t.startswith("##") and t[2].isascii())]
    for t in singles + [t for t, _ in counts.most_common(1500)]:
        if t not in vocab:
            vocab.append(t)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
        # The real model's tokenizer.json with the tiny vocabulary (BertTokenizerFast(vocab_file=...) builds a
        # tokenizer that maps everything to [UNK] in transformers 5).
        spec = json.load(open(ROOT / "models/all-MiniLM-L6-v2/tokenizer.json", encoding="utf-8"))
        ids = {t: i for i, t in enumerate(vocab)}
        spec["model"]["vocab"] = ids
        spec["truncation"] = None
        spec["padding"] = None
        for added in spec.get("added_tokens", []):
            added["id"] = ids[added["content"]]
        for name, special in spec["post_processor"]["special_tokens"].items():
            special["ids"] = [ids[name]]
        hf_tok = tmp / "tok"
        hf_tok.mkdir()
        json.dump(spec, open(hf_tok / "tokenizer.json", "w", encoding="utf-8"), ensure_ascii=False)
        shutil.copy(tmp / "vocab.txt", hf_tok / "vocab.txt")
        shutil.copy(ROOT / "models/all-MiniLM-L6-v2/tokenizer_config.json", hf_tok / "tokenizer_config.json")
        shutil.copy(ROOT / "models/all-MiniLM-L6-v2/special_tokens_map.json", hf_tok / "special_tokens_map.json")
        tokenizer = AutoTokenizer.from_pretrained(str(hf_tok))
        sample = tokenizer("Alice was beginning to get very tired")["input_ids"]
        assert sample.count(ids["[UNK]"]) == 0 and sample[0] == ids["[CLS]"], sample
        config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=128, type_vocab_size=2)
        bert = BertModel(config, add_pooling_layer=False)
        # Larger than default weights, so the test sees real differences between tokens and positions.
        with torch.no_grad():
            for p in bert.parameters():
                p.normal_(0.0, 0.2)
        bert.save_pretrained(tmp / "hf", safe_serialization=True)
        tokenizer.save_pretrained(tmp / "hf")

        out = ROOT / "tests/data/tiny-bert"
        shutil.rmtree(out, ignore_errors=True)
        transformer = models.Transformer(str(tmp / "hf"), max_seq_length=64)
        st = SentenceTransformer(modules=[transformer, models.Pooling(32, "mean"), models.Normalize()], device="cpu")
        st.save(str(out))
        mark_random(out)
        for extra in ["README.md", "config_sentence_transformers.json"]:
            (out / extra).unlink(missing_ok=True)
        shutil.copy(tmp / "vocab.txt", out / "vocab.txt")

        texts = [t for _, _, t in paragraphs[::120]] + HARD_CASES
        goldens = {}
        with torch.inference_mode():
            goldens["mean_normalize"] = st.encode(texts, batch_size=16, convert_to_tensor=True).float().cpu()
            for mode in ["cls", "max"]:
                t = models.Transformer(str(tmp / "hf"), max_seq_length=64)
                m = SentenceTransformer(modules=[t, models.Pooling(32, mode)], device="cpu")
                goldens[mode] = m.encode(texts, batch_size=16, convert_to_tensor=True).float().cpu()
        gold = ROOT / "tests/data/tiny-bert-goldens"
        gold.mkdir(parents=True, exist_ok=True)
        with open(gold / "texts.jsonl", "w", encoding="utf-8") as f:
            for text in texts:
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        save_file({k: v.contiguous() for k, v in goldens.items()}, str(gold / "embeddings.safetensors"))
        print(f"tiny model in {out} ({len(vocab)} tokens), {len(texts)} golden texts in {gold}")


if __name__ == "__main__":
    main()
