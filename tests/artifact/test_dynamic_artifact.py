"""Artifacts with dims given at run time ([12], increment 4): compiled once with a bound
(`dims={"N": (1, 64)}`), planned at the bounds, run at any size in them (the inputs'
shapes give the dims); sizes outside the bounds and inputs that disagree are refused
naming input, axis, dim and values; outputs have the run's shapes."""

from __future__ import annotations

import ctypes
import re
import subprocess

import numpy as np
import pytest
from artifact_util import views_graph

import flowc
from flowc.cli import main
from flowc.codegen.plan.bind import bind_dims
from flowc.codegen.plan.dynamic import at_bounds, c_bytes, c_dim, dim_table
from flowc.ir import FlowcError, Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.printer import print_graph
from flowc.runtime.errors import ArtifactError, RuntimeStatusError


def mlp() -> Graph:
    """x [N, 8] -> gemm-like layer, relu, a second layer, softmax: the MLP with dynamic batch."""
    rng = np.random.default_rng(0)
    g = Graph("mlp")
    h = g.add_input("x", TensorType("f32", ("N", 8)))
    for i, (k, n) in enumerate([(8, 16), (16, 4)]):
        w = g.append(make_node("constant", [], {"value": Tensor(
            rng.standard_normal((k, n)).astype(np.float32))})).out()
        b = g.append(make_node("constant", [], {"value": Tensor(
            rng.standard_normal(n).astype(np.float32))})).out()
        h = g.append(make_node("matmul", [h, w], name=f"mm{i}")).out()
        h = g.append(make_node("add", [h, b], name=f"bias{i}")).out()
        if i == 0:
            h = g.append(make_node("relu", [h], name="relu")).out()
    g.add_output("y", g.append(make_node("softmax", [h], {"axis": -1}, name="prob")).out())
    return g


def two_inputs() -> Graph:
    """x [N, 8] and z [N, 4]: the dim N is read from x and checked against z."""
    g = Graph("pair")
    x = g.add_input("x", TensorType("f32", ("N", 4)))
    z = g.add_input("z", TensorType("f32", ("N", 4)))
    g.add_output("y", g.append(make_node("mul", [x, z], name="prod")).out())
    return g


@pytest.fixture(scope="module")
def dyn_mlp(tmp_path_factory):
    out = tmp_path_factory.mktemp("dyn_mlp")
    return out, flowc.compile(mlp(), out, dims={"N": (1, 64)})


