"""The pass manager: runs a pipeline, verifying, timing, counting and dumping after each pass.

Contract: `PassManager(passes, verify=True, dump=None, print_after="all", dump_dir=None)
.run(graph)` runs the passes in order and returns the last result; the input is untouched.
- With `verify`, the graph is verified after each pass that returned a new graph (one that
  returns its input object unchanged is not re-verified: graphs are never mutated), the
  nodes of the graph verified last trusted (see `flowc.ir.verifier`): only what a pass
  built is checked in full. The input itself is the caller's to verify (the parser does).
- After each pass selected by `print_after` ("all", or a collection of pass names), the
  graph is printed to the text stream `dump` under `// -----// IR Dump After NAME //----- //`
  and, with `dump_dir`, written to `DIR/PREFIXNN-NAME.flowc` (`00-input.flowc` is the input;
  NN is the pass's position in the pipeline; `dump_prefix`, default none, tells apart the
  graphs of one compile, e.g. an artifact's entries), files that parse back.
- `records` holds one `PassRecord` per pass run: wall time, verify time, top-level node
  counts before and after, and the counters the pass bumped (`flowc.passes.stats.count`).
  `format_timing` and `format_statistics` render them.
- A failure (a pass raising, or its result not verifying) is a `PassFailure` naming the
  pass, the passes that ran before it and, when a node can be blamed, the printed IR around
  that node with the node's line marked `>>`.
- The cyclic garbage collector is paused while the passes run (`flowc.ir.gcpause`).
- `progress` (a `flowc.progress.Progress`; by default a quiet one) hears
  `pass_started(index, total, name)` before each pass and `pass_done(record)` after it.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from flowc.ir.errors import FlowcError
from flowc.ir.gcpause import gc_paused
from flowc.ir.graph import Graph, Node
from flowc.ir.printer import print_graph
from flowc.ir.verifier import verify as verify_graph
from flowc.passes import stats
from flowc.passes.pipeline import print_pipeline
from flowc.progress import Progress

WINDOW_LINES = 3  # lines of IR shown before and after the failing node
MAX_LINE = 160  # longer IR lines are cut in failure messages


def banner(name: str) -> str:
    return f"// -----// IR Dump After {name} //----- //"


@dataclass
class PassRecord:
    """What one pass did: its name, seconds spent running and verifying, top-level node
    counts before and after, and its statistics counters."""

    name: str
    wall_s: float
    verify_s: float
    nodes_before: int
    nodes_after: int
    stats: dict[str, int] = field(default_factory=dict)


class PassFailure(FlowcError):
    """A pass failed: `pass_name`, `before` (the passes that ran before it), `detail`, and
    `ir_window` (the printed IR around the blamed node, or None if none could be blamed)."""

    def __init__(self, pass_name: str, before: list[str], graph_name: str, what: str,
                 detail: str, ir_window: str | None):
        self.pass_name, self.before, self.detail, self.ir_window = (
            pass_name, before, detail, ir_window)
        after = ",".join(before) or "none"
        text = f"pass '{pass_name}' (after: {after}) on graph @{graph_name} {what}: {detail}"
        super().__init__(text + (f"\n{ir_window}" if ir_window else ""))


def ir_window(graph: Graph, node: Node, context: int = WINDOW_LINES) -> str | None:
    """The printed lines of `graph` around top-level `node` (its first line marked `>>`),
    or None when `node` is not one of `graph`'s nodes or inputs or `graph` cannot be printed
    (an output computed by no node of it, say)."""
    try:
        lines = print_graph(graph).split("\n")
    except (KeyError, TypeError):
        return None
    if any(node is n for n in graph.inputs):
        index, what = 0, f"input %{node.name}"
    else:
        position = next((i for i, n in enumerate(graph.nodes) if n is node), None)
        if position is None:
            return None
        # top-level node lines are the ones indented by exactly two spaces then `%`
        starts = [i for i, line in enumerate(lines) if line.startswith("  %")]
        index, what = starts[position], f"node %{position} {node.label()}"
    shown = []
    for i in range(max(0, index - context), min(len(lines), index + context + 1)):
        text = lines[i] if len(lines[i]) <= MAX_LINE else lines[i][:MAX_LINE] + " ..."
        shown.append(("  >> " if i == index else "     ") + text)
    return f"  IR around {what}:\n" + "\n".join(shown)


def blamed_node(exc: BaseException, graph: Graph) -> Node | None:
    """The node of `graph` an exception is about: its `node` attribute if it has one (None:
    about no one node), else the innermost traceback frame holding one of `graph`'s nodes in
    a local variable."""
    if "node" in vars(exc) and exc.node is None:
        return None
    node = getattr(exc, "node", None)
    members = {id(n) for n in graph.all_nodes()}
    if isinstance(node, Node) and id(node) in members:
        return node
    frames: list[TracebackType] = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    for frame in reversed(frames):
        local = frame.tb_frame.f_locals
        for value in [local.get("node"), *local.values()]:  # a local named `node` first
            if isinstance(value, Node) and id(value) in members:
                return value
    return None


class PassManager:
    def __init__(self, passes: Sequence[Any], *, verify: bool = True,
                 dump: TextIO | None = None, print_after: str | Collection[str] = "all",
                 dump_dir: str | Path | None = None, resources: bool = False,
                 progress: Progress | None = None, dump_prefix: str = ""):
        self.passes = list(passes)
        self.progress = progress or Progress(level="quiet")
        self.verify = verify
        self.dump = dump
        self.print_after = print_after
        self.dump_dir = Path(dump_dir) if dump_dir is not None else None
        self.dump_prefix = dump_prefix
        self.resources = resources
        self.records: list[PassRecord] = []
        self.trusted: frozenset[Node] = frozenset()  # nodes of the graph verified last

    def selected(self, name: str) -> bool:
        return self.print_after == "all" or name in self.print_after

    def run(self, graph: Graph) -> Graph:
        self.trusted = frozenset()
        with gc_paused():
            self.write_file(0, "input", graph)
            for i, p in enumerate(self.passes):
                graph = self.run_one(i, p, graph)
        return graph

    def run_one(self, i: int, p: Any, graph: Graph) -> Graph:
        before = [print_pipeline([q]) for q in self.passes[:i]]
        self.progress.pass_started(i, len(self.passes), p.name)
        start = time.perf_counter()
        try:
            with stats.collect() as counters:
                result = p.run(graph)
        except FlowcError as exc:
            raise PassFailure(p.name, before, graph.name, "failed", str(exc),
                              self.window(exc, graph)) from exc
        except Exception as exc:  # a bug in the pass: still say which pass and where
            raise PassFailure(p.name, before, graph.name, "failed",
                              f"{type(exc).__name__}: {exc}", self.window(exc, graph)) from exc
        wall = time.perf_counter() - start
        if self.verify and result is not graph:  # an unchanged graph verified already
            try:
                verify_graph(result, self.trusted)
            except FlowcError as exc:
                raise PassFailure(p.name, before, graph.name, "produced an invalid graph",
                                  str(exc), self.window(exc, result)) from exc
            self.trusted = frozenset(result.nodes)
        verify_s = time.perf_counter() - start - wall
        self.records.append(PassRecord(p.name, wall, verify_s, len(graph.nodes),
                                       len(result.nodes), dict(sorted(counters.items()))))
        self.progress.pass_done(self.records[-1])
        if self.selected(p.name):
            if self.dump is not None:
                self.dump.write(banner(p.name) + "\n")
                self.dump.write(print_graph(result, resources=self.resources))
                self.dump.flush()
            self.write_file(i + 1, p.name, result)
        return result

    @staticmethod
    def window(exc: BaseException, graph: Graph) -> str | None:
        node = blamed_node(exc, graph)
        return ir_window(graph, node) if node is not None else None

    def write_file(self, number: int, name: str, graph: Graph) -> None:
        if self.dump_dir is None:
            return
        path = self.dump_dir / f"{self.dump_prefix}{number:02d}-{name}.flowc"
        try:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(print_graph(graph, resources=self.resources))
        except OSError as exc:
            raise FlowcError(f"cannot write IR dump '{path}': {exc.strerror or exc}") from None


def format_timing(records: Sequence[PassRecord], graph_name: str = "") -> str:
    """A table of per-pass wall and verify seconds, and node counts, with a total row."""
    title = f"===- Pass execution timing report{f' (graph @{graph_name})' if graph_name else ''}"
    lines = [title + " -===",
             f"  {'wall (s)':>10}  {'verify (s)':>10}  {'nodes':>15}  pass"]
    for r in records:
        nodes = f"{r.nodes_before} -> {r.nodes_after}"
        lines.append(f"  {r.wall_s:>10.4f}  {r.verify_s:>10.4f}  {nodes:>15}  {r.name}")
    wall, verify = sum(r.wall_s for r in records), sum(r.verify_s for r in records)
    lines.append(f"  {wall:>10.4f}  {verify:>10.4f}  {'':>15}  total")
    return "\n".join(lines) + "\n"


def format_statistics(records: Sequence[PassRecord], graph_name: str = "") -> str:
    """Per pass: node counts before and after, then each counter it bumped."""
    title = f"===- Pass statistics report{f' (graph @{graph_name})' if graph_name else ''}"
    lines = [title + " -==="]
    for r in records:
        lines.append(f"{r.name}")
        lines.append(f"  (S) {r.nodes_before} nodes-before")
        lines.append(f"  (S) {r.nodes_after} nodes-after")
        lines.extend(f"  (S) {n} {stat}" for stat, n in r.stats.items())
    return "\n".join(lines) + "\n"
