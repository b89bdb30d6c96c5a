#!/usr/bin/env python3
"""Small tokenizer.json files of the pipeline configurations flowline's tokenizers must run exactly, for
the parity test (tests/models/test_tokenizers.cpp). Trained with Hugging Face `tokenizers` on the corpus,
vocabularies of a few thousand, written to tests/data/tokenizers/<kind>/tokenizer.json (committed).

  .venv/bin/python scripts/make_tokenizers.py --corpus /work/shared/data/corpus
"""
import argparse
import pathlib

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=pathlib.Path, required=True)
    args = parser.parse_args()
    kinds = {
        # Cased: NFKC, Strip, a literal Replace, whitespace splitting then BERT's punctuation splitting;
        # BertProcessing.
        "wordpiece-cased": wordpiece(
            args.corpus,
            normalizers.Sequence([normalizers.NFKC(), normalizers.Strip(),
                                  normalizers.Replace("’", "'"), normalizers.Replace("--", " — ")]),
            pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.BertPreTokenizer()]),
            lambda t: processors.BertProcessing(("[SEP]", t.token_to_id("[SEP]")), ("[CLS]", t.token_to_id("[CLS]")))),
        # Lowercased by hand: NFD, Lowercase, StripAccents, NFC; RobertaProcessing's pair frame.
        "wordpiece-lower": wordpiece(
            args.corpus,
            normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents(),
                                  normalizers.NFC()]),
            pre_tokenizers.BertPreTokenizer(),
            lambda t: processors.RobertaProcessing(("[SEP]", t.token_to_id("[SEP]")),
                                                   ("[CLS]", t.token_to_id("[CLS]")))),
        # The Whitespace pre-tokenizer (\\w+|[^\\w\\s]+) after BERT's normalizer without lower-casing;
        # TemplateProcessing.
        "wordpiece-whitespace": wordpiece(
            args.corpus,
            normalizers.BertNormalizer(lowercase=False, strip_accents=False),
            pre_tokenizers.Whitespace(),
            lambda t: processors.TemplateProcessing(
                single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                special_tokens=[("[CLS]", t.token_to_id("[CLS]")), ("[SEP]", t.token_to_id("[SEP]"))])),
    }
    for kind, tok in kinds.items():
        (OUT / kind).mkdir(parents=True, exist_ok=True)
        tok.save(str(OUT / kind / "tokenizer.json"))
        print(kind, tok.get_vocab_size(), "tokens")


if __name__ == "__main__":
    main()
