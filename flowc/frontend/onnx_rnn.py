"""ONNX LSTM, GRU and RNN (opset 7 and newer, `layout` from 14) imported as flowc `loop`s.

Every attribute and optional input is imported: direction (forward, reverse,
bidirectional), activations with activation_alpha/activation_beta, clip, hidden_size,
layout, sequence_lens, initial_h/initial_c, peepholes P and input_forget (LSTM),
linear_before_reset (GRU), and any subset of the outputs Y, Y_h, Y_c. Semantics follow
onnxruntime's CPU kernels (`onnx_rnn_cells` has the per-step formulas).

Lowering, per direction (as cuDNN and onnxruntime do):
- the input projection of all steps is one matmul before the loop: `X @ W^T`
  ([seq, batch, gates*hidden]); the biases Wb + Rb are added to it there for LSTM and RNN
  (`pack-weights` makes them the projection's row bias, which its kernel starts from, so
  the step is `x + h R^T`: one packed gemm starting from x), in the step for a GRU, whose
  gates add them in parts (`Cell.step`);
- a reverse direction walks that projection backwards: reversed along the sequence before
  the loop (per batch row with sequence_lens, as ONNX ReverseSequence), and its Y reversed
  back after;
- a `loop` of seq trips whose closed body takes row `iteration` of the projection, the
  transposed recurrent weights R^T and the carried h (and c), computes one step of the cell
  (`onnx_rnn_cells`) and emits h as the scan output Y (only when Y is asked for).
  With sequence_lens, rows past a batch entry's length keep its state (so Y_h/Y_c are the
  states at its last valid step) and emit zeros;
- bidirectional stacks both directions as ONNX lays them out (Y [seq, 2, batch, hidden],
  Y_h [2, batch, hidden]); layout 1 transposes X and the states in, and the results out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # onnx_nodes lists this converter in its table
    from flowc.frontend.onnx_nodes import NodeContext
from flowc.frontend.onnx_rnn_cells import ACTIVATIONS, GATES, Activation, Cell, StepBody
from flowc.ir import Value
from flowc.ir.types import i64

_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
                        "RNN": ("Tanh",)}
_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}
_INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


@dataclass(frozen=True)
class _Spec:
    op: str
    hidden: int
    reverse: tuple[bool, ...]          # one entry per direction
    activations: tuple[tuple[Activation, ...], ...]  # per direction
    clip: float | None
    layout: int
    input_forget: bool
    linear_before_reset: bool


def _activations(ctx: NodeContext, op: str, dirs: int) -> tuple[tuple[Activation, ...], ...]:
    """The activations of each direction, with their alpha/beta consumed in order (an
    activation that takes an alpha takes the next one listed, else its default)."""
    count = len(_DEFAULT_ACTIVATIONS[op])
    names = list(ctx.attrs.get("activations") or _DEFAULT_ACTIVATIONS[op] * dirs)
    if len(names) != count * dirs:
        ctx.fail(f"activations lists {len(names)} functions, expected {count * dirs} "
                 f"({count} per direction, {dirs} direction(s))")
    alphas = list(ctx.attrs.get("activation_alpha") or [])
    betas = list(ctx.attrs.get("activation_beta") or [])
    acts = []
    for name in names:
        key = name.lower()
        if key not in ACTIVATIONS:
            ctx.fail(f"unknown activation {name!r} (known: "
                     f"{', '.join(sorted(ACTIVATIONS))}, any case)")
        takes_alpha, takes_beta, alpha, beta = ACTIVATIONS[key]
        if takes_alpha and alphas:
            alpha = float(alphas.pop(0))
        if takes_beta and betas:
            beta = float(betas.pop(0))
        acts.append(Activation(key, alpha, beta))
    return tuple(tuple(acts[d * count:(d + 1) * count]) for d in range(dirs))


def _spec(ctx: NodeContext) -> _Spec:
    op = ctx.node.op_type
    direction = ctx.attrs.get("direction", "forward")
    if direction not in _DIRECTIONS:
        ctx.fail(f"direction {direction!r} is not one of forward, reverse, bidirectional")
    layout = int(ctx.attrs.get("layout", 0))
    if layout not in (0, 1):
        ctx.fail(f"layout {layout} is not 0 or 1")
    r = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if r is None or ctx.inputs[0] is None or ctx.inputs[1] is None:
        ctx.fail("inputs X, W and R are required")
    r_hidden = r.type.shape[-1] if r.type.rank == 3 else None
    hidden = ctx.attrs.get("hidden_size", r_hidden)
    if not isinstance(hidden, int) or hidden < 1:
        ctx.fail(f"hidden_size is {hidden}: give the attribute or a static R")
    if isinstance(r_hidden, int) and r_hidden != hidden:
        ctx.fail(f"hidden_size = {hidden} but R is {r.type} (its last dim is the hidden "
                 "size)")
    clip = ctx.attrs.get("clip")
    if clip is not None and not clip > 0:
        ctx.fail(f"clip = {clip}: the threshold must be positive")
    reverse = _DIRECTIONS[direction]
    return _Spec(op, hidden, reverse, _activations(ctx, op, len(reverse)),
                 None if clip is None else float(clip), layout,
                 bool(ctx.attrs.get("input_forget", 0)),
                 bool(ctx.attrs.get("linear_before_reset", 0)))


def _check_shape(ctx: NodeContext, name: str, value: Value | None,
                 want: Sequence[int | str | None]) -> None:
    """Refuse `value` unless its shape matches `want` where both are known."""
    if value is None:
        return
    t = value.type
    if t.rank != len(want) or any(isinstance(w, int) and isinstance(d, int) and w != d
                                  for w, d in zip(want, t.shape, strict=False)):
        shown = ", ".join("?" if w is None else str(w) for w in want)
        ctx.fail(f"input {name} is {t}, expected shape [{shown}]")


def _check_inputs(ctx: NodeContext, spec: _Spec, inputs: list[Value | None]) -> None:
    x, w, r, b, lens, h0, c0, p = inputs
    if not x.type.dtype.is_float:
        ctx.fail(f"input X is {x.type}: expected a float tensor")
    if x.type.rank != 3:
        ctx.fail(f"input X is {x.type}, expected rank 3 ([seq, batch, input] for layout 0, "
                 "[batch, seq, input] for layout 1)")
    dirs, hid, size = len(spec.reverse), spec.hidden, GATES[spec.op] * spec.hidden
    batch = x.type.shape[1 - spec.layout]
    states = (dirs, batch, hid) if spec.layout == 0 else (batch, dirs, hid)
    for name, value, want in (("W", w, (dirs, size, x.type.shape[2])),
                              ("R", r, (dirs, size, hid)), ("B", b, (dirs, 2 * size)),
                              ("sequence_lens", lens, (batch,)),
                              ("initial_h", h0, states), ("initial_c", c0, states),
                              ("P", p, (dirs, 3 * hid))):
        _check_shape(ctx, name, value, want)
        if value is not None and name != "sequence_lens" and value.type.dtype != x.type.dtype:
            ctx.fail(f"input {name} is {value.type} but X is {x.type}: expected one dtype")
    if lens is not None and not lens.type.dtype.is_int:
        ctx.fail(f"input sequence_lens is {lens.type}: expected int32")
    if spec.op != "LSTM" and (c0 is not None or p is not None):
        ctx.fail(f"{spec.op} takes no initial_c or P (inputs 6 and 7 are LSTM's)")


class _Emitter:
    """Small helpers over the importer's `emit` and `constant` hooks (outer-graph nodes)."""

    def __init__(self, ctx: NodeContext):
        self.ctx = ctx

    def op(self, op: str, operands: Sequence[Value | None], **attrs) -> Value:
        return self.ctx.emit(op, list(operands), attrs)[0]

    def ints(self, *values: int) -> Value:
        return self.ctx.constant(np.array(values, np.int64))

    def pick(self, x: Value, index: int) -> Value:
        """x[index] along axis 0."""
        return self.op("gather", [x, self.ctx.constant(np.array(index, np.int64))], axis=0)

    def stack(self, parts: list[Value], axis: int) -> Value:
        """The parts, each given a new axis `axis`, concatenated along it."""
        parts = [self.op("unsqueeze", [v, self.ints(axis)]) for v in parts]
        return parts[0] if len(parts) == 1 else self.op("concat", parts, axis=axis)

    def dim(self, x: Value, axis: int) -> Value:
        """x's size along `axis`, as a 1-element i64 tensor (a constant when static)."""
        return self.op("shape", [x], start=axis, end=axis + 1)


