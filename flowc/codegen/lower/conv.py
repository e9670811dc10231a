"""Lowering rules of conv and conv_transpose (N-d, grouped, ONNX layout).

conv: the input is padded by one generic, then one contraction generic over
(n, g, m, *out, c, *kernel) reads x[n, g, c, o*s + k*d]; a 2-D, ungrouped f32/f64 conv is
instead (and a bf16/f16 one, widened to f32 by the transposes) a named
`linalg.conv_2d_nhwc_hwcf` between transposes, which the CPU pipeline tiles
and vectorizes (see cpu/pipeline.py). A channels-last conv (`channels_last = true`, which
the `channels-last` pass makes) needs no transposes: see conv_nhwc.py. conv_transpose is a
conv over the input dilated by the strides and padded by `d*(k-1) - pad`, with the kernel
flipped and its channels swapped (2-D, ungrouped f32/f64: the same named conv as conv's,
on that input and the flipped HWCF filter).
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import arith, linalg, tensor

from flowc.codegen.lower import register
from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import (
    RuleCtx,
    broadcast_map,
    dim,
    elem_type,
    empty,
    expr_map,
    fill,
    generic,
    identity_map,
    index_const,
    reshape,
    scalar_const,
    value_shape,
)
from flowc.codegen.lower.conv_nhwc import conv_channels_last
from flowc.ir.types import DType

# Input dtypes whose 2-D ungrouped convs become the named conv the CPU strategy vectorizes
# (bf16/f16 widened to f32 by the layout transposes: f32 accumulation, the f32 kernel).
NAMED_CONV_DTYPES = ("f32", "f64", "i32", "bf16", "f16")


def window_geometry(attrs: dict, spatial: Sequence[int], kernel: Sequence[int], out: Sequence[int]):
    """(strides, dilations, begin pads, end pads) of a window op, the end pads grown to what
    the output size needs (ceil mode), as the reference computes them."""
    from flowc.ir.ops.conv import _pads_for  # the registry's own geometry rule

    n = len(spatial)
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    pads = _pads_for(attrs, spatial, kernel, strides, dilations)
    begin = [p[0] for p in pads]
    end = []
    for i in range(n):
        need = (out[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
        end.append(max(pads[i][1], need - spatial[i] - pads[i][0]))
    return strides, dilations, begin, end


def pad_spatial(x: ir.Value, begin: Sequence[int], end: Sequence[int], value: ir.Value,
                dilate: Sequence[int] | None = None) -> ir.Value:
    """x [N, C, *S] padded on its spatial dims (negative pads crop), optionally with
    `dilate[i] - 1` holes between elements first; padding and holes hold `value`."""
    shape = value_shape(x)
    spatial = shape[2:]
    dilate = list(dilate or [1] * len(spatial))
    if not any(begin) and not any(end) and dilate == [1] * len(spatial):
        return x
    grown = [(n - 1) * d + 1 for n, d in zip(spatial, dilate, strict=True)]
    out_shape = [*shape[:2], *(g + b + e for g, b, e in zip(grown, begin, end, strict=True))]
    rank = len(out_shape)

    def body(_o):
        ix = [linalg.IndexOp(i).result for i in range(rank)]
        src, inside = ix[:2], None
        for j, n in enumerate(spatial):
            raw = arith.subi(ix[2 + j], index_const(begin[j]))
            ok = arith.andi(arith.cmpi(s.IP.sge, raw, index_const(0)),
                            arith.cmpi(s.IP.slt, raw, index_const(grown[j])))
            if dilate[j] > 1:
                d = index_const(dilate[j])
                ok = arith.andi(ok, arith.cmpi(s.IP.eq, arith.remsi(raw, d), index_const(0)))
                raw = arith.divsi(raw, d)
            src.append(arith.minsi(arith.maxsi(raw, index_const(0)), index_const(n - 1)))
            inside = ok if inside is None else arith.andi(inside, ok)
        v = tensor.extract(x, src)
        return [arith.select(inside, v, value)]

    et = ir.RankedTensorType(x.type).element_type
    return generic([], [], [empty((out_shape, et))], [identity_map(rank)], "p" * rank, body)[0]


def conv_core(xp: ir.Value, w: ir.Value, group: int, strides: Sequence[int],
              dilations: Sequence[int], out_spatial: Sequence[int], acc: DType,
              in_dt: DType, flip: bool = False, w_cm: bool = False) -> ir.Value:
    """y [N, M, *out] = sum over c, k of xp[n, g*Cg + c, o*s + k*d] * w[g*Mg + m, c, k]
    (`w_cm`: w is [C, Mg, *K] instead; `flip`: the kernel is read reversed)."""
    xs, ws = value_shape(xp), value_shape(w)
    nb, c = xs[:2]
    ks = ws[2:]
    nsp = len(ks)
    cg = c // group
    mg = ws[1] if w_cm else ws[0] // group
    xg = reshape(xp, [nb, group, cg, *xs[2:]])
    wg = reshape(w, [group, cg, mg, *ks] if w_cm else [group, mg, cg, *ks])
    # loops: n g m *o | c *k
    n_loops = 3 + 2 * nsp + 1
    o = [3 + i for i in range(nsp)]
    cd = 3 + nsp
    k = [cd + 1 + i for i in range(nsp)]
    x_map = expr_map(n_loops, [dim(0), dim(1), dim(cd),
                               *(dim(o[i]) * strides[i] + dim(k[i]) * dilations[i]
                                 for i in range(nsp))])
    kexprs = [dim(k[i]) * -1 + (ks[i] - 1) if flip else dim(k[i]) for i in range(nsp)]
    w_map = expr_map(n_loops, [dim(1), dim(cd), dim(2), *kexprs] if w_cm else
                     [dim(1), dim(2), dim(cd), *kexprs])
    out_shape = [nb, group, mg, *out_spatial]
    init = fill(scalar_const(acc, 0), empty((out_shape, elem_type(acc))))
    out_map = expr_map(n_loops, [dim(i) for i in range(3 + nsp)])
    xdt = in_dt

    def body(a, b, y):
        return [s.add(acc, y, s.mul(acc, s.convert(a, xdt, acc), s.convert(b, xdt, acc)))]

    kinds = "p" * (3 + nsp) + "r" * (1 + nsp)
    ins, maps = [xg, wg], [x_map, w_map]
    if flip:  # the kernel loops appear in no map as plain dims: give them their extent
        ins.append(window_extent(ks))
        maps.append(expr_map(n_loops, [dim(i) for i in k]))
    y = generic(ins, maps, [init], [out_map], kinds, lambda a, b, *rest: body(a, b, rest[-1]))[0]
    return reshape(y, [nb, group * mg, *out_spatial])


def window_extent(kernel: Sequence[int]) -> ir.Value:
    """An (unread) operand of the window's shape, read through the kernel loops' plain dims:
    linalg infers each loop's extent from an operand indexing it by a plain dim."""
    return empty((list(kernel), ir.IntegerType.get_signless(8)))


