"""ONNX LSTM, GRU and RNN imported as flowc loops (frontend/onnx_rnn.py), run on the
interpreter against onnxruntime: every attribute and optional input, drawn by hypothesis
and listed by hand; the IR's shape (one projection matmul before each loop, a small body);
bad input as one-line errors. onnxruntime refuses layout 1, so a layout-1 model is checked
against onnxruntime running its layout-0 twin on transposed inputs.

Tolerance: `matmul` of inner size input + hidden, widened by the sequence length (each step
feeds the next, so rounding differences add up over the steps)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret
from flowc.testing.engines import run_onnxruntime
from flowc.testing.tolerance import assert_close

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
ACTS = {"LSTM": 3, "GRU": 2, "RNN": 1}
OUTPUTS = {"LSTM": ("Y", "Y_h", "Y_c"), "GRU": ("Y", "Y_h"), "RNN": ("Y", "Y_h")}
ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu",
               "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus")


def case(op, *, seq=4, batch=3, inputs=5, hidden=6, direction="forward", layout=0,
         bias=True, lens=False, h0=False, c0=False, peep=False, outputs=None, seed=0,
         dtype=np.float32, opset=22, **attrs):
    """(model, feeds) of one recurrent node, every operand a graph input (random values,
    sequence lengths in [1, seq] when `lens`); `layout` is left out before opset 14."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    size = GATES[op] * hidden
    x_shape = (seq, batch, inputs) if layout == 0 else (batch, seq, inputs)
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    shapes = {"X": x_shape, "W": (dirs, size, inputs), "R": (dirs, size, hidden),
              "B": (dirs, 2 * size) if bias else None, "sequence_lens": (batch,) if lens
              else None, "initial_h": state if h0 else None,
              "initial_c": state if c0 else None, "P": (dirs, 3 * hidden) if peep else None}
    if op != "LSTM":
        del shapes["initial_c"], shapes["P"]
    feeds = {}
    for name, shape in shapes.items():
        if shape is None:
            continue
        if name == "sequence_lens":
            feeds[name] = rng.integers(1, seq + 1, batch).astype(np.int32)
        else:
            feeds[name] = (rng.standard_normal(shape) * 0.5).astype(dtype)
    names = [n for n in outputs or OUTPUTS[op]]
    if opset >= 14:
        attrs["layout"] = layout
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node(op, [n if n in feeds else "" for n in shapes],
                            [n if n in names else "" for n in OUTPUTS[op]], name=f"my_{op}",
                            hidden_size=hidden, direction=direction, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.INT32 if n == "sequence_lens" else elem,
                                       v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info(n, elem, None) for n in names])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), feeds


def onnxruntime_answer(m, feeds):
    """onnxruntime's outputs of `m`, through its layout-0 twin when `m` has layout 1."""
    node = m.graph.node[0]
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    if not layout:
        return run_onnxruntime(m, feeds)
    twin = helper.make_model(m.graph, opset_imports=m.opset_import)
    next(a for a in twin.graph.node[0].attribute if a.name == "layout").i = 0
    for info in twin.graph.input:
        info.type.tensor_type.ClearField("shape")
    moved = {k: np.swapaxes(v, 0, 1) if k in ("X", "initial_h", "initial_c") else v
             for k, v in feeds.items()}
    results = run_onnxruntime(twin, moved)
    names = [o.name for o in m.graph.output]
    return [np.transpose(r, (2, 0, 1, 3)) if n == "Y" else np.swapaxes(r, 0, 1)
            for n, r in zip(names, results, strict=True)]


def check(m, feeds, drawn=False):
    """Compare the interpreter with onnxruntime; a `drawn` case whose answer overflows
    (unbounded activations feeding each other) is not a test, as the point where each
    engine reaches inf differs."""
    g = import_onnx(m)
    got = interpret(g, feeds)
    want = onnxruntime_answer(m, feeds)
    if drawn:
        assume(all(np.isfinite(w).all() for w in want))
    x = feeds["X"]
    n = x.shape[2] + feeds["R"].shape[2]
    steps = max(x.shape[:2])   # seq is one of the two (by layout)
    for (name, _), w in zip(g.outputs, want, strict=True):
        assert_close(got[name], w, "matmul", n=n, scale=steps,
                     err_msg=f"{name} of {helper.printable_node(m.graph.node[0])}")
    return g


