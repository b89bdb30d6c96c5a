#!/usr/bin/env python3
"""Makes the small test images of flowline's image decoding and preprocessing (tests/data/images/).

Run with the reference environment (Pillow, numpy, torch, transformers):
    .venv-ref/bin/python scripts/make_test_images.py

Writes, all generated (no downloads):
  - images of several sizes, aspect ratios, modes and formats (JPEG baseline/progressive/4:4:4/4:2:2/grey/CMYK/
    EXIF-rotated, PNG in every colour type and bit depth Pillow reads, WebP lossy/lossless/alpha/animated);
  - NAME.rgb: Pillow's Image.open(NAME).convert("RGB") as raw HWC bytes, the golden every pixel is compared with;
  - manifest.json: file, width, height, golden for each;
  - clip/ and siglip/ preprocessor configs (small sizes), and preprocess/*.f16 listed in preprocess.json:
    transformers' pixel_values for a few images through CLIPImageProcessor / SiglipImageProcessor (the torchvision
    backend AutoImageProcessor picks) and their PIL backends, as little-endian float16 [3, H, W].
"""
import io
import json
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "images"


def picture(width, height, seed):
    """Smooth colour gradients plus some noise and a sharp edge: exercises chroma upsampling and the IDCT."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 255 * x / max(width - 1, 1)
    g = 255 * y / max(height - 1, 1)
    b = 127.5 + 127.5 * np.sin((x + 2 * y) / 3.0)
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 12, (height, width, 3))
    img[: height // 3, : width // 3] = [250, 10, 40]
    return np.clip(img, 0, 255).astype(np.uint8)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def raw_png(width, height, color_type, depth, rows, extra=b""):
    """A PNG written by hand (filter 0 on every row), for the bit depths and colour types Pillow cannot write."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    data = b"".join(b"\x00" + row for row in rows)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", zlib.compress(data))
            + png_chunk(b"IEND", b""))


def pack_bits(values, depth):
    out, acc, bits = bytearray(), 0, 0
    for v in values:
        acc = (acc << depth) | int(v)
        bits += depth
        if bits == 8:
            out.append(acc)
            acc, bits = 0, 0
    if bits:
        out.append(acc << (8 - bits))
    return bytes(out)


def save(pil_image, fmt, **options):
    buffer = io.BytesIO()
    pil_image.save(buffer, fmt, **options)
    return buffer.getvalue()


def make_images():
    """name -> encoded bytes."""
    images = {}
    p = picture
    images["rgb_40x30_q90.jpg"] = save(Image.fromarray(p(40, 30, 1)), "JPEG", quality=90)
    images["rgb_33x17_444.jpg"] = save(Image.fromarray(p(33, 17, 2)), "JPEG", quality=95, subsampling=0)
    images["rgb_31x45_422.jpg"] = save(Image.fromarray(p(31, 45, 3)), "JPEG", quality=85, subsampling=1)
    images["rgb_64x8_progressive.jpg"] = save(Image.fromarray(p(64, 8, 4)), "JPEG", quality=80, progressive=True)
    images["grey_24x20.jpg"] = save(Image.fromarray(p(24, 20, 5)).convert("L"), "JPEG", quality=90)
    images["cmyk_20x16.jpg"] = save(Image.fromarray(p(20, 16, 6)).convert("CMYK"), "JPEG", quality=90)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 CW to display; Image.open does not apply it
    images["exif_rotated_24x16.jpg"] = save(Image.fromarray(p(24, 16, 7)), "JPEG", quality=90, exif=exif.tobytes())

    base = Image.fromarray(p(30, 20, 8))
    images["rgb_30x20.png"] = save(base, "PNG")
    rgba = np.dstack([p(21, 13, 9), np.linspace(0, 255, 21 * 13).reshape(13, 21).astype(np.uint8)])
    images["rgba_21x13.png"] = save(Image.fromarray(rgba, "RGBA"), "PNG")
    images["grey_8x64.png"] = save(Image.fromarray(p(8, 64, 10)).convert("L"), "PNG")
    images["grey_alpha_16x12.png"] = save(Image.fromarray(p(16, 12, 11)).convert("LA"), "PNG")
    images["palette_18x14.png"] = save(base.resize((18, 14)).quantize(colors=16), "PNG")
    pal = base.resize((18, 14)).quantize(colors=8)
    images["palette_trns_18x14.png"] = save(pal, "PNG", transparency=bytes([0, 128, 255, 64]))
    images["bilevel_19x7.png"] = save(Image.fromarray(p(19, 7, 12)).convert("1"), "PNG")
    grey16 = (np.arange(20 * 10).reshape(10, 20) * 331 % 65536).astype(np.uint16)
    grey16[0, :4] = [0, 1, 255, 256]
    images["grey16_20x10.png"] = save(Image.fromarray(grey16), "PNG")
    rng = np.random.default_rng(13)
    rgb16 = rng.integers(0, 65536, (9, 11, 3), dtype=np.uint16)
    images["rgb16_11x9.png"] = raw_png(11, 9, 2, 16, [row.astype(">u2").tobytes() for row in rgb16])
    rgba16 = rng.integers(0, 65536, (7, 10, 4), dtype=np.uint16)
    images["rgba16_10x7.png"] = raw_png(10, 7, 6, 16, [row.astype(">u2").tobytes() for row in rgba16])
    la16 = rng.integers(0, 65536, (5, 6, 2), dtype=np.uint16)
    images["grey_alpha16_6x5.png"] = raw_png(6, 5, 4, 16, [row.astype(">u2").tobytes() for row in la16])
    grey2 = rng.integers(0, 4, (6, 13))
    images["grey2_13x6.png"] = raw_png(13, 6, 0, 2, [pack_bits(row, 2) for row in grey2])
    grey4 = rng.integers(0, 16, (5, 9))
    images["grey4_9x5.png"] = raw_png(9, 5, 0, 4, [pack_bits(row, 4) for row in grey4])
    plte = png_chunk(b"PLTE", bytes([255, 0, 0, 0, 255, 0, 0, 0, 255]))
    idx = rng.integers(0, 4, (4, 10))  # index 3 is past the 3-colour palette
    images["palette2_short_10x4.png"] = raw_png(10, 4, 3, 2, [pack_bits(row, 2) for row in idx], plte)
    trns = png_chunk(b"tRNS", struct.pack(">HHH", 10, 20, 30))
    images["rgb_trns_5x3.png"] = raw_png(5, 3, 2, 8, [bytes([10, 20, 30] * 5)] * 3, trns)

    images["rgb_40x30_lossy.webp"] = save(Image.fromarray(p(40, 30, 14)), "WEBP", quality=80)
    images["rgb_25x19_lossless.webp"] = save(Image.fromarray(p(25, 19, 15)), "WEBP", lossless=True)
    rgba = np.dstack([p(20, 20, 16), np.linspace(0, 255, 400).reshape(20, 20).astype(np.uint8)])
    images["rgba_20x20_lossy.webp"] = save(Image.fromarray(rgba, "RGBA"), "WEBP", quality=75)
    frames = [Image.fromarray(p(16, 16, 17)), Image.fromarray(p(16, 16, 18))]
    images["animated_16x16.webp"] = save(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=100)
    return images


