#!/usr/bin/env python3
"""Gives a model folder random weights of the shape its config.json says, in fp16, when it has none.

For speed runs on the GPU machine, where the tree and what it carries share 64 MiB and a real checkpoint's
weights do not fit beside the tree: carry the folder without model.safetensors (its config, tokenizer and
sentence-transformers files), then, there, before the benchmark:

  python3 bench/random_weights.py .device/model/all-MiniLM-L6-v2

A forward pass costs the same with any weights of the same shape, so throughput and latency figures hold; the
embeddings and search results mean nothing (say so beside the figures). Needs torch, transformers and
safetensors (the GPU machine has them). A folder that has model.safetensors already is left as it is.
"""
import pathlib
import sys


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: random_weights.py MODEL_FOLDER (holding config.json)")
    folder = pathlib.Path(sys.argv[1])
    target = folder / "model.safetensors"
    if target.exists():
        print(f"{target} exists: kept")
        return
    if not (folder / "config.json").is_file():
        raise SystemExit(f"{folder}: no config.json, so no shape to make weights of")
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(0)
    model = AutoModel.from_config(AutoConfig.from_pretrained(str(folder)))
    tensors = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(target), metadata={"format": "pt"})
    print(f"{target}: {len(tensors)} tensors of random weights ({sum(t.numel() for t in tensors.values()):,} values)")


if __name__ == "__main__":
    main()
