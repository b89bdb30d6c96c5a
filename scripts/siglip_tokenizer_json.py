"""Writes tokenizer.json for a SigLIP folder that has only spiece.model (every google/siglip-* on the hub):
transformers 5 has no fast SiglipTokenizer, and flowline reads tokenizer.json. The pipeline is what transformers'
slow SiglipTokenizer does, as tokenizers components:

  normalizers  Lowercase (when tokenizer_config.json's do_lower_case, the default), "▁" as a space, a leading "▁"
               (tokenize() prepends it), ASCII punctuation removed, whitespace runs to one space, the right end
               stripped (canonicalize_text), then sentencepiece's own normalization (Precompiled, when the model
               has a charsmap)
  pre-tokenizer Metaspace (no prepending: done above), split on "▁"
  model        Unigram with spiece.model's pieces and scores
  post         "$A </s>" (and "$A </s> $B </s>")

A text holding a special token literally ("</s>") differs: the slow tokenizer canonicalizes the pieces around it
one by one (dropping the "▁" before it), tokenizers normalizes each piece with its own leading "▁".

The file is written only when it gives the slow tokenizer's ids on every text checked (a built-in list, and each
line of --texts): otherwise the script says which text differs and writes nothing.

  .venv-ref/bin/python scripts/siglip_tokenizer_json.py FOLDER [--texts FILE]
"""
import argparse
import pathlib
import string
import sys

CHECK_TEXTS = ["a photo of a cat", "A DOG playing in the snow!", "  two  spaces,\ttab and\nnew line  ", "x", "",
               "Ein Fluß, déjà vu, Ångström", "ﬁne ｆｕｌｌ-width ①", "Москва — столица России", "東京は日本の首都です",
               "😀 ❤️ emoji", "it's what they'd've done, isn't it?", "numbers 1234567 and 3.14159", "a▁b ▁ c"]


def build(spiece_model, lowercase=True):
    """The tokenizers.Tokenizer for `spiece_model` (a path), as described above."""
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(pathlib.Path(spiece_model).read_bytes())
    if proto.trainer_spec.model_type != 1:  # UNIGRAM
        raise SystemExit(f"{spiece_model}: a {proto.trainer_spec.model_type} model; SigLIP's is Unigram (1)")
    pieces = [(p.piece, p.score) for p in proto.pieces]
    unk = proto.trainer_spec.unk_id
    eos = proto.trainer_spec.eos_id
    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=unk, byte_fallback=proto.trainer_spec.byte_fallback))
    punctuation = "[" + "".join("\\" + c for c in string.punctuation) + "]"
    steps = [normalizers.Lowercase()] if lowercase else []
    steps += [normalizers.Replace("▁", " "), normalizers.Prepend("▁"), normalizers.Replace(Regex(punctuation), ""),
              normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip(left=False, right=True)]
    if proto.normalizer_spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap))
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    eos_piece = proto.pieces[eos].piece
    tokenizer.post_processor = processors.TemplateProcessing(single=f"$A {eos_piece}", pair=f"$A {eos_piece} $B {eos_piece}",
                                                             special_tokens=[(eos_piece, eos)])
    tokenizer.add_special_tokens([p.piece for p in proto.pieces if p.type in (2, 3)])  # UNKNOWN, CONTROL
    return tokenizer


def check(fast, slow, texts):
    """The first text whose ids differ, with both, or None."""
    for t in texts:
        want, got = slow(t)["input_ids"], fast.encode(t).ids
        if want != got:
            return t, want, got
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--texts", type=pathlib.Path, help="more texts to check, one a line")
    args = parser.parse_args()
    from transformers import SiglipTokenizer
    slow = SiglipTokenizer.from_pretrained(str(args.folder))
    fast = build(args.folder / "spiece.model", lowercase=slow.do_lower_case)
    texts = CHECK_TEXTS + (args.texts.read_text(encoding="utf-8").splitlines() if args.texts else [])
    differs = check(fast, slow, texts)
    if differs:
        sys.exit(f"{args.folder}: tokenizer.json would differ from SiglipTokenizer on {differs[0]!r}: "
                 f"{differs[1]} != {differs[2]}; nothing written")
    fast.save(str(args.folder / "tokenizer.json"))
    print(f"{args.folder / 'tokenizer.json'}: the slow tokenizer's ids on {len(texts)} texts")


if __name__ == "__main__":
    main()
