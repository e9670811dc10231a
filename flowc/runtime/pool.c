/* pool.c: a small pthread pool per context, and the OpenMP entry points (under the model's
 * prefix) that kernels lowered with convert-scf-to-openmp call, so no libomp is needed.
 *
 * pool_run(fn) runs fn on every thread of the pool, the caller being thread 0. The pool of
 * the run in progress is a per-thread variable set by rt_run (pool_enter/pool_leave); with
 * no pool, or inside a parallel region, work runs on the calling thread alone. */
#include "flowc_rt.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  flowc_pool *pool;
  int tid;
} worker_arg;

struct flowc_pool {
  int n;
  pthread_t *threads;
  worker_arg *args;
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  pthread_barrier_t barrier;
  unsigned long generation; /* atomic: bumped to start a region */
  int pending;              /* atomic: workers still running the region */
  int stop;                 /* atomic */
  int sleepers;             /* workers blocked on `wake` (under mu) */
  flowc_task_fn fn;
  void *arg;
};

/* Wake-up latency matters more than idle CPU for short regions: workers and the caller
 * spin this many pauses (tens of microseconds) before blocking on a condition variable. */
#define FLOWC_SPIN 20000

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)

static __thread flowc_pool *current_pool; /* the pool of this thread's run */
static __thread int current_tid;          /* this thread's number in the running region */
static __thread int in_region;            /* inside pool_run: nested regions run serially */

static void *worker(void *p) {
  worker_arg *w = p;
  flowc_pool *pool = w->pool;
  unsigned long seen = 0;
  current_pool = pool;
  for (;;) {
    for (int i = 0; i < FLOWC_SPIN && LOAD(pool->generation) == seen && !LOAD(pool->stop); i++)
      cpu_pause();
    if (LOAD(pool->generation) == seen && !LOAD(pool->stop)) {
      pthread_mutex_lock(&pool->mu);
      pool->sleepers++;
      while (!LOAD(pool->stop) && LOAD(pool->generation) == seen)
        pthread_cond_wait(&pool->wake, &pool->mu);
      pool->sleepers--;
      pthread_mutex_unlock(&pool->mu);
    }
    if (LOAD(pool->stop)) return NULL;
    seen = LOAD(pool->generation);
    current_tid = w->tid;
    in_region = 1;
    pool->fn(pool->arg, w->tid, pool->n);
    in_region = 0;
    if (__atomic_sub_fetch(&pool->pending, 1, __ATOMIC_ACQ_REL) == 0) {
      pthread_mutex_lock(&pool->mu);
      pthread_cond_signal(&pool->done);
      pthread_mutex_unlock(&pool->mu);
    }
  }
}

flowc_pool *FLOWC_RT(pool_create)(int n, char *error, size_t error_bytes) {
  flowc_pool *pool = calloc(1, sizeof *pool);
  if (!pool || !(pool->threads = calloc((size_t)n, sizeof(pthread_t))) ||
      !(pool->args = calloc((size_t)n, sizeof(worker_arg)))) {
    if (pool) free(pool->threads);
    free(pool);
    snprintf(error, error_bytes, "out of memory creating a pool of %d threads", n);
    return NULL;
  }
  pool->n = n;
  pthread_mutex_init(&pool->mu, NULL);
  pthread_cond_init(&pool->wake, NULL);
  pthread_cond_init(&pool->done, NULL);
  pthread_barrier_init(&pool->barrier, NULL, (unsigned)n);
  for (int t = 1; t < n; t++) {
    pool->args[t] = (worker_arg){pool, t};
    int rc = pthread_create(&pool->threads[t], NULL, worker, &pool->args[t]);
    if (rc != 0) {
      pool->n = t; /* destroy joins the threads started so far */
      FLOWC_RT(pool_destroy)(pool);
      snprintf(error, error_bytes, "cannot start thread %d of %d: %s", t, n, strerror(rc));
      return NULL;
    }
  }
  return pool;
}

void FLOWC_RT(pool_destroy)(flowc_pool *pool) {
  pthread_mutex_lock(&pool->mu);
  __atomic_store_n(&pool->stop, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mu);
  for (int t = 1; t < pool->n; t++) pthread_join(pool->threads[t], NULL);
  pthread_barrier_destroy(&pool->barrier);
  pthread_cond_destroy(&pool->wake);
  pthread_cond_destroy(&pool->done);
  pthread_mutex_destroy(&pool->mu);
  free(pool->args);
  free(pool->threads);
  free(pool);
}

void FLOWC_RT(pool_run)(flowc_pool *pool, flowc_task_fn fn, void *arg) {
  if (!pool || pool->n == 1 || in_region) {
    int tid = current_tid, nested = in_region;
    current_tid = 0;
    in_region = 1;
    fn(arg, 0, 1);
    current_tid = tid;
    in_region = nested;
    return;
  }
  pool->fn = fn;
  pool->arg = arg;
  __atomic_store_n(&pool->pending, pool->n - 1, __ATOMIC_RELEASE);
  __atomic_add_fetch(&pool->generation, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_lock(&pool->mu);
  if (pool->sleepers) pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mu);
  current_tid = 0;
  in_region = 1;
  fn(arg, 0, pool->n);
  in_region = 0;
  for (int i = 0; i < FLOWC_SPIN && LOAD(pool->pending) > 0; i++) cpu_pause();
  if (LOAD(pool->pending) > 0) {
    pthread_mutex_lock(&pool->mu);
    while (LOAD(pool->pending) > 0) pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
  }
}

