"""Training with the TF-style graph API: `gradients` and optimizers with torch.optim's
update rules.

    with Graph("mlp") as g:
        ...
        loss = api.softmax_cross_entropy(logits, labels)
        train_op = train.Adam(lr=1e-3).minimize(loss)
    g.run([train_op, loss], feeds)   # one step

Contract: `SGD`, `Adam`, `AdamW`, `RMSProp` and `Adagrad` take torch.optim's
hyperparameters and defaults (Adam's `betas` are `beta1`, `beta2`; `lr` is a float or a
scalar float tensor, e.g. a placeholder fed each step) and compute, step for step, what
torch.optim's single-tensor update computes (same formulas, same order of operations, the
hyperparameter arithmetic folded in f64 where it is Python's in torch). Each update is built
from elementwise ops on `read_variable`s of the parameter and of its slot variables
(momentum, m, v ... zeros unless stated, named `<var>/<Optimizer>/<slot>`), ending in
`assign`s; every optimizer keeps an i64 step variable (`<Optimizer>/step`), read, incremented
and used by the updates (Adam's bias corrections, Adagrad's lr decay), whose `assign` runs
after every other assign of the step: `apply_gradients` returns that assign, the one op to
run. A parameter's assign runs after every read of it built so far (control edges), so a
fetch in the same run sees the value from before the step. SGD has no dampening (torch's
default 0); Adam and AdamW take `amsgrad`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from flowc.frontend.api import (
    Operation,
    Tensor,
    Variable,
    as_tensor,
    constant,
    control_dependencies,
    get_default_graph,
    name_scope,
    op,
)
from flowc.ir.errors import FlowcError
from flowc.ir.types import DType, TensorType, dtype

Scalar = float | Tensor  # a hyperparameter folded in Python, or a scalar graph value


def _handle(var: Variable | Tensor) -> Tensor:
    """The variable-handle tensor of a Variable (or a handle itself)."""
    handle = var.handle if isinstance(var, Variable) else var
    if not isinstance(handle, Tensor) or handle.node.op != "variable":
        raise FlowcError(f"expected a Variable, found {var!r}")
    return handle


def _reads(handle: Tensor) -> list[Tensor]:
    """Every `read_variable` of `handle` in its graph, in graph order."""
    return [Tensor(n.out(), handle.graph) for n in handle.graph.ir.nodes
            if n.op == "read_variable" and n.inputs[0] == handle.value]


def gradients(ys: Tensor | Sequence[Tensor], xs: Sequence[Variable | Tensor],
              grad_ys: Sequence[Tensor | None] | None = None) -> list[Tensor | None]:
    """d(sum_i <grad_ys[i], ys[i]>) / d xs[j] in the default graph (`Graph.gradients`);
    an x that is a Variable gets the sum of the gradients of all its reads. None where x
    does not reach ys."""
    graph = get_default_graph()
    ys = [ys] if isinstance(ys, Tensor) else list(ys)
    groups = [_reads(_handle(x)) if isinstance(x, Variable) or (
        isinstance(x, Tensor) and x.node.op == "variable") else [x] for x in xs]
    flat = [t for group in groups for t in group]
    grads = iter(graph.gradients(ys, flat, grad_ys) if flat else [])
    result = []
    for group in groups:
        parts = [g for g in (next(grads) for _ in group) if g is not None]
        total = parts[0] if parts else None
        for p in parts[1:]:
            total = total + p
        result.append(total)
    return result


def _lerp(start: Tensor, end: Tensor, weight: float) -> Tensor:
    """torch.lerp with a scalar weight, in its two-sided form (exact at both ends)."""
    if abs(weight) < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * (1 - weight)


@dataclass
class Optimizer:
    """The common part: slot and step variables, `apply_gradients`, `minimize`. A subclass
    gives `name`, its hyperparameters as fields (the spec options, `train_spec.py`), and
    `_update(p, g, var, step, assigns)`: the new value of parameter `var` from its current
    value `p`, its gradient `g` and the step count `step` (after this step's increment),
    appending the assigns of the slots it updates (`_slot`, `_slot_update`) to `assigns`."""

    name: ClassVar[str]
    lr: Scalar = 1e-3
    _slots: dict[tuple[str, str], Variable] = field(default_factory=dict, init=False,
                                                    repr=False, compare=False)
    _step: Variable | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.lr, Tensor):
            if self.lr.shape != () or not self.lr.dtype.is_float:
                raise FlowcError(f"{self.name}: lr must be a float or a scalar float tensor, "
                                 f"found {self.lr!r}")
        elif not self.lr >= 0:
            raise FlowcError(f"{self.name}: lr must be >= 0, found {self.lr}")
        self._check()

    def _check(self) -> None:
        """Refuse hyperparameters torch.optim refuses (FlowcError naming the option)."""

    def _require(self, ok: bool, option: str, what: str) -> None:
        if not ok:
            raise FlowcError(f"{self.name}: {option} must be {what}, found "
                             f"{getattr(self, option)}")

    @property
    def options(self) -> dict[str, Any]:
        """The hyperparameters by name (the fields a spec may set)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

    # ---- graph building -----------------------------------------------------------------
    def _lr(self, like: Tensor) -> Scalar:
        """lr in `like`'s dtype (a float stays a float)."""
        return _cast(self.lr, like.dtype)

    def _lr64(self) -> Scalar:
        """lr for scalar arithmetic done in f64, as torch does it in Python floats."""
        return _cast(self.lr, F64)

    def _slot(self, var: Tensor, slot: str, fill: float = 0.0) -> Tensor:
        """The current value of `var`'s slot variable `slot` (created filled with `fill`,
        named by the scope `_apply_one` opens)."""
        key = (var.node.name, slot)
        if key not in self._slots:
            t: TensorType = var.node.attrs["type"]
            if not t.is_static:
                raise FlowcError(f"{self.name}: variable '{var.node.name}' has dims {t}; "
                                 "slot variables need static dims")
            self._slots[key] = Variable(np.full(t.shape, fill, t.dtype.np), name=slot)
        return self._slots[key].read()

    def apply_gradients(self, grads_and_vars: Sequence[tuple[Tensor | None, Variable | Tensor]]
                        ) -> Operation:
        """The op that applies one step of updates to every variable with a gradient (a
        None gradient is skipped; FlowcError when none has one)."""
        pairs = [(g, _handle(v)) for g, v in grads_and_vars if g is not None]
        if not pairs:
            raise FlowcError(f"{self.name}: no gradient for any variable "
                             f"({', '.join(_handle(v).node.name for _, v in grads_and_vars)})")
        if self._step is None:
            with name_scope(self.name):
                self._step = Variable(np.int64(0), name="step")
        step = self._step.read() + 1
        assigns = []
        for grad, var in pairs:
            assigns.extend(self._apply_one(grad, var, step))
        with control_dependencies(assigns):
            return self._step.assign(step)

    def _apply_one(self, grad: Tensor, var: Tensor, step: Tensor) -> list[Operation]:
        before = _reads(var)
        t = var.node.attrs["type"]
        grad = as_tensor(grad)
        if grad.dtype != t.dtype or grad.shape != t.shape:
            raise FlowcError(f"{self.name}: the gradient of '{var.node.name}' is "
                             f"{grad.value.type}, expected {t}")
        with name_scope(var.node.name), name_scope(self.name):
            param = var.graph.add("read_variable", [var], {}, "Read")
            slot_assigns: list[Operation] = []
            new = self._update(param, grad, var, step, slot_assigns)
            with control_dependencies(before):
                return [*slot_assigns, var.graph.add("assign", [var, new], {}, "Assign")]

    def _update(self, p: Tensor, g: Tensor, var: Tensor, step: Tensor,
                assigns: list[Operation]) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} gives no update rule")

    def _slot_update(self, var: Tensor, slot: str, value: Tensor,
                     assigns: list[Operation]) -> Tensor:
        """Assign `value` to `var`'s slot `slot` (recorded in `assigns`); `value`."""
        assigns.append(self._slots[(var.node.name, slot)].assign(value))
        return value

    def minimize(self, loss: Tensor, var_list: Sequence[Variable | Tensor] | None = None
                 ) -> Operation:
        """`apply_gradients` of d loss / d var for each var of `var_list` (default: every
        float variable of the graph that the loss reads; listed ones must reach it)."""
        graph = loss.graph
        if var_list is None:
            handles = [Tensor(n.out(), graph) for n in graph.ir.nodes if n.op == "variable"
                       and n.attrs["type"].dtype.is_float]
        else:
            handles = [_handle(v) for v in var_list]
        grads = gradients(loss, handles)
        if var_list is not None:
            for g, h in zip(grads, handles, strict=True):
                if g is None:
                    raise FlowcError(f"{self.name}.minimize: variable '{h.node.name}' does not "
                                     f"reach the loss {loss!r}")
        return self.apply_gradients(list(zip(grads, handles, strict=True)))


