#!/usr/bin/env python3
"""Reference token ids from Python `tokenizers` for flowline's tokenizer parity test (tests/models).

Writes 20,000 (--count) deterministic texts (the corpus's paragraphs and sentences, non-Latin scripts, emoji with
ZWJ sequences and skin tones, combining marks, control characters, very long words, empty and
whitespace-only strings, mixed case, accents, numbers, punctuation runs, special tokens inside text, added
tokens glued to words, inside them and alone, at the start and the end, in other cases) and,
for each tokenizer file given, the ids Hugging Face `tokenizers` gives them: singles and pairs, without
and with truncation, and each token's offsets (Encoding.offsets: code points of its own text, flattened to
[start, end, start, end, ...]). Output: OUT/texts.json and OUT/<name>.json. The first N texts of a
smaller --count are the first N of the 20,000 (CI's parity test asks for 2,000).

  python scripts/tokenizer_reference.py --corpus /work/shared/data/corpus --out DIR [--count N] NAME=tokenizer.json ...
"""
import argparse
import json
import pathlib
import random

from tokenizers import Tokenizer

SEED = 29
COUNT = 20_000
SINGLE_TRUNCATION = 20
PAIR_TRUNCATION = 32
CHUNK = 500

SCRIPTS = [
    (0x4E00, 0x9FFF),  # CJK
    (0x3040, 0x30FF),  # kana
    (0xAC00, 0xD7A3),  # Hangul
    (0x0600, 0x06FF),  # Arabic
    (0x0900, 0x097F),  # Devanagari
    (0x0400, 0x04FF),  # Cyrillic
    (0x0E00, 0x0E7F),  # Thai
    (0x0370, 0x03FF),  # Greek
    (0x0590, 0x05FF),  # Hebrew
    (0x00C0, 0x024F),  # Latin with accents
    (0x1E00, 0x1EFF),  # Latin extended additional
    (0x2000, 0x206F),  # general punctuation, spaces, format characters
    (0xFF00, 0xFFEF),  # full-width forms
    (0x20000, 0x2A6DF),  # CJK extension B
]
EMOJI = ["😀", "👍🏽", "👩‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🧑🏿‍🚀", "✨", "🥰", "🫠", "👨‍💻", "☕"]
COMBINING = ["\u0301", "\u0308", "\u0327", "\u20DD", "\u0332", "\u093F", "\u0E31", "\u05B7"]
CONTROL = ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\x85", "\u200b", "\u200d", "\ufeff", "\ufffd", "\t", "\r\n",
           "\u2028", "\u00a0", "\u3000", "\ue000", "\U000e0041"]
SPECIALS = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "<s>", "</s>", "<mask>", "<pad>", "<unk>",
            "<|endoftext|>", "<|im_start|>", "[cls]", "[ SEP ]"]
# Added tokens of the generated tokenizers (scripts/make_tokenizers.py) and their cases, glued into a quarter
# of the texts (glue()).
GLUED = ["[MASK]", "[mask]", "[Mask]", "[CLS]", "[cls]", "[SEP]", "<s>", "</s>", "<mask>", "<S>", "the", "The",
         "THE", "and", "And", "ing", "ion", "ION", "[MASK][MASK]", "the the"]
PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~«»“”‘’—–…¿¡·•"


def corpus_pieces(corpus: pathlib.Path):
    paragraphs, sentences = [], []
    for path in sorted(corpus.glob("*.txt")):
        for paragraph in path.read_text(encoding="utf-8").split("\n\n"):
            paragraph = " ".join(paragraph.split())
            if paragraph:
                paragraphs.append(paragraph)
                sentences.extend(s.strip() for s in paragraph.split(". ") if s.strip())
    return paragraphs, sentences


def random_script_text(rng):
    low, high = rng.choice(SCRIPTS)
    words = []
    for _ in range(rng.randint(1, 12)):
        words.append("".join(chr(rng.randint(low, high)) for _ in range(rng.randint(1, 8))))
    return rng.choice([" ", "", "  ", "\n"]).join(words)


def mutate(rng, text):
    """Sprinkles the hard cases into a text."""
    pieces = text.split(" ")
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(9)
        at = rng.randrange(len(pieces) + 1)
        if kind == 0:
            insert = rng.choice(EMOJI)
        elif kind == 1:
            insert = rng.choice(pieces or ["e"]) + rng.choice(COMBINING)
        elif kind == 2:
            insert = rng.choice(CONTROL)
        elif kind == 3:
            insert = rng.choice(SPECIALS)
        elif kind == 4:
            insert = "".join(rng.choice(PUNCTUATION) for _ in range(rng.randint(1, 6)))
        elif kind == 5:
            insert = str(rng.randint(0, 10 ** rng.randint(1, 12))) + rng.choice(["", ".5", ",000", "%"])
        elif kind == 6:
            insert = random_script_text(rng)
        elif kind == 7:
            insert = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzé") for _ in range(rng.randint(30, 250)))
        else:
            insert = rng.choice(pieces or ["x"]).upper() if rng.random() < 0.5 else rng.choice(pieces or ["x"]).title()
        pieces.insert(at, insert)
    return rng.choice([" ", " ", "  ", "\t"]).join(pieces)


