"""Structural ops: constants, identity, state (variables), communication, and nested bodies.

State: a `variable` node names one piece of state (its node name is the variable's name);
`read_variable`, `assign`, `assign_add` and `assign_sub` are the only ops that touch it.
Order among them is what data and control edges say, as in the TensorFlow paper.
`send`/`recv` move one tensor between devices; a pair matches on `tensor_name` and the two
devices. `if` runs one of two closed bodies on its operands after the condition.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flowc.ir.ops import control_grad
from flowc.ir.ops.registry import (
    HAS_BODY,
    NARROW,
    PURE,
    STATEFUL,
    VIEW,
    AttrSpec,
    InferContext,
    KernelContext,
    Vjp,
    define,
)
from flowc.ir.ops.rules import same_rule
from flowc.ir.types import TensorType, VarType


def _constant_infer(ctx: InferContext) -> TensorType:
    return ctx.attrs["value"].type


define("constant", (), _constant_infer, lambda ctx: ctx.attrs["value"].data,
       attrs=[AttrSpec("value", "tensor")], onnx="Constant", traits=(PURE, NARROW),
       no_grad="no operands",
       doc="A constant tensor (weights, literals).")

define("identity", ("x",), same_rule, lambda ctx, x: x, onnx="Identity", traits=(PURE, VIEW),
       vjp=Vjp(lambda g, cts: cts), doc="Its operand, unchanged.")
define("stop_gradient", ("x",), same_rule, lambda ctx, x: x, traits=(PURE, VIEW),
       vjp=Vjp(lambda g, cts: [None]),
       doc="Its operand, unchanged; gradients (flowc.ir.autodiff) pass nothing through it.")


# ---- state ------------------------------------------------------------------------------
@dataclass(frozen=True)
class VarHandle:
    """What a `variable` node evaluates to in the interpreter: the variable's name."""

    name: str


def _variable_infer(ctx: InferContext) -> VarType:
    init = ctx.attrs.get("init")
    if init is not None and init.type != ctx.attrs["type"]:
        ctx.fail(f"init is {init.type} but the variable is declared {ctx.attrs['type']}")
    return VarType(ctx.attrs["type"])


def _variable_kernel(ctx: KernelContext) -> VarHandle:
    name = ctx.attrs["shared_name"]
    store = ctx.state.variables
    if name not in store:
        init = ctx.attrs.get("init")
        if init is None:
            raise ValueError(f"variable '{name}' is read before any value was assigned or fed")
        store[name] = np.array(init.data)
    return VarHandle(name)


def _var_operand(ctx: InferContext) -> VarType:
    t = ctx.type(0)
    if not isinstance(t, VarType):
        ctx.fail(f"operand #0 must be a variable handle, found {t}")
    return t


def _read_infer(ctx: InferContext) -> TensorType:
    return _var_operand(ctx).tensor


def _assign_infer(ctx: InferContext) -> tuple:
    declared = _var_operand(ctx).tensor
    value = ctx.tensor(1)
    if value.dtype != declared.dtype or value.rank != declared.rank or any(
        isinstance(a, int) and isinstance(b, int) and a != b
        for a, b in zip(value.shape, declared.shape, strict=True)
    ):
        ctx.fail(f"cannot assign {value} to a variable of {declared}")
    return ()


def _assign_kernel(ctx: KernelContext, handle: VarHandle, value: np.ndarray) -> tuple:
    ctx.state.variables[handle.name] = np.array(value)
    return ()


def _update_kernel(sign: int):
    """The kernel of assign_add (sign 1) and assign_sub (-1): the variable's value becomes
    value +/- delta, in the variable's dtype."""
    def kernel(ctx: KernelContext, handle: VarHandle, delta: np.ndarray) -> tuple:
        old = ctx.state.variables[handle.name]
        new = old + delta if sign > 0 else old - delta
        ctx.state.variables[handle.name] = np.asarray(new, dtype=old.dtype)
        return ()
    return kernel


define("variable", (), _variable_infer, _variable_kernel, traits=(STATEFUL,),
       attrs=[AttrSpec("type", "type"), AttrSpec("shared_name", "str"),
              AttrSpec("init", "tensor", None)],
       no_grad="state: gradients are taken with respect to `read_variable` results",
       doc="Names a piece of state that lives across runs; initialized from `init`.")
define("read_variable", ("var",), _read_infer,
       lambda ctx, handle: np.array(ctx.state.variables[handle.name]), traits=(STATEFUL,),
       no_grad="its operand is a variable handle; take gradients with respect to its result",
       doc="The variable's current value.")
