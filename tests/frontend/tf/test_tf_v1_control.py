"""TF v1 control flow (Switch/Merge/Enter/Exit/NextIteration/LoopCond frames) recovered
into the IR's `if`/`loop` (frames.py): loops_v1.pb, built with tf.compat.v1 and control
flow v2 off (a while loop holding a cond and an inner while loop, then a cond of two
outputs), and
control_v1.pb (the functional control model lowered to frames by TF), compiled and matching
TensorFlow's outputs; malformed frames are one-line errors naming the node."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import flowc
from flowc.frontend.tf import TfImportError, import_tf
from flowc.frontend.tf.protos import GraphDef
from flowc.ir.interpret import interpret
from flowc.runtime.loader import load

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tf"
V1_FETCHES = ["acc", "h", "top", "side"]


def _ops(graph) -> list[str]:
    found = []
    for node in graph.nodes:
        found.append(node.op)
        for attr in node.attrs.values():
            if hasattr(attr, "nodes") and hasattr(attr, "outputs"):
                found += _ops(attr)
    return found


def test_tf1_graph_loops_and_conds_compiled(tmp_path):
    data = np.load(FIXTURES / "loops_v1.npz")
    graph = import_tf(FIXTURES / "loops_v1.pb", fetches=V1_FETCHES)
    ops = _ops(graph)
    assert ops.count("loop") == 2 and ops.count("if") == 2   # nested in the outer loop
    assert [n.op for n in graph.nodes].count("loop") == 1
    top, = [n for n in graph.nodes if n.op == "if"]   # the cond's two Merges: one if
    assert len(top.outputs) == 2
    results = interpret(graph, {"s": data["s"]})
    flowc.compile(FIXTURES / "loops_v1.pb", tmp_path / "art", fetches=V1_FETCHES)
    compiled = load(tmp_path / "art").run(data["s"])
    for name in V1_FETCHES:
        np.testing.assert_allclose(results[name], data[name], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(compiled[name], data[name], rtol=1e-5, atol=1e-6)


def test_lowered_functional_control_compiled(tmp_path):
    data = np.load(FIXTURES / "control.npz")
    keys = sorted(k for k in data if k != "s")
    fetches = ["Identity"] + [f"Identity_{i}" for i in range(1, len(keys))]
    graph = import_tf(FIXTURES / "control_v1.pb", fetches=fetches)
    assert [n.op for n in graph.nodes].count("loop") == 2
    flowc.compile(FIXTURES / "control_v1.pb", tmp_path / "art", fetches=fetches)
    compiled = load(tmp_path / "art").run(data["s"])
    for fetch, key in zip(fetches, keys, strict=True):
        np.testing.assert_allclose(compiled[fetch], data[key], rtol=1e-4, atol=1e-5,
                                   err_msg=key)


def _loop(path: Path, merge_inputs=("enter", "next"), cond_op="LoopCond",
          body_reads="body") -> Path:
    """x = s; while x < 3: x = x + 1, by hand as TF 1.x writes it, with one part to break."""
    g = GraphDef()
    s = g.node.add(name="s", op="Placeholder")
    s.attr["dtype"].type = 1
    s.attr["shape"].shape.SetInParent()
    for name, value in (("three", 3.0), ("one", 1.0)):
        c = g.node.add(name=name, op="Const")
        c.attr["dtype"].type = 1
        c.attr["value"].tensor.dtype = 1
        c.attr["value"].tensor.tensor_shape.SetInParent()
        c.attr["value"].tensor.float_val.append(value)
    for name, source, constant in (("enter", "s", False), ("limit", "three", True)):
        e = g.node.add(name=name, op="Enter", input=[source])
        e.attr["frame_name"].s = b"f"
        e.attr["is_constant"].b = constant
    g.node.add(name="merge", op="Merge", input=list(merge_inputs))
    g.node.add(name="less", op="Less", input=["merge", "limit"])
    g.node.add(name="cond", op=cond_op, input=["less"])
    g.node.add(name="switch", op="Switch", input=["merge", "cond"])
    g.node.add(name="exit", op="Exit", input=["switch"])
    g.node.add(name="body", op="Identity", input=["switch:1"])
    g.node.add(name="add", op="AddV2", input=[body_reads, "one"])
    g.node.add(name="next", op="NextIteration", input=["add"])
    path.write_bytes(g.SerializeToString())
    return path


def test_hand_made_loop(tmp_path):
    graph = import_tf(_loop(tmp_path / "loop.pb"), fetches=["exit"])
    assert interpret(graph, {"s": np.float32(0.5)})["exit"] == np.float32(3.5)


@pytest.mark.parametrize("broken, message", [
    ({"merge_inputs": ("enter", "enter")}, r"node 'merge' \(Merge\): the Merge of while "
     r"frame 'f' needs an Enter and a NextIteration input"),
    ({"cond_op": "Identity"}, r"node 'switch' \(Switch\): the Switch of while frame 'f' "
     r"reads 'cond' \(Identity\), not a LoopCond"),
    ({"body_reads": "merge"}, r"node 'merge' \(Merge\): while frame 'f' reads it without an "
     r"Enter"),
])
def test_malformed_frames(tmp_path, broken, message):
    path = _loop(tmp_path / "bad.pb", **broken)
    with pytest.raises(TfImportError, match=r"bad\.pb: " + message) as info:
        import_tf(path, fetches=["exit"])
    assert "\n" not in str(info.value)


def _cond(path: Path, second: str) -> Path:
    """Merge(Switch(s, p):0, SECOND): a cond whose second input is `second`."""
    g = GraphDef()
    for name, dtype in (("s", 1), ("p", 10)):
        node = g.node.add(name=name, op="Placeholder")
        node.attr["dtype"].type = dtype
        node.attr["shape"].shape.SetInParent()
    g.node.add(name="sw", op="Switch", input=["s", "p"])
    g.node.add(name="neg", op="Neg", input=["s"])
    g.node.add(name="leave", op="Exit", input=["sw:1"])
    g.node.add(name="m", op="Merge", input=["sw", second])
    path.write_bytes(g.SerializeToString())
    return path


@pytest.mark.parametrize("second, message", [
    ("neg", None),
    ("leave", r"node 'm' \(Merge\): a branch reads 'leave' \(Exit\): flowc does not recover "
     "a while loop inside a v1 cond"),
])
def test_hand_made_cond(tmp_path, second, message):
    path = _cond(tmp_path / "c.pb", second)
    if message is None:   # then: -s, read without a Switch (passed in); else: s
        graph = import_tf(path, fetches=["m"])
        for p in (True, False):
            got = interpret(graph, {"s": np.float32(2.0), "p": np.bool_(p)})["m"]
            assert got == (np.float32(-2.0) if p else np.float32(2.0))
        return
    with pytest.raises(TfImportError, match=r"c\.pb: " + message):
        import_tf(path, fetches=["m"])


def test_cond_merge_without_switch(tmp_path):
    g = GraphDef()
    c = g.node.add(name="c", op="Const")
    c.attr["dtype"].type = 1
    c.attr["value"].tensor.dtype = 1
    c.attr["value"].tensor.float_val.append(1.0)
    g.node.add(name="m", op="Merge", input=["c", "c"])
    (tmp_path / "m.pb").write_bytes(g.SerializeToString())
    with pytest.raises(TfImportError, match=r"m\.pb: node 'm' \(Merge\): its inputs lead "
                       "back to no Switch"):
        import_tf(tmp_path / "m.pb", fetches=["m"])
