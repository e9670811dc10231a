"""Binding symbolic dims at compile time ([12], increment 1): a size makes the artifact
static in the dim, a bound (lo, hi) keeps it symbolic, and a symbolic dim with neither is
an error listing every such dim: flowc never picks a size silently."""

from __future__ import annotations

import re

import pytest
from artifact_util import compile_naive

from flowc.cli import main
from flowc.codegen.plan.bind import bind_dims, format_sizes
from flowc.ir import FlowcError, Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.printer import print_graph


def two_inputs() -> Graph:
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", ("N", "S")))
    m = g.add_input("m", TensorType("f32", ("S", 4)))
    g.add_output("y", g.append(make_node("matmul", [x, m], name="mm")).out())
    return g


def test_no_binding_lists_every_symbolic_dim(tmp_path):
    with pytest.raises(FlowcError, match=re.escape(
            "graph @g has symbolic dims with no size: N (input 'x' dim 0), S (input 'x' dim 1); "
            "give each a size or a bound: dims={'N': SIZE} or dims={'N': (LO, HI)} (CLI: "
            "--dim N=SIZE or --dim N=LO..HI; --batch SIZE sizes leading dims)")):
        compile_naive(two_inputs(), tmp_path / "a")


def test_batch_alone_leaves_the_other_dims_listed(tmp_path):
    with pytest.raises(FlowcError, match=r"no size: S \(input 'x' dim 1\);"):
        compile_naive(two_inputs(), tmp_path / "a", batch=2)


def test_sizes_and_equal_bounds_build_static_artifacts(tmp_path):
    manifest = compile_naive(two_inputs(), tmp_path / "a", dims={"N": (3, 3), "S": 5})
    assert manifest["symbolic_dims"] == {"N": 3, "S": 5}
    assert [i["shape"] for i in manifest["inputs"]] == [[3, 5], [5, 4]]


def test_bounds_keep_the_dim_symbolic():
    graph, sizes = bind_dims(two_inputs(), None, {"N": (1, 64), "S": 8})
    assert sizes == {"N": (1, 64), "S": 8}
    assert format_sizes(sizes) == "N=1..64, S=8"
    assert "-> (y: f32[N,4])" in print_graph(graph)


def test_a_bounded_dim_on_a_gpu_target_is_refused_naming_node_op_and_dim(tmp_path):
    with pytest.raises(FlowcError, match=re.escape(
            "node 'mm' (matmul): op 'matmul': dim N is dynamic (1..64) in its result f32[N,4], "
            "and training artifacts, GPU targets and devices do not run dynamic dims yet; give "
            "the dim a size for a static artifact (dims={'N': SIZE}, CLI: --dim N=SIZE)")):
        compile_naive(two_inputs(), tmp_path / "a", dims={"N": (1, 64), "S": 8},
                      target="nvptx")


@pytest.mark.parametrize("dims, message", [
    ({"N": (5, 2), "S": 1}, "dim N=5..2: a bound needs 0 <= lo <= hi"),
    ({"N": (-1, 2), "S": 1}, "dim N=-1..2: a bound needs 0 <= lo <= hi"),
    ({"N": (1, 2, 3), "S": 1}, "dim N=(1, 2, 3): a bound is a pair (lo, hi) of sizes"),
    ({"N": "8", "S": 1}, "dim N='8': a dim is a size or a bound (lo, hi)"),
    ({"N": -3, "S": 1}, "dim N=-3: a dim size must be >= 0"),
    ({"N": (1, 2**60), "S": 2**20}, "input 'x' bound with N=1..1152921504606846976"),
])
def test_bad_bindings(dims, message, tmp_path):
    with pytest.raises(FlowcError, match=re.escape(message)):
        compile_naive(two_inputs(), tmp_path / "a", dims=dims)


def test_cli_dim_ranges(tmp_path, capsys):
    src = tmp_path / "g.flowc"
    src.write_text(print_graph(two_inputs()))
    assert main(["compile", str(src), "-o", str(tmp_path / "a"), "--dim", "N=2..2",
                 "--dim", "S=3"]) == 0
    assert "symbolic dims bound: N=2 (--dim), S=3 (--dim)" in capsys.readouterr().out
    assert main(["compile", str(src), "-o", str(tmp_path / "c"), "--dim", "N=1..x"]) == 1
    assert "--dim 'N=1..x' must look like NAME=SIZE or NAME=LO..HI" in capsys.readouterr().err
    assert main(["compile", str(src), "-o", str(tmp_path / "d")]) == 1
    assert "has symbolic dims with no size: N (input 'x' dim 0)" in capsys.readouterr().err


def test_results_typed_by_expressions_of_bounded_dims():
    """A result whose dim is an expression of a bounded symbol (N*S) passes strict binding."""
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", ("N", "S")))
    g.add_output("y", g.append(make_node("flatten", [x], {"axis": 2}, name="flat")).out())
    graph, _ = bind_dims(g, None, {"N": (1, 4), "S": (2, 8)})
    assert "-> (y: f32[N*S,1])" in print_graph(graph)
