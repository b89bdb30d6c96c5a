"""Tiny random CLIP and SigLIP checkpoints (transformers' CLIPModel and SiglipModel at hidden 32, 2 layers, image
32 / patch 8) of the real configurations' shape families, with tokenizers and preprocessor configs of the real
kinds, and the goldens flowline's ClipModel is compared against (tests/models/test_clip.cpp). Run through
`scripts/make_tiny_models.py --only clip` (.venv-ref).

Outputs in tests/data/tiny-models/:
  clip/, siglip/               config.json, model.safetensors, tokenizer.json (+ tokenizer_config.json,
                               special_tokens_map.json), preprocessor_config.json, RANDOM_WEIGHTS
  clip.goldens.safetensors     pixel_values [n, 3, 32, 32] (random), image_embeds [n, d] (get_image_features),
  siglip.goldens.safetensors   text_embeds [m, d] (get_text_features after the processor, from <name>.texts.jsonl),
                               input_ids [m, L] as the processor gave them, logit_scale (exp applied) and, for
                               SigLIP, logit_bias
                               file_embeds [k, d]: tests/data/images' files listed in <name>.images.jsonl end to
                               end (Pillow, the checkpoint's processor, the model)
  clip.texts.jsonl, siglip.texts.jsonl  the texts; clip.images.jsonl, siglip.images.jsonl  the image files

CLIP: quick_gelu, the vision tower pre-LayerNorm with a class token and pre_layrnorm, the causal text tower pooled
at the end-of-text token; config.json's text eos_token_id is 2 as in openai's checkpoints, so transformers pools at
the largest id (argmax), and <|endoftext|> is the largest id as in the real vocabulary. Its tokenizer is
transformers' CLIPTokenizer (NFC, whitespace runs to one space, lowercase, CLIP's split regex, byte-level BPE with
the `</w>` suffix, RobertaProcessing) over a BPE trained here. Texts are encoded as CLIPProcessor does with
padding=True (the causal tower never sees the padding after a token).

SigLIP: gelu_pytorch_tanh, no class token, the attention-pooling head ("MAP", vision_use_head), the text tower
pooled at the last position, logit_bias. transformers 5 has no fast SiglipTokenizer: the checkpoint carries the
sentencepiece model (spiece.model, a Unigram trained here) for transformers' slow SiglipTokenizer and the
tokenizer.json scripts/siglip_tokenizer_json.py makes from it, which gives the same ids (checked on every text).
Texts are encoded as SigLIP's model cards and transformers' zero-shot pipeline do: padding="max_length" (64),
truncation, with the attention_mask transformers 5's SiglipTokenizer gives. That padding changes the embedding (the
last position is a padding token whose query attends to the text): the goldens hold the max_length embeddings
(text_embeds), unpadded ones (to show the difference) and padded ones without the mask (text_embeds_no_mask: a
tokenizer_config.json whose model_input_names is ["input_ids"], as transformers 4 saved them).
"""
import json
import pathlib
import string
import tempfile

import torch
from safetensors.torch import save_file
from siglip_tokenizer_json import CHECK_TEXTS
from siglip_tokenizer_json import build as build_siglip_tokenizer
from siglip_tokenizer_json import check as check_siglip_tokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/tiny-models"
IMAGES = 6

# Images end to end (tests/data/images, scripts/make_test_images.py): file -> Pillow's convert("RGB") -> the
# checkpoint's processor (AutoImageProcessor: transformers 5's torchvision backend) -> get_image_features.
IMAGE_FILES = ["cmyk_20x16.jpg", "exif_rotated_24x16.jpg", "grey_8x64.png", "palette_trns_18x14.png",
               "animated_16x16.webp", "bilevel_19x7.png"]

TEXTS = ["a photo of a cat", "A DOG playing in the snow!", "  two  spaces,\ttab and\nnew line  ", "x", "",
         "Ein Fluß, déjà vu, Ångström", "Москва — столица России", "東京は日本の首都です", "😀 ❤️ emoji",
         "it's what they'd've done, isn't it?", "numbers 1234567 and 3.14159"]


def corpus_lines(corpus):
    lines = [" ".join(p.split()) for path in sorted(corpus.glob("*.txt"))
             for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return lines[:3000] or ["a photo of a cat", "a dog in the snow"]


def long_texts(corpus):
    return [p for p in corpus_lines(corpus) if len(p) > 600][:2]  # past 77 / 64 tokens: truncated


def randomise(model, std=0.2):
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, std)
            if "norm" in name and name.endswith("weight"):
                p.add_(1.0)  # LayerNorm gains around 1, as trained ones are


