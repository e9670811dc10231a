"""The pass manager: runs a pipeline, verifying and optionally dumping after each pass.

Contract: `PassManager(passes, verify=True, dump=None).run(graph)` runs the passes in order
and returns the last result. With `verify`, the graph is verified after each pass. With
`dump` (a text stream), the graph is printed after each pass under the banner
`// -----// IR Dump After NAME //----- //`. A failure (a pass raising, or its result not
verifying) is a FlowcError naming the pass and the passes that ran before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph
from flowc.ir.printer import print_graph
from flowc.ir.verifier import verify as verify_graph
from flowc.passes.pipeline import print_pipeline


def banner(name: str) -> str:
    return f"// -----// IR Dump After {name} //----- //"


class PassManager:
    def __init__(self, passes: Sequence[Any], *, verify: bool = True,
                 dump: TextIO | None = None, resources: bool = False):
        self.passes = list(passes)
        self.verify = verify
        self.dump = dump
        self.resources = resources

    def run(self, graph: Graph) -> Graph:
        for i, p in enumerate(self.passes):
            before = print_pipeline(self.passes[:i]) or "none"
            where = f"pass '{p.name}' (after: {before}) on graph @{graph.name}"
            try:
                graph = p.run(graph)
            except FlowcError as exc:
                raise FlowcError(f"{where} failed: {exc}") from exc
            except Exception as exc:  # a bug in the pass: still say which pass
                raise FlowcError(f"{where} failed: {type(exc).__name__}: {exc}") from exc
            if self.verify:
                try:
                    verify_graph(graph)
                except FlowcError as exc:
                    raise FlowcError(f"{where} produced an invalid graph: {exc}") from exc
            if self.dump is not None:
                self.dump.write(banner(p.name) + "\n")
                self.dump.write(print_graph(graph, resources=self.resources))
                self.dump.flush()
        return graph
