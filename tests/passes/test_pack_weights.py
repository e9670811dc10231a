"""`pack-weights`: which matmuls and gemms get their constant B in column panels, that the
results stay the interpreter's, and packed_matmul's type errors."""

import numpy as np
import pytest

from flowc.ir import Graph, InferError, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.passes import PassManager, parse_pipeline

RNG = np.random.default_rng(5)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def dense_graph(op: str, a_shape, b: np.ndarray, c: np.ndarray | None, attrs: dict) -> Graph:
    g = Graph("dense")
    a = g.add_input("a", TensorType(str(np.dtype(b.dtype)).replace("float", "f"), a_shape))
    w = g.append(make_node("constant", [], {"value": Tensor(b)})).out()
    inputs = [a, w]
    if c is not None:
        inputs.append(g.append(make_node("constant", [], {"value": Tensor(c)})).out())
    g.add_output("y", g.append(make_node(op, inputs, attrs)).out())
    return g


def packed(graph: Graph, pipeline: str = "pack-weights") -> tuple[Graph, int]:
    manager = PassManager(parse_pipeline(pipeline))
    out = manager.run(graph)
    return out, manager.records[-1].stats.get("weights-packed", 0)


@pytest.mark.parametrize("op,a_shape,b_shape,c_shape,attrs,dtype,want", [
    ("matmul", (5, 40), (40, 64), None, {}, np.float32, 1),
    ("matmul", (2, 7, 40), (40, 96), None, {}, np.float32, 1),
    ("matmul", (5, 40), (40, 32), None, {}, np.float32, 0),  # one panel: B itself
    ("matmul", (5, 40), (40, 48), None, {}, np.float32, 0),  # N not whole panels
    ("matmul", (5, 40), (40, 32), None, {}, np.float64, 1),  # f64: panels of 16
    ("matmul", (40,), (40, 64), None, {}, np.float32, 0),  # rank-1 activation
    ("matmul", (5, 40), (40, 64), None, {}, np.int32, 0),
    ("gemm", (5, 40), (64, 40), (64,), {"transB": 1}, np.float32, 1),
    ("gemm", (5, 40), (40, 64), (5, 64), {"beta": 0.5}, np.float32, 1),
    ("gemm", (5, 40), (40, 64), None, {}, np.float32, 1),
    ("gemm", (40, 5), (40, 64), None, {"transA": 1}, np.float32, 0),
    ("gemm", (5, 40), (40, 64), (64,), {"alpha": 2.0}, np.float32, 0),
])
def test_which_nodes_are_packed_and_results_stay(op, a_shape, b_shape, c_shape, attrs, dtype,
                                                  want):
    b = rand(*b_shape, dtype=dtype) if dtype != np.int32 else RNG.integers(-3, 3, b_shape,
                                                                           dtype=np.int32)
    c = rand(*c_shape, dtype=dtype) if c_shape else None
    graph = dense_graph(op, a_shape, b, c, attrs)
    after, count = packed(graph)
    assert count == want
    assert any(n.op == "packed_matmul" for n in after.nodes) == bool(want)
    x = rand(*a_shape, dtype=dtype) if dtype != np.int32 else RNG.integers(-3, 3, a_shape,
                                                                           dtype=np.int32)
    got, expected = interpret(after, {"a": x})["y"], interpret(graph, {"a": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("other_use", ["add", "output", "as_a"])
def test_a_weight_read_otherwise_is_not_stored_twice(other_use):
    # packing B for the matmul would keep B too, for its other reader
    g = Graph("shared")
    a = g.add_input("a", TensorType("f32", (64, 64)))
    w = g.append(make_node("constant", [], {"value": Tensor(rand(64, 64))})).out()
    g.add_output("y", g.append(make_node("matmul", [a, w])).out())
    if other_use == "add":
        g.add_output("z", g.append(make_node("add", [a, w])).out())
    elif other_use == "output":
        g.add_output("z", w)
    else:
        g.add_output("z", g.append(make_node("matmul", [w, a])).out())
    after, count = packed(g)
    assert count == 0 and not any(n.op == "packed_matmul" for n in after.nodes)


def test_a_weight_two_matmuls_read_is_packed_once():
    g = Graph("shared")
    a = g.add_input("a", TensorType("f32", (5, 64)))
    w = g.append(make_node("constant", [], {"value": Tensor(rand(64, 64))})).out()
    for name in ("y", "z"):
        g.add_output(name, g.append(make_node("matmul", [a, w])).out())
    after, count = packed(g)
    assert count == 2
    after = PassManager(parse_pipeline("prune")).run(after)
    assert [n.types[0].shape for n in after.nodes if n.op == "constant"] == [(2, 64, 32)]


def test_options_bound_the_panels_and_k():
    graph = dense_graph("matmul", (5, 40), rand(40, 64), None, {})
    assert packed(graph, "pack-weights{panel_bytes=256}")[1] == 0  # N = 64 is one panel
    assert packed(graph, "pack-weights{max_k=32}")[1] == 0
    after, count = packed(graph, "pack-weights{panel_bytes=64}")
    assert count == 1
    assert [n.types[0].shape for n in after.nodes if n.op == "constant"] == [(4, 40, 16)]


@pytest.mark.parametrize("a_shape,p_shape,message", [
    ((5,), (2, 5, 4), "a must have rank >= 2, found f32[5]"),
    ((3, 5), (5, 8), "b_panels must have rank 3 ([N / NR, K, NR]), found f32[5,8]"),
    ((3, 5), (2, 6, 4), "contracting dims differ: a f32[3,5] has K=5, b_panels f32[2,6,4] "
                        "has K=6"),
])
def test_packed_matmul_type_errors_name_the_operands(a_shape, p_shape, message):
    g = Graph("bad")
    a = g.add_input("a", TensorType("f32", a_shape))
    p = g.add_input("p", TensorType("f32", p_shape))
    with pytest.raises(InferError) as info:
        g.append(make_node("packed_matmul", [a, p], name="dense/packed"))
    assert message in str(info.value)
    assert "packed_matmul" in str(info.value)


@pytest.mark.parametrize("bias_shape", [(4, 8), (2, 8), (8, 1), (1, 1, 8)])
def test_packed_matmul_bias_type_errors_name_the_operand(bias_shape):
    g = Graph("bad")
    a = g.add_input("a", TensorType("f32", (3, 5)))
    p = g.add_input("p", TensorType("f32", (2, 5, 4)))
    c = g.add_input("c", TensorType("f32", bias_shape))
    with pytest.raises(InferError) as info:
        g.append(make_node("packed_matmul", [a, p, c], name="dense/packed"))
    dims = ",".join(map(str, bias_shape))
    assert str(info.value) == ("'dense/packed' (packed_matmul): bias must be [N] (leading "
                               "dims of 1 allowed) with N=8, or the result's shape, found "
                               f"f32[{dims}]")


def _biased(a_shape, c_shape, op: str = "matmul", uses: int = 1) -> Graph:
    """add(matmul(a, B), c) of a constant B [40, 64] (the product also an output when
    `uses` is 2), or gemm(a, B, c) when `op` is gemm."""
    g = Graph("biased")
    a = g.add_input("a", TensorType("f32", a_shape))
    w = g.append(make_node("constant", [], {"value": Tensor(rand(40, 64))})).out()
    c = g.append(make_node("constant", [], {"value": Tensor(rand(*c_shape))})).out()
    if op == "gemm":
        g.add_output("y", g.append(make_node("gemm", [a, w, c])).out())
        return g
    product = g.append(make_node("matmul", [a, w])).out()
    g.add_output("y", g.append(make_node("add", [c, product])).out())
    if uses == 2:
        g.add_output("p", product)
    return g


@pytest.mark.parametrize("graph,absorbed", [
    (_biased((5, 40), (64,)), True),
    (_biased((2, 7, 40), (1, 1, 64)), True),    # a 3-D activation, its bias [1, 1, N]
    (_biased((5, 40), (64,), "gemm"), True),
    (_biased((5, 40), (5, 64), "gemm"), True),  # a full C: the kernel's init too
    (_biased((5, 40), (5, 64)), True),
    (_biased((5, 40), (5, 1), "gemm"), False),   # a column C: stays an add
    (_biased((5, 40), (1, 1, 64)), False),       # the add broadcasts the product up
    (_biased((5, 40), (64,), uses=2), False),    # the product is read otherwise too
], ids=["2d", "3d", "gemm", "gemm-full-c", "full-c", "gemm-column-c", "broadcast-up",
        "shared"])
def test_a_row_bias_or_full_c_becomes_the_packed_matmuls_third_operand(graph, absorbed):
    """The kernel then starts C from it: no pass over C to add it."""
    after = PassManager(parse_pipeline("pack-weights,prune")).run(graph)
    node = next(n for n in after.nodes if n.op == "packed_matmul")
    assert (len(node.inputs) == 3) == absorbed
    assert any(n.op == "add" for n in after.nodes) != absorbed
    x = rand(*graph.inputs[0].out().type.shape)
    got, want = interpret(after, {"a": x}), interpret(graph, {"a": x})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,a_shape,attrs", [
    ("matmul", ("N", 40), {}),
    ("matmul", ("N", "S", 40), {}),
    ("gemm", ("N", 40), {"transB": 1}),
])
def test_rows_given_at_run_time_are_packed_too(op, a_shape, attrs):
    """[12]: a dynamic kernel takes a packed B (rows in static blocks), so a matmul whose
    leading dims are symbolic gets its weight in panels as a static one does."""
    b = rand(64, 40) if attrs else rand(40, 64)
    after, count = packed(dense_graph(op, a_shape, b, rand(64) if attrs else None, attrs))
    assert count == 1
    (node,) = [n for n in after.nodes if n.op == "packed_matmul"]
    assert node.types[0] == TensorType("f32", (*a_shape[:-1], 64))


