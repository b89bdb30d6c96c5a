"""ClipModel against transformers' CLIPModel on random weights of the real shapes (ViT-B/32, ViT-L/14): image
embeddings from pixel tensors (decode and preprocessing not included: the model's part of issue 54's targets) and
CLIP's text tower on short texts. Makes the folders once under --out (random weights saved in fp16, the tiny CLIP
checkpoint's tokenizer — ids below the real vocabulary size — and a 224-pixel preprocessor_config.json), runs
build/bench/clip_encode on each, then transformers (get_image_features / get_text_features, same dtype, the best of
several batch sizes) in the same run, and prints both with the ratio. First, for each shape, a parity check: the
same random pixel_values through both in the benchmark's dtype and device (the worst cosine printed; fp16 should
be >= 0.999).

  .venv-ref/bin/python bench/clip_encode.py --device cuda --dtype fp16 [--shapes b32 l14] [--out /tmp/clip-bench]

With --jpegs N (issue 54's end-to-end target): also from JPEG bytes on disk to embeddings on the host, on N
generated 500x375 JPEGs (written once under --out by build/bench/clip_encode --make-jpegs): flowline's ClipEncoder
flow with gpu_decode on and off (images/s and decode's share for each), and transformers' CLIPProcessor (PIL
decoding, the processor on the host) + CLIPModel at the best of --batch-sizes, with the ratio.
"""
import argparse
import pathlib
import re
import shutil
import subprocess
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = ROOT / "tests/data/tiny-models/clip"
SHAPES = {
    "b32": dict(vision=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                            patch_size=32),
                text=dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8),
                projection_dim=512),
    "l14": dict(vision=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                            patch_size=14),
                text=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12),
                projection_dim=768),
}


def make_folder(shape, folder):
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel
    CLIPImageProcessor().save_pretrained(str(folder))  # openai's: shortest edge 224, center crop 224, bicubic
    if (folder / "model.safetensors").exists():
        return
    s = SHAPES[shape]
    config = CLIPConfig(text_config=dict(s["text"], vocab_size=49408, max_position_embeddings=77, hidden_act="quick_gelu",
                                         eos_token_id=2),
                        vision_config=dict(s["vision"], image_size=224, hidden_act="quick_gelu"),
                        projection_dim=s["projection_dim"])
    model = CLIPModel(config).half()
    model.save_pretrained(str(folder), safe_serialization=True)
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(TINY / name, folder / name)
    (folder / "RANDOM_WEIGHTS").write_text("Random weights of a real shape, for benchmarks.\n")


def transformers_rate(folder, device, dtype, images, texts, batch_sizes):
    from transformers import CLIPModel, CLIPTokenizer
    model = CLIPModel.from_pretrained(str(folder), dtype=dtype).to(device).eval()
    best_images, best_texts = (0, 0), (0, 0)
    with torch.inference_mode():
        for batch in batch_sizes:
            pixels = torch.randn(batch, 3, 224, 224).pin_memory() if device == "cuda" else torch.randn(batch, 3, 224, 224)
            model.get_image_features(pixel_values=pixels.to(device, dtype))  # warm up
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(0, images, batch):
                model.get_image_features(pixel_values=pixels.to(device, dtype, non_blocking=True)).pooler_output.cpu()
            rate = images / (time.perf_counter() - start)
            best_images = max(best_images, (rate, batch))
        if texts:
            tokenizer = CLIPTokenizer.from_pretrained(str(folder))
            words = [f"a photo of a {i % 97} on a table, number {i}" for i in range(texts)]
            for batch in batch_sizes:
                start = time.perf_counter()
                for b in range(0, texts, batch):
                    inputs = tokenizer(words[b:b + batch], padding=True, truncation=True, return_tensors="pt").to(device)
                    model.get_text_features(**inputs).pooler_output.cpu()
                best_texts = max(best_texts, (texts / (time.perf_counter() - start), batch))
    return best_images, best_texts


def transformers_jpeg_rate(folder, jpeg_dir, device, dtype, batch_sizes):
    """transformers from JPEG files: read, PIL decode + convert("RGB"), CLIPProcessor, get_image_features, to host."""
    import io
    from PIL import Image
    from transformers import CLIPModel, CLIPProcessor
    files = sorted(jpeg_dir.glob("*.jpg"))
    model = CLIPModel.from_pretrained(str(folder), dtype=dtype).to(device).eval()
    processor = CLIPProcessor.from_pretrained(str(folder))
    best = (0.0, 0)
    with torch.inference_mode():
        for batch in batch_sizes:
            start = time.perf_counter()
            for b in range(0, len(files), batch):
                images = [Image.open(io.BytesIO(f.read_bytes())).convert("RGB") for f in files[b:b + batch]]
                pixels = processor(images=images, return_tensors="pt")["pixel_values"]
                model.get_image_features(pixel_values=pixels.to(device, dtype)).pooler_output.cpu()
            best = max(best, (len(files) / (time.perf_counter() - start), batch))
    return best


