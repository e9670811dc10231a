/* mpi.c: a partitioned model's tasks on MPI ranks (issue [16]). See flowc_rt.h.
 *
 * The runtime never links MPI. When a model's partitions span two or more tasks
 * (`/job:J/task:N/...` devices; a device without a task is task 0) and the process runs
 * under MPI (a launcher's environment: PMI_RANK, PMIX_RANK or OMPI_COMM_WORLD_SIZE; or an
 * MPI already initialised in the process, e.g. by mpi4py), mpi_create opens the MPI
 * library and tells its ABI's handles apart with flowc_mpi_open (mpi_abi.c, shared with
 * the all_reduce op's runtime half, allreduce.c).
 *
 * Rank r runs the partitions of task r (MPI_COMM_WORLD's size must be the number of tasks;
 * a size of 1, or no MPI, runs every task on threads of this process as before). MPI is
 * initialised (MPI_THREAD_MULTIPLE) only when nobody has yet, and then finalised at exit.
 * Each context duplicates MPI_COMM_WORLD (collective: every rank creates its contexts in
 * the same order), so its messages never meet the application's. A channel between
 * partitions of two tasks is a run of messages with the channel's index as tag, one per
 * piece of $FLOWC_MPI_PIECE_BYTES (default 4 MiB, at most 1 GiB; MPI keeps messages of one
 * tag and peer in order, and a tensor of any size fits an int count): the sender copies
 * the tensor into the channel's staging buffer and posts an MPI_Isend per piece (never
 * waits); the receiver posts an MPI_Irecv per piece into its destination, all at once, and
 * polls MPI_Test until they complete, the run failed elsewhere, or the timeout
 * ($FLOWC_MPI_TIMEOUT seconds, default 600) passes: then the run fails naming the peer
 * rank and the channel. A run ends by waiting
 * (same timeout) for its sends, and, after the output copies, each output goes from the
 * rank that computed it to every other (tag: channels + output index), so every rank's run
 * returns the same outputs. Calls into MPI are serialised by a mutex per context.
 *
 * Process-wide state: only the flag saying that this runtime initialised MPI (and so
 * finalises it at exit, unless a peer timed out: MPI_Finalize could then wait for it
 * forever, and a process that exits without it makes mpiexec end the job), and the MPI
 * library's table (mpi_abi.c). */
#include "flowc_rt.h"
#include "mpi_abi.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct flowc_mpi {
  const flowc_mpi_lib *api; /* the MPI library (mpi_abi.c) */
  mpi_h comm;
  int rank, size;
  int *task;       /* per partition: its task */
  int *from, *to;  /* per channel: the sending and receiving partitions */
  size_t piece;   /* bytes per message */
  size_t *base;   /* per channel, then per output: its first request slot */
  mpi_h *reqs;    /* request slots: a channel's pieces, an output's pieces per peer */
  unsigned char *active; /* per slot: a posted send not yet completed */
  size_t num_reqs;
  pthread_mutex_t mu; /* serialises MPI calls */
  double timeout;
  const flowc_model *model;
};

static int we_initialised; /* this runtime called MPI_Init_thread: finalise at exit */
static volatile int peer_lost; /* a peer timed out: MPI_Finalize could wait for it forever */
static int (*finalize_at_exit)(void);
static int (*finalized_at_exit)(int *);

static void finalize(void) {
  int done = 0;
  if (!peer_lost && finalized_at_exit && finalized_at_exit(&done) == 0 && !done)
    finalize_at_exit();
}

static int launched(void) {
  return getenv("PMI_RANK") || getenv("PMIX_RANK") || getenv("OMPI_COMM_WORLD_SIZE");
}

/* The task number of a device name (0 when it names none). */
static int device_task(const char *device) {
  const char *t = strstr(device, "/task:");
  return t ? atoi(t + 6) : 0;
}

