"""Collectives of a data-parallel (SPMD) program: `all_reduce` and its two halves.

Contract. An artifact holding these ops is one program that every rank of an MPI job runs
(`flowc launch`, docs/distributed.md); each op is a collective: every rank runs it, in the
same order (the same program, the same schedule). `all_reduce` takes tensors of one float
dtype (f32 or f64) and returns, on every rank, each operand averaged over the ranks (the
sum over the ranks divided by their number), of the operand's type; `bucket` numbers the
node among a step's allreduces (messages, and the runtime's slot of an allreduce in
flight). One process is a job of one rank, so the reference interpreter's kernel is the
mean over one rank: the identity.

As the results are, on every rank, a function of the operands on all ranks, these ops are
PURE in the SPMD sense: merging two equal ones, dropping an unused one or folding one of
constant operands (a constant is the same on every rank, so is its mean) is the same
rewrite on every rank and keeps the program's meaning.

The CPU lowering splits an `all_reduce` in two (passes/all_reduce.py, `split-all-reduce`):
`all_reduce_start` packs its operands, in order and flattened, into one 1-D tensor and
starts the sum over the ranks (runtime/allreduce.c: MPI_Iallreduce); `all_reduce_wait`
(`bucket` the start's, `ranks`/`dims` the shapes of its results, as `custom_call`'s
`out_ranks`/`out_dims`) waits for that sum and unpacks it divided by the number of ranks.
In one process (the interpreter) start packs and wait unpacks. Between the two, nothing but
the wait reads the packed tensor (the runtime writes it when the sum arrives).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import TensorType, dtype

FLOAT_DTYPES = ("f32", "f64")
NO_GRAD = ("data-parallel training adds it after differentiation, between the gradients "
           "and the optimizer's update (apply-optimizer)")


def _operands(ctx: InferContext) -> list[TensorType]:
    """The operands: tensors of static shape and one dtype, f32 or f64."""
    types = [ctx.tensor(i) for i in range(len(ctx.types))]
    if not types:
        ctx.fail("expected at least one operand")
    for i, t in enumerate(types):
        if t.dtype.name not in FLOAT_DTYPES or t.dtype != types[0].dtype:
            ctx.fail(f"operand #{i} is {t}; every operand must be f32, or every one f64")
        if not t.is_static:
            ctx.fail(f"operand #{i} is {t}; the allreduce takes static shapes")
    return types


def _all_reduce_infer(ctx: InferContext) -> TensorType | tuple[TensorType, ...]:
    types = tuple(_operands(ctx))
    return types[0] if len(types) == 1 else types


def _copies(ctx: KernelContext, *arrays: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]:
    out = tuple(np.array(a) for a in arrays)
    return out[0] if len(out) == 1 else out


def _start_infer(ctx: InferContext) -> TensorType:
    types = _operands(ctx)
    return TensorType(types[0].dtype, (sum(t.num_elements for t in types),))


def _start_kernel(ctx: KernelContext, *arrays: np.ndarray) -> np.ndarray:
    return np.concatenate([a.reshape(-1) for a in arrays])


def wait_types(attrs, dtype_name: str) -> tuple[TensorType, ...]:
    """The result types of an all_reduce_wait: shapes from `ranks`/`dims`, one dtype."""
    dims, types = list(attrs["dims"]), []
    for rank in attrs["ranks"]:
        types.append(TensorType(dtype(dtype_name), tuple(dims[:rank])))
        dims = dims[rank:]
    return tuple(types)


def _wait_infer(ctx: InferContext) -> TensorType | tuple[TensorType, ...]:
    packed = ctx.tensor(0)
    if packed.dtype.name not in FLOAT_DTYPES or packed.rank != 1 or not packed.is_static:
        ctx.fail(f"the packed operand is {packed}; expected a 1-D f32 or f64 tensor")
    ranks, dims = ctx.attrs["ranks"], ctx.attrs["dims"]
    if not ranks or any(r < 0 for r in ranks) or sum(ranks) != len(dims) or any(
            d < 0 for d in dims):
        ctx.fail(f"ranks {list(ranks)} and dims {list(dims)} do not describe result shapes")
    types = wait_types(ctx.attrs, packed.dtype.name)
    total = sum(t.num_elements for t in types)
    if total != packed.shape[0]:
        ctx.fail(f"the results hold {total} elements, the packed operand {packed.shape[0]}")
    return types[0] if len(types) == 1 else types


def _wait_kernel(ctx: KernelContext, packed: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]:
    out, at = [], 0
    for t in ctx.types:
        out.append(packed[at:at + t.num_elements].reshape(t.shape).copy())
        at += t.num_elements
    return out[0] if len(out) == 1 else tuple(out)


BUCKET = AttrSpec("bucket", "int", 0)
define("all_reduce", ("inputs*",), _all_reduce_infer, _copies, attrs=[BUCKET],
       tolerance="reduction", no_grad=NO_GRAD,
       doc="Each operand averaged over the ranks of the job (identity in one process).")
define("all_reduce_start", ("inputs*",), _start_infer, _start_kernel, attrs=[BUCKET],
       tolerance="exact", no_grad=NO_GRAD,
       doc="The operands packed into one 1-D tensor, whose sum over the ranks starts.")
define("all_reduce_wait", ("packed",), _wait_infer, _wait_kernel,
       attrs=[BUCKET, AttrSpec("ranks", "ints"), AttrSpec("dims", "ints", ())],
       tolerance="reduction", no_grad=NO_GRAD,
       doc="The started sum, unpacked into tensors of the given shapes, over the ranks.")
