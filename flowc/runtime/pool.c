/* pool.c: a small pthread pool per context, and the OpenMP entry points (under the model's
 * prefix) that kernels lowered with convert-scf-to-openmp call, so no libomp is needed.
 *
 * pool_run(fn) runs fn(arg, slot, n) once for each of the pool's n slots and returns when
 * all have returned. The caller runs slot 0, then claims, one at a time, any slot no worker
 * has claimed yet (an atomic counter tagged with the region's generation), so a worker that
 * is asleep or descheduled never delays a region it has not started: at worst the caller
 * runs every slot itself. A thread claims another slot only after finishing the one it
 * holds, so a region that calls `__kmpc_barrier` (which every slot must reach, OpenMP's
 * rule) is still correct: no slot can pass a barrier before all n were claimed.
 *
 * Within a slot, a dynamic worksharing loop (`__kmpc_dispatch_*`: flowc's kernels use
 * them) hands out the slot's static share in chunks and then the chunks other slots have
 * not claimed, so a worker descheduled in the middle of a loop holds it up by one chunk.
 * Each slot's chunk counter has a cache line of its own and carries the region's
 * generation (nothing to reset between regions), so a slot claiming its own chunks touches
 * no line another thread writes (on the 2-vCPU VM a line moving between the vCPUs costs
 * ~30 ns or 160-460 ns, depending on where the host placed them:
 * bench/results/smallnets_threads.notes.md).
 *
 * Hot path without locks or system calls: a region is a few stores and one atomic
 * increment per slot. Workers wait for the next generation after their last slot, the
 * caller for the count of finished slots: spinning, then yielding, then asleep on a futex
 * (a system call wakes sleepers only when some sleep): see SPIN_NS.
 *
 * The pool of the run in progress is a per-thread variable set by rt_run (pool_enter /
 * pool_leave); with no pool, or inside a parallel region (nested), work runs serially on
 * the calling thread. */
#define _GNU_SOURCE
#include "flowc_rt.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <dirent.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

typedef struct {
  flowc_pool *pool;
  int tid;
} worker_arg;

/* Dynamic loops (`__kmpc_dispatch_*`, what flowc's worksharing loops use): each slot's
 * static share is cut into CHUNKS chunks of halving sizes (chunk_start); a slot claims its
 * own chunks in order, then those other slots have not claimed, so a slow or descheduled
 * thread holds up at most one chunk (at most half its share). Per region, the first
 * DISPATCH_LOOPS dynamic loops are shared that way; later ones (never generated: a region
 * holds one loop) fall back to static shares. A claim
 * counter (one per loop and slot, on its own cache line) holds the region's generation
 * << CLAIM_BITS | the chunks of that slot's share claimed in that region; a counter of an
 * older generation counts as 0. */
#define CHUNKS 6
#define DISPATCH_LOOPS 4
#define CLAIM_BITS 8 /* CHUNKS < 1 << CLAIM_BITS; the generation keeps 56 bits */

typedef struct {
  _Alignas(64) uint64_t word; /* atomic */
} chunk_claim;

#define SLOT_BITS 16 /* claim word: generation << SLOT_BITS | next unclaimed slot */
#define SLOT_MASK ((1u << SLOT_BITS) - 1)

struct flowc_pool {
  /* written by the caller once per region, read by the workers */
  _Alignas(64) uint64_t claim; /* atomic */
  uint32_t wake;               /* atomic: the generation's low bits (the workers' futex) */
  uint32_t stop;               /* atomic */
  flowc_task_fn fn;            /* atomic (relaxed): read after a successful claim */
  void *arg;                   /* atomic (relaxed) */
  /* written by every slot that finishes */
  _Alignas(64) uint32_t done;  /* atomic: slots finished (the caller's futex) */
  uint32_t caller_sleeps;      /* atomic: the caller sleeps on `done` */
  _Alignas(64) uint32_t sleepers; /* atomic: workers asleep on `wake` */
  uint32_t started;               /* atomic: workers that have touched their TLS */
  /* __kmpc_barrier: a central counter and a generation (futex) */
  _Alignas(64) uint32_t bar_arrived; /* atomic */
  uint32_t bar_gen;                  /* atomic */
  uint32_t bar_sleepers;             /* atomic */
  _Alignas(64) int n;
  uint64_t generation; /* the caller's count of regions */
  chunk_claim *chunks; /* [loop k][slot s]: s's chunks claimed in loop k (see dispatch) */
  pthread_t *threads;
  worker_arg *args;
};

