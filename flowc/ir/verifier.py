"""Checks that a graph is well formed.

Contract: `verify(graph)` returns None or raises VerifyError for the first problem found,
naming the graph, the node (printed number, name, op, location), what was expected and what
was found. It checks: known ops; input types within flowc's size limit (`limits.py`; node
results are held to it by their type rules); operand counts; operands and control
dependencies defined earlier in the same graph (so the graph is acyclic and bodies are
closed); attributes against the op's schema; result types against the op's type rule;
unique names; device names; outputs; and, recursively, nested bodies.

`verify(graph, trusted)`: the nodes in `trusted` passed `verify` in a graph before. What
is checked of a node alone (op, attributes, device, bodies, types) depends only on the
node and on its operands' types and constants, none of which ever change, so a trusted
node only has its place in this graph checked again (operands and control dependencies
defined before it, its name). The pass manager trusts the nodes of the graph it verified
last, so a pass that changes little is verified in little time.
"""

from __future__ import annotations

from collections.abc import Collection

from flowc.ir.build import const_value
from flowc.ir.devices import DeviceSpec
from flowc.ir.errors import InferError, VerifyError
from flowc.ir.graph import Graph, Node
from flowc.ir.limits import size_problem
from flowc.ir.ops import OPS, REQUIRED, infer_types
from flowc.ir.types import TensorType, Type, VarType, dims_compatible


class NodeError(VerifyError):
    def __init__(self, graph: Graph, node: Node | None, number: str, detail: str):
        self.node, self.detail = node, detail
        where = f"node {number} {node.label()}" if node is not None else "graph"
        super().__init__(f"verify @{graph.name}: {where}: {detail}")


def type_matches(declared: Type, inferred: Type) -> bool:
    """Whether a declared result type agrees with the inferred one (`?` is a wildcard)."""
    if isinstance(declared, VarType) or isinstance(inferred, VarType):
        return declared == inferred
    return (isinstance(declared, TensorType) and isinstance(inferred, TensorType)
            and declared.dtype == inferred.dtype and declared.rank == inferred.rank
            and all(dims_compatible(d, i) for d, i in zip(declared.shape, inferred.shape,
                                                          strict=True)))


def verify(graph: Graph, trusted: Collection[Node] = frozenset()) -> None:
    defined: set[Node] = set()
    names: dict[str, Node] = {}

    def fail(node: Node | None, detail: str, number: str = "") -> None:
        raise NodeError(graph, node, number, detail)

    for node in graph.inputs:
        if not node.name:
            fail(node, "every graph input needs a name")
        if node.name in names:
            fail(node, f"input name '{node.name}' is used twice")
        if len(node.types) != 1:
            fail(node, "an input has exactly one type")
        if (problem := size_problem(node.types[0])) is not None:
            fail(node, problem)
        names[node.name] = node
        defined.add(node)
    for i, node in enumerate(graph.nodes):
        number = f"%{i}"
        if node in defined:
            fail(node, "the node appears twice in the graph", number)
        if node.name is not None:
            if node.name in names:
                fail(node, f"name '{node.name}' is already used by {names[node.name].label()}",
                     number)
            names[node.name] = node
        check = check_placement if node in trusted else check_node
        check(node, defined, lambda detail, n=node, num=number: fail(n, detail, num))
        defined.add(node)
    seen_outputs: set[str] = set()
    for name, value in graph.outputs:
        if name in seen_outputs:
            fail(None, f"output name '{name}' is used twice")
        seen_outputs.add(name)
        if value.node not in defined:
            fail(value.node, f"output '{name}' is not computed in this graph")


def check_placement(node: Node, defined: set[Node], fail) -> None:
    """Operands and control dependencies are defined before `node` in its graph."""
    for i, value in enumerate(node.inputs):
        if value is not None and value.node not in defined:
            fail(f"operand #{i} ({OPS[node.op].operand_name(i)}) is not defined before this "
                 "node in the same graph")
    for dep in node.ctrl:
        if dep not in defined:
            fail(f"control dependency {dep.label()} is not defined before this node")


def check_node(node: Node, defined: set[Node], fail) -> None:
    opdef = OPS.get(node.op)
    if opdef is None:
        fail(f"unknown op '{node.op}'")
    check_placement(node, defined, fail)
    for key, value in node.attrs.items():
        spec = opdef.attr_specs.get(key)
        if spec is None:
            known = ", ".join(opdef.attr_specs) or "none"
            fail(f"unknown attribute '{key}' (op {node.op} takes: {known})")
        if not spec.accepts(value):
            fail(f"attribute '{key}' must be {spec.kind}, found {value!r}")
    for spec in opdef.attrs:
        if spec.default is REQUIRED and spec.name not in node.attrs:
            fail(f"required attribute '{spec.name}' is missing")
    if node.device is not None:
        try:
            DeviceSpec.parse(node.device)
        except ValueError as exc:
            fail(str(exc))
    for key, value in node.attrs.items():
        if isinstance(value, Graph):
            try:
                verify(value)
            except VerifyError as exc:
                fail(f"in body '{key}': {exc}")
    try:
        inferred = infer_types(opdef, [None if v is None else v.type for v in node.inputs],
                               node.attrs, [const_value(v) for v in node.inputs], node.label())
    except InferError as exc:
        fail(str(exc).removeprefix(node.label() + ": "))
    if len(inferred) != len(node.types):
        fail(f"expected {len(inferred)} results, found {len(node.types)}")
    for i, (declared, expected) in enumerate(zip(node.types, inferred, strict=True)):
        if not type_matches(declared, expected):
            fail(f"result #{i} is declared {declared} but the op's type rule gives {expected}")
