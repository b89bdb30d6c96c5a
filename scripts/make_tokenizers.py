#!/usr/bin/env python3
"""Small tokenizer.json files of the pipeline configurations flowline's tokenizers must run exactly, for
the parity test (tests/models/test_tokenizers.cpp). Trained with Hugging Face `tokenizers` on the corpus,
vocabularies of a few thousand (BPE: two thousand), written to tests/data/tokenizers/<kind>/tokenizer.json
(committed). The XLM-RoBERTa kind is trained by `sentencepiece` (its nmt_nfkc rules become the Precompiled
normalizer) and converted as transformers converts XLM-R's sentencepiece model, so run that one from .venv-ref
(scripts/setup-reference.sh), which has sentencepiece and transformers:

  .venv/bin/python scripts/make_tokenizers.py --corpus /work/shared/data/corpus --kinds wordpiece-cased ...
  .venv-ref/bin/python scripts/make_tokenizers.py --corpus /work/shared/data/corpus --kinds unigram-xlmr
"""
import argparse
import importlib
import json
import pathlib
import tempfile

from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/data/tokenizers"


def corpus_lines(corpus):
    for path in sorted(corpus.glob("*.txt")):
        yield from path.read_text(encoding="utf-8").splitlines()


def wordpiece(corpus, normalizer, pre_tokenizer, post, vocab_size=3000):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=40))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(corpus_lines(corpus), trainers.WordPieceTrainer(vocab_size=vocab_size,
                                                                             special_tokens=specials))
    tok.post_processor = post(tok)
    return tok


