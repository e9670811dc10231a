"""A training artifact's step and parameters (the `Model` methods of the same names).

A training artifact (`flowc compile MODEL.onnx --train ...`) has a `training` section in
its manifest: the loss, the optimizer spec, the trained `parameters` (variable names), the
`labels` input (name, dtype, shape) and, for cross-entropy, the number of `classes`. Its
run performs one step: it takes the model's inputs and the labels and returns `loss`,
updating the parameters and the optimizer's state in place.

Contract (standard library, numpy and `flowc.runtime` only):
- `train_step(model, args, kwargs) -> float`: the model's inputs by position or name, the
  labels last (or `labels=`); the labels are checked before anything runs: their dtype
  exactly (no casts: int64 for cross-entropy), their shape, and for cross-entropy every
  label in [0, classes) — else a one-line ArtifactError naming the first bad label, and
  nothing changes. Returns the step's loss (computed before the update) as a float.
- `parameters(model)`: {parameter name: a numpy copy}, in the manifest's order.
- Either on an artifact without a `training` section is an ArtifactError saying how to
  make one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowc.runtime.abi import numpy_dtype
from flowc.runtime.errors import ArtifactError


def _training(model: Any) -> dict[str, Any]:
    training = model.manifest.get("training")
    if not training:
        raise ArtifactError(f"{model.name}: not a training artifact (compile an ONNX model "
                            "with `flowc compile MODEL.onnx --train --loss ... --optimizer ...`)")
    return training


def train_step(model: Any, args: tuple, kwargs: dict[str, Any]) -> float:
    training = _training(model)
    spec = training["labels"]
    name = spec["name"]
    if name not in kwargs and len(args) == len(model.inputs):
        *args, kwargs[name] = args
    labels = kwargs.get(name)
    if labels is None:
        raise ArtifactError(f"{model.name}: train_step takes the model's inputs and then the "
                            f"labels ('{name}', {spec['dtype']}{spec['shape']})")
    _check_labels(model.name, np.asarray(labels), spec, training.get("classes"))
    return float(model.run(*args, **kwargs)["loss"])


def _check_labels(model: str, labels: np.ndarray, spec: dict[str, Any],
                  classes: int | None) -> None:
    want = numpy_dtype(spec["dtype"])
    if labels.dtype != want:
        raise ArtifactError(f"{model}: labels are {labels.dtype}, expected {want} "
                            f"(shape {tuple(spec['shape'])})")
    if labels.shape != tuple(spec["shape"]):
        raise ArtifactError(f"{model}: labels have shape {labels.shape}, expected "
                            f"{tuple(spec['shape'])}")
    if classes is not None:
        bad = np.flatnonzero((labels < 0) | (labels >= classes))
        if bad.size:
            i = int(bad[0])
            raise ArtifactError(f"{model}: labels[{i}] is {int(labels.flat[i])}, outside "
                                f"[0, {classes}) ({bad.size} label(s) out of range)")


def parameters(model: Any) -> dict[str, np.ndarray]:
    names = _training(model)["parameters"]
    values = model.variables()
    return {name: values[name] for name in names}