def flowline_jpeg_rates(folder, binary, jpeg_dir, jpegs, device, dtype_name, batch):
    """build/bench/clip_encode --jpeg-dir: {gpu_decode value: images/s}, the output printed as it is."""
    modes = ["on", "off"] if device != "cpu" else ["off"]  # on needs a GPU
    command = [str(binary), "--model", str(folder), "--device", device, "--dtype", dtype_name, "--batch-size",
               str(batch), "--jpeg-dir", str(jpeg_dir), "--make-jpegs", str(jpegs)]
    for mode in modes:
        command += ["--gpu-decode", mode]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    print(out, end="")
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"gpu_decode (\w+): best (\d+) images/s", out)}


def parity(folder, binary, device, dtype_name, dtype):
    from safetensors.torch import load_file, save_file
    from transformers import CLIPModel
    pixels = torch.randn(8, 3, 224, 224, generator=torch.Generator().manual_seed(11))
    save_file({"pixel_values": pixels}, str(folder / "parity-pixels.safetensors"))
    subprocess.run([str(binary), "--model", str(folder), "--device", device, "--dtype", dtype_name, "--pixels",
                    str(folder / "parity-pixels.safetensors"), "--out", str(folder / "parity-ours.safetensors")],
                   check=True, capture_output=True)
    ours = load_file(str(folder / "parity-ours.safetensors"))["image_embeds"].double()
    model = CLIPModel.from_pretrained(str(folder), dtype=dtype).to(device).eval()
    with torch.inference_mode():
        theirs = model.get_image_features(pixel_values=pixels.to(device, dtype)).pooler_output.double().cpu()
    return torch.nn.functional.cosine_similarity(ours, theirs).min().item()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/clip-bench"))
    parser.add_argument("--binary", type=pathlib.Path, default=ROOT / "build/bench/clip_encode")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=["fp16", "bf16", "fp32"], default="fp16")
    parser.add_argument("--images", type=int, default=8192)
    parser.add_argument("--texts", type=int, default=65536)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 256, 512], help="for both, the best taken")
    parser.add_argument("--jpegs", type=int, default=0, help="also from this many JPEG files to embeddings (0: not)")
    args = parser.parse_args()
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    for shape in args.shapes:
        folder = args.out / f"clip-{shape}"
        folder.mkdir(parents=True, exist_ok=True)
        make_folder(shape, folder)
        print(f"{shape} {args.dtype} on {args.device}: image embeddings against transformers' at worst cosine "
              f"{parity(folder, args.binary, args.device, args.dtype, dtype):.6f}")
        ours_images, ours_texts = (0.0, 0), (0.0, 0)
        for batch in args.batch_sizes:
            out = subprocess.run([str(args.binary), "--model", str(folder), "--device", args.device, "--dtype", args.dtype,
                                  "--batch-size", str(batch), "--images", str(args.images), "--texts", str(args.texts)],
                                 check=True, capture_output=True, text=True).stdout
            print(out, end="")
            images = float(re.search(r"images best (\d+)/s", out).group(1))
            texts = float(re.search(r"texts best (\d+)/s", out).group(1)) if args.texts else 0.0
            ours_images, ours_texts = max(ours_images, (images, batch)), max(ours_texts, (texts, batch))
        theirs_images, theirs_texts = transformers_rate(folder, args.device, dtype, args.images, args.texts,
                                                         args.batch_sizes)
        print(f"{shape} {args.dtype} on {args.device}: flowline {ours_images[0]:.0f} images/s (batch {ours_images[1]}), "
              f"transformers {theirs_images[0]:.0f} (batch {theirs_images[1]}): {ours_images[0] / theirs_images[0]:.1f}x")
        if args.jpegs:
            jpeg_dir = args.out / f"jpegs-{args.jpegs}"
            rates = flowline_jpeg_rates(folder, args.binary, jpeg_dir, args.jpegs, args.device, args.dtype,
                                        ours_images[1])
            theirs = transformers_jpeg_rate(folder, jpeg_dir, args.device, dtype, args.batch_sizes)
            for mode, rate in rates.items():
                print(f"{shape} {args.dtype} on {args.device} from {args.jpegs} JPEG files: flowline gpu_decode {mode} "
                      f"{rate:.0f} images/s (batch {ours_images[1]}), transformers CLIPProcessor + CLIPModel "
                      f"{theirs[0]:.0f} (batch {theirs[1]}): {rate / theirs[0]:.1f}x")
        if args.texts:
            print(f"{shape} text tower: flowline {ours_texts[0]:.0f} texts/s (batch {ours_texts[1]}), transformers "
                  f"{theirs_texts[0]:.0f} (batch {theirs_texts[1]}, tokenizer included in both): "
                  f"{ours_texts[0] / theirs_texts[0]:.1f}x")


if __name__ == "__main__":
    main()