def mark_random(folder):
    (folder / "RANDOM_WEIGHTS").write_text(
        "Random weights of a real shape, made by a script for the tests: what this model computes is meaningless.\n")


def clip_tokenizer(corpus, folder):
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import CLIPTokenizer
    plain = Tokenizer(models.BPE(end_of_word_suffix="</w>", continuing_subword_prefix=""))
    plain.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                            normalizers.Lowercase()])
    plain.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
                             behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    plain.train_from_iterator(corpus_lines(corpus), trainers.BpeTrainer(
        vocab_size=900, end_of_word_suffix="</w>", initial_alphabet=alphabet, show_progress=False))
    state = json.loads(plain.to_str())["model"]
    # As CLIP's vocabulary: every byte alone and as a word's end first, the merges' results, then the two specials
    # last (<|endoftext|> the largest id).
    vocab = {}
    for c in sorted(alphabet):
        vocab[c] = len(vocab)
    for c in sorted(alphabet):
        vocab[c + "</w>"] = len(vocab)
    for token in sorted(state["vocab"], key=state["vocab"].get):
        vocab.setdefault(token, len(vocab))
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    tokenizer = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)
    tokenizer.save_pretrained(str(folder))
    return tokenizer


def make_clip(corpus):
    from transformers import CLIPConfig, CLIPModel, CLIPProcessor, CLIPTokenizer
    from transformers import CLIPImageProcessor
    torch.manual_seed(54)
    out = OUT / "clip"
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = clip_tokenizer(corpus, out)
    vocab = len(tokenizer)
    text = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=77, hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=24,
                bos_token_id=vocab - 2, eos_token_id=2, pad_token_id=1)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                  patch_size=8, hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=24)
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=24,
                                 logit_scale_init_value=2.6592)).eval()
    randomise(model)
    with torch.no_grad():
        model.logit_scale.fill_(2.6592)
    model.save_pretrained(str(out), safe_serialization=True)
    processor_images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                                          resample=3, do_center_crop=True)
    processor_images.save_pretrained(str(out))
    mark_random(out)
    tokenizer = CLIPTokenizer.from_pretrained(str(out))
    processor = CLIPProcessor(image_processor=processor_images, tokenizer=tokenizer)
    texts = TEXTS + long_texts(corpus)
    inputs = processor(text=texts, padding=True, truncation=True, return_tensors="pt")
    reference = CLIPModel.from_pretrained(str(out)).eval()
    pixels = torch.randn(IMAGES, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    with torch.inference_mode():
        text_embeds = reference.get_text_features(**inputs).pooler_output
        image_embeds = reference.get_image_features(pixel_values=pixels).pooler_output
    eot = vocab - 1  # every text holds <|endoftext|>, the largest id, once: what argmax pooling needs
    assert all(int((row == eot).sum()) >= 1 and int(row.max()) == eot for row in inputs["input_ids"])
    goldens = {"pixel_values": pixels, "image_embeds": image_embeds, "text_embeds": text_embeds,
               "file_embeds": file_embeddings(out, reference), "input_ids": inputs["input_ids"].to(torch.int32), "attention_mask": inputs["attention_mask"].to(torch.int32),
               "logit_scale": reference.logit_scale.exp().reshape(1)}
    write_goldens("clip", texts, goldens)


def siglip_tokenizer(corpus, folder):
    import sentencepiece as spm
    from transformers import SiglipTokenizer
    with tempfile.TemporaryDirectory() as tmp:
        text = pathlib.Path(tmp) / "corpus.txt"
        text.write_text("\n".join(corpus_lines(corpus)), encoding="utf-8")
        spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(pathlib.Path(tmp) / "spiece"),
                                       vocab_size=400, model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                       normalization_rule_name="identity", character_coverage=1.0,
                                       num_threads=1, minloglevel=2)  # one thread: the same model every run
        (folder / "spiece.model").write_bytes((pathlib.Path(tmp) / "spiece.model").read_bytes())
    slow = SiglipTokenizer(vocab_file=str(folder / "spiece.model"), model_max_length=64, do_lower_case=True)
    fast = build_siglip_tokenizer(folder / "spiece.model")  # scripts/siglip_tokenizer_json.py, checked below
    fast.save(str(folder / "tokenizer.json"))
    slow.save_pretrained(str(folder))
    return slow, fast


