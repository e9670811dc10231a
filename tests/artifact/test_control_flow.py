"""Control flow in artifacts (issue [11]): `if` and `loop` nodes compiled and run against
onnxruntime; a small body becomes one scf kernel (plan/control.py `one_kernel`), a large
one control steps of the entry (plan/control_steps.py, emit/control_c.py): branches and
iterations of kernel calls, trip count read at run time, scan rows, carried values swapped
through temporaries, nested if in loop (a torch-scripted loop), `torch.cond` and torch's
`while_loop` (the dynamo exporter's If and Loop), kernels profiled per iteration, bodies in
the memory report, a split in a branch as views of its operand; bad control flow is
refused with a one-line error naming the node."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from control_models import (
    if_model,
    loop_model,
    nested_loop_model,
    scripted_loop,
    torch_cond,
    torch_while,
    while_model,
)
from onnx import TensorProto, helper, numpy_helper

import flowc
from flowc.codegen.plan.control import one_kernel
from flowc.frontend.onnx import import_onnx
from flowc.ir import FlowcError, Graph, TensorType
from flowc.ir.build import make_node
from flowc.testing.tolerance import assert_close


def run_both(model, out, *feeds: dict) -> None:
    """The artifact at `out` against onnxruntime on each of `feeds`, at 1 and 2 threads."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for threads in (1, 2):
        with flowc.load(out, threads=threads) as m:
            for feed in feeds:
                want = session.run(None, feed)
                got = m.run(**feed)
                for (name, y), w in zip(got.items(), want, strict=True):
                    assert_close(y, w, "composite", scale=max(1.0, float(np.abs(w).max())),
                                 err_msg=f"{name} at {threads} threads, {feed}")


def x_feed() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)


def control_nodes(model):
    return [n for n in import_onnx(model).nodes if n.op in ("if", "loop")]


def test_small_if_is_one_kernel_and_runs_both_branches(tmp_path):
    model = if_model(heavy=False)
    (node,) = control_nodes(model)
    assert one_kernel(node)
    flowc.compile(model, tmp_path / "m", name="m")
    run_both(model, tmp_path / "m", *({"c": np.array(c), "x": x_feed()} for c in (True, False)))


def test_small_loop_with_scan_output_is_one_kernel(tmp_path):
    model = loop_model(heavy=False)
    (node,) = control_nodes(model)
    assert one_kernel(node)
    flowc.compile(model, tmp_path / "m", name="m")
    run_both(model, tmp_path / "m", {"h0": x_feed()[:1]})


def test_if_with_matmul_branches_runs_as_steps(tmp_path):
    model = if_model(heavy=True)
    (node,) = control_nodes(model)
    assert not one_kernel(node)
    flowc.compile(model, tmp_path / "m", name="m", dump_dir=tmp_path / "dump")
    run_both(model, tmp_path / "m", *({"c": np.array(c), "x": x_feed()} for c in (True, False)))
    entry = (tmp_path / "dump" / "m_model.c").read_text()
    assert "if (*(const int8_t *)(in[0])) {" in entry and "} else {" in entry
    assert "memcpy" not in entry  # each branch's last kernel writes the result buffer


def test_loop_with_matmuls_and_a_scan_output_runs_as_steps(tmp_path):
    model = loop_model(heavy=True)
    (node,) = control_nodes(model)
    assert not one_kernel(node)
    explained = []
    flowc.compile(model, tmp_path / "m", name="m", dump_dir=tmp_path / "dump",
                  explain_memory=explained.append)
    run_both(model, tmp_path / "m", {"h0": x_feed()[:1]})
    entry = (tmp_path / "dump" / "m_model.c").read_text()
    assert "for (int64_t it1 = 0; it1 < trips1 && go1; ++it1) {" in entry
    assert "malloc" not in entry
    assert entry.count("memcpy(out[0], ") == 1  # the initial value: then updated in place
    memory = (tmp_path / "dump" / "memory.txt").read_text()
    assert re.search(r"control step Loop_0: its bodies' region, \d+ bytes at offset \d+\n"
                     r"  body @body: 2 steps \(m_k\d, m_k\d\), \d+ bytes planned",
                     memory), memory
    assert explained == [memory]


