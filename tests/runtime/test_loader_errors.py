"""Every way loading or running an artifact can go wrong gives a clear ArtifactError."""

from __future__ import annotations

import ctypes
import json
import re
from pathlib import Path

import numpy as np
import pytest

import flowc
from flowc.runtime import ArtifactError
from flowc.runtime.abi import ABI_VERSION


def edit_manifest(path: Path, **changes) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(changes)
    (path / "manifest.json").write_text(json.dumps(manifest))


def x(shape=(2, 64), dtype=np.float32):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("call, message", [
    (lambda m: m(y=x()), "model 'mlp' has no input 'y' (its inputs: x)"),
    (lambda m: m(), "model 'mlp': missing input(s) x"),
    (lambda m: m(x(), x()), "model 'mlp' takes 1 inputs (x), got 2 positional"),
    (lambda m: m(x(), x=x()), "model 'mlp': input 'x' given twice"),
    (lambda m: m(x(dtype=np.float64)),
     "model 'mlp': input 'x' must be float32 of shape [2, 64], got dtype float64 "
     "(no implicit cast)"),
    (lambda m: m(x((3, 64))),
     "model 'mlp': input 'x' must have shape [2, 64], got [3, 64] (the artifact was compiled "
     "for {'N': 2})"),
])
def test_bad_inputs(built_mlp, call, message):
    with pytest.raises(ArtifactError, match="^" + re.escape(message) + "$"):
        call(flowc.load(built_mlp))


def test_runtime_checks_shapes_itself(built_mlp):
    """The C runtime checks too: calling it directly with a wrong shape or dtype fails."""
    model = flowc.load(built_mlp)
    data = x((3, 64))
    dims = (ctypes.c_int64 * 2)(3, 64)
    status = model._fn("set_input")(model._ctx, 0, data.ctypes.data, 11, 2, dims)
    assert status == 2
    assert model._error() == "mlp: input 'x': expected shape [2,64], got [3,64]"
    status = model._fn("set_input")(model._ctx, 0, data.ctypes.data, 12, 2, dims)
    assert status == 3
    assert model._error() == "mlp: input 'x': expected dtype f32, got f64"
    status = model._fn("set_input")(model._ctx, 5, data.ctypes.data, 11, 2, dims)
    assert model._error() == "mlp: input index 5 out of range (the model has 1)"
    assert model._fn("set_threads")(model._ctx, -3) == 1
    assert model._error() == "mlp: thread count must be 1..1024, got -3"
    assert model._fn("set_threads")(model._ctx, 1025) == 1


def test_missing_directory(tmp_path):
    with pytest.raises(ArtifactError, match=f"^{re.escape(str(tmp_path / 'nope'))}: no such "
                                            "artifact directory$"):
        flowc.load(tmp_path / "nope")


def test_missing_manifest(tmp_path):
    with pytest.raises(ArtifactError, match=r"no manifest\.json; is this a flowc artifact"):
        flowc.load(tmp_path)


def test_unreadable_manifest(mlp_copy):
    (mlp_copy / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match=r"manifest\.json: not a readable manifest"):
        flowc.load(mlp_copy)


def test_not_a_flowc_manifest(mlp_copy):
    edit_manifest(mlp_copy, format="something-else")
    with pytest.raises(ArtifactError, match="not a flowc artifact manifest "
                                            r"\(format is 'something-else'\)"):
        flowc.load(mlp_copy)


def test_abi_version_mismatch(mlp_copy):
    edit_manifest(mlp_copy, abi_version=99)
    with pytest.raises(ArtifactError, match="artifact ABI version 99, but this runtime reads "
                                            f"version {ABI_VERSION}; recompile the model"):
        flowc.load(mlp_copy)


def test_missing_library(mlp_copy):
    (mlp_copy / "libmlp.so").unlink()
    with pytest.raises(ArtifactError, match=r"missing artifact file 'libmlp\.so'"):
        flowc.load(mlp_copy)


def test_corrupted_library(mlp_copy):
    lib = mlp_copy / "libmlp.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="the library does not match the manifest"):
        flowc.load(mlp_copy)


def test_library_that_is_not_a_library(mlp_copy):
    import hashlib

    lib = mlp_copy / "libmlp.so"
    lib.write_bytes(b"not an ELF file at all")
    manifest = json.loads((mlp_copy / "manifest.json").read_text())
    manifest["files"]["libmlp.so"] = hashlib.sha256(lib.read_bytes()).hexdigest()
    (mlp_copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"libmlp\.so: cannot load the library"):
        flowc.load(mlp_copy)


def test_manifest_disagrees_with_library(mlp_copy):
    manifest = json.loads((mlp_copy / "manifest.json").read_text())
    manifest["inputs"][0]["shape"] = [4, 64]
    (mlp_copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"library and manifest disagree: input 0 is "
                                            r"\('x', 11, \[2, 64\]\) in the library"):
        flowc.load(mlp_copy)


def test_manifest_of_another_graph(mlp_copy):
    edit_manifest(mlp_copy, graph_hash="0123456789abcdef")
    with pytest.raises(ArtifactError, match="library and manifest disagree: graph hash "):
        flowc.load(mlp_copy)


def test_closed_model(built_mlp):
    model = flowc.load(built_mlp)
    model.close()
    message = f"{built_mlp}: model 'mlp' is closed (Model.close was called); load it again"
    with pytest.raises(ArtifactError, match="^" + re.escape(message) + " to run it$"):
        model(x())
    with pytest.raises(ArtifactError, match="model 'mlp' is closed"):
        model.set_threads(1)
    model.close()  # closing again does nothing


def test_bad_thread_count_from_environment(built_mlp, monkeypatch):
    monkeypatch.setenv("FLOWC_NUM_THREADS", "many")
    with pytest.raises(ArtifactError, match="FLOWC_NUM_THREADS='many': expected a whole number"):
        flowc.load(built_mlp)


def test_caller_provided_arena(built_mlp):
    """NAME_set_arena: an aligned buffer of the right size is used; a short one is refused."""
    from flowc.runtime.loader import aligned_empty

    model = flowc.load(built_mlp)
    want = model(x())
    set_arena = model._fn("set_arena")
    set_arena.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    nbytes = model.manifest["arena_bytes"]
    arena = aligned_empty((nbytes,), np.dtype(np.uint8))
    arena[:] = 0xAB
    assert set_arena(model._ctx, arena.ctypes.data, nbytes) == 0
    np.testing.assert_array_equal(model(x()), want)
    assert set_arena(model._ctx, arena.ctypes.data, nbytes - 1) == 1
    assert model._error().startswith(f"mlp: the arena must be 64-byte aligned and hold {nbytes} "
                                     f"bytes (got {nbytes - 1} bytes at 0x")
    assert set_arena(model._ctx, None, 0) == 0  # back to an arena of its own
    np.testing.assert_array_equal(model(x()), want)
