"""A training artifact's step and parameters (the `Model` methods of the same names).

A training artifact (`flowc compile MODEL.onnx --train ...`) has a `training` section in
its manifest: the loss, the optimizer spec, the trained `parameters` (variable names), the
`labels` input (name, dtype, shape) and, for cross-entropy, the number of `classes`. It
exports two entries over one context: `run` (the model's inputs -> its outputs, on the
current weights) and `train_step`, which takes the model's inputs and the labels and
returns `loss`, updating the parameters and the optimizer's state in place.

Contract (standard library, numpy and `flowc.runtime` only):
- `train_step(model, args, kwargs) -> float`: the model's inputs by position or name, the
  labels last (or `labels=`); checked before anything runs: the inputs as `run` checks
  them, the labels' dtype exactly (no casts: int64 for cross-entropy) and shape here, and
  each label in [0, classes) by the C runtime's train_step entry (one implementation for
  C and Python: a RuntimeStatusError whose message names the first bad label and its
  index), and nothing changes. Returns the step's loss (computed before the update) as a
  float.
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
        entry = (" (its train_step entry runs with Model.run_entry('train_step', ...))"
                 if "train_step" in model.entries else "")
        raise ArtifactError(f"{model.name}: not a training artifact (compile an ONNX model "
                            "with `flowc compile MODEL.onnx --train --loss ... --optimizer ...`)"
                            + entry)
    return training


def train_step(model: Any, args: tuple, kwargs: dict[str, Any]) -> float:
    training = _training(model)
    spec = training["labels"]
    name = spec["name"]
    entry = model.entries.get("train_step")
    inputs = [t["name"] for t in entry["inputs"]] if entry else []
    if inputs != [*(n for n, _, _ in model.inputs), name]:
        raise ArtifactError(f"{model.name}: the train_step entry takes {inputs}, not the "
                            "model's inputs and the labels; recompile the artifact")
    if name not in kwargs and len(args) == len(model.inputs) + 1:
        *args, kwargs[name] = args
    labels = kwargs.pop(name, None)
    if labels is None:
        raise ArtifactError(f"{model.name}: train_step takes the model's inputs and then the "
                            f"labels ('{name}', {spec['dtype']}{spec['shape']})")
    labels = _check_labels(model.name, np.asarray(labels), spec)
    arrays = model._feeds(tuple(args), kwargs)
    out = entry["outputs"][0]
    loss = np.zeros(out["shape"], numpy_dtype(out["dtype"]))
    model._call([*arrays, labels], [loss.ctypes.data], entry="train_step")
    return float(loss)


def _check_labels(model: str, labels: np.ndarray, spec: dict[str, Any]) -> np.ndarray:
    """`labels` as a C-contiguous array, after checking their dtype and shape."""
    want = numpy_dtype(spec["dtype"])
    if labels.dtype != want:
        raise ArtifactError(f"{model}: labels are {labels.dtype}, expected {want} "
                            f"(shape {tuple(spec['shape'])})")
    if labels.shape != tuple(spec["shape"]):
        raise ArtifactError(f"{model}: labels have shape {labels.shape}, expected "
                            f"{tuple(spec['shape'])}")
    return np.ascontiguousarray(labels)


def parameters(model: Any) -> dict[str, np.ndarray]:
    names = _training(model)["parameters"]
    values = model.variables()
    return {name: values[name] for name in names}
