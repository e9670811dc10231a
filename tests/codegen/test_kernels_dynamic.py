"""Kernels with run-time extents ([12], increment 3): a body typed by symbolic dims takes the
run's dim values (`const int64_t *dims`, the body's symbols in sorted name order) after its
outputs, and runs any size; ops without such a lowering are refused naming node, op and dim."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from kernel_harness import aligned, body_scratch, compiled_body, link

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.kernels import dim_symbols
from flowc.codegen.lower.per_sample import body_batch_symbol, whole_batch
from flowc.codegen.target import get_target
from flowc.ir import FlowcError, Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.dims import evaluate
from flowc.ir.interpret import interpret
from flowc.ir.ops.nn import pack_panels


def bias_relu_body() -> Graph:
    """relu(x [S,B,4] + b [4]) * x: its symbols sort as B, S (not their order in x)."""
    g = Graph("dyn")
    x = g.add_input("in0", TensorType("f32", ("S", "B", 4)))
    b = g.add_input("in1", TensorType("f32", (4,)))
    a = g.append(make_node("add", [x, b])).out()
    r = g.append(make_node("relu", [a])).out()
    g.add_output("out0", g.append(make_node("mul", [r, x])).out())
    return g


def call(lib: ctypes.CDLL, body: Graph, inputs: list[np.ndarray], dims: dict[str, int]
         ) -> list[np.ndarray]:
    """Call the compiled kernel on `inputs` with outputs of the run's shapes (then the
    dims, then its scratch)."""
    outs = [aligned(np.zeros([evaluate(d, dims) for d in t.shape],
                             t.dtype.np)) for t in body.output_types]
    table = aligned(np.array([dims[s] for s in dim_symbols(body)], np.int64))
    buffers = [*map(aligned, inputs), *outs, table]  # alive until the call returns
    lib.kernel(*[ctypes.c_void_p(a.ctypes.data) for a in buffers], *body_scratch(body))
    return outs


def test_one_elementwise_kernel_runs_every_size():
    body = bias_relu_body()
    assert dim_symbols(body) == ["B", "S"]
    lib = ctypes.CDLL(str(link(compiled_body(body).object, "dyn_ew")))
    rng = np.random.default_rng(0)
    for s, b in [(1, 1), (2, 5), (7, 3), (0, 4), (33, 17)]:
        x = rng.standard_normal((s, b, 4)).astype(np.float32)
        bias = rng.standard_normal(4).astype(np.float32)
        (y,) = call(lib, body, [x, bias], {"S": s, "B": b})
        np.testing.assert_array_equal(y, np.maximum(x + bias, 0) * x)


@pytest.mark.parametrize("shape", [("N",), ("N", "S"), ("S", "N", 3), ("N", 16, 32)])
def test_elementwise_kernels_are_vectorized_tiles_at_any_extent(shape):
    """An elementwise kernel of run-time extents gets the elementwise strategy (outer dims
    tiled by 1, the last in vector tiles, masked when of run-time length): results
    exact at extents below, at and past a tile (and 0)."""
    g = Graph("dyn_ew_tiles")
    x = g.add_input("in0", TensorType("f32", shape))
    y = g.add_input("in1", TensorType("f32", shape))
    r = g.append(make_node("relu", [x])).out()
    g.add_output("out0", g.append(make_node("mul", [r, y])).out())
    name = "dyn_ew_" + "_".join(map(str, shape))
    lib = ctypes.CDLL(str(link(compiled_body(g).object, name)))
    rng = np.random.default_rng(7)
    for n, s in [(0, 2), (1, 1), (5, 17), (64, 3), (70, 65)]:
        dims = {"N": n, "S": s}
        xv, yv = (rng.standard_normal([dims.get(d, d) for d in shape]).astype(np.float32)
                  for _ in range(2))
        (got,) = call(lib, g, [xv, yv], {k: v for k, v in dims.items() if k in shape})
        np.testing.assert_array_equal(got, np.maximum(xv, 0) * yv)


def test_an_op_without_a_dynamic_lowering_is_refused():
    g = Graph("g")
    x = g.add_input("in0", TensorType("f32", ("N", 4)))
    k = g.append(make_node("constant", [], {"value": Tensor(np.array(0))})).out()
    g.add_output("out0", g.append(make_node("cumsum", [x, k], name="c")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'c' (cumsum): dim N is dynamic, and op cumsum has no kernel with "
            "run-time extents on target host yet")):
        compile_kernels([("kernel", g)], "host", cache=False)


def test_a_symbolic_operand_dim_broadcast_to_a_static_one_is_refused():
    g = Graph("g")
    x = g.add_input("in0", TensorType("f32", ("N", 4)))
    y = g.add_input("in1", TensorType("f32", (3, 4)))
    g.add_output("out0", g.append(make_node("add", [x, y], name="sum")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'sum' (add): operand dim N broadcast to 3: a kernel with run-time extents "
            "broadcasts static dims only")):
        compile_kernels([("kernel", g)], "host", cache=False)


@pytest.mark.parametrize("lead", [("N",), ("N", "S")])
def test_matmul_with_run_time_rows(lead):
    """x [..., 8] @ w [8, 5]: the MLP layer's kernel, one for every row count (as the
    artifact's kernels are: one node, or a fused one)."""
    g = Graph("dyn_mm")
    x = g.add_input("in0", TensorType("f32", (*lead, 8)))
    w = g.add_input("in1", TensorType("f32", (8, 5)))
    g.add_output("out0", g.append(make_node("matmul", [x, w])).out())
    lib = ctypes.CDLL(str(link(compiled_body(g).object, f"dyn_mm{len(lead)}")))
    rng = np.random.default_rng(1)
    wv = rng.standard_normal((8, 5)).astype(np.float32)
    for sizes in [(1, 1), (3, 2), (64, 7), (0, 3)]:
        shape = sizes[:len(lead)]
        xv = rng.standard_normal((*shape, 8)).astype(np.float32)
        (got,) = call(lib, g, [xv, wv], dict(zip(lead, shape, strict=True)))
        np.testing.assert_allclose(got, xv @ wv, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["matmul", "gemm"])
