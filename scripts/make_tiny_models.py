"""Makes tiny, randomly initialised checkpoints of every architecture flowline runs, each of its real
configuration's shape family (small sizes), and the reference outputs the model tests compare against,
computed by transformers and sentence-transformers on the CPU in fp32 from token ids (tokenizers are
tested apart, tests/models/test_tokenizers.cpp).

  .venv-ref/bin/python scripts/make_tiny_models.py        # scripts/setup-reference.sh makes .venv-ref
  .venv-ref/bin/python scripts/make_tiny_models.py --only xlm-roberta-unigram   # that one alone
  .venv-ref/bin/python scripts/make_tiny_models.py --only qwen3 xlm-roberta-unigram   # these

Outputs (committed), in tests/data/tiny-models/:
  <name>/                    a checkpoint folder: config.json, model.safetensors, sentence-transformers
                             modules (Pooling, Dense, Normalize) or a *ForSequenceClassification head
  <name>.goldens.safetensors ids [T] int32, lengths [n] int64 (and type_ids [T] int32 for pairs),
                             then `embeddings` [n, d] (sentence-transformers) or `scores` [n, labels]
                             (transformers' logits, then the CrossEncoder activation); `prompt_length`
                             when the checkpoint leaves its prompt out of the pooling.
  <name>.texts.jsonl and .texts.safetensors (xlm-roberta-unigram, qwen3, distilbert, and the sequence
                             classifiers: see sequence_classifiers()): texts encoded end to end,
                             tokenizer included (qwen3: without a prompt as `embeddings`, with its "query" prompt as
                             `query`).
"""
import argparse
import json
import pathlib
import shutil
import tempfile

import torch
from safetensors.torch import save_file
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Dense, Normalize, Transformer
from sentence_transformers.sentence_transformer.modules import Pooling
from tiny_clip import make_clip_models
from tiny_token_classifiers import make_token_classifiers
from transformers import (BertConfig, BertForSequenceClassification, BertModel, DistilBertConfig, DistilBertModel,
                          ModernBertConfig, ModernBertModel, MPNetConfig, MPNetModel, Qwen3Config, Qwen3Model, XLMRobertaConfig,
                          XLMRobertaForSequenceClassification, XLMRobertaModel)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/tiny-models"
VOCAB = 1600  # covers tests/data/tiny-bert's WordPiece vocabulary, which every checkpoint here carries
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]



def mark_random(folder):
    """The RANDOM_WEIGHTS marker (flowline/model_folder.hpp): executors started on this folder warn that what
    it computes is meaningless."""
    (pathlib.Path(folder) / "RANDOM_WEIGHTS").write_text(
        "Random weights of a real shape, made by a script for the tests: what this model computes is meaningless.\n")

def randomise(model, std=0.2):
    # Larger than default weights, so the tests see real differences between tokens and positions.
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std)


def sequences(generator, count, longest, special_first=None):
    lengths = torch.randint(1, longest + 1, (count,), generator=generator)
    lengths[0], lengths[1] = longest, 1
    seqs = [torch.randint(5, VOCAB, (int(n),), generator=generator) for n in lengths]
    if special_first is not None:
        for s in seqs:
            s[0] = special_first
    return seqs


def padded(seqs, pad):
    longest = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), longest), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), longest), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return ids, mask


def write_goldens(name, seqs, outputs, key, type_ids=None, extra=None):
    tensors = {"ids": torch.cat(seqs).to(torch.int32), "lengths": torch.tensor([len(s) for s in seqs]),
               key: outputs.float().contiguous()}
    if type_ids is not None:
        tensors["type_ids"] = torch.cat(type_ids).to(torch.int32)
    tensors.update(extra or {})
    save_file(tensors, str(OUT / f"{name}.goldens.safetensors"))


