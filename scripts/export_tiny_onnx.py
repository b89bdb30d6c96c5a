"""Exports the tiny random BERT of tests/data/tiny-models/bert-cross-encoder (hidden 32, 2 layers) to ONNX with
torch.onnx, for OnnxModel's tests (tests/python/test_onnx_model.py): input_ids and attention_mask in, the
mean of the last hidden state over the unmasked tokens out ([batch, 32]), batch and sequence dynamic.

    .venv-ref/bin/python scripts/export_tiny_onnx.py [OUT [CHECKPOINT]]
        # default OUT tests/data/tiny-models/bert-onnx/model.onnx; CHECKPOINT: another BERT folder, the same way
        # (bench/onnx_model.py exports models/all-MiniLM-L6-v2 so)

Needs torch, transformers, onnx and onnxscript (pip install onnx onnxscript into .venv-ref). The weights are
the checkpoint's random ones: the outputs mean nothing, they only have to agree between runtimes.
"""
import os
import pathlib
import sys

import torch
from transformers import AutoModel

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests/data/tiny-models/bert-cross-encoder"


class MeanPooled(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def main():
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "tests/data/tiny-models/bert-onnx/model.onnx")
    out.parent.mkdir(parents=True, exist_ok=True)
    source = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else SOURCE
    model = MeanPooled(AutoModel.from_pretrained(source)).eval()
    ids = torch.tensor([[2, 15, 27, 3], [2, 40, 8, 3]], dtype=torch.int64)
    mask = torch.ones_like(ids)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    torch.onnx.export(model, (ids, mask), str(out), input_names=["input_ids", "attention_mask"],
                      output_names=["pooled"], dynamo=True, external_data=False,
                      dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}})
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
