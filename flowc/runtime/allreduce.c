/* allreduce.c: the gradient allreduce of a data-parallel training step (issue [16];
 * docs/distributed.md, "Data-parallel training").
 *
 * `flowc_allreduce_mean` is the kernel of the `custom_call` nodes that
 * flowc/passes/all_reduce.py puts between a step's gradients and its optimizer update: one
 * node per bucket of gradients of one float dtype (f32 or f64; attribute `bucket`, its
 * index). It packs its inputs into one buffer, sums it over the ranks of the MPI job with
 * MPI_Iallreduce, and writes each input's slice divided by the number of ranks to the
 * matching output, so every rank applies the same update, that of the gradient averaged
 * over the ranks. Outside an MPI job (no launcher's PMI_RANK, PMIX_RANK or
 * OMPI_COMM_WORLD_SIZE, and no MPI already initialised in the process) it copies its
 * inputs: one process is the whole batch.
 *
 * The MPI library is the runtime's (flowc_mpi_open, mpi_abi.c: shared with mpi.c, the
 * channels between tasks). MPI is initialised
 * (MPI_THREAD_MULTIPLE) only if nobody has yet, and then finalised at exit. The kernel
 * duplicates MPI_COMM_WORLD once (the first call is collective: every rank makes it).
 *
 * Faults: before each allreduce every rank posts a small "arrived" message to every other
 * (tag: the call's number); the call polls MPI_Test on all of them and on the allreduce
 * until done or $FLOWC_MPI_TIMEOUT seconds (default 600) pass. Past the timeout it prints
 * `flowc allreduce: rank R: no gradients from rank P (bucket B) within T s
 * (FLOWC_MPI_TIMEOUT): rank P exited or hangs` and returns 1 (the artifact then stops the
 * process naming the op, and mpiexec ends the job); exit skips MPI_Finalize then. Calls
 * are serialised by a mutex. */
#include "flowc_custom_op.h"
#include "mpi_abi.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct {
  const flowc_mpi_lib *api;
  mpi_h comm;
  int rank, size, calls;
  const char *error; /* why MPI could not be used, when a job needs it */
} mpi;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static volatile int peer_lost;

static void finalize(void) {
  int done = 0;
  if (!peer_lost && mpi.api->Finalized(&done) == 0 && !done) mpi.api->Finalize();
}

static void start(void) {
  mpi.size = 1;
  int launched = getenv("PMI_RANK") || getenv("PMIX_RANK") || getenv("OMPI_COMM_WORLD_SIZE");
  if (!flowc_mpi_loaded() && !launched) return;
  int why = 0;
  const char *detail = NULL;
  if (!(mpi.api = flowc_mpi_open(&why, &detail))) {
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

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t elements(const flowc_custom_args *a, int i) {
  size_t n = 1;
  for (int d = 0; d < a->input_ranks[i]; d++) n *= (size_t)a->input_shapes[i][d];
  return n;
}

static int test(mpi_h *req) {
  int done = 0;
  mpi_status st;
  return mpi.api->Test(req, &done, &st) ? -1 : done;
}

/* Sums the `n` elements at `in` over the ranks into `out`; 0, or 1 after printing why not. */
static int reduce(const void *in, void *out, size_t n, int f64, int bucket) {
  const char *env = getenv("FLOWC_MPI_TIMEOUT");
  double timeout = env && atof(env) > 0 ? atof(env) : 600, deadline = now() + timeout;
  int tag = 1 + mpi.calls++ % 30000, one = 1, size = mpi.size, rc = 0;
  mpi_h *reqs = calloc((size_t)(2 * size + 1), sizeof(mpi_h));
  int *arrived = calloc((size_t)size, sizeof(int));
  char *done = calloc((size_t)(2 * size + 1), 1);
  if (!reqs || !arrived || !done) rc = 1;
  for (int p = 0; p < size && !rc; p++) {
    done[2 * p] = done[2 * p + 1] = p == mpi.rank;
    if (p != mpi.rank)
      rc = mpi.api->Isend(&one, 1, mpi.api->i32, p, tag, mpi.comm, &reqs[2 * p]) ||
           mpi.api->Irecv(&arrived[p], 1, mpi.api->i32, p, tag, mpi.comm, &reqs[2 * p + 1]);
  }
  if (!rc) rc = mpi.api->Iallreduce(in, out, (int)n, f64 ? mpi.api->f64 : mpi.api->f32, mpi.api->sum, mpi.comm,
                               &reqs[2 * size]);
  for (long spins = 0, left = 2 * size - 1; !rc && left; spins++) { /* posted requests */
    for (int i = 0; i < 2 * size + 1 && !rc; i++) {
      if (done[i]) continue;
      int got = test(&reqs[i]);
      if (got < 0) rc = 1;
      if (got > 0) done[i] = 1, left--;
    }
    if (rc || !left) break;
    if (now() > deadline) {
      int peer = 0;
      while (peer < size && done[2 * peer + 1]) peer++;
      peer_lost = 1;
      if (peer == size)
        fprintf(stderr, "flowc allreduce: rank %d: the allreduce of bucket %d did not complete "
                "within %g s (FLOWC_MPI_TIMEOUT): a rank exited or hangs\n", mpi.rank, bucket,
                timeout);
      else
        fprintf(stderr, "flowc allreduce: rank %d: no gradients from rank %d (bucket %d) within "
                "%g s (FLOWC_MPI_TIMEOUT): rank %d exited or hangs\n", mpi.rank, peer, bucket,
                timeout, peer);
      rc = 1;
    } else if (spins < 200) {
      sched_yield();
    } else {
      struct timespec pause = {0, 50000};
      nanosleep(&pause, NULL);
    }
  }
  free(done);
  free(arrived);
  free(reqs);
  return rc;
}

int flowc_allreduce_mean(const flowc_custom_args *a) {
  pthread_once(&once, start);
  if (mpi.error) {
    fprintf(stderr, "flowc allreduce: %s\n", mpi.error);
    return 1;
  }
  size_t total = 0;
  for (int i = 0; i < a->num_inputs; i++) total += elements(a, i);
  int f64 = a->num_inputs && a->input_dtypes[0] != 11;
  size_t esize = f64 ? 8 : 4;
  if (mpi.size == 1) {
    for (int i = 0; i < a->num_inputs; i++)
      memcpy(a->outputs[i], a->inputs[i], elements(a, i) * esize);
    return 0;
  }
  char *buf = malloc(2 * total * esize), *sum = buf + total * esize;
  if (!buf) return 1;
  size_t at = 0;
  for (int i = 0; i < a->num_inputs; i++) {
    memcpy(buf + at, a->inputs[i], elements(a, i) * esize);
    at += elements(a, i) * esize;
  }
  int bucket = 0;
  for (int k = 0; k < a->num_attrs; k++)
    if (!strcmp(a->attr_names[k], "bucket")) bucket = (int)a->attr_values[k];
  pthread_mutex_lock(&mu);
  int rc = reduce(buf, sum, total, f64, bucket);
  pthread_mutex_unlock(&mu);
  at = 0;
  for (int i = 0; !rc && i < a->num_inputs; i++) {
    size_t n = elements(a, i);
    if (f64) {
      double *out = a->outputs[i], *in = (double *)(sum + at);
      for (size_t j = 0; j < n; j++) out[j] = in[j] / mpi.size;
    } else {
      float *out = a->outputs[i], *in = (float *)(sum + at);
      for (size_t j = 0; j < n; j++) out[j] = in[j] / (float)mpi.size;
    }
    at += n * esize;
  }
  free(buf);
  return rc;
}