PROCESSOR_CONFIGS = {
    # CLIP's layout at a small size: shortest edge resized bicubic, then a center crop.
    "clip": {"image_processor_type": "CLIPImageProcessor", "do_resize": True, "size": {"shortest_edge": 32},
             "resample": 3, "do_center_crop": True, "crop_size": {"height": 32, "width": 32}, "do_rescale": True,
             "rescale_factor": 0.00392156862745098, "do_normalize": True,
             "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
             "do_convert_rgb": True},
    # SigLIP's: a fixed size, no crop, mean and std 0.5.
    "siglip": {"image_processor_type": "SiglipImageProcessor", "do_resize": True, "size": {"height": 32, "width": 32},
               "resample": 3, "do_rescale": True, "rescale_factor": 0.00392156862745098, "do_normalize": True,
               "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True},
}
# Images of both orientations, smaller and larger than the target (upscaling too), an already square one.
PREPROCESSED = ["rgb_40x30_q90.jpg", "rgb_31x45_422.jpg", "grey_8x64.png", "rgba_21x13.png", "animated_16x16.webp"]


def make_preprocess_goldens(entries):
    """transformers' pixel_values for PREPROCESSED through each config, by the torchvision (fast, the default)
    and the PIL (slow) backends, as float16 [3, H, W] files."""
    from transformers import AutoImageProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    pil_classes = {"clip": CLIPImageProcessorPil, "siglip": SiglipImageProcessorPil}
    goldens = []
    (OUT / "preprocess").mkdir(exist_ok=True)
    for kind, config in PROCESSOR_CONFIGS.items():
        folder = OUT / kind
        folder.mkdir(exist_ok=True)
        (folder / "preprocessor_config.json").write_text(json.dumps(config, indent=2) + "\n")
        processors = {"fast": AutoImageProcessor.from_pretrained(folder),
                      "slow": pil_classes[kind].from_pretrained(folder)}
        print(f"{kind}: AutoImageProcessor gives {type(processors['fast']).__name__}", file=sys.stderr)
        for backend, processor in processors.items():
            for name in PREPROCESSED:
                image = Image.open(OUT / name).convert("RGB")
                pixels = processor(images=[image], return_tensors="pt")["pixel_values"][0]
                out = f"preprocess/{kind}_{backend}_{name.rsplit('.', 1)[0]}.f16"
                (OUT / out).write_bytes(pixels.numpy().astype("<f2").tobytes())
                goldens.append({"config": kind, "backend": backend, "processor": type(processor).__name__,
                                "image": name, "shape": list(pixels.shape), "golden": out})
    (OUT / "preprocess.json").write_text(json.dumps(goldens, indent=1) + "\n")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name, data in sorted(make_images().items()):
        (OUT / name).write_bytes(data)
        decoded = Image.open(io.BytesIO(data)).convert("RGB")
        rgb = np.asarray(decoded, dtype=np.uint8)
        golden = name.rsplit(".", 1)[0] + ".rgb"
        (OUT / golden).write_bytes(rgb.tobytes())
        manifest.append({"file": name, "width": decoded.width, "height": decoded.height, "golden": golden})
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    make_preprocess_goldens(manifest)
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"{len(manifest)} images, {total} bytes in {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