def _reverse_index(e: _Emitter, seq: Value, lens: Value) -> Value:
    """[seq, batch, 1] i64: for each batch entry b, its first lens[b] steps in reverse order,
    the rest in place (ONNX ReverseSequence's index map)."""
    steps = e.op("range", [e.ctx.constant(np.array(0, np.int64)),
                           e.op("squeeze", [e.dim(seq, 0), e.ints(0)]),
                           e.ctx.constant(np.array(1, np.int64))])
    steps = e.op("unsqueeze", [steps, e.ints(1)])                          # [seq, 1]
    row = e.op("unsqueeze", [lens, e.ints(0)])                             # [1, batch]
    back = e.op("sub", [e.op("sub", [row, e.ctx.constant(np.array(1, np.int64))]), steps])
    index = e.op("where", [e.op("less", [steps, row]), back, steps])       # [seq, batch]
    return e.op("unsqueeze", [index, e.ints(2)])


def _reverse(e: _Emitter, seq: Value, index: Value | None) -> Value:
    """`seq` ([seq, batch, n]) reversed along the sequence: whole (index None), or per batch
    entry by a `_reverse_index`."""
    if index is None:
        big = np.iinfo(np.int64).min
        return e.op("slice", [seq, e.ints(-1), e.ints(big), e.ints(0), e.ints(-1)])
    full = e.op("expand", [index, e.op("shape", [seq])])
    return e.op("gather_elements", [seq, full], axis=0)


