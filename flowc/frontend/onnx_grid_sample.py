"""ONNX GridSample (opsets 16, 20, 22) imported as elementwise ops and gathers (issue [13]),
onnx.reference's maths step for step, in X's float dtype.

X is [N, C, *S] (2 or 3 spatial dims, static), Grid [N, *O, k] (k = len(S), static): per
output point and spatial dim i (Grid's component k-1-i: x, y[, z] run from the last dim
back), the coordinate g in [-1, 1] becomes x = (g + 1) / 2 (L - 1) (`align_corners=1`) or
((g + 1) L - 1) / 2 (else; L = S[i]); `nearest` rounds it half to even. Outside the borders
([0, L - 1] with align_corners, [-0.5, L - 0.5] without) `border` clamps x to [0, L - 1] and
`reflection` reflects it back in; `zeros` leaves it. Taps: `nearest` one at trunc(x),
`linear` floor(x) and floor(x) + 1 weighted 1 - t and t (t = x - floor(x)), `cubic` four,
floor(x) - 1 .. floor(x) + 2, with Keys' weights (a = -0.75). A tap outside [0, L) reads 0
(`zeros`), the clamped index (`border`) or the reflected index, truncated (`reflection`).
The result is the sum over every combination of the dims' taps of the product of their
weights times X there: per combination one gather of X's pixel rows (X as [N prod S, C],
channels last: each read a contiguous row of C values) at flat indices [N prod O] (4 for
2-D linear, 16 cubic, 8 for 3-D linear, 1 nearest), the sum transposed back to channels
first.
Refused with a one-line error naming the node: an unknown mode or padding_mode, 3-D cubic
(the spec allows 2-D only), non-static shapes, a non-float X.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from flowc.ir import Value
from flowc.ir.types import i64

_MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest", "cubic": "cubic",
          "bicubic": "cubic"}
_CUBIC_A = -0.75


class Ops:
    """Shorthands over a NodeContext for elementwise maths in one float dtype."""

    def __init__(self, ctx, dtype):
        self.ctx, self.dtype = ctx, dtype

    def __call__(self, op: str, *operands: Value, **attrs) -> Value:
        return self.ctx.emit(op, list(operands), attrs)[0]

    def c(self, value: float) -> Value:
        return self.ctx.constant(np.asarray(value, dtype=self.dtype.np))

    def ints(self, values) -> Value:
        return self.ctx.constant(np.asarray(values, dtype=np.int64))

    def clip(self, x: Value, lo: float, hi: float) -> Value:
        return self("clip", x, self.c(lo), self.c(hi))

    def reflect(self, x: Value, lo: float, hi: float) -> Value:
        """x reflected by the near border until within [lo, hi] (onnx.reference's
        _gs_reflect: n = trunc(d / range) reflections of the distance d past it)."""
        span = self.c(hi - lo)

        def fold(d: Value, near: float, far: float) -> Value:
            n = self("floor", self("div", d, span))
            r = self("sub", d, self("mul", n, span))
            half = self("mul", n, self.c(0.5))
            even = self("equal", self("floor", half), half)
            return self("where", even, self("add", self.c(near), r),
                        self("sub", self.c(far), r)) if near < far else self(
                "where", even, self("sub", self.c(near), r), self("add", self.c(far), r))

        below = fold(self("sub", self.c(lo), x), lo, hi)
        above = fold(self("sub", x, self.c(hi)), hi, lo)
        x = self("where", self("less", x, self.c(lo)), below, x)
        return self("where", self("greater", x, self.c(hi)), above, x)


def _cubic_weights(o: Ops, t: Value) -> list[Value]:
    """Keys' cubic weights of the taps at -1, 0, 1, 2 from floor(x), t = x - floor(x)."""
    a = _CUBIC_A

    def far(d: Value) -> Value:   # ((a d - 5a) d + 8a) d - 4a, for 1 <= d <= 2
        inner = o("add", o("mul", o("sub", o("mul", o.c(a), d), o.c(5 * a)), d), o.c(8 * a))
        return o("sub", o("mul", inner, d), o.c(4 * a))

    def near(d: Value) -> Value:  # ((a + 2) d - (a + 3)) d d + 1, for 0 <= d <= 1
        inner = o("sub", o("mul", o.c(a + 2), d), o.c(a + 3))
        return o("add", o("mul", o("mul", inner, d), d), o.c(1.0))

    one_minus = o("sub", o.c(1.0), t)
    return [far(o("add", t, o.c(1.0))), near(t), near(one_minus),
            far(o("sub", o.c(2.0), t))]


