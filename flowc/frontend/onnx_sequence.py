"""ONNX sequences and optionals, resolved at import.

flowc graphs hold tensors only. The importer holds an ONNX sequence as a `Seq` (its tensors,
each a flowc Value) and an optional as an `Opt` (its value, or None when empty), so every
sequence op becomes plain Python over those lists as the model is imported: this needs
each sequence's length, and every position or split size, known at import (constants, or
small integer inputs the model is bound to: `onnx.import_onnx_model(bind=...)`).

- SequenceConstruct, SequenceEmpty, SequenceLength (a constant), SequenceAt, SequenceInsert,
  SequenceErase (positions known; negative ones count from the end), ConcatFromSequence
  (concat, or stack with new_axis=1), SplitToSequence (slices; split absent: pieces of 1,
  squeezed unless keepdims), SequenceMap (its body imported once per position, in line).
- Optional (with or without a value), OptionalHasElement (a constant), OptionalGetElement
  (an empty optional is an error); Identity passes sequences and optionals through.
- A Loop whose carried values include a sequence or optional, or whose body uses sequence
  ops, is unrolled when its trip count and each iteration's condition are known at import
  (`unroll_loop`); an If whose condition is known imports only its taken branch in line,
  which may yield sequences.

Anything else is a one-line error naming the node and op: a position, split or trip count
known only at run time, a sequence reaching an op that takes tensors, a sequence read
inside a body that stays a flowc loop or if.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from flowc.ir import Value


@dataclass(frozen=True)
class Seq:
    """An ONNX sequence: its tensors, in order."""

    items: tuple[Value, ...]


@dataclass(frozen=True)
class Opt:
    """An ONNX optional: a tensor or sequence, or None when empty."""

    value: Value | Seq | None


SEQUENCE_OPS = frozenset({
    "SequenceConstruct", "SequenceEmpty", "SequenceLength", "SequenceAt", "SequenceInsert",
    "SequenceErase", "ConcatFromSequence", "SplitToSequence", "SequenceMap", "Optional",
    "OptionalHasElement", "OptionalGetElement"})


def is_structured(value: Any) -> bool:
    return isinstance(value, Seq | Opt)


def _known_int(ctx, value: Value | None, what: str, default: int | None = None) -> int:
    if value is None:
        if default is None:
            ctx.fail(f"{what} is required")
        return default
    known = ctx.known(value)
    if known is None:
        ctx.fail(f"{what} must be known at import (a constant, or an input the model is "
                 "bound to): flowc resolves sequences as it imports")
    array = np.asarray(known)
    if array.size != 1:
        ctx.fail(f"{what} must hold one integer, found shape {array.shape}")
    return int(array.reshape(-1)[0])


def _seq(ctx, value: Any, what: str = "input_sequence") -> Seq:
    if not isinstance(value, Seq):
        ctx.fail(f"{what} must be a sequence, found {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if isinstance(value, Seq):
        return f"a sequence of {len(value.items)}"
    if isinstance(value, Opt):
        return "an empty optional" if value.value is None else "an optional"
    return "nothing" if value is None else f"a tensor {value.type}"


def _position(ctx, seq: Seq, value: Value | None, insert: bool) -> int:
    """A known position in `seq` (default: the end), range-checked as ONNX does."""
    n = len(seq.items)
    pos = _known_int(ctx, value, "position", default=n if insert else n - 1)
    hi = n if insert else n - 1
    if not -n <= pos <= hi:
        ctx.fail(f"position {pos} is out of range for a sequence of {n}")
    return pos + n if pos < 0 else pos


def _identity(ctx) -> Sequence[Any]:
    x = ctx.inputs[0]
    return [x] if is_structured(x) else ctx.emit("identity", [x], {})


def _construct(ctx) -> Sequence[Any]:
    return [Seq(tuple(ctx.inputs))]


def _empty(ctx) -> Sequence[Any]:
    return [Seq(())]


def _length(ctx) -> Sequence[Any]:
    seq = _seq(ctx, ctx.inputs[0])
    return [ctx.constant(np.array(len(seq.items), np.int64))]


def _at(ctx) -> Sequence[Any]:
    seq = _seq(ctx, ctx.inputs[0])
    return ctx.emit("identity", [seq.items[_position(ctx, seq, ctx.inputs[1], False)]], {})


def _insert(ctx) -> Sequence[Any]:
    seq, tensor, *pos = ctx.inputs
    seq = _seq(ctx, seq)
    at = _position(ctx, seq, pos[0] if pos else None, True)
    return [Seq((*seq.items[:at], tensor, *seq.items[at:]))]


def _erase(ctx) -> Sequence[Any]:
    seq, *pos = ctx.inputs
    seq = _seq(ctx, seq)
    at = _position(ctx, seq, pos[0] if pos else None, False)
    return [Seq(seq.items[:at] + seq.items[at + 1:])]


def _concat(ctx) -> Sequence[Any]:
    seq = _seq(ctx, ctx.inputs[0])
    if not seq.items:
        ctx.fail("ConcatFromSequence of an empty sequence")
    axis, items = ctx.attrs["axis"], list(seq.items)
    if ctx.attrs.get("new_axis", 0):
        rank = items[0].type.rank + 1
        axes = ctx.constant(np.array([axis % rank if -rank <= axis < rank else axis]))
        items = [ctx.emit("unsqueeze", [v, axes], {})[0] for v in items]
    return ctx.emit("concat", items, {"axis": axis})


def _split(ctx) -> Sequence[Any]:
    x, *split = ctx.inputs
    rank = x.type.rank
    axis = ctx.attrs.get("axis", 0)
    if not -rank <= axis < rank:
        ctx.fail(f"axis {axis} is out of range for {x.type}")
    axis %= rank
    n = x.type.shape[axis]
    if not isinstance(n, int):
        ctx.fail(f"SplitToSequence needs a static extent along axis {axis}, found {x.type}")
    given = split[0] if split else None
    if given is None:
        sizes, squeeze = [1] * n, not ctx.attrs.get("keepdims", 1)
    else:
        known = ctx.known(given)
        if known is None:
            ctx.fail("split must be known at import (a constant, or an input the model is "
                     "bound to): flowc resolves sequences as it imports")
        known = np.asarray(known).astype(np.int64)
        if known.ndim == 0:
            step = int(known)
            if step <= 0:
                ctx.fail(f"split {step} must be positive")
            sizes = [min(step, n - s) for s in range(0, n, step)]
        else:
            sizes = [int(s) for s in known]
        squeeze = False
        if sum(sizes) != n or any(s < 0 for s in sizes):
            ctx.fail(f"split sizes {sizes} do not add up to {n} (axis {axis} of {x.type})")
    items, start = [], 0
    for size in sizes:
        part = ctx.emit("slice", [x, *(ctx.constant(np.array([v], np.int64))
                                       for v in (start, start + size, axis))], {})[0]
        if squeeze:
            part = ctx.emit("squeeze", [part, ctx.constant(np.array([axis], np.int64))], {})[0]
        items.append(part)
        start += size
    return [Seq(tuple(items))]


def _map(ctx) -> Sequence[Any]:
    seqs = [v for v in ctx.inputs if isinstance(v, Seq)]
    if not seqs or not isinstance(ctx.inputs[0], Seq):
        ctx.fail("SequenceMap's first input must be a sequence")
    n = len(seqs[0].items)
    if any(len(s.items) != n for s in seqs):
        ctx.fail(f"its sequences differ in length: {[len(s.items) for s in seqs]}")
    body = ctx.attrs["body"]
    outs: list[list[Value]] = [[] for _ in body.output]
    for i in range(n):
        args = [v.items[i] if isinstance(v, Seq) else v for v in ctx.inputs]
        for out, value in zip(outs, ctx.inline(body, args, f"{i}/"), strict=True):
            out.append(value)
    return [Seq(tuple(out)) for out in outs]


def _optional(ctx) -> Sequence[Any]:
    value = ctx.inputs[0] if ctx.inputs else None
    if isinstance(value, Opt):
        ctx.fail("an optional of an optional is not an ONNX type")
    return [Opt(value)]


def _has_element(ctx) -> Sequence[Any]:
    value = ctx.inputs[0] if ctx.inputs else None
    present = value is not None and not (isinstance(value, Opt) and value.value is None)
    return [ctx.constant(np.array(present))]


def _get_element(ctx) -> Sequence[Any]:
    value = ctx.inputs[0] if ctx.inputs else None
    if isinstance(value, Opt):
        if value.value is None:
            ctx.fail("OptionalGetElement of an empty optional")
        value = value.value
    return [value] if isinstance(value, Seq) else ctx.emit("identity", [value], {})


CONVERTERS = {
    "Identity": _identity,
    "SequenceConstruct": _construct,
    "SequenceEmpty": _empty,
    "SequenceLength": _length,
    "SequenceAt": _at,
    "SequenceInsert": _insert,
    "SequenceErase": _erase,
    "ConcatFromSequence": _concat,
    "SplitToSequence": _split,
    "SequenceMap": _map,
    "Optional": _optional,
    "OptionalHasElement": _has_element,
    "OptionalGetElement": _get_element,
}


def uses_sequences(graph: onnx.GraphProto) -> bool:
    """Whether `graph` (its bodies included) has a sequence or optional op."""
    for node in graph.node:
        if node.op_type in SEQUENCE_OPS:
            return True
        for attr in node.attribute:
            for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                if uses_sequences(g):
                    return True
    return False


def should_unroll(ctx) -> bool:
    """Whether a Loop is unrolled at import: it carries a sequence or optional, or its body
    uses sequence ops."""
    return any(is_structured(v) for v in ctx.inputs[2:]) or uses_sequences(ctx.attrs["body"])


def unroll_loop(ctx) -> Sequence[Any]:
    """ONNX Loop(M, cond, carried...) -> (carried..., scans...) unrolled: its body imported
    in line once per iteration, with the iteration number and condition as constants."""
    m, cond, *carried = [*ctx.inputs, None, None][:max(len(ctx.inputs), 2)]
    trip = None if m is None else _known_int(ctx, m, "the trip count M (to unroll a loop "
                                             "over sequences)")
    going = True if cond is None else ctx.known(cond)
    if going is None:
        ctx.fail("the loop condition must be known at import to unroll a loop over sequences")
    if trip is None:
        ctx.fail("a loop over sequences needs a trip count M known at import")
    body = ctx.attrs["body"]
    n_scan = len(body.output) - 1 - len(carried)
    scans: list[list[Value]] = [[] for _ in range(n_scan)]
    state, i = list(carried), 0
    while i < trip and bool(np.asarray(going).reshape(-1)[0]):
        args = [ctx.constant(np.array(i, np.int64)), ctx.constant(np.array(True)), *state]
        outs = ctx.inline(body, args, f"{i}/")
        going = ctx.known(outs[0])
        if going is None:
            ctx.fail(f"iteration {i}'s condition is known only at run time; a loop over "
                     "sequences is unrolled at import")
        state = list(outs[1:1 + len(carried)])
        for scan, value in zip(scans, outs[1 + len(carried):], strict=True):
            scan.append(value)
        i += 1
    stacked = []
    for scan in scans:
        if not scan:
            ctx.fail("a scan output of a loop that runs no iteration has no known shape")
        axis = ctx.constant(np.array([0], np.int64))
        stacked.append(ctx.emit("concat", [ctx.emit("unsqueeze", [v, axis], {})[0]
                                           for v in scan], {"axis": 0})[0])
    return [*state, *stacked]
