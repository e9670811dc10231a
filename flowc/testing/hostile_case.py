"""The vocabulary of the hostile campaign (`flowc.testing.hostile`): a campaign's `Env`, one
hostile input's `Case`, and the ONNX helpers every family builds its models with
(`model_of`, `f32_tensor`). The families' modules (hostile.py, hostile_files.py,
hostile_struct.py) import these from here, so that none imports another for them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper


@dataclass(frozen=True)
class Env:
    """One campaign's fixed places: `work` (all cases live under it), `outside` (a folder no
    model may read; `secret.bin` there holds `marker`), `canary` (a file only an executed
    payload creates) and `base_artifact` (a real artifact the manifest family mutates)."""

    work: Path
    marker: bytes
    canary: Path

    @property
    def outside(self) -> Path:
        return self.work / "outside"

    @property
    def secret(self) -> Path:
        return self.outside / "secret.bin"

    @property
    def base_artifact(self) -> Path:
        return self.work / "base_artifact"

    @property
    def evil_library(self) -> Path:
        return self.work / "evil" / "libevil.so"


@dataclass
class Case:
    """One hostile input. `model` is saved as `model/model.onnx` (then compiled and run);
    `setup(folder, env)` adds files beside it; `artifact(folder, env)` instead builds an
    artifact folder to load. `what` is a one-line reproducer description."""

    family: str
    kind: str
    seed: int
    what: str
    model: onnx.ModelProto | None = None
    setup: Callable[[Path, Env], None] | None = None
    artifact: Callable[[Path, Env], None] | None = None
    must_fail: bool = False
    check: bool = True
    params: tuple = field(default_factory=tuple)

    @property
    def id(self) -> str:
        return f"{self.family}:{self.seed}"

    def key(self) -> str:
        """Equal keys mean identical inputs: the runner runs each key once."""
        h = hashlib.sha256(f"{self.family}|{self.kind}|{self.params!r}".encode())
        if self.model is not None:
            h.update(self.model.SerializeToString())
        return h.hexdigest()[:20]


def model_of(nodes, inputs, outputs, inits=(), opset: int | None = 18, name: str = "g",
             functions=()) -> onnx.ModelProto:
    """A model; `inputs` as (name, elem type, shape), `outputs` as (name, elem type, shape
    or None). `opset=None` leaves the opset imports empty."""
    graph = helper.make_graph(
        list(nodes), name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    imports = [] if opset is None else [helper.make_opsetid("", opset)]
    m = helper.make_model(graph, opset_imports=imports, functions=list(functions))
    if opset is None:
        del m.opset_import[:]
    return m


def f32_tensor(name: str, shape, rng: np.random.Generator | None = None) -> TensorProto:
    rng = rng or np.random.default_rng(0)
    return helper.make_tensor(name, TensorProto.FLOAT, list(shape),
                              rng.standard_normal(int(np.prod(shape))).astype(np.float32))
