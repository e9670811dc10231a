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
from flowc.codegen.driver import precision_passes
from flowc.codegen.options import CompileOptions
from flowc.codegen.target import get_target
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import const_value, make_node
from flowc.ir.errors import FlowcError
from flowc.ir.printer import print_graph
from flowc.passes import parse_pipeline
from flowc.passes.pipeline import print_pipeline


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


BF16_HOST = "+avx512bf16" in get_target("host").features.split(",")


def _ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def test_dot_makes_bf16_matmuls_of_constant_weights():
    """precision{dot=true}: the gemm (its bias the kernel's start) and the matmul become
    `bf16_matmul` of the cast activation and a packed weight, f32 results, no cast back."""
    (p,) = parse_pipeline("precision{dot=true}")
    g = p.run(_mlp())
    ops = _ops(g)
    assert ops.count("bf16_matmul") == 2 and "gemm" not in ops and "matmul" not in ops
    gemm = next(n for n in g.nodes if n.op == "bf16_matmul")
    assert len(gemm.inputs) == 3 and gemm.types[0].dtype.name == "f32"
    assert tuple(gemm.inputs[1].type.shape) == (8, 32, 32)  # N 128 / 16, K 64 / 2, 32
    assert ops.count("cast") == 2  # the two activations to bf16, nothing back
    assert print_pipeline([p]) == "precision{dtype=bf16,convs=false,dot=true}"
    assert print_pipeline(parse_pipeline("precision")) == "precision{dtype=bf16,convs=false}"


def test_dot_is_chosen_by_the_targets_features():
    opts = CompileOptions(precision="bf16")
    on = precision_passes([], opts, False, "+avx2,+avx512f,+avx512bf16")
    off = precision_passes([], opts, False, "+avx2,+avx512f,-avx512bf16")
    half = precision_passes([], CompileOptions(precision="f16"), False, "+avx512bf16")
    assert [p.dot for p in on + off + half] == [True, False, False]


def _product(m: int) -> Graph:
    """x [m, 64] @ w [64, 48], both graph inputs."""
    g = Graph("prod")
    x = g.add_input("x", TensorType("f32", (m, 64)))
    w = g.add_input("w", TensorType("f32", (64, 48)))
    g.add_output("y", g.append(make_node("matmul", [x, w])).out())
    return g


def test_dot_packs_a_large_non_constant_b_at_run_time(tmp_path):
    (p,) = parse_pipeline("precision{dot=true}")
    assert "bf16_matmul" in _ops(p.run(_product(128)))
    assert "transpose" in _ops(p.run(_product(128)))
    assert _ops(p.run(_product(16))) == ["matmul"]  # too few rows to pay
    if not BF16_HOST:
        return
    rng = np.random.default_rng(6)
    xs, ws = (rng.standard_normal(s).astype(np.float32) for s in ((128, 64), (64, 48)))
    flowc.compile(_product(128), tmp_path / "a", name="prodbf", precision="bf16",
                  cache=False)
    got = flowc.load(tmp_path / "a").run(x=xs, w=ws)["y"]
    r = ml_dtypes.bfloat16
    exact = xs.astype(r).astype(np.float64) @ ws.astype(r).astype(np.float64)
    assert got.dtype == np.float32
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()  # f32 sums, exact products


def test_dot_keeps_leading_dims_of_a_rank_3_activation(tmp_path):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((32, 40)).astype(np.float32)
    g = Graph("r3")
    x = g.add_input("x", TensorType("f32", (2, 5, 32)))
    c = g.append(make_node("constant", [], {"value": Tensor(w)})).out()
    g.add_output("y", g.append(make_node("matmul", [x, c])).out())
    flowc.compile(g, tmp_path / "a", name="r3bf", precision="bf16", cache=False)
    xs = rng.standard_normal((2, 5, 32)).astype(np.float32)
    got = flowc.load(tmp_path / "a").run(x=xs)["y"]
    r = ml_dtypes.bfloat16
    exact = xs.astype(r).astype(np.float64) @ w.astype(r).astype(np.float64)
    assert got.shape == (2, 5, 40)
    assert np.abs(got - exact).max() <= 2 ** -7 * np.abs(exact).max()


def test_dot_takes_in_a_bias_add_and_casts_a_shared_activation_once(tmp_path):
    """Two products of one rank-3 x (attention's q and k), each followed by an add of a
    constant row bias: one cast of x, two `bf16_matmul` with the bias as their third
    operand (the adds gone), the sums right against the bf16-rounded operands."""
    rng = np.random.default_rng(8)
    ws = [rng.standard_normal((32, 16)).astype(np.float32) for _ in range(2)]
    bs = [rng.standard_normal(16).astype(np.float32) for _ in range(2)]
    g = Graph("qk")
    x = g.add_input("x", TensorType("f32", (2, 3, 32)))
    for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
        wc, bc = (g.append(make_node("constant", [], {"value": Tensor(a)})).out() for a in (w, b))
        y = g.append(make_node("matmul", [x, wc])).out()
        g.add_output(f"y{i}", g.append(make_node("add", [y, bc])).out())
    (p,) = parse_pipeline("precision{dot=true}")
    ops = _ops(p.run(g))
    assert ops.count("cast") == 1 and "add" not in ops and ops.count("bf16_matmul") == 2
    assert all(len(n.inputs) == 3 for n in p.run(g).nodes if n.op == "bf16_matmul")
    if not BF16_HOST:
        return
    flowc.compile(g, tmp_path / "a", name="qkbf", precision="bf16", cache=False)
    xs = rng.standard_normal((2, 3, 32)).astype(np.float32)
    got = flowc.load(tmp_path / "a").run(x=xs)
    r = ml_dtypes.bfloat16
    for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
        exact = xs.astype(r).astype(np.float64) @ w.astype(r).astype(np.float64) + b
        assert np.abs(got[f"y{i}"] - exact).max() <= 1e-5 * np.abs(exact).max()


def _pointwise(n: int) -> Graph:
    """A 1x1 conv with bias, 16 -> 24 channels over 8x6 (H * W = 48), batch n."""
    rng = np.random.default_rng(9)
    g = Graph("pw")
    x = g.add_input("x", TensorType("f32", (n, 16, 8, 6)))
    w, b = (g.append(make_node("constant", [], {"value": Tensor(a.astype(np.float32))})).out()
            for a in (rng.standard_normal((24, 16, 1, 1)), rng.standard_normal(24)))
    g.add_output("y", g.append(make_node("conv", [x, w, b])).out())
    return g


def test_dot_makes_a_1x1_conv_of_one_image_a_bf16_matmul(tmp_path):
    (p,) = parse_pipeline("precision{dot=true}")
    assert "bf16_matmul" in _ops(p.run(_pointwise(1))) and "conv" not in _ops(
        p.run(_pointwise(1)))
    assert _ops(p.run(_pointwise(2))).count("conv") == 1  # a batch: left f32 (convs=false)
    if not BF16_HOST:
        return
    g = _pointwise(1)
    flowc.compile(g, tmp_path / "a", name="pwbf", precision="bf16", cache=False)
    xs = np.random.default_rng(10).standard_normal((1, 16, 8, 6)).astype(np.float32)
    got = flowc.load(tmp_path / "a").run(x=xs)["y"]
    w, b = (const_value(n.out()) for n in g.nodes if n.op == "constant")
    r = ml_dtypes.bfloat16
    exact = np.einsum("oc,nchw->nohw", w.reshape(24, 16).astype(r).astype(np.float64),
                      xs.astype(r).astype(np.float64)) + b.reshape(24, 1, 1)
    assert got.shape == (1, 24, 8, 6)
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()
