"""Artifacts built with the naive test backend: results, storage cases, files, threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from artifact_util import compile_naive, views_graph

import flowc
from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close, is_close


def test_mlp_matches_interpreter(naive_mlp, mlp_model):
    out, manifest = naive_mlp
    model = flowc.load(out)
    x = zoo.sample_input(mlp_model, batch=3, seed=7)["x"]
    want = interpret(import_onnx(mlp_model), {"x": x})["probs"]
    assert_close(model(x), want, "matmul", n=64)
    assert model.run(x=x).keys() == {"probs"}
    assert manifest["inputs"] == [{"name": "x", "c_name": "x", "dtype": "f32",
                                   "shape": [3, 64]}]
    assert manifest["symbolic_dims"] == {"N": 3}


def test_every_storage_case(tmp_path):
    graph = views_graph()
    manifest = compile_naive(graph, tmp_path, batch=2)
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    got = flowc.load(tmp_path).run(x=x)
    want = interpret(graph, {"x": x})
    assert list(got) == [name for name, _ in graph.outputs]
    for name in want:
        assert_close(got[name], want[name], "elementwise", err_msg=name)
    # add and relu only: the reshape is a view, the constants are weights or inlined
    assert [k["nodes"] for k in manifest["kernels"]] == [["sum"], ["relu"]]


def test_same_input_gives_identical_files(tmp_path, mlp_model):
    a = compile_naive(mlp_model, tmp_path / "a", batch=2)
    b = compile_naive(mlp_model, tmp_path / "b", batch=2)
    assert a == b
    for name in a["files"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "manifest.json").read_bytes() == \
        (tmp_path / "b" / "manifest.json").read_bytes()


def test_weights_side_file(tmp_path, mlp_model):
    manifest = compile_naive(mlp_model, tmp_path, batch=2, weights="file")
    assert manifest["weights"]["file"] == "mlp.weights"
    assert (tmp_path / "mlp.weights").stat().st_size == 64 + manifest["weights"]["bytes"]
    x = zoo.sample_input(mlp_model, batch=2)["x"]
    want = interpret(import_onnx(mlp_model), {"x": x})["probs"]
    assert_close(flowc.load(tmp_path)(x), want, "matmul", n=64)


def test_two_models_in_one_process(tmp_path, mlp_model):
    other = zoo.mlp(features=32, hidden=16, classes=4, seed=5)
    compile_naive(mlp_model, tmp_path / "a", batch=2, name="first")
    compile_naive(other, tmp_path / "b", batch=2, name="second")
    first, second = flowc.load(tmp_path / "a"), flowc.load(tmp_path / "b")
    for model, onnx_model in ((first, mlp_model), (second, other), (first, mlp_model)):
        x = zoo.sample_input(onnx_model, batch=2, seed=3)["x"]
        want = interpret(import_onnx(onnx_model), {"x": x})["probs"]
        assert_close(model(x), want, "matmul", n=64)


def test_one_model_from_several_threads(naive_mlp, mlp_model):
    out, _ = naive_mlp
    graph = import_onnx(mlp_model)
    errors = []

    def work(seed: int) -> None:
        model = flowc.load(out, threads=1)  # one context per thread
        for k in range(20):
            x = zoo.sample_input(mlp_model, batch=3, seed=seed * 100 + k)["x"]
            want = interpret(graph, {"x": x})["probs"]
            if not is_close(model(x), want, "matmul", n=64):
                errors.append((seed, k))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.parametrize("threads", [1, 2])
def test_repeated_runs_do_not_grow_memory(naive_mlp, threads):
    out, _ = naive_mlp
    model = flowc.load(out, threads=threads)
    x = np.ones((3, 64), np.float32)
    for _ in range(200):
        model(x)
    before = _rss_bytes()
    for _ in range(3000):
        model(x)
    assert _rss_bytes() - before < 2 << 20  # 3000 runs: under 2 MiB (no per-run leak)


def test_fresh_contexts_do_not_grow_memory(naive_mlp):
    out, _ = naive_mlp
    for _ in range(20):
        flowc.load(out).close()
    before = _rss_bytes()
    for _ in range(300):
        flowc.load(out, threads=2).close()
    assert _rss_bytes() - before < 4 << 20
