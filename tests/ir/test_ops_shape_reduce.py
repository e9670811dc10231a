"""Shape and reduction ops against onnx.reference, through one-node ONNX models.

Shape-like operands are initializers, so flowc's type rules see them as constants and must
infer the exact result shape; each case also checks that static shape against the result.
"""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import import_onnx
from flowc.ir import FlowcError
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(3)
X = RNG.standard_normal((2, 3, 4)).astype(np.float32)
I64 = np.int64


def a(*values):
    return np.array(values, I64)


# (id, op, data inputs, constant inputs (None = absent), attributes)
CASES = [
    ("transpose", "Transpose", [X], [], {"perm": [2, 0, 1]}),
    ("transpose-default", "Transpose", [X], [], {}),
    ("concat-neg-axis", "Concat", [X, X[:, :, :2]], [], {"axis": -1}),
    ("squeeze", "Squeeze", [X[:, :1]], [a(1)], {}),
    ("squeeze-all", "Squeeze", [X[:1, :1]], [], {}),
    ("unsqueeze", "Unsqueeze", [X], [a(0, -1)], {}),
    ("flatten", "Flatten", [X], [], {"axis": 2}),
    ("flatten-0", "Flatten", [X], [], {"axis": 0}),
    ("flatten-neg", "Flatten", [X], [], {"axis": -1}),
    ("shape", "Shape", [X], [], {}),
    ("shape-slice", "Shape", [X], [], {"start": -2}),
    ("gather", "Gather", [X], [a(2, -1, 0)], {"axis": 2}),
    ("gather-2d", "Gather", [X], [np.array([[0, -1], [1, 1]], I64)], {"axis": 1}),
    ("gather-scalar", "Gather", [X], [np.array(1, I64)], {"axis": 0}),
    ("slice", "Slice", [X], [a(0, 1), a(2, 100), a(0, 2), a(1, 2)], {}),
    ("slice-neg-step", "Slice", [X], [a(-1), a(-100), a(2), a(-2)], {}),
    ("slice-empty", "Slice", [X], [a(2), a(1), a(1)], {}),
    ("expand", "Expand", [X[:, :1]], [a(2, 3, 4)], {}),
    ("expand-rank", "Expand", [X[0, 0]], [a(5, 1, 4)], {}),
    ("split-sizes", "Split", [X], [a(1, 3)], {"axis": 2}),
    ("split-num", "Split", [X], [], {"axis": 1, "num_outputs": 2}),
    ("pad-constant", "Pad", [X], [a(0, 1, 2, 0, 0, 1), np.array(1.5, np.float32)], {}),
    ("pad-reflect", "Pad", [X], [a(0, 0, 2, 0, 0, 1)], {"mode": "reflect"}),
    ("pad-edge-axes", "Pad", [X], [a(1, 2), None, a(-1)], {"mode": "edge"}),
    ("tile", "Tile", [X], [a(1, 2, 3)], {}),
    ("range", "Range", [], [np.array(1.0, np.float32), np.array(4.0, np.float32),
                            np.array(0.75, np.float32)], {}),
    ("range-int-down", "Range", [], [np.array(10, I64), np.array(2, I64), np.array(-3, I64)],
     {}),
    ("constant-of-shape", "ConstantOfShape", [], [a(2, 3)],
     {"value": numpy_helper.from_array(np.array([7], np.int32))}),
    ("trilu-upper", "Trilu", [X], [np.array(1, I64)], {}),
    ("trilu-lower", "Trilu", [X], [], {"upper": 0}),
    ("reshape", "Reshape", [X], [a(0, -1)], {}),
    ("reduce-sum", "ReduceSum", [X], [a(1)], {}),
    ("reduce-sum-all", "ReduceSum", [X], [], {"keepdims": 0}),
    ("reduce-sum-noop", "ReduceSum", [X], [], {"noop_with_empty_axes": 1}),
    ("reduce-mean", "ReduceMean", [X], [a(-1, 0)], {"keepdims": 0}),
    ("reduce-max", "ReduceMax", [X], [a(2)], {}),
    ("reduce-min", "ReduceMin", [X], [a(0)], {"keepdims": 0}),
    ("reduce-prod", "ReduceProd", [X], [a(1, 2)], {}),
    ("reduce-sum-empty-dim", "ReduceSum", [X[:, :0]], [a(1)], {}),
    ("argmax", "ArgMax", [X], [], {"axis": 1}),
    ("argmin-last", "ArgMin", [np.array([[1, 0, 0], [2, 2, 1]], np.float32)], [],
     {"axis": 1, "keepdims": 0, "select_last_index": 1}),
]


