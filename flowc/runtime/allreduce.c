/* allreduce.c: the runtime half of the `all_reduce` op (flowc/ir/ops/collective.py) in a
 * data-parallel training step (issue [16]; docs/distributed.md, "Data-parallel training").
 *
 * The CPU lowering splits each all_reduce (one bucket of gradients of one float dtype) into
 * an `all_reduce_start` and an `all_reduce_wait` node (passes/all_reduce.py), whose kernels
 * (codegen/custom_kernels.py: generated wrappers, flowc_custom_op.h's arguments) call these
 * two functions:
 *   flowc_allreduce_start packs its inputs into the bucket's send buffer (kept from step
 *     to step) and starts their sum over the ranks of the MPI job into its one output (1-D;
 *     MPI_Iallreduce), then returns: the schedule runs the rest of the backward pass while
 *     the sum travels;
 *   flowc_allreduce_wait (its input: that buffer) waits until the sum has arrived, then
 *     writes each slice divided by the number of ranks to the matching output.
 * Attribute `bucket` (the node's) names the allreduce in flight between the two. Outside an
 * MPI job (no launcher's PMI_RANK, PMIX_RANK or OMPI_COMM_WORLD_SIZE, and no MPI already
 * initialised in the process) start packs into its output and wait unpacks: one process is
 * the whole batch.
 *
 * The MPI library is the runtime's (flowc_mpi_open, mpi_abi.c: shared with mpi.c, the
 * channels between tasks). MPI is initialised (MPI_THREAD_MULTIPLE) only if nobody has yet,
 * and then finalised at exit. MPI_COMM_WORLD is duplicated once (the first call is
 * collective: every rank makes it). MPI progresses a nonblocking collective only inside MPI
 * calls, so every start also tests the allreduces already in flight once.
 *
 * Faults: with each allreduce every rank posts a small "arrived" message to every other
 * (tag: the allreduce's number); the wait polls MPI_Test on all of them and on the
 * allreduce until done or $FLOWC_MPI_TIMEOUT seconds (default 600) after the wait began.
 * Past the timeout it prints `flowc allreduce: rank R: no gradients from rank P (bucket B)
 * within T s (FLOWC_MPI_TIMEOUT): rank P exited or hangs` and returns 1 (the artifact then
 * stops the process naming the node, and mpiexec ends the job); exit skips MPI_Finalize
 * then. Calls are serialised by a mutex.
 *
 * Between polls (idle): while some rank's arrival is missing, a 0.3 ms spin, then 50 us
 * sleeps (the core goes to the late rank); once every arrival is in, every rank is inside
 * this allreduce and it needs only progress calls, so the wait spins to the end (a rank
 * that hangs after arriving is waited for spinning, until the timeout): a transfer between
 * local ranks moves in pieces that need both ranks' progress (MPICH's shared-memory
 * cells), and a sleeping rank made each piece wait for its wake-up (a 2-rank data-parallel
 * step settled at 1.3 ms or more a step instead of 0.6). */
#include "flowc_custom_op.h"
#include "flowc_rt.h"
#include "mpi_abi.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  int active, f64;
  size_t n, cap;    /* elements; the bytes of `send`, kept for the next step */
  void *send, *sum; /* the packed copy sent; the start's output, which receives the sum */
  mpi_h *reqs;     /* 2 per rank (arrival sent, received), then the allreduce's */
  int *arrived;
  char *done;
} slot;

static struct {
  const flowc_mpi_lib *api;
  mpi_h comm;
  int rank, size, calls, nslots;
  slot *slots;     /* by bucket */
  const char *error; /* why MPI could not be used, when a job needs it */
} mpi;

#define SPIN_SECONDS 0.0003 /* the thread pool's spin (pool.c) */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static volatile int peer_lost;

static void finalize(void) {
  int done = 0;
  if (!peer_lost && mpi.api->Finalized(&done) == 0 && !done) mpi.api->Finalize();
}

