"""Kernels, target-neutral: the closed static-shaped bodies every backend compiles.

Contract (flowc/codegen/README.md, "Kernels"):
- `single_node_body(node)`: the one-node body of a registry op; its inputs are
  `kernel_operands(node)`, in order (small constants are copied into the body instead).
- `check_supported(graph, target)`: a FlowcError naming every node (op, node, target) that
  no lowering rule covers, or that computes on a narrow dtype (only ops whose
  `OpDef.narrow` holds run on those), nested bodies included, before any codegen work.
- `check_body(sym, body)`: a FlowcError unless every body input and output has a tensor
  type of known dims (sizes or symbolic dims; `check_supported` refuses, naming node, op
  and dim, a symbolic dim at a node whose rule does not lower it: `lower.lowers_dynamic`,
  or a symbolic operand dim an elementwise node would broadcast).
- `build_module(sym, body, target)`: the kernel as one MLIR function `SYM` over memrefs
  (inputs, then outputs; 64-byte aligned, noalias unless the memory planner may run it in
  place), its body lowered to linalg on tensors by the lowering table: what the CPU
  (cpu/compiler.py) and GPU (gpu/kernels.py) kernel compilers start from. A body with
  symbolic dims also takes `dims` (an i64 array: the values of `dim_symbols(body)`, its
  symbols in sorted name order) after its outputs; each symbolic buffer arrives as a bare
  pointer that the kernel views as a dense row-major memref of the run's sizes
  (`memref.reinterpret_cast`), and every dim expression is computed once at its entry.
  On a CPU, a static body around a pointwise conv is lowered over pixel rows
  (`pixel_rows.py`: its buffers viewed 2-D by `memref.collapse_shape`).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, bufferization, func, memref

from flowc.codegen.lower import NOT_KERNELS, lookup, lowers_dynamic
from flowc.codegen.lower.context import (
    dim_sizes,
    empty,
    generic,
    identity_map,
    memref_type,
    run_time_dims,
    tensor_type,
)
from flowc.codegen.lower.graph import lower_graph, unsupported
from flowc.codegen.lower.per_sample import batch_symbol
from flowc.codegen.pixel_rows import pixel_rows
from flowc.codegen.plan.memplan import in_place_inputs
from flowc.codegen.target import Target, get_target
from flowc.ir import dims
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops import ELEMENTWISE, HAS_BODY, OPS, get_op
from flowc.ir.ops.fused import MAX_INLINE_CONSTANT
from flowc.ir.types import TensorType


def kernel_operands(node: Node) -> list[Value]:
    """The operands of `node` that its single-node body takes as inputs, in order: every
    present operand except constants of at most MAX_INLINE_CONSTANT elements."""
    return [v for v in node.inputs if v is not None and not _inlined(v)]


def _inlined(v: Value) -> bool:
    t = v.type
    return (v.node.op == "constant" and isinstance(t, TensorType)
            and t.num_elements is not None and t.num_elements <= MAX_INLINE_CONSTANT)


def single_node_body(node: Node) -> Graph:
    """A closed graph computing `node` alone: its inputs `in0`, `in1` ... are
    `kernel_operands(node)`, in order (an operand used twice is two inputs); small constants
    are copied in; control dependencies and the device are dropped; outputs `out0` ..."""
    body = Graph(f"{node.op}_body")
    inner: list[Value | None] = []
    for v in node.inputs:
        if v is None:
            inner.append(None)
        elif _inlined(v):
            inner.append(body.append(v.node.replace(ctrl=(), device=None)).out())
        else:
            inner.append(body.add_input(f"in{len(body.inputs)}", v.type))
    copy = body.append(node.replace(inputs=tuple(inner), ctrl=(), device=None))
    for i in range(len(node.types)):
        body.add_output(f"out{i}", copy.out(i))
    return body


def check_supported(graph: Graph, target: Target | str = "host") -> None:
    target = get_target(target)
    problems = _unsupported_nodes(graph, target)
    if problems:
        raise FlowcError(f"cannot compile graph @{graph.name} for target {target.name}:\n  "
                         + "\n  ".join(problems))


def _unsupported_nodes(graph: Graph, target: Target) -> list[str]:
    problems = []
    for node in graph.nodes:
        if node.op in NOT_KERNELS:
            continue
        if lookup(node.op, target) is None:
            problems.append(unsupported(node, target))
        elif not get_op(node.op).narrow:
            problems += _narrow_values(node)
        problems += _dynamic_values(node, target)
        if get_op(node.op).has(HAS_BODY):
            for value in node.attrs.values():
                if isinstance(value, Graph):
                    problems += _unsupported_nodes(value, target)
    return problems


def _narrow_values(node: Node) -> list[str]:
    """A problem per narrow-typed operand or result of `node` (an op kernels do not run on
    narrow dtypes: not `OpDef.narrow`)."""
    types = [v.type for v in node.inputs if v is not None] + list(node.types)
    narrow = sorted({str(t.dtype) for t in types if isinstance(t, TensorType) and t.dtype.narrow})
    if not narrow:
        return []
    return [f"node {node.label()} ({node.op}) computes on {', '.join(narrow)}: kernels run "
            f"only {', '.join(_narrow_ops())} on narrow dtypes; cast to a wider type first"]


def _dynamic_values(node: Node, target: Target) -> list[str]:
    """A problem for a node typed by a symbolic dim that its rule cannot take at run time
    (or that broadcasts a symbolic operand dim, which the kernel would read past)."""
    types = [v.type for v in node.inputs if v is not None] + list(node.types)
    shapes = [t.shape for t in types if isinstance(t, TensorType)]
    symbolic = [d for shape in shapes for d in shape if not isinstance(d, int)]
    if not symbolic or node.op in NOT_KERNELS or node.op == "fused":  # its body's nodes
        return []
    if None in symbolic:
        return [f"node {node.label()}: a dim is ? (no rule names its size); a kernel needs "
                "sizes or symbolic dims"]
    if not lowers_dynamic(node.op, target) and batch_symbol(node) is None:
        return [f"node {node.label()}: dim {symbolic[0]} is dynamic, and op {node.op} has no "
                f"kernel with run-time extents on target {target.name} yet"]
    out = node.types[0].shape if node.types and isinstance(node.types[0], TensorType) else ()
    if get_op(node.op).has(ELEMENTWISE):
        for t in types[:len(types) - len(node.types)]:
            for d, o in zip(t.shape[::-1], out[::-1], strict=False):
                if isinstance(d, str) and d != o:
                    return [f"node {node.label()}: operand dim {d} broadcast to {o}: a "
                            "kernel with run-time extents broadcasts static dims only"]
    return []


def _narrow_ops() -> list[str]:
    return sorted(name for name, opdef in OPS.items() if opdef.narrow)


def check_body(sym: str, body: Graph) -> None:
    """Every input and output of the kernel `sym`'s body has a tensor type whose dims are
    sizes or symbolic dims (a `?` has no value at run time)."""
    for what, types in (("input", body.input_types), ("output", body.output_types)):
        for t in types:
            if not isinstance(t, TensorType) or None in t.shape:
                raise FlowcError(f"kernel {sym}: every body {what} needs a tensor type of "
                                 f"known dims, found {t}")


def build_module(sym: str, body: Graph, target: Target) -> ir.Module:
    """The kernel as a function over memrefs: inputs, then outputs, then for a body with
    symbolic dims the `dims` argument (see the module docstring and cpu/pipeline.py, which
    lowers it for the CPU)."""
    ins, outs = body.input_types, body.output_types
    symbols = dim_symbols(body)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        dims_arg = [ir.MemRefType.get([len(symbols)], ir.IntegerType.get_signless(64))] \
            if symbols else []
        fn = func.FuncOp(sym, ir.FunctionType.get(
            [_arg_type(t) for t in [*ins, *outs]] + dims_arg, []))
        # noalias on every buffer, except in a kernel the memory planner may run in place
        # (a result written over an operand, memplan.in_place_inputs): there they alias
        attrs = {"llvm.align": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 64)}
        if not in_place_inputs(body):
            attrs["llvm.noalias"] = ir.UnitAttr.get()
        arg_attr = ir.DictAttr.get(attrs)
        fn.arg_attrs = ir.ArrayAttr.get([arg_attr] * (len(ins) + len(outs) + len(dims_arg)))
        entry = fn.add_entry_block()
    with ir.InsertionPoint(entry), run_time_dims(_load_dims(entry, symbols)):
        for t in [*ins, *outs, *(t for n in body.nodes for t in n.types)]:
            if isinstance(t, TensorType):
                dim_sizes(t)  # every dim expression computed once, at the entry
        buffers = [_view(t, a) for t, a in zip([*ins, *outs], entry.arguments, strict=False)]
        rows = None if symbols or target.is_gpu else pixel_rows(body, target.vector_bits // 32)
        if rows is not None:  # a pointwise conv's body over pixel rows (pixel_rows.py)
            body, shapes = rows
            buffers = [b if s is None else _collapse(b, s) for b, s in zip(buffers, shapes,
                                                                              strict=True)]
            ins, outs = body.input_types, body.output_types
        args = [empty(t) if _holds_nothing(t) else
                bufferization.ToTensorOp(tensor_type(t), a, restrict=True).result
                for t, a in zip(ins, buffers[:len(ins)], strict=True)]
        # a kernel whose every result holds nothing computes nothing (its lowerings need
        # not handle size-0 operands: a conv's tiling of a batch of 0 does not verify)
        nothing = all(_holds_nothing(t) for t in outs)
        results = [None] * len(outs) if nothing else lower_graph(body, args, target)
        written: set = set()
        for t, value, dest in zip(outs, results, buffers[len(ins):], strict=True):
            if _holds_nothing(t):
                continue
            if not _writes_in_place(value) or value in written:
                value = _copy(t, value)
            written.add(value)
            bufferization.MaterializeInDestinationOp(None, value, dest, restrict=True,
                                                     writable=True)
        func.ReturnOp([])
    if not module.operation.verify():
        raise FlowcError(f"kernel {sym}: generated MLIR does not verify")
    return module


def dim_symbols(body: Graph) -> list[str]:
    """The symbols of `body`'s symbolic dims, sorted: the order of its `dims` argument."""
    types = [*body.input_types, *body.output_types, *(t for n in body.nodes for t in n.types)]
    return sorted({s for t in types if isinstance(t, TensorType) for d in t.shape
                   for s in dims.symbols(d)})


