"""Variables in compiled artifacts: the interpreter (ir/interpret.py, one `State` across
runs) and the artifact agree run after run on graphs built with the TF-style API; the plan
reads variables as views or copies and writes them in place as plan/state.py says."""

from __future__ import annotations

import numpy as np
import pytest
from artifact_util import compile_naive

import flowc
from flowc.codegen.plan.program import Storage, build_program
from flowc.frontend.api import (
    Graph,
    Variable,
    control_dependencies,
    device,
    op,
    placeholder,
)
from flowc.ir.errors import FlowcError
from flowc.ir.interpret import State, interpret

UPDATES = ("assign", "assign_add", "assign_sub")


def run_both(graph, tmp_path, feeds_of, runs=4):
    """Run the graph `runs` times in the interpreter and in its artifact (naive kernels);
    the outputs and every variable must agree after each run. Returns the model."""
    fetches = [name for name, _ in graph.outputs] + [n.name for n in graph.nodes
                                                     if n.op in UPDATES]
    compile_naive(graph, tmp_path / "art")
    model = flowc.runtime.load(tmp_path / "art")
    state = State()
    for i in range(runs):
        feeds = feeds_of(i)
        want = interpret(graph, feeds, fetches, state=state)
        got = model.run(**feeds)
        for name, _ in graph.outputs:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=f"run {i}")
        variables = model.variables()
        assert variables.keys() == state.variables.keys()
        for name, value in state.variables.items():
            np.testing.assert_allclose(variables[name], value, rtol=1e-6,
                                       err_msg=f"variable {name}, run {i}")
    return model


def state_copies(graph) -> list[str]:
    """The program's variable copy steps, as 'read NODE' / 'assign NODE'."""
    program = build_program(graph, "m")
    return [f"{'read' if c.state.op == 'read_variable' else 'assign'} {c.state.name}"
            for c in program.calls if c.state is not None]


def no_feeds(_):
    return {}


def test_counter_without_outputs(tmp_path):
    with Graph("counter") as g:
        c = Variable(np.float32(0), name="count")
        c.assign_add(1.0)
    model = run_both(g.ir, tmp_path, no_feeds, runs=3)
    assert model.variables()["count"] == 3
    assert state_copies(g.ir) == []  # count += 1 in place, no copy


def test_optimizer_update_writes_in_place(tmp_path):
    with Graph("sgd") as g:
        x = placeholder("f32", (5,), name="x")
        w = Variable(np.linspace(-1, 1, 5, dtype=np.float32), name="w")
        step = w.assign(w.read() - 0.1 * x)
        with control_dependencies([step]):
            g.output("w_after", w.read() * 1.0)
    run_both(g.ir, tmp_path, lambda i: {"x": np.full(5, i + 1, np.float32)})
    assert state_copies(g.ir) == []  # w is read in place and written by the sub kernel
    program = build_program(g.ir, "m")
    sub = next(c for c in program.calls if "Sub" in c.nodes)
    assert program.where(sub.results[0]) == Storage("variable", 0)
    assert "Assign" in sub.nodes
    assert not any(where.kind == "variable" for v, where in program.storage.items()
                   if v in program.memory.offsets)  # the arena plan never holds a variable


def test_assign_add_chains(tmp_path):
    with Graph("chain") as g:
        x = placeholder("f32", (3,), name="x")
        v = Variable(np.ones(3, np.float32), name="v")
        a1 = v.assign_add(x)
        with control_dependencies([a1]):
            a2 = v.assign_add(x * 2.0)
        with control_dependencies([a2]):
            a3 = v.assign_sub(x * 0.5)
        with control_dependencies([a3]):
            g.output("v", v.read() + 0.0)
    run_both(g.ir, tmp_path, lambda i: {"x": np.arange(3, dtype=np.float32) + i})


def test_read_before_assign_consumed_after_it_is_a_copy(tmp_path):
    """A read whose consumer runs after the next assign keeps the old value (a copy); a
    read ordered after the assign sees the new one (a view)."""
    with Graph("order") as g:
        x = placeholder("f32", (4,), name="x")
        v = Variable(np.zeros(4, np.float32), name="v")
        before = v.read()
        with control_dependencies([before]):
            put = v.assign(x)
        with control_dependencies([put]):
            after = v.read()
        g.output("before", before * 2.0)  # built after the assign: runs after it
        g.output("after", after * 2.0)
        g.output("before_itself", before)  # an output: copied at the end of the run
    run_both(g.ir, tmp_path, lambda i: {"x": np.full(4, i + 1.0, np.float32)})
    assert state_copies(g.ir) == ["read Read", "assign Assign"]
    program = build_program(g.ir, "m")
    assert program.where(program.calls[0].results[0]) == Storage("output", 2)


def test_read_consumed_before_assign_is_a_view(tmp_path):
    with Graph("view") as g:
        x = placeholder("f32", (4,), name="x")
        v = Variable(np.ones(4, np.float32), name="v")
        before = v.read() * 3.0
        with control_dependencies([before]):
            put = v.assign(x)
        with control_dependencies([put]):
            g.output("sum", before + v.read())
    run_both(g.ir, tmp_path, lambda i: {"x": np.full(4, i + 2.0, np.float32)})
    assert state_copies(g.ir) == ["assign Assign"]  # both reads are views


