"""The Python loader on an artifact whose dims are given at run time ([12]): `run_into` into
the caller's arrays (`empty_outputs` at the bounds fit every run; views of the run's
shapes come back), `run_entry`, and the manifest's dim expressions read without the
compiler (`runtime.dims.dim_value`)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from artifact_util import views_graph

import flowc
from flowc.ir.dims import canonical, evaluate
from flowc.runtime.dims import dim_value
from flowc.runtime.errors import ArtifactError, RuntimeStatusError


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    out = tmp_path_factory.mktemp("dyn_views")
    flowc.compile(views_graph(), out, dims={"N": (1, 8)})
    return flowc.load(out)


def test_run_into_outputs_at_the_bounds_returns_views_of_the_run_shapes(views):
    """Outputs of N rows and of 6*N elements (`flat`), a weight and an input passed
    through: each written at the front of its bound-sized array, no new array."""
    out = views.empty_outputs()
    assert out["flat"].shape == (48,) and out["sum"].shape == (8, 6)
    rng = np.random.default_rng(0)
    for n in (3, 1, 8, 2):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        got = views.run_into(out, x)
        want = views.run(x)
        assert got.keys() == want.keys()
        for name, array in got.items():
            assert array.shape == want[name].shape, name
            assert np.shares_memory(array, out[name]), name
            np.testing.assert_array_equal(array, want[name], err_msg=name)
        assert got["flat"].shape == (6 * n,)
        assert got["table"] is out["table"]  # the static output: the array itself


def test_run_into_arrays_of_the_run_shape_come_back_as_they_are(views):
    x = np.ones((4, 6), np.float32)
    want = views.run(x)
    out = [np.empty(a.shape, a.dtype) for a in want.values()]  # by position
    got = views.run_into(out, x)
    for array, mine, (name, expected) in zip(got.values(), out, want.items(), strict=True):
        assert array is mine, name
        np.testing.assert_array_equal(array, expected, err_msg=name)


def test_run_into_an_array_smaller_than_the_run_is_refused(views):
    out = views.empty_outputs()
    out["flat"] = np.full(17, 7.0, np.float32)  # 6 * 3 = 18 elements needed
    with pytest.raises(ArtifactError, match=re.escape(
            "model 'views': out array for output 'flat' must be a writeable C-contiguous "
            "float32 array of at least 18 elements (this run's shape [18]), got "
            "float32[17]; nothing ran")):
        views.run_into(out, np.ones((3, 6), np.float32))
    assert (out["flat"] == 7.0).all()
    with pytest.raises(ArtifactError, match=re.escape(
            "model 'views': out= must name its outputs (sum, flat, x_again, table, relu, "
            "relu_twice), got sum")):
        views.run_into({"sum": out["sum"]}, np.ones((3, 6), np.float32))


def test_run_into_and_run_entry_check_the_bounds(views):
    out = views.empty_outputs()
    with pytest.raises(RuntimeStatusError, match=re.escape(
            "views: input 'x' axis 0: dim N=9 is outside its bounds 1..8")):
        views.run_into({**out, "flat": np.empty(54, np.float32)}, np.ones((9, 6), np.float32))
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    got = views.run_entry("run", x)
    assert got["flat"].shape == (30,)
    np.testing.assert_array_equal(got["x_again"], x)


@pytest.mark.parametrize("text", ["N*S", "2*N*S-S", "ceildiv(S,2)", "floordiv(N+S,3)",
                                  "S+1", "-N+S"])
def test_dim_value_reads_what_the_ir_writes(text):
    values = {"N": 5, "S": 7}
    assert dim_value(str(canonical(text)), values) == evaluate(text, values)


@pytest.mark.parametrize("text", ["N/2", "__import__('os')", "N**2", "ceildiv(S)", "S+"])
def test_dim_value_refuses_other_text(text):
    with pytest.raises(ArtifactError, match="in the manifest is not one flowc writes"):
        dim_value(text, {"N": 5, "S": 7})


def test_own_buffers_at_the_bounds_run_any_size_in_place(views):
    """The context's own buffers are views at the bounds: an input written at the front of
    its buffer (a leading slice) and the own outputs run without a copy of either."""
    own_in, own_out = views.own_buffers()
    assert own_in["x"].shape == (8, 6) and own_out["flat"].shape == (48,)
    x = own_in["x"][:5]
    x[...] = np.arange(30, dtype=np.float32).reshape(5, 6) - 10
    got = views.run_into(own_out, x=x)
    want = views.run(x.copy())
    for name, array in got.items():
        np.testing.assert_array_equal(array, want[name], err_msg=name)
        assert np.shares_memory(array, own_out[name]), name