def _load_dims(entry: ir.Block, symbols: list[str]) -> dict[str, ir.Value]:
    """Each symbol's value (index) loaded from the `dims` argument, the last one."""
    if not symbols:
        return {}
    index = ir.IndexType.get()
    table = entry.arguments[len(entry.arguments) - 1]
    return {s: arith.index_cast(index, memref.load(table, [arith.ConstantOp(index, i).result]))
            for i, s in enumerate(symbols)}


def _collapse(buffer: ir.Value, shape: tuple[int, ...]) -> ir.Value:
    """The static row-major `buffer` viewed with `shape`: its leading dims merged into the
    first dim of `shape`, the rest kept (`memref.collapse_shape`; no copy)."""
    src = ir.MemRefType(buffer.type)
    lead = len(src.shape) - len(shape) + 1
    groups = [list(range(lead)), *([d] for d in range(lead, len(src.shape)))]
    i64 = ir.IntegerType.get_signless(64)
    reassociation = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in g])
                                      for g in groups])
    return memref.CollapseShapeOp(ir.MemRefType.get(list(shape), src.element_type), buffer,
                                  reassociation).result


def _view(t: TensorType, arg: ir.Value) -> ir.Value:
    """The buffer of a kernel argument: itself when `t` is static, else a dense row-major
    memref of the run's sizes over its pointer (`memref.reinterpret_cast`)."""
    if t.is_static or _holds_nothing(t):
        return arg
    sizes = dim_sizes(t)
    strides: list[int | ir.Value] = []
    stride: int | ir.Value = 1
    for size in reversed(sizes):
        strides.insert(0, stride)
        stride = _index_mul(stride, size)
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    result = memref_type(t)  # identity layout: dense row-major, so views collapse in place
    return memref.ReinterpretCastOp(
        result, arg, [], [s for s in sizes if not isinstance(s, int)],
        [s for s in strides if not isinstance(s, int)], [0],
        [s if isinstance(s, int) else ir.ShapedType.get_dynamic_size() for s in sizes],
        [s if isinstance(s, int) else dynamic for s in strides]).result


