"""A TensorFlow-paper-style Python graph builder that produces flowc IR.

    with flowc.frontend.Graph("mlp") as g:
        x = placeholder("f32", ("N", 784), name="x")
        w = Variable(np.zeros((784, 10), np.float32), name="w")
        with name_scope("fc"), device("cpu:0"):
            y = relu(x @ w.read() + constant(np.ones(10, np.float32)))
        g.output("y", y)
    ir_graph = g.ir

Contract: every op of the registry is a function here (`add`, `conv`, `reduce_sum` ...,
also `op("name", *inputs, **attrs)`); tensors overload `+ - * / @`, comparisons, unary `-`
and `[...]` slicing. Nodes get unique TF-style names (`fc/Add`, `fc/Add_1`) and the user's
`file:line` as location; a shape or dtype error raises FlowcError naming the op, the node
and that line. `device`, `control_dependencies`, `colocate_with` and `name_scope` are
context managers that apply to the nodes built inside them. `Graph.gradients(ys, xs)`
adds the nodes of d ys / d xs (reverse mode, `flowc.ir.autodiff`). `cond` and
`while_loop` (`flowc.frontend.control`, exported by `flowc.frontend`) build bodies with
this API: inside one, an op on a tensor of an enclosing graph is built in the body
(`builder`), which captures that tensor (`Graph.local`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from flowc.frontend.partial import partial_graph
from flowc.ir import Graph as IRGraph
from flowc.ir import TensorType, Value, dtype
from flowc.ir.autodiff import gradients
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError, InferError
from flowc.ir.graph import Node
from flowc.ir.interpret import State, interpret
from flowc.ir.ops import OPS

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DEFAULT: list[Graph] = []


def user_location() -> str | None:
    """`file:line` of the innermost caller outside the flowc package."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_DIR + os.sep) and "contextlib" not in path:
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