def test_read_between_kernel_and_assign_blocks_the_in_place_write(tmp_path):
    with Graph("between") as g:
        x = placeholder("f32", (4,), name="x")
        v = Variable(np.ones(4, np.float32), name="v")
        new = v.read() + x
        with control_dependencies([new]):
            seen = v.read()
            seen_out = seen * 1.0
        with control_dependencies([seen_out]):
            v.assign(new)
        g.output("seen", seen_out)
    run_both(g.ir, tmp_path, lambda i: {"x": np.full(4, i + 1.0, np.float32)})
    assert "assign Assign" in state_copies(g.ir)  # the add may not write v early


def test_two_variables_swapped_through_reads(tmp_path):
    with Graph("swap") as g:
        a = Variable(np.arange(3, dtype=np.float32), name="a")
        b = Variable(np.arange(3, dtype=np.float32) + 10, name="b")
        ra, rb = a.read(), b.read()
        with control_dependencies([ra, rb]):
            put_a = a.assign(rb)
        with control_dependencies([put_a]):
            put_b = b.assign(ra)
        with control_dependencies([put_b]):
            g.output("a", a.read() - b.read())
    model = run_both(g.ir, tmp_path, no_feeds, runs=3)
    np.testing.assert_array_equal(model.variables()["a"], np.arange(3) + 10)
    # the read of a is still needed after a is assigned: a copy; b's is a view
    assert state_copies(g.ir) == ["read Read", "assign Assign", "assign Assign_1"]


def test_variables_on_gpu_are_refused(tmp_path):
    with Graph("gpu_state") as g:
        x = placeholder("f32", (4,), name="x")
        v = Variable(np.zeros(4, np.float32), name="v")
        g.output("y", v.read() + x)
    with pytest.raises(FlowcError, match=r"node 'v' .*: variables on gpu:0 are not "
                                         r"supported yet"):
        flowc.compile(g.ir, tmp_path / "art", target="nvptx")
    assert not (tmp_path / "art").exists()


def test_duplicate_variable_names_are_refused(tmp_path):
    with Graph("dup") as g:
        v = Variable(np.zeros(2, np.float32), name="v")
        v.assign_add(np.ones(2, np.float32))
    g.ir.nodes.append(g.ir.nodes[0].replace(name="v_again"))
    with pytest.raises(FlowcError, match="a second variable named 'v'"):
        build_program(g.ir, "m")


def test_kernel_that_cannot_overwrite_its_operand_reads_a_copy(tmp_path):
    """w <- w @ m: a matmul may not write over its own operand, so the read of w is a copy
    while the matmul still writes w in place."""
    rng = np.random.default_rng(0)
    with Graph("rotate") as g:
        w = Variable(rng.standard_normal((3, 3)).astype(np.float32), name="w")
        m = Variable(rng.standard_normal((3, 3)).astype(np.float32) / 2, name="m")
        step = w.assign(w.read() @ m.read())
        with control_dependencies([step]):
            g.output("w", w.read() + 0.0)
    run_both(g.ir, tmp_path, no_feeds, runs=3)
    assert state_copies(g.ir) == ["read Read"]


def test_cpu_backend_runs_state(tmp_path):
    """The real CPU kernels (MLIR): an i32 counter and a fused update `w <- w - lr * x`
    writing w in place; interpreter and artifact agree run after run."""
    with Graph("train") as g:
        x = placeholder("f32", (8, 4), name="x")
        w = Variable(np.ones((8, 4), np.float32), name="w")
        n = Variable(np.int32(0), name="n")
        update = w.assign(w.read() - 0.25 * x)
        tick = n.assign_add(np.int32(1))
        with control_dependencies([update, tick]):
            g.output("norm", op("reduce_sum", w.read() * w.read(), axes=[0, 1],
                                keepdims=False))
    fetches = ["norm", "Assign", "AssignAdd"]
    flowc.compile(g.ir, tmp_path / "art")
    state = State()
    with flowc.runtime.load(tmp_path / "art") as model:
        for i in range(3):
            feeds = {"x": np.full((8, 4), 0.5 * i, np.float32)}
            want = interpret(g.ir, feeds, fetches, state=state)
            np.testing.assert_allclose(model.run(**feeds)["norm"], want["norm"], rtol=1e-5)
        assert model.variables()["n"].dtype == np.int32 and model.variables()["n"] == 3
        np.testing.assert_allclose(model.variables()["w"], state.variables["w"], rtol=1e-6)


def placed_graph(var_device: str, read_device: str):
    with Graph("parts") as g:
        x = placeholder("f32", (4,), name="x")
        with device("cpu:0"):
            y = x * 2.0
        with device(var_device):
            v = Variable(np.zeros(4, np.float32), name="v")
        with device(read_device):
            z = v.read() + y
        with device("cpu:0"):
            g.output("z", z * 1.0)
    return g.ir


@pytest.mark.parametrize(("var_device", "read_device", "message"), [
    ("gpu:0", "gpu:0", r"node 'v' \(variable\) at .*: variables on gpu:0 are not supported yet"),
    ("cpu:1", "cpu:1", r"node 'v' \(variable\) at .*: variables in a graph split over devices "
                       "are not supported yet"),
    ("cpu:1", "cpu:0", r"node 'v' \(variable\) at .*: the variable lives on cpu:1 but a node on "
                       "cpu:0 uses it; read or assign a variable on its own device"),
])
def test_placed_variables_are_refused(tmp_path, var_device, read_device, message):
    with pytest.raises(FlowcError, match=message):
        compile_naive(placed_graph(var_device, read_device), tmp_path / "art")