def test_rows_in_static_blocks_and_a_tail(op):
    """x [N, 64] @ w [64, 48] (gemm: + bias [48]): whole blocks of 32 rows, then of 8, as
    static matmuls (the tiled strategy), the N % 8 rows left as loops."""
    g = Graph(f"dyn_{op}_blocks")
    x = g.add_input("in0", TensorType("f32", ("N", 64)))
    params = [g.add_input("in1", TensorType("f32", (64, 48)))]
    if op == "gemm":
        params.append(g.add_input("in2", TensorType("f32", (48,))))
    g.add_output("out0", g.append(make_node(op, [x, *params])).out())
    lib = ctypes.CDLL(str(link(compiled_body(g).object, f"dyn_{op}_blocks")))
    rng = np.random.default_rng(5)
    consts = [rng.standard_normal(t.shape).astype(np.float32) for t in g.input_types[1:]]
    for n in (0, 1, 7, 8, 31, 32, 33, 41, 64, 95):
        xv = rng.standard_normal((n, 64)).astype(np.float32)
        (got,) = call(lib, g, [xv, *consts], {"N": n})
        want = xv @ consts[0] + (consts[1] if op == "gemm" else 0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"N={n}")


@pytest.mark.parametrize("lead, bias", [(("N",), False), (("N",), True), (("N", "S"), True),
                                        (("N",), "full"), (("N", "S"), "full")])
