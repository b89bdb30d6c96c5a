"""Tiny *ForTokenClassification checkpoints and transformers' token-classification pipeline's entities over them
(issue 52 §3), for tests/token_classifier. Called by make_tiny_models.py --only token-classifiers.

Each checkpoint carries one of tests/data/tokenizers' files verbatim (git stores one blob for both), a
tokenizer_config.json with model_max_length 64 (so corpus paragraphs are truncated, and windowed with `stride`),
and the nine labels of bert-base-NER; its weights are random (hidden 32, 2 layers), rounded to float16 and stored
so (half the bytes; flowline and transformers compute in float32 from the same values). The classifier is scaled
and "O" favoured so that entities are varied but sparse, as a trained tagger's are.

<name>.entities.jsonl: one line per text: {"text", "results": {RUN: entities}} where RUN is a strategy (none,
simple, first, average, max), "<strategy>+stride<N>" (stride windows) or "simple+keep_o" (ignore_labels=[]),
and entities are the pipeline's dicts (`word`, `entity_group` or `entity` and `index`, `score` rounded to 6
places, `start`, `end`).
"""
import json
import pathlib
import shutil
import tempfile

import torch
from safetensors.torch import load_file, save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/tiny-models"
LABELS = ["O", "B-MISC", "I-MISC", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
MAX_LENGTH = 64
STRATEGIES = ["none", "simple", "first", "average", "max"]

# name: (model_type, tokenizer folder, special tokens of its tokenizer_config.json)
BERT_SPECIALS = {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                 "mask_token": "[MASK]"}
ROBERTA_SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "cls_token": "<s>",
                    "sep_token": "</s>", "pad_token": "<pad>", "mask_token": "<mask>"}
# The tokenizer folders are under tests/data; tiny-bert's is an uncased WordPiece of 1,599 pieces (many unknown
# tokens) with a WordPiece decoder, wordpiece-cased's has no decoder (words are tokens joined by spaces).
CHECKPOINTS = {
    "bert-token-classifier": ("bert", "tokenizers/wordpiece-cased", BERT_SPECIALS),
    "xlm-roberta-token-classifier": ("xlm-roberta", "tokenizers/unigram-xlmr", ROBERTA_SPECIALS),
    "roberta-token-classifier": ("roberta", "tokenizers/bpe-bytelevel-roberta", ROBERTA_SPECIALS),
    "distilbert-token-classifier": ("distilbert", "tokenizers/wordpiece-cased", BERT_SPECIALS),
    "modernbert-token-classifier": ("modernbert", "tokenizers/bpe-bytelevel-modernbert", BERT_SPECIALS),
    # transformers' MPNet takes id 1 for padding whatever config.json says (positions from 2, id 1 never
    # counted): a tokenizer whose id 1 is its padding token, as MPNet's own is
    "mpnet-token-classifier": ("mpnet", "tokenizers/bpe-bytelevel-roberta", ROBERTA_SPECIALS),
    "deberta-token-classifier": ("deberta-v2", "tiny-bert", BERT_SPECIALS),
    # Qwen2's byte-level BPE, <|endoftext|> appended (no trim_offsets, no decoder); a causal decoder's `score`
    "qwen3-token-classifier": ("qwen3", "tokenizers/bpe-split-qwen",
                               {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}),
}


def make_model(kind, vocab, tokenizer):
    import transformers as t
    labels = dict(id2label=dict(enumerate(LABELS)), label2id={l: i for i, l in enumerate(LABELS)})
    if kind == "bert":
        return t.BertForTokenClassification(t.BertConfig(
            vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id, **labels))
    if kind in ("xlm-roberta", "roberta"):
        config_class = t.XLMRobertaConfig if kind == "xlm-roberta" else t.RobertaConfig
        model_class = t.XLMRobertaForTokenClassification if kind == "xlm-roberta" else t.RobertaForTokenClassification
        return model_class(config_class(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=64, max_position_embeddings=514, type_vocab_size=1,
                                        pad_token_id=tokenizer.pad_token_id, bos_token_id=0, eos_token_id=2, **labels))
    if kind == "distilbert":
        return t.DistilBertForTokenClassification(t.DistilBertConfig(
            vocab_size=vocab, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=512,
            activation="gelu", pad_token_id=tokenizer.pad_token_id, **labels))
    if kind == "mpnet":
        return t.MPNetForTokenClassification(t.MPNetConfig(
            vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=514, pad_token_id=tokenizer.pad_token_id, **labels))
    if kind == "deberta-v2":  # DeBERTa-v3's settings
        return t.DebertaV2ForTokenClassification(t.DebertaV2Config(
            vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=512, relative_attention=True, position_buckets=8, max_relative_positions=-1,
            pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False,
            type_vocab_size=0, layer_norm_eps=1e-7, hidden_act="gelu", pad_token_id=tokenizer.pad_token_id, **labels))
    if kind == "qwen3":  # Qwen3-Embedding's layout (make_tiny_models.qwen3_model) with a `score` head
        return t.Qwen3ForTokenClassification(t.Qwen3Config(
            vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, hidden_act="silu",
            attention_bias=False, use_sliding_window=False, tie_word_embeddings=False,
            bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id, **labels))
    assert kind == "modernbert"
    return t.ModernBertForTokenClassification(t.ModernBertConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
        max_position_embeddings=512, local_attention=16, global_attn_every_n_layers=2,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
        cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id, classifier_bias=True, **labels))


