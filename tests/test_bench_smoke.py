"""The pass-scaling benchmark runs end to end at a tiny size and writes its report."""

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "passes_scaling.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("passes_scaling", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["passes_scaling"] = module  # dataclasses and typing look the module up
    spec.loader.exec_module(module)
    return module


def test_bench_runs_at_tiny_size(tmp_path, capsys):
    bench = load_bench()
    out = tmp_path / "scaling.md"
    assert bench.main(["--sizes", "100,300", "--repeats", "1", "--output", str(out)]) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out
    assert text.startswith("# Default pass pipeline: scaling with graph size\n")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "|" in line[2:]
            and line.split("|")[1].strip().isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == [100, 296]  # nodes in, per size
    assert all(int(r.split("|")[2]) < int(r.split("|")[1]) for r in rows)  # passes shrank it
    assert "| 1. qdq |" in text and "| 2. cse |" in text and "fuse |" in text


def test_synthetic_graph_gives_every_pass_work():
    bench = load_bench()
    graph = bench.synthetic_graph(200)
    from flowc.passes import PassManager, parse_pipeline

    manager = PassManager(parse_pipeline("cse,prune,fuse"))
    manager.run(graph)
    cse, prune, fuse = manager.records
    assert cse.nodes_after < cse.nodes_before  # duplicates merged
    assert prune.nodes_after < prune.nodes_before  # dead branches dropped
    assert fuse.stats["kernels-formed"] > 0
