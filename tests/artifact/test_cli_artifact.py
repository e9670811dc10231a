"""`flowc compile`, `flowc inspect`, `flowc run DIR` and `flowc demo`, with their errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flowc.cli import main
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.runtime.abi import ABI_VERSION
from flowc.testing.tolerance import assert_close

MLP = Path(__file__).resolve().parents[2] / "flowc" / "examples" / "mlp.flowc"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "mlp_art"
    assert main(["compile", str(MLP), "-o", str(out), "--batch", "3"]) == 0
    return out


def test_compile_inspect_run(compiled, capsys, tmp_path):
    status, out, _ = run_cli(capsys, "inspect", compiled)
    assert status == 0
    assert f"artifact {compiled}: model 'mlp', flowc 0.1.0, ABI {ABI_VERSION}, graph " in out
    assert "input x: f32[3,16]\noutput y: f32[3,8]\nbound dims: N=3; arena: " in out
    kernels = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("  mlp_k")]
    # the gemm (named by its add, with the matmul merged into it) and its relu epilogue are
    # one fused kernel
    assert "fc1/add, fc1/matmul, fc1/relu" in kernels and f"kernels: {len(kernels)}\n" in out
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    status, out, _ = run_cli(capsys, "run", compiled, "--input", f"x={tmp_path / 'x.npy'}",
                             "--output-dir", tmp_path / "res", "--threads", "2")
    assert (status, out) == (0, f"y: wrote {tmp_path / 'res' / 'y.npy'}\n")
    want = interpret(parse(MLP.read_text()), {"x": x})["y"]
    assert_close(np.load(tmp_path / "res" / "y.npy"), want, "matmul", n=16)
    status, out, _ = run_cli(capsys, "run", compiled, "--random-inputs")
    assert status == 0 and out.startswith("y: dtype=float32 shape=(3, 8)\n")


def test_compile_default_output_dir(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, _ = run_cli(capsys, "compile", MLP, "--batch", "1")
    assert status == 0
    assert out.startswith("compiled ") and "-> mlp_artifact/ (libmlp.so, libmlp.a, mlp.h" in out
    assert (tmp_path / "mlp_artifact" / "manifest.json").is_file()


def test_demo(capsys):
    status, out, err = run_cli(capsys, "demo", "--batch", "2")
    assert status == 0, err
    assert out.startswith("compiled flowc/examples/mlp.flowc for batch 2 into ")
    assert "output y: shape [2, 8], max |artifact - interpreter| = " in out
    assert "median latency, 1 thread: artifact " in out


@pytest.mark.parametrize("argv, message", [
    (["compile", "nope.onnx"], "nope.onnx: no such file"),
    (["compile", "model.txt"], "model.txt: no such file; expected a .onnx model, a .flowc "
                               "graph, a .pb GraphDef or a SavedModel directory"),
    (["compile", "."], ".: is a directory without saved_model.pb; expected a .onnx model, a "
                       ".flowc graph, a .pb GraphDef or a SavedModel directory"),
    (["compile", str(MLP.parent / "make_mlp.py")], "make_mlp.py': expected a .onnx model, a "
                                                     ".flowc graph, a .pb GraphDef or a "
                                                     "SavedModel directory"),
    (["compile", str(MLP), "--dim", "N"],
     "--dim 'N' must look like NAME=SIZE or NAME=LO..HI (whole numbers)"),
    (["compile", str(MLP), "--target", "sparc"], "sparc"),
    (["inspect", "."], ".: no manifest.json; is this a flowc artifact directory"),
])
def test_errors(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    status, _, err = run_cli(capsys, *argv)
    assert status == 1
    assert err.startswith("flowc: error: ") and message in err, err


def test_run_artifact_with_a_wrong_input(compiled, capsys, tmp_path):
    np.save(tmp_path / "y.npy", np.zeros((3, 16), np.float32))
    status, _, err = run_cli(capsys, "run", compiled, "--input", f"y={tmp_path / 'y.npy'}")
    assert status == 1
    assert err == "flowc: error: model 'mlp' has no input 'y' (its inputs: x)\n"


def test_compile_summary_names_the_bound_dims(compiled, capsys, tmp_path):
    """A symbolic batch was bound to 1 without a word: now no size is picked for it, and
    the summary names the one given."""
    status, _, err = run_cli(capsys, "compile", MLP, "-o", tmp_path / "a")
    assert status == 1
    assert "graph @mlp has symbolic dims with no size: N (input 'x' dim 0)" in err
    status, out, _ = run_cli(capsys, "compile", MLP, "-o", tmp_path / "a", "--batch", "1")
    assert status == 0
    assert ("symbolic dims bound: N=1 (--batch 1); the artifact runs only these sizes "
            "(recompile with --batch / --dim for others)\n") in out
    status, out, _ = run_cli(capsys, "compile", MLP, "-o", tmp_path / "a", "--dim", "N=2")
    assert "symbolic dims bound: N=2 (--dim);" in out


@pytest.mark.parametrize("binding, message", [
    ("N=2", "--random-inputs N=2: the artifact {dir} was compiled with N=3 (N=3) and runs "
            "only those sizes; recompile it with --dim N=2 (or --batch 2)"),
    ("M=5", "--random-inputs M=5: the artifact {dir} was compiled with no dim M (N=3)"),
])
def test_run_refuses_random_input_sizes_it_was_not_compiled_for(compiled, capsys, binding,
                                                                 message):
    """`flowc run DIR --random-inputs N=2` on a batch-3 artifact ran batch 3 silently."""
    status, _, err = run_cli(capsys, "run", compiled, "--random-inputs", binding)
    assert status == 1
    assert err.startswith(f"flowc: error: {message.format(dir=compiled)}")
    assert err.count("\n") == 1
    status, out, _ = run_cli(capsys, "run", compiled, "--random-inputs", "N=3")
    assert status == 0 and out.startswith("y: dtype=float32 shape=(3, 8)\n")


def test_a_graph_without_outputs_is_refused(tmp_path):
    import flowc
    from flowc.ir import FlowcError

    source = MLP.read_text()
    graph = parse(source)
    graph.outputs = []
    with pytest.raises(FlowcError, match=r"^graph @mlp has no outputs: its artifact would "
                                         r"compute nothing a caller can see"):
        flowc.compile(graph, tmp_path / "art")
    assert not (tmp_path / "art").exists()
