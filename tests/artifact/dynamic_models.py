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


def cnn_onnx(torch: Any, path: Path, width: int = 8, size: int = 16) -> Path:
    """A small CNN (conv, batch norm, relu, max pool, conv, relu, global average pool,
    linear) exported to `path` with input x [N, 3, size, size] and output y [N, 10]."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(2 * width, 10)).eval()
    torch.onnx.export(model, (torch.randn(2, 3, size, size),), str(path), input_names=["x"],
                      output_names=["y"], dynamo=False,
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    return path
