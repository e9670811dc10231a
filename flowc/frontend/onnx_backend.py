"""An `onnx.backend.base.Backend` for flowc, so ONNX's own test runner drives it.

`prepare(model, device)` imports the model (errors are the importer's) and hands the graph
to the engine registered for `device` in `ENGINES`; `BackendRep.run(inputs)` runs it.

`ENGINES` maps a device name to a factory `engine(graph) -> run(feeds) -> {output: array}`:
the factory does any per-model work once (the compiled CPU path compiles there), and `run`
is called per input set. "CPU" and "CPU:interpret" run the reference interpreter;
"CPU:compiled" compiles the model to an artifact for the shapes it is fed and runs it with
the runtime (`flowc.codegen.session`). The interpreter stays the default "CPU" while the
compiled path passes fewer node tests (bench/results/onnx_node_tests.md).
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
Engine = Callable[[Graph], Run]


def interpreter_engine(graph: Graph) -> Run:
    """The reference interpreter: nothing to prepare; each run interprets the graph."""
    return lambda feeds: interpret(graph, feeds)


def compiled_engine(graph: Graph) -> Run:
    """The compiled path: one artifact per fed shape signature, run by the runtime."""
    from flowc.codegen.session import CompiledSession

    return CompiledSession(graph).run


ENGINES: dict[str, Engine] = {
    "CPU": interpreter_engine,
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
        return FlowcRep(graph, ENGINES[device](graph))

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
