"""TF's training ops as updates of flowc variables: ApplyGradientDescent, ApplyMomentum,
ApplyKerasMomentum, ApplyAdam and their Resource* forms, each computed as TF's CPU kernels
compute it (tensorflow/core/kernels/training_ops.cc) from `read_variable`s of its
variables and written back with `assign`s.

Contract: `APPLY[op]` is the number of leading operands that are variables (the ones the
op updates; the importer makes them flowc variables). `apply(emit, constant, op, reads,
operands, nesterov)` gets the variables' current values (`reads`, in operand order), the
other operands (`operands`: lr, grad, ... in TF's operand order) and returns the new
values of the variables, in the same order; `emit(op, operands)` emits one registry op and
returns its result, `constant(x)` a scalar of the variables' dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flowc.ir import Value

APPLY = {"ApplyGradientDescent": 1, "ApplyMomentum": 2, "ApplyKerasMomentum": 2,
         "ApplyAdam": 3}
APPLY.update({f"Resource{op}": n for op, n in list(APPLY.items())})

Emit = Callable[[str, Sequence[Value]], Value]


def apply(emit: Emit, constant: Callable[[float], Value], op: str, reads: list[Value],
          operands: list[Value], nesterov: bool) -> list[Value]:
    kind = op.removeprefix("Resource")
    if kind == "ApplyGradientDescent":
        var, = reads
        alpha, delta = operands[:2]
        return [emit("sub", [var, emit("mul", [alpha, delta])])]
    if kind == "ApplyMomentum":   # accum = accum*momentum + grad; var -= lr*accum
        var, accum = reads
        lr, grad, momentum = operands[:3]
        accum = emit("add", [emit("mul", [accum, momentum]), grad])
        step = emit("mul", [lr, accum]) if not nesterov else emit("add", [
            emit("mul", [grad, lr]), emit("mul", [emit("mul", [accum, momentum]), lr])])
        return [emit("sub", [var, step]), accum]
    if kind == "ApplyKerasMomentum":   # accum = accum*momentum - lr*grad; var += accum
        var, accum = reads
        lr, grad, momentum = operands[:3]
        scaled = emit("mul", [lr, grad])
        accum = emit("sub", [emit("mul", [accum, momentum]), scaled])
        step = accum if not nesterov else emit("sub", [emit("mul", [momentum, accum]), scaled])
        return [emit("add", [var, step]), accum]
    # ApplyAdam: alpha = lr*sqrt(1 - beta2^t)/(1 - beta1^t); m += (g - m)(1 - beta1);
    # v += (g^2 - v)(1 - beta2); var -= alpha*m/(sqrt(v) + epsilon)
    var, m, v = reads
    beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad = operands[:7]
    one = constant(1.0)
    alpha = emit("div", [emit("mul", [lr, emit("sqrt", [emit("sub", [one, beta2_power])])]),
                         emit("sub", [one, beta1_power])])
    m = emit("add", [m, emit("mul", [emit("sub", [grad, m]), emit("sub", [one, beta1])])])
    v = emit("add", [v, emit("mul", [emit("sub", [emit("mul", [grad, grad]), v]),
                                     emit("sub", [one, beta2])])])
    top = m if not nesterov else emit("add", [
        emit("mul", [grad, emit("sub", [one, beta1])]), emit("mul", [beta1, m])])
    step = emit("div", [emit("mul", [top, alpha]),
                        emit("add", [emit("sqrt", [v]), epsilon])])
    return [emit("sub", [var, step]), m, v]
