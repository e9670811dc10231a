"""bench/ops.py (issue [13]'s registry-wide op bench) runs end to end on a few ops, writes
its table sorted slowest first with the per-call floor, and asks for a reason for every
ratio over 2; its table covers every op of the node-test scope or says why not."""

import ast
import sys
from argparse import Namespace
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import ops  # noqa: E402
import ops_table  # noqa: E402


def scope_ops() -> set[str]:
    """SCOPE_OPS of tests/frontend/test_onnx_backend.py, read without loading its cases."""
    tree = ast.parse((ROOT / "tests" / "frontend" / "test_onnx_backend.py").read_text())
    sets = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)}
    names = set()
    for element in sets["SCOPE_OPS"].elts:
        if isinstance(element, ast.Starred):
            names |= {e.value for e in sets[element.value.id].elts}
        else:
            names.add(element.value)
    return names


def test_every_scope_op_is_benched_or_left_out_with_a_reason():
    benched = {case.op for case in ops_table.CASES.values()}
    missing = scope_ops() - benched - set(ops_table.LEFT_OUT)
    assert not missing, f"ops of the node-test scope neither in ops_table nor LEFT_OUT: {missing}"
    assert all(why.strip() for why in ops_table.LEFT_OUT.values())
    assert set(ops_table.REASONS) <= set(ops_table.CASES), "a reason for a row that is not one"


def test_quick_run_writes_the_table(tmp_path):
    out = tmp_path / "ops.md"
    assert ops.main(["--only", "Add,ReduceSum,Gather", "--quick", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Single-op kernels: flowc against onnxruntime\n")
    assert "Per-call floor (a 16-element Neg, same calls): flowc " in text
    rows = [line.split("|")[1:-1] for line in text.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip() in ("Add", "ReduceSum",
                                                                         "Gather")]
    assert sorted(r[0].strip() for r in rows) == ["Add", "Gather", "ReduceSum"]
    ratios = [float(r[4].strip(" *")) for r in rows]
    assert ratios == sorted(ratios, reverse=True) and all(x > 0 for x in ratios)
    assert all(float(r[2]) > 0 and float(r[3]) > 0 for r in rows)
    assert "| If | control flow" in text  # the ops left out, with why


def test_slow_rows_show_their_reason_or_say_none_is_stated(monkeypatch):
    monkeypatch.setattr(ops_table, "REASONS", {"Add": "a known cause"})
    rows = {"Add": {"flowc_us": 30.0, "ort_us": 10.0, "ratio": 3.0},
            "Relu": {"flowc_us": 25.0, "ort_us": 10.0, "ratio": 2.5},
            "Neg": {"flowc_us": 10.0, "ort_us": 10.0, "ratio": 1.0},
            "Elu": {"error": "OnnxImportError: no Elu"}}
    floor = {"flowc_us": 5.0, "ort_us": 2.0, "ratio": 2.5}
    text = ops.report(rows, floor, Namespace(argv=[], min_runs=5, min_s=0.0), 1.0)
    lines = {line.split("|")[1].strip(): line for line in text.splitlines()
             if line.startswith("| ")}
    assert lines["Add"].endswith("| **3.00** | a known cause |")
    assert lines["Relu"].endswith("| **2.50** | **no reason stated** |")
    assert lines["Neg"].endswith("| 1.00 |  |")
    assert "| Elu | 1x64x56x56 | OnnxImportError: no Elu |" in text
    assert "2 over 2x (1 without a reason)" in text
    assert text.index("| Add |") < text.index("| Relu |") < text.index("| Neg |")


def test_unknown_row_is_refused(capsys):
    with pytest.raises(SystemExit):
        ops.main(["--only", "Add,NoSuchOp", "--quick"])
    assert "--only: no row NoSuchOp in bench/ops_table.py" in capsys.readouterr().err