def _index_mul(a: int | ir.Value, b: int | ir.Value) -> int | ir.Value:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    index = ir.IndexType.get()
    a, b = (arith.ConstantOp(index, v).result if isinstance(v, int) else v for v in (a, b))
    return arith.muli(a, b)


def _holds_nothing(t: TensorType) -> bool:
    """A tensor with a size-0 dim: its buffer is never read or written."""
    return t.num_elements == 0


def _arg_type(t: TensorType) -> ir.MemRefType:
    """The memref of one kernel argument. A buffer that holds nothing is passed as an opaque
    one-element memref: MLIR's bare-pointer convention does not take size-0 memrefs (it
    silently falls back to memref descriptors, which would break the C signature); so is
    a buffer of symbolic shape, whose run-time view `_view` makes."""
    return memref_type(TensorType(t.dtype, (1,)) if _holds_nothing(t) or not t.is_static
                       else t)


def _writes_in_place(value: ir.Value) -> bool:
    """Whether `value` is made by a linalg op or an scf.forall (a winograd_conv's loop), which
    can write into the output buffer."""
    owner = value.owner
    return isinstance(owner, ir.OpView | ir.Operation) and (owner.name.startswith("linalg.")
                                                            or owner.name == "scf.forall")


def _copy(t: TensorType, value: ir.Value) -> ir.Value:
    rank = len(t.shape)
    return generic([value], [identity_map(rank)], [empty(t)], [identity_map(rank)], "p" * rank,
                   lambda x, _out: [x])[0]


