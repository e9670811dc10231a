"""lower/rows.py: f32 softmax, log_softmax, layer norm and its gradient as row kernels
(each row read from memory once, vector reductions, no temporaries, rows in parallel when
large) match the interpreter, including rows of odd lengths, -inf and NaN entries and
large offsets."""

import re

import numpy as np
import pytest
from kernel_harness import check_op, op_body

from flowc.codegen.cpu.compiler import compile_kernels

RNG = np.random.default_rng(17)


def f(*shape, scale=1.0, offset=0.0):
    return (RNG.standard_normal(shape) * scale + offset).astype(np.float32)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(4, 128), (3, 10), (5, 7), (2, 12, 40, 96), (33,),
                                   (3, 197, 197), (2, 17)])
def test_softmax_rows(op, shape):
    check_op(op, [f(*shape, scale=3.0)], {"axis": -1})


def test_rows_not_a_multiple_of_the_lanes_fold_whole_vectors():
    """A static row longer than the target's lanes but not a multiple of them (a ViT's 197
    tokens) folds whole vectors and a short tail, not one lane at a time."""
    seen = {}
    body = op_body("softmax", [f(3, 197, scale=3.0)], {"axis": -1})
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    assert "vector<1xf32>" in seen["k.input.mlir"]  # the tail
    assert re.search(r"vector<(4|8|16)xf32>", seen["k.input.mlir"])


def test_softmax_rows_extremes():
    """-inf entries (masked scores) give 0, a row of NaN stays NaN, huge logits do not
    overflow (the row max is subtracted first)."""
    x = f(6, 64, scale=5.0)
    x[0, ::3] = -np.inf
    x[1, 5] = np.nan
    x[2] *= 1e4
    x[3] = -1e30
    check_op("softmax", [x], {"axis": -1})
    check_op("log_softmax", [x], {"axis": -1})


@pytest.mark.parametrize("shape,axis,params", [
    ((4, 768), -1, 2), ((3, 5, 48), -1, 1), ((2, 3, 4, 10), 2, 2), ((7,), 0, 2),
    ((64, 512), 1, 2), ((5, 197), -1, 2),
])
def test_layer_norm_rows(shape, axis, params):
    norm = shape[axis % len(shape):]
    ins = [f(*shape, scale=2.0), f(*norm)] + ([f(*norm)] if params == 2 else [])
    check_op("layer_normalization", ins, {"axis": axis, "epsilon": 1e-5})


@pytest.mark.parametrize("scale_shape,bias_shape", [((1,), (48,)), ((1, 48), (1,)),
                                                     ((5, 1), (1, 48))])
def test_layer_norm_rows_broadcast_params(scale_shape, bias_shape):
    """Scale and bias broadcastable to the normalized shape (ONNX allows it)."""
    ins = [f(3, 5, 48, scale=2.0), f(*scale_shape), f(*bias_shape)]
    check_op("layer_normalization", ins, {"axis": 1})


def test_layer_norm_rows_large_offset():
    """Mean then centered variance (two passes over the cached row): a large common offset
    does not cancel the variance away, as E[x^2] - E[x]^2 would (in f32 that loses every
    digit here). The inputs themselves hold only ~1e-4 of their spread (ulp(1e3) / 0.5);
    the tolerance is a few times that."""
    x = f(8, 256, scale=0.5, offset=1e3)
    check_op("layer_normalization", [x, f(256), f(256)], {"axis": -1}, kind="composite")


@pytest.mark.parametrize("shape,axis,scale", [
    ((4, 768), -1, (768,)), ((3, 5, 48), -1, (48,)), ((2, 3, 4, 10), 2, (4, 10)),
    ((7,), 0, (1,)), ((3, 5, 48), 1, (5, 1)),
])
def test_layer_norm_grad_rows(shape, axis, scale):
    """d X of layer norm (the gradient's one row kernel: X and dY read once per row)."""
    check_op("layer_norm_grad", [f(*shape, scale=2.0, offset=1.0), f(*scale), f(*shape)],
             {"axis": axis, "epsilon": 1e-5})


@pytest.mark.parametrize("op,ins,parallel", [
    ("layer_norm_grad", [f(128, 768), f(768), f(128, 768)], True),
    ("softmax", [f(12, 128, 128)], True), ("softmax", [f(64, 10)], False),
    ("layer_normalization", [f(128, 768), f(768), f(768)], True),
])
def test_row_kernels_vectorized_without_temporaries(op, ins, parallel):
    seen: dict[str, str] = {}
    compile_kernels([("k", op_body(op, ins, {"axis": -1}))], "host",
                    dump=lambda name, text: seen.__setitem__(name, text))
    llvm = seen["k.llvm.mlir"]
    assert "vector<" in llvm and "aligned_alloc" not in llvm and "@malloc" not in llvm
    assert ("omp.parallel" in llvm) == parallel
