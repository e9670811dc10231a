"""`winograd_conv`: its reference kernel (the Winograd algorithm in numpy) against a direct
3x3 convolution, the filter transform, its type rule and every error of it."""

import numpy as np
import pytest

from flowc.ir import Graph, InferError, TensorType
from flowc.ir.build import make_node
from flowc.ir.ops.winograd import matrices, reference, winograd_filter

RNG = np.random.default_rng(9)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def direct(x: np.ndarray, w: np.ndarray, b, pads) -> np.ndarray:
    """A stride-1 3x3 channels-last conv in float64: x [N, H, W, C], w [3, 3, C, M]."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (pads[0], pads[2]), (pads[1], pads[3]), (0, 0)))
    oh, ow = xp.shape[1] - 2, xp.shape[2] - 2
    y = sum(np.einsum("nhwc,cf->nhwf", xp[:, i:i + oh, j:j + ow], w[i, j].astype(np.float64))
            for i in range(3) for j in range(3))
    return y if b is None else y + b


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("shape,m,pads,bias", [
    ((1, 8, 8, 16), 16, (1, 1, 1, 1), True), ((2, 7, 9, 5), 6, (0, 1, 1, 0), False),
    ((1, 5, 5, 3), 4, (0, 0, 0, 0), True), ((1, 6, 11, 2), 3, (2, 0, 1, 2), True),
])
def test_reference_is_the_direct_conv(tile, shape, m, pads, bias):
    x, w = rand(*shape, dtype=np.float64), rand(3, 3, shape[3], m, dtype=np.float64)
    b = rand(m, dtype=np.float64) if bias else None
    got = reference(x, winograd_filter(w, tile), b, tile, pads)
    np.testing.assert_allclose(got, direct(x, w, b, pads), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("tile", [2, 4])
def test_transforms_are_winograds(tile):
    """A^T [(G g G^T) * (B^T d B)] A is the 'valid' correlation of one patch d with g."""
    bt, g, at = matrices(tile)
    d, k = rand(tile + 2, tile + 2, dtype=np.float64), rand(3, 3, dtype=np.float64)
    y = at @ ((g @ k @ g.T) * (bt @ d @ bt.T)) @ at.T
    want = [[np.sum(d[i:i + 3, j:j + 3] * k) for j in range(tile)] for i in range(tile)]
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    u = winograd_filter(k.reshape(3, 3, 1, 1).astype(np.float32), tile)
    assert u.shape == (tile + 2, tile + 2, 1, 1) and u.dtype == np.float32


def node(x_shape, u_shape, b_shape=None, attrs=None, dtype="f32"):
    g = Graph("w")
    inputs = [g.add_input("x", TensorType(dtype, x_shape)),
              g.add_input("u", TensorType(dtype, u_shape))]
    if b_shape is not None:
        inputs.append(g.add_input("b", TensorType(dtype, b_shape)))
    return make_node("winograd_conv", inputs, attrs or {"tile": 4, "pads": (1, 1, 1, 1)},
                     name="stage0/conv1")


def test_types():
    assert node((2, 64, 64, 16), (6, 6, 16, 32), (32,)).types[0] == TensorType(
        "f32", (2, 64, 64, 32))
    assert node((1, 7, 9, 3), (4, 4, 3, 8), attrs={"tile": 2, "pads": (0, 1, 2, 0)}).types[0] \
        == TensorType("f32", (1, 7, 8, 8))
    assert node(("N", 8, 8, 4), (6, 6, 4, 4), dtype="f64").types[0] == TensorType(
        "f64", ("N", 8, 8, 4))


@pytest.mark.parametrize("x_shape,u_shape,b_shape,attrs,dtype,message", [
    ((1, 8, 8, 4), (6, 6, 4, 4), None, {"tile": 3, "pads": (1, 1, 1, 1)}, "f32",
     "tile must be one of 2, 4, found 3"),
    ((1, 8, 8, 4), (6, 6, 4, 4), None, {"tile": 4, "pads": (1, 1)}, "f32",
     "pads must be 4 values >= 0 ([top, left, bottom, right]), found [1, 1]"),
    ((1, 8, 8, 4), (6, 6, 4, 4), None, {"tile": 4, "pads": (1, -1, 1, 1)}, "f32",
     "pads must be 4 values >= 0 ([top, left, bottom, right]), found [1, -1, 1, 1]"),
    ((8, 8, 4), (6, 6, 4, 4), None, None, "f32",
     "X must have rank 4 ([N, H, W, C]), found f32[8,8,4]"),
    ((1, 8, 8, 4), (6, 6, 16), None, None, "f32",
     "U must have rank 4 ([A, A, C, M]), found f32[6,6,16]"),
    ((1, 8, 8, 4), (4, 4, 4, 4), None, None, "f32",
     "U must be [6, 6, C, M] for tile 4, found f32[4,4,4,4]"),
    ((1, 8, 8, 4), (6, 6, 5, 4), None, None, "f32",
     "channels differ: X f32[1,8,8,4] has C=4, U f32[6,6,5,4] has C=5"),
    ((1, 8, 8, 4), (6, 6, 4, 4), (5,), None, "f32",
     "B must be [4] (one bias per output channel), found f32[5]"),
    ((1, 2, 8, 4), (6, 6, 4, 4), None, {"tile": 4, "pads": (0, 0, 0, 0)}, "f32",
     "H = 2 with pads 0, 0 leaves no output for a 3x3 window"),
    ((1, 8, 8, 4), (6, 6, 4, 4), None, None, "f16", "operands must be f32 or f64, found f16"),
])
def test_type_errors_name_the_node_and_operands(x_shape, u_shape, b_shape, attrs, dtype,
                                                message):
    with pytest.raises(InferError) as info:
        node(x_shape, u_shape, b_shape, attrs, dtype)
    assert message in str(info.value)
    assert "stage0/conv1" in str(info.value) and "winograd_conv" in str(info.value)
