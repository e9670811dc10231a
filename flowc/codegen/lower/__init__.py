"""THE lowering table of flowc's code generator: op name -> rule.

Contract: `lookup(op, target)` returns the rule lowering `op` for `target` (a rule
registered for the target's architecture overrides the generic one) or None. Every
registry op either has a rule here or is listed in `NOT_KERNELS` with the reason no kernel
computes it (the artifact handles it); tests/codegen asserts that for every target.
Rules are written in one module per op family: the first `lookup` imports every module of
this package (a new family is a new module, listed nowhere else).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from flowc.codegen.target import Target, is_gpu_target
from flowc.ir.graph import Node

Rule = Callable[..., list]

RULES: dict[str, Rule] = {}
ARCH_RULES: dict[tuple[str, str], Rule] = {}
# Ops whose generic rule lowers symbolic dims with run-time extents (`register(dynamic=)`)
DYNAMIC_RULES: set[str] = set()
# Rules of per-sample ops that take a batch of run-time extent whole (`register(batch=)`):
# rule -> which nodes
BATCH_RULES: dict[Rule, Callable[[Node], bool]] = {}

# Ops that never become a kernel: the artifact implements them itself.
NOT_KERNELS: dict[str, str] = {
    "variable": "state lives in the runtime context; the artifact owns its buffer",
    "read_variable": "the artifact passes the variable's buffer to the kernels reading it, "
    "or a copy of it (codegen/plan/state.py)",
    "assign": "the artifact copies the value into the variable's buffer, or has the kernel "
    "computing the value write it there",
    "assign_add": "the artifact runs it as an `add` kernel writing the variable in place",
    "assign_sub": "the artifact runs it as a `sub` kernel writing the variable in place",
    "send": "a runtime transport call, not a computation",
    "recv": "a runtime transport call, not a computation",
    "resize": "simplify decomposes it into gathers once its scales/sizes are constants",
    "one_hot": "simplify decomposes it into equal/where once its depth is a constant",
    "top_k": "CPU targets lower it (lower/top_k.py); for GPU targets simplify{top_k_rounds} "
    "decomposes it into rounds of arg_max once its k is a constant",
    "dft": "simplify decomposes it into a matmul by a constant DFT matrix once its axis and "
    "length are constants",
    "stft": "simplify decomposes it into a gather of its frames and the DFT matmul once its "
    "frame step and length are constants",
    "col2im": "simplify decomposes it into one scatter_add once its image and block shapes are "
    "constants",
    "max_unpool": "simplify decomposes it into scatter_adds (values and counts) and a pad",
    "mel_weight_matrix": "constant folding computes it (its operands decide its extent, so the "
    "compiled path folds them first)",
    "affine_grid": "simplify decomposes it into a matmul against its base grid once its size "
    "is a constant",
    "custom_call": "the user's C function, linked in by codegen/custom_kernels.py",
    **{op: "constant folding computes it once the operands deciding its extent are constants "
       "(the compiled path folds small inputs first): ir/ops/data_dependent.py"
       for op in ("non_zero", "unique", "non_max_suppression")},
    "all_reduce": "the CPU pipeline splits it into all_reduce_start and all_reduce_wait "
    "(passes/all_reduce.py)",
    "all_reduce_start": "the runtime's flowc_allreduce_start (runtime/allreduce.c), called "
    "by a wrapper of codegen/custom_kernels.py",
    "all_reduce_wait": "the runtime's flowc_allreduce_wait (runtime/allreduce.c), called by "
    "a wrapper of codegen/custom_kernels.py",
}


def register(*ops: str, arch: str | None = None, dynamic: bool = False,
             batch: Callable[[Node], bool] | None = None) -> Callable[[Rule], Rule]:
    """Decorator: `fn` lowers each of `ops` (on every target, or only on `arch`); with
    `dynamic`, also nodes whose types have symbolic dims (the rule sizes what it builds with
    `context.dim_size` / `empty(TensorType)`, never with static shapes); with `batch`, also
    the per-sample nodes `batch(node)` accepts whose batch is of run-time extent
    (`per_sample.batch_symbol`: axis 0 one symbol, every other dim static), which it then
    lowers whole, not sample by sample."""

    def wrap(fn: Rule) -> Rule:
        if batch is not None:
            BATCH_RULES[fn] = batch
        for op in ops:
            if dynamic and not arch:
                DYNAMIC_RULES.add(op)
            table_key = (arch, op) if arch else op
            if (ARCH_RULES if arch else RULES).get(table_key) is not None:
                raise ValueError(f"op {op} has two lowering rules for {arch or 'all targets'}")
            if arch:
                ARCH_RULES[(arch, op)] = fn
            else:
                RULES[op] = fn
        return fn

    return wrap


def lookup(op: str, target: Target) -> Rule | None:
    _load()
    return ARCH_RULES.get((target.arch, op)) or RULES.get(op)


def lowers_dynamic(op: str, target: Target) -> bool:
    """Whether `op`'s rule for `target` takes symbolic dims (an arch rule never does, nor
    does any rule on a GPU target yet: its kernels launch static grids)."""
    _load()
    return (op in DYNAMIC_RULES and (target.arch, op) not in ARCH_RULES
            and not is_gpu_target(target))


def lowers_batch(node: Node, target: Target) -> bool:
    """Whether the rule of `node`'s op for `target` takes its batch of run-time extent
    (`register(batch=)`; never on a GPU target)."""
    accepts = BATCH_RULES.get(lookup(node.op, target))
    return accepts is not None and accepts(node) and not is_gpu_target(target)


_loaded = False


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{module.name}")