def test_trip_count_read_at_run_time(tmp_path):
    model = loop_model(heavy=True, trips=None, scan=False)
    flowc.compile(model, tmp_path / "m", name="m")
    run_both(model, tmp_path / "m",
             *({"h0": x_feed()[:1], "M": np.array(m, np.int64)} for m in (0, 1, 4, -2)))


def test_while_loop_without_a_trip_count(tmp_path):
    model = while_model()
    flowc.compile(model, tmp_path / "m", name="m")
    h0 = x_feed()[:1]
    run_both(model, tmp_path / "m", *({"h0": h0, "c0": np.array(c), "limit": np.array(t)}
                                      for c, t in ((True, 4), (True, -3), (False, 4))))


def test_carried_value_updated_in_place_by_a_kernel_reading_it(tmp_path):
    model = loop_model(heavy=True, residual=True)
    # without fuse: fused into the body's matmul epilogue, the residual add would run in a
    # kernel that may not write over its operands (memplan.in_place_inputs)
    flowc.compile(model, tmp_path / "m", name="m", dump_dir=tmp_path / "dump",
                  pipeline="cse,constant-fold,simplify,prune,schedule")
    run_both(model, tmp_path / "m", {"h0": x_feed()[:1]})
    entry = (tmp_path / "dump" / "m_model.c").read_text()
    assert re.search(r"m_k\d\(arena \+ \d+, out\[0\], out\[0\]\);", entry), entry


def test_carried_values_trading_places(tmp_path):
    model = loop_model(heavy=True, swap=True)
    flowc.compile(model, tmp_path / "m", name="m")
    run_both(model, tmp_path / "m", {"h0": x_feed()[:1], "g0": x_feed()[1:2]})


def test_torch_scripted_loop_with_an_if_inside(tmp_path):
    pytest.importorskip("torch")  # the [reference] extra
    model = scripted_loop()
    assert [n.op_type for n in model.graph.node] == ["Constant", "Loop"]
    flowc.compile(model, tmp_path / "m", name="m", dump_dir=tmp_path / "dump")
    x = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)
    run_both(model, tmp_path / "m", *({"x": x, "steps": np.array(k, np.int64)}
                                      for k in (0, 1, 3, 6)))
    entry = (tmp_path / "dump" / "m_model.c").read_text()
    assert "const int64_t trips1 = *(const int64_t *)(in[1]);" in entry
    assert "      if (*(const int8_t *)(" in entry  # the If inside the loop's body


def test_torch_cond_exported_by_dynamo(tmp_path):
    pytest.importorskip("onnxscript")
    model = torch_cond()
    assert [n.op_type for n in model.graph.node][-1] == "If"
    flowc.compile(model, tmp_path / "m", name="m")
    x = np.abs(x_feed()[:2])
    run_both(model, tmp_path / "m", {"x": x}, {"x": -x}, {"x": x * np.float32(0.1) - 0.01})


def test_torch_while_loop_exported_by_dynamo(tmp_path):
    pytest.importorskip("onnxscript")
    model = torch_while()
    assert [n.op_type for n in model.graph.node][-1] == "Loop"
    flowc.compile(model, tmp_path / "m", name="m")
    x = x_feed()[:2]
    run_both(model, tmp_path / "m", *({"x": x, "n": np.array(n, np.int64)} for n in (0, 1, 5)))


def test_loop_nested_in_a_loop(tmp_path):
    model = nested_loop_model()
    flowc.compile(model, tmp_path / "m", name="m", dump_dir=tmp_path / "dump")
    run_both(model, tmp_path / "m", {"h0": x_feed()[:1]})
    entry = (tmp_path / "dump" / "m_model.c").read_text()
    assert "for (int64_t it1 = 0;" in entry and "for (int64_t it3 = 0;" in entry


@pytest.mark.parametrize("name", ["test_if", "test_scan9_sum", "test_scan9_multi_state",
                                  "test_scan9_scalar"])
