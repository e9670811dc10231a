"""Shared helpers of the per-op tests: onnx.reference as the oracle, one-node flowc graphs."""

import numpy as np
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret


def onnx_reference(op, inputs, attrs=None, opset=18, n_out=1):
    """The outputs of a one-node ONNX model of `op` on `inputs` (arrays, or None for an
    absent operand), computed by onnx.reference."""
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in zip(names, inputs, strict=True) if n]
    out_infos = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs]
    model = helper.make_model(helper.make_graph([node], "g", infos, out_infos),
                              opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: a for n, a in zip(names, inputs, strict=True) if n}
    return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]


def single_node_graph(op, inputs, attrs=None, consts=()):
    """(graph, node) applying `op`; operands whose index is in `consts` are constant nodes,
    the rest graph inputs. Items of `inputs` are arrays, None (absent) or TensorTypes."""
    g = Graph()
    values = []
    for k, a in enumerate(inputs):
        if a is None:
            values.append(None)
        elif k in consts:
            values.append(g.append(make_node("constant", [], {"value": Tensor(a)})).out())
        else:
            t = a if isinstance(a, TensorType) else TensorType(a.dtype, a.shape)
            values.append(g.add_input(f"i{k}", t))
    n = g.append(make_node(op, values, attrs or {}))
    for i in range(len(n.types)):
        g.add_output(f"out{i}", n.out(i))
    return g, n


def flowc_single(op, inputs, attrs=None):
    """Interpret `op` on `inputs` (all graph inputs) and check the result against the
    node's inferred static type: shape and dtype."""
    g, n = single_node_graph(op, inputs, attrs)
    feeds = {f"i{k}": a for k, a in enumerate(inputs) if a is not None}
    y = interpret(g, feeds)["out0"]
    assert tuple(y.shape) == tuple(n.types[0].shape)
    assert y.dtype == n.types[0].dtype.np
    return y
