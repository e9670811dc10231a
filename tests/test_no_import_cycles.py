"""flowc's modules import each other without cycles, and its layers in one direction.

The graph is read from the source with `ast`: every `import` and `from ... import`
statement anywhere in a module (at module level or inside functions: a function-level
import is a cycle waiting for its first call) is an edge, except those under
`if TYPE_CHECKING:`, which never run (they name types for annotations only).
`from flowc.x import y` is an edge to `flowc.x.y` when that is a module, else to `flowc.x`.
`flowc/__init__.py` and the CLI (`flowc/cli*`) may import anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import flowc

ROOT = Path(flowc.__file__).parent

COMPILER = ("flowc.ir", "flowc.frontend", "flowc.passes", "flowc.codegen")
# codegen's parts that may not reach the target pipelines (see flowc/codegen/README.md)
TARGET_NEUTRAL = ("flowc.codegen.plan", "flowc.codegen.emit", "flowc.codegen.kernels")
PIPELINES = ("flowc.codegen.cpu", "flowc.codegen.gpu")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The flowc modules `name` (at `path`) imports, by any statement anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m in known and m != name}


def _runtime_nodes(tree: ast.AST):
    """Every node of `tree` outside `if TYPE_CHECKING:` blocks (their `else` included)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo += node.orelse
        else:
            todo += ast.iter_child_nodes(node)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph() -> nx.DiGraph:
    mods = modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(mods)
    for name, path in mods.items():
        graph.add_edges_from((name, dep) for dep in imported(name, path, set(mods)))
    return graph


def under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_graph_sees_lazy_and_from_imports():
    """The graph is built right: known edges of each kind are in it."""
    graph = import_graph()
    assert graph.has_edge("flowc.codegen.driver", "flowc.codegen.plan.program")
    assert graph.has_edge("flowc.codegen.driver", "flowc.passes")  # inside compile()
    assert graph.has_edge("flowc.codegen.cpu.pipeline", "flowc.codegen.cpu.vmath")  # from-module
    assert not graph.has_edge("flowc.ir.printer", "flowc.ir.graph")  # under TYPE_CHECKING


def test_no_import_cycles():
    graph = import_graph()
    cycles = []
    for scc in nx.strongly_connected_components(graph):
        if len(scc) > 1:
            cycle = nx.find_cycle(graph.subgraph(scc))
            cycles.append(" -> ".join([a for a, _ in cycle] + [cycle[0][0]]))
    assert not cycles, "import cycles:\n  " + "\n  ".join(sorted(cycles))


def test_layers():
    """ir reaches no later stage; the frontend none of passes, codegen and the runtime
    (data flows one way: the ONNX backend, which compiles, lives at flowc/onnx_backend.py);
    the runtime none of the compiler; codegen's target-neutral
    parts (plan/, emit/, kernels.py) none of the target pipelines (cpu/, gpu/). "Reaches":
    through any chain of imports, so a module in between cannot carry the dependency."""
    graph = import_graph()
    rules = [
        ("flowc.ir", ("flowc.frontend", "flowc.passes", "flowc.codegen", "flowc.runtime")),
        ("flowc.frontend", ("flowc.passes", "flowc.codegen", "flowc.runtime")),
        ("flowc.runtime", COMPILER),
        *((room, PIPELINES) for room in TARGET_NEUTRAL),
    ]
    bad = []
    for layer, banned in rules:
        for module in (m for m in graph if under(m, (layer,))):
            for far in sorted(m for m in nx.descendants(graph, module) if under(m, banned)):
                bad.append(" -> ".join(nx.shortest_path(graph, module, far)))
    assert not bad, "imports against the layering:\n  " + "\n  ".join(sorted(bad))