def test_packed_matmul_rows_in_static_blocks(lead, bias):
    """x [..., 48] @ B as panels [2, 48, 32] (+ a bias [64], or a full C [..., 64]): the
    pack-weights form of a dynamic layer; whole blocks of 32 and 8 rows as static packed
    contractions, the rest as loops reading the panels in place."""
    g = Graph("dyn_packed")
    x = g.add_input("in0", TensorType("f32", (*lead, 48)))
    params = [g.add_input("in1", TensorType("f32", (2, 48, 32)))]
    if bias:
        params.append(g.add_input("in2", TensorType("f32", (*lead, 64) if bias == "full"
                                                    else (64,))))
    g.add_output("out0", g.append(make_node("packed_matmul", [x, *params])).out())
    lib = ctypes.CDLL(str(link(compiled_body(g).object, f"dyn_packed{len(lead)}{bias}")))
    rng = np.random.default_rng(6)
    w = rng.standard_normal((48, 64)).astype(np.float32)
    consts = [pack_panels(w, 32), rng.standard_normal(64).astype(np.float32)][:len(params)]
    for n in (0, 1, 7, 8, 33, 41, 95):
        shape = (n, 3)[:len(lead)]
        xv = rng.standard_normal((*shape, 48)).astype(np.float32)
        if bias == "full":
            consts[1] = rng.standard_normal((*shape, 64)).astype(np.float32)
        (got,) = call(lib, g, [xv, *consts], dict(zip(lead, shape, strict=True)))
        want = xv @ w + (consts[1] if bias else 0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{shape}")


def test_a_matmul_epilogue_is_written_over_the_product():
    """A fused matmul of run-time rows and its epilogue (bias, relu, residual add): the
    epilogue runs over the product in place (cpu/in_place.py), so the kernel needs no
    buffer of run-time size; rows below, at and past the blocks (8 and 32)."""
    g = Graph("dyn_epilogue")
    x = g.add_input("in0", TensorType("f32", ("N", 8)))
    w = g.add_input("in1", TensorType("f32", (8, 8)))
    b = g.add_input("in2", TensorType("f32", (8,)))
    y = g.append(make_node("matmul", [x, w])).out()
    y = g.append(make_node("relu", [g.append(make_node("add", [y, b])).out()])).out()
    g.add_output("out0", g.append(make_node("add", [y, x])).out())
    compiled = compiled_body(g)
    assert compiled.needs("kernel").buffers == ()  # no temporary
    lib = ctypes.CDLL(str(link(compiled.object, "dyn_epilogue")))
    rng = np.random.default_rng(3)
    wv, bv = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal(8).astype(
        np.float32)
    for n in (0, 1, 7, 8, 41):
        xv = rng.standard_normal((n, 8)).astype(np.float32)
        (got,) = call(lib, g, [xv, wv, bv], {"N": n})
        np.testing.assert_allclose(got, np.maximum(xv @ wv + bv, 0) + xv, rtol=1e-5,
                                   atol=1e-5)


def test_a_temporary_of_run_time_size_is_refused():
    """A body whose intermediate needs a buffer of run-time size that no result can take
    (a product of another shape feeding a second matmul) would need scratch the caller
    cannot size: refused, naming the buffer."""
    g = Graph("g")
    x = g.add_input("in0", TensorType("f32", ("N", 8)))
    w = g.add_input("in1", TensorType("f32", (8, 5)))
    v = g.add_input("in2", TensorType("f32", (5, 3)))
    y = g.append(make_node("matmul", [x, w])).out()
    g.add_output("out0", g.append(make_node("matmul", [y, v])).out())
    with pytest.raises(FlowcError, match=re.escape(
            "temporary of type memref<?x5xf32> is not a dense static buffer")):
        compile_kernels([("kernel", g)], "host", cache=False)


@pytest.mark.parametrize("a_shape, b_shape", [
    (("N", "S", 8), ("N", 8, "S")),  # q @ k^T: columns of run-time extent
    (("N", "S", "S"), ("N", "S", 40)),  # p @ v: depth of run-time extent
    (("N", 2, "S", 8), ("N", 2, 8, "S")),  # multi-head: two leading dims
    (("S", "S"), ("S", 8)),
])
def test_attention_matmuls_of_equal_batches(a_shape, b_shape):
    """Attention's products, both operands of run-time extents, equal batch dims: static
    blocks of rows, columns and depth (tiled) plus tails as loops; sizes below, at and
    past the blocks (8 and 32 rows, 32 columns, 32 deep)."""
    g = Graph("dyn_attn")
    a = g.add_input("in0", TensorType("f32", a_shape))
    b = g.add_input("in1", TensorType("f32", b_shape))
    g.add_output("out0", g.append(make_node("matmul", [a, b])).out())
    name = "dyn_attn_" + "_".join(map(str, a_shape + b_shape))  # one library per case
    lib = ctypes.CDLL(str(link(compiled_body(g).object, name)))
    rng = np.random.default_rng(4)
    for n, s in [(1, 1), (2, 16), (3, 5), (1, 33), (2, 71), (1, 128)]:
        dims = {"N": n, "S": s}
        av, bv = (rng.standard_normal([dims.get(d, d) for d in shape]).astype(np.float32)
                  for shape in (a_shape, b_shape))
        (got,) = call(lib, g, [av, bv], {k: v for k, v in dims.items() if k in a_shape})
        np.testing.assert_allclose(got, av @ bv, rtol=1e-4, atol=1e-4, err_msg=f"{n, s}")


def test_a_broadcasting_batched_matmul_is_refused_naming_the_node():
    g = Graph("g")
    x = g.add_input("in0", TensorType("f32", ("N", 3, 4)))
    w = g.add_input("in1", TensorType("f32", (1, 4, 5)))
    g.add_output("out0", g.append(make_node("matmul", [x, w], name="bmm")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'bmm' (matmul): matmul of f32[N,3,4] and f32[1,4,5]: with symbolic dims, a "
            "kernel takes [..., K] @ [K, N], or batches of equal dims, only so far")):
        compile_kernels([("kernel", g)], "host", cache=False)


def test_gather_of_run_time_indices():
    """The embedding lookup: table [10, 4] (static) at token ids [N, S]."""
    g = Graph("dyn_gather")
    table = g.add_input("in0", TensorType("f32", (10, 4)))
    ids = g.add_input("in1", TensorType("i64", ("N", "S")))
    g.add_output("out0", g.append(make_node("gather", [table, ids], {"axis": 0})).out())
    lib = ctypes.CDLL(str(link(compiled_body(g).object, "dyn_gather")))
    rng = np.random.default_rng(5)
    tv = rng.standard_normal((10, 4)).astype(np.float32)
    for n, s in [(1, 1), (2, 6)]:
        iv = rng.integers(0, 10, (n, s)).astype(np.int64)
        (got,) = call(lib, g, [tv, iv], {"N": n, "S": s})
        np.testing.assert_array_equal(got, tv[iv])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_row_kernels_take_run_time_leading_dims():
    """softmax and layer_norm (the encoder's row ops) over [N, S, 16]: f32 rows of static
    length, their count known at run time."""
    rng = np.random.default_rng(2)
    for op, attrs, extra in [("softmax", {"axis": -1}, []),
                             ("layer_normalization", {"axis": -1, "epsilon": 1e-5},
                              [rng.standard_normal(16).astype(np.float32),
                               rng.standard_normal(16).astype(np.float32)])]:
        g = Graph(f"dyn_{op}")
        x = g.add_input("in0", TensorType("f32", ("N", "S", 16)))
        params = [g.add_input(f"in{i + 1}", TensorType("f32", (16,))) for i in range(len(extra))]
        g.add_output("out0", g.append(make_node(op, [x, *params], attrs)).out())
        lib = ctypes.CDLL(str(link(compiled_body(g).object, f"dyn_{op}")))
        for n, s in [(1, 1), (2, 9), (3, 128)]:
            xv = rng.standard_normal((n, s, 16)).astype(np.float32)
            (got,) = call(lib, g, [xv, *extra], {"N": n, "S": s})
            if op == "softmax":
                want = _softmax(xv)
            else:
                mean, var = xv.mean(-1, keepdims=True), xv.var(-1, keepdims=True)
                want = (xv - mean) / np.sqrt(var + 1e-5) * extra[0] + extra[1]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=op)