/* Waiting: spinning costs a core, waking a sleeper a system call and a scheduler hop
 * (microseconds). So a waiter spins (pause) for SPIN_NS, then yields its core between
 * checks (so that on a loaded machine the thread it waits for, or another process, can
 * run) until YIELD_NS, then sleeps. Kernels of a model follow each other within
 * microseconds, and back-to-back runs within a few tens (the caller's own work between
 * them); a pause between runs lets the workers sleep. SPIN_NS covers both gaps: a worker
 * that yields when another process wants its core loses that core for a scheduler slice
 * (milliseconds), and with it every parallel loop of the next run (ResNet at 2 threads ran
 * at its 1-thread speed beside one busy process with a 20 us spin). */
#define SPIN_NS 300000
#define YIELD_NS 1000000

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define LOAD_SC(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define STORE_SC(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Sleep while *word == value (returns at once if it differs, or spuriously), and wake
 * `count` sleepers of word. Without futexes (not Linux): a short sleep, then the caller
 * checks again. */
static void futex_wait(uint32_t *word, uint32_t value) {
#ifdef __linux__
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
#else
  (void)word;
  (void)value;
  nanosleep(&(struct timespec){0, 20000}, NULL);
#endif
}

static void futex_wake(uint32_t *word, int count) {
#ifdef __linux__
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
#else
  (void)word;
  (void)count;
#endif
}

/* Spin (then yield) while *word == value, for at most YIELD_NS; whether it changed. */
static int spin_while_equal(uint32_t *word, uint32_t value) {
  uint64_t start = 0, spent = 0;
  for (unsigned i = 0; spent < YIELD_NS; i++) {
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != value) return 1;
    if (i % 64 == 0) {
      uint64_t t = now_ns();
      start = i ? start : t;
      spent = t - start;
    }
    if (spent < SPIN_NS)
      cpu_pause();
    else
      sched_yield();
  }
  return 0;
}

/* Wait until *word != value: spin for SPIN_NS, then sleep (counted in *sleepers so that the
 * writer knows to wake). The writer stores *word, then reads *sleepers (both seq_cst); the
 * waiter counts itself, then reads *word: one of them sees the other. */
static void wait_change(uint32_t *word, uint32_t value, uint32_t *sleepers) {
  if (spin_while_equal(word, value)) return;
  __atomic_add_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(word, __ATOMIC_SEQ_CST) == value) futex_wait(word, value);
  __atomic_sub_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
}

static void wake_all(uint32_t *word, uint32_t *sleepers) {
  if (LOAD_SC(*sleepers)) futex_wake(word, INT_MAX);
}

static __thread flowc_pool *current_pool; /* the pool of this thread's run */
static __thread flowc_pool *region_pool;  /* the pool of the region this thread is in */
static __thread int current_tid;          /* this thread's slot in the running region */
static __thread uint64_t region_gen;      /* the running region's generation */
static __thread int region_n = 1;         /* the slots of the running region */
static __thread int in_region;            /* inside pool_run: nested regions run serially */
static __thread int loops_started;        /* dynamic loops this slot started in its region */
typedef struct {
  int64_t lower, incr; /* the first iteration's value and the step (as the loop's T) */
  uint64_t trips;      /* iterations */
  chunk_claim *claims; /* the loop's per-slot claim counters; NULL: one static share */
  int victim, tried;   /* the slot whose chunks are claimed next, slots tried */
  int served;          /* the static share was handed out */
} dynamic_loop;
static __thread dynamic_loop dyn; /* this slot's dynamic loop (dispatch_init, _next) */

