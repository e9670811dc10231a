"""The text form of a graph: MLIR-shaped, one node per line, every value typed.

    graph @mlp(%x: f32[N,784]) -> (y: f32[N,10]) {
      %0 = constant {value = dense_resource<"9f2c61d0a4be55e1"> : f32[784,10]}
           : () -> f32[784,10] loc("w")        (one line in the real text)
      %1 = matmul %x, %0 : (f32[N,784], f32[784,10]) -> f32[N,10] @cpu:0 loc("fc/MatMul")
      return %1
    }

Nodes are numbered in graph order from 0 in each graph (bodies start again at 0); inputs
print by name. A node with several results prints `%3:2 =` and its results are used as
`%3#0`, `%3#1`. `ctrl(%2)` lists control dependencies; `@dev` is the device; `loc("name" at
"file:line")` gives the node's name and source location, and `loc(fused["bn1" at "m:3",
"conv1"])` those of a node that rewrites merged others into (its own first, then
`Node.merged`, as MLIR's fused locations). In a partitioned graph (one holding
send/recv) each run of nodes on one device is headed by a `// partition @DEVICE` comment,
which the parser skips. Constants up to `inline_limit`
elements print inline (`dense<...>`); larger ones by content digest (`dense_resource<...>`),
with their bytes in a trailing `{-# resources: ... #-}` section when `resources=True`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from flowc.ir.attrs import Body, Tensor
from flowc.ir.types import DType, TensorType, f64

if TYPE_CHECKING:  # the graph module imports this one (Graph.__str__)
    from flowc.ir.graph import Graph, Node, Value

IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.$-]*\Z")


def quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def source_text(name: str | None, loc: str | None) -> str:
    """`"name" at "file:line"`, or the parts of it that are known ("" for neither)."""
    parts = [quote(name)] if name is not None else []
    if loc is not None:
        parts.append(f"at {quote(loc)}")
    return " ".join(parts)


def value_name(text: str) -> str:
    return text if IDENT_RE.match(text) else quote(text)


def format_scalar(x: Any, dt: DType) -> str:
    if dt.is_bool:
        return "true" if x else "false"
    if dt.is_float:
        # numpy prints the shortest text that reads back to the same value of its dtype;
        # bf16 goes through f32, which holds every bf16 value exactly.
        scalar = np.float32(x) if dt.name == "bf16" else np.asarray(x, dtype=dt.np)[()]
        text = str(scalar)
        if text in ("inf", "-inf", "nan"):
            return text
        return text if any(c in text for c in ".e") else text + ".0"
    return str(int(x))


def format_tensor_literal(array: np.ndarray, dt: DType) -> str:
    """The nested-list literal of `array`; an empty array prints as `[]` whatever its shape
    (its type carries the shape), so a [2**31, 0] constant prints in constant time."""
    if array.size == 0:
        return "[]"
    if array.ndim == 0:
        return format_scalar(array[()], dt)
    return "[" + ", ".join(format_tensor_literal(sub, dt) for sub in array) + "]"


class Printer:
    def __init__(self, inline_limit: int = 16, resources: bool = False):
        self.inline_limit = inline_limit
        self.emit_resources = resources
        self.resources: dict[str, Tensor] = {}

    # ---- attributes ----------------------------------------------------------------
    def attr(self, value: Any, indent: str) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float):
            return format_scalar(value, f64)
        if isinstance(value, str):
            return quote(value)
        if isinstance(value, DType | TensorType):
            return str(value)
        if isinstance(value, tuple):
            return "[" + ", ".join(self.attr(v, indent) for v in value) + "]"
        if isinstance(value, Tensor):
            return self.tensor(value)
        if isinstance(value, Body):  # a Graph
            return self.graph(value, indent).rstrip("\n")
        raise TypeError(f"cannot print attribute {value!r}")

    def tensor(self, t: Tensor) -> str:
        if not t.is_elided and t.data.size <= self.inline_limit:
            return f"dense<{format_tensor_literal(t.data, t.type.dtype)}> : {t.type}"
        self.resources[t.digest] = t
        return f'dense_resource<"{t.digest}"> : {t.type}'

    # ---- graphs --------------------------------------------------------------------
    def graph(self, g: Graph, indent: str = "") -> str:
        names: dict[Node, str] = {}
        for node in g.inputs:
            names[node] = "%" + value_name(node.name)
        for i, node in enumerate(g.nodes):
            names[node] = f"%{i}"

        def ref(v: Value | None) -> str:
            if v is None:
                return "_"
            base = names[v.node]
            return f"{base}#{v.index}" if len(v.node.types) > 1 else base

        args = ", ".join(f"{names[n]}: {n.types[0]}{self.loc(n, show_name=False)}"
                         for n in g.inputs)
        results = ", ".join(f"{value_name(n)}: {v.type}" for n, v in g.outputs)
        lines = [f"graph @{value_name(g.name)}({args}) -> ({results}) {{"]
        inner = indent + "  "
        partitioned = any(n.op in ("send", "recv") for n in g.nodes)
        for i, node in enumerate(g.nodes):
            if partitioned and node.device and (i == 0 or g.nodes[i - 1].device != node.device):
                lines.append(f"{inner}// partition @{node.device}")
            lines.append(inner + self.node(node, names, ref, inner))
        lines.append(inner + "return " + ", ".join(ref(v) for _, v in g.outputs))
        lines.append(indent + "}")
        return "\n".join(lines) + "\n"

    def node(self, node: Node, names: dict[Node, str], ref, indent: str) -> str:
        count = len(node.types)
        head = f"{names[node]}:{count} = " if count > 1 else f"{names[node]} = "
        text = head + node.op
        if node.inputs:
            text += " " + ", ".join(ref(v) for v in node.inputs)
        if node.ctrl:
            text += " ctrl(" + ", ".join(names[c] for c in node.ctrl) + ")"
        if node.attrs:
            text += " {" + ", ".join(f"{k} = {self.attr(v, indent)}"
                                     for k, v in node.attrs.items()) + "}"
        operand_types = ", ".join("none" if v is None else str(v.type) for v in node.inputs)
        result = str(node.types[0]) if count == 1 else "(" + ", ".join(map(str, node.types)) + ")"
        text += f" : ({operand_types}) -> {result}"
        if node.device:
            text += f" @{node.device}"
        return text + self.loc(node)

    @staticmethod
    def loc(node: Node, show_name: bool = True) -> str:
        """` loc("name" at "file:line")`, or the parts of it that the node has; with merged
        sources ` loc(fused[SOURCE, SOURCE ...])`, each source as that or `unknown`."""
        if node.merged and show_name:  # (no rewrite merges anything into a graph input)
            sources = (source_text(*s) or "unknown" for s in node.sources())
            return f" loc(fused[{', '.join(sources)}])"
        text = source_text(node.name if show_name else None, node.loc)
        return f" loc({text})" if text else ""

    def resource_section(self) -> list[str]:
        """The pieces of the resource section (none without one): each blob's hex is made
        from the array's own memory, and the caller joins the pieces once."""
        if not self.emit_resources or not self.resources:
            return []
        pieces = ["{-# resources: {\n"]
        for k, (digest, t) in enumerate(sorted(self.resources.items())):
            raw = np.ascontiguousarray(t.data).reshape(-1).view(np.uint8)
            pieces += [",\n" if k else "", f'  "{digest}": "0x', raw.data.hex(), '"']
        pieces.append("\n} #-}\n")
        return pieces


def print_graph(graph: Graph, *, inline_limit: int = 16, resources: bool = False) -> str:
    """The text form of `graph`; with `resources`, large constants' bytes follow it."""
    printer = Printer(inline_limit, resources)
    return "".join([printer.graph(graph), *printer.resource_section()])
