"""The C expression of where a program value lives, for the generated entry functions.

Contract: `pointer(where)` is a C expression of type pointer for a `Storage`, in the scope of
an entry function `(in, out, arena, w)` (entry.py, partition_entry.py): `in[i]`, `out[i]`,
`(void *)(w + offset)` or `arena + offset`.
"""

from __future__ import annotations

from flowc.codegen.plan.program import Storage


def pointer(where: Storage) -> str:
    return {"input": f"in[{where.at}]", "output": f"out[{where.at}]",
            "weight": f"(void *)(w + {where.at})", "arena": f"arena + {where.at}"}[where.kind]
