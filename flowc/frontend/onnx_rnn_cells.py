"""One step of the ONNX recurrent cells, built as the body of a flowc `loop` (`onnx_rnn`).

A step reads `x`, row t of the input projection (X_t W^T; for LSTM and RNN with the biases
Wb + Rb already added: the projection's kernel starts from them), a GRU's biases (`b`:
Wb + Rb by gate, the candidate's Rb_h apart with linear_before_reset; added in the step,
where they join the kernels of the gates) and the carried state. With f, g, h the
direction's activations, (.) the elementwise product, clip(v) = min(max(v, -clip), clip)
when `clip` is set, and R^T's gate blocks as ONNX orders them (LSTM i, o, f, c; GRU z, r,
h), the formulas are onnxruntime's:

- RNN:  H = f(clip(x + H_prev R^T + b))
- GRU:  z = f(clip(x_z + H_prev R_z^T + b_z)), r = f(clip(x_r + H_prev R_r^T + b_r));
        n = g(clip(x_h + (r (.) H_prev) R_h^T + b_h))       (linear_before_reset = 0)
        n = g(clip(x_h + b_h + r (.) (H_prev R_h^T + Rb_h))) (linear_before_reset = 1);
        H = (1 - z) (.) n + z (.) H_prev, computed as n + z (.) (H_prev - n)
- LSTM: (x + H_prev R^T + b split in gate blocks as x_. + H_prev R_.^T)
        i = f(clip(x_i + H_prev R_i^T + P_i (.) C_prev)),
        f_t = 1 - i with input_forget, else f(clip(x_f + H_prev R_f^T + P_f (.) C_prev));
        C = f_t (.) C_prev + i (.) g(clip(x_c + H_prev R_c^T));
        o = f(clip(x_o + H_prev R_o^T + P_o (.) C)), H = o (.) h(C)

The recurrent weights enter the body transposed and split as the step uses them (`Cell.
weights`, computed once before the loop), so a step holds one or two small matmuls and
elementwise ops, nothing that depends only on the weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flowc.ir import Graph, Tensor, TensorType, Value
from flowc.ir.build import make_node
from flowc.ir.types import DType, bool_, i64

if TYPE_CHECKING:
    from flowc.frontend.onnx_rnn import _Emitter

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}

# lower-case name -> (takes alpha, takes beta, default alpha, default beta): onnxruntime's
# defaults, which differ from the ONNX ops' own for ThresholdedRelu (0, not 1), Affine and
# ScaledTanh (0, so that either without alpha is the zero function)
ACTIVATIONS: dict[str, tuple[bool, bool, float, float]] = {
    "relu": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0),
    "sigmoid": (False, False, 0.0, 0.0), "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0), "affine": (True, True, 0.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0), "thresholdedrelu": (True, False, 0.0, 0.0),
    "scaledtanh": (True, True, 0.0, 0.0), "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0),
}
_PLAIN = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "softsign": "softsign",
          "softplus": "softplus"}


@dataclass(frozen=True)
class Activation:
    name: str     # a key of ACTIVATIONS
    alpha: float
    beta: float


class StepBody:
    """A loop body under construction: inputs (iteration, cond, carried..., captured...),
    nodes named `<name>/<op>`."""

    def __init__(self, name: str, carried: Sequence[TensorType],
                 captured: Sequence[TensorType]):
        self.name = name
        self.graph = Graph(name.replace("/", "_"))
        self.names: set[str] = set()
        self.iteration = self.graph.add_input(self._unique("iteration"), TensorType(i64, ()))
        self.cond = self.graph.add_input(self._unique("cond"), TensorType(bool_, ()))
        self.carried = [self.graph.add_input(self._unique(f"state_{k}"), t)
                        for k, t in enumerate(carried)]
        self.captured = [self.graph.add_input(self._unique(f"capture_{k}"), t)
                         for k, t in enumerate(captured)]

    def _unique(self, base: str) -> str:
        candidate, k = base, 1
        while candidate in self.names:
            candidate, k = f"{base}_{k}", k + 1
        self.names.add(candidate)
        return candidate

    def ops(self, op: str, operands: Sequence[Value | None], **attrs: Any) -> list[Value]:
        node = make_node(op, list(operands), attrs, name=self._unique(f"{self.name}/{op}"))
        return list(self.graph.append(node).outputs)

    def op(self, op: str, operands: Sequence[Value | None], **attrs: Any) -> Value:
        return self.ops(op, operands, **attrs)[0]

    def scalar(self, value: float, dt: DType) -> Value:
        return self.op("constant", [], value=Tensor(np.array(value, dt.np)))

    def zero(self, dt: DType) -> Value:
        return self.scalar(0.0, dt)

    def finish(self, states: Sequence[Value], scans: Sequence[Value]) -> Graph:
        """The body returning (cond, states..., scans...)."""
        for k, v in enumerate([self.cond, *states, *scans]):
            self.graph.add_output(f"out_{k}", v)
        return self.graph


def activate(body: StepBody, act: Activation, x: Value) -> Value:
    """ONNX's activation `act` of x (onnxruntime's forms of the ones without an op)."""
    dt = x.type.dtype
    if act.name in _PLAIN:
        return body.op(_PLAIN[act.name], [x])
    if act.name == "leakyrelu":
        return body.op("leaky_relu", [x], alpha=act.alpha)
    if act.name == "hardsigmoid":
        return body.op("hard_sigmoid", [x], alpha=act.alpha, beta=act.beta)
    if act.name == "affine":
        return body.op("add", [body.op("mul", [x, body.scalar(act.alpha, dt)]),
                               body.scalar(act.beta, dt)])
    if act.name == "scaledtanh":
        inner = body.op("tanh", [body.op("mul", [x, body.scalar(act.beta, dt)])])
        return body.op("mul", [inner, body.scalar(act.alpha, dt)])
    zero = body.zero(dt)
    if act.name == "thresholdedrelu":
        return body.op("where", [body.op("greater", [x, body.scalar(act.alpha, dt)]), x,
                                 zero])
    # elu: alpha * (exp(x) - 1) below 0 (exp of min(x, 0), which cannot overflow)
    negative = body.op("sub", [body.op("exp", [body.op("min", [x, zero])]),
                               body.scalar(1.0, dt)])
    return body.op("where", [body.op("greater", [x, zero]), x,
                             body.op("mul", [negative, body.scalar(act.alpha, dt)])])


@dataclass(frozen=True)
class Cell:
    """One of the three cells and the attributes that change its step."""

    op: str
    input_forget: bool = False
    linear_before_reset: bool = False

    @classmethod
    def of(cls, op: str, input_forget: bool, linear_before_reset: bool) -> Cell:
        return cls(op, input_forget and op == "LSTM", linear_before_reset and op == "GRU")

    def weights(self, e: _Emitter, r: Value, rbh: Value | None, p: Value | None
                ) -> list[Value]:
        """The loop's weight captures, from one direction's R ([gates*hidden, hidden]), GRU
        candidate bias Rb_h and LSTM peepholes P ([3*hidden]): R^T for RNN, LSTM and a GRU
        with linear_before_reset (then Rb_h when given), [R_z; R_r]^T and R_h^T for other
        GRUs; an LSTM's P_i, P_o, P_f when given."""
        def t(m: Value) -> Value:
            return e.op("transpose", [m], perm=(1, 0))

        hidden = r.type.shape[1]
        if self.op == "GRU" and not self.linear_before_reset:
            zr, h = e.ctx.emit("split", [r, e.ints(2 * hidden, hidden)], {"axis": 0})
            return [t(zr), t(h)]
        if p is not None:
            return [t(r), *e.ctx.emit("split", [p], {"axis": 0, "num_outputs": 3})]
        return [t(r)] if rbh is None else [t(r), rbh]

    def step(self, body: StepBody, acts: Sequence[Activation], clip: float | None,
             x: Value, weights: Sequence[Value], bias: Sequence[Value] = ()) -> list[Value]:
        """The new carried states (h, and c for an LSTM) after one step from row x; `bias`:
        none, or b ([gates*hidden]) for RNN and LSTM, b_z, b_r, b_h ([hidden]) for GRU."""
        def pre(v: Value) -> Value:
            if clip is None:
                return v
            dt = v.type.dtype
            return body.op("clip", [v, body.scalar(-clip, dt), body.scalar(clip, dt)])

        h = body.carried[0]
        if self.op == "RNN":
            return [activate(body, acts[0], pre(self._gates(body, x, h, weights[0], bias)))]
        if self.op == "GRU":
            return [self._gru(body, acts, pre, x, h, weights, bias)]
        return self._lstm(body, acts, pre, x, h, body.carried[1], weights, bias)

    @staticmethod
    def _gates(body: StepBody, x: Value, h: Value, rt: Value, bias: Sequence[Value] = ()
               ) -> Value:
        """x + h rt (+ the bias): the bias after the matmul, as its epilogue."""
        gates = body.op("add", [x, body.op("matmul", [h, rt])])
        return body.op("add", [gates, bias[0]]) if bias else gates

    def _gru(self, body: StepBody, acts, pre, x: Value, h: Value, weights, bias) -> Value:
        f, g = acts
        xz, xr, xh = body.ops("split", [x], axis=1, num_outputs=3)
        bz, br, bh = bias or (None, None, None)

        def plus(v: Value, b: Value | None) -> Value:
            return v if b is None else body.op("add", [v, b])

        if self.linear_before_reset:
            rz, rr, rh = body.ops("split", [body.op("matmul", [h, weights[0]])], axis=1,
                                  num_outputs=3)
            if len(weights) > 1:
                rh = body.op("add", [rh, weights[1]])
        else:
            rz, rr = body.ops("split", [body.op("matmul", [h, weights[0]])], axis=1,
                              num_outputs=2)
        z = activate(body, f, pre(plus(body.op("add", [xz, rz]), bz)))
        r = activate(body, f, pre(plus(body.op("add", [xr, rr]), br)))
        if self.linear_before_reset:
            candidate = body.op("add", [plus(xh, bh), body.op("mul", [r, rh])])
        else:
            candidate = plus(self._gates(body, xh, body.op("mul", [r, h]), weights[1]), bh)
        n = activate(body, g, pre(candidate))
        return body.op("add", [n, body.op("mul", [z, body.op("sub", [h, n])])])

    def _lstm(self, body: StepBody, acts, pre, x: Value, h: Value, c: Value,
              weights, bias) -> list[Value]:
        f, g, hact = acts
        gi, go, gf, gc = body.ops("split", [self._gates(body, x, h, weights[0], bias)],
                                  axis=1, num_outputs=4)
        peep = weights[1:]
        if peep:
            gi = body.op("add", [gi, body.op("mul", [c, peep[0]])])
            gf = body.op("add", [gf, body.op("mul", [c, peep[2]])])
        i = activate(body, f, pre(gi))
        if self.input_forget:
            forget = body.op("sub", [body.scalar(1.0, x.type.dtype), i])
        else:
            forget = activate(body, f, pre(gf))
        c_new = body.op("add", [body.op("mul", [forget, c]),
                                body.op("mul", [i, activate(body, g, pre(gc))])])
        if peep:
            go = body.op("add", [go, body.op("mul", [c_new, peep[1]])])
        o = activate(body, f, pre(go))
        return [body.op("mul", [o, activate(body, hact, c_new)]), c_new]