static void run_slot(flowc_pool *pool, uint64_t gen, flowc_task_fn fn, void *arg, int slot,
                     int n) {
  flowc_pool *outer_pool = region_pool;
  int outer_tid = current_tid, outer_n = region_n, outer_in = in_region;
  uint64_t outer_gen = region_gen;
  region_pool = pool;
  region_gen = gen;
  current_tid = slot;
  region_n = n;
  in_region = 1;
  int outer_loops = loops_started;
  dynamic_loop outer_dyn = dyn;
  loops_started = 0;
  fn(arg, slot, n);
  loops_started = outer_loops;
  dyn = outer_dyn;
  region_pool = outer_pool;
  region_gen = outer_gen;
  current_tid = outer_tid;
  region_n = outer_n;
  in_region = outer_in;
}

/* Claim and run the region's unclaimed slots until none is left. */
static void run_unclaimed(flowc_pool *pool) {
  uint32_t n = (uint32_t)pool->n;
  uint64_t c = __atomic_load_n(&pool->claim, __ATOMIC_ACQUIRE);
  while ((c & SLOT_MASK) < n) {
    if (!__atomic_compare_exchange_n(&pool->claim, &c, c + 1, 1, __ATOMIC_ACQUIRE,
                                     __ATOMIC_ACQUIRE))
      continue; /* c now holds the current word */
    /* The region of this claim cannot end (nor the next one start) before this slot is
     * done, so fn and arg are this region's. */
    flowc_task_fn fn = __atomic_load_n(&pool->fn, __ATOMIC_RELAXED);
    void *arg = __atomic_load_n(&pool->arg, __ATOMIC_RELAXED);
    run_slot(pool, c >> SLOT_BITS, fn, arg, (int)(c & SLOT_MASK), (int)n);
    if (__atomic_add_fetch(&pool->done, 1, __ATOMIC_SEQ_CST) == n && LOAD_SC(pool->caller_sleeps))
      futex_wake(&pool->done, 1);
    c = __atomic_load_n(&pool->claim, __ATOMIC_ACQUIRE);
  }
}

static void *worker(void *p) {
  flowc_pool *pool = ((worker_arg *)p)->pool;
  uint32_t seen = 0;
  /* This library's thread-local block (dynamic TLS when it is dlopen'ed) is allocated by
   * glibc at a thread's first access: here, while pool_create waits, not in a run. */
  in_region = 0;
  __atomic_add_fetch(&pool->started, 1, __ATOMIC_SEQ_CST);
  for (;;) {
    wait_change(&pool->wake, seen, &pool->sleepers);
    if (LOAD(pool->stop)) return NULL;
    seen = LOAD(pool->wake);
    run_unclaimed(pool);
  }
}

/* Workers on CPUs of their own: each worker t (1..n-1) is pinned to the allowed CPU, other
 * than the creating thread's, that the fewest threads of this process are pinned to (ties:
 * the first after the creating thread's CPU), when the process's allowed set has at least
 * n CPUs; else nothing is pinned. The counts come from the OS (each thread's affinity, read
 * through /proc/self/task when a pool is created), so the pools of several models (each
 * artifact has its own copy of this runtime) or partitions take different CPUs while free
 * ones remain. Unpinned, a worker woken from its futex after an idle pause was placed on
 * the waking caller's CPU and shared it for many runs until the scheduler moved it (ResNet
 * at 2 threads: 1.2 ms just after a 150 ms pause, 0.6 ms once spread out); the caller is
 * never pinned, so the scheduler moves it off a worker's CPU at once. FLOWC_PIN_THREADS=0
 * (read when a pool is created) leaves every worker unpinned. Best effort throughout: two
 * pools created at the same moment may pick the same CPUs; a refused call pins nothing. */
#ifdef __linux__
static void count_pinned(int *per_cpu) {
  DIR *dir = opendir("/proc/self/task");
  if (!dir) return;
  for (struct dirent *entry; (entry = readdir(dir)) != NULL;) {
    int tid = atoi(entry->d_name);
    cpu_set_t set;
    if (tid <= 0 || sched_getaffinity(tid, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1)
      continue;
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &set)) {
        per_cpu[c]++;
        break;
      }
  }
  closedir(dir);
}
#endif