def test_layer_norm_grad_rows_take_run_time_leading_dims():
    """layer norm's d X (a row kernel reading X's and dY's rows) over [N, S, 16]."""
    rng = np.random.default_rng(4)
    g = Graph("dyn_ln_grad")
    x = g.add_input("in0", TensorType("f32", ("N", "S", 16)))
    scale = g.add_input("in1", TensorType("f32", (16,)))
    dy = g.add_input("in2", TensorType("f32", ("N", "S", 16)))
    g.add_output("out0", g.append(make_node("layer_norm_grad", [x, scale, dy],
                                            {"axis": -1, "epsilon": 1e-5})).out())
    lib = ctypes.CDLL(str(link(compiled_body(g).object, "dyn_ln_grad")))
    gamma = rng.standard_normal(16).astype(np.float32)
    for n, s in [(1, 1), (2, 9), (3, 128)]:
        xv, dv = (rng.standard_normal((n, s, 16)).astype(np.float32) for _ in range(2))
        (got,) = call(lib, g, [xv, gamma, dv], {"N": n, "S": s})
        inv = 1 / np.sqrt(xv.var(-1, keepdims=True) + 1e-5)
        xhat, gy = (xv - xv.mean(-1, keepdims=True)) * inv, dv * gamma
        want = inv * (gy - gy.mean(-1, keepdims=True)
                      - xhat * (gy * xhat).mean(-1, keepdims=True))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_softmax_over_a_last_axis_of_run_time_length():
    """Attention's softmax over [N, S, S]: rows of run-time length S (folds of whole
    vectors, then a tail of S % lanes elements: lengths below, at and past the lanes)."""
    g = Graph("dyn_rows")
    x = g.add_input("in0", TensorType("f32", ("N", "S", "S")))
    g.add_output("out0", g.append(make_node("softmax", [x], {"axis": -1})).out())
    lib = ctypes.CDLL(str(link(compiled_body(g).object, "dyn_softmax_rows")))
    rng = np.random.default_rng(3)
    for n, s in [(1, 1), (2, 7), (1, 33), (2, 16), (1, 100)]:
        xv = 4 * rng.standard_normal((n, s, s)).astype(np.float32)
        (got,) = call(lib, g, [xv], {"N": n, "S": s})
        np.testing.assert_allclose(got, _softmax(xv), rtol=1e-5, atol=1e-6)


