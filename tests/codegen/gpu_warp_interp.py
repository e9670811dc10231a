"""Run one tensor-core matmul stage (`gpu.func` text of flowc/codegen/gpu/mma.py, as the GPU
pipeline dumps it in `SYM.stages.mlir`) in numpy, a block at a time, its threads in
lockstep (every SSA value an array over the block's threads), with the warp-level ops
(`nvgpu.ldmatrix`, `nvvm.mma.sync`) from `ptx_model` (the PTX ISA's tables).

`run_stage(func_op, buffers, grid, block)` runs the stage over `grid` blocks of `block`
threads on `buffers` (numpy arrays, one per non-workgroup argument, updated in place).
It interprets exactly the ops the stage's text uses and refuses any other by name. What
it does not model: time. `cp.async` copies land at once and barriers are no-ops (lockstep
threads meet at every op), so a missing wait or barrier goes unseen; a read of the wrong
shared buffer, a wrong index or a wrong register order does not.
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from ptx_model import ldmatrix, mma_sync

_INT = {"arith.addi": np.add, "arith.subi": np.subtract, "arith.muli": np.multiply,
        "arith.divui": np.floor_divide, "arith.remui": np.remainder,
        "arith.minui": np.minimum, "arith.addf": np.add}
_NOOP = ("nvgpu.device_async_create_group", "nvgpu.device_async_wait", "gpu.barrier")


def run_stage(fn: ir.Operation, buffers: list[np.ndarray], grid: int, block: int) -> None:
    body = fn.regions[0].blocks[0]
    args = list(body.arguments)
    for bid in range(grid):
        env: dict = {}
        for i, a in enumerate(args):
            t = ir.MemRefType(a.type)
            env[a] = (buffers[i] if i < len(buffers)
                      else np.full(t.shape, np.nan))  # workgroup memory starts undefined
        _run(body, env, bid, block)


def _index(env, mem, indices, width: int, threads: int):
    """The fancy index of `width` consecutive elements per thread at `indices`."""
    idx = [np.broadcast_to(env[i], (threads,)) for i in indices]
    return (*tuple(i[:, None] for i in idx[:-1]), idx[-1][:, None] + np.arange(width))


def _run(block: ir.Block, env: dict, bid: int, threads: int) -> list | None:
    for op in block.operations:
        name = op.operation.name
        ops = list(op.operation.operands)
        if name == "arith.constant":
            attr = op.operation.attributes["value"]
            env[op.result] = (ir.IntegerAttr(attr).value if isinstance(op.result.type,
                              ir.IndexType) else ir.FloatAttr(attr).value)
        elif name == "gpu.thread_id":
            env[op.result] = np.arange(threads)
        elif name == "gpu.block_id":
            env[op.result] = bid
        elif name in _INT:
            env[op.result] = _INT[name](env[ops[0]], env[ops[1]])
        elif name in _NOOP:
            if op.operation.results:
                env[op.result] = None
        elif name == "nvgpu.device_async_copy":
            n = ir.IntegerAttr(op.operation.attributes["dstElements"]).value
            src, dst = env[op.src], env[op.dst]
            dst[_index(env, dst, op.dstIndices, n, threads)] = \
                src[_index(env, src, op.srcIndices, n, threads)]
            env[op.result] = None
        elif name == "nvgpu.ldmatrix":
            assert ir.IntegerAttr(op.operation.attributes["numTiles"]).value == 4
            mem = env[op.srcMemref]
            rows = mem[_index(env, mem, op.indices, 8, threads)]
            trans = ir.BoolAttr(op.operation.attributes["transpose"]).value
            env[op.result] = ldmatrix(rows.reshape(-1, 32, 8), trans).reshape(threads, 4, 2)
        elif name in ("vector.extract", "llvm.extractvalue"):
            key = "static_position" if name == "vector.extract" else "position"
            (q,) = ir.DenseI64ArrayAttr(op.operation.attributes[key])
            env[op.result] = env[ops[0]][:, q]
        elif name == "llvm.bitcast":  # a bf16 pair as i32: the pair itself
            env[op.result] = env[ops[0]]
        elif name == "nvvm.mma.sync":
            a, b, c = (np.stack([np.broadcast_to(env[v], (threads, *shape[1:])) for v in ops[s]],
                                axis=1).reshape(-1, 32, *shape)
                       for s, shape in ((slice(0, 4), (4, 2)), (slice(4, 6), (2, 2)),
                                        (slice(6, 10), (4,))))
            env[op.result] = mma_sync(a, b, c).reshape(threads, 4)
        elif name == "vector.from_elements":
            env[op.result] = np.stack([np.broadcast_to(env[v], (threads,)) for v in ops], 1)
        elif name == "vector.load":
            mem = env[ops[0]]
            width = ir.VectorType(op.result.type).shape[0]
            env[op.result] = mem[_index(env, mem, ops[1:], width, threads)]
        elif name == "vector.store":
            mem = env[ops[1]]
            mem[_index(env, mem, ops[2:], env[ops[0]].shape[1], threads)] = env[ops[0]]
        elif name == "scf.for":
            lb, ub, step, *carried = (env[v] for v in ops)
            loop = op.regions[0].blocks[0]
            for iv in range(lb, ub, step):
                for arg, value in zip(loop.arguments, [iv, *carried], strict=True):
                    env[arg] = value
                carried = _run(loop, env, bid, threads)
            for r, value in zip(op.results, carried, strict=True):
                env[r] = value
        elif name == "scf.yield":
            return [env[v] for v in ops]
        elif name == "gpu.return":
            return None
        else:
            raise NotImplementedError(f"gpu_warp_interp: op {name} is not modelled")
    return None