F64 = dtype("f64")


def _cast(x: Scalar, dt: DType) -> Scalar:
    """A scalar tensor `x` in dtype `dt` (a float stays a float)."""
    return op("cast", x, to=dt) if isinstance(x, Tensor) and x.dtype != dt else x


def _pow(base: float, step: Tensor) -> Tensor:
    """base ** step (step an i64 count), in f64."""
    return op("pow", constant(base, F64), op("cast", step, to=F64))


@dataclass
class SGD(Optimizer):
    """torch.optim.SGD (dampening 0)."""

    name: ClassVar[str] = "SGD"
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0

    def _check(self) -> None:
        self._require(self.momentum >= 0, "momentum", ">= 0")
        self._require(self.weight_decay >= 0, "weight_decay", ">= 0")
        if self.nesterov and self.momentum <= 0:
            raise FlowcError(f"{self.name}: nesterov needs momentum > 0")

    def _update(self, p, g, var, step, assigns):
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = self._slot_update(var, "momentum",
                                    self._slot(var, "momentum") * self.momentum + g, assigns)
            g = g + self.momentum * buf if self.nesterov else buf
        return p - self._lr(p) * g


@dataclass
class Adam(Optimizer):
    """torch.optim.Adam (weight decay added to the gradient; AdamW decouples it)."""

    name: ClassVar[str] = "Adam"
    decoupled: ClassVar[bool] = False
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False

    def _check(self) -> None:
        self._require(0 <= self.beta1 < 1, "beta1", "in [0, 1)")
        self._require(0 <= self.beta2 < 1, "beta2", "in [0, 1)")
        self._require(self.eps >= 0, "eps", ">= 0")
        self._require(self.weight_decay >= 0, "weight_decay", ">= 0")

    def _update(self, p, g, var, step, assigns):
        if self.weight_decay and self.decoupled:
            p = p * _cast(1 - self._lr64() * self.weight_decay, p.dtype)
        elif self.weight_decay:
            g = g + self.weight_decay * p
        m = self._slot_update(var, "m", _lerp(self._slot(var, "m"), g, 1 - self.beta1), assigns)
        v = self._slot_update(var, "v", self._slot(var, "v") * self.beta2
                              + (1 - self.beta2) * g * g, assigns)
        if self.amsgrad:
            v = self._slot_update(var, "v_max", op("max", self._slot(var, "v_max"), v), assigns)
        step_size = _cast(self._lr64() / (1 - _pow(self.beta1, step)), p.dtype)
        bias2_sqrt = _cast(op("sqrt", 1 - _pow(self.beta2, step)), p.dtype)
        denom = op("sqrt", v) / bias2_sqrt + self.eps
        return p - step_size * (m / denom)


