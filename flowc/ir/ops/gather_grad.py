"""Vjp rules of gather and gather_elements (`shape.py` names each in its `define`): the
cotangent is added back at the gathered positions by `scatter_add` (scatter.py) into zeros
of data's shape, so duplicate indices accumulate; negative indices count from the end.

gather scatters whole slices along its axis (an embedding's backward adds rows); for
gather_elements each element lands at its own flat position in data (the index along the
axis combined with the element's other coordinates; static shapes), scattered along a
flat view of data.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import Vjp
from flowc.ir.types import i64


def zeros_of(g, index):
    """Zeros of operand `index`'s type (its shape read where not static)."""
    zero = g.const(np.zeros((), g.in_type(index).dtype.np))
    return g.op("expand", zero, g.shape_of(index))


def scatter_flat(g, flat_index, ct):
    """zeros of operand 0's type with `ct` added at `flat_index` (flat positions in it)."""
    flat = g.op("reshape", zeros_of(g, 0), g.ints([-1]))
    total = g.op("scatter_add", flat, g.op("reshape", flat_index, g.ints([-1])),
                 g.op("reshape", ct, g.ints([-1])), axis=0)
    return g.reshape_to(total, 0)


def _gather(g, cts):
    return [g.op("scatter_add", zeros_of(g, 0), g.input(1), cts[0], axis=g.attrs["axis"]),
            None]


def _gather_elements(g, cts):
    data = g.static_shape(g.in_type(0), "gather_elements' scatter")
    shape = g.static_shape(g.in_type(1), "gather_elements' scatter")
    axis = g.attrs["axis"] % len(data)
    strides = np.cumprod([1, *data[::-1]])[:-1][::-1]
    offsets = sum(np.arange(d).reshape([-1 if k == i else 1 for k in range(len(shape))]) *
                  int(strides[i]) for i, d in enumerate(shape) if i != axis)
    index = g.op("cast", g.input(1), to=i64)
    n = data[axis]
    index = g.op("where", g.op("less", index, g.ints([0])), g.op("add", index, g.ints([n])),
                 index)
    flat = g.op("add", g.op("mul", index, g.ints([int(strides[axis])])),
                g.const(np.broadcast_to(np.asarray(offsets, np.int64), shape).copy()))
    return [scatter_flat(g, flat, cts[0]), None]


gather = Vjp(_gather, inputs=(0, 1))
gather_elements = Vjp(_gather_elements, inputs=(0, 1))