def texts(corpus):
    paragraphs = [" ".join(p.split()) for path in sorted(corpus.glob("*.txt"))
                  for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    long = [p for p in paragraphs if 700 < len(p) < 1000][:1]  # several 64-token windows
    return paragraphs[500:502] + long + [
        "Alice met the Queen of Hearts in London.", "  two  spaces,\ttab and\nnew line  ",
        "Ein Fluß, déjà vu, Ångström in Zürich", "Москва — столица России", "東京は日本の首都です",
        "😀 👩‍👩‍👧‍👦 ❤️ 🇫🇷 party", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "e\u0301 combining\u200bzero",
        "ṫḧïṡ ẅëïṙḋ ẗëẍẗ ☃ ⌘", "", "   ", "x"]


def entities(result):
    out = []
    for e in result:
        e = dict(e)
        e["score"] = round(float(e["score"]), 6)
        if "index" in e:
            e["index"] = int(e["index"])
        out.append(e)
    return out


def make_one(name, kind, tokenizer_dir, specials, inputs, seed):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, pipeline
    torch.manual_seed(seed)
    source = ROOT / "tests/data" / tokenizer_dir / "tokenizer.json"
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copy(source, out / "tokenizer.json")
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": MAX_LENGTH, **specials}, indent=2) + "\n")
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    plain = Tokenizer.from_file(str(source))
    assert [tokenizer(x)["input_ids"] for x in inputs] == [e.ids for e in plain.encode_batch(inputs)]
    model = make_model(kind, plain.get_vocab_size(), tokenizer)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.normal_(0.0, 0.2)
            if n.endswith("LayerNorm.weight") or n.endswith("layer_norm.weight") or n.endswith("norm.weight"):
                p.add_(1.0)  # gains around 1, as trained ones are
        head = model.score if kind == "qwen3" else model.classifier
        head.weight.mul_(8.0)
        head.bias.mul_(8.0)
        head.bias[0] += 3.0  # "O" most often, as in real text
        for p in model.parameters():  # float16 values, stored as float16 below
            p.copy_(p.half().float())
    model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tensors = {k: v.half() for k, v in load_file(str(pathlib.Path(tmp) / "model.safetensors")).items()}
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        shutil.copy(pathlib.Path(tmp) / "config.json", out / "config.json")
    (out / "RANDOM_WEIGHTS").write_text(
        "Random weights of a real shape, made by a script for the tests: what this model computes is meaningless.\n")
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, device="cpu")
    runs = {s: dict(aggregation_strategy=s) for s in STRATEGIES}
    runs.update({f"{s}+stride16": dict(aggregation_strategy=s, stride=16) for s in STRATEGIES if s != "none"})
    runs["simple+keep_o"] = dict(aggregation_strategy="simple", ignore_labels=[])
    found, total, labels = 0, 0, set()
    with open(OUT / f"{name}.entities.jsonl", "w", encoding="utf-8") as f:
        for text in inputs:
            # stride windows only where there are several (elsewhere they equal the plain runs)
            windowed = len(tokenizer(text)["input_ids"]) > MAX_LENGTH
            results = {run: entities(tagger(text, **kwargs)) for run, kwargs in runs.items()
                       if windowed or "stride" not in run}
            found += len(results["none"])
            total += len(results["simple+keep_o"])
            labels.update(e["entity"] for e in results["none"])
            f.write(json.dumps({"text": text, "results": results}, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"{name}: {len(inputs)} texts, {found} tokens tagged (strategy none, labels {sorted(labels)}), "
          f"{total} groups with O kept")
    assert found >= 20 and len(labels) >= 2, "too few entities, or too few labels, to test anything"


def make_token_classifiers(corpus):
    inputs = texts(corpus)
    for seed, (name, (kind, tokenizer_dir, specials)) in enumerate(CHECKPOINTS.items()):
        make_one(name, kind, tokenizer_dir, specials, inputs, 520 + seed)
