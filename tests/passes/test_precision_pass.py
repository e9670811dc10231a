"""`precision` (`--precision bf16`): an f32 model's matmul/gemm/conv in bf16 with f32
accumulation, weights stored bf16. Its rewrites are in tests/golden/precision.flowc; here:
compiled results within bf16's rounding of the f32 build's (and not equal to them: the
products really are computed from bf16 operands), the weights blob about halved, the CLI's
summary line, and the errors naming the option."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

import flowc
from flowc.cli import main
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.printer import print_graph
from flowc.passes import parse_pipeline


def _mlp() -> Graph:
    """x [16, 64] -> gemm (+bias) -> relu -> matmul -> softmax."""
    rng = np.random.default_rng(0)
    g = Graph("mlp")
    x = g.add_input("x", TensorType("f32", (16, 64)))

    def const(a: np.ndarray):
        return g.append(make_node("constant", [], {"value": Tensor(a.astype(np.float32))})).out()

    h = g.append(make_node("gemm", [x, const(rng.standard_normal((64, 128)) * 0.1),
                                    const(rng.standard_normal(128))])).out()
    h = g.append(make_node("relu", [h])).out()
    y = g.append(make_node("matmul", [h, const(rng.standard_normal((128, 32)) * 0.1)])).out()
    g.add_output("y", g.append(make_node("softmax", [y], {"axis": -1})).out())
    return g


def test_bf16_build_is_within_bf16_rounding_of_f32(tmp_path):
    g = _mlp()
    flowc.compile(g, tmp_path / "f32", name="mlp32", cache=False)
    flowc.compile(g, tmp_path / "bf16", name="mlp16", precision="bf16", cache=False)
    x = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
    want = flowc.load(tmp_path / "f32").run(x=x)["y"]
    got = flowc.load(tmp_path / "bf16").run(x=x)["y"]
    assert got.dtype == np.float32
    diff = np.abs(got - want).max()
    assert 0 < diff < 2e-2, diff  # bf16 operands: 2^-9 relative each, sums of 64 and 128
    manifests = [json.loads((tmp_path / d / "manifest.json").read_text())
                 for d in ("f32", "bf16")]
    f32_bytes, bf16_bytes = (m["weights"]["bytes"] for m in manifests)
    assert bf16_bytes < 0.6 * f32_bytes, (bf16_bytes, f32_bytes)


def test_bf16_matches_numpy_on_bf16_rounded_operands(tmp_path):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((96, 48)).astype(np.float32)
    g = Graph("mm")
    x = g.add_input("x", TensorType("f32", (8, 96)))
    c = g.append(make_node("constant", [], {"value": Tensor(w)})).out()
    g.add_output("y", g.append(make_node("matmul", [x, c])).out())
    flowc.compile(g, tmp_path / "a", name="mmbf", precision="bf16", cache=False)
    xs = rng.standard_normal((8, 96)).astype(np.float32)
    got = flowc.load(tmp_path / "a").run(x=xs)["y"]
    r = ml_dtypes.bfloat16
    exact = xs.astype(r).astype(np.float64) @ w.astype(r).astype(np.float64)
    want = exact.astype(np.float32).astype(r).astype(np.float32)  # one rounding to bf16
    assert np.abs(got - want).max() <= 2 ** -7 * np.abs(exact).max()


def test_cli_reports_the_difference_from_f32(tmp_path, capsys):
    src = tmp_path / "mlp.flowc"
    src.write_text(print_graph(_mlp(), resources=True))
    assert main(["compile", str(src), "-o", str(tmp_path / "out"), "--precision", "bf16",
                 "--no-cache"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("--precision bf16 vs the f32"))
    assert "y: max abs" in line and "of max |f32|" in line


def test_bad_precision_names_the_option(tmp_path):
    with pytest.raises(FlowcError, match=r"--precision: 'i8' is not one of f32, bf16, f16"):
        flowc.compile(_mlp(), tmp_path / "x", precision="i8", cache=False)
    with pytest.raises(FlowcError, match=r"pass 'precision': option 'dtype' must be one of "
                                         r"bf16, f16, found 'f8'"):
        parse_pipeline("precision{dtype=f8}")
