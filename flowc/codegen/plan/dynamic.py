"""Programs with dims bounded at compile time and given at run time (issue [12]).

Contract:
- `dim_table(graph, bounds)`: the artifact's dim table, one `RunDim(name, lo, hi, input,
  axis)` per bounded symbol of `bounds` (sorted by name: the order of the entry's `dims`
  array), read at run time from the first input axis whose dim is that bare symbol. An
  input axis typed by an expression of a bounded symbol (`N*S`) is a FlowcError naming
  the input and axis (the runtime reads dims from input axes).
- `at_bounds(graph, table)`: `graph` with every bounded symbol replaced by its upper bound
  in every type (fused bodies too), nodes and values in the same order: the graph the
  arena is planned for. The dims of a flowc graph grow with its symbols (products, sums
  and divisions of sizes), so each buffer at the bounds is the largest it gets; offsets
  are fixed at those sizes, and a run of smaller dims uses the front of each buffer.
- `attach_dynamic(program, graph, table)`: `program` (built from `at_bounds(graph)`) made
  to run `graph`: each kernel call gets the kernel of the symbolic node it runs (its body
  with symbolic dims; kernels of equal bodies share a symbol), `program.dims` the table
  and `program.symbolic_inputs`/`symbolic_outputs` the symbolic types. What cannot run
  dynamic is a FlowcError naming node, op and dim: control steps, variable copies,
  transfers (partitions), and a kernel that would write an operand's buffer in place
  where its symbolic body does not allow it.
- `kernel_dims(program, kernel)`: the C array a call of `kernel` passes as `dims` (None
  for a kernel with static dims): `dims` when it takes every dim of the table, else
  `dims_SYM`, which `dims_locals(program)` declares at the top of the entry.
- `c_dim(dim, table)` / `c_bytes(t, table)`: a dim / the byte size of a tensor type as a
  C `int64_t` / `size_t` expression over the entry's `dims`.
- `dim_indices(t, table)`: the C initializer of a tensor descriptor's `dim_of` (per axis:
  the index of the dim that is the axis, -1 for a fixed size; an axis of an expression,
  an output's, is 0: it varies, `output_shapes` gives it). `dims_tables(program)`: the
  model file's `dims` table and `output_shapes` function (nothing for a static program).
  `dims_note(program)`: a line per dim (`N: 1..64, input 'x' axis 0`), then the symbolic
  shape of each input and output, for the header.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from flowc.codegen.emit.c_text import c_string
from flowc.codegen.kernels import dim_symbols, kernel_operands, single_node_body
from flowc.codegen.plan.memplan import in_place_inputs
from flowc.ir.dims import fold, is_symbol, substitute, symbols
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, rebuild
from flowc.ir.types import TensorType


@dataclass(frozen=True)
class RunDim:
    """A dim given at run time: its bounds and the input axis it is read from."""

    name: str
    lo: int
    hi: int
    input: int
    axis: int


def dim_table(graph: Graph, bounds: Mapping[str, object]) -> list[RunDim]:
    bounded = {k: v for k, v in bounds.items() if isinstance(v, tuple)}
    found: dict[str, tuple[int, int]] = {}
    for i, node in enumerate(graph.inputs):
        for axis, d in enumerate(node.types[0].shape):
            if is_symbol(d):
                found.setdefault(d, (i, axis))
            elif symbols(d) & set(bounded):
                raise FlowcError(f"input '{node.name}' axis {axis} is {d}: a dynamic input dim "
                                 "must be a bare symbol (the runtime reads dims from input "
                                 "axes); give the model a named dim there")
    return [RunDim(name, *bounded[name], *found[name]) for name in sorted(bounded)
            if name in found]


def _his(table: list[RunDim]) -> dict[str, int]:
    return {d.name: d.hi for d in table}


def _bound_type(t: object, his: Mapping[str, int]) -> object:
    if not isinstance(t, TensorType):
        return t
    return t.with_shape(tuple(substitute(d, his) for d in t.shape))


def _bound_graph(graph: Graph, his: Mapping[str, int]) -> Graph:
    inputs = [n.replace(types=tuple(_bound_type(t, his) for t in n.types)) for n in graph.inputs]
    renamed = {old.out(): new.out() for old, new in zip(graph.inputs, inputs, strict=True)}

    def bound(node: Node, _old: tuple) -> Node:
        operands = tuple(None if v is None else renamed.get(v, v) for v in node.inputs)
        attrs = dict(node.attrs)
        if isinstance(attrs.get("body"), Graph) and node.op == "fused":
            attrs["body"] = _bound_graph(attrs["body"], his)
        return node.replace(inputs=operands, attrs=attrs,
                            types=tuple(_bound_type(t, his) for t in node.types))

    staged = Graph(graph.name, inputs, list(graph.nodes),
                   [(n, renamed.get(v, v)) for n, v in graph.outputs])
    return rebuild(staged, bound)


def at_bounds(graph: Graph, table: list[RunDim]) -> Graph:
    return _bound_graph(graph, _his(table))


def _first_dim(node: Node, table: list[RunDim]) -> str:
    names = {d.name: d for d in table}
    for t in node.types:
        for d in getattr(t, "shape", ()):
            for s in sorted(symbols(d) & set(names)):
                return f"dim {s} ({names[s].lo}..{names[s].hi})"
    return "a dynamic dim"


def attach_dynamic(program, graph: Graph, table: list[RunDim]) -> None:
    """See the module docstring (`program` is a plan/program.Program)."""
    from flowc.codegen.plan.program import FUSED_OP, Kernel, _structure_key, fused_body

    bound = program.graph
    if len(bound.nodes) != len(graph.nodes):
        raise FlowcError(f"graph @{graph.name}: the graph at its bounds has another node count")
    symbolic = dict(zip(bound.nodes, graph.nodes, strict=True))
    by_key: dict[str, Kernel] = {}
    kernels: list[Kernel] = []
    for k, call in enumerate(program.calls):
        if call.kernel is None:
            node = call.control.node if call.control is not None else (call.state or
                                                                       call.transfer)
            what = ("control steps" if call.control is not None else "variable copies"
                    if call.state is not None else "transfers between devices")
            raise FlowcError(f"node {node.label()}: op '{node.op}': {what} do not run "
                             f"dynamic dims yet ({_first_dim(node, table)}); give the "
                             "dim a size for a static artifact")
        node = symbolic[call.results[0].node]
        body, operands = fused_body(node) if node.op == FUSED_OP else (
            single_node_body(node), kernel_operands(node))
        if len(operands) != len(call.operands):
            raise FlowcError(f"node {node.label()}: its kernel at the bounds takes "
                             f"{len(call.operands)} operands, its symbolic one {len(operands)}")
        key = _structure_key(body)
        if key not in by_key:
            by_key[key] = Kernel(f"{program.name}_k{len(by_key)}", body)
            kernels.append(by_key[key])
        _check_in_place(program, call, body, node, table)
        program.calls[k] = type(call)(by_key[key], call.operands, call.results, call.nodes)
    program.kernels = kernels
    program.dims = list(table)
    program.symbolic_inputs = [n.types[0] for n in graph.inputs]
    program.symbolic_outputs = [v.type for _, v in graph.outputs]


def _check_in_place(program, call, body: Graph, node: Node, table: list[RunDim]) -> None:
    """A result planned on an operand's buffer must be allowed so by the symbolic body."""
    allowed = in_place_inputs(body)
    for j, r in enumerate(call.results):
        for i, v in enumerate(call.operands):
            if program.storage.get(r) is not None and \
                    program.storage.get(r) == program.storage.get(v) and \
                    i not in allowed.get(j, ()):
                raise FlowcError(f"node {node.label()}: op '{node.op}' writes its result in "
                                 f"place of operand #{i} at the bounds, but not at every size "
                                 f"of {_first_dim(node, table)}")


