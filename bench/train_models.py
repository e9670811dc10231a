"""The training workloads of bench/train.py, defined once as numpy parameters and data.

Each workload is a forward model, a loss and an optimizer with fixed hyperparameters:
- `mlp`: batch 64, 784 -> 1024 -> 1024 -> 10 with ReLU, softmax cross-entropy on int64
  labels, SGD with momentum 0.9, lr 0.01;
- `bert_layer`: one BERT-base encoder layer (hidden 768, 12 heads, FFN 3072 with exact
  GELU, post-layer-norm residuals), batch 2, sequence 128, MSE against a fixed target of the
  output's shape, AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.01);
- `cnn`: a small ResNet-style CNN on batch 8 of 3x64x64 images: a 3x3 stem conv to 16
  channels, a residual block (two 3x3 convs, identity skip), a stride-2 3x3 conv to 32
  channels, a second residual block, global average pooling and a linear layer to 10
  classes (ReLU after each conv and each skip sum, no normalization), softmax
  cross-entropy, Adam (lr 1e-3, betas 0.9/0.999, eps 1e-8).

`parameters(name)` and `data(name)` give the same float32 arrays to every engine (seeded), so
their losses can be compared step by step. The engines build the model in their own terms
(bench/train_engines.py); the parameter names follow torch's `state_dict` of those models.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np


@dataclass(frozen=True)
class Workload:
    name: str
    loss: str  # "cross-entropy" or "mse"
    optimizer: str  # flowc's spec form; the engines map it onto torch.optim / optax
    shapes: dict[str, tuple[int, ...]]  # parameter name -> shape (torch layout)
    batch: int


MLP_DIMS = (784, 1024, 1024, 10)
BERT = {"hidden": 768, "heads": 12, "ffn": 3072, "seq": 128}


def _mlp_shapes() -> dict[str, tuple[int, ...]]:
    shapes = {}
    for i, (n_in, n_out) in enumerate(pairwise(MLP_DIMS), 1):
        shapes[f"fc{i}.weight"] = (n_out, n_in)
        shapes[f"fc{i}.bias"] = (n_out,)
    return shapes


def _bert_shapes() -> dict[str, tuple[int, ...]]:
    h, f = BERT["hidden"], BERT["ffn"]
    shapes = {}
    for name, (n_out, n_in) in {"q": (h, h), "k": (h, h), "v": (h, h), "o": (h, h),
                                "up": (f, h), "down": (h, f)}.items():
        shapes[f"{name}.weight"] = (n_out, n_in)
        shapes[f"{name}.bias"] = (n_out,)
    for norm in ("norm1", "norm2"):
        shapes[f"{norm}.weight"] = (h,)
        shapes[f"{norm}.bias"] = (h,)
    return shapes


# cnn convs: name -> (in channels, out channels, stride, output size); all 3x3, padding 1
CNN = {"stem": (3, 16, 1, 64), "b1c1": (16, 16, 1, 64), "b1c2": (16, 16, 1, 64),
       "down": (16, 32, 2, 32), "b2c1": (32, 32, 1, 32), "b2c2": (32, 32, 1, 32)}
CNN_CLASSES = 10


def _cnn_shapes() -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for name, (c_in, c_out, _, _) in CNN.items():
        shapes[f"{name}.weight"] = (c_out, c_in, 3, 3)
        shapes[f"{name}.bias"] = (c_out,)
    shapes["fc.weight"] = (CNN_CLASSES, CNN["b2c2"][1])
    shapes["fc.bias"] = (CNN_CLASSES,)
    return shapes


WORKLOADS = {
    "mlp": Workload("mlp", "cross-entropy", "sgd{lr=0.01,momentum=0.9}", _mlp_shapes(), 64),
    "bert_layer": Workload("bert_layer", "mse",
                           "adamw{lr=1e-4,beta1=0.9,beta2=0.999,eps=1e-8,weight_decay=0.01}",
                           _bert_shapes(), 2),
    "cnn": Workload("cnn", "cross-entropy", "adam{lr=1e-3,beta1=0.9,beta2=0.999,eps=1e-8}",
                    _cnn_shapes(), 8),
}


def parameters(name: str) -> dict[str, np.ndarray]:
    """Seeded float32 parameters: weights uniform in +-1/sqrt(fan_in) (torch's Linear init
    range), biases small, layer-norm scales 1 and shifts 0."""
    rng = np.random.default_rng(0)
    out = {}
    for key, shape in WORKLOADS[name].shapes.items():
        if key.startswith("norm"):
            fill = 1.0 if key.endswith("weight") else 0.0
            out[key] = np.full(shape, fill, dtype=np.float32)
            continue
        weight = shape if len(shape) > 1 else WORKLOADS[name].shapes[
            key.replace("bias", "weight")]
        fan_in = int(np.prod(weight[1:]))
        bound = 1.0 / np.sqrt(fan_in)
        out[key] = rng.uniform(-bound, bound, shape).astype(np.float32)
    return out


def data(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(input, labels or target) of one fixed batch."""
    rng = np.random.default_rng(1)
    w = WORKLOADS[name]
    if name == "mlp":
        x = rng.standard_normal((w.batch, MLP_DIMS[0])).astype(np.float32)
        return x, rng.integers(0, MLP_DIMS[-1], w.batch).astype(np.int64)
    if name == "cnn":
        x = rng.standard_normal((w.batch, 3, 64, 64)).astype(np.float32)
        return x, rng.integers(0, CNN_CLASSES, w.batch).astype(np.int64)
    shape = (w.batch, BERT["seq"], BERT["hidden"])
    return (rng.standard_normal(shape).astype(np.float32),
            rng.standard_normal(shape).astype(np.float32))


def flops_per_step(name: str) -> float:
    """Matmul and conv FLOPs of one training step (forward x3: forward, and backward's two
    products per matmul or conv), the figure GFLOP/s is computed from."""
    w = WORKLOADS[name]
    if name == "mlp":
        fwd = sum(2 * w.batch * a * b for a, b in pairwise(MLP_DIMS))
    elif name == "cnn":
        fwd = sum(2 * w.batch * c_out * size * size * c_in * 9
                  for c_in, c_out, _, size in CNN.values())
    else:
        t, h, f, s = w.batch * BERT["seq"], BERT["hidden"], BERT["ffn"], BERT["seq"]
        fwd = 2 * t * h * h * 4 + 2 * t * h * f * 2 + 2 * 2 * w.batch * s * s * h
    return 3.0 * fwd