class Graph:
    """Builds one IR graph; use as `with Graph() as g:` to make it the default."""

    def __init__(self, name: str = "main"):
        self.ir = IRGraph(name)
        self._used: dict[str, int] = {}
        self._taken: set[str] = set()  # names of nodes the builder did not make (`wrap`)
        self._scopes: list[str] = []
        self._devices: list[str | None] = []
        self._ctrl: list[list[Node]] = []
        self.state = State()

    def __enter__(self) -> Graph:
        _DEFAULT.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _DEFAULT.pop()

    @classmethod
    def wrap(cls, ir: IRGraph) -> Graph:
        """A builder that appends to an existing IR graph (an imported model): its node
        names stay taken, so new nodes never reuse one."""
        builder = cls(ir.name)
        builder.ir = ir
        builder._taken = {n.name for n in ir.all_nodes() if n.name}
        return builder

    def unique_name(self, base: str) -> str:
        full = "/".join([*self._scopes, base])
        while True:
            count = self._used.get(full, 0)
            self._used[full] = count + 1
            name = full if count == 0 else f"{full}_{count}"
            if name not in self._taken:
                return name

    def current_device(self) -> str | None:
        """The device of the innermost `device(...)` block naming one (None: unplaced)."""
        return next((d for d in reversed(self._devices) if d is not None), None)

    def add(self, op: str, inputs: Sequence[Any], attrs: dict[str, Any],
            name: str | None = None) -> Any:
        """Build a node of `op`; its Tensor, tuple of Tensors, or Operation (no results)."""
        return self.add_named(op, inputs, attrs, self.unique_name(name or _op_display_name(op)))

    def add_named(self, op: str, inputs: Sequence[Any], attrs: dict[str, Any],
                  node_name: str) -> Any:
        """`add` with the node's full name given (taken by `unique_name` before)."""
        values = [None if t is None else self.local(as_tensor(t, self)).value for t in inputs]
        loc = user_location()
        device = self.current_device()
        ctrl = [n for deps in self._ctrl for n in deps]
        try:
            node = make_node(op, values, attrs, name=node_name, device=device, ctrl=ctrl,
                             loc=loc)
        except (InferError, TypeError) as exc:
            raise FlowcError(f"{exc}" if isinstance(exc, InferError) else
                             f"'{node_name}' ({op}) at {loc}: {exc}") from None
        return _result(self.ir.append(node), self)

    def output(self, name: str, tensor: Tensor) -> None:
        """Declare a fetchable graph output."""
        self.ir.add_output(name, self.local(as_tensor(tensor, self)).value)

    def encloses(self, other: Graph) -> bool:
        """Whether `other` is this graph (a body nested in a graph encloses it too)."""
        return other is self

    def local(self, tensor: Tensor) -> Tensor:
        """`tensor` as a value of this graph; a tensor of another graph is refused (a body,
        `flowc.frontend.control`, captures those of the graphs around it)."""
        if tensor.graph is not self:
            raise FlowcError(f"tensor '{tensor.name}' belongs to graph @{tensor.graph.ir.name}"
                             f", not to @{self.ir.name} where it is used")
        return tensor

    def run(self, fetches: Sequence[Tensor | str | Node | Operation],
            feeds: dict[Any, Any] | None = None) -> list[Any]:
        """Interpret just what `fetches` need; feeds may name placeholders or any tensor."""
        names = [_key(f) for f in fetches]
        results = interpret(self.ir, {_key(k): v for k, v in (feeds or {}).items()}, names,
                            self.state)
        return [results.get(n) for n in names]

    def gradients(self, ys: Sequence[Tensor], xs: Sequence[Tensor],
                  grad_ys: Sequence[Tensor | None] | None = None) -> list[Tensor | None]:
        """d(sum_i <grad_ys[i], ys[i]>)/d xs[j] for each j as new nodes of this graph
        (`flowc.ir.autodiff.gradients`, TensorFlow's `tf.gradients`), named
        `gradients/...`; None where xs[j] does not reach ys (a symbolic zero). Seeds
        default to ones. Raises FlowcError naming a node that cannot be differentiated."""
        grads = gradients(self.ir, [as_tensor(y, self).value for y in ys],
                          [as_tensor(x, self).value for x in xs],
                          None if grad_ys is None else [
                              None if g is None else as_tensor(g, self).value for g in grad_ys],
                          lambda op: self.unique_name(f"gradients/{_op_display_name(op)}"))
        return [None if g is None else Tensor(g, self) for g in grads]

    def prune(self, feeds: Sequence[Tensor | str], fetches: Sequence[Tensor | str | Operation]
              ) -> IRGraph:
        """The IR graph that computes `fetches` from `feeds` (any tensors), for compiling a
        partial run; see `flowc.frontend.partial.partial_graph` for its inputs' names."""
        return partial_graph(self.ir, [_key(f) for f in feeds], [_key(f) for f in fetches])


def _key(item: Any) -> str:
    """The tensor name of a fetch or feed: a str as it is, a Tensor as `node` / `node:i`."""
    if isinstance(item, str):
        return item
    if isinstance(item, Operation):
        return item.node.name
    value = item.value
    return value.node.name if value.index == 0 else f"{value.node.name}:{value.index}"


def get_default_graph() -> Graph:
    if not _DEFAULT:
        raise FlowcError("no default graph: build ops inside `with flowc.frontend.Graph():`")
    return _DEFAULT[-1]