def rnn_graph(op: str, batch: int, hidden: int = 64, seq: int = 3) -> Graph:
    """An ONNX `op` layer (weights as initializers) imported: the step's h x R^T product
    reads R^T as a constant capture of the loop."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from flowc.frontend.onnx import import_onnx

    gates = {"LSTM": 4, "GRU": 3}[op]
    inits = [numpy_helper.from_array(rand(*shape) * 0.2, name) for name, shape in (
        ("W", (1, gates * hidden, 16)), ("R", (1, gates * hidden, hidden)),
        ("B", (1, 2 * gates * hidden)))]
    graph = helper.make_graph(
        [helper.make_node(op, ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden)], "rnn",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (seq, batch, 16))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h")],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return import_onnx(onnx.ModelProto.FromString(model.SerializeToString()))


@pytest.mark.parametrize("op,batch,panels,kept", [
    ("LSTM", 1, [(2, 64, 128)], []),  # 4H = 256: two 128-wide panels, packed in the body
    # the GRU's products (z and r: 2H = 128 columns, one wide panel; h: 64) fall back to NR
    ("GRU", 1, [(4, 64, 32), (2, 64, 32)], []),
    # two rows: the LSTM's x + h R^T is a gemm starting from x, packed in NR panels, as
    # is the GRU candidate's x_h + (r h) R_h^T; its z and r product has no C: R^T stays
    ("LSTM", 2, [(8, 64, 32)], []),
    ("GRU", 2, [(2, 64, 32)], [(64, 128)]),
])
def test_a_loops_constant_weight_is_packed_inside_its_body(op, batch, panels, kept):
    graph = rnn_graph(op, batch)
    after, _ = packed(graph, "simplify,constant-fold,pack-weights")
    loop = next(n for n in after.nodes if n.op == "loop")
    body = loop.attrs["body"]
    got = [n.types[0].shape for n in body.nodes if n.op == "constant" and n.types[0].rank == 3]
    assert got == panels
    captured = [v.type.shape for v in loop.inputs[len(loop.inputs) - loop.attrs["captures"]:]
                if v.node.op == "constant" and v.type.rank == 2]
    assert captured == kept  # R^T parts not inlined
    x = rand(3, batch, 16)
    for name in ("Y", "Y_h"):
        np.testing.assert_allclose(interpret(after, {"X": x})[name],
                                   interpret(graph, {"X": x})[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape,n,pipeline,want", [
    ((1, 40), 256, "pack-weights", (2, 40, 128)),  # one row: wide panels
    ((1, 1, 40), 256, "pack-weights", (2, 40, 128)),
    ((1, 40), 96, "pack-weights", (3, 40, 32)),  # N not whole wide panels: NR
    ((1, 40), 256, "pack-weights{gemv_panel_bytes=256}", (4, 40, 64)),
    ((2, 40), 256, "pack-weights", (8, 40, 32)),  # two rows: NR
])
def test_a_matrix_vector_product_takes_wide_panels(a_shape, n, pipeline, want):
    graph = dense_graph("matmul", a_shape, rand(40, n), None, {})
    after, count = packed(graph, pipeline)
    assert count == 1
    assert [nd.types[0].shape for nd in after.nodes if nd.op == "constant"] == [want]
    x = rand(*a_shape)
    np.testing.assert_allclose(interpret(after, {"a": x})["y"], interpret(graph, {"a": x})["y"],
                               rtol=1e-5, atol=1e-5)