static void open_mpi(void) {
  mpi.size = 1;
  int launched = getenv("PMI_RANK") || getenv("PMIX_RANK") || getenv("OMPI_COMM_WORLD_SIZE");
  if (!FLOWC_MPI(flowc_mpi_loaded)() && !launched) return;
  int why = 0;
  const char *detail = NULL;
  if (!(mpi.api = FLOWC_MPI(flowc_mpi_open)(&why, &detail))) {
    static char missing[600];
    snprintf(missing, sizeof missing, "a symbol %s missing", detail);
    mpi.error = why == FLOWC_MPI_NO_LIBRARY ? "no MPI library (set FLOWC_LIBMPI)"
                : !strncmp(detail, "ompi_", 5) ? "Open MPI handles missing"
                                               : missing;
    return;
  }
  int ready = 0, provided = 0;
  if (mpi.api->Initialized(&ready)) { mpi.error = "MPI_Initialized failed"; return; }
  if (!ready && !launched) return; /* an MPI loaded but unused: one process */
  if (!ready) {
    if (mpi.api->Init_thread(NULL, NULL, mpi.api->thread_multiple, &provided)) {
      mpi.error = "MPI_Init_thread failed";
      return;
    }
    atexit(finalize);
  }
  if (mpi.api->Comm_dup(mpi.api->world, &mpi.comm) ||
      mpi.api->Comm_rank(mpi.comm, &mpi.rank) || mpi.api->Comm_size(mpi.comm, &mpi.size))
    mpi.error = "MPI_Comm_dup failed";
}

/* Between two polls of a wait that began `waited` seconds ago (see the file's comment). It
 * never calls sched_yield: on Linux's EEVDF scheduler (6.6 on) each yield pushes the
 * caller's deadline back by a slice, so a rank yielding between tests on a loaded machine
 * got its core back last, milliseconds later (a 1 MiB all_reduce at 2 ranks under Open
 * MPI: 4-8 ms median instead of 0.4-0.7). A sleeper keeps its claim and wakes ahead of
 * busy tasks. */
static void idle(double waited) {
  if (waited < SPIN_SECONDS) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield"); /* the CPU's hint, not the system call */
#endif
    return;
  }
  struct timespec pause = {0, 50000};
  nanosleep(&pause, NULL);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t elements(const int64_t *shape, int rank) {
  size_t n = 1;
  for (int d = 0; d < rank; d++) n *= (size_t)shape[d];
  return n;
}

static int bucket_of(const flowc_custom_args *a) {
  for (int k = 0; k < a->num_attrs; k++)
    if (!strcmp(a->attr_names[k], "bucket")) return (int)a->attr_values[k];
  return 0;
}

/* 0 when MPI is usable (or not needed), else 1 after printing why. */
static int ready(void) {
  pthread_once(&once, open_mpi);
  if (!mpi.error) return 0;
  fprintf(stderr, "flowc allreduce: %s\n", mpi.error);
  return 1;
}

static int test(mpi_h *req) {
  int done = 0;
  mpi_status st;
  return mpi.api->Test(req, &done, &st) ? -1 : done;
}

/* One pass of MPI_Test over the slot's requests not yet done; how many are left, or -1. */
static int poll(slot *s) {
  int left = 0;
  for (int i = 0; i < 2 * mpi.size + 1; i++) {
    if (s->done[i]) continue;
    int got = test(&s->reqs[i]);
    if (got < 0) return -1;
    if (got > 0) s->done[i] = 1;
    else left++;
  }
  return left;
}

static void release(slot *s) { /* keeps the send buffer */
  free(s->reqs);
  free(s->arrived);
  free(s->done);
  s->reqs = NULL, s->arrived = NULL, s->done = NULL, s->active = 0;
}

/* Posts the arrivals and the allreduce of `s` (its send, sum, n, f64 set); 0 or 1. */
static int post(slot *s) {
  int size = mpi.size, tag = 1 + mpi.calls++ % 30000, one = 1, rc = 0;
  s->reqs = calloc((size_t)(2 * size + 1), sizeof(mpi_h));
  s->arrived = calloc((size_t)size, sizeof(int));
  s->done = calloc((size_t)(2 * size + 1), 1);
  if (!s->reqs || !s->arrived || !s->done) return 1;
  for (int p = 0; p < size && !rc; p++) {
    s->done[2 * p] = s->done[2 * p + 1] = p == mpi.rank;
    if (p != mpi.rank)
      rc = mpi.api->Isend(&one, 1, mpi.api->i32, p, tag, mpi.comm, &s->reqs[2 * p]) ||
           mpi.api->Irecv(&s->arrived[p], 1, mpi.api->i32, p, tag, mpi.comm,
                          &s->reqs[2 * p + 1]);
  }
  if (!rc)
    rc = mpi.api->Iallreduce(s->send, s->sum, (int)s->n, s->f64 ? mpi.api->f64 : mpi.api->f32,
                             mpi.api->sum, mpi.comm, &s->reqs[2 * size]);
  return rc;
}