@st.composite
def cases(draw, op):
    direction = draw(st.sampled_from(("forward", "reverse", "bidirectional")))
    dirs = 2 if direction == "bidirectional" else 1
    attrs = {}
    if draw(st.booleans()):
        acts = draw(st.lists(st.sampled_from(ACTIVATIONS), min_size=ACTS[op] * dirs,
                             max_size=ACTS[op] * dirs))
        attrs["activations"] = acts
        floats = st.floats(0.125, 1.5, width=32)
        if draw(st.booleans()):
            attrs["activation_alpha"] = draw(st.lists(floats, min_size=1, max_size=len(acts)))
        if draw(st.booleans()):
            attrs["activation_beta"] = draw(st.lists(floats, min_size=1, max_size=len(acts)))
    if draw(st.booleans()):
        attrs["clip"] = draw(st.floats(0.25, 3.0, width=32))
    if op == "LSTM":
        attrs["input_forget"] = int(draw(st.booleans()))
    if op == "GRU":
        attrs["linear_before_reset"] = int(draw(st.booleans()))
    names = draw(st.lists(st.sampled_from(OUTPUTS[op]), min_size=1, unique=True))
    lstm = op == "LSTM"
    return case(op, seq=draw(st.integers(1, 5)), batch=draw(st.integers(1, 3)),
                inputs=draw(st.integers(1, 4)), hidden=draw(st.integers(1, 5)),
                direction=direction, layout=int(draw(st.booleans())),
                bias=draw(st.booleans()), lens=draw(st.booleans()), h0=draw(st.booleans()),
                c0=lstm and draw(st.booleans()), peep=lstm and draw(st.booleans()),
                outputs=names, seed=draw(st.integers(0, 2**16)), **attrs)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_attribute_combination_matches_onnxruntime(op, data):
    check(*data.draw(cases(op)), drawn=True)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_each_activation_with_and_without_alpha_beta(op, act):
    """`act` first in the forward direction and last in the reverse one, the others the
    defaults (an LSTM with only unbounded activations overflows in a few steps)."""
    defaults = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"],
                "RNN": ["Tanh"]}[op]
    acts = [act, *defaults[1:], *defaults[:-1], act]
    check(*case(op, direction="bidirectional", activations=acts))
    check(*case(op, direction="bidirectional", activations=acts, seed=1,
                activation_alpha=[0.7, 0.3], activation_beta=[0.4, 0.9]))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_all_inputs_with_sequence_lengths(op, direction, layout):
    """Every optional input given; batch entries end at different steps."""
    lstm = op == "LSTM"
    check(*case(op, seq=5, batch=4, direction=direction, layout=layout, lens=True, h0=True,
                c0=lstm, peep=lstm, clip=1.5,
                **({"linear_before_reset": 1} if op == "GRU" else {})))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_older_opsets_without_layout(op):
    """Opset 7-13 forms (no layout): 13 imports as it is, older ones through onnx's version
    converter."""
    for opset in (9, 13):
        check(*case(op, opset=opset, direction="bidirectional", lens=True, h0=True))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_double_precision(op):
    """f64 models import and run in f64; onnxruntime has no f64 kernels for these ops, so
    the answer is its f32 one on the same values rounded (f32 tolerance)."""
    options = {"direction": "bidirectional", "lens": True, "h0": True}
    m, feeds = case(op, dtype=np.float64, **options)
    g = import_onnx(m)
    got = interpret(g, feeds)
    m32, feeds32 = case(op, **options)
    want = run_onnxruntime(m32, feeds32)
    for (name, _), w in zip(g.outputs, want, strict=True):
        assert got[name].dtype == np.float64
        assert_close(got[name].astype(np.float32), w, "matmul", n=11, scale=5, err_msg=name)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_symbolic_sequence_and_batch(op):
    """X [seq, batch, input] with named dims: the trip count and zero states come from X's
    shape at run time."""
    m, feeds = case(op, direction="bidirectional", lens=True, layout=1)
    for info in m.graph.input:
        if info.name in ("X", "sequence_lens"):
            dims = info.type.tensor_type.shape.dim
            dims[0].dim_param = "batch"
            if info.name == "X":
                dims[1].dim_param = "seq"
    g = check(m, feeds)
    loop = next(n for n in g.nodes if n.op == "loop")
    assert loop.outputs[0].type.shape == ("batch", 6)


