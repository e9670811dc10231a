/* partition.c: running a partitioned model (one entry function per device) and the
 * rendezvous its send/recv steps go through. See flowc_rt.h.
 *
 * Each context holds, from its creation on (rt_partitions_create), one worker thread per
 * partition after the first; partition 0 runs on the caller with the context's pool, each
 * worker with a pool of its own of the same thread count (made, or remade by set_threads,
 * rt_partitions_sync, while the workers wait between runs), so a run allocates nothing.
 * A run resets every channel, bumps the run generation (waking the
 * workers), runs partition 0 and waits until every worker has finished its partition.
 * A send copies its tensor into the channel's staging buffer and marks the channel full;
 * a recv waits (condition variable) until it is full and copies the tensor out. Sends
 * never wait, and each partition runs its steps in an order consistent with one global
 * order in which every send precedes its recv (codegen checks it), so every recv's send
 * eventually runs: no deadlock. Workers are all started before a run begins, so a failure
 * to start one fails the run before any partition waits on a peer.
 *
 * A GPU partition (partition.gpu set) runs its program through cuda.c on its thread: its
 * recvs copy a full channel's buffer to the device, its sends copy device data into the
 * buffer asynchronously and record an event that a host recv of that channel waits on
 * (cuda_wait_channel) before reading it. A GPU failure during a run (rt_abort) records the
 * run's status and message once and wakes every recv, so no partition waits forever;
 * the run then returns that status. CPU-only models never call into cuda.c.
 *
 * Partitions on several tasks under MPI (mpi.c): this rank runs only its task's partitions
 * (the others' workers idle), and a channel between tasks goes through mpi_send/mpi_recv
 * instead of the staging buffer's flag; a failed MPI receive aborts the run as above. */
#include "flowc_rt.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct flowc_rendezvous {
  pthread_mutex_t mu;
  pthread_cond_t filled;  /* a channel became full */
  pthread_cond_t start;   /* a run began, or stop */
  pthread_cond_t done;    /* pending reached 0 */
  const flowc_model *model;
  flowc_ctx *ctx;
  unsigned char *full; /* per channel: the send of this run has happened */
  char **slot;         /* per channel: staging buffer (NULL for a control channel) */
  pthread_t *workers;  /* partitions 1 .. num_partitions-1 */
  struct worker_arg *args; /* each worker's argument */
  flowc_pool **pools;  /* per partition (index 0 unused): its worker's pool, or NULL */
  int pool_threads;    /* the thread count the pools were made for (1: none) */
  int started;         /* workers running */
  unsigned long generation; /* bumped per run (under mu) */
  int pending;         /* workers still in this run's partition (under mu) */
  int stop;            /* under mu */
  int status;          /* the run's first failure (under mu; 0: none) */
  flowc_mpi *mpi;      /* tasks on MPI ranks (mpi.c), or NULL: every partition here */
};

typedef struct worker_arg {
  flowc_rendezvous *rv;
  int part;
  unsigned long seen; /* the generation before the worker's first run */
} worker_arg;

static flowc_rendezvous *rendezvous_create(flowc_ctx *ctx) {
  const flowc_model *m = ctx->model;
  flowc_rendezvous *rv = calloc(1, sizeof *rv);
  if (!rv) return NULL;
  rv->model = m;
  rv->ctx = ctx;
  pthread_mutex_init(&rv->mu, NULL);
  pthread_cond_init(&rv->filled, NULL);
  pthread_cond_init(&rv->start, NULL);
  pthread_cond_init(&rv->done, NULL);
  size_t n = (size_t)m->num_channels;
  rv->full = calloc(n + 1, 1);
  rv->slot = calloc(n + 1, sizeof *rv->slot);
  rv->workers = calloc((size_t)m->num_partitions + 1, sizeof *rv->workers);
  rv->pools = calloc((size_t)m->num_partitions + 1, sizeof *rv->pools);
  rv->args = calloc((size_t)m->num_partitions + 1, sizeof *rv->args);
  rv->pool_threads = 1;
  int ok = rv->full && rv->slot && rv->workers && rv->pools && rv->args;
  for (size_t k = 0; ok && k < n; k++) {
    size_t bytes = m->channels[k].bytes;
    if (bytes && posix_memalign((void **)&rv->slot[k], FLOWC_ALIGN, bytes) != 0) ok = 0;
  }
  if (!ok) {
    FLOWC_RT(rendezvous_destroy)(rv);
    return NULL;
  }
  return rv;
}