def kernel_dims(program, kernel) -> str | None:
    own = dim_symbols(kernel.body)
    if not own:
        return None
    return "dims" if own == [d.name for d in program.dims] else f"dims_{kernel.symbol}"


def dims_locals(program) -> list[str]:
    index = {d.name: k for k, d in enumerate(program.dims)}
    lines = []
    for kernel in program.kernels:
        name = kernel_dims(program, kernel)
        if name is not None and name != "dims":
            values = ", ".join(f"dims[{index[s]}]" for s in dim_symbols(kernel.body))
            lines.append(f"  const int64_t {name}[] = {{{values}}};")
    return lines


def c_dim(dim: int | str, table: list[RunDim]) -> str:
    index = {d.name: k for k, d in enumerate(table)}
    return fold(dim, lambda s: f"dims[{index[s]}]", lambda c: f"(int64_t){c}",
                lambda a, b: f"({a} + {b})", lambda a, b: f"({a} * {b})",
                lambda a, k, ceil: f"(({a} + {k - 1}) / {k})" if ceil else f"({a} / {k})")


def c_bytes(t: TensorType, table: list[RunDim]) -> str:
    if t.is_static:
        return f"{int(t.num_elements) * t.dtype.np.itemsize}u"
    dims = " * ".join(f"(size_t){c_dim(d, table)}" for d in t.shape if d != 1)
    return f"({dims} * {t.dtype.np.itemsize}u)"


def dim_indices(t: TensorType, table: list[RunDim]) -> str:
    index = {d.name: k for k, d in enumerate(table)}
    return ", ".join("-1" if isinstance(d, int) else str(index.get(d, 0))
                     for d in t.shape) or "-1"


def dims_tables(program) -> list[str]:
    if not program.dims:
        return []
    rows = ",\n".join(f"  {{{c_string(d.name)}, {d.lo}, {d.hi}, {d.input}, {d.axis}}}"
                      for d in program.dims)
    lines = [f"static const flowc_dim dim_table[] = {{\n{rows}\n}};",
             "static void output_shapes(const int64_t *dims, int64_t *shapes) {",
             "  (void)dims;"]
    k = 0
    for t in program.symbolic_outputs:
        for d in t.shape:
            lines.append(f"  shapes[{k}] = {c_dim(d, program.dims)};")
            k += 1
    return [*lines, "}"]


def dims_note(program) -> tuple[str, ...]:
    lines = [f"{d.name}: {d.lo}..{d.hi}, input '{program.inputs[d.input][0]}' axis {d.axis}"
             for d in program.dims]
    for kind, named, types in (("input", program.inputs, program.symbolic_inputs),
                               ("output", program.outputs, program.symbolic_outputs)):
        lines += [f"{kind} '{name}': {t.dtype.name}[{','.join(map(str, t.shape))}]"
                  for (name, _), t in zip(named, types, strict=False)]
    return tuple(lines) if program.dims else ()
