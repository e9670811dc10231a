"""The op registry: one `OpDef` per op, looked up by name.

Contract: an `OpDef` holds everything flowc knows about an op independent of any target:
its operands (names; `?` marks optional, `*` variadic), its attribute schema with defaults,
its traits, its type rule (`infer(ctx) -> Type | tuple[Type, ...]`), its numpy
reference kernel (`kernel(ctx, *arrays) -> array | tuple[array, ...]`), and the facts
passes, codegen and testing read about it: its FLOPs rule (`flops`, see `cost.py`), its
tolerance class (`tolerance`, one of `TOLERANCES`) and the fused kernel kind it anchors
(`anchor`, one of `ANCHOR_KINDS`), and its reverse-mode derivative: a `Vjp` rule (`vjp`) or
the reason it has none (`no_grad`). Ops keep ONNX semantics where ONNX has the op; `onnx`
names the ONNX op it maps from (the ONNX importer maps it by that name).

Defaults make the common case free: an ELEMENTWISE op costs one flop per result element
(`TRANSCENDENTAL_FLOPS` if TRANSCENDENTAL), any other op none (it moves data) unless it
gives a rule; every op's tolerance class is "elementwise" ("transcendental" if
TRANSCENDENTAL) unless it states one.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flowc.ir.attrs import Attrs, Tensor
from flowc.ir.errors import InferError
from flowc.ir.limits import size_problem
from flowc.ir.ops.cost import FlopsFn, elementwise_flops, no_flops
from flowc.ir.types import DType, TensorType, Type


class Trait(enum.Enum):
    PURE = "pure"  # no side effects, result depends only on operands: CSE and folding apply
    COMMUTATIVE = "commutative"  # the two operands may be swapped
    ELEMENTWISE = "elementwise"  # each output element depends on the same-index inputs
    STATEFUL = "stateful"  # reads or writes state, or communicates: never merged or dropped
    HAS_BODY = "has_body"  # holds nested graphs as attributes
    # its result is operand 0's buffer under the result's type: no kernel, no copy
    VIEW = "view"
    # its result holds operand 0's elements in order, converted to the result's dtype (a
    # VIEW is one too)
    RESHAPE_LIKE = "reshape_like"
    # its kernel only picks and joins operand elements, no arithmetic: it runs on arrays of
    # Python objects (constant folding passes symbolic dims through it)
    SELECTS = "selects"
    # compiled kernels compute it on narrow dtypes (f8, f4, ...; a VIEW moves them too)
    NARROW = "narrow"
    # each element costs TRANSCENDENTAL_FLOPS (exp, tanh, erf, ...); tolerance class
    # "transcendental" unless the op states another
    TRANSCENDENTAL = "transcendental"


(PURE, COMMUTATIVE, ELEMENTWISE, STATEFUL, HAS_BODY, VIEW, RESHAPE_LIKE, SELECTS, NARROW,
 TRANSCENDENTAL) = Trait

# tolerance classes of ops (flowc/testing/tolerance.py has the tolerance of each)
TOLERANCES = ("exact", "elementwise", "transcendental", "reduction", "matmul")
# kinds of fused kernel built around one anchor op (flowc/ir/ops/fused.py)
ANCHOR_KINDS = ("matmul_epilogue", "conv_epilogue", "reduction")


class Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = Required()

ATTR_KINDS = {
    "int": int, "float": float, "str": str, "bool": bool, "dtype": DType,
    "tensor": Tensor, "type": TensorType, "ints": int, "floats": float, "strs": str,
    "graph": None,  # checked by name: flowc.ir.graph.Graph
}


@dataclass(frozen=True)
class AttrSpec:
    """One attribute: its name, kind (a key of ATTR_KINDS) and default (REQUIRED if none).
    A default of None means "absent unless given"."""

    name: str
    kind: str
    default: Any = REQUIRED

    def __post_init__(self) -> None:
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"attribute {self.name}: unknown kind {self.kind}")

    def accepts(self, value: Any) -> bool:
        if self.kind == "graph":
            return type(value).__name__ == "Graph"
        expected = ATTR_KINDS[self.kind]
        if self.kind in ("ints", "floats", "strs"):
            return isinstance(value, tuple) and all(_is_kind(v, expected) for v in value)
        return _is_kind(value, expected)


def _is_kind(value: Any, expected: type) -> bool:
    if expected is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


@dataclass
class InferContext:
    """What a type rule sees: operand types (None where absent), attributes with defaults
    filled in, constant operand values where known, and how to report an error."""

    op: str
    label: str
    types: list[Type | None]
    attrs: dict[str, Any]
    consts: list[np.ndarray | None]
    asked: set[int] = field(default_factory=set)  # operands whose value the rule asked for

    def const(self, index: int) -> np.ndarray | None:
        self.asked.add(index)
        return self.consts[index] if index < len(self.consts) else None

    def known(self, index: int) -> np.ndarray | None:
        """The operand's value where it is known, without asking for it: for checks that
        a known value allows (an index in range), not for computing the result's type."""
        return self.consts[index] if index < len(self.consts) else None

    def type(self, index: int) -> Type | None:
        return self.types[index] if index < len(self.types) else None

    def tensor(self, index: int) -> TensorType:
        t = self.type(index)
        if not isinstance(t, TensorType):
            self.fail(f"operand #{index} must be a tensor, found {t}")
        return t

    def fail(self, message: str) -> None:
        raise InferError(f"{self.label}: {message}")