def _zeros(e: _Emitter, x: Value, hidden: int) -> Value:
    """A [batch, hidden] zero state for X ([seq, batch, input]). With a symbolic batch, a
    broadcast that keeps its name in the type (constant_of_shape of a computed shape would
    type it [?, ?]): where(isnan(sum over seq of X[:, :, 0]) [batch, 1], 0, 0)."""
    dt = x.type.dtype.np
    batch = x.type.shape[1]
    zeros = np.zeros((1 if not isinstance(batch, int) else batch, hidden), dt)
    if isinstance(batch, int):
        return e.ctx.constant(zeros)
    column = e.op("slice", [x, e.ints(0), e.ints(1), e.ints(2)])            # [seq, batch, 1]
    rows = e.op("reduce_sum", [column, e.ints(0)], keepdims=0)             # [batch, 1]
    zero = e.ctx.constant(zeros)                                           # [1, hidden]
    return e.op("where", [e.op("isnan", [rows]), zero, zero])


def _projection(e: _Emitter, spec: _Spec, x: Value, w: Value, b: Value | None,
                d: int) -> tuple[Value, list[Value], Value | None]:
    """(X @ W[d]^T [seq, batch, gates*hidden], plus Wb + Rb for LSTM and RNN; the biases
    the step adds, as `Cell.step` takes them (none without B or for LSTM and RNN); the GRU
    candidate's recurrent bias Rbh [hidden] where linear_before_reset keeps it apart, else
    None)."""
    proj = e.op("matmul", [x, e.op("transpose", [e.pick(w, d)], perm=(1, 0))])
    if b is None:
        return proj, [], None
    wb, rb = e.ctx.emit("split", [e.pick(b, d)], {"axis": 0, "num_outputs": 2})
    if spec.op != "GRU":
        return e.op("add", [proj, e.op("add", [wb, rb])]), [], None
    wz, wr, wh = e.ctx.emit("split", [wb], {"axis": 0, "num_outputs": 3})
    rz, rr, rh = e.ctx.emit("split", [rb], {"axis": 0, "num_outputs": 3})
    parts = [e.op("add", [wz, rz]), e.op("add", [wr, rr])]
    if spec.linear_before_reset:
        return proj, [*parts, wh], rh
    return proj, [*parts, e.op("add", [wh, rh])], None


@dataclass(frozen=True)
class _Shared:
    """What the directions of one node share: the per-batch reversal index (reverse with
    sequence_lens, else None), the zero state (None when the initial states are given) and
    whether Y is asked for."""

    index: Value | None
    zeros: Value | None
    want_y: bool


