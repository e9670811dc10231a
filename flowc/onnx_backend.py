"""An `onnx.backend.base.Backend` for flowc, so ONNX's own test runner drives it.

`prepare(model, device)` imports the model (errors are the importer's) and hands the graph
to the engine registered for `device` in `ENGINES`; `BackendRep.run(inputs)` runs it.

`ENGINES` maps a device name to a factory `engine(graph, dims=None) -> run(feeds) ->
{output: array}`: the factory does any per-model work once, and `run` is called per input
set; `prepare(model, device, dims={"N": (1, 64)})` passes the bounds of symbolic dims.
"CPU" and "CPU:compiled" are the compiled path: `flowc.codegen.session.CompiledSession`
compiles a model whose inputs have symbolic dims once, with those dims bounded, and runs
every fed shape on that one artifact ([12]); other models (and what the dynamic compile
refuses) get an artifact for the dtypes and shapes they are fed (on the first run of each
shape signature; inputs whose values decide result shapes, such as a Range's bounds, or
that a kernel needs at compile time, such as a CumSum's axis, are folded in as constants and
so are part of the signature); each runs with the runtime; compiled
kernels go through the compile cache (`$FLOWC_CACHE_DIR`, flowc/codegen/cache.py).
"CPU:interpret" runs the reference interpreter. Both pass 1612 of the 1616 in-scope node
tests (bench/results/onnx_node_tests.md; the other 4 have string, sequence or optional
inputs the importer refuses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from flowc.frontend.onnx import import_onnx
from flowc.ir import Graph
from flowc.ir.interpret import interpret

Run = Callable[[Mapping[str, np.ndarray]], Mapping[str, Any]]
Engine = Callable[..., Run]  # (graph, dims=None) -> run


def interpreter_engine(graph: Graph, dims: Mapping[str, tuple[int, int]] | None = None) -> Run:
    """The reference interpreter: nothing to prepare; each run interprets the graph (any
    shape: `dims` is not needed)."""
    return lambda feeds: interpret(graph, feeds)


def compiled_engine(graph: Graph, dims: Mapping[str, tuple[int, int]] | None = None) -> Run:
    """The compiled path, run by the runtime: one artifact for a model with symbolic input
    dims (bounded by `dims`, else by twice the first fed size, doubled as feeds pass it),
    else one per fed shape signature (flowc/codegen/session.py)."""
    from flowc.codegen.session import CompiledSession

    return CompiledSession(graph, dims=dims).run


ENGINES: dict[str, Engine] = {
    "CPU": compiled_engine,
    "CPU:interpret": interpreter_engine,
    "CPU:compiled": compiled_engine,
}


class FlowcRep(BackendRep):
    def __init__(self, graph: Graph, run: Run):
        self.graph = graph
        self._run = run

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            feeds = {n.name: a for n, a in zip(self.graph.inputs, arrays, strict=False)}
        results = self._run(feeds)
        return tuple(results[name] for name, _ in self.graph.outputs)


class FlowcBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> FlowcRep:
        if not cls.supports_device(device):
            raise ValueError(f"flowc's ONNX backend runs on {', '.join(ENGINES)}, not {device}")
        graph = import_onnx(model)
        return FlowcRep(graph, ENGINES[device](graph, dims=kwargs.get("dims")))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Sequence[np.ndarray],
                  device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device in ENGINES


prepare = FlowcBackend.prepare
run_model = FlowcBackend.run_model
supports_device = FlowcBackend.supports_device