def test_a_log_softmax_row_of_run_time_length_is_refused():
    g = Graph("g")
    x = g.add_input("in0", TensorType("f32", (2, "S")))
    g.add_output("out0", g.append(make_node("log_softmax", [x], {"axis": -1}, name="ls")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'ls' (log_softmax): log_softmax of f32[2,S]: a row of run-time length takes "
            "softmax only so far")):
        compile_kernels([("kernel", g)], "host", cache=False)


def test_a_row_op_over_a_symbolic_row_is_refused():
    g = Graph("g")
    x = g.add_input("in0", TensorType("f32", (2, "S")))
    g.add_output("out0", g.append(make_node("softmax", [x], {"axis": 0}, name="sm")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'sm' (softmax): softmax of f32[2,S] over axis 0: with symbolic dims, a kernel "
            "takes f32 rows of static trailing dims only so far")):
        compile_kernels([("kernel", g)], "host", cache=False)


@pytest.mark.parametrize("op, attrs, consts, want", [
    ("transpose", {"perm": [1, 0, 2]}, [], lambda x: x.transpose(1, 0, 2)),
    ("reduce_max", {"keepdims": 1}, [np.array([2])], lambda x: x.max(2, keepdims=True)),
    ("reduce_min", {"keepdims": 0}, [np.array([1])], lambda x: x.min(1)),
])
def test_transpose_and_reductions_take_run_time_dims(op, attrs, consts, want):
    g = Graph(f"dyn_{op}")
    x = g.add_input("in0", TensorType("f32", ("N", "S", 6)))
    operands = [x, *(g.append(make_node("constant", [], {"value": Tensor(c)})).out()
                     for c in consts)]
    g.add_output("out0", g.append(make_node(op, operands, attrs)).out())
    lib = ctypes.CDLL(str(link(compiled_body(g).object, f"dyn_{op}")))
    rng = np.random.default_rng(3)
    for n, s in [(1, 1), (2, 7), (5, 3)]:
        xv = rng.standard_normal((n, s, 6)).astype(np.float32)
        (got,) = call(lib, g, [xv], {"N": n, "S": s})
        np.testing.assert_allclose(got, want(xv), rtol=1e-5, atol=1e-6, err_msg=op)


