"""The C every entry function shares: its parameters, where a value lives, a call's
arguments.

Contract, in the scope of an entry function `(in, out, arena, w, ts, vars, dims)`
(entry.py, partition_entry.py; `dims`: the run's value of each dim of the program's dim
table, plan/dynamic.py, NULL for a static program):
- `ENTRY_PARAMS`, `ENTRY_UNUSED`: the parameter list, and the statement marking each used;
- `pointer(where)`: a C pointer expression for a `Storage`: `in[i]`, `out[i]`,
  `(void *)(w + offset)`, `arena + offset` or `vars + offset` (a variable);
- `call_arguments(program, step, ptr)`: the arguments of the program's `step`-th call (a
  kernel call): its operands, results, its `dims` array (a kernel of symbolic dims:
  `dynamic.kernel_dims`) and scratch buffers through `ptr` (default `pointer`), then `ts`
  when the kernel takes thread scratch.
"""

from __future__ import annotations

from collections.abc import Callable

from flowc.codegen.plan.dynamic import kernel_dims
from flowc.codegen.plan.program import Program, Storage


def pointer(where: Storage) -> str:
    return {"input": f"in[{where.at}]", "output": f"out[{where.at}]",
            "weight": f"(void *)(w + {where.at})", "arena": f"arena + {where.at}",
            "variable": f"vars + {where.at}"}[where.kind]


ENTRY_PARAMS = ("void *const *in, void *const *out, char *arena, const char *w, char *ts, "
                "char *vars, const int64_t *dims")
ENTRY_UNUSED = "(void)in; (void)out; (void)arena; (void)w; (void)ts; (void)vars; (void)dims;"


def call_arguments(program: Program, step: int,
                   ptr: Callable[[Storage], str] = pointer) -> list[str]:
    """The C arguments of the program's `step`-th call (a kernel call): its operands,
    results and scratch buffers through `ptr`, then `ts` when it takes thread scratch."""
    call = program.calls[step]
    args = [ptr(program.where(v)) for v in (*call.operands, *call.results)]
    dims = kernel_dims(program, call.kernel) if call.kernel is not None else None
    args += [dims] if dims is not None else []
    args += [ptr(where) for where in program.scratch_at(step)]
    return args + (["ts"] if program.needs(call).per_thread else [])
