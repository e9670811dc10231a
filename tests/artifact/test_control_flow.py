"""Control flow in artifacts (issue [11]): `if` and `loop` nodes compiled and run against
onnxruntime; a small body becomes one scf kernel (plan/control.py `one_kernel`); bad
control flow is refused with a one-line error naming the node."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from control_models import if_model, loop_model

import flowc
from flowc.codegen.plan.control import one_kernel
from flowc.frontend.onnx import import_onnx
from flowc.ir import FlowcError, Graph, TensorType
from flowc.ir.build import make_node
from flowc.testing.tolerance import assert_close


def run_both(model, out, feeds: dict) -> None:
    """The artifact at `out` against onnxruntime on `feeds`."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    with flowc.load(out) as m:
        got = m.run(**feeds)
    for (name, y), w in zip(got.items(), want, strict=True):
        assert_close(y, w, "composite", scale=float(np.abs(w).max()), err_msg=name)


def x_feed() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)


def control_nodes(model):
    return [n for n in import_onnx(model).nodes if n.op in ("if", "loop")]


def test_small_if_is_one_kernel_and_runs_both_branches(tmp_path):
    model = if_model(heavy=False)
    (node,) = control_nodes(model)
    assert one_kernel(node)
    flowc.compile(model, tmp_path / "m", name="m")
    for c in (True, False):
        run_both(model, tmp_path / "m", {"c": np.array(c), "x": x_feed()})


def test_small_loop_with_scan_output_is_one_kernel(tmp_path):
    model = loop_model(heavy=False)
    (node,) = control_nodes(model)
    assert one_kernel(node)
    flowc.compile(model, tmp_path / "m", name="m")
    run_both(model, tmp_path / "m", {"h0": x_feed()[:1]})


@pytest.mark.parametrize("cond", [TensorType("f32", ()), TensorType("bool", (2,))])
def test_predicate_not_a_scalar_bool(cond):
    g = Graph("g")
    c = g.add_input("c", cond)
    x = g.add_input("x", TensorType("f32", (3,)))
    branch = Graph("b")
    branch.add_output("r", branch.add_input("x", TensorType("f32", (3,))))
    with pytest.raises(FlowcError, match=re.escape(
            f"'pick' (if): the condition must be a single bool, found {cond}")):
        g.append(make_node("if", [c, x], {"then_branch": branch, "else_branch": branch},
                           name="pick"))


def test_carried_shape_changing_is_a_compile_error(tmp_path):
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2,)))
    body = Graph("grow")
    body.add_input("i", TensorType("i64", ()))
    cond = body.add_input("cond", TensorType("bool", ()))
    v = body.add_input("v", TensorType("f32", (2,)))
    body.add_output("cond", cond)
    body.add_output("v", body.append(make_node("concat", [v, v], {"axis": 0})).out())
    from flowc.ir import Tensor

    m = g.append(make_node("constant", [], {"value": Tensor(np.array(3, np.int64))})).out()
    loop = g.append(make_node("loop", [m, None, x], {"body": body}, name="grow_loop"))
    g.add_output("y", loop.out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'grow_loop' (loop): carried value #0 enters as f32[2] and its body @grow "
            "returns f32[4]; a compiled loop keeps each carried value's shape")):
        flowc.compile(g, tmp_path / "m", name="m")