static int partition_of(const flowc_model *m, const char *device, size_t n) {
  for (int p = 0; p < m->num_partitions; p++)
    if (strlen(m->partitions[p].device) == n && !strncmp(m->partitions[p].device, device, n))
      return p;
  return -1;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waits for a posted request: 0 once complete, 1 past `deadline`, 2 when `stop` says the run
 * failed elsewhere (the request is then cancelled and freed), -1 on an MPI error. */
static int poll(struct flowc_mpi *mp, mpi_h *req, double deadline, flowc_rendezvous *stop) {
  for (long spins = 0;; spins++) {
    int done = 0;
    mpi_status st;
    pthread_mutex_lock(&mp->mu);
    int rc = mp->api->Test(req, &done, &st);
    pthread_mutex_unlock(&mp->mu);
    if (rc) return -1;
    if (done) return 0;
    int why = stop && FLOWC_RT(rt_run_failed)(stop) ? 2 : now() > deadline ? 1 : 0;
    if (why) {
      if (why == 1) peer_lost = 1;
      pthread_mutex_lock(&mp->mu);
      mp->api->Cancel(req);
      mp->api->Request_free(req);
      pthread_mutex_unlock(&mp->mu);
      return why;
    }
    if (spins < 200) {
      sched_yield();
    } else {
      struct timespec pause = {0, 50000};
      nanosleep(&pause, NULL);
    }
  }
}

/* Waits for n posted requests in turn (same contract as poll); on a failure the ones not
 * yet complete are cancelled and freed. */
static int poll_all(struct flowc_mpi *mp, mpi_h *reqs, size_t n, double deadline,
                    flowc_rendezvous *stop) {
  for (size_t i = 0; i < n; i++) {
    int got = poll(mp, &reqs[i], deadline, stop);
    if (!got) continue;
    pthread_mutex_lock(&mp->mu);
    for (size_t j = i + 1; j < n; j++) {
      mp->api->Cancel(&reqs[j]);
      mp->api->Request_free(&reqs[j]);
    }
    pthread_mutex_unlock(&mp->mu);
    return got;
  }
  return 0;
}

static size_t pieces(const struct flowc_mpi *mp, size_t bytes) {
  return bytes ? (bytes + mp->piece - 1) / mp->piece : 1;
}

/* Posts the pieces of `bytes` at `data` to (send) or from peer `peer` with `tag` into
 * reqs[0 ..]; the MPI error code of the first failing post, or 0. */
static int post(struct flowc_mpi *mp, int send, void *data, size_t bytes, int peer, int tag,
                mpi_h *reqs) {
  size_t n = pieces(mp, bytes);
  int rc = 0;
  pthread_mutex_lock(&mp->mu);
  for (size_t i = 0; i < n && !rc; i++) {
    size_t at = i * mp->piece, len = bytes - at < mp->piece ? bytes - at : mp->piece;
    if (!bytes) len = 0;
    char *p = (char *)data + (bytes ? at : 0);
    rc = send ? mp->api->Isend(p, (int)len, mp->api->byte, peer, tag, mp->comm, &reqs[i])
              : mp->api->Irecv(p, (int)len, mp->api->byte, peer, tag, mp->comm, &reqs[i]);
  }
  pthread_mutex_unlock(&mp->mu);
  return rc;
}

static const char *channel_key(const struct flowc_mpi *mp, int channel) {
  return mp->model->channels[channel].key;
}

void FLOWC_RT(mpi_destroy)(flowc_mpi *mp) {
  if (!mp) return;
  if (mp->comm) {
    int done = 0;
    if (mp->api->Finalized(&done) == 0 && !done) mp->api->Comm_free(&mp->comm);
  }
  free(mp->task);
  free(mp->from);
  free(mp->to);
  free(mp->base);
  free(mp->reqs);
  free(mp->active);
  pthread_mutex_destroy(&mp->mu);
  free(mp);
}

/* Parses the channel keys (send_device;tensor;recv_device) into partitions. */
static int map_channels(flowc_ctx *ctx, struct flowc_mpi *mp) {
  const flowc_model *m = ctx->model;
  for (int k = 0; k < m->num_channels; k++) {
    const char *key = m->channels[k].key, *first = strchr(key, ';'), *last = strrchr(key, ';');
    mp->from[k] = first ? partition_of(m, key, (size_t)(first - key)) : -1;
    mp->to[k] = last ? partition_of(m, last + 1, strlen(last + 1)) : -1;
    if (mp->from[k] < 0 || mp->to[k] < 0)
      return FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_ARGUMENT, "%s: channel %d's key '%s' names no "
                               "partition's device", m->name, k, key);
  }
  return FLOWC_OK;
}