def sentence_model(name, hf_model, pooling, dense=0, normalize=False, include_prompt=True, pad=0, longest=48,
                   special_first=None, prompt_length=0, seed=0, prompts=None, after_save=None, texts=None):
    """Saves hf_model with sentence-transformers modules and the embeddings of random id sequences.
    after_save(folder): changes the saved folder; the goldens then come from the folder loaded again.
    texts: also encoded end to end, tokenizer included (<name>.texts.*)."""
    with tempfile.TemporaryDirectory() as tmp:
        hf_model.save_pretrained(tmp, safe_serialization=True)
        for f in TOKENIZER_FILES:
            if (ROOT / "tests/data/tiny-bert" / f).exists():
                shutil.copy(ROOT / "tests/data/tiny-bert" / f, pathlib.Path(tmp) / f)
        transformer = Transformer(tmp, max_seq_length=hf_model.config.max_position_embeddings)
        hidden = hf_model.config.hidden_size
        modules = [transformer, Pooling(hidden, pooling_mode=pooling, include_prompt=include_prompt)]
        width = hidden * (1 if isinstance(pooling, str) else len(pooling))
        for i in range(dense):
            layer = Dense(width, 24 - 8 * i, activation_function=torch.nn.Tanh() if i == 0 else torch.nn.Identity())
            randomise(layer, 0.3)
            modules.append(layer)
            width = 24 - 8 * i
        if normalize:
            modules.append(Normalize())
        st = SentenceTransformer(modules=modules, device="cpu", prompts=prompts)
        out = OUT / name
        shutil.rmtree(out, ignore_errors=True)
        st.save(str(out))
        mark_random(out)
    for extra in ["README.md"]:
        (out / extra).unlink(missing_ok=True)
    for f in TOKENIZER_FILES:  # transformers 5 saves a generic tokenizer config; keep the WordPiece files
        if (ROOT / "tests/data/tiny-bert" / f).exists():
            shutil.copy(ROOT / "tests/data/tiny-bert" / f, out / f)
    if after_save:
        after_save(out)
        st = SentenceTransformer(str(out), device="cpu")
    generator = torch.Generator().manual_seed(seed)
    seqs = sequences(generator, 40, longest, special_first)
    if prompt_length:
        seqs = [s for s in seqs if len(s) > prompt_length]
    ids, mask = padded(seqs, pad)
    features = {"input_ids": ids, "attention_mask": mask}
    if prompt_length:
        features["prompt_length"] = prompt_length
    with torch.inference_mode():
        embeddings = st.forward(features)["sentence_embedding"]
    extra = {"prompt_length": torch.tensor([prompt_length])} if prompt_length else None
    write_goldens(name, seqs, embeddings, "embeddings", extra=extra)
    print(f"{name}: {len(seqs)} sequences, embeddings {tuple(embeddings.shape)}")
    if texts:
        with open(OUT / f"{name}.texts.jsonl", "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
        # From the folder as saved: its max_seq_length is the tokenizer's model_max_length (64), not the one
        # the Transformer module was made with.
        by_text = SentenceTransformer(str(out), device="cpu").encode(texts, convert_to_tensor=True, batch_size=8)
        by_text = by_text.float()
        save_file({"embeddings": by_text.contiguous()}, str(OUT / f"{name}.texts.safetensors"))
        print(f"{name}: {len(texts)} texts end to end, embeddings {tuple(by_text.shape)}")
    if prompts:
        # Texts encoded with each prompt, end to end (the checkpoint carries tests/data/tiny-bert's tokenizer).
        texts = ["Alice was beginning to get very tired", "a whale hunt", "The Lost World", "x"]
        out_texts, tensors = OUT / f"{name}.prompted.jsonl", {}
        with open(out_texts, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}) + "\n")
        for prompt_name in prompts:
            tensors[prompt_name] = st.encode(texts, prompt_name=prompt_name, convert_to_tensor=True).float()
        tensors["none"] = st.encode(texts, convert_to_tensor=True).float()
        save_file(tensors, str(OUT / f"{name}.prompted.safetensors"))


