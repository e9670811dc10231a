"""Model.run / run_into / empty_inputs / empty_outputs: results, ownership of the output
arrays (new each call), and clear errors for bad out= arrays."""

from __future__ import annotations

import re

import numpy as np
import pytest

import flowc
from flowc.runtime import ArtifactError


def x(shape=(2, 64), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_run_returns_new_arrays_each_call(built_mlp):
    model = flowc.load(built_mlp)
    first, second = model.run(x=x())["probs"], model.run(x=x())["probs"]
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, second)
    assert first.flags.c_contiguous and first.flags.writeable and address(first) % 64 == 0


def test_every_way_of_passing_inputs_agrees(built_mlp):
    model = flowc.load(built_mlp)
    want = model(x())
    np.testing.assert_array_equal(model.run(x())["probs"], want)
    np.testing.assert_array_equal(model(np.asfortranarray(x())), want)  # copied to C order
    np.testing.assert_allclose(model(x().tolist()), want, rtol=1e-6)  # converted
    np.testing.assert_array_equal(model(x()[:, ::-1][:, ::-1]), want)  # a strided view


def test_run_into_writes_the_callers_arrays(built_mlp):
    model = flowc.load(built_mlp)
    want = model(x())
    out = model.empty_outputs()
    assert address(out["probs"]) % 64 == 0
    got = model.run_into(out, x())
    assert got["probs"] is out["probs"]
    np.testing.assert_array_equal(out["probs"], want)
    listed = [np.zeros((2, 10), np.float32)]
    model.run_into(listed, x=x(seed=1))
    np.testing.assert_array_equal(listed[0], model(x(seed=1)))
    raw = np.zeros(2 * 10 * 4 + 4, np.uint8)
    unaligned = raw[4:].view(np.float32).reshape(2, 10)  # written through the C copy
    model.run_into({"probs": unaligned}, x())
    np.testing.assert_array_equal(unaligned, want)


def test_run_into_an_output_named_like_an_argument(built_mlp):
    """`out` is positional-only: an input named `out` would still go by keyword."""
    model = flowc.load(built_mlp)
    with pytest.raises(ArtifactError, match="has no input 'out'"):
        model.run_into(model.empty_outputs(), out=x())


@pytest.mark.parametrize("out, message", [
    ({}, "out= must name its outputs (probs); missing: probs"),
    ({"probs": np.zeros((2, 10), np.float32), "y": 1},
     "out= must name its outputs (probs); unknown: y"),
    ([], "model 'mlp' has 1 outputs (probs), out= gives 0"),
    (np.zeros((2, 10), np.float32), "out= must be a dict or a list of arrays, got ndarray"),
    ({"probs": np.zeros((2, 10), np.float64)},
     "out array for output 'probs' must be a writeable C-contiguous float32 array of shape "
     "[2, 10], got float64[2, 10]"),
    ({"probs": np.zeros((10, 2), np.float32).T},
     "out array for output 'probs' must be a writeable C-contiguous float32 array of shape "
     "[2, 10], got float32[2, 10], not C-contiguous"),
    ({"probs": np.broadcast_to(np.float32(0), (2, 10))},
     "out array for output 'probs' must be a writeable C-contiguous float32 array of shape "
     "[2, 10], got float32[2, 10], not C-contiguous, read-only"),
    ({"probs": [[0.0] * 10] * 2},
     "out array for output 'probs' must be a writeable C-contiguous float32 array of shape "
     "[2, 10], got list"),
])
def test_bad_out_arrays(built_mlp, out, message):
    model = flowc.load(built_mlp)
    full = message if message.startswith("model") else f"model 'mlp': {message}"
    with pytest.raises(ArtifactError, match="^" + re.escape(full) + "$"):
        model.run_into(out, x())


def test_empty_inputs_are_aligned_and_read_in_place(built_mlp):
    model = flowc.load(built_mlp)
    feeds = model.empty_inputs()
    assert set(feeds) == {"x"} and feeds["x"].shape == (2, 64)
    assert feeds["x"].dtype == np.float32 and address(feeds["x"]) % 64 == 0
    feeds["x"][...] = x()
    np.testing.assert_array_equal(model(**feeds), model(x()))