def _direction(e: _Emitter, spec: _Spec, cell: Cell, inputs: list[Value | None], d: int,
               shared: _Shared) -> list[Value | None]:
    """One direction's loop: [Y_d [seq, batch, hidden] or None, h_final, c_final or None]."""
    index, zeros, want_y = shared.index, shared.zeros, shared.want_y
    x, w, r, b, lens, h0, c0, p = inputs
    proj, bias, rbh = _projection(e, spec, x, w, b, d)
    if spec.reverse[d]:
        proj = _reverse(e, proj, index)
    carried = [e.pick(h0, d) if h0 is not None else zeros]
    if spec.op == "LSTM":
        carried.append(e.pick(c0, d) if c0 is not None else zeros)
    weights = cell.weights(e, e.pick(r, d), rbh, None if p is None else e.pick(p, d))
    lengths = [] if lens is None else [e.op("unsqueeze", [lens, e.ints(1)])]  # [batch, 1]
    captures = [proj, *weights, *bias, *lengths]
    body = StepBody(f"{e.ctx.node.name or spec.op.lower()}_step",
                    [v.type for v in carried], [v.type for v in captures])
    row = body.op("gather", [body.captured[0], body.iteration], axis=0)  # [batch, gates*h]
    n = len(weights)
    states = cell.step(body, spec.activations[d], spec.clip, row, body.captured[1:1 + n],
                       body.captured[1 + n:1 + n + len(bias)])
    if lens is not None:
        valid = body.op("less", [body.iteration, body.captured[-1]])
        y = body.op("where", [valid, states[0], body.zero(x.type.dtype)])
        states = [body.op("where", [valid, new, old])
                  for new, old in zip(states, body.carried, strict=True)]
    else:
        y = states[0]
    graph = body.finish(states, [y] if want_y else [])
    looped = e.ctx.emit("loop", [e.dim(x, 0), None, *carried, *captures],
                        {"body": graph, "captures": len(captures)})
    h, c = looped[0], looped[1] if spec.op == "LSTM" else None
    ys = looped[len(carried)] if want_y else None
    if ys is not None and spec.reverse[d]:
        ys = _reverse(e, ys, index)
    return [ys, h, c]


def convert_recurrent(ctx: NodeContext) -> Sequence[Value | None]:
    """ONNX LSTM, GRU or RNN (see the module docstring)."""
    spec = _spec(ctx)
    inputs: list[Value | None] = [*ctx.inputs, *[None] * (len(_INPUTS) - len(ctx.inputs))]
    _check_inputs(ctx, spec, inputs)
    e = _Emitter(ctx)
    x, w, r, b, lens, h0, c0, p = inputs
    if spec.layout == 1:
        x = e.op("transpose", [x], perm=(1, 0, 2))
        h0, c0 = (None if v is None else e.op("transpose", [v], perm=(1, 0, 2))
                  for v in (h0, c0))
    if lens is not None:
        lens = e.op("cast", [lens], to=i64)
    inputs = [x, w, r, b, lens, h0, c0, p]
    names = [*ctx.node.output, "", "", ""]
    shared = _Shared(
        _reverse_index(e, x, lens) if lens is not None and any(spec.reverse) else None,
        _zeros(e, x, spec.hidden) if h0 is None or (spec.op == "LSTM" and c0 is None)
        else None,
        bool(names[0]))
    cell = Cell.of(spec.op, spec.input_forget, spec.linear_before_reset)
    results = [_direction(e, spec, cell, inputs, d, shared) for d in range(len(spec.reverse))]
    y = e.stack([res[0] for res in results], 1) if names[0] else None  # [seq, dirs, b, h]
    states = [e.stack([res[k] for res in results], 0) if names[k] else None  # [dirs, b, h]
              for k in (1, 2)]
    if spec.layout == 1:
        y = None if y is None else e.op("transpose", [y], perm=(2, 0, 1, 3))
        states = [None if s is None else e.op("transpose", [s], perm=(1, 0, 2))
                  for s in states]
    outputs = [y, *states]
    return outputs[:3 if spec.op == "LSTM" else 2]