def one_node_model(op, data, consts, attrs, n_outputs=1):
    names, inits, inputs = [], [], []
    for i, arr in enumerate(data):
        names.append(f"x{i}")
        inputs.append(helper.make_tensor_value_info(f"x{i}", helper.np_dtype_to_tensor_dtype(
            arr.dtype), arr.shape))
    for i, arr in enumerate(consts):
        if arr is None:
            names.append("")
            continue
        names.append(f"c{i}")
        inits.append(numpy_helper.from_array(arr, f"c{i}"))
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, name="node", **attrs)
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_onnx_reference(case):
    _, op, data, consts, attrs = case
    n_outputs = 2 if op == "Split" else 1
    model = one_node_model(op, data, consts, attrs, n_outputs)
    feeds = {f"x{i}": arr for i, arr in enumerate(data)}
    expected = ReferenceEvaluator(model).run(None, feeds)
    graph = import_onnx(model)
    results = interpret(graph, feeds)
    node = graph.nodes[-1]
    for i, want in enumerate(expected):
        got = results[f"y{i}"]
        assert got.dtype == want.dtype
        assert_close(got, want, "reduction", max((a.size for a in data), default=1))
        assert node.types[i].shape == want.shape  # static inference was exact


@pytest.mark.parametrize("op, data, consts, attrs, message", [
    ("Transpose", [X], [], {"perm": [0, 0, 1]},
     "perm must be a permutation of the 3 axes 0..2, found [0, 0, 1]"),
    ("Concat", [X, X[0]], [], {"axis": 0}, "operand #1 (f32[3,4]) has rank 2, expected rank 3"),
    ("Gather", [X], [a(0)], {"axis": 3}, "axis 3 is out of range for rank 3"),
    ("ReduceSum", [X], [a(5)], {}, "axis 5 is out of range for rank 3"),
    ("Squeeze", [X], [a(1)], {}, "cannot squeeze axis 1 of f32[2,3,4]: its size is 3"),
    ("Split", [X], [a(1, 1)], {"axis": 1}, "split sizes [1, 1] sum to 2, expected dim 1 = 3"),
])
def test_type_errors_name_the_node(op, data, consts, attrs, message):
    model = one_node_model(op, data, consts, attrs, 2 if op == "Split" else 1)
    with pytest.raises(FlowcError) as info:
        import_onnx(model)
    assert f"node 'node' ({op})" in str(info.value)
    assert message in str(info.value)


def test_gather_index_out_of_range_at_import_and_at_run_time():
    with pytest.raises(FlowcError, match="index 4 is out of range \\[-4, 3\\] for axis 2"):
        import_onnx(one_node_model("Gather", [X], [a(4)], {"axis": 2}))   # a constant
    g = import_onnx(one_node_model("Gather", [X, a(4)], [], {"axis": 2}))   # an input
    with pytest.raises(FlowcError, match="an index is out of range \\[-4, 3\\] for axis 2"):
        interpret(g, {"x0": X, "x1": a(4)})


def test_symbolic_dims_flow_through():
    model = one_node_model("Transpose", [X], [], {"perm": [2, 0, 1]})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    assert str(import_onnx(model).nodes[-1].types[0]) == "f32[4,N,3]"
    model = one_node_model("ReduceSum", [X], [a(1)], {})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    assert str(import_onnx(model).nodes[-1].types[0]) == "f32[N,1,4]"


_ = onnx  # the models above are onnx protos
