/* A stress test of the runtime's pool (pool.c) through its OpenMP entry points, as parallel
 * kernels call them; tests/runtime/test_threads_pool.py builds it with -DFLOWC_PREFIX=t_
 * (plain and under ThreadSanitizer) and runs it. Exit status 0 and "ok" when:
 * - every iteration of every region's loop runs exactly once, with or without a
 *   `__kmpc_barrier` at the end of the loop, at 1 to 4 threads, with trip counts below,
 *   at and above the thread count;
 * - each of a region's n slots runs exactly once (slot numbers 0..n-1);
 * - a barrier orders writes: after it each slot reads what every other slot wrote before;
 * - a region forked inside a region runs serially and still covers its whole loop;
 * - regions right after a pause long enough for the workers to sleep are still correct
 *   (the caller may then run every slot itself);
 * - dynamic loops (`__kmpc_dispatch_*`, 1-based inclusive bounds as LLVM emits them, and
 *   a negative step) run every iteration exactly once, also when one slot starts late (the
 *   others take its chunks) and when each chunk forks a nested region with a dynamic loop
 *   of its own. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flowc_rt.h"

typedef void (*micro)(int32_t *, int32_t *, ...);
void t___kmpc_fork_call(void *loc, int32_t argc, micro fn, ...);
void t___kmpc_for_static_init_8u(void *, int32_t, int32_t, int32_t *, uint64_t *, uint64_t *,
                                 uint64_t *, uint64_t, uint64_t);
void t___kmpc_for_static_init_4(void *, int32_t, int32_t, int32_t *, int32_t *, int32_t *,
                                int32_t *, int32_t, int32_t);
void t___kmpc_for_static_fini(void *, int32_t);
void t___kmpc_barrier(void *, int32_t);
int32_t t___kmpc_global_thread_num(void *);
void t___kmpc_dispatch_init_8u(void *, int32_t, int32_t, uint64_t, uint64_t, uint64_t,
                               uint64_t);
int32_t t___kmpc_dispatch_next_8u(void *, int32_t, int32_t *, uint64_t *, uint64_t *,
                                  uint64_t *);
void t___kmpc_dispatch_init_4(void *, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t);
int32_t t___kmpc_dispatch_next_4(void *, int32_t, int32_t *, int32_t *, int32_t *, int32_t *);

#define MAX 1000
typedef struct {
  uint64_t trips;
  int barrier;
  int32_t hits[MAX];      /* per iteration: times it ran (atomic) */
  int32_t slots[64];      /* per slot: times it ran (atomic) */
  int32_t before[64];     /* per slot: written before the barrier */
  int32_t bad_after;      /* atomic: a slot saw a missing write after the barrier */
  int32_t inner[MAX];     /* nested region: per iteration (atomic) */
  int32_t inner_runs;     /* nested regions forked (by slot 0 only) */
} region;

static void loop8(region *r, int tid) {
  uint64_t lo = 0, hi = r->trips - 1, stride = 1;
  int32_t last = 0;
  t___kmpc_for_static_init_8u(0, tid, 34, &last, &lo, &hi, &stride, 1, 0);
  for (uint64_t i = lo; i <= hi && i < r->trips; i++)
    __atomic_add_fetch(&r->hits[i], 1, __ATOMIC_RELAXED);
  t___kmpc_for_static_fini(0, tid);
}

static void body(int32_t *gtid, int32_t *btid, region *r, int32_t *n) {
  (void)btid;
  int tid = t___kmpc_global_thread_num(0);
  if (tid != *gtid) __atomic_store_n(&r->bad_after, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&r->slots[tid], 1, __ATOMIC_RELAXED);
  loop8(r, tid);
  if (!r->barrier) return;
  __atomic_store_n(&r->before[tid], 1, __ATOMIC_RELAXED);
  t___kmpc_barrier(0, tid);
  for (int s = 0; s < *n; s++)
    if (!__atomic_load_n(&r->before[s], __ATOMIC_RELAXED))
      __atomic_store_n(&r->bad_after, 1, __ATOMIC_RELAXED);
}

static void inner(int32_t *gtid, int32_t *btid, region *r) {
  (void)btid;
  int32_t lo = 0, hi = (int32_t)r->trips - 1, stride = 1, last = 0;
  t___kmpc_for_static_init_4(0, *gtid, 34, &last, &lo, &hi, &stride, 1, 0);
  for (int32_t i = lo; i <= hi; i++) __atomic_add_fetch(&r->inner[i], 1, __ATOMIC_RELAXED);
  t___kmpc_for_static_fini(0, *gtid);
}

static void outer(int32_t *gtid, int32_t *btid, region *r) {
  (void)btid;
  if (*gtid == 0) t___kmpc_fork_call(0, 1, (micro)inner, r);
}