static void pin_workers(flowc_pool *pool) {
#ifdef __linux__
  const char *wanted = getenv("FLOWC_PIN_THREADS");
  cpu_set_t allowed;
  if ((wanted && strcmp(wanted, "0") == 0) ||
      sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < pool->n)
    return;
  int per_cpu[CPU_SETSIZE] = {0};
  count_pinned(per_cpu);
  int here = sched_getcpu(), cpus[CPU_SETSIZE], count = 0, start = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &allowed)) {
      if (c == here) start = count;
      cpus[count++] = c;
    }
  for (int t = 1; t < pool->n; t++) {
    int best = -1;
    for (int i = 1; i < count; i++) { /* the CPUs after the creator's, in order */
      int c = cpus[(start + i) % count];
      if (best < 0 || per_cpu[c] < per_cpu[best]) best = c;
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(best, &one);
    if (pthread_setaffinity_np(pool->threads[t], sizeof one, &one) == 0) per_cpu[best]++;
  }
#else
  (void)pool;
#endif
}

flowc_pool *FLOWC_RT(pool_create)(int n, char *error, size_t error_bytes) {
  flowc_pool *pool = NULL;
  if (n < 1 || n > (int)SLOT_MASK) {
    snprintf(error, error_bytes, "a pool of %d threads (1..%u)", n, SLOT_MASK);
    return NULL;
  }
  if (posix_memalign((void **)&pool, 64, sizeof *pool) != 0) pool = NULL;
  if (pool) {
    memset(pool, 0, sizeof *pool);
    pool->threads = calloc((size_t)n, sizeof(pthread_t));
    pool->args = calloc((size_t)n, sizeof(worker_arg));
    size_t claims = (size_t)n * DISPATCH_LOOPS * sizeof(chunk_claim);
    if (posix_memalign((void **)&pool->chunks, 64, claims) != 0)
      pool->chunks = NULL;
    else
      memset(pool->chunks, 0, claims);
  }
  if (!pool || !pool->threads || !pool->args || !pool->chunks) {
    if (pool) free(pool->threads), free(pool->args), free(pool->chunks);
    free(pool);
    snprintf(error, error_bytes, "out of memory creating a pool of %d threads", n);
    return NULL;
  }
  pool->n = n;
  pool->claim = (uint64_t)n; /* generation 0: nothing to claim */
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
  while (LOAD_SC(pool->started) != (uint32_t)n - 1) sched_yield(); /* see worker() */
  pin_workers(pool);
  return pool;
}

void FLOWC_RT(pool_destroy)(flowc_pool *pool) {
  STORE_SC(pool->stop, 1);
  STORE_SC(pool->wake, LOAD(pool->wake) + 1);
  futex_wake(&pool->wake, INT_MAX);
  for (int t = 1; t < pool->n; t++) pthread_join(pool->threads[t], NULL);
  free(pool->args);
  free(pool->threads);
  free(pool->chunks);
  free(pool);
}

