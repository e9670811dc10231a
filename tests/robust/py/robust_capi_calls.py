"""Calls an artifact's C API through ctypes with bad arguments, one case per line of
output: `CASE status=N message=...` (or `CASE raised=TypeError ...`, `raised=ArgumentError`);
run as a subprocess by tests/robust/test_robust_capi_ctypes.py, so that a crash is seen as
the exit status and the last case printed names the call that crashed.

    python robust_capi_calls.py ARTIFACT_DIR MODEL_NAME
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np

directory, name = Path(sys.argv[1]), sys.argv[2]
lib = ctypes.CDLL(str(directory / f"lib{name}.so"))
vp, i, sz, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
i64p = ctypes.POINTER(ctypes.c_int64)
SIGNATURES = {
    "create": (i, [ctypes.POINTER(vp)]), "create_with_weights": (i, [ctypes.POINTER(vp), cp]),
    "destroy": (None, [vp]), "error": (cp, [vp]), "run": (i, [vp]),
    "set_threads": (i, [vp, i]), "set_arena": (i, [vp, vp, sz]),
    "set_input": (i, [vp, i, vp, i, i, i64p]), "set_output": (i, [vp, i, vp, i, i, i64p]),
    "input": (vp, [vp, i]), "output": (vp, [vp, i]), "input_dtype": (i, [i]),
    "input_rank": (i, [i]), "input_shape": (i64p, [i]), "arena_bytes": (sz, []),
    "run_with": (i, [vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]), "output_bytes": (sz, [i]),
}
api = {}
for suffix, (restype, argtypes) in SIGNATURES.items():
    fn = getattr(lib, f"{name}_{suffix}")
    fn.restype, fn.argtypes = restype, argtypes
    api[suffix] = fn


def report(case: str, status, ctx=None) -> None:
    message = api["error"](ctx).decode() if status not in (0, None) or ctx is None else ""
    print(f"{case} status={status} message={message}", flush=True)


def raises(case: str, call) -> None:
    try:
        call()
    except (TypeError, ctypes.ArgumentError) as exc:
        print(f"{case} raised={type(exc).__name__} {exc}", flush=True)
    else:
        print(f"{case} raised=nothing", flush=True)


dtype, rank, shape = api["input_dtype"](0), api["input_rank"](0), api["input_shape"](0)
x = np.zeros([shape[d] for d in range(rank)], np.float32)
data = x.ctypes.data_as(vp)

# a context whose creation failed (its weights file is missing), then used anyway
broken = vp()
report("create_missing_weights", api["create_with_weights"](ctypes.byref(broken),
                                                             b"/nonexistent/w.weights"), broken)
report("run_broken", api["run"](broken), broken)
report("set_input_broken", api["set_input"](broken, 0, data, dtype, rank, shape), broken)
report("set_output_broken", api["set_output"](broken, 0, data, dtype, rank, shape), broken)
report("set_threads_broken", api["set_threads"](broken, 2), broken)
report("set_arena_broken", api["set_arena"](broken, None, 0), broken)
report("run_with_broken", api["run_with"](broken, None, None), broken)
print(f"output_broken_index pointer={api['output'](broken, 1)}", flush=True)
api["destroy"](broken)

# NULL contexts and pointers
report("create_null_out", api["create"](None))
report("run_null", api["run"](None))
report("set_input_null_ctx", api["set_input"](None, 0, data, dtype, rank, shape))
report("set_threads_null", api["set_threads"](None, 1))
report("set_arena_null", api["set_arena"](None, None, 0))
print(f"input_null pointer={api['input'](None, 0)}", flush=True)
api["destroy"](None)

ctx = vp()
report("create", api["create"](ctypes.byref(ctx)), ctx)
report("set_input_null_data", api["set_input"](ctx, 0, None, dtype, rank, shape), ctx)
report("set_input_null_shape", api["set_input"](ctx, 0, data, dtype, rank, None), ctx)
report("set_input_rank_huge", api["set_input"](ctx, 0, data, dtype, 1 << 30, shape), ctx)
report("set_input_rank_negative", api["set_input"](ctx, 0, data, dtype, -5, shape), ctx)
report("set_input_dtype_unknown", api["set_input"](ctx, 0, data, 1000, rank, shape), ctx)
report("set_input_index_huge", api["set_input"](ctx, 1 << 30, data, dtype, rank, shape), ctx)
report("set_arena_misaligned", api["set_arena"](ctx, data.value + 1, 1 << 20), ctx)
report("set_threads_zero", api["set_threads"](ctx, 0), ctx)
raises("run_no_arguments", lambda: api["run"]())
raises("set_input_too_few", lambda: api["set_input"](ctx, 0, data))
raises("set_threads_wrong_type", lambda: api["set_threads"](ctx, "two"))
report("run_after_misuse", api["run"](ctx), ctx)

# run_with: NULL pointer tables and entries; then a run on the caller's buffers (the
# output 4 bytes off 64-byte alignment, so written through the context's own buffer),
# after which the context keeps no pointer to them: a plain run leaves them alone
out = np.zeros(api["output_bytes"](0) // 4 + 16, np.float32)
view = out[(-out.ctypes.data % 64) // 4 + 1:][:api["output_bytes"](0) // 4]
ins, outs = (vp * 1)(x.ctypes.data), (vp * 1)(view.ctypes.data)
report("run_with_null_inputs", api["run_with"](ctx, None, outs), ctx)
report("run_with_null_output", api["run_with"](ctx, ins, (vp * 1)(None)), ctx)
report("run_with", api["run_with"](ctx, ins, outs), ctx)
written = view.copy()
view[...] = -1.0
report("run_after_run_with", api["run"](ctx), ctx)
print(f"run_with_result wrote={bool(np.any(written != 0.0))} "
      f"left_alone={bool(np.all(view == -1.0))}", flush=True)
api["destroy"](ctx)
print("done", flush=True)