define("assign", ("var", "value"), _assign_infer, _assign_kernel, traits=(STATEFUL,),
       no_grad="state: it has no results",
       doc="Sets the variable's value; no results (order users with control edges).")
define("assign_add", ("var", "value"), _assign_infer, _update_kernel(1), traits=(STATEFUL,),
       no_grad="state: it has no results",
       doc="Adds `value` to the variable in place; no results (like `assign` of read + value).")
define("assign_sub", ("var", "value"), _assign_infer, _update_kernel(-1), traits=(STATEFUL,),
       no_grad="state: it has no results",
       doc="Subtracts `value` from the variable in place; no results.")


# ---- communication ----------------------------------------------------------------------
CHANNEL_ATTRS = [AttrSpec("tensor_name", "str"), AttrSpec("send_device", "str"),
                 AttrSpec("recv_device", "str")]


def channel_key(attrs: dict) -> tuple[str, str, str]:
    return (attrs["tensor_name"], attrs["send_device"], attrs["recv_device"])


def rendezvous_key(attrs: dict) -> str:
    """The rendezvous key of a send/recv pair: `send_device;tensor_name;recv_device`."""
    return f"{attrs['send_device']};{attrs['tensor_name']};{attrs['recv_device']}"


def _send_kernel(ctx: KernelContext, x: np.ndarray | None = None) -> tuple:
    ctx.state.channels[channel_key(ctx.attrs)] = x
    return ()


def _recv_kernel(ctx: KernelContext) -> np.ndarray | tuple:
    key = channel_key(ctx.attrs)
    if key not in ctx.state.channels:
        raise ValueError(f"recv of '{key[0]}' from {key[1]} ran before its send")
    value = ctx.state.channels.pop(key)
    return () if ctx.attrs.get("type") is None else value


def _recv_infer(ctx: InferContext) -> TensorType | tuple:
    return () if ctx.attrs.get("type") is None else ctx.attrs["type"]


define("send", ("x?",), lambda ctx: (), _send_kernel, traits=(STATEFUL,), attrs=CHANNEL_ATTRS,
       no_grad="communication: placement inserts it after differentiation",
       doc="Sends its operand to `recv_device` under `tensor_name`; without an operand it "
           "only signals (a control edge across devices: it runs after its `ctrl` nodes).")
define("recv", (), _recv_infer, _recv_kernel, traits=(STATEFUL,),
       no_grad="communication: placement inserts it after differentiation",
       attrs=[*CHANNEL_ATTRS, AttrSpec("type", "type", None)],
       doc="Receives the tensor a matching `send` sent; without `type` it has no result and "
           "only waits for the matching operand-less `send` (a control edge across devices).")


# ---- nested bodies ----------------------------------------------------------------------
def _merge_types(ctx: InferContext, a: TensorType, b: TensorType, i: int) -> TensorType:
    if a.dtype != b.dtype or a.rank != b.rank:
        ctx.fail(f"branches disagree on result #{i}: {a} vs {b}")
    return TensorType(a.dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape,
                                                                              strict=True)))


def _if_infer(ctx: InferContext) -> tuple:
    cond = ctx.tensor(0)
    if not cond.dtype.is_bool or cond.num_elements not in (1, None):
        ctx.fail(f"the condition must be a single bool, found {cond}")
    operands = ctx.types[1:]
    bodies = {k: ctx.attrs[k] for k in ("then_branch", "else_branch")}
    for key, body in bodies.items():
        if body.input_types != list(operands):
            found = ", ".join(map(str, body.input_types))
            ctx.fail(f"{key} takes ({found}) but is given ({', '.join(map(str, operands))})")
    then_types, else_types = (b.output_types for b in bodies.values())
    if len(then_types) != len(else_types):
        ctx.fail(f"then_branch has {len(then_types)} results, else_branch {len(else_types)}")
    return tuple(_merge_types(ctx, a, b, i)
                 for i, (a, b) in enumerate(zip(then_types, else_types, strict=True)))


def _if_kernel(ctx: KernelContext, cond: np.ndarray, *operands: np.ndarray) -> tuple:
    body = ctx.attrs["then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"]
    return tuple(ctx.run_body(body, operands))


define("if", ("cond", "operands*"), _if_infer, _if_kernel, traits=(PURE, HAS_BODY),
       attrs=[AttrSpec("then_branch", "graph"), AttrSpec("else_branch", "graph")],
       vjp=control_grad.IF,
       doc="Runs then_branch or else_branch on the operands; bodies are closed graphs.")