def unigram_xlmr(corpus):
    """XLM-RoBERTa's layout: Precompiled (nmt_nfkc) and Replace(" {2,}" -> " "), Metaspace (always, split),
    Unigram with fairseq's ids (<s> <pad> </s> <unk> first, <mask> last, with lstrip), <s> A </s> </s> B </s>."""
    import sentencepiece as spm
    with tempfile.TemporaryDirectory() as tmp:
        text = pathlib.Path(tmp) / "corpus.txt"
        text.write_text("\n".join(corpus_lines(corpus)), encoding="utf-8")
        spm.SentencePieceTrainer.train(input=str(text), model_prefix=f"{tmp}/spm", vocab_size=4000,
                                       model_type="unigram", character_coverage=0.9995,
                                       normalization_rule_name="nmt_nfkc", minloglevel=2)
        convert = importlib.import_module("transformers.convert_slow_tokenizer")

        class Slow:  # what the converter reads of a slow XLMRobertaTokenizer
            vocab_file = f"{tmp}/spm.model"
            handle_byte_fallback = False
            legacy = True
            add_prefix_space = None

            def convert_tokens_to_ids(self, token):
                return {"<s>": 0, "</s>": 2}[token]

        converted = json.loads(convert.XLMRobertaConverter(Slow()).converted().to_str())
    charsmap = next(n for n in converted["normalizer"]["normalizers"] if n["type"] == "Precompiled")
    converted["normalizer"] = {"type": "Sequence", "normalizers": [
        charsmap, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    converted["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                                  "split": True}
    tok = Tokenizer.from_str(json.dumps(converted))
    vocab = tok.get_vocab()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<s>", "<pad>", "</s>", "<unk>")])
    tok.add_special_tokens([AddedToken("<mask>", special=True, normalized=False, lstrip=True)])
    assert vocab["<mask>"] == len(vocab) - 1
    return tok


def unigram_byte_fallback(corpus):
    """Unigram trained by tokenizers with NFKC and Lowercase, Metaspace without prepending or splitting, byte
    fallback (<0x00>..<0xFF> pieces) for what the corpus lacks, no post-processor, an added token with
    lstrip and rstrip."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=False)
    tok.train_from_iterator(corpus_lines(corpus), trainers.UnigramTrainer(
        vocab_size=2000, special_tokens=["<unk>", "[MASK]"], unk_token="<unk>", max_piece_length=12))
    data = json.loads(tok.to_str())
    lowest = min(score for _, score in data["model"]["vocab"])
    data["model"]["vocab"] += [[f"<0x{b:02X}>", lowest - 1.0] for b in range(256)]
    data["model"]["byte_fallback"] = True
    for added in data["added_tokens"]:
        if added["content"] == "[MASK]":
            added["lstrip"] = added["rstrip"] = True
    return Tokenizer.from_str(json.dumps(data))


def unigram_prepend_first(corpus):
    """The Metaspace of T5's and Llama's converted tokenizers (legacy=False): prepend_scheme "first", a ▁ in
    front of the first word of a text only, not after an added token nor where a normalizer dropped the
    text's first character (StripAccents a leading mark; a Regex Replace whose match at the start is longer
    than one character). NFD, StripAccents, Lowercase, NFC, Replace(Regex "\\.{2,}" -> "…"), Replace("’",
    "'"); Unigram; <mask> with lstrip, [mask] matched in normalized text; <s> A </s> </s> B </s>."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([
        normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(), normalizers.NFC(),
        normalizers.Replace(Regex(r"\.{2,}"), "…"), normalizers.Replace("’", "'")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tok.train_from_iterator(corpus_lines(corpus), trainers.UnigramTrainer(
        vocab_size=3000, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>", max_piece_length=12))
    tok.add_special_tokens([AddedToken("<mask>", special=True, normalized=False, lstrip=True)])
    tok.add_tokens([AddedToken("[MASK]", special=False, normalized=True)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    return tok


def xlmr_prepend_first():
    """unigram-xlmr's file (made first) with Metaspace's prepend_scheme "first": Precompiled (nmt_nfkc) before
    it, whose characters replaced by nothing (control characters, U+200B, ...) keep the text's start at
    offset 0 in tokenizers' alignments."""
    data = json.loads((OUT / "unigram-xlmr/tokenizer.json").read_text(encoding="utf-8"))
    data["pre_tokenizer"]["prepend_scheme"] = "first"
    return Tokenizer.from_str(json.dumps(data))


def unigram_whitespace_first(corpus):
    """Metaspace with prepend_scheme "first" and without splitting after WhitespaceSplit: only a first word
    at offset 0 of the text gets the ▁ (none where the text starts with whitespace or with a control
    character that BERT's normalizer drops). BertNormalizer (clean_text, CJK padding, cased), Unigram,
    [CLS] $A [SEP]."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False,
                                                lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)])
    tok.train_from_iterator(corpus_lines(corpus), trainers.UnigramTrainer(
        vocab_size=3000, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[MASK]"], unk_token="[UNK]",
        max_piece_length=12))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


def wordpiece_added_options(corpus):
    """Added tokens with every option: single_word (no match with a word character, Rust regex's \\w, right
    before or after), normalized (matched in the lower-cased text: [MASK], [Mask] and [mask] alike), lstrip
    and rstrip, alone and together; special ones and words of the vocabulary (the, and) and pieces of words
    (ing, ion). BertNormalizer (lower-casing), BertPreTokenizer, BertProcessing."""
    tok = wordpiece(corpus, normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer(),
                    lambda t: processors.BertProcessing(("[SEP]", t.token_to_id("[SEP]")),
                                                        ("[CLS]", t.token_to_id("[CLS]"))))
    tok.add_tokens([AddedToken("the", normalized=True, single_word=True),
                    AddedToken("and", normalized=True, rstrip=True),
                    AddedToken("ing", normalized=False),
                    AddedToken("ion", normalized=False, single_word=True),
                    AddedToken("<s>", normalized=False, single_word=True, lstrip=True),
                    AddedToken("</s>", normalized=True, lstrip=True, rstrip=True)])
    data = json.loads(tok.to_str())
    options = {"[MASK]": dict(normalized=True, lstrip=True),
               "[SEP]": dict(single_word=True, rstrip=True),
               "[CLS]": dict(normalized=True, single_word=True, lstrip=True, rstrip=True)}
    for added in data["added_tokens"]:
        added.update(options.get(added["content"], {}))
    return Tokenizer.from_str(json.dumps(data))


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level_bpe(corpus, normalizer, pre_tokenizer, specials, post, vocab_size=2000, **options):
    tok = Tokenizer(models.BPE(**options))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.train_from_iterator(corpus_lines(corpus), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = post(tok)
    return tok


def sentencepiece_bpe(corpus, vocab_size=2000):
    """Llama/Mistral's sentencepiece-converted layout: Prepend("▁") and Replace(" ", "▁"), no
    pre-tokenizer, BPE with byte_fallback and fuse_unk, <0xNN> tokens in the model's vocabulary. The bytes
    that lead 4-byte UTF-8 (F0 to F4) are left out, so that emoji and CJK extension B fall to the fused
    unknown token instead."""
    specials = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # Trained on words ("▁the"), then run as sentencepiece does: the whole text as one word.
    tok.pre_tokenizer = pre_tokenizers.Split("▁", "merged_with_next")
    tok.train_from_iterator(corpus_lines(corpus), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, limit_alphabet=150))
    tok.pre_tokenizer = None
    data = json.loads(tok.to_str())
    trained = sorted(data["model"]["vocab"].items(), key=lambda item: item[1])
    tokens = specials + [f"<0x{b:02X}>" for b in range(256) if not 0xF0 <= b <= 0xF4]
    tokens += [token for token, _ in trained if token not in specials]
    data["model"]["vocab"] = {token: i for i, token in enumerate(tokens)}
    for added in data["added_tokens"]:
        added["id"] = data["model"]["vocab"][added["content"]]
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return Tokenizer.from_str(json.dumps(data))


def legacy_merges(tok):
    """The tokenizer.json text with the merges written as "a b" strings, as older files (RoBERTa's) have
    them (tokenizers reads both forms but writes pairs)."""
    data = json.loads(tok.to_str())
    data["model"]["merges"] = [f"{a} {b}" for a, b in data["model"]["merges"]]
    text = json.dumps(data, ensure_ascii=False, indent=2)
    Tokenizer.from_str(text)  # still a tokenizer tokenizers reads
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=pathlib.Path, required=True)
    parser.add_argument("--kinds", nargs="*", help="only these kinds (default: all)")
    args = parser.parse_args()
    makers = {
        # Cased: NFKC, Strip, a literal Replace, whitespace splitting then BERT's punctuation splitting;
        # BertProcessing.
        "wordpiece-cased": lambda: wordpiece(
            args.corpus,
            normalizers.Sequence([normalizers.NFKC(), normalizers.Strip(),
                                  normalizers.Replace("’", "'"), normalizers.Replace("--", " — ")]),
            pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.BertPreTokenizer()]),
            lambda t: processors.BertProcessing(("[SEP]", t.token_to_id("[SEP]")), ("[CLS]", t.token_to_id("[CLS]")))),
        # Lowercased by hand: NFD, Lowercase, StripAccents, NFC; RobertaProcessing's pair frame.
        "wordpiece-lower": lambda: wordpiece(
            args.corpus,
            normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents(),
                                  normalizers.NFC()]),
            pre_tokenizers.BertPreTokenizer(),
            lambda t: processors.RobertaProcessing(("[SEP]", t.token_to_id("[SEP]")),
                                                   ("[CLS]", t.token_to_id("[CLS]")))),
        # The Whitespace pre-tokenizer (\\w+|[^\\w\\s]+) after BERT's normalizer without lower-casing;
        # TemplateProcessing.
        "wordpiece-whitespace": lambda: wordpiece(
            args.corpus,
            normalizers.BertNormalizer(lowercase=False, strip_accents=False),
            pre_tokenizers.Whitespace(),
            lambda t: processors.TemplateProcessing(
                single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                special_tokens=[("[CLS]", t.token_to_id("[CLS]")), ("[SEP]", t.token_to_id("[SEP]"))])),
        "unigram-xlmr": lambda: unigram_xlmr(args.corpus),
        "unigram-byte-fallback": lambda: unigram_byte_fallback(args.corpus),
        "unigram-prepend-first": lambda: unigram_prepend_first(args.corpus),
        "unigram-whitespace-first": lambda: unigram_whitespace_first(args.corpus),
        "unigram-xlmr-first": xlmr_prepend_first,
        "wordpiece-added-options": lambda: wordpiece_added_options(args.corpus),
        # RoBERTa's layout: ByteLevel with a prefix space, RobertaProcessing; merges as "a b" strings.
        "bpe-bytelevel-roberta": lambda: legacy_merges(byte_level_bpe(
            args.corpus, None, pre_tokenizers.ByteLevel(add_prefix_space=True),
            ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
            lambda t: processors.RobertaProcessing(("</s>", t.token_to_id("</s>")), ("<s>", t.token_to_id("<s>"))))),
        # ModernBERT's (GPT-NeoX's) layout: ByteLevel without a prefix space, [CLS] $A [SEP].
        "bpe-bytelevel-modernbert": lambda: byte_level_bpe(
            args.corpus, None, pre_tokenizers.ByteLevel(add_prefix_space=False),
            ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"],
            lambda t: processors.TemplateProcessing(
                single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                special_tokens=[("[CLS]", t.token_to_id("[CLS]")), ("[SEP]", t.token_to_id("[SEP]"))])),
        # Qwen2/3's layout: NFC, Split with Qwen2's pattern, ByteLevel without its own regex; the post-processor
        # of Llama-3 (Sequence of ByteLevel and a template appending <|endoftext|>, as Qwen3-Embedding does) and
        # Llama-3's ignore_merges.
        "bpe-split-qwen": lambda: byte_level_bpe(
            args.corpus, normalizers.NFC(),
            pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PATTERN), "isolated", invert=False),
                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
            ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            lambda t: processors.Sequence([
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single="$A <|endoftext|>", pair="$A <|endoftext|> $B:1 <|endoftext|>:1",
                    special_tokens=[("<|endoftext|>", t.token_to_id("<|endoftext|>"))])]),
            ignore_merges=True),
        "bpe-bytefallback-llama": lambda: sentencepiece_bpe(args.corpus),
    }
    for kind in args.kinds or makers:
        tok = makers[kind]()
        (OUT / kind).mkdir(parents=True, exist_ok=True)
        if isinstance(tok, str):
            (OUT / kind / "tokenizer.json").write_text(tok, encoding="utf-8")
            tok = Tokenizer.from_str(tok)
        else:
            tok.save(str(OUT / kind / "tokenizer.json"))
        print(kind, tok.get_vocab_size(), "tokens")


if __name__ == "__main__":
    main()
