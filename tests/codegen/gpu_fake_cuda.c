/* gpu_fake_cuda.c: a stand-in for libcuda.so.1 in tests (no GPU here). Device memory is
 * host memory; a "module" is the host library $FAKE_CUDA_KERNELS, where a device function
 * NAME is NAME__emu(void **params, int64 block, int64 block_dim, int64 grid_dim,
 * int64 thread), which cuLaunchKernel calls for every block and thread in turn (see
 * gpu_emulate.py). $FAKE_CUDA_CC sets the compute capability (default 80),
 * $FAKE_CUDA_MEM the bytes cuMemAlloc grants in all (default unlimited), $FAKE_CUDA_DEVICES
 * the device count (default 1). $FAKE_CUDA_LOG, when set, names a file that receives one
 * line per image it is asked to load: "cubin" or "ptx"; $FAKE_CUDA_REJECT_CUBIN=1 refuses
 * cubins. A function whose library also defines
 * NAME__threaded (it has barriers) runs each block's threads as concurrent pthreads that
 * meet at emu_barrier() (the library's emu_set_barrier hook is pointed at this file's).
 * $FAKE_CUDA_TRACE, when set, names a file that receives one line per stream operation or
 * synchronization, in the order the runtime issues them: "htod BYTES", "dtoh BYTES",
 * "launch NAME GRID BLOCK", "record E", "wait E" (cuEventSynchronize of event number E),
 * "sync" (cuStreamSynchronize), "pin BYTES" (cuMemHostRegister). cuEventElapsedTime is
 * the host time between the two events' stream positions being executed. With $FAKE_CUDA_LAZY=1 the stream is really asynchronous:
 * copies and launches only queue (kernel arguments captured, NAME__nargs of them), and run
 * when the stream is synchronized or an event recorded after them is waited on, so a
 * runtime that reads a copy's destination before waiting gets stale data.
 * $FAKE_CUDA_FAIL_LAUNCH=NAME makes launches of NAME fail (700, an illegal address). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*emu_fn)(void **, int64_t, int64_t, int64_t, int64_t);
static void *kernels;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* the queue, the trace, events */
static size_t granted;
static pthread_barrier_t block_barrier;
static void fake_barrier(void) { pthread_barrier_wait(&block_barrier); }
typedef struct { emu_fn fn; int threaded; int nargs; char name[200]; } fake_function;
typedef struct { emu_fn fn; void **params; int64_t b, bd, gd, t; } fake_thread;
static void *run_thread(void *p) {
  fake_thread *a = p;
  a->fn(a->params, a->b, a->bd, a->gd, a->t);
  return NULL;
}

static long env(const char *name, long fallback) {
  const char *v = getenv(name);
  return v && *v ? atol(v) : fallback;
}
int cuInit(unsigned f) { (void)f; return env("FAKE_CUDA_DEVICES", 1) ? 0 : 100; }
int cuDeviceGetCount(int *n) { *n = (int)env("FAKE_CUDA_DEVICES", 1); return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int d) {
  (void)d;
  long cc = env("FAKE_CUDA_CC", 80);
  *v = attr == 75 ? (int)(cc / 10) : (int)(cc % 10);
  return 0;
}
int cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = (void *)1; return 0; }
int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
int cuCtxSetCurrent(void *c) { (void)c; return 0; }
int cuModuleLoadData(void **m, const void *image) {
  const char *log = getenv("FAKE_CUDA_LOG");
  if (log) {
    FILE *f = fopen(log, "a");
    if (f) {
      fputs(memcmp(image, "\177ELF", 4) == 0 ? "cubin\n" : "ptx\n", f);
      fclose(f);
    }
  }
  if (env("FAKE_CUDA_REJECT_CUBIN", 0) && memcmp(image, "\177ELF", 4) == 0)
    return 200; /* CUDA_ERROR_INVALID_IMAGE, as from a driver older than the cubin */
  kernels = dlopen(getenv("FAKE_CUDA_KERNELS"), RTLD_NOW | RTLD_LOCAL);
  *m = kernels;
  void (*set)(void (*)(void)) = kernels ? (void (*)(void (*)(void)))dlsym(kernels,
                                                                        "emu_set_barrier") : 0;
  if (set) set(fake_barrier);
  return kernels ? 0 : 200; /* CUDA_ERROR_INVALID_IMAGE */
}
int cuModuleUnload(void *m) { (void)m; return 0; }
int cuModuleGetFunction(void **f, void *m, const char *name) {
  char sym[256];
  snprintf(sym, sizeof sym, "%s__emu", name);
  fake_function *fn = calloc(1, sizeof *fn); /* one per lookup, kept: a test's lifetime */
  fn->fn = (emu_fn)dlsym(m, sym);
  snprintf(sym, sizeof sym, "%s__threaded", name);
  fn->threaded = dlsym(m, sym) != NULL;
  snprintf(sym, sizeof sym, "%s__nargs", name);
  const int *nargs = dlsym(m, sym);
  fn->nargs = nargs ? *nargs : 0;
  snprintf(fn->name, sizeof fn->name, "%s", name);
  *f = fn;
  return fn->fn ? 0 : 500; /* CUDA_ERROR_NOT_FOUND */
}
int cuMemAlloc_v2(uint64_t *p, size_t n) {
  long limit = env("FAKE_CUDA_MEM", -1);
  if (limit >= 0 && granted + n > (size_t)limit) return 2;
  void *mem = aligned_alloc(256, (n + 255) / 256 * 256);
  if (!mem) return 2;
  granted += n;
  *p = (uint64_t)(uintptr_t)mem;
  return 0;
}
int cuMemFree_v2(uint64_t p) { free((void *)(uintptr_t)p); return 0; }

