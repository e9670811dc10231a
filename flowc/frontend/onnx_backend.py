"""An `onnx.backend.base.Backend` for flowc, so ONNX's own test runner drives it.

`prepare(model)` imports the model (errors are the importer's); `BackendRep.run(inputs)`
runs it. Engines: the reference interpreter (`device="CPU"`, also `"CPU:interpret"`) and
the compiled path (`device="CPU:compiled"`: the model is compiled to an artifact for the
shapes it is fed and run by the runtime, `flowc.codegen.session`). The interpreter stays the
default while the compiled path passes fewer node tests (bench/results/onnx_node_tests.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from flowc.frontend.onnx import import_onnx
from flowc.ir import Graph
from flowc.ir.interpret import interpret

DEVICES = ("CPU", "CPU:interpret", "CPU:compiled")


class FlowcRep(BackendRep):
    def __init__(self, graph: Graph, compiled: bool = False):
        self.graph = graph
        self.session = None
        if compiled:
            from flowc.codegen.session import CompiledSession

            self.session = CompiledSession(graph)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            feeds = {n.name: a for n, a in zip(self.graph.inputs, arrays, strict=False)}
        if self.session is not None:
            results = self.session.run(feeds)
        else:
            results = interpret(self.graph, feeds)
        return tuple(results[name] for name, _ in self.graph.outputs)


class FlowcBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> FlowcRep:
        if not cls.supports_device(device):
            raise ValueError(f"flowc's ONNX backend runs on {', '.join(DEVICES)}, not {device}")
        return FlowcRep(import_onnx(model), compiled=device == "CPU:compiled")

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Sequence[np.ndarray],
                  device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device in DEVICES


prepare = FlowcBackend.prepare
run_model = FlowcBackend.run_model
supports_device = FlowcBackend.supports_device
