/* partition.c: running a partitioned model (one entry function per device) and the
 * rendezvous its send/recv steps go through. See flowc_rt.h.
 *
 * A run resets every channel, starts one thread per partition after the first (which runs
 * on the caller, with the context's pool; the others run their kernels serially), and
 * joins them. A send copies its tensor into the channel's staging buffer and marks the
 * channel full; a recv waits (condition variable) until it is full and copies the tensor
 * out. Sends never wait, and each partition runs its steps in an order consistent with the
 * whole graph's topological order, so every recv's send eventually runs: no deadlock.
 * Threads are started in a held state and released together, so a failure to start one
 * leaves no partition waiting on a peer that never runs. */
#include "flowc_rt.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HELD, GO, ABORT };

struct flowc_rendezvous {
  pthread_mutex_t mu;
  pthread_cond_t changed;
  const flowc_model *model;
  unsigned char *full; /* per channel: the send of this run has happened */
  char **slot;         /* per channel: staging buffer (NULL for a control channel) */
  int state;           /* HELD, GO or ABORT: whether started threads may run */
};

static flowc_rendezvous *rendezvous_create(const flowc_model *m) {
  flowc_rendezvous *rv = calloc(1, sizeof *rv);
  if (!rv) return NULL;
  rv->model = m;
  pthread_mutex_init(&rv->mu, NULL);
  pthread_cond_init(&rv->changed, NULL);
  size_t n = (size_t)m->num_channels;
  rv->full = calloc(n + 1, 1);
  rv->slot = calloc(n + 1, sizeof *rv->slot);
  int ok = rv->full && rv->slot;
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
  for (int k = 0; rv->slot && k < rv->model->num_channels; k++) free(rv->slot[k]);
  free(rv->slot);
  free(rv->full);
  pthread_cond_destroy(&rv->changed);
  pthread_mutex_destroy(&rv->mu);
  free(rv);
}

void FLOWC_RT(rt_send)(flowc_rendezvous *rv, int channel, const void *data) {
  size_t bytes = rv->model->channels[channel].bytes;
  if (bytes) memcpy(rv->slot[channel], data, bytes);
  pthread_mutex_lock(&rv->mu);
  rv->full[channel] = 1;
  pthread_cond_broadcast(&rv->changed);
  pthread_mutex_unlock(&rv->mu);
}

void FLOWC_RT(rt_recv)(flowc_rendezvous *rv, int channel, void *data) {
  pthread_mutex_lock(&rv->mu);
  while (!rv->full[channel]) pthread_cond_wait(&rv->changed, &rv->mu);
  pthread_mutex_unlock(&rv->mu);
  size_t bytes = rv->model->channels[channel].bytes;
  if (bytes) memcpy(data, rv->slot[channel], bytes);
}

typedef struct {
  flowc_ctx *ctx;
  const flowc_partition *part;
} part_arg;

static void run_part(flowc_ctx *ctx, const flowc_partition *p) {
  p->run(ctx->inputs, ctx->outputs, ctx->arena + p->arena_offset, ctx->weights, ctx->rendezvous);
}

static void *part_thread(void *arg) {
  part_arg *a = arg;
  flowc_rendezvous *rv = a->ctx->rendezvous;
  pthread_mutex_lock(&rv->mu);
  while (rv->state == HELD) pthread_cond_wait(&rv->changed, &rv->mu);
  int go = rv->state == GO;
  pthread_mutex_unlock(&rv->mu);
  if (go) run_part(a->ctx, a->part);
  return NULL;
}

static void release(flowc_rendezvous *rv, int state) {
  pthread_mutex_lock(&rv->mu);
  rv->state = state;
  pthread_cond_broadcast(&rv->changed);
  pthread_mutex_unlock(&rv->mu);
}

int FLOWC_RT(rt_run_partitions)(flowc_ctx *ctx) {
  const flowc_model *m = ctx->model;
  if (!ctx->rendezvous && !(ctx->rendezvous = rendezvous_create(m))) {
    snprintf(ctx->error, sizeof ctx->error, "%s: out of memory allocating the rendezvous of "
             "%d channels", m->name, m->num_channels);
    return FLOWC_ERR_NOMEM;
  }
  flowc_rendezvous *rv = ctx->rendezvous;
  memset(rv->full, 0, (size_t)m->num_channels);
  rv->state = HELD;
  int others = m->num_partitions - 1;
  pthread_t threads[others > 0 ? others : 1];
  part_arg args[others > 0 ? others : 1];
  int started = 0, err = 0;
  for (; started < others; started++) {
    args[started] = (part_arg){ctx, &m->partitions[started + 1]};
    err = pthread_create(&threads[started], NULL, part_thread, &args[started]);
    if (err) break;
  }
  release(rv, err ? ABORT : GO);
  if (!err) run_part(ctx, &m->partitions[0]);
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  if (err) {
    snprintf(ctx->error, sizeof ctx->error, "%s: cannot start the thread of partition %s: %s",
             m->name, m->partitions[started + 1].device, strerror(err));
    return FLOWC_ERR_THREADS;
  }
  return FLOWC_OK;
}
