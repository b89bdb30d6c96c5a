"""Goldens for tests/clip_encoder: a few small test images made here (no downloads) and what transformers computes
for them with the tiny CLIP and SigLIP checkpoints (tests/data/tiny-models/clip, siglip; scripts/tiny_clip.py).

Run with the reference environment from the repository root: `.venv-ref/bin/python tests/clip_encoder/make_goldens.py`.

Writes tests/clip_encoder/data/:
  images/*.png, *.jpg          the images: sizes and aspect ratios that resize and crop differently, RGB, grayscale
                               and RGBA PNGs and a JPEG
  captions.json                the texts, and the image files in the order of the goldens' rows
  clip.safetensors,            image_embeds [I, D] (processor + get_image_features), text_embeds [T, D]
  siglip.safetensors           (processor + get_text_features), and /rank's goldens: text_to_images [T, I] and
                               image_to_texts [I, T], the probabilities transformers gives each query's candidates
                               (CLIP: softmax over the candidates of logits_per_text / logits_per_image; SigLIP:
                               their sigmoid, as its zero-shot pipeline does), cosine [T, I]
"""
import json
import pathlib

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
TINY = ROOT / "tests/data/tiny-models"
OUT = ROOT / "tests/clip_encoder/data"
TEXTS = ["a photo of a cat", "a red square on a blue background", "a dog playing in the snow"]


def make_images():
    folder = OUT / "images"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(54)
    y, x = np.mgrid[0:30, 0:48]
    gradient = np.stack([x * 5, y * 8, (x + y) * 3], axis=-1).astype(np.uint8)
    Image.fromarray(gradient).save(folder / "gradient-48x30.png")
    square = np.zeros((40, 40, 3), np.uint8)
    square[..., 2] = 200
    square[10:30, 10:30] = [220, 20, 20]
    Image.fromarray(square).save(folder / "square-40x40.png")
    noise = rng.integers(0, 256, (64, 24), dtype=np.uint8)
    Image.fromarray(noise, mode="L").save(folder / "gray-24x64.png")
    rgba = np.concatenate([rng.integers(0, 256, (33, 33, 3)), np.full((33, 33, 1), 128)], axis=-1).astype(np.uint8)
    Image.fromarray(rgba, mode="RGBA").save(folder / "rgba-33x33.png")
    smooth = np.stack([x * 4 + 20, 200 - y * 5, np.full_like(x, 90)], axis=-1).astype(np.uint8)
    Image.fromarray(smooth).save(folder / "smooth-48x30.jpg", quality=95)
    return sorted(folder.iterdir())


def goldens(kind, files):
    if kind == "clip":
        from transformers import CLIPModel as Model, CLIPProcessor as Processor
        text_args = {"padding": True}
    else:
        from transformers import SiglipModel as Model, SiglipProcessor as Processor
        text_args = {"padding": "max_length", "max_length": 64}
    folder = TINY / kind
    model = Model.from_pretrained(str(folder)).eval()
    processor = Processor.from_pretrained(str(folder))
    images = [Image.open(f).convert("RGB") for f in files]
    with torch.no_grad():
        pixels = processor(images=images, return_tensors="pt")["pixel_values"]
        inputs = processor(text=TEXTS, truncation=True, return_tensors="pt", **text_args)
        image_embeds = model.get_image_features(pixel_values=pixels).pooler_output
        text_embeds = model.get_text_features(**inputs).pooler_output
        out = model(pixel_values=pixels, **inputs)
    if kind == "clip":
        text_to_images = out.logits_per_text.softmax(dim=1)
        image_to_texts = out.logits_per_image.softmax(dim=1)
    else:
        text_to_images = out.logits_per_text.sigmoid()
        image_to_texts = out.logits_per_image.sigmoid()
    t = torch.nn.functional.normalize(text_embeds, dim=-1)
    i = torch.nn.functional.normalize(image_embeds, dim=-1)
    save_file({"image_embeds": image_embeds.contiguous(), "text_embeds": text_embeds.contiguous(),
               "text_to_images": text_to_images.contiguous(), "image_to_texts": image_to_texts.contiguous(),
               "cosine": (t @ i.T).contiguous()}, str(OUT / f"{kind}.safetensors"))
    print(kind, "text_to_images", text_to_images.numpy().round(4).tolist())


def main():
    files = make_images()
    (OUT / "captions.json").write_text(json.dumps({"texts": TEXTS, "images": [f.name for f in files]}, indent=1) + "\n")
    for kind in ("clip", "siglip"):
        goldens(kind, files)


if __name__ == "__main__":
    main()
