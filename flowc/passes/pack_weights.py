"""`pack-weights`: store the constant B of a matmul in column panels, at compile time.

A matmul kernel computes C in register tiles of NR columns; reading its tile's K x NR strip
of a row-major B [K, N] takes K short runs a row apart (N elements): one cache line pair
and, when N * 4 bytes is a page, one TLB entry per k. In panels, the strip is one
contiguous run, read in a single stream. Weights are constant, so the layout costs nothing
at run time (onnxruntime packs its weights when a session starts; flowc when it compiles).

Requires: a well-formed graph; best after `simplify` (a gemm's transB on a constant
already folded) and `partition` (devices known), before `fuse`. Guarantees: the result
computes the same outputs up to the order of float sums (none changes here: the kernel
sums over k in the same order). Rewrites, for float (f32, f64) nodes (leading dims of
the result may be given at run time, issue [12]: the kernel takes the rows in static
blocks) that are not on a GPU (whose tiled matmul reads B row-major) and have no control
dependencies:
- `matmul a, B` with `a` of rank >= 2 and B a rank-2 constant [K, N] becomes
  `packed_matmul a, P`;
- `gemm A, B[, C]` with transA = 0, alpha = 1, a constant B (transB: B^T is packed) and
  beta = 1 or a constant C (beta * C folded) becomes `packed_matmul A, P[, C]` (named as
  the gemm) when C is a row bias ([N], leading 1s allowed) or of the result's type, else
  `packed_matmul A, P` plus an `add` of C named `GEMM/bias` (unless taken);
- `add(packed_matmul a, P, c)` (either order) of such a c, the add the product's only
  user and of its type, becomes `packed_matmul a, P, c` (named as the add): the kernel
  starts its register tiles from the bias, so C is not written and read back to add it;
where P is B as panels [N / NR, K, NR] (`flowc.ir.ops.nn.pack_panels`), NR =
`panel_bytes` / the element size (128 bytes: 32 f32, two AVX-512 vectors, the register
tile's width). Only when N is a multiple of NR larger than NR (one panel is B itself) and
K <= `max_k` (beyond it the kernel's K x NR strip no longer stays in L2 across the row
tiles that reuse it). A matrix-vector product (A one row: an RNN step at batch 1) takes
panels of `gemv_panel_bytes` (512: 128 f32) where N allows, else NR: it streams all of B
once per call, which wide panels read fastest (bench/rnn.py's LSTM at batch 1, R^T
256 x 1024 per step, CPU ms: row-major 0.93, 32-wide panels 0.89, 128-wide 0.76).
One P per constant and layout, shared by its users. A constant that anything else also
reads (another op, a graph output, or a matmul as its A) is left as it is: packing it
would store it twice (a tied embedding table, gathered and multiplied by, would double
its memory). Loops (bodies are rewritten first): a capture of a `loop`
that is a constant nothing else reads, which its body reads only as the B of
matrix-vector products or of gemms with a C of the result's type (`_gemv_only`), becomes
a constant inside the body (the capture dropped), so it is packed there, once, at compile
time. Statistics: `weights-packed`, `bias-into-packed-matmul`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flowc.ir.devices import is_gpu_device
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value, rebuild
from flowc.ir.ops.nn import pack_panels
from flowc.passes.registry import register
from flowc.passes.rewrite import Rewriter, apply_patterns, in_bodies
from flowc.passes.simplify_patterns import sole_producer

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@register
@dataclass(frozen=True)
class PackWeights:
    """Lay constant matmul weights out in column panels (see the module docstring)."""

    name: ClassVar[str] = "pack-weights"
    panel_bytes: int = 128
    max_k: int = 4096
    gemv_panel_bytes: int = 512

    def __post_init__(self) -> None:
        for option, value, least in (("panel_bytes", self.panel_bytes, 8),
                                     ("gemv_panel_bytes", self.gemv_panel_bytes, 8),
                                     ("max_k", self.max_k, 0)):
            if value < least:  # a panel narrower than one 8-byte element is no panel
                raise FlowcError(f"pass 'pack-weights': option '{option}' must be >= {least}, "
                                 f"found {value}")

    def run(self, graph: Graph) -> Graph:
        graph = in_bodies(_inline_captures(graph), self.run)
        shared = _read_otherwise(graph)
        packed: dict[tuple[Value, bool, int], Value] = {}
        names = {n.name for n in graph.nodes}

        def panels(value: Value, transposed: bool, like: Node, rw: Rewriter) -> Value | None:
            """`value` (a constant, transposed first if asked) as panels; None if it is not
            a constant this pass packs."""
            if value.node in shared:
                return None
            data = rw.const(value)
            if data is None or data.ndim != 2 or data.dtype not in FLOATS:
                return None
            b = data.T if transposed else data
            k, n = b.shape
            rows = like.inputs[0].type
            sizes = ((self.gemv_panel_bytes,) if rows.is_static and _one_row(rows) else ())
            fits = [w for w in (*sizes, self.panel_bytes)
                    if n % (w // data.dtype.itemsize) == 0 and n > w // data.dtype.itemsize]
            if not fits or k > self.max_k:
                return None
            width = fits[0] // data.dtype.itemsize
            key = (value, transposed, width)
            if key not in packed:
                packed[key] = rw.constant(pack_panels(b, width), like)
            return packed[key]

        def matmul(node: Node, rw: Rewriter) -> Node | None:
            a, b = node.inputs
            if not _eligible(node) or a.type.rank < 2:
                return None
            p = panels(b, False, node, rw)
            return None if p is None else rw.replace(node, "packed_matmul", [a, p])

        def gemm(node: Node, rw: Rewriter) -> Node | list[Value] | None:
            attrs = node.attrs
            if not _eligible(node) or attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0:
                return None
            a, b, c = (*node.inputs, None)[:3]
            beta = attrs.get("beta", 1.0)
            if c is not None and beta != 1.0:
                data = rw.const(c)
                if data is None:
                    return None
                c = rw.constant((data * beta).astype(data.dtype), node)
            p = panels(b, bool(attrs.get("transB", 0)), node, rw)
            if p is None:
                return None
            if c is None or _init_operand(c, node.types[0]):
                return rw.replace(node, "packed_matmul", [a, p] + ([c] if c is not None else []))
            # the product keeps the gemm's name and sources; the bias add is NAME/bias
            product = rw.make("packed_matmul", [a, p], {}, node).replace(
                name=node.name, merged=node.merged)
            bias = rw.make("add", [product.out(), c], {}, node)
            name = f"{node.name}/bias"
            if node.name and name not in names:
                bias = bias.replace(name=name)
            return [bias.out()]

        return apply_patterns(graph, {"matmul": [("weights-packed", matmul)],
                                      "gemm": [("weights-packed", gemm)],
                                      "add": [("bias-into-packed-matmul", _bias_into)]})


def _init_operand(c: Value, out) -> bool:
    """Whether `c` can be packed_matmul's third operand for result `out`: a row bias
    (`_row_bias`) or a C of `out`'s type (the kernel's tiles start from it)."""
    return _row_bias(c, out) or c.type == out


def _row_bias(c: Value, out) -> bool:
    """Whether `c` is a bias [N] (leading 1s allowed, rank at most `out`'s) of `out`'s
    dtype, N `out`'s last dim."""
    t = c.type
    return (hasattr(t, "dtype") and t.dtype == out.dtype and 1 <= t.rank <= out.rank
            and all(d == 1 for d in t.shape[:-1]) and t.shape[-1] == out.shape[-1])


def _bias_into(node: Node, rw: Rewriter) -> Node | None:
    """add(packed_matmul a, P, c) of a row bias c: packed_matmul a, P, c (module docstring)."""
    for product, c in (node.inputs, node.inputs[::-1]):
        mm = sole_producer(product, rw, "packed_matmul", like=node)
        if (mm is not None and len(mm.inputs) == 2 and not node.ctrl
                and product.type == node.types[0] and _init_operand(c, node.types[0])):
            return rw.replace(node, "packed_matmul", [*mm.inputs, c])
    return None


def _read_otherwise(graph: Graph) -> set[Node]:
    """The nodes some user reads other than as the B (input 1) of a matmul or gemm, or
    that the graph outputs."""
    found = {v.node for _, v in graph.outputs}
    for node in graph.nodes:
        found.update(v.node for k, v in enumerate(node.inputs) if v is not None
                     and (k != 1 or node.op not in ("matmul", "gemm")))
        found.update(node.ctrl)
    return found


def _eligible(node: Node) -> bool:
    t = node.types[0] if len(node.types) == 1 else None
    return (not node.ctrl and not is_gpu_device(node.device) and t is not None
            and hasattr(t, "dtype") and t.dtype.np in FLOATS and t.rank >= 1
            and isinstance(t.shape[-1], int))


def _inline_captures(graph: Graph) -> Graph:
    """`graph` with each loop capture that is a constant only that loop reads, and that its
    body reads only as the B of matrix-vector products (`_gemv_only`), made a constant
    inside the body (the capture dropped), so the body's pass packs it."""
    readers: dict[Node, int] = {}
    for node in graph.nodes:
        for v in {v for v in node.inputs if v is not None}:
            readers[v.node] = readers.get(v.node, 0) + 1
    for _, v in graph.outputs:
        readers[v.node] = readers.get(v.node, 0) + 1

    def inline(node: Node, _old) -> Node | None:
        if node.op != "loop" or not node.attrs.get("captures", 0):
            return None
        body, captures = node.attrs["body"], node.attrs["captures"]
        first = len(node.inputs) - captures
        taken = [k for k in range(first, len(node.inputs))
                 if node.inputs[k].node.op == "constant" and readers[node.inputs[k].node] == 1
                 and not node.inputs[k].node.attrs["value"].is_elided
                 and _gemv_only(body, body.inputs[k].out())]
        if not taken:
            return None
        consts = {body.inputs[k].out(): node.inputs[k].node.replace(inputs=(), ctrl=())
                  for k in taken}
        inner = rebuild(Graph(body.name, [n for k, n in enumerate(body.inputs)
                                          if k not in taken], body.nodes, body.outputs),
                        lambda n, _o: n.replace(inputs=tuple(
                            consts[v].out() if v in consts else v for v in n.inputs))
                        if any(v in consts for v in n.inputs) else None)
        inner.nodes[:0] = list(consts.values())
        return node.replace(inputs=tuple(v for k, v in enumerate(node.inputs) if k not in taken),
                            attrs=node.attrs.replace(body=inner,
                                                     captures=captures - len(taken)))

    return rebuild(graph, inline) if any(n.op == "loop" for n in graph.nodes) else graph


def _gemv_only(body: Graph, value: Value) -> bool:
    """Whether `body` reads `value` (a rank-2 float) only as the B (input 1) of matmul/gemm
    nodes whose A is one row (a matrix-vector product, which streams B once per
    iteration: panels read B in one stream) or of gemms with a C of the result's type
    (an RNN step at batch > 1: packed, the product starts from C in its register tiles;
    without such a C, packing measured slower there: the result's panels were added to
    in a second pass), and at least once."""
    uses = [(n, k) for n in body.nodes for k, v in enumerate(n.inputs) if v == value]
    if value.type.rank != 2 or value.type.dtype.np not in FLOATS:
        return False
    return bool(uses) and all(
        k == 1 and n.op in ("matmul", "gemm") and not n.attrs.get("transA", 0)
        and n.inputs[0].type.is_static and (_one_row(n.inputs[0].type) or _full_c(n))
        and _eligible(n) for n, k in uses) and not any(value in n.ctrl for n in body.nodes)


def _full_c(node: Node) -> bool:
    """Whether `node` is a gemm of alpha 1 whose C has the result's type."""
    return (node.op == "gemm" and len(node.inputs) == 3 and node.inputs[2] is not None
            and node.attrs.get("alpha", 1.0) == 1.0 and node.attrs.get("beta", 1.0) == 1.0
            and node.inputs[2].type == node.types[0])


def _one_row(t) -> bool:
    """Whether a matmul's A of type `t` (static) is one row: a matrix-vector product."""
    return int(np.prod(t.shape[:-1])) == 1
