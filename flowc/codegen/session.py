"""Compile-on-first-run: a graph compiled for the shapes it is fed, then run as an artifact.

Contract: `CompiledSession(graph, target=None, threads=1, cache=None).run(feeds) ->
{output: array}`
compiles `graph` (`driver.compile`) specialized to the feeds' dtypes and shapes
(`bind.specialize`), loads the artifact (`flowc.runtime.load`) and runs it; artifacts are
cached by the feeds' signature in a private temporary directory removed by `close()`. When
some result shape depends on the values of inputs (a Reshape whose shape is an input, a
Range whose bounds are: `bind.value_dependent_inputs` finds them from the registry's type
rules), those inputs, when small (at most FOLD_MAX_ELEMENTS elements), are folded into
constants and become part of the cache key, so each distinct value compiles once: XLA's
compile-time constant inputs. Compiles go through the compile cache (`cache`, as
`driver.compile` takes it: None, the environment's), so kernels already compiled, by this
session or any other compile, are not compiled again. This is the ONNX backend's "CPU"
(and "CPU:compiled") engine.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flowc.codegen.driver import compile as compile_model
from flowc.codegen.plan.bind import specialize, value_dependent_inputs
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph
from flowc.runtime.loader import Model, load

FOLD_MAX_ELEMENTS = 64  # inputs up to this size may be folded into constants


def _signature(feeds: Mapping[str, np.ndarray], fold: tuple[str, ...]) -> tuple:
    return tuple((name, a.dtype.str, a.shape, a.tobytes() if name in fold else None)
                 for name, a in sorted(feeds.items()))


class CompiledSession:
    def __init__(self, graph: Graph, target: Any = None, threads: int = 1, cache: Any = None):
        self.graph = graph
        self.target = target
        self.threads = threads
        self.cache = cache
        self._dir = tempfile.TemporaryDirectory(prefix="flowc-session-")
        self._models: dict[tuple, Model] = {}
        self._fold: tuple[str, ...] | None = None  # decided on the first compile

    def _foldable(self, feeds: Mapping[str, np.ndarray]) -> tuple[str, ...]:
        """The inputs whose values decide result shapes and are small enough to fold (a
        large one is upstream only through its shape, or cannot be folded anyway)."""
        typed = specialize(self.graph, feeds)
        return tuple(n for n in value_dependent_inputs(*typed.nodes)
                     if feeds[n].size <= FOLD_MAX_ELEMENTS)

    def _compile(self, feeds: Mapping[str, np.ndarray], fold: tuple[str, ...]) -> Model:
        out = Path(self._dir.name) / f"a{len(self._models)}"
        compile_model(specialize(self.graph, feeds, fold), out, target=self.target,
                      batch=None, name="model", cache=self.cache)
        return load(out, threads=self.threads)

    def model_for(self, feeds: Mapping[str, np.ndarray]) -> Model:
        """The artifact for these feeds, compiled on first use."""
        if self._fold is None:
            try:
                model = self._compile(feeds, ())
                self._fold = ()
            except FlowcError as exc:
                fold = self._foldable(feeds)
                if "static shape" not in str(exc) or not fold:
                    raise
                model = self._compile(feeds, fold)
                self._fold = fold
            self._models[_signature(feeds, self._fold)] = model
        key = _signature(feeds, self._fold)
        if key not in self._models:
            self._models[key] = self._compile(feeds, self._fold)
        return self._models[key]

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        model = self.model_for(arrays)
        names = {name for name, _, _ in model.inputs}
        return model.run(**{k: v for k, v in arrays.items() if k in names})

    def close(self) -> None:
        for model in self._models.values():
            model.close()
        self._models.clear()
        self._dir.cleanup()
