"""Compile time grows near-linearly with graph size (issue [19]: a 20,000-node elementwise
chain took 312 s in one kernel's compile, 500 branches into a concat 29 s). The sizes are
slow tests (each compiles hundreds of kernels); the bench's own run is tiny."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import compile_scaling


def test_bench_writes_its_report(tmp_path, capsys):
    out = tmp_path / "scaling.md"
    assert compile_scaling.main(["--sizes", "20,40", "--weights", "2", "--repeats", "1",
                                 "--output", str(out)]) == 0
    text = out.read_text()
    assert "| chain |" in text and "| branches |" in text and "| 2 | 4 |" in text


@pytest.mark.slow
@pytest.mark.parametrize("build", [compile_scaling.chain, compile_scaling.branches])
def test_four_times_the_nodes_take_well_under_sixteen_times_as_long(build):
    small = compile_scaling.compile_seconds(build(2000))
    large = compile_scaling.compile_seconds(build(8000))
    assert large < 8 * small + 5, (small, large)


@pytest.mark.slow
def test_a_20000_node_chain_compiles_in_minutes_not_hours():
    assert compile_scaling.compile_seconds(compile_scaling.chain(20000)) < 240
