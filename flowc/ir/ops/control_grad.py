"""Vjp rules of the control-flow ops `if` (core.py) and `loop` (control.py).

A body is differentiated by `flowc.ir.autodiff.backward` itself, on a copy of its node list
with one cotangent input per differentiated result (`_differentiate`); the backward nodes
that builds are then re-emitted into a new closed body (`_emit`), reading the forward
values they need as that body's inputs. As TF's while_v2 does, the forward node *grows*
(`VjpBuilder.grow`): its bodies also return those forward values, its residuals.

- `if`: the then body also returns its residuals and zeros in place of the else body's,
  and the other way round (the union of both branches' residuals, zeros for the branch
  not taken: empty along a dim that is not static, as the backward of the branch taken
  never reads them). The backward is an `if` on the same
  predicate whose bodies are the two branches' backward bodies, taking the operands they
  read, both residual lists and the cotangents.
- `loop`: needs a static bound (a constant trip count M, which `while_loop`'s
  `maximum_iterations` gives): an unbounded loop is refused. The body also returns each
  residual as a scan output, so the forward loop keeps them per iteration in stacks of M
  rows, static shapes that an artifact preallocates (TF's while_v2 accumulators): a loop
  without a condition runs n = M iterations; one with a condition may stop earlier, so its
  stacks are `padded` (rows past the n run are zeros) and it also scans out `iteration + 1`,
  whose maximum is n. The backward is a loop of as many iterations running in reverse
  (row n-1-j at step j) that carries the cotangents of the carried values and sums those
  of the float captures; it is bounded by the same constant M (its condition stops it
  after n steps), so it can be differentiated in turn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flowc.ir.attrs import Tensor
from flowc.ir.errors import GradientError
from flowc.ir.graph import Graph, Value
from flowc.ir.ops.registry import Vjp
from flowc.ir.types import TensorType, bool_, i64


def _is_float(t) -> bool:
    return isinstance(t, TensorType) and t.dtype.is_float


@dataclass
class _BodyGrad:
    """The reverse mode of one closed body: `nodes` (the backward nodes, reading the
    body's inputs, `cts` and forward values), `grads` (one per x, None: a zero) and
    `residuals` (values computed by the body's non-constant nodes that the backward reads,
    in order). `inputs_read` are the indices of the body inputs the backward reads."""

    body: Graph
    cts: list[Value]
    grads: list[Value | None]
    nodes: list
    residuals: list[Value]
    inputs_read: list[int]


def _differentiate(body: Graph, ys: list[int], xs: list[int],
                   ct_types: list[TensorType]) -> _BodyGrad:
    """Backward nodes of d(sum_k <ct_k, body result ys[k]>)/d body input xs[i]."""
    from flowc.ir.autodiff import backward

    work = Graph(f"{body.name}_grad", body.inputs, body.nodes)
    cts = [work.add_input(f"ct{k}", t) for k, t in zip(ys, ct_types, strict=True)]
    result = backward(work, [body.outputs[k][1] for k in ys],
                      [body.inputs[i].out() for i in xs], cts)
    computed, inputs = set(body.nodes), {n: i for i, n in enumerate(body.inputs)}
    read = [v for n in result.nodes for v in n.inputs if v is not None]
    read += [v for v in result.grads if v is not None]
    residuals = list(dict.fromkeys(v for v in read if v.node in computed
                                   and v.node.op != "constant"))
    inputs_read = sorted({inputs[v.node] for v in read if v.node in inputs})
    return _BodyGrad(body, cts, result.grads, result.nodes, residuals, inputs_read)


def _emit(grad: _BodyGrad, target: Graph, mapping: dict[Value, Value]) -> list[Value | None]:
    """Append `grad`'s backward nodes to `target`, each forward value they read replaced
    by `mapping[value]` (forward constants are copied; a stand-in whose type lost static
    dims is reshaped back to them); returns its grads in `target`."""
    from flowc.ir.build import make_node

    m = dict(mapping)

    def get(v: Value) -> Value:
        if v not in m:
            if v.node.op != "constant":
                raise GradientError(f"gradient of body @{grad.body.name}: backward reads "
                                    f"{v.node.label()}, which is not passed in")
            copy = target.append(v.node.replace())
            m.update(zip(v.node.outputs, copy.outputs, strict=True))
        new = m[v]
        if new.type != v.type and isinstance(v.type, TensorType) and v.type.is_static:
            # a less precise stand-in (a dim merged to `?`): bodies of `if` need exact types
            new = m[v] = _append(target, "reshape", new, _const(
                target, np.asarray(v.type.shape, np.int64)))
        return new

    for node in grad.nodes:
        new = make_node(node.op, [None if v is None else get(v) for v in node.inputs],
                        node.attrs, device=node.device, loc=node.loc)
        target.append(new)
        m.update(zip(node.outputs, new.outputs, strict=True))
    return [None if v is None else get(v) for v in grad.grads]


def _append(graph: Graph, op: str, *inputs: Value | None, **attrs) -> Value:
    from flowc.ir.build import make_node

    return graph.append(make_node(op, inputs, attrs)).out()


def _const(graph: Graph, array) -> Value:
    return _append(graph, "constant", value=Tensor(np.asarray(array)))


def _zeros_like(graph: Graph, value: Value) -> Value:
    """Zeros of `value`'s type in `graph`: an `expand` to its static shape, or to its
    `shape` when dynamic."""
    t = value.type
    return _zeros(graph, t) if t.is_static else _append(
        graph, "expand", _const(graph, np.zeros((), t.dtype.np)), _append(graph, "shape", value))


def _zeros(graph: Graph, t: TensorType) -> Value:
    """Zeros of type `t` in `graph`, a dim not static taken as 0 (an empty tensor)."""
    zero = _const(graph, np.zeros((), t.dtype.np))
    shape = [d if isinstance(d, int) else 0 for d in t.shape]
    return _append(graph, "expand", zero, _const(graph, np.asarray(shape, np.int64))) \
        if shape else zero


def _grown(body: Graph, extra: list[tuple[str, Value]]) -> Graph:
    """`body` also returning the `extra` values, each named from its given name, made
    unique among the body's names (feeds resolve output names before input names)."""
    graph = Graph(body.name, body.inputs, body.nodes, body.outputs)
    for name, value in extra:
        _output(graph, name, value)
    return graph


def _output(graph: Graph, name: str, value: Value) -> None:
    """Add output `value` under `name`, suffixed `_1`, `_2` ... where a name of the graph's
    inputs, nodes or outputs has it."""
    taken = {n.name for n in graph.all_nodes()} | {k for k, _ in graph.outputs}
    unique, k = name, 0
    while unique in taken:
        k += 1
        unique = f"{name}_{k}"
    graph.add_output(unique, value)


def _inputs(graph: Graph, prefix: str, types) -> list[Value]:
    return [graph.add_input(f"{prefix}{k}", t) for k, t in enumerate(types)]


# ---- if ---------------------------------------------------------------------------------
def _if_vjp(g, cts):
    branches = [g.attrs["then_branch"], g.attrs["else_branch"]]
    operands = range(1, g.num_inputs)
    xs = [i - 1 for i in operands if g.wants(i)]
    ys = [j for j, c in enumerate(cts) if c is not None]
    grads = [_differentiate(b, ys, xs, [cts[j].type for j in ys]) for b in branches]
    res = [gr.residuals for gr in grads]
    grown = []
    for side, branch in enumerate(branches):
        body = _grown(branch, [])
        for other, values in enumerate(res):
            for k, v in enumerate(values):
                if other != side:
                    v = _zeros(body, v.type)
                _output(body, f"residual{other}_{k}", v)
        grown.append(body)
    kept = g.grow({"then_branch": grown[0], "else_branch": grown[1]})
    read = sorted({i for gr in grads for i in gr.inputs_read}
                  | {i for i in xs if not g.in_type(i + 1).is_static})
    vjps = []
    for gr in grads:
        vjp = Graph(f"{gr.body.name}_vjp")
        xin = dict(zip(read, _inputs(vjp, "x", [g.in_type(i + 1) for i in read]), strict=True))
        rin = _inputs(vjp, "r", [v.type for v in kept])
        cin = _inputs(vjp, "ct", [c.type for c in gr.cts])
        mine = rin[:len(res[0])] if gr is grads[0] else rin[len(res[0]):]
        mapping = {gr.body.inputs[i].out(): v for i, v in xin.items()}
        mapping.update(zip(gr.residuals, mine, strict=True))
        mapping.update(zip(gr.cts, cin, strict=True))
        out = _emit(gr, vjp, mapping)
        for i, d in zip(xs, out, strict=True):
            if d is None:  # this branch does not reach operand i
                d = _zeros_like(vjp, xin[i]) if i in xin else _zeros(vjp, g.in_type(i + 1))
            _output(vjp, f"d{i}", d)
        vjps.append(vjp)
    node = g.emit("if", [g.input(0), *(g.input(i + 1) for i in read), *kept,
                         *(cts[j] for j in ys)],
                  {"then_branch": vjps[0], "else_branch": vjps[1]})
    result: list[Value | None] = [None] * g.num_inputs
    for k, i in enumerate(xs):
        result[i + 1] = node.out(k)
    return result


# ---- loop -------------------------------------------------------------------------------
def _loop_vjp(g, cts):
    body, label = g.attrs["body"], g.node.label()
    if g.const_input(0) is None:
        raise GradientError(f"gradients: loop {label} has no static bound on its "
                            "iterations; give it a constant trip count M (while_loop's "
                            "maximum_iterations; an ONNX Loop's M input)")
    captures = g.attrs["captures"]
    n_car = g.num_inputs - 2 - captures
    carried = [j for j in range(n_car) if _is_float(g.in_type(2 + j))]
    captured = [k for k in range(captures) if _is_float(g.in_type(2 + n_car + k))]
    scans = [s for s in range(len(body.outputs) - 1 - n_car) if cts[n_car + s] is not None]
    ys = [1 + j for j in carried] + [1 + n_car + s for s in scans]
    ct_types = [g.out_type(j) for j in carried] + [
        g.out_type(n_car + s).with_shape(g.out_type(n_car + s).shape[1:]) for s in scans]
    xs = [2 + j for j in carried] + [2 + n_car + k for k in captured]
    gr = _differentiate(body, ys, xs, ct_types)
    stacked = [body.inputs[i].out() for i in gr.inputs_read if 2 <= i < 2 + n_car]
    stacked += gr.residuals
    bound = int(np.asarray(g.const_input(0)).reshape(-1)[0])
    grown = _grown(body, [])
    early = g.node.inputs[1] is not None  # a condition may stop it before M iterations
    if early:  # row k of this scan: k + 1 for the iterations run, then zeros
        _output(grown, "iterations", _append(grown, "add", body.inputs[0].out(),
                                             _const(grown, np.int64(1))))
    for k, v in enumerate(stacked):
        _output(grown, f"residual{k}", v)
    # a node grown before (a gradient of a gradient) keeps its padded scans padded
    padded = g.attrs["padded"] + (len(grown.outputs) - len(body.outputs) if early else 0)
    kept = g.grow({"body": grown, "padded": padded})
    stacks = kept[1:] if early else kept
    if early and bound > 0:
        trips = g.op("reduce_max", kept[0], keepdims=0)
    else:
        trips = g.const(np.int64(0 if early else max(bound, 0)))
    a0 = [cts[j] if cts[j] is not None else g.zeros_like(g.node.out(j)) for j in carried]
    acc0 = [g.zeros_like(g.input(2 + n_car + k)) for k in captured]
    read_caps = [i - 2 - n_car for i in gr.inputs_read if i >= 2 + n_car]

    back = Graph(f"{body.name}_vjp")
    step, _ = _inputs(back, "step", [TensorType(i64, ()), TensorType(bool_, ())])
    a = _inputs(back, "a", [v.type for v in a0])
    acc = _inputs(back, "acc", [v.type for v in acc0])
    rows = _inputs(back, "r", [v.type for v in stacks])
    ct_rows = _inputs(back, "ct", [cts[n_car + s].type for s in scans])
    n = back.add_input("n", TensorType(i64, ()))
    caps = _inputs(back, "k", [g.in_type(2 + n_car + k) for k in read_caps])
    t = _append(back, "sub", _append(back, "sub", n, _const(back, np.int64(1))), step)
    true = _const(back, np.bool_(True))
    mapping = {body.inputs[0].out(): t, body.inputs[1].out(): true}
    row = [_append(back, "gather", r, t, axis=0) for r in rows]
    mapping.update(zip(stacked, row, strict=True))
    mapping.update({body.inputs[2 + n_car + k].out(): v for k, v in zip(read_caps, caps,
                                                                          strict=True)})
    mapping.update(zip(gr.cts, [*a, *(_append(back, "gather", c, t, axis=0)
                                      for c in ct_rows)], strict=True))
    d = _emit(gr, back, mapping)
    _output(back, "go", _append(back, "less", _append(back, "add", step, _const(
        back, np.int64(1))), n))
    for k, (v, dv) in enumerate(zip(a, d[:len(carried)], strict=True)):
        _output(back, f"d_a{k}", dv if dv is not None else _zeros_like(back, v))
    for k, (v, dv) in enumerate(zip(acc, d[len(carried):], strict=True)):
        _output(back, f"d_acc{k}", v if dv is None else _append(back, "add", v, dv))
    operands = [*stacks, *(cts[n_car + s] for s in scans), trips,
                *(g.input(2 + n_car + k) for k in read_caps)]
    go = g.op("greater", trips, g.const(np.int64(0)))
    node = g.emit("loop", [g.const(np.asarray(g.const_input(0))), go, *a0, *acc0, *operands],
                  {"body": back, "captures": len(operands)})
    result: list[Value | None] = [None] * g.num_inputs
    for k, i in enumerate(xs):
        if g.wants(i):
            result[i] = node.out(k)
    return result


IF = Vjp(_if_vjp, inputs="all")
LOOP = Vjp(_loop_vjp, inputs="all")
