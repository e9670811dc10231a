"""Kernel timing compiled into an artifact on request (`flowc compile --profile`).

Contract: with profiling on, `profile_prelude(name)` is C placed before the entry function
and `profile_api(name)` after the API; the entry wraps each kernel call in
`t = prof_now(); CALL; prof_record(k, t)` (k: the kernel's index in the manifest's
`kernels`), which writes one event `{kernel, thread, start_ns, end_ns}` (CLOCK_MONOTONIC)
into the buffer of the run in progress (runtime/profile.py's EVENT_DTYPE reads it).
`NAME_run_profiled(ctx, events, capacity, &count)` runs the model into the caller's
fixed-size buffer (allocated once per context by the caller: nothing is allocated per
event; events past `capacity` are counted, not stored). The thread id is a small
per-process number given to each thread on its first event. `profile_header` declares
the function in NAME.h, so the library exports it. With profiling off none of this is
emitted: the artifact has no profiling symbol and the entry no timing call.
"""

from __future__ import annotations


def profile_prelude(name: str) -> list[str]:
    return [
        "#include <time.h>",
        "typedef struct { int32_t kernel; uint32_t thread; int64_t start_ns, end_ns; }"
        f" {name}_prof_event;",
        f"static _Thread_local {name}_prof_event *prof_events;",
        "static _Thread_local int64_t prof_capacity, prof_count;",
        "static _Thread_local uint32_t prof_thread;",
        "static uint32_t prof_next_thread;",
        "static inline int64_t prof_now(void) {",
        "  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);",
        "  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;",
        "}",
        "static inline void prof_record(int32_t kernel, int64_t start) {",
        "  int64_t end = prof_now();",
        "  if (!prof_events) return;",
        "  if (!prof_thread) prof_thread = __atomic_add_fetch(&prof_next_thread, 1, "
        "__ATOMIC_RELAXED);",
        f"  if (prof_count < prof_capacity) prof_events[prof_count] = ({name}_prof_event)"
        "{kernel, prof_thread, start, end};",
        "  prof_count++;",
        "}",
    ]


def profile_api(name: str) -> list[str]:
    api = "__attribute__((visibility(\"default\")))"
    return [
        f"{api} int {name}_run_profiled({name}_ctx *ctx, void *events, int64_t capacity,",
        "                                 int64_t *count) {",
        f"  prof_events = ({name}_prof_event *)events; prof_capacity = capacity;",
        "  prof_count = 0;",
        f"  int status = {name}_rt_run((flowc_ctx *)ctx);",
        "  *count = prof_count; prof_events = 0; prof_capacity = 0;",
        "  return status;",
        "}",
    ]


def profile_header(header: str, name: str) -> str:
    """`header` (NAME.h) with the profiled run declared (so the library exports it)."""
    decl = (f"/* Profiling (flowc compile --profile): run, recording each kernel call as\n"
            f" * {{int32 kernel, uint32 thread, int64 start_ns, int64 end_ns}} into events\n"
            f" * (capacity of them; *count says how many calls ran). */\n"
            f"int {name}_run_profiled({name}_ctx *ctx, void *events, int64_t capacity,\n"
            f"                         int64_t *count);\n\n")
    marker = "#ifdef __cplusplus\n}"
    if marker not in header:
        raise ValueError(f"{name}.h has no closing extern \"C\" block to declare into")
    return header.replace(marker, decl + marker, 1)
