"""bench/perf.py (issue [7]'s benchmark command) runs end to end on tiny models, writes its
report, and fails loudly on a mismatch; its model builders give the issue's shapes."""

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import perf  # noqa: E402
import perf_models  # noqa: E402


def test_full_size_models_have_the_issue_shapes():
    shapes = {name: perf_models.gemm_shapes(build()) for name, (build, _) in
              perf_models.MODELS.items()}
    assert sum(g.flops for g in shapes["mlp"]) == 2 * 64 * (784 * 1024 + 1024 * 1024 + 1024 * 10)
    assert sum(g.flops for g in shapes["matmul_1024"]) == 2 * 1024**3
    bert = {g.node: (g.batch, g.m, g.k, g.n) for g in shapes["bert_layer"]}
    assert bert["attn/q/MatMul"] == (1, 128, 768, 768)
    assert bert["attn/scores"] == (12, 128, 64, 128)
    assert bert["ff/fc2/MatMul"] == (1, 128, 3072, 768)
    resnet = {g.node: (g.m, g.k, g.n) for g in shapes["resnet"]}
    assert resnet["stem/Conv"] == (16, 27, 64 * 64)
    assert resnet["stage2/conv2/Conv"] == (64, 64 * 9, 16 * 16)
    dw = next(g for g in shapes["mobilenet"] if g.node == "block0/depthwise/Conv")
    assert (dw.batch, dw.m, dw.k, dw.n) == (192, 1, 9, 56 * 56)
    assert [o.type.tensor_type.shape.dim[1].dim_value
            for o in perf_models.mobilenet().graph.output] == [32]


def test_builders_are_seeded_and_valid():
    for build, small in perf_models.MODELS.values():
        first = build(**small)
        assert first.SerializeToString() == build(**small).SerializeToString()
        onnx.checker.check_model(first, full_check=True)
        feeds = {i.name: np.ones([d.dim_value for d in i.type.tensor_type.shape.dim],
                                 np.float32) for i in first.graph.input}
        out = ort.InferenceSession(first.SerializeToString()).run(None, feeds)
        assert all(np.isfinite(o).all() for o in out)


@pytest.fixture
def out_md(tmp_path):
    return tmp_path / "perf.md"


def test_quick_run_writes_the_report(out_md, capsys):
    code = perf.main(["--quick", "--models", "mobilenet", "--threads", "1", "--profile",
                      "--out", str(out_md)])
    assert code == 0
    text = out_md.read_text()
    assert text in capsys.readouterr().out
    assert "**Quick run" in text and "Load average" in text
    result = json.loads(out_md.with_suffix(".json").read_text())
    assert [(r["model"], r["threads"]) for r in result["timing"]] == [("mobilenet", 1)]
    for row in result["timing"]:
        assert row["match"] and row["max_abs_err"] < 1e-4
        assert row["flowc"]["runs"] >= 3 and row["flowc"]["median_ms"] > 0
        assert row["profile"] and row["profile"][0]["ms"] > 0
    assert all(c["warm_same_as_cold"] for c in result["compile"])
    assert [len(m["flowc"]) for m in result["memory"]] == [1]  # --quick: one process each
    assert all(r["peak_kib"] >= r["baseline_kib"] > 0
               for m in result["memory"] for r in m["flowc"] + m["ort"])
    assert "| mobilenet | 1 |" in text and "## Where the time goes" in text
    # every conv (folded with its batch norm) is found in a profiled kernel: all GEMM FLOPs
    # are accounted to kernels
    kernels = result["timing"][0]["profile"]
    assert "block0/depthwise/BatchNormalization" in text
    counted = sum(k["gflops"] * k["ms"] * 1e6 for k in kernels if "gflops" in k)
    assert counted == pytest.approx(result["compile"][0]["gflop"] * 1e9, rel=1e-6)
    assert "- outputs match onnxruntime: **met**" in text


def test_mismatch_fails_loudly(out_md, capsys):
    out_md.with_name("perf.notes.md").write_text("analysis\n")  # linked when present
    code = perf.main(["--quick", "--models", "matmul_1024", "--threads", "1", "--atol", "-1",
                      "--rtol", "0", "--out", str(out_md)])
    assert code == 1
    err = capsys.readouterr().err
    assert "ERROR: matmul_1024 at 1 thread(s): flowc's output differs from onnxruntime's" in err
    text = out_md.read_text()
    assert "**MISMATCH**" in text and "- outputs match onnxruntime: **not met**" in text
    assert "[perf.notes.md](perf.notes.md)" in text
