"""`flowc opt` debugging flags: --print-ir-after, --dump-dir, --timing, --statistics, and
`-p default` with fusion; every error they can give."""

import pytest

from flowc.cli import main
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.passes import PIPELINES

STATIC = """graph @g(%x: f32[2,4], %w: f32[4,4]) -> (y: f32[2,4]) {
  %0 = matmul %x, %w : (f32[2,4], f32[4,4]) -> f32[2,4] loc("fc")
  %1 = matmul %x, %w : (f32[2,4], f32[4,4]) -> f32[2,4] loc("fc_copy")
  %2 = add %0, %1 : (f32[2,4], f32[2,4]) -> f32[2,4] loc("sum")
  %3 = relu %2 : (f32[2,4]) -> f32[2,4] loc("act")
  return %3
}
"""


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.flowc"
    path.write_text(STATIC)
    return path


def opt(capsys, *args):
    status = main(["opt", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def test_print_ir_after_one_pass(capsys, source):
    status, out, err = opt(capsys, source, "-p", "cse,prune", "--print-ir-after=prune")
    assert status == 0
    assert err.count("IR Dump After") == 1
    assert err.startswith("// -----// IR Dump After prune //----- //\ngraph @g(")
    assert out == err.split("\n", 1)[1]  # the last pass's dump is the result


def test_print_ir_after_all(capsys, source):
    status, _, err = opt(capsys, source, "-p", "cse,prune,fuse", "--print-ir-after", "all")
    assert status == 0
    assert [line for line in err.splitlines() if "IR Dump After" in line] == [
        f"// -----// IR Dump After {n} //----- //" for n in ("cse", "prune", "fuse")]


def test_print_ir_after_unknown_pass(capsys, source):
    status, _, err = opt(capsys, source, "-p", "cse,prune", "--print-ir-after=fuse")
    assert status == 1
    assert err == ("flowc: error: --print-ir-after=fuse: no pass 'fuse' in the pipeline "
                   "(its passes: cse, prune)\n")


def test_print_ir_after_without_a_pipeline(capsys, source):
    status, _, err = opt(capsys, source, "--print-ir-after=cse")
    assert status == 1
    assert err == ("flowc: error: --print-ir-after=cse: no pass 'cse' in the pipeline "
                   "(its passes: none: give one with -p)\n")


def test_default_pipeline_fuses_and_the_output_parses_back(capsys, source, tmp_path):
    out_path = tmp_path / "out.flowc"
    status, out, _ = opt(capsys, source, "-p", "default", "-o", out_path)
    assert status == 0 and out == ""
    text = out_path.read_text()
    assert 'kind = "matmul_epilogue"' in text
    assert print_graph(parse(text)) == text


def test_dump_dir_has_one_numbered_file_per_pass(capsys, source, tmp_path):
    dump = tmp_path / "dump"
    status, out, err = opt(capsys, source, "-p", "default", "--dump-dir", dump)
    assert status == 0 and err == ""
    steps = [step.split("{")[0] for step, _ in PIPELINES["default"]]
    expected = ["00-input.flowc"] + [f"{i:02d}-{s}.flowc" for i, s in enumerate(steps, 1)]
    assert sorted(p.name for p in dump.iterdir()) == expected
    for path in dump.iterdir():
        text = path.read_text()
        assert print_graph(parse(text, str(path))) == text
    assert (dump / expected[-1]).read_text() == out
    assert (dump / "00-input.flowc").read_text() == STATIC


def test_dump_dir_with_print_after(capsys, source, tmp_path):
    status, _, err = opt(capsys, source, "-p", "cse,fuse", "--dump-dir", tmp_path / "d",
                         "--print-ir-after=fuse")
    assert status == 0 and err == ""  # files instead of stderr
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["00-input.flowc",
                                                                   "02-fuse.flowc"]


def test_dump_dir_with_split_input_file(capsys, tmp_path):
    path = tmp_path / "two.flowc"
    path.write_text(STATIC + "// -----\n" + STATIC.replace("@g", "@h"))
    status, _, _ = opt(capsys, path, "-p", "cse", "--split-input-file", "--dump-dir",
                       tmp_path / "d")
    assert status == 0
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["chunk1", "chunk2"]
    assert "graph @h(" in (tmp_path / "d" / "chunk2" / "01-cse.flowc").read_text()


def test_dump_dir_not_writable(capsys, source, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    status, _, err = opt(capsys, source, "-p", "cse", "--dump-dir", blocker)
    assert status == 1
    assert err.startswith(f"flowc: error: cannot write IR dump '{blocker}/00-input.flowc': ")


def test_timing(capsys, source):
    status, _, err = opt(capsys, source, "-p", "cse,prune,fuse", "--timing")
    assert status == 0
    lines = err.splitlines()
    assert lines[0] == "===- Pass execution timing report (graph @g) -==="
    assert [line.split()[-1] for line in lines[2:]] == ["cse", "prune", "fuse", "total"]
    assert "4 -> 3  cse" in err and "3 -> 1  fuse" in err


def test_statistics(capsys, source):
    status, _, err = opt(capsys, source, "-p", "cse,fuse", "--statistics")
    assert status == 0
    assert err == ("===- Pass statistics report (graph @g) -===\n"
                   "cse\n  (S) 4 nodes-before\n  (S) 3 nodes-after\n  (S) 1 nodes-merged\n"
                   "fuse\n  (S) 3 nodes-before\n  (S) 1 nodes-after\n"
                   "  (S) 1 kernels-formed\n  (S) 3 nodes-fused\n")