class Tensor:
    """One result of a node in a frontend graph."""

    __array_priority__ = 1000  # numpy defers to our operators

    def __init__(self, value: Value, graph: Graph):
        self.value, self.graph = value, graph

    @property
    def name(self) -> str:
        return f"{self.value.node.name}:{self.value.index}"

    @property
    def dtype(self):
        return self.value.type.dtype

    @property
    def shape(self) -> tuple:
        return self.value.type.shape

    @property
    def node(self) -> Node:
        return self.value.node

    def __repr__(self) -> str:
        return f"<Tensor '{self.name}' {self.value.type}>"

    def _binary(self, op: str, other: Any, reverse: bool = False) -> Tensor:
        graph = builder(self.graph)
        other = as_tensor(other, graph, like=self)
        a, b = (other, self) if reverse else (self, other)
        return graph.add(op, [a, b], {})

    def __add__(self, o): return self._binary("add", o)
    def __radd__(self, o): return self._binary("add", o, True)
    def __sub__(self, o): return self._binary("sub", o)
    def __rsub__(self, o): return self._binary("sub", o, True)
    def __mul__(self, o): return self._binary("mul", o)
    def __rmul__(self, o): return self._binary("mul", o, True)
    def __truediv__(self, o): return self._binary("div", o)
    def __rtruediv__(self, o): return self._binary("div", o, True)
    def __matmul__(self, o): return self._binary("matmul", o)
    def __rmatmul__(self, o): return self._binary("matmul", o, True)
    def __pow__(self, o): return self._binary("pow", o)
    def __lt__(self, o): return self._binary("less", o)
    def __gt__(self, o): return self._binary("greater", o)
    def __le__(self, o): return self._binary("less_or_equal", o)
    def __ge__(self, o): return self._binary("greater_or_equal", o)
    def __neg__(self): return builder(self.graph).add("neg", [self], {})
    def __abs__(self): return builder(self.graph).add("abs", [self], {})

    __hash__ = object.__hash__  # == stays identity: Tensors are dictionary keys for feeds

    def __getitem__(self, index: Any) -> Tensor:
        return _slice(self, index)


class Operation:
    """A node without results (such as an assign): something to run or depend on."""

    def __init__(self, node: Node):
        self.node = node

    def __repr__(self) -> str:
        return f"<Operation '{self.node.name}' ({self.node.op})>"


def builder(graph: Graph) -> Graph:
    """Where an op on a tensor of `graph` is built: the default graph when it is a body
    nested in `graph` (the tensor is then captured), else `graph`."""
    top = _DEFAULT[-1] if _DEFAULT else None
    return top if top is not None and top.encloses(graph) else graph


def _result(node: Node, graph: Graph) -> Any:
    if not node.types:
        return Operation(node)
    outs = [Tensor(v, graph) for v in node.outputs]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _op_display_name(op: str) -> str:
    """TF-style node names: `matmul` -> `MatMul` when ONNX names the op, else CamelCase."""
    return OPS[op].onnx or "".join(part.capitalize() for part in op.split("_"))


def as_tensor(value: Any, graph: Graph | None = None, like: Tensor | None = None) -> Tensor:
    """A Tensor for `value`: itself, or a new constant (in `like`'s dtype for scalars)."""
    if isinstance(value, Tensor):
        return value
    graph = graph or get_default_graph()
    if like is not None and not isinstance(value, np.ndarray):
        value = np.asarray(value, dtype=like.dtype.np)
    return constant(value, graph=graph)


# ---- public builders --------------------------------------------------------------------
def placeholder(dt: Any, shape: Sequence[Any], name: str | None = None) -> Tensor:
    """A graph input (feed) of dtype `dt` and `shape`; a str dim is symbolic (`"N"`)."""
    graph = get_default_graph()
    input_name = name or graph.unique_name("Placeholder")
    if any(n.name == input_name for n in graph.ir.all_nodes()):
        raise FlowcError(f"placeholder name '{input_name}' is already used")
    return Tensor(graph.ir.add_input(input_name, TensorType(dtype(dt), tuple(shape)),
                                     loc=user_location()), graph)


def constant(value: Any, dt: Any = None, name: str | None = None,
             graph: Graph | None = None) -> Tensor:
    """A constant tensor; Python floats default to f32 and ints to i64."""
    graph = graph or get_default_graph()
    array = np.asarray(value, dtype=None if dt is None else dtype(dt).np)
    if dt is None and array.dtype == np.float64 and not isinstance(value, np.ndarray):
        array = array.astype(np.float32)
    return graph.add("constant", [], {"value": array}, name or "Const")


