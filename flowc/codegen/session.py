"""Compile-on-first-run: a graph compiled for the shapes it is fed, then run as an artifact.

Contract: `CompiledSession(graph, target=None, threads=1, cache=None, dims=None).run(feeds)
-> {output: array}`
compiles `graph` (`driver.compile`) specialized to the feeds' dtypes and shapes
(`bind.specialize`), loads the artifact (`flowc.runtime.load`) and runs it; artifacts are
cached by the feeds' signature in a private temporary directory removed by `close()`. When
some result shape depends on the values of inputs (a Reshape whose shape is an input, a
Range whose bounds are: `bind.value_dependent_inputs` finds them from the registry's type
rules), those inputs, when small (at most FOLD_MAX_ELEMENTS elements), are folded into
constants and become part of the cache key, so each distinct value compiles once: XLA's
compile-time constant inputs; so are those a kernel needs at compile time (a CumSum's axis
input: the lowering rule says so with `context.CONST_NEEDED`). Compiles go through the
compile cache (`cache`, as `driver.compile` takes it: None, the environment's), so kernels
already compiled, by this session or any other compile, are not compiled again. This is
the ONNX backend's "CPU" (and "CPU:compiled") engine.

One artifact per model ([12]): a graph whose inputs have symbolic dims (plain symbols,
`N`, `S`) is compiled once with those dims bounded (`dims`: {name: (lo, hi)}; a symbol
not given gets 1..HEADROOM * its first fed size, and a later feed past that bound
recompiles with the bound doubled, or raised to the fed size: the arena, planned at the
bounds, stays within twice what the largest feed needs, and a growing size recompiles
about log2 times), and that artifact runs every fed shape in the bounds. What still binds
statically, one artifact per fed shape as above: a graph with no symbolic input dim (its
shapes are its signature) or with a `?` input dim; a feed with a size of 0, a fixed axis
fed another size or a size outside given bounds; and every feed of a graph the dynamic
compile refuses (an op without a kernel of run-time extents, an input whose values decide
result shapes, ...: the reason is `static_reason`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flowc.codegen.driver import compile as compile_model
from flowc.codegen.lower.context import CONST_NEEDED
from flowc.codegen.plan.bind import specialize, value_dependent_inputs
from flowc.ir.dims import is_symbol
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph
from flowc.ir.types import TensorType
from flowc.runtime.loader import Model, load

FOLD_MAX_ELEMENTS = 64  # inputs up to this size may be folded into constants
HEADROOM = 2  # a symbolic dim given no bound gets 1..HEADROOM * its first fed size


def _signature(feeds: Mapping[str, np.ndarray], fold: tuple[str, ...]) -> tuple:
    return tuple((name, a.dtype.str, a.shape, a.tobytes() if name in fold else None)
                 for name, a in sorted(feeds.items()))


def _static_reason(graph: Graph) -> str | None:
    """Why `graph` binds statically whatever it is fed, or None: every input a tensor,
    each dim an int or a plain symbol, some a symbol."""
    if not all(isinstance(node.types[0], TensorType) for node in graph.inputs):
        return "an input is not a tensor"
    dims = [d for node in graph.inputs for d in node.types[0].shape]
    if not all(isinstance(d, int) or is_symbol(d) for d in dims):
        return "an input dim is unknown (?) or an expression"
    return None if any(is_symbol(d) for d in dims) else "no input has a symbolic dim"


class CompiledSession:
    def __init__(self, graph: Graph, target: Any = None, threads: int = 1, cache: Any = None,
                 dims: Mapping[str, tuple[int, int]] | None = None):
        self.graph = graph
        self.target = target
        self.threads = threads
        self.cache = cache
        self.dims = dict(dims or {})
        self._dir = tempfile.TemporaryDirectory(prefix="flowc-session-")
        self._models: dict[tuple, Model] = {}
        self._fold: tuple[str, ...] | None = None  # decided on the first compile
        # the artifact with bounded dims, its bounds; why the graph binds statically
        self._dynamic: tuple[Model, dict[str, tuple[int, int]]] | None = None
        self.static_reason = _static_reason(graph)
        self.compiles = 0  # artifacts compiled so far

    def _sizes(self, feeds: Mapping[str, np.ndarray]) -> dict[str, int] | None:
        """Each symbol's fed size, or None when these feeds bind statically (see the
        module docstring)."""
        sizes: dict[str, int] = {}
        for node in self.graph.inputs:
            declared, array = node.types[0], feeds.get(node.name)
            if array is None or array.ndim != declared.rank:
                return None
            for d, size in zip(declared.shape, array.shape, strict=True):
                if (d != size if isinstance(d, int) else size < 1 or (
                        d in self.dims and not self.dims[d][0] <= size <= self.dims[d][1])):
                    return None
                if isinstance(d, str):
                    sizes.setdefault(d, size)
        return sizes

    def dynamic_model(self, feeds: Mapping[str, np.ndarray]) -> Model | None:
        """The artifact with bounded dims that runs these feeds (compiled, or recompiled
        with wider bounds, as needed), or None when they bind statically."""
        if self.static_reason is not None:
            return None
        sizes = self._sizes(feeds)
        if sizes is None:
            return None
        if self._dynamic is not None:
            model, bounds = self._dynamic
            if all(size <= bounds[k][1] for k, size in sizes.items()):
                return model
            grown = {k: self.dims.get(k, (1, max(2 * bounds[k][1], sizes[k])))
                     if sizes[k] > bounds[k][1] else bounds[k] for k in bounds}
            model.close()
        else:
            grown = {k: self.dims.get(k, (1, HEADROOM * size)) for k, size in sizes.items()}
        out = Path(self._dir.name) / f"d{self.compiles}"
        try:
            compile_model(self.graph, out, target=self.target, batch=None, name="model",
                          cache=self.cache, dims=grown)
        except FlowcError as exc:
            self.static_reason, self._dynamic = str(exc), None
            return None
        self.compiles += 1
        self._dynamic = (load(out, threads=self.threads), grown)
        return self._dynamic[0]

    def _foldable(self, feeds: Mapping[str, np.ndarray], static_too: bool
                  ) -> tuple[str, ...]:
        """The inputs whose values decide result shapes (with `static_too`, or that a kernel
        needs at compile time) and are small enough to fold (a large one is upstream only
        through its shape, or cannot be folded anyway)."""
        typed = specialize(self.graph, feeds)
        return tuple(n for n in value_dependent_inputs(*typed.nodes, static_too=static_too)
                     if feeds[n].size <= FOLD_MAX_ELEMENTS)

    def _compile(self, feeds: Mapping[str, np.ndarray], fold: tuple[str, ...]) -> Model:
        out = Path(self._dir.name) / f"a{len(self._models)}"
        compile_model(specialize(self.graph, feeds, fold), out, target=self.target,
                      batch=None, name="model", cache=self.cache)
        self.compiles += 1
        return load(out, threads=self.threads)

    def model_for(self, feeds: Mapping[str, np.ndarray]) -> Model:
        """The artifact for these feeds, compiled on first use."""
        if self._fold is None:
            try:
                model = self._compile(feeds, ())
                self._fold = ()
            except FlowcError as exc:
                constant = CONST_NEEDED in str(exc)
                fold = self._foldable(feeds, static_too=constant)
                if not (constant or "static shape" in str(exc)) or not fold:
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
        model = self.dynamic_model(arrays) or self.model_for(arrays)
        names = {name for name, _, _ in model.inputs}
        return model.run(**{k: v for k, v in arrays.items() if k in names})

    def close(self) -> None:
        for model in [*self._models.values(), *(self._dynamic or ())[:1]]:
            model.close()
        self._dynamic = None
        self._models.clear()
        self._dir.cleanup()
