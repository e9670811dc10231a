"""What a pass is.

Contract: a pass is a frozen dataclass with a class attribute `name` (how pipelines and
`flowc opt -p` spell it) and a method `run(graph) -> Graph`. Its dataclass fields are its
options (`prune{keep_stateful=false}`); each has a default and is a bool, int, float or str.
`run` never mutates its argument (nodes are immutable; build new graphs, e.g. with
`flowc.ir.graph.rebuild`) and returns a graph that verifies whenever its input verifies.
A pass reports a problem in the user's graph with a FlowcError; anything else it raises is
a bug in the pass, which the PassManager reports naming the pass.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

from flowc.ir.graph import Graph


@runtime_checkable
class Pass(Protocol):
    """A graph-to-graph transformation (see the module docstring for the contract)."""

    name: ClassVar[str]

    def run(self, graph: Graph) -> Graph: ...