def test_a_widened_sum_of_a_symbolic_inner_dim_is_refused():
    """f32[4, N, 3] summed over axis 2: N is no leading batch, so no sample loop, and the
    f64 accumulator [4, N] would be a temporary of run-time size."""
    g = Graph("g")
    x = g.add_input("in0", TensorType("f32", (4, "N", 3)))
    axes = g.append(make_node("constant", [], {"value": Tensor(np.array([2]))})).out()
    g.add_output("out0", g.append(make_node("reduce_sum", [x, axes], name="m")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'm' (reduce_sum): reduce_sum of f32[4,N,3]: with symbolic dims, a kernel "
            "sums only f64 (the widened accumulator of others would be a temporary of run-time "
            "size)")):
        compile_kernels([("kernel", g)], "host", cache=False)


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean"])
def test_an_f32_sum_keeping_the_batch_runs_sample_by_sample(op):
    """A per-sample op (lower/per_sample.py) over a batch of run-time extent: the static
    rule on each sample [1, 3, 5] in a loop over N."""
    g = Graph(f"dyn_{op}")
    x = g.add_input("in0", TensorType("f32", ("N", 3, 5)))
    axes = g.append(make_node("constant", [], {"value": Tensor(np.array([2]))})).out()
    g.add_output("out0", g.append(make_node(op, [x, axes], {"keepdims": 0})).out())
    lib = ctypes.CDLL(str(link(compiled_body(g).object, f"dyn_{op}_samples")))
    rng = np.random.default_rng(6)
    for n in (0, 1, 4, 8, 19):
        xv = rng.standard_normal((n, 3, 5)).astype(np.float32)
        (got,) = call(lib, g, [xv], {"N": n})
        want = xv.sum(2) if op == "reduce_sum" else xv.mean(2)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_concat_and_slice_with_run_time_sizes():
    """concat([x [N,S,4], y [N,1,4]], axis 1) at the run's offsets, then [:, :, 1:3]: the
    concat's axis symbolic (S+1), the slice's static."""
    g = Graph("dyn_cat")
    x = g.add_input("in0", TensorType("f32", ("N", "S", 4)))
    y = g.add_input("in1", TensorType("f32", ("N", 1, 4)))
    cat = g.append(make_node("concat", [y, x, y], {"axis": 1})).out()
    ints = [g.append(make_node("constant", [], {"value": Tensor(np.array([v]))})).out()
            for v in (1, 3, 2)]
    g.add_output("out0", cat)
    g.add_output("out1", g.append(make_node("slice", [x, *ints])).out())
    assert [str(t) for t in g.output_types] == ["f32[N,S+2,4]", "f32[N,S,2]"]
    lib = ctypes.CDLL(str(link(compiled_body(g).object, "dyn_cat")))
    rng = np.random.default_rng(6)
    for n, s in [(1, 1), (2, 5), (3, 0)]:
        xv = rng.standard_normal((n, s, 4)).astype(np.float32)
        yv = rng.standard_normal((n, 1, 4)).astype(np.float32)
        got_cat, got_slice = call(lib, g, [xv, yv], {"N": n, "S": s})
        np.testing.assert_array_equal(got_cat, np.concatenate([yv, xv, yv], axis=1))
        np.testing.assert_array_equal(got_slice, xv[:, :, 1:3])


def test_a_slice_of_a_symbolic_dim_is_refused():
    g = Graph("g")
    x = g.add_input("in0", TensorType("f32", ("N", 4)))
    ints = [g.append(make_node("constant", [], {"value": Tensor(np.array([v]))})).out()
            for v in (1, 2**40, 0)]
    g.add_output("out0", g.append(make_node("slice", [x, *ints], name="tail")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'tail' (slice): slice of f32[N,4] along dim N: with symbolic dims, a kernel "
            "slices static dims only so far")):
        compile_kernels([("kernel", g)], "host", cache=False)


def conv_relu_body(batch: object = "N") -> Graph:
    g = Graph("dyn_conv_relu")
    x = g.add_input("in0", TensorType("f32", (batch, 2, 6, 6)))
    w = g.add_input("in1", TensorType("f32", (3, 2, 3, 3)))
    y = g.append(make_node("conv", [x, w], {"pads": [1, 1, 1, 1]})).out()
    g.add_output("out0", g.append(make_node("relu", [y])).out())
    return g


