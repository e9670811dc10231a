"""One ONNX model run by every engine: flowc's reference interpreter, flowc's compiled
artifact (the ONNX backend's `CPU:compiled` engine, a `CompiledSession`) and onnxruntime.

The numerical tests (tests/numerics/) build small one-graph models with `model(...)` and
compare what `run(model, feeds)` returns per engine against each other or against an
exact (f64) answer, with the tolerances of `flowc.testing.tolerance`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper

ENGINES = ("interpret", "compiled", "onnxruntime")
OPSET = 18


def model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[tuple[str, int, Sequence[int]]],
          outputs: Sequence[tuple[str, int]], initializers: Sequence[onnx.TensorProto] = (),
          opset: int = OPSET) -> onnx.ModelProto:
    """A model of `nodes`; `inputs` as (name, TensorProto elem type, shape), outputs as
    (name, elem type) with the shape left to the engines."""
    graph = helper.make_graph(
        list(nodes), "numerics",
        [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_onnxruntime(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(m.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run(m: onnx.ModelProto, feeds: dict[str, np.ndarray],
        engines: Sequence[str] = ENGINES) -> dict[str, list[np.ndarray]]:
    """`m`'s outputs, in order, per engine name (a subset of ENGINES)."""
    from flowc.onnx_backend import FlowcBackend

    inputs = [feeds[i.name] for i in m.graph.input
              if i.name not in {t.name for t in m.graph.initializer}]
    results: dict[str, list[np.ndarray]] = {}
    for engine in engines:
        if engine == "onnxruntime":
            results[engine] = run_onnxruntime(m, feeds)
        else:
            out = FlowcBackend.run_model(m, inputs, device=f"CPU:{engine}")
            results[engine] = [np.asarray(v) for v in out]
    return results
