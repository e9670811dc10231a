"""`widen`: an f16 CNN's convs run as f32 convs between casts (rewrites in
tests/golden/widen.flowc). Compiled, the model matches the interpreter's f16 model, and its
3x3 conv then takes the f32 rewrites (channels-last, Winograd)."""

from __future__ import annotations

import numpy as np

import flowc
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret


def _cnn() -> Graph:
    rng = np.random.default_rng(0)
    g = Graph("cnn16")
    x = g.add_input("x", TensorType("f16", (1, 8, 12, 12)))

    def const(shape, scale=0.2):
        a = (rng.standard_normal(shape) * scale).astype(np.float16)
        return g.append(make_node("constant", [], {"value": Tensor(a)})).out()

    h = g.append(make_node("conv", [x, const((16, 8, 3, 3)), const((16,))],
                           {"pads": [1, 1, 1, 1]})).out()
    h = g.append(make_node("relu", [h])).out()
    h = g.append(make_node("conv", [h, const((8, 16, 1, 1))])).out()
    g.add_output("y", h)
    return g


def test_f16_cnn_compiles_through_the_f32_rewrites(tmp_path):
    g = _cnn()
    flowc.compile(g, tmp_path / "a", name="cnn16", cache=False, dump_dir=tmp_path / "d")
    optimized = (tmp_path / "d" / "cnn16.flowc").read_text()
    assert "winograd_conv" in optimized and "channels_last = true" in optimized
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float16)
    got = flowc.load(tmp_path / "a").run(x=x)["y"].astype(np.float32)
    want = interpret(g, {"x": x})["y"].astype(np.float32)
    # f16 results: within a few units of f16's last place of the largest output
    assert np.abs(got - want).max() <= 4 * 2.0 ** -10 * np.abs(want).max()