def test_onnx_node_tests_as_control_steps(name, monkeypatch):
    """The ONNX node tests of If and Scan with every body forced into control steps (they
    are small: compiled, they are one kernel each, tests/frontend/test_onnx_backend.py)."""
    from onnx.backend.test.loader import load_model_tests

    from flowc.codegen.plan import control
    from flowc.onnx_backend import FlowcBackend

    monkeypatch.setattr(control, "SMALL_BODY_NODES", -1)
    (case,) = [c for c in load_model_tests(kind="node") if c.name == name]
    nodes = control_nodes(case.model)
    assert nodes and not any(control.one_kernel(n) for n in nodes)
    inputs, outputs = case.data_sets[0]
    got = FlowcBackend.prepare(case.model, "CPU").run(list(inputs))
    for g, w in zip(got, outputs, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_profile_counts_a_loops_kernels_per_iteration(tmp_path):
    model = loop_model(heavy=True, trips=None, scan=False)
    flowc.compile(model, tmp_path / "m", name="m", profile=True)
    with flowc.load(tmp_path / "m") as m:
        for trips in (2, 5):
            m.run(h0=x_feed()[:1], M=np.array(trips, np.int64))
            # two kernels per iteration: matmul + tanh, matmul + add (fused in the body)
            assert len(m.profiler.last) == 2 * trips


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
            "returns f32[4]; a compiled loop keeps each carried value's static shape")):
        flowc.compile(g, tmp_path / "m", name="m")


REFUSED = ("node 'If_0' (if) at <model>: its bodies, too large for one kernel, run as steps "
           "of the entry, which a graph split over devices or a GPU device does not support "
           "yet")


def test_control_steps_in_a_graph_split_over_devices_are_refused(tmp_path):
    g = import_onnx(if_model(heavy=True))
    post = g.append(make_node("relu", [g.outputs[0][1]], name="post"))
    g.outputs = [("y", post.out())]
    with pytest.raises(FlowcError, match=re.escape(REFUSED)):
        flowc.compile(g, tmp_path / "m", name="m", devices="cpu:0,cpu:1",
                      place=["If_0=cpu:1", "post=cpu:0"])


def test_control_steps_on_a_gpu_target_are_refused(tmp_path):
    with pytest.raises(FlowcError, match=re.escape(REFUSED)):
        flowc.compile(if_model(heavy=True), tmp_path / "m", name="m", target="nvptx")


def test_split_in_a_branch_is_views_of_its_operand(tmp_path):
    # then: t = x @ w, its two row halves (contiguous: split on axis 0) each times w, again
    # concatenated; the halves are the bytes of t at offsets 0 and 64 (no split kernel)
    then_nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]),
                  helper.make_node("Split", ["t"], ["a", "b"], axis=0, num_outputs=2),
                  helper.make_node("MatMul", ["a", "w"], ["a2"]),
                  helper.make_node("MatMul", ["b", "w"], ["b2"]),
                  helper.make_node("Concat", ["b2", "a2"], ["t_out"], axis=0)]
    else_nodes = [helper.make_node("MatMul", ["x", "w"], ["e0"]),
                  helper.make_node("MatMul", ["e0", "w"], ["e_out"])]
    branch = [helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(
        out, TensorProto.FLOAT, [4, 8])]) for name, nodes, out in (
            ("then", then_nodes, "t_out"), ("else", else_nodes, "e_out"))]
    w = (np.random.default_rng(3).standard_normal((8, 8)) * 0.3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch[0], else_branch=branch[1])],
        "split_if", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                     helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (node,) = control_nodes(model)
    assert not one_kernel(node)
    flowc.compile(model, tmp_path / "m", name="m", dump_dir=tmp_path / "dump")
    run_both(model, tmp_path / "m", *({"c": np.array(c), "x": x_feed()} for c in (True, False)))
    entry = (tmp_path / "dump" / "m_model.c").read_text()
    then = entry[entry.index("if (*(const int8_t *)"):entry.index("} else {")]
    assert "split" not in then and re.search(r"\(char \*\)\(arena \+ \d+\) \+ 64\b", then), then