def make_siglip(corpus):
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel, SiglipTokenizer
    torch.manual_seed(55)
    out = OUT / "siglip"
    out.mkdir(parents=True, exist_ok=True)
    slow, fast = siglip_tokenizer(corpus, out)
    texts = TEXTS + long_texts(corpus)
    differs = check_siglip_tokenizer(fast, slow, texts + CHECK_TEXTS)  # tokenizer.json gives the slow one's ids
    assert differs is None, differs
    vocab = slow.vocab_size
    text = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, pad_token_id=1,
                eos_token_id=1, bos_token_id=None)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                  patch_size=8, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, vision_use_head=True)
    model = SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).eval()
    randomise(model)
    with torch.no_grad():
        model.logit_scale.fill_(2.3)
        model.logit_bias.fill_(-1.7)
    model.save_pretrained(str(out), safe_serialization=True)
    SiglipImageProcessor(size={"height": 32, "width": 32}, resample=3).save_pretrained(str(out))
    mark_random(out)
    tokenizer = SiglipTokenizer.from_pretrained(str(out))
    inputs = tokenizer(texts, padding="max_length", max_length=64, truncation=True, return_tensors="pt")
    reference = SiglipModel.from_pretrained(str(out)).eval()
    pixels = torch.randn(IMAGES, 3, 32, 32, generator=torch.Generator().manual_seed(8))
    with torch.inference_mode():
        text_embeds = reference.get_text_features(**inputs).pooler_output
        unpadded = torch.cat([reference.get_text_features(**tokenizer([t], truncation=True, max_length=64, return_tensors="pt")).pooler_output
                              for t in texts])
        image_embeds = reference.get_image_features(pixel_values=pixels).pooler_output
        # As transformers 4's SiglipTokenizer (model_input_names ["input_ids"]) and big_vision ran it: padded to 64,
        # no attention mask.
        unmasked = reference.get_text_features(input_ids=inputs["input_ids"]).pooler_output
    goldens = {"pixel_values": pixels, "image_embeds": image_embeds, "text_embeds": text_embeds,
               "text_embeds_unpadded": unpadded, "text_embeds_no_mask": unmasked,
               "file_embeds": file_embeddings(out, reference), "input_ids": inputs["input_ids"].to(torch.int32),
               "logit_scale": reference.logit_scale.exp().reshape(1), "logit_bias": reference.logit_bias.reshape(1)}
    if "attention_mask" in inputs:
        goldens["attention_mask"] = inputs["attention_mask"].to(torch.int32)
    write_goldens("siglip", texts, goldens)
    difference = 1 - torch.nn.functional.cosine_similarity(text_embeds, unpadded).min()
    print(f"siglip: padding to 64 moves the text embeddings by up to 1 - cos = {difference:.3g}; "
          f"attention_mask given: {'attention_mask' in inputs}")


def file_embeddings(folder, model):
    """Image embeddings of IMAGE_FILES end to end, and the files' paths relative to the repository."""
    from PIL import Image
    from transformers import AutoImageProcessor
    processor = AutoImageProcessor.from_pretrained(str(folder))
    images = [Image.open(ROOT / "tests/data/images" / f).convert("RGB") for f in IMAGE_FILES]
    with torch.inference_mode():
        pixels = processor(images=images, return_tensors="pt")["pixel_values"]
        return model.get_image_features(pixel_values=pixels).pooler_output


def write_goldens(name, texts, goldens):
    with open(OUT / f"{name}.texts.jsonl", "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    with open(OUT / f"{name}.images.jsonl", "w", encoding="utf-8") as f:
        for file in IMAGE_FILES:
            f.write(json.dumps({"file": f"tests/data/images/{file}"}) + "\n")
    save_file({k: v.detach().contiguous() for k, v in goldens.items()}, str(OUT / f"{name}.goldens.safetensors"))
    print(f"{name}: {len(texts)} texts, {goldens['pixel_values'].shape[0]} images, "
          f"embeddings {tuple(goldens['image_embeds'].shape)}")


def make_clip_models(corpus):
    make_clip(corpus)
    make_siglip(corpus)