def add_bias(y: ir.Value, b: ir.Value | None, b_dt: DType, acc: DType, out_dt: DType) -> ir.Value:
    shape = value_shape(y)
    rank = len(shape)
    ins, maps = [y], [identity_map(rank)]
    if b is not None:
        ins.append(reshape(b, [shape[1], *[1] * (rank - 2)]))
        maps.append(broadcast_map([shape[1], *[1] * (rank - 2)], shape))

    def body(v, *rest):
        if rest[:-1]:
            v = s.add(acc, v, s.convert(rest[0], b_dt, acc))
        return [s.convert(v, acc, out_dt)]

    return generic(ins, maps, [empty((shape, elem_type(out_dt)))], [identity_map(rank)],
                   "p" * rank, body)[0]


def _nhwc_conv(xp: ir.Value, w: ir.Value, strides, dilations, out_spatial, acc: DType,
               src: DType, w_hwcf: ir.Value | None = None):
    """2-D conv through linalg.conv_2d_nhwc_hwcf: the layout the CPU schedule vectorizes
    (`w` [F, C, kh, kw] is transposed to HWCF unless `w_hwcf` gives that filter). Operands
    of a 16-bit `src` are widened to `acc` (f32) by those transposes, so the conv is the
    f32 one (operands of it read in 16 bits met LLVM crashes on AVX-512)."""
    nb = value_shape(xp)[0]
    et = elem_type(acc)
    x_nhwc = _to_layout(xp, [0, 2, 3, 1], src, acc)
    if w_hwcf is None:
        w_hwcf = _to_layout(w, [2, 3, 1, 0], src, acc)
    f = value_shape(w_hwcf)[3]
    oh, ow = out_spatial
    init = fill(scalar_const(acc, 0), empty(([nb, oh, ow, f], et)))
    y = linalg.conv_2d_nhwc_hwcf(x_nhwc, w_hwcf, outs=[init], strides=list(strides),
                                 dilations=list(dilations))
    return linalg.transpose(y, outs=[empty(([nb, f, oh, ow], et))],
                            permutation=[0, 3, 1, 2]).results[0]