int FLOWC_RT(mpi_create)(flowc_ctx *ctx, flowc_mpi **out) {
  const flowc_model *m = ctx->model;
  *out = NULL;
  int tasks = 0, first = device_task(m->partitions[0].device), spread = 0;
  for (int p = 0; p < m->num_partitions; p++) {
    int t = device_task(m->partitions[p].device);
    if (t + 1 > tasks) tasks = t + 1;
    if (t != first) spread = 1;
  }
  if (!spread) return FLOWC_OK; /* one task: threads of this process */
  if (!FLOWC_MPI(flowc_mpi_loaded)() && !launched())
    return FLOWC_OK; /* no MPI here: every task on this process */
  struct flowc_mpi *mp = calloc(1, sizeof *mp);
  if (!mp) return FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_NOMEM, "%s: out of memory", m->name);
  pthread_mutex_init(&mp->mu, NULL);
  mp->model = m;
  int status = FLOWC_OK, initialised = 0, why = 0;
  const char *detail = NULL;
  if (!(mp->api = FLOWC_MPI(flowc_mpi_open)(&why, &detail))) {
    status = why == FLOWC_MPI_NO_LIBRARY
                 ? FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_DEVICE, "%s: partitions on %d tasks under "
                                     "an MPI launcher, but no MPI library: %s", m->name, tasks,
                                     detail)
                 : FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_DEVICE, "%s: the MPI library lacks %s",
                                     m->name, detail);
    goto done;
  }
  mp->api->Initialized(&initialised);
  if (!initialised) {
    if (!launched()) goto single; /* loaded but unused: this process is the whole job */
    int provided = 0;
    if (mp->api->Init_thread(NULL, NULL, mp->api->thread_multiple, &provided)) {
      status = FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_DEVICE, "%s: MPI_Init_thread failed (%s)",
                                 m->name, mp->api->abi);
      goto done;
    }
    if (!we_initialised) {
      we_initialised = 1;
      finalize_at_exit = mp->api->Finalize, finalized_at_exit = mp->api->Finalized;
      atexit(finalize);
    }
  }
  mp->api->Comm_rank(mp->api->world, &mp->rank);
  mp->api->Comm_size(mp->api->world, &mp->size);
  if (mp->size == 1) goto single;
  if (mp->size != tasks) {
    status = FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_ARGUMENT, "%s: partitions on %d tasks "
                               "(task:0 .. task:%d) but MPI runs %d ranks: launch one rank "
                               "per task", m->name, tasks, tasks - 1, mp->size);
    goto done;
  }
  if (m->num_channels + m->num_outputs > 32767) {
    status = FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_ARGUMENT, "%s: %d channels and outputs, more "
                               "than MPI's smallest tag bound (32767)", m->name,
                               m->num_channels + m->num_outputs);
    goto done;
  }
  const char *piece = getenv("FLOWC_MPI_PIECE_BYTES");
  mp->piece = piece && atol(piece) > 0 ? (size_t)atol(piece) : (size_t)4 << 20;
  if (mp->piece > (size_t)1 << 30) mp->piece = (size_t)1 << 30;
  size_t slots = (size_t)m->num_channels + (size_t)m->num_outputs;
  mp->base = calloc(slots + 1, sizeof *mp->base);
  for (size_t k = 0; mp->base && k < slots; k++) { /* request slots: channels, then outputs */
    int ch = k < (size_t)m->num_channels;
    size_t bytes = ch ? m->channels[k].bytes : m->outputs[k - (size_t)m->num_channels].bytes;
    mp->base[k] = mp->num_reqs;
    mp->num_reqs += pieces(mp, bytes) * (ch ? 1 : (size_t)mp->size);
  }
  mp->task = calloc((size_t)m->num_partitions, sizeof *mp->task);
  mp->from = calloc((size_t)m->num_channels + 1, sizeof *mp->from);
  mp->to = calloc((size_t)m->num_channels + 1, sizeof *mp->to);
  mp->reqs = calloc(mp->num_reqs + 1, sizeof *mp->reqs);
  mp->active = calloc(mp->num_reqs + 1, 1);
  if (!mp->base || !mp->task || !mp->from || !mp->to || !mp->reqs || !mp->active) {
    status = FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_NOMEM, "%s: out of memory", m->name);
    goto done;
  }
  for (int p = 0; p < m->num_partitions; p++) {
    mp->task[p] = device_task(m->partitions[p].device);
    if (m->partitions[p].gpu) {
      status = FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_ARGUMENT, "%s: partition %s is a GPU's; "
                                 "partitions on MPI ranks are CPU devices so far", m->name,
                                 m->partitions[p].device);
      goto done;
    }
  }
  if ((status = map_channels(ctx, mp))) goto done;
  const char *limit = getenv("FLOWC_MPI_TIMEOUT");
  mp->timeout = limit && atof(limit) > 0 ? atof(limit) : 600.0;
  if (mp->api->Comm_dup(mp->api->world, &mp->comm)) {
    status = FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_DEVICE, "%s: MPI_Comm_dup failed", m->name);
    goto done;
  }
  *out = mp;
  return FLOWC_OK;
single:
  FLOWC_RT(mpi_destroy)(mp);
  return FLOWC_OK;
done:
  FLOWC_RT(mpi_destroy)(mp);
  return status;
}

int FLOWC_RT(mpi_local)(const flowc_mpi *mp, int partition) {
  return mp->task[partition] == mp->rank;
}

int FLOWC_RT(mpi_remote)(const flowc_mpi *mp, int channel) {
  return mp->task[mp->from[channel]] != mp->task[mp->to[channel]];
}

