"""Control flow in an artifact: which `if`/`loop` nodes become one kernel.

Contract:
- `bodies(node)`: the nested graphs of a node (`if`: then, else; `loop`: body), in
  attribute order;
- `check_bodies(node, check)`: applies `check` (program.py's `check_node`) to every node
  of the bodies, nested bodies included, and checks that every body value has a static
  tensor type, so a body's kernels can be compiled; FlowcError naming the inner node
  otherwise (a stateful one, such as a variable or an assign, by name and op);
- `check_carried(node)`: for a `loop`, FlowcError naming the node when a carried value's
  type as its body returns it differs from the type it enters with (a compiled loop keeps
  every carried value in one buffer of one static shape);
- `one_kernel(node)`: True unless the node is a control node (CONTROL_OPS) that compiles
  as steps; True for a control node that compiles as ONE kernel through the lowering
  table's `scf` rules (lower/control.py): its bodies, nested ones included, hold at most
  SMALL_BODY_NODES compute nodes (constants not counted) and none of HEAVY_OPS (ops whose
  own kernels are tiled, packed or parallel: inside an scf region they would run as plain
  loops on one thread). Other control nodes become control steps of the entry.
"""

from __future__ import annotations

from collections.abc import Callable

from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node
from flowc.ir.ops import OPS
from flowc.ir.ops.registry import STATEFUL
from flowc.ir.types import TensorType

CONTROL_OPS = frozenset({"if", "loop"})
SMALL_BODY_NODES = 16
HEAVY_OPS = frozenset({"matmul", "packed_matmul", "gemm", "conv", "conv_transpose",
                       "winograd_conv", "max_pool", "average_pool", "fused"})


def bodies(node: Node) -> list[Graph]:
    return [v for v in node.attrs.values() if isinstance(v, Graph)]


def _inner_nodes(node: Node) -> list[Node]:
    """Every node of `node`'s bodies, nested bodies' nodes included."""
    return [m for body in bodies(node) for n in body.nodes for m in (n, *_inner_nodes(n))]


def check_bodies(node: Node, check: Callable[[Node], None]) -> None:
    for body in bodies(node):
        for n in body.inputs:
            t = n.types[0]
            if not isinstance(t, TensorType) or not t.is_static:
                raise FlowcError(f"node {node.label()}: input '{n.name}' of body @{body.name} "
                                 f"is {t}; artifacts need static shapes in control-flow bodies")
        for inner in body.nodes:
            opdef = OPS.get(inner.op)
            if opdef is not None and opdef.has(STATEFUL):
                raise FlowcError(f"node {node.label()}: its body @{body.name} holds "
                                 f"{inner.label()}, which reads or assigns state; a compiled "
                                 "body runs tensor ops only (read variables before the node "
                                 "and pass the values in; assign its results after it)")
            if inner.op != "constant":
                check(inner)


def one_kernel(node: Node) -> bool:
    if node.op not in CONTROL_OPS:
        return True
    inner = [n for n in _inner_nodes(node) if n.op != "constant"]
    return len(inner) <= SMALL_BODY_NODES and not any(n.op in HEAVY_OPS for n in inner)


def check_carried(node: Node) -> None:
    if node.op != "loop":
        return
    body: Graph = node.attrs["body"]
    carried = node.inputs[2:len(node.inputs) - node.attrs.get("captures", 0)]
    for k, (value, (_, out)) in enumerate(zip(carried, body.outputs[1:], strict=False)):
        if value.type != out.type:
            raise FlowcError(f"node {node.label()}: carried value #{k} enters as {value.type} "
                             f"and its body @{body.name} returns {out.type}; a compiled loop "
                             "keeps each carried value's static shape")
