"""`flowc view`: .flowc files, dump folders (by stage) and the errors it reports."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flowc.cli import main

SAMPLE = Path(__file__).with_name("view_sample.flowc")
MLP = Path(__file__).parents[2] / "flowc" / "examples" / "mlp.flowc"


@pytest.mark.parametrize("suffix, start", [(".svg", "<svg"), (".dot", "digraph"),
                                           (".html", "<!DOCTYPE html>")])
def test_view_writes_each_format(tmp_path, suffix, start):
    out = tmp_path / f"g{suffix}"
    assert main(["view", str(SAMPLE), "-o", str(out)]) == 0
    assert out.read_text().startswith(start)


def test_view_of_a_compile_dump_shows_devices_kernels_and_transfers(tmp_path):
    dump = tmp_path / "dump"
    assert main(["compile", str(MLP), "-o", str(tmp_path / "art"), "--batch", "4",
                 "--dump-dir", str(dump), "--devices", "cpu:0,cpu:1",
                 "--place", "fc2/add=cpu:1"]) == 0
    assert main(["view", str(dump), "-o", str(tmp_path / "final.svg")]) == 0
    final = (tmp_path / "final.svg").read_text()
    assert 'data-device="cpu:0"' in final and 'data-device="cpu:1"' in final
    assert "cluster-fused" in final and "edge-transfer" in final
    assert main(["view", str(dump), "--stage", "cse", "-o", str(tmp_path / "cse.svg")]) == 0
    early = (tmp_path / "cse.svg").read_text()  # before place/partition/fuse
    assert "cluster-fused" not in early and "edge-transfer" not in early
    number = next(p.name[:2] for p in dump.glob("*-fuse.flowc"))  # a stage by its number
    assert main(["view", str(dump), "--stage", number, "-o", str(tmp_path / "fuse.dot")]) == 0
    assert "cluster_fused" in (tmp_path / "fuse.dot").read_text()


def test_view_errors_name_the_path(tmp_path, capsys):
    assert main(["view", str(SAMPLE), "-o", str(tmp_path / "g.png")]) == 1
    assert "g.png': the output must end in .html, .svg, .dot" in capsys.readouterr().err
    assert main(["view", str(tmp_path / "nope.flowc"), "-o", str(tmp_path / "g.svg")]) == 1
    assert "nope.flowc': no such file or folder" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["view", str(empty), "-o", str(tmp_path / "g.svg")]) == 1
    assert "empty': no flowc IR (IR files: none)" in capsys.readouterr().err
    dump = tmp_path / "dump"
    dump.mkdir()
    shutil.copy(SAMPLE, dump / "00-input.flowc")
    assert main(["view", str(dump), "--stage", "fuse", "-o", str(tmp_path / "g.svg")]) == 1
    assert "no stage 'fuse' (IR files: 00-input.flowc)" in capsys.readouterr().err
    text = tmp_path / "notes.txt"
    text.write_text("x")
    assert main(["view", str(text), "-o", str(tmp_path / "g.svg")]) == 1
    assert "expected a .flowc graph, an .onnx model or a dump folder" in capsys.readouterr().err


def test_view_of_an_onnx_model(tmp_path):
    import onnx

    from flowc.examples import zoo

    model = tmp_path / "cnn.onnx"
    onnx.save(zoo.cnn(), model)
    assert main(["view", str(model), "-o", str(tmp_path / "cnn.svg")]) == 0
    assert 'data-node="pool1/MaxPool"' in (tmp_path / "cnn.svg").read_text()


def test_view_of_an_artifact_directory_draws_its_dump_or_says_how(tmp_path, capsys):
    art = tmp_path / "art"
    assert main(["compile", str(MLP), "-o", str(art), "-q", "--batch", "2"]) == 0
    assert main(["view", str(art), "-o", str(tmp_path / "a.svg")]) == 1
    assert capsys.readouterr().err == (
        f"flowc: error: '{art}': an artifact directory of model 'mlp', which holds no graph; "
        "draw the model it was compiled from (flowc view MODEL -o OUT), or recompile with "
        f"--dump-dir {art}/dump and draw that (flowc view {art} -o OUT)\n")
    assert main(["compile", str(MLP), "-o", str(art), "-q", "--batch", "2",
                 "--dump-dir", str(art / "dump")]) == 0
    assert main(["view", str(art), "-o", str(tmp_path / "a.svg")]) == 0
    assert "cluster-fused" in (tmp_path / "a.svg").read_text()  # the compiled graph
    assert main(["view", str(art), "--memory", "-o", str(tmp_path / "m.svg")]) == 0
    assert main(["view", str(art), "--stage", "cse", "-o", str(tmp_path / "cse.svg")]) == 0
    assert "cluster-fused" not in (tmp_path / "cse.svg").read_text()
