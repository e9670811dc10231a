"""The optimizers' updates (flowc/frontend/train.py) are elementwise chains that the
default pipeline fuses into one kernel per parameter: the `fused` node's results are the new
parameter, then the new slots (momentum, m, v, ...), each assigned right after it, so that
codegen writes all of them in place in one sweep. An assign that cannot move after the
kernel (its variable is read in between) keeps its value a kernel of its own."""

import numpy as np
import pytest

from flowc.frontend import Graph, Variable, api, placeholder, train
from flowc.ir.ops import ELEMENTWISE, OPS
from flowc.passes.fuse import Fuse
from flowc.passes.manager import PassManager
from flowc.passes.pipeline import parse_pipeline

SHAPE = (64, 32)


def big_nodes(graph):
    return [n for n in graph.nodes if n.types and getattr(n.types[0], "shape", None) == SHAPE
            and n.op not in ("read_variable", "constant", "input")]


@pytest.mark.parametrize(("name", "options", "assigned"), [
    ("SGD", {}, 1),
    ("SGD", {"momentum": 0.9}, 2),
    ("SGD", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1}, 2),
    ("Adam", {}, 3), ("AdamW", {"amsgrad": True}, 4),
    ("RMSProp", {"centered": True}, 3), ("Adagrad", {"lr_decay": 0.1}, 2),
])
def test_a_parameter_and_its_slots_are_one_kernel(name, options, assigned):
    with Graph("g") as g:
        w = Variable(np.ones(SHAPE, np.float32), name="w")
        grad = placeholder("f32", SHAPE, name="dw")
        getattr(train, name)(lr=0.01, **options).apply_gradients([(grad, w)])
    out = PassManager(parse_pipeline("default")).run(g.ir)
    big = big_nodes(out)
    assigns = [n for n in out.nodes if n.op == "assign" and n.inputs[1].type.shape == SHAPE]
    assert len(assigns) == assigned
    assert [n.op for n in big] == ["fused"]
    assert all(OPS[n.op].has(ELEMENTWISE) for n in big[0].attrs["body"].nodes
               if n.op != "constant")
    kernel = big[0]
    assert len(kernel.types) == assigned
    assert {a.inputs[1] for a in assigns} == set(kernel.outputs)
    # every assign of the kernel's results comes right after it, in graph order
    at = out.nodes.index(kernel)
    assert set(out.nodes[at + 1:at + 1 + assigned]) == set(assigns)


def test_an_assign_that_cannot_move_keeps_its_value_a_kernel_of_its_own():
    """The slot is read between its assign and the parameter's update: moving the assign
    after the update would change what that read sees, so `fuse` leaves it."""
    with Graph("g") as g:
        w = Variable(np.ones(SHAPE, np.float32), name="w")
        m = Variable(np.zeros(SHAPE, np.float32), name="m")
        grad = placeholder("f32", SHAPE, name="dw")
        new_m = m.read() * 0.9 + grad
        assign = m.assign(new_m)
        with api.control_dependencies([assign]):
            seen = m.read()
        w.assign(w.read() - 0.01 * new_m)
        g.output("seen", seen * 2.0)
    out = Fuse().run(g.ir)
    kernels = [n for n in out.nodes if n.op == "fused"]
    assert all(len(k.types) == 1 for k in kernels)
    assert len([k for k in kernels if k.types[0].shape == SHAPE]) >= 2