def test_one_artifact_runs_every_batch_in_its_bounds(dyn_mlp):
    out, manifest = dyn_mlp
    assert manifest["dims"]["table"] == [{"name": "N", "lo": 1, "hi": 64, "input": "x",
                                          "axis": 0}]
    assert manifest["dims"]["inputs"] == [["N", 8]]
    assert manifest["inputs"][0]["shape"] == [64, 8]  # descriptors at the bounds
    model = flowc.load(out)
    rng = np.random.default_rng(1)
    for n in (1, 3, 8, 64):
        x = rng.standard_normal((n, 8)).astype(np.float32)
        y = model(x)
        assert y.shape == (n, 4)
        np.testing.assert_allclose(y, interpret(mlp(), {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_the_arena_is_planned_at_the_bounds(dyn_mlp):
    """The hidden layer [N, 16] and the logits [N, 4] at N = 64 live at once."""
    _, manifest = dyn_mlp
    assert manifest["arena_bytes"] == manifest["memory_plan"]["arena_bytes"] == 64 * 20 * 4
    assert manifest["symbolic_dims"] == {"N": [1, 64]}


@pytest.mark.parametrize("n", [0, 65])
def test_sizes_outside_the_bounds_are_refused(dyn_mlp, n):
    model = flowc.load(dyn_mlp[0])
    with pytest.raises(RuntimeStatusError, match=re.escape(
            f"mlp: input 'x' axis 0: dim N={n} is outside its bounds 1..64")):
        model(np.zeros((n, 8), np.float32))
    assert model(np.ones((2, 8), np.float32)).shape == (2, 4)  # the context still runs


def test_a_fixed_axis_or_rank_of_another_size_is_an_artifact_error(dyn_mlp):
    model = flowc.load(dyn_mlp[0])
    with pytest.raises(ArtifactError, match=re.escape(
            "model 'mlp': input 'x' axis 1 must be 8 (shape ['N', 8]), got 7")):
        model(np.zeros((2, 7), np.float32))
    with pytest.raises(ArtifactError, match=re.escape(
            "model 'mlp': input 'x' must be float32 of shape ['N', 8], got float32 of "
            "shape [8]")):
        model(np.zeros(8, np.float32))


def test_header_documents_the_dims(dyn_mlp):
    header = (dyn_mlp[0] / "mlp.h").read_text()
    assert " *   N: 1..64, input 'x' axis 0" in header
    assert " *   output 'y': f32[N,4]" in header
    assert "const int64_t *mlp_run_output_shape(const mlp_ctx *ctx, int i);" in header
    assert "int mlp_set_input_shape(mlp_ctx *ctx, int i, int rank, const int64_t *shape);" \
        in header


def test_the_c_api_takes_shapes_with_set_input(dyn_mlp):
    """set_input with the actual shape (unaligned data: copied by its actual bytes), run,
    then run_output_shape and the owned output buffer."""
    model = flowc.load(dyn_mlp[0])
    lib, ctx = model._lib, model._ctx
    x = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    raw = np.zeros(x.nbytes + 4, np.uint8)
    start = 4 if raw.ctypes.data % 64 == 0 else 0
    raw[start:start + x.nbytes] = x.view(np.uint8).ravel()
    shape = (ctypes.c_int64 * 2)(5, 8)
    lib.mlp_set_input.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                  ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    assert lib.mlp_set_input(ctx, 0, raw.ctypes.data + start, 11, 2, shape) == 0
    lib.mlp_run.argtypes = [ctypes.c_void_p]
    assert lib.mlp_run(ctx) == 0
    lib.mlp_run_output_shape.restype = ctypes.POINTER(ctypes.c_int64)
    lib.mlp_run_output_shape.argtypes = [ctypes.c_void_p, ctypes.c_int]
    assert lib.mlp_run_output_shape(ctx, 0)[:2] == [5, 4]
    lib.mlp_output.restype, lib.mlp_output.argtypes = ctypes.c_void_p, [ctypes.c_void_p,
                                                                        ctypes.c_int]
    got = np.ctypeslib.as_array(ctypes.cast(lib.mlp_output(ctx, 0),
                                            ctypes.POINTER(ctypes.c_float)), (5, 4))
    np.testing.assert_allclose(got, interpret(mlp(), {"x": x})["y"], rtol=1e-5, atol=1e-6)
    assert lib.mlp_num_dims() == 1
    lib.mlp_dim_hi.restype = ctypes.c_int64
    assert lib.mlp_dim_hi(0) == 64


def test_views_inputs_weights_and_repeated_outputs_at_run_time_sizes(tmp_path):
    """Outputs copied at the end (an input, a weight, a repeated value, a view of N*6
    elements) are copied by their run-time bytes."""
    g = views_graph()
    flowc.compile(g, tmp_path / "v", dims={"N": (1, 16)})
    model = flowc.load(tmp_path / "v")
    for n in (1, 5, 16):
        x = np.random.default_rng(n).standard_normal((n, 6)).astype(np.float32)
        got, want = model.run(x), interpret(g, {"x": x})
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value)


def test_inputs_that_disagree_on_a_dim_are_refused(tmp_path):
    flowc.compile(two_inputs(), tmp_path / "p", dims={"N": (1, 8)})
    model = flowc.load(tmp_path / "p")
    x, z = np.ones((3, 4), np.float32), np.full((3, 4), 2, np.float32)
    np.testing.assert_array_equal(model(x, z), x * z)
    with pytest.raises(RuntimeStatusError, match=re.escape(
            "pair: input 'z' axis 0: dim N=2, but input 'x' axis 0 gives N=3; nothing ran")):
        model(x, z[:2])


def test_an_op_without_a_dynamic_lowering_is_refused(tmp_path):
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", ("N", 4)))
    k = g.append(make_node("constant", [], {"value": Tensor(np.array(0))})).out()
    g.add_output("y", g.append(make_node("cumsum", [x, k], name="c")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'c' (cumsum): dim N is dynamic, and op cumsum has no kernel with "
            "run-time extents on target host yet")):
        flowc.compile(g, tmp_path / "a", dims={"N": (1, 4)})


def test_at_bounds_and_c_expressions():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", ("N", "S")))
    g.add_output("y", g.append(make_node("flatten", [x], {"axis": 2}, name="flat")).out())
    graph, sizes = bind_dims(g, None, {"N": (1, 4), "S": (2, 8)})
    table = dim_table(graph, sizes)
    assert [(d.name, d.lo, d.hi, d.input, d.axis) for d in table] == [
        ("N", 1, 4, 0, 0), ("S", 2, 8, 0, 1)]
    assert "-> (y: f32[32,1])" in print_graph(at_bounds(graph, table))
    assert c_dim("N*S", table) == "(dims[0] * dims[1])"
    assert c_dim("ceildiv(S,2)", table) == "((dims[1] + 1) / 2)"
    assert c_bytes(TensorType("f32", ("N*S", 1)), table) == "((size_t)(dims[0] * dims[1]) * 4u)"


def test_cli_summary_and_inspect_show_the_bounds(tmp_path, capsys):
    src = tmp_path / "pair.flowc"
    src.write_text(print_graph(two_inputs()))
    assert main(["compile", str(src), "-o", str(tmp_path / "a"), "--dim", "N=1..8"]) == 0
    assert ("symbolic dims: N=1..8 (--dim); the artifact runs any size in the bounds of N "
            "(given by the inputs' shapes at run time)") in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "bound dims: N=1..8 (run time);" in out
    assert "input z: f32[N,4]" in out and "output y: f32[N,4]" in out


def test_an_encoder_with_dynamic_batch_and_sequence_matches_onnxruntime(tmp_path):
    """A BERT-like encoder layer exported from torch with dynamic axes N (batch) and S
    (sequence), compiled once, run at (1, 16), (2, 128), (4, 64) against onnxruntime."""
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    from dynamic_models import encoder_onnx

    path = encoder_onnx(torch, tmp_path / "enc.onnx")
    flowc.compile(path, tmp_path / "a", dims={"N": (1, 4), "S": (1, 128)})
    model, session = flowc.load(tmp_path / "a"), ort.InferenceSession(str(path))
    rng = np.random.default_rng(4)
    for n, s in [(1, 16), (2, 128), (4, 64)]:
        x = rng.standard_normal((n, s, 32)).astype(np.float32)
        np.testing.assert_allclose(model(x), session.run(None, {"x": x})[0], rtol=1e-4,
                                   atol=1e-5)
    with pytest.raises(RuntimeStatusError, match=re.escape(
            "input 'x' axis 1: dim S=129 is outside its bounds 1..128")):
        model(np.zeros((1, 129, 32), np.float32))


def test_the_onnx_backend_runs_the_encoder_on_one_artifact(tmp_path):
    """The ONNX backend's compiled device: the encoder with symbolic N and S compiled
    once (N bounded 1..4, S by default: 1..2 * the first sequence, 1..128, which every
    later one fits), every fed shape on it, against onnxruntime."""
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    import onnx
    from dynamic_models import encoder_onnx

    from flowc.onnx_backend import FlowcBackend

    path = encoder_onnx(torch, tmp_path / "enc.onnx")
    rep = FlowcBackend.prepare(onnx.load(str(path)), "CPU", dims={"N": (1, 4)})
    backend, session = rep._run.__self__, ort.InferenceSession(str(path))
    rng = np.random.default_rng(5)
    try:
        for n, s in [(2, 64), (4, 16), (2, 100), (2, 128), (1, 3)]:
            x = rng.standard_normal((n, s, 32)).astype(np.float32)
            np.testing.assert_allclose(rep.run([x])[0], session.run(None, {"x": x})[0],
                                       rtol=1e-4, atol=1e-5, err_msg=f"{n, s}")
        assert backend.compiles == 1 and backend._dynamic[1] == {"N": (1, 4), "S": (1, 128)}
        assert not backend._models  # no shape compiled statically
    finally:
        backend.close()


def test_a_cnn_with_dynamic_batch_matches_onnxruntime(tmp_path):
    """Convs, batch norm, pools and the global mean run sample by sample over the batch
    (lower/per_sample.py): one artifact for N = 1, 3, 8, 64."""
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    from dynamic_models import cnn_onnx

    path = cnn_onnx(torch, tmp_path / "cnn.onnx")
    flowc.compile(path, tmp_path / "a", dims={"N": (1, 64)})
    model, session = flowc.load(tmp_path / "a"), ort.InferenceSession(str(path))
    rng = np.random.default_rng(7)
    for n in (1, 3, 8, 64):
        x = rng.standard_normal((n, 3, 16, 16)).astype(np.float32)
        np.testing.assert_allclose(model(x), session.run(None, {"x": x})[0], rtol=1e-4,
                                   atol=1e-5)


C_MAIN = r"""
#include <stdio.h>
#include "mlp.h"
int main(void) {
  mlp_ctx *ctx;
  float x[3 * 8];
  for (int i = 0; i < 24; i++) x[i] = (float)i / 24.0f;
  int64_t shape[2] = {3, 8};
  if (mlp_create(&ctx) || mlp_set_input(ctx, 0, x, FLOWC_DTYPE_F32, 2, shape) || mlp_run(ctx))
    return printf("%s\n", mlp_error(ctx)), 1;
  const int64_t *out = mlp_run_output_shape(ctx, 0);
  const float *y = mlp_output_y(ctx);
  printf("%s %lld..%lld [%lld,%lld] %.6f\n", mlp_dim_name(0), (long long)mlp_dim_lo(0),
         (long long)mlp_dim_hi(0), (long long)out[0], (long long)out[1], y[0] + y[11]);
  shape[0] = 65;
  int status = mlp_set_input_shape(ctx, 0, 2, shape);
  printf("%d %s\n", status, mlp_error(ctx));
  mlp_destroy(ctx);
  return 0;
}
"""


def test_a_c_program_gives_shapes_and_reads_output_shapes(dyn_mlp, tmp_path):
    """The header compiles warning-free in C and its dims API works from C."""
    art = dyn_mlp[0]
    (tmp_path / "main.c").write_text(C_MAIN)
    subprocess.run(["cc", "-Wall", "-Werror", "-I", str(art), "main.c", "-o", "main",
                    "-L", str(art), "-lmlp", f"-Wl,-rpath,{art}"], cwd=tmp_path, check=True)
    done = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True)
    first, second = done.stdout.splitlines()
    x = (np.arange(24, dtype=np.float32) / 24).reshape(3, 8)
    y = interpret(mlp(), {"x": x})["y"]
    name, bounds, shape, value = first.split(" ")
    assert (name, bounds, shape) == ("N", "1..64", "[3,4]")
    assert float(value) == pytest.approx(y[0, 0] + y[2, 3], rel=1e-5)
    assert second == "2 mlp: input 'x' axis 0: dim N=65 is outside its bounds 1..64; nothing ran"


def test_run_time_splits_match_at_every_thread_count(tmp_path):
    """Kernels that choose at run time between a parallel loop and its serial copy (row
    kernels, batched matmuls, a strided conv's samples) and those taking a run-time batch
    whole (a winograd conv, a pool) give the same results at 1, 2 and 4 threads, at sizes
    on both sides of the thresholds."""
    g = Graph("split")
    q = g.add_input("q", TensorType("f32", ("N", "S", "S")))
    v = g.add_input("v", TensorType("f32", ("N", "S", 16)))
    p = g.append(make_node("softmax", [q], {"axis": -1})).out()
    g.add_output("y", g.append(make_node("matmul", [p, v])).out())
    img = g.add_input("img", TensorType("f32", ("N", 16, 8, 8)))
    g.add_output("pool", g.append(make_node("max_pool", [img], {"kernel_shape": [2, 2],
                                                                 "strides": [2, 2]})).out())
    rng = np.random.default_rng(3)
    w = g.append(make_node("constant", [], {"value": Tensor(
        rng.standard_normal((16, 16, 3, 3)).astype(np.float32) / 12)})).out()
    g.add_output("conv", g.append(make_node("conv", [img, w], {"pads": [1, 1, 1, 1]})).out())
    g.add_output("strided", g.append(make_node("conv", [img, w], {"pads": [1, 1, 1, 1],
                                                                  "strides": [2, 2]})).out())
    flowc.compile(g, tmp_path / "a", dims={"N": (1, 8), "S": (1, 200)}, dump_dir=tmp_path / "d")
    assert "winograd_conv" in (tmp_path / "d" / "split.flowc").read_text()
    for threads in (1, 2, 4):
        model = flowc.load(tmp_path / "a", threads=threads)
        for n, s in [(1, 5), (8, 200), (3, 64)]:
            feeds = {"q": rng.standard_normal((n, s, s)).astype(np.float32),
                     "v": rng.standard_normal((n, s, 16)).astype(np.float32),
                     "img": rng.standard_normal((n, 16, 8, 8)).astype(np.float32)}
            got = model.run(**feeds)
            want = interpret(g, feeds)
            for name in ("y", "pool", "conv", "strided"):
                np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5,
                                           err_msg=f"{name} at {threads} threads, N={n} S={s}")