class Variable:
    """State that lives across runs, initialized to `initial_value`."""

    def __init__(self, initial_value: Any, name: str | None = None, dt: Any = None):
        graph = get_default_graph()
        init = np.asarray(initial_value, dtype=None if dt is None else dtype(dt).np)
        if dt is None and init.dtype == np.float64 and not isinstance(initial_value,
                                                                      np.ndarray):
            init = init.astype(np.float32)
        node_name = graph.unique_name(name or "Variable")
        t = TensorType(dtype(init.dtype), init.shape)
        node = make_node("variable", [], {"type": t, "shared_name": node_name, "init": init},
                         name=node_name, loc=user_location(), device=graph.current_device())
        graph.ir.append(node)
        self.handle, self.graph, self.type = Tensor(node.out(), graph), graph, t

    def read(self) -> Tensor:
        """The variable's value, read in the variable's graph: inside a `cond`/`while_loop`
        body too, which then captures the value (read once per run, before the node runs;
        gradients reach the variable through it)."""
        return self.graph.add("read_variable", [self.handle], {}, "Read")

    def assign(self, value: Any) -> Operation:
        return self._update("assign", value)

    def assign_add(self, delta: Any) -> Operation:
        return self._update("assign_add", delta)

    def assign_sub(self, delta: Any) -> Operation:
        return self._update("assign_sub", delta)

    def _update(self, op: str, value: Any) -> Operation:
        if builder(self.graph) is not self.graph:
            raise FlowcError(f"{op} of variable '{self.handle.node.name}' at {user_location()}"
                             ": a cond/while_loop body cannot assign variables (its results "
                             "are all it computes)")
        if not isinstance(value, Tensor):
            value = constant(np.asarray(value, dtype=self.type.dtype.np), graph=self.graph)
        return self.graph.add(op, [self.handle, value], {}, _op_display_name(op))


@contextlib.contextmanager
def _pushed(stack: list, item: Any) -> Iterator[None]:
    """`item` on top of one of the default graph's context stacks while the block runs."""
    stack.append(item)
    try:
        yield
    finally:
        stack.pop()


def name_scope(name: str) -> contextlib.AbstractContextManager[None]:
    """Nodes built inside are named `name/...`."""
    return _pushed(get_default_graph()._scopes, name)


def device(name: str | None) -> contextlib.AbstractContextManager[None]:
    """Nodes built inside run on `name` (`cpu:0`, `gpu:0`, `/job:worker/task:1/cpu:0`)."""
    return _pushed(get_default_graph()._devices, name)


def colocate_with(tensor: Tensor | Variable) -> contextlib.AbstractContextManager[None]:
    """Nodes built inside go where `tensor`'s node goes (its device, when it has one)."""
    node = tensor.handle.node if isinstance(tensor, Variable) else tensor.node
    return device(node.device)


def control_dependencies(deps: Sequence[Tensor | Operation]
                         ) -> contextlib.AbstractContextManager[None]:
    """Nodes built inside run after every node in `deps`."""
    return _pushed(get_default_graph()._ctrl, [d.node for d in deps])


def op(name: str, *inputs: Any, node_name: str | None = None, **attrs: Any) -> Any:
    """Apply registry op `name` (snake-case) to `inputs` with `attrs` (`check_attrs`)."""
    if name not in OPS:
        raise FlowcError(f"unknown op '{name}'")
    inputs_list, attrs = check_attrs(name, list(inputs), attrs)
    return get_default_graph().add(name, inputs_list, attrs, node_name)


_AXES_ALIASES = ("axis", "axes")  # TF's and ONNX's spellings of an `axes` operand
_TF_NAMES = {("cast", "dtype"): "to"}  # tf.cast(x, dtype=...)