def cross_encoder(name, model, pad, cls, sep, pair_sep, typed):
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    model.eval()  # constructed models train: dropout on
    model.save_pretrained(str(out), safe_serialization=True)
    mark_random(out)
    for f in TOKENIZER_FILES:
        if (ROOT / "tests/data/tiny-bert" / f).exists():
            shutil.copy(ROOT / "tests/data/tiny-bert" / f, out / f)
    generator = torch.Generator().manual_seed(7)
    seqs, types = [], []
    for a, b in zip(sequences(generator, 30, 20), sequences(generator, 30, 40)):
        s = torch.cat([torch.tensor([cls]), a, torch.tensor(pair_sep), b, torch.tensor([sep])])
        t = torch.cat([torch.zeros(len(a) + 1 + len(pair_sep)), torch.ones(len(b) + 1)]).long()
        seqs.append(s)
        types.append(t if typed else torch.zeros_like(t))
    ids, mask = padded(seqs, pad)
    type_ids, _ = padded(types, 0)
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask, token_type_ids=type_ids if typed else None).logits
    scores = torch.sigmoid(logits) if model.config.num_labels == 1 else logits
    write_goldens(name, seqs, scores, "scores", type_ids=types)
    print(f"{name}: {len(seqs)} pairs, scores {tuple(scores.shape)}")
    if not typed:
        return  # tests/data/tiny-bert's tokenizer gives the second text type id 1, which this model has not
    # Text pairs end to end through sentence-transformers' CrossEncoder (tests/data/tiny-bert's tokenizer).
    from sentence_transformers import CrossEncoder
    crossencoder = CrossEncoder(str(out), device="cpu")
    query = "Alice was beginning to get very tired of sitting by her sister"
    documents = ["The rabbit hole went straight on like a tunnel", "a whale hunt", "Alice was tired",
                 "sitting by her sister on the bank", "", "x " * 300]
    with open(OUT / f"{name}.pairs.jsonl", "w", encoding="utf-8") as f:
        for d in documents:
            f.write(json.dumps({"query": query, "document": d}) + "\n")
    scores = torch.tensor(crossencoder.predict([(query, d) for d in documents])).float()
    raw = torch.tensor(crossencoder.predict([(query, d) for d in documents], activation_fn=torch.nn.Identity())).float()
    save_file({"scores": scores.reshape(-1), "raw": raw.reshape(-1)}, str(OUT / f"{name}.pairs.safetensors"))