@dataclass
class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay (p *= 1 - lr * weight_decay)."""

    name: ClassVar[str] = "AdamW"
    decoupled: ClassVar[bool] = True
    weight_decay: float = 1e-2


@dataclass
class RMSProp(Optimizer):
    """torch.optim.RMSprop."""

    name: ClassVar[str] = "RMSProp"
    lr: Scalar = 1e-2
    alpha: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0
    centered: bool = False

    def _check(self) -> None:
        for option in ("alpha", "eps", "weight_decay", "momentum"):
            self._require(getattr(self, option) >= 0, option, ">= 0")

    def _update(self, p, g, var, step, assigns):
        if self.weight_decay:
            g = g + self.weight_decay * p
        sq = self._slot_update(var, "square_avg", self._slot(var, "square_avg") * self.alpha
                               + (1 - self.alpha) * g * g, assigns)
        if self.centered:
            mean = self._slot_update(var, "grad_avg",
                                     _lerp(self._slot(var, "grad_avg"), g, 1 - self.alpha),
                                     assigns)
            avg = op("sqrt", sq - mean * mean)
        else:
            avg = op("sqrt", sq)
        avg = avg + self.eps
        if self.momentum > 0:
            buf = self._slot_update(var, "momentum", self._slot(var, "momentum") * self.momentum
                                    + g / avg, assigns)
            return p - self._lr(p) * buf
        return p - self._lr(p) * (g / avg)


@dataclass
class Adagrad(Optimizer):
    """torch.optim.Adagrad."""

    name: ClassVar[str] = "Adagrad"
    lr: Scalar = 1e-2
    lr_decay: float = 0.0
    weight_decay: float = 0.0
    initial_accumulator_value: float = 0.0
    eps: float = 1e-10

    def _check(self) -> None:
        for option in ("lr_decay", "weight_decay", "initial_accumulator_value", "eps"):
            self._require(getattr(self, option) >= 0, option, ">= 0")

    def _update(self, p, g, var, step, assigns):
        if self.weight_decay:
            g = g + self.weight_decay * p
        lr = self._lr(p)
        if self.lr_decay:
            lr = _cast(self._lr64() / (1 + (op("cast", step, to=F64) - 1) * self.lr_decay),
                       p.dtype)
        total = self._slot_update(var, "sum", self._slot(var, "sum",
                                                        self.initial_accumulator_value)
                                  + g * g, assigns)
        return p - lr * (g / (op("sqrt", total) + self.eps))


OPTIMIZERS: dict[str, type[Optimizer]] = {
    cls.name.lower(): cls for cls in (SGD, Adam, AdamW, RMSProp, Adagrad)}

__all__ = ["OPTIMIZERS", "SGD", "Adagrad", "Adam", "AdamW", "Optimizer", "RMSProp",
           "gradients"]