def glue(rng, text):
    """Puts added tokens into a text where single_word, lstrip and rstrip decide: inside a word, glued to its
    start or end, alone between spaces or other whitespace, next to punctuation, marks, digits, CJK or emoji,
    at the very start or end."""
    for _ in range(rng.randint(1, 3)):
        token = rng.choice(GLUED)
        where = rng.randrange(7)
        if where == 0:
            at = rng.randrange(len(text) + 1)  # anywhere: often inside a word
            text = text[:at] + token + text[at:]
        elif where == 1:
            text = token + rng.choice(["", " ", "  ", "x", "é", ".", "\u00a0", "\u0301", "9"]) + text
        elif where == 2:
            text = text + rng.choice(["", " ", "\t", "s", "_", "中", "😀", ","]) + token
        else:
            words = text.split(" ")
            at = rng.randrange(len(words))
            before, after = rng.choice(["", " ", "  ", "(", "-", "\n", "ß", "٣"]), rng.choice(["", " ", ")", ".", "'s", "x"])
            words[at] = (words[at] + before + token + after) if where < 5 else (before + token + after + words[at])
            text = " ".join(words)
    return text


def make_texts(corpus: pathlib.Path, count=COUNT):
    rng = random.Random(SEED)
    paragraphs, sentences = corpus_pieces(corpus)
    texts = ["", " ", "   ", "\n\t ", "\u3000", "[CLS]", "[SEP][SEP]", "<s></s>", "a", "A.", "...",
             "<s>hello", "[MASK]hello", "[mask] the", "the", "The theory", " [CLS] ", "a[CLS]b", "..x", "\u0301x",
             "\x01x", "ing", "nothing ion"]
    while len(texts) < count:
        kind = rng.randrange(8)
        if kind == 0:
            texts.append(rng.choice(paragraphs))
        elif kind == 1:
            texts.append(rng.choice(sentences))
        elif kind in (2, 3, 4):
            texts.append(mutate(rng, rng.choice(sentences)))
        elif kind == 5:
            texts.append(random_script_text(rng))
        elif kind == 6:
            texts.append(mutate(rng, random_script_text(rng)))
        else:
            texts.append(rng.choice(["", " ", "\n", "\t\t", " \u00a0 "]) + mutate(rng, rng.choice(paragraphs))[:300])
    glued = random.Random(SEED + 2)
    return [glue(glued, text) if glued.random() < 0.25 else text for text in texts]


def encoded(tok, inputs, *fields):
    """The fields of each encoding, encoded in chunks: a truncated encoding keeps its overflowing pieces
    (for a pair, combinations of both sides'), and all 20,000 at once took more than 11 GB."""
    lists = [[] for _ in fields]
    for start in range(0, len(inputs), CHUNK):
        for e in tok.encode_batch(inputs[start:start + CHUNK]):
            for values, name in zip(lists, fields):
                value = getattr(e, name)
                values.append([n for pair in value for n in pair] if name == "offsets" else value)
    return lists


def references(path, texts, pairs):
    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    out = {}
    pair_texts = [(texts[a], texts[b]) for a, b in pairs]
    tok.no_truncation()
    out["single"], out["single_offsets"] = encoded(tok, texts, "ids", "offsets")
    out["pair"], out["pair_types"], out["pair_offsets"] = encoded(tok, pair_texts, "ids", "type_ids", "offsets")
    tok.enable_truncation(SINGLE_TRUNCATION, strategy="longest_first")
    out["single_truncated"], out["single_truncated_offsets"] = encoded(tok, texts, "ids", "offsets")
    tok.enable_truncation(PAIR_TRUNCATION, strategy="longest_first")
    out["pair_truncated"], out["pair_truncated_types"], out["pair_truncated_offsets"] = encoded(
        tok, pair_texts, "ids", "type_ids", "offsets")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--count", type=int, default=COUNT, help="how many texts (default 20,000)")
    parser.add_argument("tokenizers", nargs="*", help="NAME=path/to/tokenizer.json")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    texts = make_texts(args.corpus, args.count)
    rng = random.Random(SEED + 1)
    pairs = [(i, rng.randrange(len(texts))) for i in range(len(texts))]
    (args.out / "texts.json").write_text(
        json.dumps({"count": len(texts), "texts": texts, "pairs": pairs, "single_truncation": SINGLE_TRUNCATION,
                    "pair_truncation": PAIR_TRUNCATION}), encoding="utf-8")
    for spec in args.tokenizers:
        name, path = spec.split("=", 1)
        (args.out / f"{name}.json").write_text(json.dumps(references(pathlib.Path(path), texts, pairs)))


if __name__ == "__main__":
    main()