int FLOWC_RT(mpi_send)(flowc_mpi *mp, int channel, const void *data, char *message,
                       size_t message_bytes) {
  size_t bytes = mp->model->channels[channel].bytes, at = mp->base[channel];
  int peer = mp->task[mp->to[channel]];
  int rc = post(mp, 1, (void *)data, bytes, peer, channel, &mp->reqs[at]);
  if (rc) {
    snprintf(message, message_bytes, "%s: rank %d: MPI_Isend to rank %d on channel %d (%s) "
             "failed (error %d)", mp->model->name, mp->rank, peer, channel,
             channel_key(mp, channel), rc);
    return FLOWC_ERR_DEVICE;
  }
  memset(&mp->active[at], 1, pieces(mp, bytes));
  return FLOWC_OK;
}

int FLOWC_RT(mpi_recv)(flowc_mpi *mp, flowc_rendezvous *rv, int channel, void *data,
                       char *message, size_t message_bytes) {
  size_t bytes = mp->model->channels[channel].bytes;
  int peer = mp->task[mp->from[channel]];
  mpi_h *reqs = &mp->reqs[mp->base[channel]]; /* this rank only receives on the channel */
  int rc = post(mp, 0, data, bytes, peer, channel, reqs);
  int got = rc ? -1 : poll_all(mp, reqs, pieces(mp, bytes), now() + mp->timeout, rv);
  if (got == 0 || got == 2) return got ? FLOWC_ERR_DEVICE : FLOWC_OK;
  if (got == 1)
    snprintf(message, message_bytes, "%s: rank %d: no message from rank %d on channel %d (%s) "
             "within %g s (FLOWC_MPI_TIMEOUT): rank %d exited or hangs", mp->model->name,
             mp->rank, peer, channel, channel_key(mp, channel), mp->timeout, peer);
  else
    snprintf(message, message_bytes, "%s: rank %d: MPI receive from rank %d on channel %d "
             "(%s) failed", mp->model->name, mp->rank, peer, channel, channel_key(mp, channel));
  return FLOWC_ERR_DEVICE;
}

/* Waits for every active send slot up to the timeout; frees them all on a failure. */
static int wait_sends(flowc_ctx *ctx, flowc_mpi *mp, int failed) {
  double deadline = now() + mp->timeout;
  int status = failed;
  for (size_t k = 0; k < mp->num_reqs; k++) {
    if (!mp->active[k]) continue;
    mp->active[k] = 0;
    if (!status) {
      if (!poll(mp, &mp->reqs[k], deadline, NULL)) continue;
      status = FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_DEVICE, "%s: rank %d: a send (request %zu) "
                                 "was not taken within %g s (FLOWC_MPI_TIMEOUT): a peer "
                                 "exited or hangs", ctx->model->name, mp->rank, k,
                                 mp->timeout);
    } else {
      pthread_mutex_lock(&mp->mu);
      mp->api->Request_free(&mp->reqs[k]);
      pthread_mutex_unlock(&mp->mu);
    }
  }
  return status;
}

int FLOWC_RT(mpi_end_run)(flowc_ctx *ctx, flowc_mpi *mp, int status) {
  return wait_sends(ctx, mp, status);
}

int FLOWC_RT(mpi_share_outputs)(flowc_ctx *ctx, flowc_mpi *mp) {
  const flowc_model *m = ctx->model;
  int nch = m->num_channels, status = FLOWC_OK;
  for (int j = 0; j < m->num_outputs && !status; j++) {
    int part = m->output_partition ? m->output_partition[j] : -1;
    if (part < 0) continue;
    int owner = mp->task[part];
    size_t bytes = m->outputs[j].bytes, n = pieces(mp, bytes), at = mp->base[nch + j];
    if (owner == mp->rank) {
      for (int r = 0; r < mp->size && !status; r++) {
        if (r == mp->rank) continue;
        size_t slot = at + (size_t)r * n;
        if (post(mp, 1, ctx->outputs[j], bytes, r, nch + j, &mp->reqs[slot]))
          status = FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_DEVICE, "%s: rank %d: MPI_Isend of output "
                                     "%s to rank %d failed", m->name, mp->rank,
                                     m->outputs[j].name, r);
        else
          memset(&mp->active[slot], 1, n);
      }
      continue;
    }
    int rc = post(mp, 0, ctx->outputs[j], bytes, owner, nch + j, &mp->reqs[at]);
    int got = rc ? -1 : poll_all(mp, &mp->reqs[at], n, now() + mp->timeout, NULL);
    if (got)
      status = FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_DEVICE, "%s: rank %d: output %s from rank %d "
                                 "%s", m->name, mp->rank, m->outputs[j].name, owner,
                                 got == 1 ? "did not come within the timeout "
                                            "(FLOWC_MPI_TIMEOUT): the rank exited or hangs"
                                          : "failed");
  }
  return wait_sends(ctx, mp, status);
}