def test_a_conv_and_its_epilogue_run_whole_sample_by_sample():
    """A fused conv of run-time batch and its epilogue: the static kernel of both, per
    sample (`body_batch_symbol`); a body whose other nodes mix samples is not."""
    body = conv_relu_body()
    assert body_batch_symbol(body) == "N"
    assert body_batch_symbol(conv_relu_body(2)) is None  # static: nothing to loop over
    mixed = conv_relu_body()
    flat = mixed.append(make_node("reshape", [mixed.outputs[0][1], mixed.append(make_node(
        "constant", [], {"value": Tensor(np.array([-1], np.int64))})).out()])).out()
    mixed.outputs = [("out0", flat)]
    assert body_batch_symbol(mixed) is None
    # compiles: the conv's result is no temporary of run-time size (its scratch, one
    # sample's padded input, is static)
    lib = ctypes.CDLL(str(link(compiled_body(body).object, "dyn_conv_relu")))
    rng = np.random.default_rng(5)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    for n in (1, 3):
        x = rng.standard_normal((n, 2, 6, 6)).astype(np.float32)
        (got,) = call(lib, body, [x, w], {"N": n})
        want = interpret(body, {"in0": x, "in1": w})["out0"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def winograd_body(size: int, epilogue: bool) -> Graph:
    """winograd_conv [N, size, size, 8] -> 16 channels, then (`epilogue`) + residual, relu."""
    g = Graph("dyn_winograd")
    x = g.add_input("in0", TensorType("f32", ("N", size, size, 8)))
    u = g.add_input("in1", TensorType("f32", (6, 6, 8, 16)))
    b = g.add_input("in2", TensorType("f32", (16,)))
    y = g.append(make_node("winograd_conv", [x, u, b], {"tile": 4, "pads": (1, 1, 1, 1)})).out()
    if epilogue:
        r = g.add_input("in3", TensorType("f32", ("N", size, size, 16)))
        y = g.append(make_node("relu", [g.append(make_node("add", [y, r])).out()])).out()
    g.add_output("out0", y)
    return g


@pytest.mark.parametrize("size,epilogue", [(8, True), (8, False), (6, True)])
def test_a_winograd_conv_of_whole_tiles_takes_the_batch_whole(size, epilogue):
    """A winograd conv of run-time batch whose output is whole tiles (and its epilogue) is
    one kernel of the batch: one parallel loop over its rows of tiles (no sample loop), the
    epilogue moved into it (no temporary of run-time size). One whose tiles stick out
    (6x6 in 4x4 tiles: cut back through a temporary) runs sample by sample, the samples
    one parallel loop."""
    from flowc.ir.ops.winograd import winograd_filter

    body = winograd_body(size, epilogue)
    target = get_target("host")
    assert body_batch_symbol(body) == "N"
    assert whole_batch(body.nodes[0], target) == (size == 8)
    seen: dict[str, str] = {}
    code = compile_kernels([("kernel", body)], "host", cache=False,
                           dump=lambda name, text: seen.__setitem__(name, text))
    llvm = seen["kernel.llvm.mlir"]
    assert "aligned_alloc" not in llvm
    assert llvm.count("omp.parallel") == 1  # over rows of tiles, or over samples
    lib = ctypes.CDLL(str(link(code.object, f"dyn_winograd_{size}_{int(epilogue)}")))
    rng = np.random.default_rng(9)
    u = winograd_filter(rng.standard_normal((3, 3, 8, 16)).astype(np.float32), 4)
    b = rng.standard_normal(16).astype(np.float32)
    for n in (1, 3):
        feeds = [rng.standard_normal((n, size, size, 8)).astype(np.float32), u, b]
        if epilogue:
            feeds.append(rng.standard_normal((n, size, size, 16)).astype(np.float32))
        (got,) = call(lib, body, feeds, {"N": n})
        want = interpret(body, {f"in{i}": v for i, v in enumerate(feeds)})["out0"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


@pytest.mark.parametrize("op,attrs,whole", [
    ("max_pool", {"kernel_shape": [2, 2], "strides": [2, 2]}, True),
    ("max_pool", {"kernel_shape": [3, 3], "strides": [2, 2], "channels_last": True}, True),
    ("average_pool", {"kernel_shape": [2, 2], "strides": [1, 1]}, True),
    ("max_pool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, False),
])
def test_an_unpadded_pool_takes_the_batch_whole(op, attrs, whole):
    """A pool of run-time batch reading no padding is one kernel of the batch, split over
    its samples like a static pool (one parallel region, no sample loop); a padded one
    (its padded input would be a temporary of run-time size) runs sample by sample."""
    g = Graph("dyn_pool")
    shape = ("N", 33, 33, 16) if attrs.get("channels_last") else ("N", 16, 33, 33)
    x = g.add_input("in0", TensorType("f32", shape))
    g.add_output("out0", g.append(make_node(op, [x], attrs)).out())
    assert whole_batch(g.nodes[0], get_target("host")) == whole
    seen: dict[str, str] = {}
    code = compile_kernels([("kernel", g)], "host", cache=False,
                           dump=lambda name, text: seen.__setitem__(name, text))
    if whole:
        assert seen["kernel.llvm.mlir"].count("omp.parallel") == 1
    lib = ctypes.CDLL(str(link(code.object, f"dyn_pool_{op}_{len(attrs)}_{int(whole)}")))
    rng = np.random.default_rng(4)
    for n in (1, 5):
        xv = rng.standard_normal([n, *shape[1:]]).astype(np.float32)
        (got,) = call(lib, g, [xv], {"N": n})
        np.testing.assert_allclose(got, interpret(g, {"in0": xv})["out0"], rtol=1e-5, atol=1e-6)


def attention_body() -> Graph:
    """softmax(q [N, S, S]) @ v [N, S, 64]: a row kernel and a batched matmul."""
    g = Graph("dyn_attention")
    q = g.add_input("in0", TensorType("f32", ("N", "S", "S")))
    v = g.add_input("in1", TensorType("f32", ("N", "S", 64)))
    p = g.append(make_node("softmax", [q], {"axis": -1})).out()
    g.add_output("out0", g.append(make_node("matmul", [p, v])).out())
    return g


@pytest.mark.parametrize("op", ["softmax", "matmul"])
def test_run_time_extents_split_over_threads_by_their_size(op):
    """A row kernel or batched matmul of run-time extents: one parallel loop over chunks
    of axis 0 beside its serial copy, chosen at run time (two or more chunks and threads:
    `__kmpc_flowc_threads`), so one parallel region and no other (the static matmul
    blocks inside are loops); the serial copy (this harness's one thread) is exact."""
    full = attention_body()
    body = Graph(f"dyn_{op}")
    x = body.add_input("in0", full.inputs[0].types[0])
    if op == "softmax":
        y = body.append(make_node("softmax", [x], {"axis": -1})).out()
    else:
        v = body.add_input("in1", full.inputs[1].types[0])
        y = body.append(make_node("matmul", [x, v])).out()
    body.add_output("out0", y)
    seen: dict[str, str] = {}
    code = compile_kernels([("kernel", body)], "host", cache=False,
                           dump=lambda name, text: seen.__setitem__(name, text))
    llvm = seen["kernel.llvm.mlir"]
    assert llvm.count("omp.parallel") == 1 and "@__kmpc_flowc_threads" in llvm
    lib = ctypes.CDLL(str(link(code.object, f"dyn_split_{op}")))
    rng = np.random.default_rng(12)
    for n, s in [(1, 3), (2, 128), (3, 40)]:
        feeds = [rng.standard_normal((n, s, s)).astype(np.float32)]
        if op == "matmul":
            feeds.append(rng.standard_normal((n, s, 64)).astype(np.float32))
        (got,) = call(lib, body, feeds, {"N": n, "S": s})
        want = _softmax(feeds[0]) if op == "softmax" else feeds[0] @ feeds[1]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_samples_of_a_per_sample_conv_split_over_threads():
    """A conv run sample by sample: its samples one parallel loop beside its serial copy
    (chosen at run time by the batch's estimated work and the thread count), the static
    per-sample kernel's own parallel rows a loop inside; exact on the serial copy."""
    body = conv_relu_body()
    seen: dict[str, str] = {}
    code = compile_kernels([("kernel", body)], "host", cache=False,
                           dump=lambda name, text: seen.__setitem__(name, text))
    llvm = seen["kernel.llvm.mlir"]
    assert llvm.count("omp.parallel") == 1 and "@__kmpc_flowc_threads" in llvm
    lib = ctypes.CDLL(str(link(code.object, "dyn_conv_split")))
    rng = np.random.default_rng(6)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    for n in (1, 40):
        x = rng.standard_normal((n, 2, 6, 6)).astype(np.float32)
        (got,) = call(lib, body, [x, w], {"N": n})
        np.testing.assert_allclose(got, interpret(body, {"in0": x, "in1": w})["out0"],
                                   rtol=1e-4, atol=1e-5)