@dataclass
class KernelContext:
    """What a reference kernel sees: attributes with defaults, the node's result types, and
    a way to run a nested body (set by the interpreter)."""

    attrs: dict[str, Any]
    types: tuple[Type, ...]
    label: str
    run_body: Callable[[Any, Sequence[np.ndarray]], list[np.ndarray]] | None = None
    state: Any = None  # the interpreter's variable store and channels


InferFn = Callable[[InferContext], "Type | tuple[Type, ...]"]
KernelFn = Callable[..., Any]


@dataclass(frozen=True)
class Vjp:
    """An op's vector-Jacobian product: how `flowc.ir.autodiff.gradients` sends cotangents
    from a node's results back to its operands, as new graph nodes.

    `rule(g, cts) -> Sequence[Value | None]` gets `g`, a `flowc.ir.autodiff.VjpBuilder` for
    one forward node (its attributes `g.attrs`, operand and result types `g.in_type(i)`,
    `g.out_type(i)`, forward values `g.input(i)` and `g.output(i)`, which operands want a
    cotangent `g.wants(i)`, and `g.op(...)`, `g.const(...)`, `g.sum_to(...)` to emit
    nodes), and `cts`, one cotangent per result: a Value of that result's type, or None
    for a symbolic zero (at least one is not None). It returns one entry per operand of
    the node: a Value of exactly that operand's type, or None (a zero, or an operand that
    takes none: absent, integer or bool, off every path, `g.wants(i)` False); entries for
    absent trailing optional operands may be left in (as None).

    `inputs` and `outputs` declare the operand and result indices whose forward values
    the rule may read ("all": every operand, for variadic ops); `g.input`/`g.output`
    refuse others. They bound the activations a training step keeps (`autodiff.Backward
    .reads` lists the ones a backward graph did read). Backward rules emit ops that have
    compiled lowerings (matmul, reductions, elementwise), not interpreter-only ones.
    """

    rule: Callable[..., Sequence[Any]]
    inputs: tuple[int, ...] | str = ()
    outputs: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.inputs, str) and self.inputs != "all":
            raise ValueError(f"Vjp inputs must be a tuple of indices or 'all', "
                             f"found {self.inputs!r}")

    def reads_input(self, index: int) -> bool:
        return self.inputs == "all" or index in self.inputs