void FLOWC_RT(pool_run)(flowc_pool *pool, flowc_task_fn fn, void *arg) {
  if (!pool || pool->n == 1 || in_region) {
    run_slot(NULL, 0, fn, arg, 0, 1);
    return;
  }
  uint32_t n = (uint32_t)pool->n;
  uint64_t g = ++pool->generation;
  __atomic_store_n(&pool->fn, fn, __ATOMIC_RELAXED);
  __atomic_store_n(&pool->arg, arg, __ATOMIC_RELAXED);
  __atomic_store_n(&pool->done, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&pool->claim, g << SLOT_BITS | 1, __ATOMIC_RELEASE); /* slot 0: ours */
  STORE_SC(pool->wake, (uint32_t)g);
  wake_all(&pool->wake, &pool->sleepers);
  run_slot(pool, g, fn, arg, 0, (int)n);
  __atomic_add_fetch(&pool->done, 1, __ATOMIC_SEQ_CST);
  run_unclaimed(pool);
  /* wait for the slots that workers hold */
  for (uint32_t d; (d = LOAD(pool->done)) != n;) {
    if (spin_while_equal(&pool->done, d)) continue;
    STORE_SC(pool->caller_sleeps, 1);
    if (LOAD_SC(pool->done) == d) futex_wait(&pool->done, d);
    STORE_SC(pool->caller_sleeps, 0);
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
  fork_call c = {fn, argc, {0}};
  va_list ap;
  va_start(ap, fn);
  for (int k = 0; k < argc && k < FLOWC_MAX_FORK_ARGS; k++) c.argv[k] = va_arg(ap, void *);
  va_end(ap);
  FLOWC_RT(pool_run)(in_region ? NULL : current_pool, run_micro, &c);
}

/* The threads a region forked now would run on (1 inside a region or without a pool): a
 * kernel of run-time extents calls it to choose between its parallel loop and the same
 * loop serial (cpu/omp.py, `two_versions`). Not an OpenMP entry point: named so that the
 * linker prefixes kernels' references to it like theirs. */
int32_t FLOWC_RT(__kmpc_flowc_threads)(void) {
  return in_region || !current_pool ? 1 : (int32_t)current_pool->n;
}

int32_t FLOWC_RT(__kmpc_global_thread_num)(ident_t *loc) {
  (void)loc;
  return current_tid;
}

/* Static schedule: slot t of the region's n gets one contiguous block of [*lower, *upper]
 * (the first trips % n slots one iteration more); an empty block has *upper < *lower. */
#define STATIC_INIT(suffix, T)                                                                \
  void FLOWC_RT(__kmpc_for_static_init_##suffix)(ident_t * loc, int32_t gtid, int32_t sched, \
                                                 int32_t *last, T *lower, T *upper, T *stride, \
                                                 T incr, T chunk) {                            \
    (void)loc; (void)sched; (void)chunk;                                                       \
    int n = region_n;                                                                          \
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

/* Slot t's static share of `trips` iterations over n slots: [*first, *first + count). */
static uint64_t share(uint64_t trips, int n, int t, uint64_t *first) {
  uint64_t per = trips / (uint64_t)n, extra = trips % (uint64_t)n, u = (uint64_t)t;
  *first = u * per + (u < extra ? u : extra);
  return per + (u < extra);
}

static void dispatch_init(int64_t lower, int64_t upper, int64_t incr) {
  uint64_t span = incr > 0 ? (uint64_t)upper - (uint64_t)lower : (uint64_t)lower - (uint64_t)upper;
  int empty = incr > 0 ? upper < lower : upper > lower;
  uint64_t step = incr > 0 ? (uint64_t)incr : 0 - (uint64_t)incr;
  flowc_pool *pool = region_pool;
  int k = loops_started++, n = region_n;
  dyn.lower = lower;
  dyn.incr = incr;
  dyn.trips = empty || step == 0 ? 0 : span / step + 1;
  dyn.claims = NULL;
  dyn.served = 0;
  dyn.victim = current_tid;
  dyn.tried = 0;
  if (!pool || n == 1 || k >= DISPATCH_LOOPS) return;
  dyn.claims = pool->chunks + (size_t)k * (size_t)n;
}

/* Claim the next chunk of the share that `claim` counts, in this region's loop: its number
 * (0-based), or CHUNKS when all are claimed. */
static uint32_t claim_chunk(chunk_claim *claim) {
  uint64_t w = __atomic_load_n(&claim->word, __ATOMIC_RELAXED);
  for (;;) {
    uint32_t got = w >> CLAIM_BITS == region_gen ? (uint32_t)(w & ((1u << CLAIM_BITS) - 1)) : 0;
    if (got >= CHUNKS) return CHUNKS;
    if (__atomic_compare_exchange_n(&claim->word, &w, region_gen << CLAIM_BITS | (got + 1), 1,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      return got;
  }
}

/* Where chunk c (0..CHUNKS) of a share of `count` iterations starts: chunks halve in size
 * (1/2, 1/4, ... 1/32 of the share, the last two equal), so a slot runs most of its share
 * in one piece and another slot can take only small pieces of a late one's tail: with equal
 * quarters the taken pieces were larger and scattered (each row a slot writes outside its
 * own share moves cache lines to the other CPU in the next kernel) and the join waited up to
 * a quarter share for the last one (ResNet and MobileNet at 2 threads, in-process A/B: 1-6%
 * faster than equal quarters: bench/results/smallnets_threads.notes.md). */
static uint64_t chunk_start(uint64_t count, uint32_t c) {
  return c >= CHUNKS ? count : count - (count >> c);
}

/* The next block [*first, *last] of iteration numbers (0-based) for this slot, or 0: its
 * own share's chunks first, then the unclaimed chunks of the next slots' shares. */
static int dispatch_next(uint64_t *first, uint64_t *last) {
  int n = region_n;
  uint64_t start, count;
  if (!dyn.claims) { /* serial, or a static share */
    if (dyn.served) return 0;
    dyn.served = 1;
    count = share(dyn.trips, n, current_tid, &start);
    *first = start;
    *last = start + count - 1;
    return count > 0;
  }
  while (dyn.tried < n) {
    count = share(dyn.trips, n, dyn.victim, &start);
    uint32_t c = claim_chunk(&dyn.claims[dyn.victim]);
    uint64_t lo = chunk_start(count, c), hi = chunk_start(count, c + 1);
    if (lo < hi) {
      *first = start + lo;
      *last = start + hi - 1;
      return 1;
    }
    dyn.victim = (dyn.victim + 1) % n;
    dyn.tried++;
  }
  return 0;
}

#define DISPATCH(suffix, T)                                                                   \
  void FLOWC_RT(__kmpc_dispatch_init_##suffix)(ident_t * loc, int32_t gtid, int32_t sched,    \
                                               T lower, T upper, T incr, T chunk) {           \
    (void)loc; (void)gtid; (void)sched; (void)chunk;                                          \
    dispatch_init((int64_t)lower, (int64_t)upper, (int64_t)incr);                             \
  }                                                                                           \
  int32_t FLOWC_RT(__kmpc_dispatch_next_##suffix)(ident_t * loc, int32_t gtid, int32_t *last, \
                                                  T *lower, T *upper, T *stride) {            \
    (void)loc; (void)gtid;                                                                    \
    uint64_t first, final;                                                                    \
    if (!dispatch_next(&first, &final)) return 0;                                             \
    *lower = (T)(dyn.lower + (int64_t)first * dyn.incr);                                      \
    *upper = (T)(dyn.lower + (int64_t)final * dyn.incr);                                      \
    *stride = (T)dyn.incr;                                                                    \
    *last = final == dyn.trips - 1;                                                           \
    return 1;                                                                                 \
  }
DISPATCH(4, int32_t)
DISPATCH(4u, uint32_t)
DISPATCH(8, int64_t)
DISPATCH(8u, uint64_t)

/* Every slot of the region waits here until all n have arrived (each slot runs on its own
 * thread: see the top of the file); the last to arrive bumps the barrier's generation. */
void FLOWC_RT(__kmpc_barrier)(ident_t *loc, int32_t gtid) {
  (void)loc;
  (void)gtid;
  flowc_pool *pool = region_pool;
  if (!pool || region_n == 1) return;
  uint32_t g = LOAD_SC(pool->bar_gen);
  if (__atomic_add_fetch(&pool->bar_arrived, 1, __ATOMIC_ACQ_REL) == (uint32_t)region_n) {
    __atomic_store_n(&pool->bar_arrived, 0, __ATOMIC_RELAXED);
    STORE_SC(pool->bar_gen, g + 1);
    wake_all(&pool->bar_gen, &pool->bar_sleepers);
    return;
  }
  wait_change(&pool->bar_gen, g, &pool->bar_sleepers);
}
