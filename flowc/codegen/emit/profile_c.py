"""Kernel timing compiled into an artifact on request (`flowc compile --profile`).

Contract: with profiling on, `profile_prelude(name)` is C placed before the entry function
and `profile_api(name)` after the API. The entry wraps each kernel call in
`t = prof_now(); CALL; prof_record(k, t)` (k: the kernel's index in the manifest's
`kernels`), which writes one event `{kernel, thread, start_ns, end_ns}` (CLOCK_MONOTONIC)
into the buffer of the run in progress (runtime/profile.py's EVENT_DTYPE reads it); in a
partitioned model each `part_K` starts with `prof_join(rv, K)` and ends with
`prof_leave()`, and each send/recv is timed too, as event `transfer_event(channel, op)`
(negative: `-1 - 2 * channel` for a send, `-2 - 2 * channel` for a recv; a recv's time
includes its wait).
`NAME_run_profiled(ctx, events, capacity, &count)` runs the model into the caller's
fixed-size buffer (allocated once per context by the caller: nothing is allocated per
event; events past `capacity` are counted, not stored). Profiled runs of one model are
serialized by a lock (the buffer and the profiled context's rendezvous are process-wide,
so the partitions' threads find them); a thread records only while it runs the profiled
context's work (a thread-local flag, set on the calling thread and by `prof_join` on a
partition thread whose rendezvous pointer is the profiled one: compared, never
dereferenced), so unprofiled runs on other threads meanwhile record nothing. A
partitioned context's rendezvous exists from its first run on, so the first profiled run
of such a context runs the model once untimed before (which also keeps the partition
threads' start out of the profile). The thread of an event is a small per-process number given to
each thread on its first event, or, in a partitioned model, `K + 1` for partition K: one
trace track per partition. `profile_header` declares the function in NAME.h, so the library
exports it. With profiling off none of this is emitted: the artifact has no profiling
symbol and the entry no timing call.
"""

from __future__ import annotations


def transfer_event(channel: int, op: str) -> int:
    """The event number of a send (`op` "send") or recv on `channel`."""
    return -1 - 2 * channel - (op == "recv")


def timed(call_c: str, event: int) -> str:
    """`call_c` (one C statement) timed as `event`."""
    return f"{{ int64_t t = prof_now(); {call_c} prof_record({event}, t); }}"


def profile_prelude(name: str) -> list[str]:
    return [
        "#include <pthread.h>",
        "#include <time.h>",
        "typedef struct { int32_t kernel; uint32_t thread; int64_t start_ns, end_ns; }"
        f" {name}_prof_event;",
        f"static {name}_prof_event *prof_events; /* the profiled run's (prof_lock held) */",
        "static int64_t prof_capacity, prof_count;",
        "static flowc_rendezvous *prof_rv; /* the profiled context's (partitioned) */",
        "static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;",
        "static _Thread_local int prof_on; /* this thread runs the profiled context */",
        "static _Thread_local uint32_t prof_thread;",
        "static uint32_t prof_next_thread;",
        "static inline int64_t prof_now(void) {",
        "  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);",
        "  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;",
        "}",
        "static inline void prof_record(int32_t kernel, int64_t start) {",
        "  int64_t end = prof_now();",
        "  if (!prof_on) return;",
        "  if (!prof_thread) prof_thread = __atomic_add_fetch(&prof_next_thread, 1, "
        "__ATOMIC_RELAXED);",
        "  int64_t i = __atomic_fetch_add(&prof_count, 1, __ATOMIC_RELAXED);",
        f"  if (i < prof_capacity) prof_events[i] = ({name}_prof_event)"
        "{kernel, prof_thread, start, end};",
        "}",
        "static inline void prof_join(flowc_rendezvous *rv, uint32_t partition) {",
        "  prof_on = rv == __atomic_load_n(&prof_rv, __ATOMIC_ACQUIRE);",
        "  prof_thread = partition + 1;",
        "}",
        "static inline void prof_leave(void) { prof_on = 0; }",
    ]


def profile_api(name: str) -> list[str]:
    api = "__attribute__((visibility(\"default\")))"
    return [
        f"{api} int {name}_run_profiled({name}_ctx *ctx, void *events, int64_t capacity,",
        "                                 int64_t *count) {",
        "  flowc_ctx *c = (flowc_ctx *)ctx;",
        "  pthread_mutex_lock(&prof_lock);",
        "  *count = 0;",
        "  if (c->model->num_partitions && !c->rendezvous) { /* start its threads, untimed */",
        f"    int first = {name}_rt_run(c);",
        "    if (first) { pthread_mutex_unlock(&prof_lock); return first; }",
        "  }",
        f"  prof_events = ({name}_prof_event *)events; prof_capacity = capacity;",
        "  prof_count = 0;",
        "  __atomic_store_n(&prof_rv, c->rendezvous, __ATOMIC_RELEASE);",
        "  prof_on = 1;",
        f"  int status = {name}_rt_run(c);",
        "  prof_on = 0;",
        "  __atomic_store_n(&prof_rv, (flowc_rendezvous *)0, __ATOMIC_RELEASE);",
        "  *count = prof_count; prof_events = 0; prof_capacity = 0;",
        "  pthread_mutex_unlock(&prof_lock);",
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
