"""col2im (ONNX Col2Im, opset 18): sliding blocks summed back into an image (torch's fold).

`col2im(input, image_shape, block_shape)`, input [N, C prod(block), L]: column
(c, k, l) (k a position in the block, l a block, both row-major) is added into the image at
i_d = l_d stride_d - pad_begin_d + k_d dilation_d per spatial dim d, where that is inside
the image; L = prod over d of (image_d + pads_d - dilation_d (block_d - 1) - 1) // stride_d
+ 1. Attributes dilations, strides (default ones) and pads (begin..., end...; default
zeros). The result [N, C, *image_shape] depends on image_shape and block_shape: the type
rule asks for them (the compiled path folds fed ones) and `simplify` turns the node into
one scatter_add of the columns at constant image positions (`targets`; a column that
falls outside goes to a spare slot cut off after: ir/decompose.py's `build_col2im`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import TensorType

_ATTRS = [AttrSpec("dilations", "ints", None), AttrSpec("pads", "ints", None),
          AttrSpec("strides", "ints", None)]


def targets(attrs: dict, image: list[int], block: list[int], columns: int,
            fail: Callable[[str], None]) -> np.ndarray:
    """The flat image position of each of the prod(block) * L columns of one channel
    (prod(image), a spare slot, where it falls outside), checked against L = `columns`."""
    nd = len(image)
    dil = list(attrs.get("dilations") or [1] * nd)
    strides = list(attrs.get("strides") or [1] * nd)
    pads = list(attrs.get("pads") or [0] * (2 * nd))
    if len(block) != nd or len(dil) != nd or len(strides) != nd or len(pads) != 2 * nd:
        fail(f"image_shape {image}, block_shape {block}, dilations {dil}, strides {strides} "
             f"and pads {pads} disagree on the number of spatial dims")
    blocks = [(image[d] + pads[d] + pads[nd + d] - dil[d] * (block[d] - 1) - 1) // strides[d]
              + 1 for d in range(nd)]
    if min(blocks) < 1 or int(np.prod(blocks)) != columns:
        fail(f"input has {columns} blocks, image_shape {image} and block_shape {block} give "
             f"{blocks}")
    out = []
    size = int(np.prod(image))
    for k in itertools.product(*[range(b) for b in block]):
        for pos in itertools.product(*[range(b) for b in blocks]):
            at = [pos[d] * strides[d] - pads[d] + k[d] * dil[d] for d in range(nd)]
            inside = all(0 <= at[d] < image[d] for d in range(nd))
            out.append(int(np.ravel_multi_index(at, image)) if inside else size)
    return np.array(out, np.int64)


def _ints(a) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


def _infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    if x.rank != 3:
        ctx.fail(f"input must be [N, C * prod(block_shape), L], found {x}")
    image, block = ctx.const(1), ctx.const(2)
    if image is None or block is None:
        return TensorType(x.dtype, (x.shape[0], None, *[None] * ctx.tensor(1).shape[0]))
    image, block = _ints(image), _ints(block)
    k = int(np.prod(block))
    if isinstance(x.shape[1], int) and (k < 1 or x.shape[1] % k):
        ctx.fail(f"input's dim 1 ({x.shape[1]}) is not a multiple of prod(block_shape) {k}")
    if isinstance(x.shape[2], int):
        targets(ctx.attrs, image, block, x.shape[2], ctx.fail)
    c = x.shape[1] // k if isinstance(x.shape[1], int) else None
    return TensorType(x.dtype, (x.shape[0], c, *image))


def _kernel(ctx: KernelContext, x, image, block):
    def fail(message: str) -> None:
        raise ValueError(message)

    image, block = _ints(image), _ints(block)
    where = targets(ctx.attrs, image, block, x.shape[2], fail)
    n, c = x.shape[0], x.shape[1] // int(np.prod(block))
    out = np.zeros((n, c, int(np.prod(image)) + 1), x.dtype)
    np.add.at(out, (slice(None), slice(None), where), x.reshape(n, c, -1))
    return out[:, :, :-1].reshape(n, c, *image)


define("col2im", ("input", "image_shape", "block_shape"), _infer, _kernel, attrs=_ATTRS,
       onnx="Col2Im", tolerance="reduction", no_grad="not differentiated (no training use yet)",
       doc="ONNX Col2Im-18 (compiled as one scatter_add: ir/decompose.py's build_col2im).")
