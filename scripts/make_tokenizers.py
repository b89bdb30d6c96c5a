#!/usr/bin/env python3
"""Small tokenizer.json files of the pipeline configurations flowline's tokenizers must run exactly, for
the parity test (tests/models/test_tokenizers.cpp). Trained with Hugging Face `tokenizers` on the corpus,
vocabularies of a few thousand, written to tests/data/tokenizers/<kind>/tokenizer.json (committed).
The XLM-RoBERTa kind is trained by `sentencepiece` (its nmt_nfkc rules become the Precompiled normalizer)
and converted as transformers converts XLM-R's sentencepiece model, so run that one from .venv-ref
(scripts/setup-reference.sh), which has sentencepiece and transformers:

  .venv/bin/python scripts/make_tokenizers.py --corpus /work/shared/data/corpus --kinds wordpiece-cased ...
  .venv-ref/bin/python scripts/make_tokenizers.py --corpus /work/shared/data/corpus --kinds unigram-xlmr
"""
import argparse
import importlib
import json
import pathlib
import tempfile

from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

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
    }
    for kind in args.kinds or makers:
        tok = makers[kind]()
        (OUT / kind).mkdir(parents=True, exist_ok=True)
        tok.save(str(OUT / kind / "tokenizer.json"))
        print(kind, tok.get_vocab_size(), "tokens")


if __name__ == "__main__":
    main()