def test_ir_projects_once_before_a_small_loop_body():
    """Per direction: one matmul of X by W^T (all steps) outside the loop; the step's only
    matmul is by R^T (captured, transposed once outside); no transposes in the body."""
    g = check(*case("LSTM", direction="bidirectional", lens=True, peep=True))
    loops = [n for n in g.nodes if n.op == "loop"]
    assert len(loops) == 2
    outer = [n.op for n in g.nodes]
    assert outer.count("matmul") == 2
    for loop in loops:
        body = [n.op for n in loop.attrs["body"].nodes]
        assert body.count("matmul") == 1 and "transpose" not in body
        assert len(body) < 30, body
        assert all(n.name.startswith("my_LSTM") for n in loop.attrs["body"].nodes)
        assert loop.out().type.is_static


def test_unused_y_is_not_collected():
    """Without Y the loop has no scan output (nothing stacked per step)."""
    g = check(*case("GRU", outputs=["Y_h"]))
    loop, = [n for n in g.nodes if n.op == "loop"]
    assert len(loop.outputs) == 1


def _raises(m, pattern):
    with pytest.raises(OnnxImportError, match=pattern) as info:
        import_onnx(m)
    assert "\n" not in str(info.value)


def test_wrong_w_shape_names_the_file_and_node(tmp_path):
    m, _ = case("LSTM")
    m.graph.input[1].type.tensor_type.shape.dim[1].dim_value = 23
    path = tmp_path / "lstm.onnx"
    onnx.save(m, path)
    _raises(path, rf"^{re.escape(str(path))}: node 'my_LSTM' \(LSTM\): input W is "
                  r"f32\[1,23,5\], expected shape \[1, 24, 5\]$")


def test_unknown_activation():
    m, _ = case("GRU", activations=["Sigmoid", "Swish"])
    _raises(m, r"^<model>: node 'my_GRU' \(GRU\): unknown activation 'Swish' \(known: affine, "
               r"elu, .*, any case\)$")


def test_activation_count():
    m, _ = case("LSTM", direction="bidirectional", activations=["Sigmoid", "Tanh", "Tanh"])
    _raises(m, r"node 'my_LSTM' \(LSTM\): activations lists 3 functions, expected 6 \(3 per "
               r"direction, 2 direction\(s\)\)$")


def test_hidden_size_mismatch():
    m, _ = case("RNN")
    next(a for a in m.graph.node[0].attribute if a.name == "hidden_size").i = 7
    _raises(m, r"^<model>: node 'my_RNN' \(RNN\): hidden_size = 7 but R is f32\[1,6,6\] "
               r"\(its last dim is the hidden size\)$")


def test_unknown_direction_and_layout():
    m, _ = case("RNN", direction="sideways")
    _raises(m, r"node 'my_RNN' \(RNN\): direction 'sideways' is not one of forward, reverse, "
               r"bidirectional$")
    m, _ = case("RNN", layout=2)
    _raises(m, r"node 'my_RNN' \(RNN\): layout 2 is not 0 or 1$")


def test_wrong_initial_state_shape():
    m, _ = case("GRU", h0=True)
    m.graph.input[-1].type.tensor_type.shape.dim[2].dim_value = 2
    _raises(m, r"node 'my_GRU' \(GRU\): input initial_h is f32\[1,3,2\], expected shape "
               r"\[1, 3, 6\]$")


def test_missing_required_input_and_lstm_only_inputs():
    m, _ = case("RNN")
    m.graph.node[0].input[2] = ""
    _raises(m, r"node 'my_RNN' \(RNN\): inputs X, W and R are required$")
    m, _ = case("GRU", h0=True)
    m.graph.node[0].input.extend(["initial_h"])
    _raises(m, r"node 'my_GRU' \(GRU\): GRU takes no initial_c or P \(inputs 6 and 7 are "
               r"LSTM's\)$")


def test_integer_x():
    m, _ = case("RNN")
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32
    _raises(m, r"node 'my_RNN' \(RNN\): input X is i32\[4,3,5\]: expected a float tensor$")
