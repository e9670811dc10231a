/* threads_forkjoin.c: the fork/join cost of the runtime's pool (pool.c), driven as flowc's
 * parallel kernels drive it: `__kmpc_fork_call` of an outlined body that takes its share of
 * a loop with `__kmpc_for_static_init_8u`, runs it, calls `__kmpc_for_static_fini` and, in
 * the "barrier" variant, `__kmpc_barrier` (what a worksharing loop without `nowait` ends
 * with); or, MODE 2, a dynamic loop (`__kmpc_dispatch_init/next_8u`, what kernels call
 * since parallel.py gives their loops a dynamic schedule; built with -DHAVE_DISPATCH only:
 * without, MODE 2 runs MODE 1, the pattern of kernels before). Built by
 * bench/threads_forkjoin.py with -DFLOWC_PREFIX=t_ against a runtime's sources.
 *
 *   threads_forkjoin THREADS REGIONS TRIPS MODE(0|1|2) GAP_NS
 *
 * prints one line: the median over 15 batches of REGIONS forks of the nanoseconds per fork
 * (fork, the loop of TRIPS iterations, join), after checking every element was written
 * once per fork. GAP_NS > 0 busy-waits that long on the caller between forks (serial work
 * between kernels: long gaps let the workers go to sleep). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "flowc_rt.h"

typedef void (*micro)(int32_t *, int32_t *, ...);
void t___kmpc_fork_call(void *loc, int32_t argc, micro fn, ...);
void t___kmpc_for_static_init_8u(void *, int32_t, int32_t, int32_t *, uint64_t *, uint64_t *,
                                 uint64_t *, uint64_t, uint64_t);
void t___kmpc_for_static_fini(void *, int32_t);
void t___kmpc_barrier(void *, int32_t);
int32_t t___kmpc_global_thread_num(void *);
#ifdef HAVE_DISPATCH
void t___kmpc_dispatch_init_8u(void *, int32_t, int32_t, uint64_t, uint64_t, uint64_t,
                               uint64_t);
int32_t t___kmpc_dispatch_next_8u(void *, int32_t, int32_t *, uint64_t *, uint64_t *,
                                  uint64_t *);
#endif

static void body(int32_t *gtid, int32_t *btid, int32_t *out, uint64_t *trips, int64_t *bar) {
  (void)btid;
  uint64_t lo = 0, hi = *trips - 1, stride = 1;
  int32_t last = 0, tid = t___kmpc_global_thread_num(0);
#ifdef HAVE_DISPATCH
  if (*bar == 2) {
    t___kmpc_dispatch_init_8u(0, tid, 35, 1, *trips, 1, 1);
    while (t___kmpc_dispatch_next_8u(0, tid, &last, &lo, &hi, &stride))
      for (uint64_t i = lo; i <= hi; i++) out[i - 1]++;
    return;
  }
#endif
  t___kmpc_for_static_init_8u(0, tid, 34, &last, &lo, &hi, &stride, 1, 0);
  for (uint64_t i = lo; i <= hi && i < *trips; i++) out[i]++;
  t___kmpc_for_static_fini(0, *gtid);
  if (*bar) t___kmpc_barrier(0, tid);
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc != 6) return fprintf(stderr, "usage: %s THREADS REGIONS TRIPS MODE GAP_NS\n",
                                argv[0]), 2;
  int threads = atoi(argv[1]), regions = atoi(argv[2]);
  uint64_t trips = strtoull(argv[3], 0, 10);
  int64_t bar = atoi(argv[4]);
#ifndef HAVE_DISPATCH
  if (bar == 2) bar = 1;
#endif
  double gap = atof(argv[5]);
  char err[256];
  flowc_pool *pool = threads > 1 ? t_pool_create(threads, err, sizeof err) : 0;
  if (threads > 1 && !pool) return fprintf(stderr, "%s\n", err), 1;
  int32_t *out = calloc(trips, sizeof *out);
  double times[15];
  int forks = 0;
  t_pool_enter(pool);
  for (int b = -1; b < 15; b++) { /* batch -1 warms up */
    double t0 = now_ns();
    for (int r = 0; r < regions; r++) {
      t___kmpc_fork_call(0, 3, (micro)body, out, &trips, &bar);
      forks++;
      if (gap > 0)
        for (double g0 = now_ns(); now_ns() - g0 < gap;) {
        }
    }
    if (b >= 0) times[b] = (now_ns() - t0) / regions;
  }
  t_pool_leave();
  for (uint64_t i = 0; i < trips; i++)
    if (out[i] != forks) return fprintf(stderr, "element %llu written %d times, not %d\n",
                                        (unsigned long long)i, out[i], forks), 1;
  qsort(times, 15, sizeof *times, cmp);
  printf("%.1f\n", times[7] - gap);
  if (pool) t_pool_destroy(pool);
  free(out);
  return 0;
}
