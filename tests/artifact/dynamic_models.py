"""Models of the dynamic-shape tests and bench ([12]): a BERT-like encoder layer exported
from torch with dynamic batch (N) and sequence (S) axes."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def encoder_onnx(torch: Any, path: Path, d: int = 32, hidden: int = 64) -> Path:
    """One encoder layer (single-head attention: q/k/v/o projections, softmax over keys,
    residual + layer_norm, a relu MLP, residual + layer_norm) of width `d`, exported to
    `path` with input x [N, S, d] and output y [N, S, d]."""
    nn = torch.nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.f1, self.f2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

        def forward(self, x):
            scores = self.q(x) @ self.k(x).transpose(1, 2) / d ** 0.5
            x = self.ln1(x + self.o(torch.softmax(scores, dim=-1) @ self.v(x)))
            return self.ln2(x + self.f2(torch.relu(self.f1(x))))

    torch.manual_seed(0)
    torch.onnx.export(Encoder().eval(), (torch.randn(2, 16, d),), str(path),
                      input_names=["x"], output_names=["y"], dynamo=False,
                      dynamic_axes={"x": {0: "N", 1: "S"}, "y": {0: "N", 1: "S"}})
    return path
