#!/usr/bin/env python3
"""Makes tests/data/images/orientation/: small images carrying each EXIF Orientation, and what Pillow's
ImageOps.exif_transpose makes of them (the ClipEncoder's `exif_orientation: true` against it).

Run with the reference environment (Pillow, numpy):
    .venv-ref/bin/python scripts/make_orientation_images.py

Writes, all generated (no downloads):
  - o1.png .. o8.png: one 7x5 RGB picture (every pixel different, so any wrong turn shows), stored as is, with
    EXIF Orientation 1..8 in an eXIf chunk; o6.jpg (APP1 Exif, quality 95, 4:4:4) and o8.webp (lossless, EXIF
    chunk): the same picture;
  - NAME.upright.rgb: ImageOps.exif_transpose(Image.open(NAME)).convert("RGB") as raw HWC bytes;
  - manifest.json: file, orientation, width and height of the upright image, its golden.
"""
import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "images" / "orientation"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:5, 0:7]
    pixels = np.stack([x * 36, y * 60, (x * 5 + y * 7) % 256], axis=-1).astype(np.uint8)
    picture = Image.fromarray(pixels, "RGB")
    files = [(f"o{k}.png", k, {}) for k in range(1, 9)]
    files += [("o6.jpg", 6, {"quality": 95, "subsampling": 0}), ("o8.webp", 8, {"lossless": True})]
    manifest = []
    for name, orientation, options in files:
        exif = Image.Exif()
        exif[0x0112] = orientation
        picture.save(OUT / name, exif=exif.tobytes(), **options)
        with Image.open(OUT / name) as stored:
            assert stored.getexif().get(0x0112) == orientation, name
            upright = ImageOps.exif_transpose(stored).convert("RGB")
        golden = name + ".upright.rgb"
        (OUT / golden).write_bytes(np.asarray(upright).tobytes())
        manifest.append({"file": name, "orientation": orientation, "width": upright.width,
                         "height": upright.height, "golden": golden})
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(manifest)} images to {OUT}")


if __name__ == "__main__":
    main()
