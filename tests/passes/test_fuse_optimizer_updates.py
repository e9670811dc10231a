"""The optimizers' updates (flowc/frontend/train.py) are elementwise chains that the
default pipeline fuses: after it, every parameter-sized computation of an update is one
kernel per value that is assigned or used twice (a fused op has one result, and `fuse` does
not duplicate a shared value into its users): SGD is one kernel, Adam three (m, v, the
parameter), amsgrad adds a `max` for v_max."""

import numpy as np
import pytest

from flowc.frontend import Graph, Variable, placeholder, train
from flowc.ir.ops import ELEMENTWISE, OPS
from flowc.passes.manager import PassManager
from flowc.passes.pipeline import parse_pipeline

SHAPE = (64, 32)


@pytest.mark.parametrize(("name", "options", "assigned", "kernels"), [
    ("SGD", {}, 1, 1),
    ("SGD", {"momentum": 0.9}, 2, 2),
    ("SGD", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1}, 2, 3),  # g + wd * p
    ("Adam", {}, 3, 3), ("AdamW", {"amsgrad": True}, 4, 4),
    ("RMSProp", {"centered": True}, 3, 3), ("Adagrad", {"lr_decay": 0.1}, 2, 2),
])
def test_each_assigned_or_shared_value_is_one_kernel(name, options, assigned, kernels):
    with Graph("g") as g:
        w = Variable(np.ones(SHAPE, np.float32), name="w")
        grad = placeholder("f32", SHAPE, name="dw")
        getattr(train, name)(lr=0.01, **options).apply_gradients([(grad, w)])
    out = PassManager(parse_pipeline("default")).run(g.ir)
    big = [n for n in out.nodes if n.types and getattr(n.types[0], "shape", None) == SHAPE
           and n.op not in ("read_variable", "constant", "input")]
    assigns = [n for n in out.nodes if n.op == "assign" and n.inputs[1].type.shape == SHAPE]
    assert len(assigns) == assigned
    assert all(n.op == "fused" or OPS[n.op].has(ELEMENTWISE) for n in big)
    assert len(big) == kernels