def _to_layout(v: ir.Value, perm: Sequence[int], src: DType, acc: DType) -> ir.Value:
    """`v` (of dtype `src`) transposed by `perm` (result dim j is v's dim perm[j]), in `acc`:
    a plain `linalg.transpose` when they agree, else one generic converting as it moves."""
    shape = value_shape(v)
    out = empty(([shape[p] for p in perm], elem_type(acc)))
    if src == acc:
        return linalg.transpose(v, outs=[out], permutation=list(perm)).results[0]
    in_map = expr_map(len(perm), [dim(list(perm).index(i)) for i in range(len(perm))])
    return generic([v], [in_map], [out], [identity_map(len(perm))], "p" * len(perm),
                   lambda x, _o: [s.convert(x, src, acc)])[0]


def _flipped_hwcf(w: ir.Value, src: DType, acc: DType) -> ir.Value:
    """conv_transpose's filter w [C, M, kh, kw] (dtype `src`) as the HWCF filter of the
    equivalent conv, in `acc`: hwcf[i, j, c, m] = w[c, m, kh-1-i, kw-1-j]."""
    c, m, kh, kw = value_shape(w)
    w_map = expr_map(4, [dim(2), dim(3), dim(0) * -1 + (kh - 1), dim(1) * -1 + (kw - 1)])
    return generic([w], [w_map], [empty(([kh, kw, c, m], elem_type(acc)))],
                   [identity_map(4)], "pppp", lambda v, _o: [s.convert(v, src, acc)])[0]


@register("conv")
def _conv(ctx: RuleCtx, x, w, b=None) -> list:
    if ctx.attrs["channels_last"]:
        return [conv_channels_last(ctx, x, w, b, window_geometry, _conv_first)]
    return [_conv_first(ctx, x, w, b, ctx.in_types[:2])]


def _conv_first(ctx: RuleCtx, x, w, b, types) -> ir.Value:
    """The conv in ONNX layout, `types` the types of x and w."""
    xt, wt = types
    dt = xt.dtype
    acc = s.compute_dtype(dt)
    kernel = list(wt.shape[2:])
    out = ctx.out.shape
    out_spatial = list(out[1:-1] if ctx.attrs["channels_last"] else out[2:])
    strides, dilations, begin, end = window_geometry(ctx.attrs, xt.shape[2:], kernel,
                                                     out_spatial)
    xp = pad_spatial(x, begin, end, scalar_const(dt, 0))
    group = ctx.attrs["group"]
    if len(kernel) == 2 and group == 1 and dt.name in NAMED_CONV_DTYPES:
        y = _nhwc_conv(xp, w, strides, dilations, out_spatial, acc, dt)
    else:
        y = conv_core(xp, w, group, strides, dilations, out_spatial, acc, dt)
    b_dt = ctx.in_types[2].dtype if b is not None else dt
    return add_bias(y, b, b_dt, acc, dt)


@register("conv_transpose")
def _conv_transpose(ctx: RuleCtx, x, w, b=None) -> list:
    from flowc.ir.ops.conv import _convt_pads  # the registry's own geometry rule

    xt, wt = ctx.in_types[0], ctx.in_types[1]
    dt = xt.dtype
    acc = s.compute_dtype(dt)
    kernel = list(wt.shape[2:])
    strides, dilations, out_pad, pads, out = _convt_pads(ctx.attrs, xt.shape[2:], kernel)
    begin = [(k - 1) * d - p0 for k, d, (p0, _) in zip(kernel, dilations, pads, strict=True)]
    end = [(k - 1) * d - p1 + op for k, d, (_, p1), op
           in zip(kernel, dilations, pads, out_pad, strict=True)]
    xp = pad_spatial(x, begin, end, scalar_const(dt, 0), dilate=strides)
    if len(kernel) == 2 and ctx.attrs["group"] == 1 and dt.name in NAMED_CONV_DTYPES:
        y = _nhwc_conv(xp, w, [1, 1], dilations, out, acc, dt,
                       w_hwcf=_flipped_hwcf(w, dt, acc))
    else:
        y = conv_core(xp, w, ctx.attrs["group"], [1] * len(kernel), dilations, out, acc, dt,
                      flip=True, w_cm=True)
    b_dt = ctx.in_types[2].dtype if b is not None else dt
    return [add_bias(y, b, b_dt, acc, dt)]