void FLOWC_RT(pool_enter)(flowc_pool *pool) { current_pool = pool; }
void FLOWC_RT(pool_leave)(void) { current_pool = NULL; }

/* ---- OpenMP entry points (the subset convert-scf-to-openmp + LLVM's OpenMPIRBuilder use) */
typedef struct ident ident_t;
typedef void (*kmpc_micro)(int32_t *gtid, int32_t *btid, ...);
#define FLOWC_MAX_FORK_ARGS 16

typedef struct {
  kmpc_micro fn;
  int argc;
  void *argv[FLOWC_MAX_FORK_ARGS];
  int nthreads;
} fork_call;

static void run_micro(void *p, int tid, int n) {
  fork_call *c = p;
  int32_t gtid = tid, btid = tid;
  void **a = c->argv;
  (void)n;
  switch (c->argc) {
#define A(k) a[k]
  case 0: c->fn(&gtid, &btid); break;
  case 1: c->fn(&gtid, &btid, A(0)); break;
  case 2: c->fn(&gtid, &btid, A(0), A(1)); break;
  case 3: c->fn(&gtid, &btid, A(0), A(1), A(2)); break;
  case 4: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3)); break;
  case 5: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4)); break;
  case 6: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4), A(5)); break;
  case 7: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4), A(5), A(6)); break;
  case 8: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7)); break;
  case 9: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8)); break;
  case 10: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9));
    break;
  case 11: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9),
                 A(10)); break;
  case 12: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9),
                 A(10), A(11)); break;
  case 13: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9),
                 A(10), A(11), A(12)); break;
  case 14: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9),
                 A(10), A(11), A(12), A(13)); break;
  case 15: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9),
                 A(10), A(11), A(12), A(13), A(14)); break;
  default: c->fn(&gtid, &btid, A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9),
                 A(10), A(11), A(12), A(13), A(14), A(15)); break;
#undef A
  }
}

void FLOWC_RT(__kmpc_fork_call)(ident_t *loc, int32_t argc, kmpc_micro fn, ...) {
  (void)loc;
  fork_call c = {fn, argc, {0}, 1};
  va_list ap;
  va_start(ap, fn);
  for (int k = 0; k < argc && k < FLOWC_MAX_FORK_ARGS; k++) c.argv[k] = va_arg(ap, void *);
  va_end(ap);
  FLOWC_RT(pool_run)(in_region ? NULL : current_pool, run_micro, &c);
}

int32_t FLOWC_RT(__kmpc_global_thread_num)(ident_t *loc) {
  (void)loc;
  return current_tid;
}

static int region_threads(void) {
  return in_region && current_pool ? current_pool->n : 1;
}

/* Static schedule: thread t of n gets one contiguous block of [*lower, *upper]. */
#define STATIC_INIT(suffix, T)                                                                \
  void FLOWC_RT(__kmpc_for_static_init_##suffix)(ident_t * loc, int32_t gtid, int32_t sched, \
                                                 int32_t *last, T *lower, T *upper, T *stride, \
                                                 T incr, T chunk) {                            \
    (void)loc; (void)sched; (void)chunk;                                                       \
    int n = region_threads();                                                                  \
    T trips = incr > 0 ? (T)((*upper - *lower) / incr + 1) : (T)((*lower - *upper) / -incr + 1); \
    T per = (T)(trips / (T)n), extra = (T)(trips % (T)n), t = (T)gtid;                         \
    T first = (T)(t * per + (t < extra ? t : extra));                                          \
    T count = (T)(per + (t < extra ? 1 : 0));                                                  \
    T base = *lower;                                                                           \
    *lower = (T)(base + first * incr);                                                         \
    *upper = (T)(*lower + (count - 1) * incr);                                                 \
    *last = gtid == n - 1 || (count > 0 && first + count == trips);                            \
    *stride = (T)(trips * incr);                                                               \
    if (count == 0) *upper = (T)(*lower - incr);                                               \
  }
STATIC_INIT(4, int32_t)
STATIC_INIT(4u, uint32_t)
STATIC_INIT(8, int64_t)
STATIC_INIT(8u, uint64_t)

void FLOWC_RT(__kmpc_for_static_fini)(ident_t *loc, int32_t gtid) {
  (void)loc;
  (void)gtid;
}

void FLOWC_RT(__kmpc_barrier)(ident_t *loc, int32_t gtid) {
  (void)loc;
  (void)gtid;
  if (region_threads() > 1) pthread_barrier_wait(&current_pool->barrier);
}