void FLOWC_RT(rendezvous_destroy)(flowc_rendezvous *rv) {
  if (!rv) return;
  FLOWC_RT(mpi_destroy)(rv->mpi);
  pthread_mutex_lock(&rv->mu);
  rv->stop = 1;
  pthread_cond_broadcast(&rv->start);
  pthread_mutex_unlock(&rv->mu);
  for (int i = 0; i < rv->started; i++) pthread_join(rv->workers[i], NULL);
  for (int p = 0; rv->pools && p <= rv->model->num_partitions; p++)
    if (rv->pools[p]) FLOWC_RT(pool_destroy)(rv->pools[p]);
  free(rv->pools);
  for (int k = 0; rv->slot && k < rv->model->num_channels; k++) free(rv->slot[k]);
  free(rv->slot);
  free(rv->full);
  free(rv->workers);
  free(rv->args);
  pthread_cond_destroy(&rv->done);
  pthread_cond_destroy(&rv->start);
  pthread_cond_destroy(&rv->filled);
  pthread_mutex_destroy(&rv->mu);
  free(rv);
}

void *FLOWC_RT(rt_slot)(flowc_rendezvous *rv, int channel) { return rv->slot[channel]; }

void FLOWC_RT(rt_send_mark)(flowc_rendezvous *rv, int channel) {
  pthread_mutex_lock(&rv->mu);
  rv->full[channel] = 1;
  pthread_cond_broadcast(&rv->filled);
  pthread_mutex_unlock(&rv->mu);
}

void FLOWC_RT(rt_send)(flowc_rendezvous *rv, int channel, const void *data) {
  size_t bytes = rv->model->channels[channel].bytes;
  if (bytes) memcpy(rv->slot[channel], data, bytes);
  if (rv->mpi && FLOWC_RT(mpi_remote)(rv->mpi, channel)) {
    char message[FLOWC_ERROR_BYTES];
    int status = FLOWC_RT(mpi_send)(rv->mpi, channel, rv->slot[channel], message, sizeof message);
    if (status) FLOWC_RT(rt_abort)(rv, status, message);
    return;
  }
  FLOWC_RT(rt_send_mark)(rv, channel);
}

int FLOWC_RT(rt_run_failed)(flowc_rendezvous *rv) {
  pthread_mutex_lock(&rv->mu);
  int failed = rv->status;
  pthread_mutex_unlock(&rv->mu);
  return failed;
}

int FLOWC_RT(rt_recv_wait)(flowc_rendezvous *rv, int channel) {
  pthread_mutex_lock(&rv->mu);
  while (!rv->full[channel] && !rv->status) pthread_cond_wait(&rv->filled, &rv->mu);
  int failed = rv->status;
  pthread_mutex_unlock(&rv->mu);
  return failed;
}

void FLOWC_RT(rt_recv)(flowc_rendezvous *rv, int channel, void *data) {
  if (rv->mpi && FLOWC_RT(mpi_remote)(rv->mpi, channel)) {
    char message[FLOWC_ERROR_BYTES] = "";
    int status = FLOWC_RT(mpi_recv)(rv->mpi, rv, channel, data, message, sizeof message);
    if (status && *message) FLOWC_RT(rt_abort)(rv, status, message);
    return;
  }
  if (FLOWC_RT(rt_recv_wait)(rv, channel)) return; /* the run failed: results are void */
  if (rv->ctx->gpu) FLOWC_RT(cuda_wait_channel)(rv->ctx, channel);
  size_t bytes = rv->model->channels[channel].bytes;
  if (bytes) memcpy(data, rv->slot[channel], bytes);
}

int FLOWC_RT(rt_abort)(flowc_rendezvous *rv, int status, const char *message) {
  pthread_mutex_lock(&rv->mu);
  if (!rv->status) {
    rv->status = status;
    snprintf(rv->ctx->error, sizeof rv->ctx->error, "%s", message);
  }
  pthread_cond_broadcast(&rv->filled);
  pthread_mutex_unlock(&rv->mu);
  return status;
}

static void run_part(flowc_ctx *ctx, const flowc_partition *p) {
  flowc_mpi *mpi = ctx->rendezvous->mpi;
  if (mpi && !FLOWC_RT(mpi_local)(mpi, (int)(p - ctx->model->partitions))) return;
  if (p->gpu)
    FLOWC_RT(cuda_run_partition)(ctx, p);
  else
    p->run(ctx->inputs, ctx->outputs, ctx->arena + p->arena_offset, ctx->weights,
           ctx->thread_scratch ? ctx->thread_scratch + (size_t)(p - ctx->model->partitions) *
                                     (size_t)ctx->threads * ctx->model->thread_scratch_bytes
                               : NULL,
           ctx->variables, NULL, ctx->rendezvous);
}