/* inner[i] += 1 for i in [0, trips), a dynamic loop counted down with a negative step */
static void inner_dyn(int32_t *gtid, int32_t *btid, region *r) {
  (void)btid;
  int32_t lo, hi, st, last;
  t___kmpc_dispatch_init_4(0, *gtid, 35, (int32_t)r->trips - 1, 0, -1, 1);
  while (t___kmpc_dispatch_next_4(0, *gtid, &last, &lo, &hi, &st))
    for (int32_t i = lo; i >= hi; i += st) __atomic_add_fetch(&r->inner[i], 1, __ATOMIC_RELAXED);
}

/* hits[i] += 1 for i in [0, trips) by chunks (bounds 1..trips, as LLVM emits them); with
 * `barrier` set, slot 1 starts late; with `inner` set (slot 0 only), each chunk forks a
 * nested region (serial) whose own dynamic loop must not disturb this one. */
static void body_dyn(int32_t *gtid, int32_t *btid, region *r, int32_t *nested) {
  (void)btid;
  int tid = t___kmpc_global_thread_num(0);
  __atomic_add_fetch(&r->slots[tid], 1, __ATOMIC_RELAXED);
  if (r->barrier && tid == 1) nanosleep(&(struct timespec){0, 300000}, NULL);
  uint64_t lo, hi, st;
  int32_t last;
  t___kmpc_dispatch_init_8u(0, tid, 35, 1, r->trips, 1, 1);
  while (t___kmpc_dispatch_next_8u(0, tid, &last, &lo, &hi, &st)) {
    for (uint64_t i = lo; i <= hi; i += st) __atomic_add_fetch(&r->hits[i - 1], 1, __ATOMIC_RELAXED);
    if (*nested && tid == 0) {
      t___kmpc_fork_call(0, 1, (micro)inner_dyn, r);
      r->inner_runs++;
    }
  }
}

static int check(region *r, int n, const char *what, int threads) {
  for (uint64_t i = 0; i < r->trips; i++)
    if (r->hits[i] != 1)
      return printf("%s, %d threads, %llu trips: iteration %llu ran %d times\n", what,
                    threads, (unsigned long long)r->trips, (unsigned long long)i, r->hits[i]);
  for (int s = 0; s < 64; s++)
    if (r->slots[s] != (s < n))
      return printf("%s, %d threads: slot %d ran %d times\n", what, threads, s, r->slots[s]);
  if (r->bad_after) return printf("%s, %d threads: a barrier let a slot through early\n", what,
                                  threads);
  return 0;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 200;
  char err[256];
  static region r;
  for (int threads = 1; threads <= 4; threads++) {
    flowc_pool *pool = threads > 1 ? t_pool_create(threads, err, sizeof err) : 0;
    if (threads > 1 && !pool) return printf("%s\n", err), 1;
    t_pool_enter(pool);
    for (int k = 0; k < rounds; k++) {
      uint64_t trips[] = {1, 2, 3, 4, 5, 7, 64, 999};
      for (int b = 0; b < 2; b++)
        for (size_t j = 0; j < sizeof trips / sizeof *trips; j++) {
          memset(&r, 0, sizeof r);
          r.trips = trips[j];
          r.barrier = b;
          int32_t n = threads;
          t___kmpc_fork_call(0, 2, (micro)body, &r, &n);
          if (check(&r, threads, b ? "barrier" : "nowait", threads)) return 1;
        }
      for (int late = 0; late < 2; late++)
        for (int32_t nested = 0; nested < 2; nested++)
          for (size_t j = 0; j < sizeof trips / sizeof *trips; j++) {
            if (late && j % 3) continue; /* (slow: a sleep per region) */
            memset(&r, 0, sizeof r);
            r.trips = trips[j];
            r.barrier = late;
            t___kmpc_fork_call(0, 2, (micro)body_dyn, &r, &nested);
            r.barrier = 0;
            if (check(&r, threads, "dynamic", threads)) return 1;
            for (uint64_t i = 0; i < r.trips; i++) /* each nested loop ran whole */
              if (r.inner[i] != r.inner_runs)
                return printf("dynamic nested, %d threads: iteration %llu ran %d times in %d "
                              "loops\n", threads, (unsigned long long)i, r.inner[i],
                              r.inner_runs), 1;
          }
      memset(&r, 0, sizeof r);
      r.trips = 37;
      t___kmpc_fork_call(0, 1, (micro)outer, &r);
      for (int i = 0; i < 37; i++)
        if (r.inner[i] != 1) return printf("nested, %d threads: iteration %d ran %d times\n",
                                           threads, i, r.inner[i]), 1;
      if (k % 50 == 0) { /* let the workers go to sleep */
        nanosleep(&(struct timespec){0, 2000000}, NULL);
      }
    }
    t_pool_leave();
    if (pool) t_pool_destroy(pool);
  }
  puts("ok");
  return 0;
}
