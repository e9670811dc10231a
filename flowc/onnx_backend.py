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
"CPU:interpret" runs the reference interpreter. Both pass 1830 of the 1833 in-scope node
tests (bench/results/onnx_node_tests.md; of the other 3, two have string inputs the
importer refuses, and onnx's runner cannot compare the third's sequence of scalars).

A model with sequences or optionals (in its inputs, outputs or ops) is imported on its
first run, bound to what it is fed (`import_onnx_model(bind=)`: sequences resolve at
import), and again for each new feed structure (sequence lengths and element shapes,
empty optionals, the values of small int and bool inputs); its sequence results come back
as lists of arrays, an empty optional as None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from flowc.frontend.onnx import BIND_MAX_ELEMENTS, ImportedOnnx, import_onnx, import_onnx_model
from flowc.frontend.onnx_sequence import uses_sequences
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


def _structured(model: onnx.ModelProto) -> bool:
    g = model.graph
    return uses_sequences(g) or any(v.type.WhichOneof("value") != "tensor_type"
                                    for v in [*g.input, *g.output])


def _structure(fed: Any) -> Any:
    """What of a feed a bound import depends on (see the module docstring)."""
    if fed is None:
        return None
    if isinstance(fed, list | tuple):
        return tuple((np.asarray(a).dtype.str, np.asarray(a).shape) for a in fed)
    a = np.asarray(fed)
    if a.dtype.kind in "biu" and a.size <= BIND_MAX_ELEMENTS:
        return (a.dtype.str, a.shape, a.tobytes())
    return "tensor"


class BoundRep(BackendRep):
    """A model with sequences or optionals, imported per feed structure (module docstring)."""

    def __init__(self, model: onnx.ModelProto, engine: Engine, dims: Any):
        self.model, self.engine, self.dims = model, engine, dims
        initializers = {t.name for t in model.graph.initializer}
        self.inputs = [i.name for i in model.graph.input if i.name not in initializers]
        self._runs: dict[tuple, tuple[ImportedOnnx, Run]] = {}

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        feeds = dict(inputs) if isinstance(inputs, dict) else dict(
            zip(self.inputs, [inputs] if isinstance(inputs, np.ndarray) else inputs,
                strict=False))
        key = tuple((k, _structure(v)) for k, v in sorted(feeds.items()))
        if key not in self._runs:
            imported = import_onnx_model(self.model, bind=feeds)
            self._runs[key] = (imported, self.engine(imported.graph, dims=self.dims))
        imported, run = self._runs[key]
        flat: dict[str, np.ndarray] = {}
        for name, fed in feeds.items():
            if isinstance(fed, list | tuple):
                flat.update((f"{name}.{i}", a) for i, a in enumerate(fed))
            elif fed is not None:
                flat[name] = fed
        results = run(flat) if imported.graph.outputs else {}
        return tuple(form if form is None else results[form] if isinstance(form, str)
                     else [results[n] for n in form] for form in imported.forms.values())


class FlowcBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any
                ) -> FlowcRep | BoundRep:
        if not cls.supports_device(device):
            raise ValueError(f"flowc's ONNX backend runs on {', '.join(ENGINES)}, not {device}")
        if _structured(model):
            return BoundRep(model, ENGINES[device], kwargs.get("dims"))
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