/* ---- the stream: operations run now, or (lazy) when synchronized ---- */
enum { OP_COPY, OP_LAUNCH, OP_EVENT };
typedef struct {
  int kind;
  void *dst;
  const void *src;
  size_t n;
  fake_function *fn;
  unsigned grid, block;
  void **values; /* a launch's captured arguments */
  int event;
} fake_op;
static fake_op *queue;
static size_t queued, capacity;
static int events_made;
#define MAX_EVENTS 4096
static double reached_ms[MAX_EVENTS]; /* when each event's stream position was executed */
static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void trace(const char *fmt, ...) {
  const char *path = getenv("FAKE_CUDA_TRACE");
  if (!path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

static void run_launch(fake_function *fn, unsigned gx, unsigned bx, void **params) {
  if (!fn->threaded) {
    for (unsigned b = 0; b < gx; b++)
      for (unsigned t = 0; t < bx; t++) fn->fn(params, b, bx, gx, t);
    return;
  }
  pthread_t *ids = calloc(bx, sizeof *ids);
  fake_thread *args = calloc(bx, sizeof *args);
  for (unsigned b = 0; b < gx; b++) {
    pthread_barrier_init(&block_barrier, NULL, bx);
    for (unsigned t = 0; t < bx; t++) {
      args[t] = (fake_thread){fn->fn, params, b, bx, gx, t};
      pthread_create(&ids[t], NULL, run_thread, &args[t]);
    }
    for (unsigned t = 0; t < bx; t++) pthread_join(ids[t], NULL);
    pthread_barrier_destroy(&block_barrier);
  }
  free(ids);
  free(args);
}

static void execute(fake_op *op) {
  if (op->kind == OP_COPY) {
    memcpy(op->dst, op->src, op->n);
  } else if (op->kind == OP_LAUNCH) {
    void *params[64];
    for (int j = 0; j < op->fn->nargs && j < 64; j++) params[j] = &op->values[j];
    run_launch(op->fn, op->grid, op->block, params);
    free(op->values);
  } else if (op->event > 0 && op->event < MAX_EVENTS) { /* a wait drains up to it */
    reached_ms[op->event] = now_ms();
  }
}

/* Runs the queued operations up to and including the one at `upto` (under mu). */
static void drain(size_t upto) {
  size_t n = upto < queued ? upto + 1 : queued;
  for (size_t i = 0; i < n; i++) execute(&queue[i]);
  memmove(queue, queue + n, (queued - n) * sizeof *queue);
  queued -= n;
}

static void submit(fake_op op) { /* under mu */
  if (!env("FAKE_CUDA_LAZY", 0)) {
    execute(&op);
    return;
  }
  if (queued == capacity) {
    capacity = capacity ? 2 * capacity : 64;
    queue = realloc(queue, capacity * sizeof *queue);
  }
  queue[queued++] = op;
}

int cuMemcpyHtoDAsync_v2(uint64_t d, const void *s, size_t n, void *st) {
  (void)st;
  pthread_mutex_lock(&mu);
  trace("htod %zu", n);
  submit((fake_op){OP_COPY, (void *)(uintptr_t)d, s, n, 0, 0, 0, 0, 0});
  pthread_mutex_unlock(&mu);
  return 0;
}
int cuMemcpyDtoHAsync_v2(void *d, uint64_t s, size_t n, void *st) {
  (void)st;
  pthread_mutex_lock(&mu);
  trace("dtoh %zu", n);
  submit((fake_op){OP_COPY, d, (const void *)(uintptr_t)s, n, 0, 0, 0, 0, 0});
  pthread_mutex_unlock(&mu);
  return 0;
}
int cuMemsetD8Async(uint64_t d, unsigned char v, size_t n, void *st) {
  (void)st; memset((void *)(uintptr_t)d, v, n); return 0;
}
int cuStreamCreate(void **s, unsigned f) { (void)f; *s = (void *)1; return 0; }
int cuStreamDestroy_v2(void *s) { (void)s; return 0; }
int cuStreamSynchronize(void *s) {
  (void)s;
  pthread_mutex_lock(&mu);
  trace("sync");
  drain((size_t)-1);
  pthread_mutex_unlock(&mu);
  return 0;
}
int cuEventCreate(void **e, unsigned flags) {
  (void)flags;
  pthread_mutex_lock(&mu);
  int id = ++events_made;
  pthread_mutex_unlock(&mu);
  *e = (void *)(intptr_t)id;
  return 0;
}
int cuEventDestroy_v2(void *e) { (void)e; return 0; }
int cuEventRecord(void *e, void *st) {
  (void)st;
  pthread_mutex_lock(&mu);
  int id = (int)(intptr_t)e;
  trace("record %d", id);
  submit((fake_op){OP_EVENT, 0, 0, 0, 0, 0, 0, 0, id});
  pthread_mutex_unlock(&mu);
  return 0;
}
int cuEventElapsedTime(float *ms, void *start, void *end) {
  int a = (int)(intptr_t)start, b = (int)(intptr_t)end;
  if (a <= 0 || b <= 0 || a >= MAX_EVENTS || b >= MAX_EVENTS) return 400;
  pthread_mutex_lock(&mu);
  *ms = (float)(reached_ms[b] - reached_ms[a]);
  pthread_mutex_unlock(&mu);
  return 0;
}
int cuEventSynchronize(void *e) {
  pthread_mutex_lock(&mu);
  int id = (int)(intptr_t)e;
  trace("wait %d", id);
  for (size_t i = 0; i < queued; i++)
    if (queue[i].kind == OP_EVENT && queue[i].event == id) {
      drain(i);
      break;
    }
  pthread_mutex_unlock(&mu);
  return 0;
}
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *st, void **params, void **extra) {
  (void)gy; (void)gz; (void)by; (void)bz; (void)shmem; (void)st; (void)extra;
  fake_function *fn = f;
  const char *bad = getenv("FAKE_CUDA_FAIL_LAUNCH");
  if (bad && strcmp(bad, fn->name) == 0) return 700;
  pthread_mutex_lock(&mu);
  trace("launch %s %u %u", fn->name, gx, bx);
  if (env("FAKE_CUDA_LAZY", 0)) { /* capture the arguments, as the driver does */
    void **values = calloc((size_t)fn->nargs + 1, sizeof *values);
    for (int j = 0; j < fn->nargs; j++) values[j] = *(void **)params[j];
    submit((fake_op){OP_LAUNCH, 0, 0, 0, fn, gx, bx, values, 0});
  } else {
    run_launch(fn, gx, bx, params);
  }
  pthread_mutex_unlock(&mu);
  return 0;
}
int cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
  (void)p; (void)flags;
  pthread_mutex_lock(&mu);
  trace("pin %zu", n);
  pthread_mutex_unlock(&mu);
  return 0;
}
int cuMemHostUnregister(void *p) { (void)p; return 0; }
int cuGetErrorString(int r, const char **s) { (void)r; *s = "fake driver error"; return 0; }
