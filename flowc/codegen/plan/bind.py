"""Binding symbolic dims: each symbolic dim of the inputs gets a size or a bound.

Contract:
- A binding (`dims`, `Binding`) maps a symbol to a size (int >= 0: the artifact is static in
  it) or to a bound `(lo, hi)` with 0 <= lo <= hi (`lo == hi` is the size `lo`): the symbol
  stays symbolic in the graph and the artifact is to run any size in [lo, hi].
- `bind_dims(graph, batch, dims, strict=True)` returns (a new graph whose inputs have the
  bound sizes substituted and whose every node's result types are re-inferred by the
  registry's rules under those bindings, the bindings). `dims` binds symbols by name;
  `batch` (a size) binds every symbol that is the leading dim of some input and is not in
  `dims`. Symbols left unbound are one FlowcError listing every one of them (the input and
  axis where each first appears) and how to bind them: flowc never picks a size silently.
  A `?` input dim is a FlowcError naming the input; so is a name in `dims` that is no
  symbolic dim of an input (it would bind nothing), a negative size, a bound with lo > hi,
  or a size (for a bound: its `hi`) making an input break flowc's size limit
  (`ir/limits.py`). With `strict`, a result the rules cannot make static is a FlowcError
  naming the node (bounded symbols aside); without, it is left for the passes (constant
  folding may make it static) and `require_static`.
- `require_static(graph, note, bounded=())` re-infers every node and raises for any
  non-static result (dims over the symbols of `bounded` aside).
- `refuse_dynamic(graph, bounds, what)` raises, for a graph whose types still hold a
  bounded symbol, a FlowcError naming the first node, its op and the symbol with its
  bound: `what` (training artifacts, GPU targets ...) do not run dynamic dims yet; give
  the dim a size for a static artifact. `bounded_dims(bounds)`: the bounded symbols.
- `specialize(graph, feeds, fold=())` types each input as its feed array; the inputs named
  in `fold` become constants holding the feed's value (for inputs whose values decide
  result shapes: `value_dependent_inputs`). The artifact then runs exactly these shapes (its
  manifest states them).
- `value_dependent_inputs(*nodes)` names the graph inputs such result shapes wait for.
- `format_sizes(bindings)` is their text: `N=8, S=1..512` (sorted by name).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np

from flowc.codegen.plan.control import check_carried
from flowc.ir.attrs import Tensor
from flowc.ir.build import const_value, make_node
from flowc.ir.dims import symbols as dim_symbols
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, rebuild
from flowc.ir.limits import check_type
from flowc.ir.ops import get_op, infer_types, unknown_value_operands
from flowc.ir.types import TensorType, tensor_type_of

Bound = int | tuple[int, int]  # a size, or the range (lo, hi) a dim may take at run time


def normalize_binding(name: str, value: object) -> Bound:
    """`value` as a size or an `(lo, hi)` bound (`lo == hi` is the size); FlowcError naming
    `name` for anything else."""
    if isinstance(value, tuple | list):
        if len(value) != 2 or not all(_is_int(v) for v in value):
            raise FlowcError(f"dim {name}={value!r}: a bound is a pair (lo, hi) of sizes")
        lo, hi = (int(v) for v in value)
        if lo < 0 or hi < lo:
            raise FlowcError(f"dim {name}={lo}..{hi}: a bound needs 0 <= lo <= hi")
        return lo if lo == hi else (lo, hi)
    if not _is_int(value):
        raise FlowcError(f"dim {name}={value!r}: a dim is a size or a bound (lo, hi)")
    if int(value) < 0:
        raise FlowcError(f"dim {name}={value}: a dim size must be >= 0")
    return int(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def symbol_sizes(graph: Graph, batch: int | None, dims: Mapping[str, object]
                 ) -> dict[str, Bound]:
    """The size or bound of each symbolic dim of the inputs (see the module docstring)."""
    sizes = {k: normalize_binding(k, v) for k, v in dims.items()}
    if batch is not None and int(batch) < 0:
        raise FlowcError(f"batch={batch}: a batch size must be >= 0")
    unbound: dict[str, str] = {}
    for node in graph.inputs:
        t = node.types[0]
        if not isinstance(t, TensorType):
            raise FlowcError(f"input '{node.name}' is {t}: artifacts take only tensor inputs")
        for axis, dim in enumerate(t.shape):
            if dim is None:
                raise FlowcError(f"input '{node.name}' is {t}: dim {axis} has no size or name; "
                                 "give the model a static or named dim")
            if isinstance(dim, str) and dim not in sizes:
                if axis == 0 and batch is not None:
                    sizes[dim] = int(batch)
                else:
                    unbound.setdefault(dim, f"input '{node.name}' dim {axis}")
    symbols = {d for node in graph.inputs for d in node.types[0].shape if isinstance(d, str)}
    for name in dims:
        if name not in symbols:
            raise FlowcError(f"dim {name}={dims[name]}: no input of graph @{graph.name} has a "
                             f"symbolic dim {name} (its symbolic dims: "
                             f"{', '.join(sorted(symbols)) or 'none'})")
    if unbound:
        where = ", ".join(f"{sym} ({at})" for sym, at in unbound.items())
        first = next(iter(unbound))
        raise FlowcError(
            f"graph @{graph.name} has symbolic dims with no size: {where}; give each a size "
            f"or a bound: dims={{'{first}': SIZE}} or dims={{'{first}': (LO, HI)}} (CLI: "
            f"--dim {first}=SIZE or --dim {first}=LO..HI; --batch SIZE sizes leading dims)")
    return sizes


def retype(graph: Graph, types: Mapping[str, TensorType],
           constants: Mapping[str, np.ndarray] | None = None, note: str | None = None,
           bounded: Collection[str] = ()) -> Graph:
    """`graph` with the named inputs retyped (or, in `constants`, replaced by constants) and
    every node's types re-inferred; with `note`, a non-static result raises (naming it),
    unless each of its non-static dims is a symbol of `bounded`."""
    constants = constants or {}
    inputs, renamed, folded = [], {}, []
    for node in graph.inputs:
        if node.name in constants:
            const = make_node("constant", [], {"value": Tensor(constants[node.name])},
                              name=node.name, loc=node.loc)
            folded.append(const)
            renamed[node.out()] = const.out()
            continue
        new = node.replace(types=(types.get(node.name, node.types[0]),))
        inputs.append(new)
        renamed[node.out()] = new.out()

    def reinfer(node: Node, _old: tuple) -> Node | None:
        if node.op == "constant":
            return None  # kept as is, so `renamed` may point at folded inputs
        operands = tuple(None if v is None else renamed.get(v, v) for v in node.inputs)
        attrs = _retyped_bodies(node, operands)
        result = infer_types(get_op(node.op), [None if v is None else v.type for v in operands],
                             attrs, [const_value(v) for v in operands], node.label())
        for i, t in enumerate(result):
            if note is not None and isinstance(t, TensorType) and not all(
                    isinstance(d, int) or (d is not None and dim_symbols(d) <= set(bounded))
                    for d in t.shape):
                check_carried(node.replace(inputs=operands, types=result))
                inputs = value_dependent_inputs(node.replace(inputs=operands, types=result))
                because = ("" if not inputs else "; it depends on the value of input(s) "
                           + ", ".join(f"'{n}'" for n in inputs))
                raise FlowcError(f"node {node.label()}: result #{i} is {t} even with {note}"
                                 f"{because}; flowc artifacts need static shapes")
        return node.replace(inputs=operands, attrs=attrs, types=result)

    staged = Graph(graph.name, inputs, [*folded, *graph.nodes],
                   [(n, renamed.get(v, v)) for n, v in graph.outputs])
    return rebuild(staged, reinfer)


def _retyped_bodies(node: Node, operands: tuple) -> dict:
    """The attributes of `node`, an `if` or `loop` given its bodies retyped for the types
    its `operands` now have (a body an importer typed with symbolic dims, `?` where they
    met, gets the static ones: a compiled loop needs its carried types to agree)."""
    if node.op not in ("if", "loop"):
        return node.attrs
    # an `if` branch takes the operands after the predicate; a loop body takes the
    # iteration number and condition, then the operands after M and cond
    keys, skip = (("then_branch", "else_branch"), 0) if node.op == "if" else (("body",), 2)
    attrs = dict(node.attrs)
    for key in keys:
        body = attrs[key]
        given = operands[2:] if skip else operands[1:]
        types = {n.name: v.type for n, v in zip(body.inputs[skip:], given, strict=True)
                 if v is not None and isinstance(v.type, TensorType)}
        attrs[key] = retype(body, types)
    return attrs


def bind_dims(graph: Graph, batch: int | None = None, dims: Mapping[str, object] | None = None,
              strict: bool = True) -> tuple[Graph, dict[str, Bound]]:
    """(the graph with the sizes substituted in its inputs, the bindings); see the module
    docstring."""
    sizes = symbol_sizes(graph, batch, dims or {})
    types = {}
    for node in graph.inputs:
        t = node.types[0]
        types[node.name] = t.with_shape(tuple(sizes.get(d, d) if isinstance(d, str) and
                                              isinstance(sizes.get(d), int) else d
                                              for d in t.shape))
        at_bounds = t.with_shape(tuple(_largest(sizes.get(d, d)) if isinstance(d, str) else d
                                       for d in t.shape))
        check_type(at_bounds, f"input '{node.name}' bound with {format_sizes(sizes)}")
    bounded = {k for k, v in sizes.items() if isinstance(v, tuple)}
    return retype(graph, types, note=format_sizes(sizes) if strict else None,
                  bounded=bounded), sizes


def _largest(bound: Bound) -> int:
    return bound[1] if isinstance(bound, tuple) else bound


def bounded_dims(bounds: Mapping[str, Bound]) -> set[str]:
    return {k for k, v in bounds.items() if isinstance(v, tuple)}


def refuse_dynamic(graph: Graph, bounds: Mapping[str, Bound], what: str) -> None:
    """FlowcError naming the first node with a result typed by a bounded symbol (see the
    module docstring); nothing when `bounds` has none or no node uses one."""
    bounded = {k: v for k, v in bounds.items() if isinstance(v, tuple)}
    for node in graph.nodes:
        for t in node.types:
            if not isinstance(t, TensorType):
                continue
            for sym in (s for d in t.shape for s in sorted(dim_symbols(d))):
                if sym in bounded:
                    lo, hi = bounded[sym]
                    raise FlowcError(
                        f"node {node.label()}: op '{node.op}': dim {sym} is dynamic "
                        f"({lo}..{hi}) in its result {t}, and {what} do not run dynamic "
                        f"dims yet; give the dim a size for a static artifact "
                        f"(dims={{'{sym}': SIZE}}, CLI: --dim {sym}=SIZE)")


def value_dependent_inputs(*nodes: Node, static_too: bool = False) -> list[str]:
    """The graph inputs whose values the result shapes of `nodes` (and of the nodes they
    depend on) wait for: inputs upstream of an operand whose value a type rule asked for
    and did not get, at a node whose result is not static (the registry's rules decide;
    XLA calls these compile-time constant inputs). With `static_too`, at nodes with static
    results as well: the operands a kernel needs at compile time (a CumSum's axis)."""
    found: set[str] = set()
    for node in _upstream(nodes):
        if node.op != "input" and (static_too or any(
                isinstance(t, TensorType) and not t.is_static for t in node.types)):
            wanted = unknown_value_operands(
                get_op(node.op), [None if v is None else v.type for v in node.inputs],
                node.attrs, [const_value(v) for v in node.inputs])
            found.update(n.name for n in _upstream(node.inputs[i].node for i in wanted)
                         if n.op == "input")
    return sorted(found)


def _upstream(nodes) -> list[Node]:
    """`nodes` and every node they depend on, each once."""
    seen: dict[Node, None] = {}
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if node not in seen:
            seen[node] = None
            stack += [v.node for v in node.inputs if v is not None]
    return list(seen)


def require_static(graph: Graph, note: str, bounded: Collection[str] = ()) -> Graph:
    """`graph` with every type re-inferred; FlowcError for a result that is not static
    (dims over `bounded` symbols aside)."""
    return retype(graph, {}, note=note, bounded=bounded)


def specialize(graph: Graph, feeds: Mapping[str, np.ndarray], fold: Collection[str] = ()
               ) -> Graph:
    """`graph` typed for `feeds` (inputs named in `fold` become constants)."""
    types = {}
    for node in graph.inputs:
        if node.name not in feeds:
            raise FlowcError(f"graph @{graph.name}: input '{node.name}' is not fed")
        array = feeds[node.name]
        try:
            t, declared = tensor_type_of(array), node.types[0]
        except TypeError as exc:
            raise FlowcError(f"input '{node.name}': {exc}") from None
        if t.dtype != declared.dtype or t.rank != declared.rank:
            raise FlowcError(f"input '{node.name}' is {declared}, fed {t}")
        types[node.name] = t
    return retype(graph, types, {n: np.asarray(feeds[n]) for n in fold})


def format_sizes(sizes: Mapping[str, Bound]) -> str:
    return ", ".join(f"{k}={format_bound(v)}" for k, v in sorted(sizes.items())) \
        or "no symbolic dims"


def format_bound(bound: Bound) -> str:
    """`8` for a size, `1..64` for a bound."""
    return f"{bound[0]}..{bound[1]}" if isinstance(bound, tuple) else str(bound)