def text_model(name, tokenizer_dir, texts):
    """An XLM-RoBERTa checkpoint carrying a real sentencepiece tokenizer.json (Unigram, Precompiled, Metaspace)
    and the embeddings sentence-transformers gives `texts` end to end, tokenizer included (<name>.texts.*)."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    torch.manual_seed(29)
    vocab = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")).get_vocab_size()
    model = XLMRobertaModel(XLMRobertaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=64, max_position_embeddings=130,
                                             type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2),
                            add_pooling_layer=False)
    randomise(model)
    out = OUT / name
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        shutil.copy(tokenizer_dir / "tokenizer.json", pathlib.Path(tmp) / "tokenizer.json")
        (pathlib.Path(tmp) / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "XLMRobertaTokenizer", "model_max_length": 128, "bos_token": "<s>", "eos_token": "</s>",
            "cls_token": "<s>", "sep_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}))
        st = SentenceTransformer(modules=[Transformer(tmp, max_seq_length=128), Pooling(32, pooling_mode="mean"),
                                          Normalize()], device="cpu")
        shutil.rmtree(out, ignore_errors=True)
        st.save(str(out))
        mark_random(out)
    (out / "README.md").unlink(missing_ok=True)
    # transformers must tokenize as the file says (flowline's parity test checks that file against tokenizers).
    fast, plain = AutoTokenizer.from_pretrained(str(out)), Tokenizer.from_file(str(out / "tokenizer.json"))
    assert [fast(t)["input_ids"] for t in texts] == [e.ids for e in plain.encode_batch(texts)]
    with open(OUT / f"{name}.texts.jsonl", "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    embeddings = st.encode(texts, convert_to_tensor=True, batch_size=8).float()
    save_file({"embeddings": embeddings.contiguous()}, str(OUT / f"{name}.texts.safetensors"))
    print(f"{name}: {len(texts)} texts end to end, embeddings {tuple(embeddings.shape)}")


def unigram_texts(corpus):
    paragraphs = [" ".join(p.split()) for path in sorted(corpus.glob("*.txt"))
                  for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return paragraphs[100:112] + [  # a few of them past 128 tokens: truncated
        "Alice was beginning to get very tired", "  two  spaces,\ttab and\nnew line  ", "ﬁne ｆｕｌｌ-width ①",
        "Ein Fluß, déjà vu, Ångström", "Москва — столица России", "東京は日本の首都です", "😀 👩‍👩‍👧‍👦 ❤️ 🇫🇷",
        "The <mask> sat on the mat", "<s> inside </s> text", "", "x", "e\u0301 combining", "\u200bzero\u200dwidth"]


def distilbert_models(corpus):
    """msmarco-distilbert-base-tas-b's layout at tiny sizes: a DistilBertModel (6 layers, q_lin/k_lin/v_lin/out_lin,
    sa_layer_norm, ffn.lin1/lin2, output_layer_norm, no token types, 512 learned positions, gelu) under
    sentence-transformers' Transformer + Pooling(cls), no Normalize (its similarity is the dot product), carrying
    tests/data/tiny-bert's WordPiece tokenizer; goldens from token ids and from texts. `distilbert-sinusoidal`:
    sinusoidal_pos_embds true with the table left out of model.safetensors, so it is made when the model loads
    (transformers makes it the same way), and the checkpoint's tensors named with the `distilbert.` prefix, as a
    DistilBertFor* checkpoint names them."""
    from safetensors.torch import load_file
    paragraphs = [" ".join(p.split()) for path in sorted(corpus.glob("*.txt"))
                  for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    texts = paragraphs[300:306] + [p for p in paragraphs if len(p) > 600][:2] + [
        "Alice was beginning to get very tired", "what is a whale hunt?", "  two  spaces,\ttab and\nnew line  ",
        "Ein Fluß, déjà vu", "東京は日本の首都です", "[CLS] inside [SEP] text", "", "x"]
    for name, sinusoidal in [("distilbert", False), ("distilbert-sinusoidal", True)]:
        torch.manual_seed(52)
        model = DistilBertModel(DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=6, n_heads=4, hidden_dim=64,
                                                 max_position_embeddings=512, sinusoidal_pos_embds=sinusoidal,
                                                 activation="gelu", pad_token_id=0))
        randomise(model)
        with torch.no_grad():  # LayerNorm gains around 1, as trained ones are: around 0, six layers collapse
            for n, p in model.named_parameters():  # every embedding to one direction (pairwise cos > 0.99999)
                if n.endswith("layer_norm.weight") or n.endswith("LayerNorm.weight"):
                    p.add_(1.0)

        def strip_positions(folder):
            tensors = load_file(str(folder / "model.safetensors"))
            kept = {f"distilbert.{k}": v for k, v in tensors.items() if k != "embeddings.position_embeddings.weight"}
            assert len(kept) == len(tensors) - 1, sorted(tensors)
            save_file(kept, str(folder / "model.safetensors"), metadata={"format": "pt"})

        sentence_model(name, model, "cls", pad=0, longest=200, special_first=2, texts=texts,
                       after_save=strip_positions if sinusoidal else None)
        if sinusoidal:  # transformers made the table, as flowline does: not the random one saved
            reloaded = SentenceTransformer(str(OUT / name), device="cpu")[0].auto_model.embeddings
            made = reloaded.position_embeddings.weight
            assert (made - model.embeddings.position_embeddings.weight).abs().max() > 0.1
            assert (made[:, 0] - torch.sin(torch.arange(512.0))).abs().max() < 1e-5


def deberta_models(corpus):
    """DeBERTa-v3's layout at tiny sizes (issue 52 §2), each carrying tests/data/tiny-bert's WordPiece tokenizer:
    `deberta`: a DebertaV2Model with v3's settings (relative_attention, pos_att_type "p2c|c2p" written as v3's
    config.json writes it, share_att_key, norm_rel_ebd layer_norm, position_biased_input false, no token types)
    and 8 position buckets, so that sequences past 4 tokens take the logarithmic buckets, under
    sentence-transformers' Transformer + Pooling(mean) + Normalize; goldens from token ids (up to 200 tokens) and
    from texts. `deberta-v2-variants`: the options v3 leaves off (separate pos_key_proj / pos_query_proj, c2p
    alone, no rel_embeddings LayerNorm, learned absolute positions, two token types, no buckets with
    max_relative_positions 24 so that long distances are clamped), goldens from token ids.
    `deberta-sequence-classifier`: DebertaV2ForSequenceClassification with v3's settings and three labels
    (ContextPooler: pooler.dense + gelu on the first token, then classifier), goldens as sequence_classifiers()
    makes them (pipeline("text-classification", top_k=None), texts and pairs)."""
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification, DebertaV2Model, pipeline
    paragraphs = [" ".join(p.split()) for path in sorted(corpus.glob("*.txt"))
                  for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    texts = paragraphs[500:506] + [p for p in paragraphs if len(p) > 600][2:4] + [
        "Alice was beginning to get very tired", "what is a whale hunt?", "  two  spaces,\ttab and\nnew line  ",
        "Ein Fluß, déjà vu", "東京は日本の首都です", "[CLS] inside [SEP] text", "", "x"]
    v3 = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
              max_position_embeddings=512, relative_attention=True, position_buckets=8, max_relative_positions=-1,
              pos_att_type="p2c|c2p", share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False,
              type_vocab_size=0, layer_norm_eps=1e-7, hidden_act="gelu", pad_token_id=0)
    variants = dict(v3, num_hidden_layers=2, position_buckets=-1, max_relative_positions=24, pos_att_type=["c2p"],
                    share_att_key=False, norm_rel_ebd="none", position_biased_input=True, type_vocab_size=2)

    def ones_around_1(model):  # LayerNorm gains around 1, as trained ones are (around 0 they collapse)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("LayerNorm.weight"):
                    p.add_(1.0)

    def v3_spelling(folder):  # transformers 5 saves a list; DeBERTa-v3's own config.json says "p2c|c2p"
        config = json.loads((folder / "config.json").read_text())
        assert config["pos_att_type"] == ["p2c", "c2p"], config["pos_att_type"]
        config["pos_att_type"] = "p2c|c2p"
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    for name, config, extra in [("deberta", v3, {"texts": texts, "after_save": v3_spelling}),
                                ("deberta-v2-variants", variants, {})]:
        torch.manual_seed(61)
        model = DebertaV2Model(DebertaV2Config(**config))
        randomise(model)
        ones_around_1(model)
        model.eval()
        sentence_model(name, model, "mean", normalize=True, pad=0, longest=200, special_first=2, **extra)

    torch.manual_seed(62)
    labels = ["contradiction", "entailment", "neutral"]
    model = DebertaV2ForSequenceClassification(DebertaV2Config(
        **v3, id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)}))
    randomise(model)
    ones_around_1(model)
    with torch.no_grad():
        model.classifier.weight.mul_(4.0)
    model.eval()
    name = "deberta-sequence-classifier"
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(str(out), safe_serialization=True)
    v3_spelling(out)
    mark_random(out)
    for f in TOKENIZER_FILES:
        if (ROOT / "tests/data/tiny-bert" / f).exists():
            shutil.copy(ROOT / "tests/data/tiny-bert" / f, out / f)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["model_max_length"] = 128
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    inputs = [{"text": t} for t in texts] + [
        {"text": "Alice was tired", "text_pair": "sitting by her sister on the bank"},
        {"text": "a whale hunt", "text_pair": paragraphs[510]}, {"text": "", "text_pair": "an empty first text"}]
    classifier = pipeline("text-classification", model=str(out), device="cpu")
    tensors = {}
    for function in ["scores", "none"]:
        kwargs = {} if function == "scores" else {"function_to_apply": function}
        rows = []
        for x in inputs:
            result = classifier(dict(x) if "text_pair" in x else x["text"], top_k=None, truncation=True, **kwargs)
            by_label = {r["label"]: r["score"] for r in result}
            rows.append([by_label[l] for l in labels])
        tensors[function] = torch.tensor(rows, dtype=torch.float32)
    assert tensors["scores"].std(0).min() > 0.01, tensors["scores"]  # the texts score differently
    with open(OUT / f"{name}.texts.jsonl", "w", encoding="utf-8") as f:
        for x in inputs:
            f.write(json.dumps(x, ensure_ascii=False) + "\n")
    save_file(tensors, str(OUT / f"{name}.texts.safetensors"))
    print(f"{name}: {len(inputs)} inputs, {len(labels)} labels")


SEQUENCE_CLASSIFIERS = {  # name: (model class, labels, problem_type); the pipeline picks softmax / sigmoid from these
    "bert-sequence-classifier": ("bert", ["negative", "neutral", "positive"], None),
    "xlm-roberta-multilabel": ("xlm-roberta", ["joy", "anger", "fear", "surprise"], "multi_label_classification"),
}


def sequence_classifiers(corpus):
    """*ForSequenceClassification checkpoints with several labels for the SequenceClassifier: BERT with three
    labels (softmax, pairs with type ids) and XLM-RoBERTa multi-label with four (sigmoid; its tokenizer_config.json
    passes no token_type_ids, as XLM-R's does), both carrying tests/data/tiny-bert's WordPiece tokenizer with
    model_max_length 128. For texts and (text, text_pair) pairs, <name>.texts.jsonl and <name>.texts.safetensors
    hold what transformers' pipeline("text-classification", top_k=None, truncation=True) gives, in label order:
    `scores` (the checkpoint's own function), `softmax`, `sigmoid` and `none` (the logits: function_to_apply), and
    `order` [n, labels] the label indices as the pipeline sorts them (best first)."""
    from transformers import pipeline
    paragraphs = [" ".join(p.split()) for path in sorted(corpus.glob("*.txt"))
                  for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    inputs = [{"text": t} for t in paragraphs[400:404] + [p for p in paragraphs if len(p) > 900][:1] + [
        "Alice was beginning to get very tired", "what a wonderful day!", "  two  spaces,\ttab and\nnew line  ",
        "Ein Fluß, déjà vu", "東京は日本の首都です", "[CLS] inside [SEP] text", "", "x"]]
    inputs += [{"text": "Alice was tired", "text_pair": "sitting by her sister on the bank"},
               {"text": "a whale hunt", "text_pair": paragraphs[410]},
               {"text": "", "text_pair": "an empty first text"}]
    for index, (name, (kind, labels, problem_type)) in enumerate(SEQUENCE_CLASSIFIERS.items()):
        torch.manual_seed(52 + index)
        common = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                      id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)},
                      problem_type=problem_type)
        if kind == "bert":
            model = BertForSequenceClassification(BertConfig(max_position_embeddings=512, **common))
        else:  # pad_token_id 0: tiny-bert's [PAD], so no token of a text counts as padding for the positions
            model = XLMRobertaForSequenceClassification(XLMRobertaConfig(max_position_embeddings=514, type_vocab_size=1,
                                                                         pad_token_id=0, **common))
        randomise(model)
        with torch.no_grad():  # LayerNorm gains around 1, as trained ones are: around 0, every text scores alike
            for n, p in model.named_parameters():
                if n.endswith("LayerNorm.weight"):
                    p.add_(1.0)
            model.classifier.apply(lambda m: m.weight.mul_(4.0) if isinstance(m, torch.nn.Linear) else None)
        model.eval()
        out = OUT / name
        shutil.rmtree(out, ignore_errors=True)
        model.save_pretrained(str(out), safe_serialization=True)
        mark_random(out)
        for f in TOKENIZER_FILES:
            if (ROOT / "tests/data/tiny-bert" / f).exists():
                shutil.copy(ROOT / "tests/data/tiny-bert" / f, out / f)
        config = json.loads((out / "tokenizer_config.json").read_text())
        config["model_max_length"] = 128
        if kind != "bert":
            config["model_input_names"] = ["input_ids", "attention_mask"]
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
        classifier = pipeline("text-classification", model=str(out), device="cpu")
        tensors = {}
        for function in ["scores", "softmax", "sigmoid", "none"]:
            kwargs = {} if function == "scores" else {"function_to_apply": function}
            rows, order = [], []
            for x in inputs:
                result = classifier(dict(x) if "text_pair" in x else x["text"], top_k=None, truncation=True, **kwargs)
                by_label = {r["label"]: r["score"] for r in result}
                rows.append([by_label[l] for l in labels])
                order.append([labels.index(r["label"]) for r in result])
            tensors[function] = torch.tensor(rows, dtype=torch.float32)
            if function == "scores":
                tensors["order"] = torch.tensor(order, dtype=torch.int64)
        with torch.inference_mode():  # the pipeline's logits are the model's, one input at a time
            for i, x in enumerate(inputs):
                encoded = classifier.tokenizer(x["text"], x.get("text_pair"), truncation=True, return_tensors="pt")
                assert (model(**encoded).logits[0] - tensors["none"][i]).abs().max() < 1e-6
        with open(OUT / f"{name}.texts.jsonl", "w", encoding="utf-8") as f:
            for x in inputs:
                f.write(json.dumps(x, ensure_ascii=False) + "\n")
        save_file(tensors, str(OUT / f"{name}.texts.safetensors"))
        print(f"{name}: {len(inputs)} inputs, {len(labels)} labels, {problem_type or 'single-label'}")


QWEN3_QUERY = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"


def qwen3_model(name, tokenizer_dir, texts):
    """Qwen3-Embedding's layout at tiny sizes: a Qwen3Model (RMSNorm, RMSNorm of each query and key head,
    rotary positions with rope_theta 1e6, SwiGLU, grouped-query causal attention, head_dim * heads != hidden as
    in Qwen3-Embedding-0.6B), sentence-transformers' Transformer + Pooling(lasttoken) + Normalize, the
    tokenizer padding on the left and appending <|endoftext|> (tests/data/tokenizers/bpe-split-qwen), the
    "query" prompt of config_sentence_transformers.json. sdpa attention in float32, checked against eager.
    Goldens from token ids (left-padded batches) and end to end from texts, with and without the prompt."""
    from tokenizers import Tokenizer
    torch.manual_seed(3)
    plain = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    eos = plain.token_to_id("<|endoftext|>")
    config = Qwen3Config(vocab_size=plain.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                         rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                         hidden_act="silu", attention_bias=False, use_sliding_window=False, tie_word_embeddings=True,
                         bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    model = Qwen3Model(config)
    randomise(model)
    with torch.no_grad():  # norms around 1, as trained ones are, so that q_norm and k_norm matter
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.add_(1.0)
    out = OUT / name
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        shutil.copy(tokenizer_dir / "tokenizer.json", pathlib.Path(tmp) / "tokenizer.json")
        (pathlib.Path(tmp) / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "Qwen2Tokenizer", "model_max_length": 131072, "padding_side": "left",
            "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "bos_token": None, "unk_token": None,
            "add_prefix_space": False, "clean_up_tokenization_spaces": False, "errors": "replace"}))
        def load(attention):
            return SentenceTransformer(
                modules=[Transformer(tmp, max_seq_length=128,
                                     model_kwargs={"attn_implementation": attention, "dtype": torch.float32}),
                         Pooling(32, pooling_mode="lasttoken"), Normalize()],
                device="cpu", prompts={"query": QWEN3_QUERY, "document": ""})
        st, eager = load("sdpa"), load("eager")
        shutil.rmtree(out, ignore_errors=True)
        st.save(str(out))
        mark_random(out)
    (out / "README.md").unlink(missing_ok=True)
    assert st.tokenizer.padding_side == "left", st.tokenizer.padding_side
    # transformers must tokenize as the files say: tokenizers' parity-tested one, and the one transformers'
    # Qwen2Tokenizer saves (it sets its own decoder and ignore_merges; flowline reads that one).
    saved = Tokenizer.from_file(str(out / "tokenizer.json"))
    for reference in (plain, saved):
        assert [st.tokenizer(t)["input_ids"] for t in texts] == [e.ids for e in reference.encode_batch(texts)]

    # From token ids: sequences ending in <|endoftext|>, left-padded as Qwen3-Embedding's tokenizer pads.
    generator = torch.Generator().manual_seed(5)
    seqs = sequences(generator, 40, 90)
    for s in seqs:
        s[-1] = eos
    longest = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), longest), eos, dtype=torch.long)
    mask = torch.zeros((len(seqs), longest), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, longest - len(s):] = s
        mask[i, longest - len(s):] = 1
    with torch.inference_mode():
        embeddings = st.forward({"input_ids": ids, "attention_mask": mask})["sentence_embedding"]
        by_eager = eager.forward({"input_ids": ids, "attention_mask": mask})["sentence_embedding"]
        one_by_one = torch.cat([st.forward({"input_ids": s.unsqueeze(0), "attention_mask": torch.ones(1, len(s),
                                            dtype=torch.long)})["sentence_embedding"] for s in seqs])
    assert torch.isfinite(embeddings).all()
    assert (embeddings - by_eager).abs().max() < 1e-5, (embeddings - by_eager).abs().max()
    assert (embeddings - one_by_one).abs().max() < 1e-5, (embeddings - one_by_one).abs().max()
    write_goldens(name, seqs, embeddings, "embeddings")
    print(f"{name}: {len(seqs)} sequences, embeddings {tuple(embeddings.shape)}")

    # Texts end to end, in one batch (left padding, some truncated at max_seq_length 128), with and without
    # the query prompt.
    with open(OUT / f"{name}.texts.jsonl", "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    plain_texts = st.encode(texts, convert_to_tensor=True, batch_size=len(texts)).float()
    query = st.encode(texts, prompt_name="query", convert_to_tensor=True, batch_size=len(texts)).float()
    assert (plain_texts - eager.encode(texts, convert_to_tensor=True, batch_size=len(texts))).abs().max() < 1e-5
    save_file({"embeddings": plain_texts.contiguous(), "query": query.contiguous()},
              str(OUT / f"{name}.texts.safetensors"))
    print(f"{name}: {len(texts)} texts end to end, embeddings {tuple(plain_texts.shape)}, with the query prompt too")


def qwen3_texts(corpus):
    paragraphs = [" ".join(p.split()) for path in sorted(corpus.glob("*.txt"))
                  for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    long = [p for p in paragraphs if len(p) > 800][:3]  # past 128 tokens: truncated, <|endoftext|> kept last
    return paragraphs[200:206] + long + [
        "What is the capital of China?", "Explain gravity", "Alice was beginning to get very tired",
        "  two  spaces,\ttab and\nnew line  ", "Москва — столица России", "東京は日本の首都です", "😀 👩‍👩‍👧‍👦 ❤️",
        "<|im_start|>user\nhello<|im_end|>", "<|endoftext|> inside text", "", "x"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=["xlm-roberta-unigram", "qwen3", "distilbert", "sequence-classifiers",
                                                    "token-classifiers", "deberta", "clip"],
                        help="make only these checkpoints")
    parser.add_argument("--corpus", type=pathlib.Path, default=ROOT.parent / "shared/data/corpus")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    separate = {
        "xlm-roberta-unigram": lambda: text_model("xlm-roberta-unigram", ROOT / "tests/data/tokenizers/unigram-xlmr",
                                                  unigram_texts(args.corpus)),
        "qwen3": lambda: qwen3_model("qwen3", ROOT / "tests/data/tokenizers/bpe-split-qwen", qwen3_texts(args.corpus)),
        "distilbert": lambda: distilbert_models(args.corpus),  # and distilbert-sinusoidal
        "sequence-classifiers": lambda: sequence_classifiers(args.corpus),  # SEQUENCE_CLASSIFIERS
        "deberta": lambda: deberta_models(args.corpus),  # deberta, deberta-v2-variants, deberta-sequence-classifier
        # tiny_token_classifiers.CHECKPOINTS, with the token-classification pipeline's entities
        "token-classifiers": lambda: make_token_classifiers(args.corpus),
        "clip": lambda: make_clip_models(args.corpus),  # tiny_clip.py: clip, siglip
    }
    if args.only:
        for name in args.only:
            separate[name]()
        return
    torch.manual_seed(1234)

    bert = BertModel(BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=128), add_pooling_layer=False)
    randomise(bert)
    # Every pooling mode at once (concatenated in sentence-transformers' order), then two Dense layers.
    sentence_model("bert-all-poolings-dense", bert, ["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean",
                                                     "lasttoken"], dense=2, normalize=True)
    sentence_model("bert-prompt-excluded", bert, "mean", include_prompt=False, prompt_length=3, seed=3,
                   prompts={"query": "query: ", "passage": "passage: "})

    xlmr = XLMRobertaModel(XLMRobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=64,
                                            max_position_embeddings=130, type_vocab_size=1, pad_token_id=1),
                           add_pooling_layer=False)
    randomise(xlmr)
    sentence_model("xlm-roberta", xlmr, "mean", normalize=True, pad=1, special_first=0)

    mpnet = MPNetModel(MPNetConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=514, pad_token_id=1),
                       add_pooling_layer=False)
    randomise(mpnet)
    # Sequences past 128 tokens reach MPNet's logarithmic buckets' last one.
    sentence_model("mpnet", mpnet, "mean", normalize=True, pad=1, longest=300, special_first=0)

    modernbert = ModernBertModel(ModernBertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=4,
                                                  num_attention_heads=4, intermediate_size=48,
                                                  max_position_embeddings=512, local_attention=16,
                                                  global_attn_every_n_layers=3, pad_token_id=0, bos_token_id=2,
                                                  eos_token_id=3, cls_token_id=2, sep_token_id=3))
    randomise(modernbert)
    # Sequences longer than the local window (16) so sliding-window layers differ from global ones.
    sentence_model("modernbert", modernbert, "cls", pad=0, longest=90, special_first=2)

    bert_cross = BertForSequenceClassification(BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                          num_attention_heads=4, intermediate_size=64,
                                                          max_position_embeddings=512, num_labels=1))
    randomise(bert_cross)
    cross_encoder("bert-cross-encoder", bert_cross, pad=0, cls=2, sep=3, pair_sep=[3], typed=True)

    xlmr_cross = XLMRobertaForSequenceClassification(XLMRobertaConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=514, type_vocab_size=1, pad_token_id=1, num_labels=1))
    randomise(xlmr_cross)
    cross_encoder("xlm-roberta-cross-encoder", xlmr_cross, pad=1, cls=0, sep=2, pair_sep=[2, 2], typed=False)
    for make in separate.values():
        make()


if __name__ == "__main__":
    main()
