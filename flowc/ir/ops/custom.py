"""`custom_call`: an op flowc does not know, computed by a user's C function.

Contract: a `custom_call` node names its op (`domain`, `op_type`, for messages), the C
function (`symbol`, defined in the C file `source` whose sha256 is `source_digest`, so that
an edited file changes the graph's hash) and the numeric attributes passed to it
(`attr_names`, `attr_values`); its results have the types it declares: static shapes
(`out_dtypes`, each rank in `out_ranks`, the dims of all of them in turn in `out_dims`),
given by the op's shape function when the node was imported
(flowc/frontend/custom_ops.py). The compiled artifact links the function
(flowc/codegen/custom_kernels.py); the reference interpreter cannot run it and says so.
The function must be pure (a function of its inputs and attributes): two equal nodes may
be merged; nothing is folded (the reference kernel refuses, so folding leaves it).
"""

from __future__ import annotations

from flowc.ir.errors import FlowcError
from flowc.ir.ops.registry import AttrSpec, define
from flowc.ir.types import TensorType, dtype


def declared_types(attrs) -> tuple[TensorType, ...]:
    """The result types a custom_call node's attributes declare."""
    dims = list(attrs["out_dims"])
    types = []
    for name, rank in zip(attrs["out_dtypes"], attrs["out_ranks"], strict=True):
        types.append(TensorType(dtype(name), tuple(dims[:rank])))
        dims = dims[rank:]
    return tuple(types)


def _infer(ctx):
    types = declared_types(ctx.attrs)
    return types[0] if len(types) == 1 else types


def _kernel(ctx, *arrays):
    raise FlowcError(f"node {ctx.label}: custom op {ctx.attrs['domain']}::"
                     f"{ctx.attrs['op_type']} (C function {ctx.attrs['symbol']}) has no "
                     "reference kernel: the interpreter cannot run it; compile the model "
                     "(flowc compile ... --custom-op)")


define("custom_call", ("inputs*",), _infer, _kernel,
       attrs=[AttrSpec("domain", "str"), AttrSpec("op_type", "str"), AttrSpec("symbol", "str"),
              AttrSpec("source", "str"), AttrSpec("source_digest", "str"),
              AttrSpec("attr_names", "strs", ()), AttrSpec("attr_values", "floats", ()),
              AttrSpec("out_dtypes", "strs"), AttrSpec("out_ranks", "ints"),
              AttrSpec("out_dims", "ints", ())],
       doc="an op computed by a user's C function int fn(const flowc_custom_args *)",
       no_grad="its kernel is the user's C code: flowc knows no derivative of it")