def taps(o: Ops, x: Value, mode: str, length: int, padding: str, bounds
          ) -> list[tuple[Value, Value | None]]:
    """(flat index along this dim (i64), weight or None for 1) per tap of coordinate x;
    a `zeros` tap outside [0, length) gets weight 0 (nearest: a 0/1 weight)."""
    if mode == "nearest":
        base, offsets, weights = x, [0], [None]
    else:
        base = o("floor", x)
        t = o("sub", x, base)
        if mode == "linear":
            offsets, weights = [0, 1], [o("sub", o.c(1.0), t), t]
        else:
            offsets, weights = [-1, 0, 1, 2], _cubic_weights(o, t)
    taps = []
    for off, w in zip(offsets, weights, strict=True):
        p = base if off == 0 else o("add", base, o.c(float(off)))
        if padding == "zeros":
            inside = o("and", o("greater_or_equal", p, o.c(0.0)), o("less", p, o.c(length)))
            mask = o("cast", inside, to=o.dtype)
            w = mask if w is None else o("mul", w, mask)
            p = o.clip(p, 0.0, length - 1.0)
        elif padding == "border":
            p = o.clip(p, 0.0, length - 1.0)
        else:
            p = o.clip(o.reflect(p, *bounds), 0.0, length - 1.0)
        taps.append((o("cast", p, to=i64), w))
    return taps


def convert_grid_sample(ctx) -> Sequence[Value]:
    x, grid = ctx.inputs
    mode = _MODES.get(str(ctx.attrs.get("mode", "linear")))
    padding = str(ctx.attrs.get("padding_mode", "zeros"))
    align = bool(ctx.attrs.get("align_corners", 0))
    if mode is None:
        ctx.fail(f"mode must be linear, nearest or cubic (bilinear, bicubic), found "
                 f"{ctx.attrs['mode']!r}")
    if padding not in ("zeros", "border", "reflection"):
        ctx.fail(f"padding_mode must be zeros, border or reflection, found {padding!r}")
    if not x.type.dtype.is_float:
        ctx.fail(f"X must be a float tensor, found {x.type}")
    if not (x.type.is_static and grid.type.is_static):
        ctx.fail(f"GridSample needs static shapes, found X {x.type} and Grid {grid.type}")
    xs, gs = [int(d) for d in x.type.shape], [int(d) for d in grid.type.shape]
    nd = len(xs) - 2
    if nd not in (2, 3) or len(gs) != nd + 2 or gs[-1] != nd or gs[0] != xs[0]:
        ctx.fail(f"X [N, C, spatial (2 or 3)] and Grid [N, out..., {nd}] do not match: "
                 f"{x.type} and {grid.type}")
    if mode == "cubic" and nd == 3:
        ctx.fail("cubic mode takes 2 spatial dims only, found 3")
    o = Ops(ctx, x.type.dtype)
    n, c, spatial, out = xs[0], xs[1], xs[2:], gs[1:-1]
    g = grid if grid.type.dtype == x.type.dtype else o("cast", grid, to=x.type.dtype)
    strides = [int(np.prod(spatial[i + 1:])) for i in range(nd)]
    per_dim = []
    for i, length in enumerate(spatial):
        gi = o("gather", g, o.ints(nd - 1 - i), axis=len(gs) - 1)
        if align:
            coord = o("mul", o("add", gi, o.c(1.0)), o.c((length - 1) / 2))
            bounds = (0.0, length - 1.0)
        else:
            coord = o("mul", o("sub", o("mul", o("add", gi, o.c(1.0)), o.c(float(length))),
                               o.c(1.0)), o.c(0.5))
            bounds = (-0.5, length - 0.5)
        if mode == "nearest":
            coord = o("round", coord)
        outside = o("or", o("less", coord, o.c(bounds[0])), o("greater", coord, o.c(bounds[1])))
        if padding == "border":
            coord = o("where", outside, o.clip(coord, 0.0, length - 1.0), coord)
        elif padding == "reflection":
            coord = o.reflect(coord, *bounds)
        if mode == "nearest":  # trunc, as onnx.reference's int32 cast
            coord = o("cast", o("cast", coord, to=i64), to=x.type.dtype)
        per_dim.append([(o("mul", idx, o.ints(strides[i])), w)
                        for idx, w in taps(o, coord, mode, length, padding, bounds)])
    points, size = int(np.prod(out)), int(np.prod(spatial))
    rows = o("reshape", o("transpose", o("reshape", x, o.ints([n, c, size])), perm=(0, 2, 1)),
             o.ints([n * size, c]))
    batch = o.ints((np.arange(n) * size).reshape([n] + [1] * len(out)))
    total = None
    for combo in itertools.product(*per_dim):
        flat, weight = combo[0]
        for idx, w in combo[1:]:
            flat = o("add", flat, idx)
            weight = w if weight is None else weight if w is None else o("mul", weight, w)
        flat = o("reshape", o("add", flat, batch), o.ints([n * points]))
        term = o("gather", rows, flat, axis=0)
        if weight is not None:
            term = o("mul", term, o("reshape", weight, o.ints([n * points, 1])))
        total = term if total is None else o("add", total, term)
    total = o("transpose", o("reshape", total, o.ints([n, points, c])), perm=(0, 2, 1))
    return [o("reshape", total, o.ints([n, c, *out]))]
