"""Alias scopes that keep the kernel arguments' `noalias` inside OpenMP regions.

An OpenMP region is outlined by the translation to LLVM IR into a function that gets the
kernel's pointers through a struct, so what `llvm.noalias` on the kernel's arguments says
is lost there: a loop inside it reloads a loop-invariant value after every store and stays
scalar (an Expand copying one value per channel stored 4 bytes at a time).

Contract: `scope_parallel_accesses(fn)` takes a kernel `llvm.func` (after TO_LLVM) and
gives every `llvm.load` and `llvm.store` inside one of its `omp.parallel` regions whose
address is based on a pointer argument marked `llvm.noalias` that argument's alias scope
(`alias_scopes`) and, as `noalias_scopes`, the scopes of every other such argument (one
scope domain per kernel). Based on: the argument itself, a `getelementptr` of a based
pointer, or an `extractvalue` of the pointer a chain of `insertvalue`s put there (a memref
descriptor). Accesses through anything else keep no scope: nothing is claimed for them.
Returns the number of accesses tagged.
"""

from __future__ import annotations

from mlir import ir

from flowc.codegen.mlir_walk import ops_named

ACCESSES = ("llvm.load", "llvm.store")


def scope_parallel_accesses(fn: ir.Operation) -> int:
    entry = fn.regions[0].blocks[0]
    arg_attrs = fn.attributes["arg_attrs"] if "arg_attrs" in fn.attributes else None  # noqa: SIM401 (no .get on MLIR attribute maps)
    if arg_attrs is None:
        return 0
    noalias = [k for k, attrs in enumerate(ir.ArrayAttr(arg_attrs))
               if "llvm.noalias" in ir.DictAttr(attrs)]
    if len(noalias) < 2:
        return 0
    scopes = _scopes(len(noalias))
    scope_of = dict(zip(noalias, scopes, strict=True))
    tagged = 0
    for region in ops_named(fn, "omp.parallel"):
        for op in [*ops_named(region, "llvm.load"), *ops_named(region, "llvm.store")]:
            address = op.operands[0 if op.name == "llvm.load" else 1]
            arg = _based_on(address, entry)
            if arg not in scope_of:
                continue
            op.attributes["alias_scopes"] = ir.ArrayAttr.get([scope_of[arg]])
            op.attributes["noalias_scopes"] = ir.ArrayAttr.get(
                [s for k, s in scope_of.items() if k != arg])
            tagged += 1
    return tagged


def _scopes(n: int) -> list[ir.Attribute]:
    """`n` distinct alias scopes of one new distinct domain (parsed together: a distinct
    id is shared within one parse)."""
    domain = f"#llvm.alias_scope_domain<id = distinct[{n}]<>>"
    text = ", ".join(f"#llvm.alias_scope<id = distinct[{k}]<>, domain = {domain}>"
                     for k in range(n))
    return list(ir.ArrayAttr(ir.Attribute.parse(f"[{text}]")))


def _based_on(value: ir.Value, entry: ir.Block) -> int | None:
    """The index of the entry-block argument `value` is based on (see the module
    docstring), or None."""
    position: list[int] | None = None  # the field an extractvalue wants, while tracing
    for _ in range(64):  # chains are short; a bound keeps a malformed one finite
        if isinstance(value.owner, ir.Block):
            if value.owner == entry and position is None:
                return ir.BlockArgument(value).arg_number
            return None
        op = value.owner
        name = op.name
        if name == "llvm.getelementptr" and position is None:
            value = op.operands[0]
        elif name == "llvm.extractvalue" and position is None:
            position = list(ir.DenseI64ArrayAttr(op.attributes["position"]))
            value = op.operands[0]
        elif name == "llvm.insertvalue" and position is not None:
            here = list(ir.DenseI64ArrayAttr(op.attributes["position"]))
            if here == position:
                value, position = op.operands[1], None
            elif here[:len(position)] == position or position[:len(here)] == here:
                return None  # a nested field: not followed
            else:
                value = op.operands[0]
        else:
            return None
    return None
