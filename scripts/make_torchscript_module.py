"""Saves the small TorchScript module that tests/torch_module uses: tests/data/torchscript/affine.pt.

    .venv/bin/python scripts/make_torchscript_module.py

y = relu(x @ W.T + b) with W = [[1, 2, 3, 4], [0, 1, 0, -1], [-1, 0, 0, 0]] and b = [0.5, -0.5, 0], so the
tests can compute the expected outputs by hand. A second method, `scale`, returns 2 * x.
"""
import pathlib

import torch


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 0.0, -1.0], [-1.0, 0.0, 0.0, 0.0]]))
            self.linear.bias.copy_(torch.tensor([0.5, -0.5, 0.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))

    @torch.jit.export
    def scale(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x


out = pathlib.Path(__file__).resolve().parent.parent / "tests/data/torchscript/affine.pt"
out.parent.mkdir(parents=True, exist_ok=True)
torch.jit.save(torch.jit.script(Affine().eval()), str(out))
print(f"wrote {out} ({out.stat().st_size} bytes)")