@dataclass(frozen=True)
class OpDef:
    name: str
    inputs: tuple[str, ...]
    infer: InferFn
    kernel: KernelFn
    attrs: tuple[AttrSpec, ...] = ()
    traits: frozenset[Trait] = frozenset()
    onnx: str | None = None
    doc: str = ""
    flops: FlopsFn | None = None  # None: the default of its traits (see the module docstring)
    tolerance: str | None = None  # one of TOLERANCES; None: the default of its traits
    anchor: str | None = None  # the ANCHOR_KINDS kind of fused kernel it anchors, if any
    vjp: Vjp | None = None  # its reverse-mode rule (flowc/ir/autodiff.py)
    no_grad: str | None = None  # why it has no Vjp (gradients() refuses to cross it)
    attr_specs: dict[str, AttrSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attr_specs", {a.name: a for a in self.attrs})
        transcendental = TRANSCENDENTAL in self.traits
        if self.flops is None:
            default = elementwise_flops(transcendental) if ELEMENTWISE in self.traits else no_flops
            object.__setattr__(self, "flops", default)
        if self.tolerance is None:
            default = "transcendental" if transcendental else "elementwise"
            object.__setattr__(self, "tolerance", default)
        if self.tolerance not in TOLERANCES:
            raise ValueError(f"op {self.name}: tolerance must be one of {', '.join(TOLERANCES)}, "
                             f"found {self.tolerance!r}")
        if self.anchor is not None and self.anchor not in ANCHOR_KINDS:
            raise ValueError(f"op {self.name}: anchor must be one of {', '.join(ANCHOR_KINDS)}, "
                             f"found {self.anchor!r}")
        if self.vjp is not None and self.no_grad is not None:
            raise ValueError(f"op {self.name}: give a vjp rule or a no_grad reason, not both")

    def has(self, trait: Trait) -> bool:
        return trait in self.traits

    @property
    def is_view(self) -> bool:
        """Its result aliases operand 0 (no kernel runs it)."""
        return VIEW in self.traits

    @property
    def reshape_like(self) -> bool:
        """Its result holds operand 0's elements in order (RESHAPE_LIKE, or a VIEW)."""
        return RESHAPE_LIKE in self.traits or VIEW in self.traits

    @property
    def narrow(self) -> bool:
        """Compiled kernels run it on narrow dtypes (NARROW, or a VIEW)."""
        return NARROW in self.traits or VIEW in self.traits

    @property
    def arity(self) -> tuple[int, int | None]:
        """(min, max) operand count; max None when the last operand is variadic."""
        required = sum(1 for i in self.inputs if not i.endswith(("?", "*")))
        variadic = any(i.endswith("*") for i in self.inputs)
        return required, None if variadic else len(self.inputs)

    def operand_name(self, index: int) -> str:
        if index < len(self.inputs):
            return self.inputs[index].rstrip("?*")
        return self.inputs[-1].rstrip("?*")

    def resolve_attrs(self, attrs: Attrs | dict) -> dict[str, Any]:
        """The attributes with defaults filled in (unknown names are the verifier's job)."""
        resolved = {a.name: a.default for a in self.attrs if a.default is not REQUIRED}
        resolved.update(attrs)
        return resolved


OPS: dict[str, OpDef] = {}
ONNX_OPS: dict[str, OpDef] = {}


def define(name: str, inputs: Sequence[str], infer: InferFn, kernel: KernelFn, *,
           attrs: Sequence[AttrSpec] = (), traits: Sequence[Trait] = (PURE,),
           onnx: str | None = None, doc: str = "", flops: FlopsFn | None = None,
           tolerance: str | None = None, anchor: str | None = None, vjp: Vjp | None = None,
           no_grad: str | None = None) -> OpDef:
    """Register an op. Pure unless `traits` says otherwise; `flops` and `tolerance` default
    from its traits (see the module docstring). Every op gives `vjp` (its `Vjp` rule) or
    `no_grad` (why it has none; tests/ir/test_gradients.py checks)."""
    if name in OPS:
        raise ValueError(f"op {name} is defined twice")
    opdef = OpDef(name, tuple(inputs), infer, kernel, tuple(attrs), frozenset(traits), onnx, doc,
                  flops, tolerance, anchor, vjp, no_grad)
    OPS[name] = opdef
    if onnx:
        ONNX_OPS[onnx] = opdef
    return opdef


def get_op(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise InferError(f"unknown op '{name}'") from None


def is_view(op: str) -> bool:
    """Whether `op` is a registry op whose result aliases operand 0 (`OpDef.is_view`); False
    for names outside the registry (a graph's `input`)."""
    opdef = OPS.get(op)
    return opdef is not None and opdef.is_view


def infer_types(opdef: OpDef, types: Sequence[Type | None], attrs: Attrs | dict,
                consts: Sequence[np.ndarray | None] = (), label: str = "") -> tuple[Type, ...]:
    """Result types of `opdef` applied to operands of `types`; InferError if ill-typed or
    if a result breaks flowc's size limit (`flowc.ir.limits`): every op is checked here."""
    label = label or f"({opdef.name})"
    lo, hi = opdef.arity
    if len(types) < lo or (hi is not None and len(types) > hi):
        expected = f"{lo}" if lo == hi else f"{lo} to {hi if hi is not None else 'any'}"
        raise InferError(f"{label}: expected {expected} operands, found {len(types)}")
    for i, t in enumerate(types):
        if t is None and not opdef.inputs[min(i, len(opdef.inputs) - 1)].endswith("?"):
            raise InferError(f"{label}: operand '{opdef.operand_name(i)}' is required")
    consts = list(consts) + [None] * (len(types) - len(consts))
    ctx = InferContext(opdef.name, label, list(types), opdef.resolve_attrs(attrs), consts)
    result = opdef.infer(ctx)
    results = result if isinstance(result, tuple) else (result,)
    for i, t in enumerate(results):
        problem = size_problem(t)
        if problem is not None:
            which = f"result #{i} " if len(results) > 1 else "its result "
            raise InferError(f"{label}: {which}{problem}")
    return results


def unknown_value_operands(opdef: OpDef, types: Sequence[Type | None], attrs: Attrs | dict,
                           consts: Sequence[np.ndarray | None]) -> list[int]:
    """The operands whose values `opdef`'s type rule asked for and did not get: the values
    that would make its result types more precise (a shape operand of reshape, say)."""
    consts = list(consts) + [None] * (len(types) - len(consts))
    ctx = InferContext(opdef.name, f"({opdef.name})", list(types), opdef.resolve_attrs(attrs),
                       consts)
    with contextlib.suppress(InferError):  # an ill-typed node asks what it asked so far
        opdef.infer(ctx)
    return sorted(i for i in ctx.asked if i < len(types) and consts[i] is None
                  and types[i] is not None)