/* Copies the inputs of `a` one after another to `to` (when not NULL); their bytes. */
static size_t pack(const flowc_custom_args *a, size_t esize, char *to) {
  size_t at = 0;
  for (int i = 0; i < a->num_inputs; i++) {
    size_t bytes = elements(a->input_shapes[i], a->input_ranks[i]) * esize;
    if (to) memcpy(to + at, a->inputs[i], bytes);
    at += bytes;
  }
  return at;
}

int FLOWC_MPI(flowc_allreduce_start)(const flowc_custom_args *a) {
  if (ready()) return 1;
  size_t esize = a->output_dtypes[0] == 11 ? 4 : 8;
  char *out = a->outputs[0];
  if (mpi.size == 1) return pack(a, esize, out), 0;
  size_t at = pack(a, esize, NULL);
  int bucket = bucket_of(a), rc = 0;
  pthread_mutex_lock(&mu);
  if (bucket >= mpi.nslots) {
    slot *grown = realloc(mpi.slots, (size_t)(bucket + 1) * sizeof(slot));
    if (grown) {
      memset(grown + mpi.nslots, 0, (size_t)(bucket + 1 - mpi.nslots) * sizeof(slot));
      mpi.slots = grown, mpi.nslots = bucket + 1;
    }
  }
  slot *s = bucket < mpi.nslots ? &mpi.slots[bucket] : NULL;
  if (!s || s->active) {
    fprintf(stderr, "flowc allreduce: rank %d: bucket %d %s\n", mpi.rank, bucket,
            s ? "started again before its wait" : "has no slot (out of memory)");
    rc = 1;
  } else {
    if (s->cap < at) {
      free(s->send);
      s->send = malloc(at ? at : 1), s->cap = s->send ? at : 0;
    }
    s->active = 1, s->f64 = esize == 8, s->n = at / esize, s->sum = out;
    rc = !s->send || (pack(a, esize, s->send), post(s));
    for (int k = 0; k < mpi.nslots && !rc; k++) /* progress the ones in flight */
      if (mpi.slots[k].active && k != bucket && poll(&mpi.slots[k]) < 0) rc = 1;
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

/* Waits for slot `s` of `bucket` (see the file's comment); 0, or 1 after printing why. */
static int finish(slot *s, int bucket) {
  const char *env = getenv("FLOWC_MPI_TIMEOUT");
  double timeout = env && atof(env) > 0 ? atof(env) : 600, begun = now();
  double deadline = begun + timeout;
  for (;;) {
    int left = poll(s);
    if (left <= 0) return left < 0;
    int peer = 0; /* the first rank whose arrival has not come */
    while (peer < mpi.size && s->done[2 * peer + 1]) peer++;
    if (now() > deadline) {
      peer_lost = 1;
      if (peer == mpi.size)
        fprintf(stderr, "flowc allreduce: rank %d: the allreduce of bucket %d did not complete "
                "within %g s (FLOWC_MPI_TIMEOUT): a rank exited or hangs\n", mpi.rank, bucket,
                timeout);
      else
        fprintf(stderr, "flowc allreduce: rank %d: no gradients from rank %d (bucket %d) within "
                "%g s (FLOWC_MPI_TIMEOUT): rank %d exited or hangs\n", mpi.rank, peer, bucket,
                timeout, peer);
      return 1;
    }
    idle(peer == mpi.size ? 0 : now() - begun);
  }
}

int FLOWC_MPI(flowc_allreduce_wait)(const flowc_custom_args *a) {
  if (ready()) return 1;
  int f64 = a->input_dtypes[0] != 11, bucket = bucket_of(a), rc = 0;
  const char *sum = a->inputs[0];
  if (mpi.size > 1) {
    pthread_mutex_lock(&mu);
    slot *s = bucket < mpi.nslots ? &mpi.slots[bucket] : NULL;
    if (!s || !s->active || s->sum != sum) {
      fprintf(stderr, "flowc allreduce: rank %d: bucket %d waited on but not started\n",
              mpi.rank, bucket);
      rc = 1;
    } else {
      rc = finish(s, bucket);
      if (!rc) release(s);
    }
    pthread_mutex_unlock(&mu);
  }
  size_t at = 0;
  for (int i = 0; !rc && i < a->num_outputs; i++) {
    size_t n = elements(a->output_shapes[i], a->output_ranks[i]);
    if (f64) {
      double *out = a->outputs[i];
      const double *in = (const double *)sum + at;
      for (size_t j = 0; j < n; j++) out[j] = in[j] / mpi.size;
    } else {
      float *out = a->outputs[i];
      const float *in = (const float *)sum + at;
      for (size_t j = 0; j < n; j++) out[j] = in[j] / (float)mpi.size;
    }
    at += n;
  }
  return rc;
}
