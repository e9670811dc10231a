"""Compiled loss kernels (flowc/codegen/lower/loss.py) against the interpreter: f32 and
f64 logits, i32 and i64 labels, huge logits (log-sum-exp), larger batches; a label out of
range makes the compiled loss NaN (the documented behaviour of kernels, which have no
error path)."""

import numpy as np
import pytest
from kernel_harness import check_op, op_body, run_body

RNG = np.random.default_rng(21)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("label_dt", [np.int32, np.int64])
@pytest.mark.parametrize(("rows", "classes"), [(1, 1), (7, 10), (64, 33)])
def test_cross_entropy_matches_interpreter(dt, label_dt, rows, classes):
    logits = (RNG.standard_normal((rows, classes)) * 5).astype(dt)
    labels = RNG.integers(0, classes, rows).astype(label_dt)
    check_op("softmax_cross_entropy", [logits, labels])


def test_cross_entropy_huge_logits():
    logits = np.array([[1e4, 0.0, -1e4], [3e4, 3e4, 1.0]], np.float32)
    check_op("softmax_cross_entropy", [logits, np.array([1, 0], np.int64)])


def test_label_out_of_range_gives_nan():
    logits = RNG.standard_normal((3, 4)).astype(np.float32)
    body = op_body("softmax_cross_entropy", [logits, np.array([0, 4, 1])])
    for bad in ([0, 4, 1], [-1, 0, 0]):
        (got,) = run_body(body, [logits, np.array(bad, np.int64)])
        assert np.isnan(got)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(), (5,), (3, 8, 9)])
def test_mse_matches_interpreter(dt, shape):
    a, b = (np.asarray(RNG.standard_normal(shape)).astype(dt) for _ in range(2))
    check_op("mse", [a, b])
