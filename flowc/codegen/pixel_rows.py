"""A kernel body around a pointwise conv, rewritten over pixel rows so that it lowers as a
packed matmul with its epilogue.

A channels-last conv with a 1x1 window, unit strides and no padding (ResNet's bottleneck
convs, MobileNet's and EfficientNet's expand and projection convs) is the matmul
X [N*H*W, C] x W [C, M]. Lowered as a conv, it gets the direct conv strategy (register
tiles of output pixels by channels, the filter streamed once per output row: 100-150
GFLOP/s where the filter exceeds the L2 or the rows are short); as a `linalg.matmul`
between reshapes of the 4-D tensors, the pipeline's elementwise fusion folds the reshapes
into it (a 7-loop generic only the direct matmul tiles take). So the whole body is
rewritten instead: `pixel_rows(body)` gives the same computation on 2-D values (every
[N, H, W, K] value as [N*H*W, K], the filter as [C, M], a [1, 1, 1, K] operand as [K]),
the conv as `matmul` plus its bias `add`, and the elementwise nodes after it (residual
add, relu, clip, SiLU) as they were; `kernels.build_module` views the kernel's buffers
with the matching `memref.collapse_shape` (free: the layouts are row-major), so the
matmul strategy tiles it and fuses its epilogue as for any matmul (`MIN_MACS`: where that
pays). 1x1 convs of ResNet-50 at 1 thread: 100-155 -> 175-250 GFLOP/s.
"""

from __future__ import annotations

import math

from flowc.ir.attrs import Tensor
from flowc.ir.build import make_node
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops import ELEMENTWISE, get_op
from flowc.ir.types import TensorType

Shape = tuple[int, ...]
DTYPES = ("f32",)  # the dtypes whose matmul the CPU strategies pack
# Multiply-adds from which the matmul beats the direct conv kernel. Pointwise convs of
# ResNet-50, MobileNetV2 and EfficientNet-B0, A/B at 1 thread (warm/cold us, matmul vs
# conv): 26M and more 1.0-2.1x faster (256->1024 at 14x14: 505/695 vs 1030/1209;
# 1024->512 at 7x7: 227/459 vs 490/595; 64->64 at 56x56, 13M: equal); 16->96 at 112x112
# (19M) 184/376 vs 249/514; under 11M the conv's wider register tiles win (576->96 at
# 14x14: 131/222 vs 88/153; 960->160 at 7x7: 94/169 vs 63/112). Output channels that are
# not whole pairs of vectors get thin matmul tiles (N = 24: 10x slower than the conv).
MIN_MACS = 16_000_000


def pixel_rows(body: Graph, lanes: int) -> tuple[Graph, list[Shape | None]] | None:
    """(the 2-D body, for each input then output of `body` its new shape or None when
    unchanged), or None unless `body` is one pointwise conv (static, f32, channels-last,
    ungrouped; its X and W body inputs, its bias absent or a body input) of at least
    MIN_MACS multiply-adds and whole pairs of `lanes`-wide vectors of output channels,
    followed only by elementwise nodes and constants whose every value is [N, H, W, K]
    (the conv's pixels), [1, 1, 1, K], or of rank 1 or 0."""
    convs = [n for n in body.nodes if n.op == "conv"]
    if len(convs) != 1 or not _pointwise(convs[0], body):
        return None
    c, m = convs[0].inputs[1].type.shape[2:]
    if m % (2 * lanes) or math.prod(convs[0].types[0].shape[:3]) * c * m < MIN_MACS:
        return None
    conv = convs[0]
    n, h, w, _ = conv.types[0].shape
    pixels = (n, h, w)

    def flat(t: TensorType) -> Shape | None:
        """`t`'s 2-D (or lower) shape, or None if it is not one of the accepted shapes."""
        shape = tuple(t.shape)
        if len(shape) <= 1:
            return shape
        if len(shape) == 4 and shape[:3] == pixels:
            return (math.prod(pixels), shape[3])
        if len(shape) == 4 and shape[:3] == (1, 1, 1):
            return (shape[3],)
        return None

    out = Graph(body.name)
    values: dict[Value, Value] = {}
    changed: list[Shape | None] = []
    weight = conv.inputs[1]
    for node in body.inputs:
        t = node.types[0]
        shape = tuple(t.shape[2:]) if node.out() == weight else flat(t)
        if shape is None:
            return None
        changed.append(None if shape == tuple(t.shape) else shape)
        values[node.out()] = out.add_input(node.name, t.with_shape(shape), loc=node.loc)
    for node in body.nodes:
        made = _rewrite(node, conv, values, flat)
        if made is None:
            return None
        for piece in made:
            out.append(piece)
        values[node.out()] = made[-1].out()
    for name, v in body.outputs:
        shape = flat(v.type)
        if shape is None or tuple(values[v].type.shape) != shape:
            return None
        changed.append(None if shape == tuple(v.type.shape) else shape)
        out.add_output(name, values[v])
    return out, changed


def _pointwise(conv: Node, body: Graph) -> bool:
    """Whether `conv` is a static f32 channels-last ungrouped 1x1 conv with unit strides and
    no padding whose operands are inputs of `body`."""
    attrs = get_op("conv").resolve_attrs(conv.attrs)
    x, w = conv.inputs[0], conv.inputs[1]
    ins = {node.out() for node in body.inputs}
    t = conv.types[0]
    return (attrs["channels_last"] and attrs["group"] == 1 and t.rank == 4 and t.is_static
            and t.dtype.name in DTYPES and x.type.dtype == t.dtype
            and tuple(w.type.shape[:2]) == (1, 1) and list(attrs["strides"] or [1, 1]) == [1, 1]
            and (attrs["auto_pad"] != "NOTSET" or not any(attrs["pads"] or ()))
            and all(v is None or v in ins for v in conv.inputs))


def _rewrite(node: Node, conv: Node, values: dict[Value, Value], flat) -> list[Node] | None:
    """The 2-D nodes computing `node` (the last one gives its value), or None if `node` is
    neither the conv, an elementwise op of one result nor a constant of an accepted shape."""
    if node is conv:
        x, w, b = (*conv.inputs, None)[:3]
        mm = make_node("matmul", [values[x], values[w]], name=node.name, loc=node.loc)
        mm = mm.replace(merged=node.merged)
        if b is None:
            return [mm]
        return [mm, make_node("add", [mm.out(), values[b]], name=node.name, loc=node.loc)]
    if len(node.types) != 1 or not isinstance(node.types[0], TensorType):
        return None
    shape = flat(node.types[0])
    if shape is None:
        return None
    if node.op == "constant":
        data = node.attrs["value"].data
        if data is None:
            return None
        return [node.replace(attrs={**node.attrs, "value": Tensor(data.reshape(shape))},
                             types=(node.types[0].with_shape(shape),))]
    if not get_op(node.op).has(ELEMENTWISE) or node.ctrl:
        return None
    made = make_node(node.op, [None if v is None else values[v] for v in node.inputs],
                     node.attrs, name=node.name, loc=node.loc, device=node.device)
    if tuple(made.types[0].shape) != shape:
        return None
    return [made.replace(merged=node.merged)]
