"""ONNX export of a random recipe (see `graphgen`), run by onnxruntime.

Only the ops the generator makes are exported, each to its registry `onnx` name at opset
18 (reduce axes as an input); constants become initializers. A recipe with another op
raises NotImplementedError, which the differential runner treats as "no ONNX twin".
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops import OPS
from flowc.testing.graphgen import Recipe, build

OPSET = 18
_NOT_IN_OPSET = {"gelu"}   # ONNX Gelu is opset 20; onnxruntime at 18 has no such op


def to_onnx(recipe: Recipe):
    """The ONNX ModelProto computing the same outputs as `build(recipe)`."""
    from onnx import helper, numpy_helper

    graph = build(recipe)
    if graph is None:
        raise ValueError("the recipe is ill typed")
    nodes, inits, inputs = [], [], []
    node_of = dict(zip((j for j, s in enumerate(recipe.steps) if s.op != "input"), graph.nodes,
                       strict=True))
    dtypes = {j: (str(s.data.dtype) if s.op == "input" else node_of[j].types[0].dtype.name)
              for j, s in enumerate(recipe.steps)}
    for i, step in enumerate(recipe.steps):
        name = f"x{i}" if step.op == "input" else f"v{i}"
        args = [f"x{a}" if recipe.steps[a].op == "input" else f"v{a}" for a in step.args]
        if step.op == "input":
            inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(step.data.dtype), step.data.shape))
        elif step.op == "constant":
            inits.append(numpy_helper.from_array(step.data, name))
        elif step.op in _NOT_IN_OPSET or OPS[step.op].onnx is None:
            raise NotImplementedError(f"no ONNX export of '{step.op}'")
        elif step.op.startswith("reduce") and dtypes[step.args[0]] == "bool":
            raise NotImplementedError("ONNX reductions take no bool tensors")
        else:
            attrs = dict(step.attrs)
            if step.op == "cast":
                attrs["to"] = helper.np_dtype_to_tensor_dtype(attrs["to"].np)
            if step.op == "transpose":
                attrs["perm"] = list(attrs["perm"])
            nodes.append(helper.make_node(OPS[step.op].onnx, args, [name], **attrs))
    outputs = []
    for k, idx in enumerate(recipe.outputs):
        src = f"x{idx}" if recipe.steps[idx].op == "input" else f"v{idx}"
        nodes.append(helper.make_node("Identity", [src], [f"y{k}"]))
        t = graph.outputs[k][1].type
        outputs.append(helper.make_tensor_value_info(
            f"y{k}", helper.np_dtype_to_tensor_dtype(t.dtype.np), None))
    model = helper.make_model(helper.make_graph(nodes, "random", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def run_onnxruntime(recipe: Recipe, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of the recipe's ONNX export under onnxruntime's CPU provider."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(to_onnx(recipe).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs), strict=True))