static void *worker(void *arg) {
  worker_arg w = *(worker_arg *)arg;
  flowc_rendezvous *rv = w.rv;
  unsigned long seen = w.seen;
  pthread_mutex_lock(&rv->mu);
  for (;;) {
    while (!rv->stop && rv->generation == seen) pthread_cond_wait(&rv->start, &rv->mu);
    if (rv->stop) break;
    seen = rv->generation;
    flowc_pool *pool = rv->pools[w.part]; /* set by the caller before the generation bump */
    pthread_mutex_unlock(&rv->mu);
    FLOWC_RT(pool_enter)(pool);
    run_part(rv->ctx, &rv->model->partitions[w.part]);
    FLOWC_RT(pool_leave)();
    pthread_mutex_lock(&rv->mu);
    if (--rv->pending == 0) pthread_cond_signal(&rv->done);
  }
  pthread_mutex_unlock(&rv->mu);
  return NULL;
}

static int start_workers(flowc_ctx *ctx) {
  flowc_rendezvous *rv = ctx->rendezvous;
  const flowc_model *m = ctx->model;
  while (rv->started < m->num_partitions - 1) {
    int part = rv->started + 1;
    worker_arg *arg = &rv->args[part];
    *arg = (worker_arg){rv, part, rv->generation}; /* only this thread bumps it */
    int err = pthread_create(&rv->workers[rv->started], NULL, worker, arg);
    if (err) {
      snprintf(ctx->error, sizeof ctx->error, "%s: cannot start the thread of partition %s: "
               "%s", m->name, m->partitions[part].device, strerror(err));
      return FLOWC_ERR_THREADS;
    }
    rv->started++;
  }
  return FLOWC_OK;
}

/* Each worker's pool at the context's thread count (workers are idle: between runs). */
int FLOWC_RT(rt_partitions_sync)(flowc_ctx *ctx) {
  flowc_rendezvous *rv = ctx->rendezvous;
  if (rv->pool_threads == ctx->threads) return FLOWC_OK;
  for (int p = 1; p < ctx->model->num_partitions; p++) {
    if (rv->pools[p]) FLOWC_RT(pool_destroy)(rv->pools[p]);
    rv->pools[p] = NULL;
  }
  rv->pool_threads = 0; /* some pools may be missing until the loop completes */
  for (int p = 1; ctx->threads > 1 && p < ctx->model->num_partitions; p++) {
    if (ctx->model->partitions[p].gpu) continue; /* runs no CPU kernel */
    if (rv->mpi && !FLOWC_RT(mpi_local)(rv->mpi, p)) continue; /* another rank's */
    char why[256];
    rv->pools[p] = FLOWC_RT(pool_create)(ctx->threads, why, sizeof why);
    if (!rv->pools[p]) {
      snprintf(ctx->error, sizeof ctx->error, "%s: cannot start the thread pool of partition "
               "%s: %s", ctx->model->name, ctx->model->partitions[p].device, why);
      return FLOWC_ERR_THREADS;
    }
  }
  rv->pool_threads = ctx->threads;
  return FLOWC_OK;
}

int FLOWC_RT(rt_partitions_create)(flowc_ctx *ctx) {
  const flowc_model *m = ctx->model;
  if (!(ctx->rendezvous = rendezvous_create(ctx))) {
    snprintf(ctx->error, sizeof ctx->error, "%s: out of memory allocating the rendezvous "
             "of %d channels", m->name, m->num_channels);
    return FLOWC_ERR_NOMEM;
  }
  if (ctx->gpu) FLOWC_RT(cuda_pin_channels)(ctx);
  int status = FLOWC_RT(mpi_create)(ctx, &ctx->rendezvous->mpi);
  if (!status) status = start_workers(ctx);
  if (status) { /* no half-started partitions: the context is unusable */
    FLOWC_RT(rendezvous_destroy)(ctx->rendezvous);
    ctx->rendezvous = NULL;
  }
  return status;
}

int FLOWC_RT(rt_run_partitions)(flowc_ctx *ctx) {
  const flowc_model *m = ctx->model;
  flowc_rendezvous *rv = ctx->rendezvous;
  int status;
  pthread_mutex_lock(&rv->mu);
  memset(rv->full, 0, (size_t)m->num_channels);
  rv->status = 0;
  rv->pending = m->num_partitions - 1;
  rv->generation++;
  pthread_cond_broadcast(&rv->start);
  pthread_mutex_unlock(&rv->mu);
  run_part(ctx, &m->partitions[0]);
  pthread_mutex_lock(&rv->mu);
  while (rv->pending) pthread_cond_wait(&rv->done, &rv->mu);
  status = rv->status;
  pthread_mutex_unlock(&rv->mu);
  return rv->mpi ? FLOWC_RT(mpi_end_run)(ctx, rv->mpi, status) : status;
}

int FLOWC_RT(rt_partitions_finish)(flowc_ctx *ctx) {
  flowc_rendezvous *rv = ctx->rendezvous;
  return rv->mpi ? FLOWC_RT(mpi_share_outputs)(ctx, rv->mpi) : FLOWC_OK;
}