def check_attrs(name: str, inputs: list[Any], attrs: dict[str, Any]
                ) -> tuple[list[Any], dict[str, Any]]:
    """The operands and attributes of op `name` from a call's keywords: the registry's
    attribute names; for an op with an `axes` operand (reductions, squeeze, unsqueeze)
    `axis=` or `axes=` (an int or a list) gives that operand; `keepdims` (a bool or an int;
    TF 1.x's `keep_dims` too) is the registry's int; TF's `cast(x, dtype=)` and
    `gelu(x, approximate=True/False)` are accepted. The defaults stay the registry's
    (ONNX's): reductions keep the reduced dims unless `keepdims=False`. Any other keyword is
    a FlowcError naming the op and the names it accepts."""
    definition = OPS[name]
    operands = [i.rstrip("?*") for i in definition.inputs]
    attrs = dict(attrs)
    given = [k for k in _AXES_ALIASES if k in attrs and k not in definition.attr_specs]
    if given and "axes" in operands:
        if len(given) > 1:
            raise FlowcError(f"{name}: give the axes once, as axis= or axes=, not both")
        index = operands.index("axes")
        axes = attrs.pop(given[0])
        if len(inputs) > index and inputs[index] is not None:
            raise FlowcError(f"{name}: the axes are given twice, as operand {index} and as "
                             f"{given[0]}=")
        inputs = inputs + [None] * (index - len(inputs))
        inputs[index:index + 1] = [constant(np.array(axes, np.int64).reshape(-1))]
    aliases = {k: v for (op_name, k), v in _TF_NAMES.items() if op_name == name}
    if "keepdims" in definition.attr_specs:
        aliases["keep_dims"] = "keepdims"  # TF 1.x's spelling
    for alias, real in aliases.items():
        if alias in attrs:
            if real in attrs:
                raise FlowcError(f"{name}: give {real} once, not as {real}= and {alias}=")
            attrs[real] = attrs.pop(alias)
    if isinstance(attrs.get("keepdims"), bool):
        attrs["keepdims"] = int(attrs["keepdims"])
    if name == "cast" and "to" in attrs and not isinstance(attrs["to"], str):
        attrs["to"] = dtype(attrs["to"])  # np.float64, np.dtype("f4") ...
    if name == "gelu" and isinstance(attrs.get("approximate"), bool):  # tf.nn.gelu's bool
        attrs["approximate"] = "tanh" if attrs["approximate"] else "none"
    unknown = [k for k in attrs if k not in definition.attr_specs]
    if unknown:
        accepted = list(definition.attr_specs)
        if "axes" in operands:
            accepted += [f"{a} (the axes operand)" for a in _AXES_ALIASES]
        accepted += list(aliases)
        takes = f"it takes {', '.join(accepted)}" if accepted else "it takes no attributes"
        where = f" at {loc}" if (loc := user_location()) else ""
        raise FlowcError(f"{name}{where}: unknown attribute{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(repr(k) for k in unknown)}; {takes}")
    return inputs, attrs


def _slice(x: Tensor, index: Any) -> Tensor:
    """numpy basic indexing (ints and slices with steps) via slice/squeeze ops."""
    index = index if isinstance(index, tuple) else (index,)
    starts, ends, axes, steps, squeeze = [], [], [], [], []
    for axis, item in enumerate(index):
        if isinstance(item, int):
            starts.append(item)
            ends.append(item + 1 if item != -1 else sys.maxsize)
            steps.append(1)
            squeeze.append(axis)
        elif isinstance(item, slice):
            step = 1 if item.step is None else item.step
            default_start, default_end = (0, sys.maxsize) if step > 0 else (-1, -sys.maxsize)
            starts.append(default_start if item.start is None else item.start)
            ends.append(default_end if item.stop is None else item.stop)
            steps.append(step)
        else:
            raise FlowcError(f"indexing a tensor takes ints and slices, not {item!r}")
        axes.append(axis)
    consts = [constant(np.array(v, np.int64)) for v in (starts, ends, axes, steps)]
    result = op("slice", x, *consts)
    if squeeze:
        result = op("squeeze", result, constant(np.array(squeeze, np.int64)))
    return result


def __getattr__(name: str) -> Any:
    """`flowc.frontend.api.relu(x)` and friends: one function per registry op."""
    if name in OPS:
        def apply(*inputs: Any, name_: str | None = None, **attrs: Any) -> Any:
            return op(name, *inputs, node_name=name_, **attrs)

        apply.__name__ = name
        apply.__doc__ = OPS[name].doc
        return apply
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
