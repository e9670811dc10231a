/* runtime.c: contexts, input/output binding with shape and dtype checks, the arena, the
 * weights (embedded, or a side file mapped by tables.c), and run(). See flowc_rt.h.
 * Every failure returns a non-zero status and leaves a non-empty message in ctx->error.
 * Every public entry point taking a context holds ctx->lock for its whole duration (the
 * static helpers below assume it is held), so control calls wait for a run in flight. */
#define _GNU_SOURCE
#include "flowc_rt.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int FLOWC_RT(rt_fail)(flowc_ctx *ctx, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
  va_end(ap);
  return status;
}

#define fail FLOWC_RT(rt_fail)


#define HUGE_PAGE ((size_t)2 << 20)

/* A FLOWC_ALIGN-aligned buffer; one of a huge page or more is huge-page aligned and asks
 * for transparent huge pages (where THP is in `madvise` mode, the default, memory gets
 * them only when asked): a few TLB entries cover an arena, not one per 4 KiB page. */
static void *alloc_aligned(size_t bytes) {
  void *p = NULL;
  if (bytes >= HUGE_PAGE) {
    size_t whole = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (posix_memalign(&p, HUGE_PAGE, whole) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, whole, MADV_HUGEPAGE); /* advice only: without THP, small pages */
#endif
    return p;
  }
  return posix_memalign(&p, FLOWC_ALIGN, bytes ? bytes : FLOWC_ALIGN) == 0 ? p : NULL;
}

/* Points ctx back at its own buffers (as after rt_input/rt_output of every tensor). */
static void bind_own(flowc_ctx *ctx) {
  const flowc_model *m = ctx->model;
  char *p = ctx->owned;
  for (int i = 0; i < m->num_inputs; p += flowc_round_up(m->inputs[i].bytes), i++)
    ctx->inputs[i] = p;
  for (int i = 0; i < m->num_outputs; p += flowc_round_up(m->outputs[i].bytes), i++) {
    ctx->outputs[i] = p;
    ctx->out_copy[i] = NULL;
  }
}

static void format_shape(char *buf, size_t size, int rank, const int64_t *shape) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < rank && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (used < size) snprintf(buf + used, size - used, "]");
}

/* The thread-scratch region for `threads` slots per partition (see flowc_rt.h), replacing
 * the old one; 0 or FLOWC_ERR_NOMEM. */
static int alloc_thread_scratch(flowc_ctx *ctx, int threads) {
  const flowc_model *m = ctx->model;
  size_t parts = m->num_partitions > 1 ? (size_t)m->num_partitions : 1, bytes;
  free(ctx->thread_scratch);
  ctx->thread_scratch = NULL;
  int overflow = __builtin_mul_overflow(m->thread_scratch_bytes, (size_t)threads * parts, &bytes);
  if (!overflow && !bytes) return FLOWC_OK;
  if (overflow || !(ctx->thread_scratch = alloc_aligned(bytes)))
    return fail(ctx, FLOWC_ERR_NOMEM, "%s: out of memory allocating %zu bytes of per-thread "
                "scratch (%zu per thread)", m->name, bytes, m->thread_scratch_bytes);
  return FLOWC_OK;
}

static int setup(flowc_ctx *ctx, const char *weights_file) {
  const flowc_model *m = ctx->model;
  const char *missing = m->cpu_missing ? m->cpu_missing() : NULL;
  if (missing)
    return fail(ctx, FLOWC_ERR_CPU, "%s: this CPU lacks '%s', which the artifact was compiled "
                "for; recompile it for this machine (flowc compile --target host)", m->name,
                missing);
  int checked = FLOWC_RT(rt_check_sizes)(ctx);
  if (checked) return checked;
  size_t n = (size_t)m->num_inputs + 2 * (size_t)m->num_outputs + 1, extra = 0;
  size_t owned = 0;
  for (int i = 0; i < m->num_inputs; i++) owned += flowc_round_up(m->inputs[i].bytes);
  for (int i = 0; i < m->num_outputs; i++) owned += flowc_round_up(m->outputs[i].bytes);
  for (int k = 1; k < m->num_entries; k++) { /* each later entry's own buffers follow */
    const flowc_entry *e = &m->entries[k];
    size_t io = (size_t)e->num_inputs + 2 * (size_t)e->num_outputs;
    if (io > extra) extra = io;
    for (int i = 0; i < e->num_inputs; i++) owned += flowc_round_up(e->inputs[i].bytes);
    for (int i = 0; i < e->num_outputs; i++) owned += flowc_round_up(e->outputs[i].bytes);
  }
  ctx->inputs = calloc(n + extra, sizeof(void *));
  if (!ctx->inputs) return fail(ctx, FLOWC_ERR_NOMEM, "%s: out of memory", m->name);
  ctx->outputs = ctx->inputs + m->num_inputs;
  ctx->out_copy = ctx->outputs + m->num_outputs;
  ctx->entry_io = ctx->inputs + n;
  ctx->owned = alloc_aligned(owned);
  ctx->arena = alloc_aligned(m->arena_bytes);
  ctx->arena_owned = 1;
  if (!ctx->owned || !ctx->arena)
    return fail(ctx, FLOWC_ERR_NOMEM, "%s: out of memory allocating %zu + %zu bytes", m->name,
                owned, m->arena_bytes);
  bind_own(ctx);
  for (int i = 0; i < m->num_inputs; i++) memset(ctx->inputs[i], 0, m->inputs[i].bytes);
  if (m->num_dims) { /* dims at their bounds, then every input's and output's shape */
    size_t count = (size_t)m->num_dims;
    for (int i = 0; i < m->num_inputs; i++) count += (size_t)m->inputs[i].rank;
    for (int i = 0; i < m->num_outputs; i++) count += (size_t)m->outputs[i].rank;
    if (!(ctx->dim_values = calloc(count ? count : 1, sizeof(int64_t))))
      return fail(ctx, FLOWC_ERR_NOMEM, "%s: out of memory", m->name);
    int64_t *p = ctx->dim_values;
    for (int k = 0; k < m->num_dims; k++) *p++ = m->dims[k].hi;
    for (int i = 0; i < m->num_inputs; p += m->inputs[i].rank, i++)
      memcpy(p, m->inputs[i].shape, (size_t)m->inputs[i].rank * sizeof(int64_t));
    for (int i = 0; i < m->num_outputs; p += m->outputs[i].rank, i++)
      memcpy(p, m->outputs[i].shape, (size_t)m->outputs[i].rank * sizeof(int64_t));
  }
  ctx->threads = 1;
  int scratch = alloc_thread_scratch(ctx, 1);
  if (scratch) return scratch;
  if (m->weights || m->weights_bytes == 0) {
    ctx->weights = (const char *)m->weights;
  } else {
    int mapped = FLOWC_RT(rt_map_weights)(ctx, weights_file);
    if (mapped) return mapped;
  }
  return FLOWC_RT(rt_init_variables)(ctx);
}

/* Whether the model runs kernels on a GPU (whole, or a partition): only then is the CUDA
 * driver loaded. */
static int uses_gpu(const flowc_model *m) {
  for (int i = 0; i < m->num_partitions; i++)
    if (m->partitions[i].gpu) return 1;
  return m->gpu != NULL;
}

int FLOWC_RT(rt_create)(const flowc_model *m, const char *weights_file, flowc_ctx **out) {
  if (!out) return FLOWC_ERR_ARGUMENT;
  flowc_ctx *ctx = calloc(1, sizeof *ctx);
  *out = ctx;
  if (!ctx) return FLOWC_ERR_NOMEM;
  ctx->model = m;
  if (pthread_mutex_init(&ctx->lock, NULL) != 0) {
    free(ctx);
    *out = NULL;
    return FLOWC_ERR_NOMEM;
  }
  int status = setup(ctx, weights_file);
  if (status == FLOWC_OK && uses_gpu(m)) status = FLOWC_RT(cuda_create)(ctx);
  if (status == FLOWC_OK && m->num_partitions) status = FLOWC_RT(rt_partitions_create)(ctx);
  return status;
}

/* Waits for a run in flight (its lock), then frees everything; the caller makes sure no
 * other call starts on ctx from now on. */
void FLOWC_RT(rt_destroy)(flowc_ctx *ctx) {
  if (!ctx) return;
  pthread_mutex_lock(&ctx->lock);
  pthread_mutex_unlock(&ctx->lock);
  pthread_mutex_destroy(&ctx->lock);
  if (ctx->gpu) FLOWC_RT(cuda_destroy)(ctx);
  if (ctx->pool) FLOWC_RT(pool_destroy)(ctx->pool);
  if (ctx->rendezvous) FLOWC_RT(rendezvous_destroy)(ctx->rendezvous);
  if (ctx->map) munmap(ctx->map, ctx->map_bytes);
  if (ctx->arena_owned) free(ctx->arena);
  free(ctx->thread_scratch);
  free(ctx->variables);
  free(ctx->dim_values);
  free(ctx->owned);
  free(ctx->inputs);
  free(ctx);
}

const char *FLOWC_RT(rt_error)(const flowc_ctx *ctx) {
  if (!ctx) return "no context: the context pointer is NULL (or creating it ran out of memory)";
  return ctx->error[0] ? ctx->error : "no error";
}

/* API misuse guard (every entry point that takes a context): a NULL context fails with
 * FLOWC_ERR_ARGUMENT (no message can be stored; rt_error(NULL) says why), and so does a
 * context whose creation failed (no buffers, arena or weights), with a message. */
static int unusable(flowc_ctx *ctx) {
  if (!ctx) return FLOWC_ERR_ARGUMENT;
  const flowc_model *m = ctx->model;
  if (ctx->owned && ctx->arena && (ctx->weights || !m->weights_bytes) &&
      (ctx->variables || !m->variables_bytes) &&
      (ctx->thread_scratch || !m->thread_scratch_bytes) &&
      (ctx->rendezvous || !m->num_partitions) && (ctx->dim_values || !m->num_dims))
    return FLOWC_OK;
  if (strstr(ctx->error, "is unusable")) return FLOWC_ERR_ARGUMENT; /* said already */
  char why[FLOWC_ERROR_BYTES / 2];
  snprintf(why, sizeof why, "%.*s", (int)sizeof why - 1, ctx->error[0] ? ctx->error : "unknown");
  return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: this context is unusable, its creation failed (%s)",
              m->name, why);
}

int FLOWC_RT(rt_unusable)(flowc_ctx *ctx) { return unusable(ctx); }

static int check_tensor(flowc_ctx *ctx, const char *what, const flowc_tensor_desc *d,
                        const void *data, int dtype, int rank, const int64_t *shape) {
  const char *model = ctx->model->name;
  if (!data) return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: %s '%s': data is NULL", model, what,
                         d->name);
  if (dtype != d->dtype)
    return fail(ctx, FLOWC_ERR_DTYPE, "%s: %s '%s': expected dtype %s, got %s", model, what,
                d->name, FLOWC_RT(rt_dtype_name)(d->dtype), FLOWC_RT(rt_dtype_name)(dtype));
  if (rank != d->rank) { /* the caller's dims are not read: `rank` may be anything */
    char want[256];
    format_shape(want, sizeof want, d->rank, d->shape);
    return fail(ctx, FLOWC_ERR_SHAPE, "%s: %s '%s': expected rank %d, shape %s; got rank %d",
                model, what, d->name, d->rank, want, rank);
  }
  int same = rank == 0 || shape;
  for (int i = 0; same && i < rank; i++)
    same = shape[i] == d->shape[i] || (d->dim_of && d->dim_of[i] >= 0 && shape[i] >= 0);
  if (!same) {
    char want[256], got[256];
    format_shape(want, sizeof want, d->rank, d->shape);
    format_shape(got, sizeof got, shape ? rank : 0, shape);
    return fail(ctx, FLOWC_ERR_SHAPE, "%s: %s '%s': expected shape %s, got %s%s", model, what,
                d->name, want, got, shape || rank == 0 ? "" : " (no shape given)");
  }
  return FLOWC_OK;
}

/* The owned buffer of input i, which run() reads from now on (lock held). */
static void *own_input(flowc_ctx *ctx, int i) {
  const flowc_model *m = ctx->model;
  if (!ctx->owned || i < 0 || i >= m->num_inputs) return NULL;
  char *p = ctx->owned;
  for (int k = 0; k < i; k++) p += flowc_round_up(m->inputs[k].bytes);
  ctx->inputs[i] = p;
  return p;
}

/* The owned buffer of output i, which run() writes from now on (lock held). */
static void *own_output(flowc_ctx *ctx, int i) {
  const flowc_model *m = ctx->model;
  if (!ctx->owned || i < 0 || i >= m->num_outputs) return NULL;
  char *p = ctx->owned;
  for (int k = 0; k < m->num_inputs; k++) p += flowc_round_up(m->inputs[k].bytes);
  for (int k = 0; k < i; k++) p += flowc_round_up(m->outputs[k].bytes);
  ctx->outputs[i] = p;
  ctx->out_copy[i] = NULL;
  return p;
}

/* Where the shape of input i (output j: num_inputs + j) is kept (a model with dims). */
static int64_t *shape_slot(const flowc_ctx *ctx, int i) {
  const flowc_model *m = ctx->model;
  int64_t *p = ctx->dim_values + m->num_dims;
  for (int k = 0; k < i; k++)
    p += k < m->num_inputs ? m->inputs[k].rank : m->outputs[k - m->num_inputs].rank;
  return p;
}

/* The bytes of a tensor of descriptor d and shape `shape` (its size at the run's dims). */
static size_t actual_bytes(const flowc_tensor_desc *d, const int64_t *shape) {
  size_t bound = 1, actual = 1;
  for (int i = 0; i < d->rank; i++) {
    bound *= (size_t)d->shape[i];
    actual *= (size_t)shape[i];
  }
  return bound ? d->bytes / bound * actual : 0;
}

static size_t input_bytes(const flowc_ctx *ctx, int i) {
  const flowc_model *m = ctx->model;
  return m->num_dims ? actual_bytes(&m->inputs[i], shape_slot(ctx, i)) : m->inputs[i].bytes;
}

static size_t output_bytes(const flowc_ctx *ctx, int j) {
  const flowc_model *m = ctx->model;
  return m->num_dims ? actual_bytes(&m->outputs[j], shape_slot(ctx, m->num_inputs + j))
                     : m->outputs[j].bytes;
}

/* Records input i's shape (a model with dims; already checked by check_tensor). */
static void keep_shape(flowc_ctx *ctx, int i, const int64_t *shape) {
  if (ctx->model->num_dims && ctx->model->inputs[i].rank)
    memcpy(shape_slot(ctx, i), shape, (size_t)ctx->model->inputs[i].rank * sizeof(int64_t));
}

/* The run's dims from the inputs' shapes: each in its bounds, and every input axis of a dim
 * agreeing with it; then the outputs' shapes. Else a one-line message naming the input,
 * axis, dim and values (nothing runs). */
static int resolve_dims(flowc_ctx *ctx) {
  const flowc_model *m = ctx->model;
  for (int k = 0; k < m->num_dims; k++) {
    const flowc_dim *d = &m->dims[k];
    int64_t v = shape_slot(ctx, d->input)[d->axis];
    if (v < d->lo || v > d->hi)
      return fail(ctx, FLOWC_ERR_SHAPE, "%s: input '%s' axis %d: dim %s=%lld is outside its "
                  "bounds %lld..%lld; nothing ran", m->name, m->inputs[d->input].name, d->axis,
                  d->name, (long long)v, (long long)d->lo, (long long)d->hi);
    ctx->dim_values[k] = v;
  }
  for (int i = 0; i < m->num_inputs; i++) {
    const flowc_tensor_desc *t = &m->inputs[i];
    const int64_t *shape = shape_slot(ctx, i);
    for (int a = 0; t->dim_of && a < t->rank; a++) {
      int k = t->dim_of[a];
      if (k >= 0 && shape[a] != ctx->dim_values[k])
        return fail(ctx, FLOWC_ERR_SHAPE, "%s: input '%s' axis %d: dim %s=%lld, but input "
                    "'%s' axis %d gives %s=%lld; nothing ran", m->name, t->name, a,
                    m->dims[k].name, (long long)shape[a], m->inputs[m->dims[k].input].name,
                    m->dims[k].axis, m->dims[k].name, (long long)ctx->dim_values[k]);
    }
  }
  m->output_shapes(ctx->dim_values, shape_slot(ctx, m->num_inputs));
  return FLOWC_OK;
}

/* Input i's run-time shape (its rank and dtype already checked): each axis of a dim within
 * the dim's upper bound (the descriptor's shape), else an error and nothing kept (an axis
 * past its bound would overrun the owned buffer); then kept for the run. */
static int accept_shape(flowc_ctx *ctx, int i, int rank, const int64_t *shape) {
  const flowc_model *m = ctx->model;
  const flowc_tensor_desc *d = &m->inputs[i];
  for (int a = 0; d->dim_of && a < rank; a++)
    if (d->dim_of[a] >= 0 && shape[a] > d->shape[a])
      return fail(ctx, FLOWC_ERR_SHAPE, "%s: input '%s' axis %d: dim %s=%lld is outside its "
                  "bounds %lld..%lld; nothing ran", m->name, d->name, a,
                  m->dims[d->dim_of[a]].name, (long long)shape[a],
                  (long long)m->dims[d->dim_of[a]].lo, (long long)d->shape[a]);
  keep_shape(ctx, i, shape);
  return FLOWC_OK;
}

/* FLOWC_OK when `ctx` is usable and input `i` exists; else the failure, recorded. */
static int check_input_index(flowc_ctx *ctx, int i) {
  int bad = unusable(ctx);
  if (bad) return bad;
  const flowc_model *m = ctx->model;
  if (i < 0 || i >= m->num_inputs)
    return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: input index %d out of range (the model has %d)",
                m->name, i, m->num_inputs);
  return FLOWC_OK;
}

static int set_input(flowc_ctx *ctx, int i, const void *data, int dtype, int rank,
                     const int64_t *shape) {
  int status = check_input_index(ctx, i);
  if (status) return status;
  const flowc_model *m = ctx->model;
  status = check_tensor(ctx, "input", &m->inputs[i], data, dtype, rank, shape);
  if (!status) status = accept_shape(ctx, i, rank, shape);
  if (status) return status;
  void *own = own_input(ctx, i);
  if (((uintptr_t)data % FLOWC_ALIGN) == 0)
    ctx->inputs[i] = (void *)data; /* borrowed: valid until set again or destroyed */
  else
    memcpy(own, data, input_bytes(ctx, i));
  return FLOWC_OK;
}

static int set_input_shape(flowc_ctx *ctx, int i, int rank, const int64_t *shape) {
  int status = check_input_index(ctx, i);
  if (status) return status;
  const flowc_model *m = ctx->model;
  status = check_tensor(ctx, "input", &m->inputs[i], ctx, m->inputs[i].dtype, rank, shape);
  return status ? status : accept_shape(ctx, i, rank, shape);
}

int FLOWC_RT(rt_set_input_shape)(flowc_ctx *ctx, int i, int rank, const int64_t *shape) {
  if (!ctx) return FLOWC_ERR_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  int status = set_input_shape(ctx, i, rank, shape);
  pthread_mutex_unlock(&ctx->lock);
  return status;
}

const int64_t *FLOWC_RT(rt_output_shape)(const flowc_ctx *ctx, int j) {
  if (!ctx || j < 0 || j >= ctx->model->num_outputs) return NULL;
  if (!ctx->model->num_dims) return ctx->model->outputs[j].shape;
  flowc_ctx *c = (flowc_ctx *)ctx;
  pthread_mutex_lock(&c->lock);
  const int64_t *p = c->dim_values ? shape_slot(c, c->model->num_inputs + j) : NULL;
  pthread_mutex_unlock(&c->lock);
  return p;
}

static int set_output(flowc_ctx *ctx, int i, void *data, int dtype, int rank,
                      const int64_t *shape) {
  int bad = unusable(ctx);
  if (bad) return bad;
  const flowc_model *m = ctx->model;
  if (i < 0 || i >= m->num_outputs)
    return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: output index %d out of range (the model has %d)",
                m->name, i, m->num_outputs);
  int status = check_tensor(ctx, "output", &m->outputs[i], data, dtype, rank, shape);
  if (status) return status;
  (void)own_output(ctx, i);
  if (((uintptr_t)data % FLOWC_ALIGN) == 0)
    ctx->outputs[i] = data;
  else
    ctx->out_copy[i] = data;
  return FLOWC_OK;
}

int FLOWC_RT(rt_set_input)(flowc_ctx *ctx, int i, const void *data, int dtype, int rank,
                           const int64_t *shape) {
  if (!ctx) return FLOWC_ERR_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  int status = set_input(ctx, i, data, dtype, rank, shape);
  pthread_mutex_unlock(&ctx->lock);
  return status;
}

int FLOWC_RT(rt_set_output)(flowc_ctx *ctx, int i, void *data, int dtype, int rank,
                            const int64_t *shape) {
  if (!ctx) return FLOWC_ERR_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  int status = set_output(ctx, i, data, dtype, rank, shape);
  pthread_mutex_unlock(&ctx->lock);
  return status;
}

void *FLOWC_RT(rt_input)(flowc_ctx *ctx, int i) {
  if (!ctx) return NULL;
  pthread_mutex_lock(&ctx->lock);
  void *p = own_input(ctx, i);
  pthread_mutex_unlock(&ctx->lock);
  return p;
}

/* const in the API (reading an output), though it rebinds the output to the owned buffer */
const void *FLOWC_RT(rt_output)(const flowc_ctx *ctx, int i) {
  if (!ctx) return NULL;
  flowc_ctx *c = (flowc_ctx *)ctx;
  pthread_mutex_lock(&c->lock);
  void *p = own_output(c, i);
  pthread_mutex_unlock(&c->lock);
  return p;
}

/* One run on the caller's buffers: inputs[i] and outputs[j] hold the model's tensors (the
 * caller vouches for their dtypes and sizes; no check of either). Aligned buffers are used
 * in place, others through the context's own (copied in before, out after), exactly as
 * set_input/set_output bind them; afterwards the context uses its own buffers again, so it
 * keeps no pointer to the caller's memory. */
static int run(flowc_ctx *ctx);

static int run_with(flowc_ctx *ctx, const void *const *inputs, void *const *outputs) {
  int bad = unusable(ctx);
  if (bad) return bad;
  const flowc_model *m = ctx->model;
  for (int i = 0; i < m->num_inputs; i++)
    if (!inputs || !inputs[i])
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: run_with: input %d '%s': data is NULL",
                  m->name, i, m->inputs[i].name);
  for (int i = 0; i < m->num_outputs; i++)
    if (!outputs || !outputs[i])
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: run_with: output %d '%s': data is NULL",
                  m->name, i, m->outputs[i].name);
  bind_own(ctx);
  for (int i = 0; i < m->num_inputs; i++) {
    if (((uintptr_t)inputs[i] % FLOWC_ALIGN) == 0)
      ctx->inputs[i] = (void *)inputs[i];
    else
      memcpy(ctx->inputs[i], inputs[i], input_bytes(ctx, i));
  }
  for (int i = 0; i < m->num_outputs; i++) {
    if (((uintptr_t)outputs[i] % FLOWC_ALIGN) == 0)
      ctx->outputs[i] = outputs[i];
    else
      ctx->out_copy[i] = outputs[i];
  }
  int status = run(ctx);
  bind_own(ctx);
  return status;
}

int FLOWC_RT(rt_run_with)(flowc_ctx *ctx, const void *const *inputs, void *const *outputs) {
  if (!ctx) return FLOWC_ERR_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  int status = run_with(ctx, inputs, outputs);
  pthread_mutex_unlock(&ctx->lock);
  return status;
}

/* The owned buffers of entry k >= 1: after entry 0's and those of entries 1 .. k-1. */
static char *entry_owned(flowc_ctx *ctx, int k) {
  const flowc_model *m = ctx->model;
  char *p = ctx->owned;
  for (int i = 0; i < m->num_inputs; i++) p += flowc_round_up(m->inputs[i].bytes);
  for (int i = 0; i < m->num_outputs; i++) p += flowc_round_up(m->outputs[i].bytes);
  for (int j = 1; j < k; j++) {
    const flowc_entry *e = &m->entries[j];
    for (int i = 0; i < e->num_inputs; i++) p += flowc_round_up(e->inputs[i].bytes);
    for (int i = 0; i < e->num_outputs; i++) p += flowc_round_up(e->outputs[i].bytes);
  }
  return p;
}

/* Entry e's labels input, when it has one, each in [0, classes): else a one-line message
 * naming the first bad label and its index. */
static int check_labels(flowc_ctx *ctx, const flowc_entry *e, const void *data) {
  const flowc_tensor_desc *d = &e->inputs[e->labels];
  size_t count = d->bytes / sizeof(int64_t);
  for (size_t i = 0; i < count; i++) {
    int64_t label;
    memcpy(&label, (const char *)data + i * sizeof label, sizeof label);
    if (label < 0 || label >= e->classes)
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: %s: %s[%zu] is %lld, outside [0, %lld); "
                  "nothing ran", ctx->model->name, e->name, d->name, i, (long long)label,
                  (long long)e->classes);
  }
  return FLOWC_OK;
}

static int run_entry(flowc_ctx *ctx, int k, const void *const *inputs, void *const *outputs) {
  int bad = unusable(ctx);
  if (bad) return bad;
  const flowc_model *m = ctx->model;
  int count = m->num_entries ? m->num_entries : 1;
  if (k < 0 || k >= count)
    return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: entry %d out of range (the model has %d)",
                m->name, k, count);
  if (!m->num_entries) return run_with(ctx, inputs, outputs);
  const flowc_entry *e = &m->entries[k];
  for (int i = 0; i < e->num_inputs; i++)
    if (!inputs || !inputs[i])
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: %s: input %d '%s': data is NULL", m->name,
                  e->name, i, e->inputs[i].name);
  for (int i = 0; i < e->num_outputs; i++)
    if (!outputs || !outputs[i])
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: %s: output %d '%s': data is NULL", m->name,
                  e->name, i, e->outputs[i].name);
  int status = e->labels >= 0 ? check_labels(ctx, e, inputs[e->labels]) : FLOWC_OK;
  if (status || k == 0) return status ? status : run_with(ctx, inputs, outputs);
  void **ins = ctx->entry_io, **outs = ins + e->num_inputs, **copy = outs + e->num_outputs;
  char *p = entry_owned(ctx, k);
  for (int i = 0; i < e->num_inputs; p += flowc_round_up(e->inputs[i].bytes), i++) {
    ins[i] = ((uintptr_t)inputs[i] % FLOWC_ALIGN) == 0 ? (void *)inputs[i] : p;
    if (ins[i] == p) memcpy(p, inputs[i], e->inputs[i].bytes);
  }
  for (int i = 0; i < e->num_outputs; p += flowc_round_up(e->outputs[i].bytes), i++) {
    int aligned = ((uintptr_t)outputs[i] % FLOWC_ALIGN) == 0;
    outs[i] = aligned ? outputs[i] : p;
    copy[i] = aligned ? NULL : outputs[i];
  }
  FLOWC_RT(pool_enter)(ctx->pool);
  e->entry(ins, outs, ctx->arena, ctx->weights, ctx->thread_scratch, ctx->variables, NULL);
  FLOWC_RT(pool_leave)();
  for (int i = 0; i < e->num_outputs; i++)
    if (copy[i]) memcpy(copy[i], outs[i], e->outputs[i].bytes);
  return FLOWC_OK;
}

int FLOWC_RT(rt_run_entry)(flowc_ctx *ctx, int k, const void *const *inputs,
                           void *const *outputs) {
  if (!ctx) return FLOWC_ERR_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  int status = run_entry(ctx, k, inputs, outputs);
  pthread_mutex_unlock(&ctx->lock);
  return status;
}

/* Replaces the pool, the partitions' pools and the thread-scratch region; the lock
 * guarantees no run is using the old ones. On failure the context runs on one thread. */
static int set_threads(flowc_ctx *ctx, int threads) {
  int bad = unusable(ctx);
  if (bad) return bad;
  if (threads < 1 || threads > 1024)
    return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: thread count must be 1..1024, got %d",
                ctx->model->name, threads);
  if (threads == ctx->threads) return FLOWC_OK;
  if (ctx->pool) FLOWC_RT(pool_destroy)(ctx->pool);
  ctx->pool = NULL;
  ctx->threads = threads;
  int status = alloc_thread_scratch(ctx, threads);
  if (!status && threads > 1) {
    ctx->pool = FLOWC_RT(pool_create)(threads, ctx->error, sizeof ctx->error);
    if (!ctx->pool) status = FLOWC_ERR_THREADS;
  }
  if (!status && ctx->rendezvous) status = FLOWC_RT(rt_partitions_sync)(ctx);
  if (status) { /* back to one thread, keeping the message */
    char why[FLOWC_ERROR_BYTES];
    memcpy(why, ctx->error, sizeof why);
    if (ctx->pool) FLOWC_RT(pool_destroy)(ctx->pool);
    ctx->pool = NULL;
    ctx->threads = 1;
    (void)alloc_thread_scratch(ctx, 1);
    if (ctx->rendezvous) (void)FLOWC_RT(rt_partitions_sync)(ctx);
    memcpy(ctx->error, why, sizeof why);
    return status;
  }
  return FLOWC_OK;
}

int FLOWC_RT(rt_set_threads)(flowc_ctx *ctx, int threads) {
  if (!ctx) return FLOWC_ERR_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  int status = set_threads(ctx, threads);
  pthread_mutex_unlock(&ctx->lock);
  return status;
}

static int set_arena(flowc_ctx *ctx, void *arena, size_t bytes) {
  int bad = unusable(ctx);
  if (bad) return bad;
  const flowc_model *m = ctx->model;
  if (arena && ((uintptr_t)arena % FLOWC_ALIGN || bytes < m->arena_bytes))
    return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: the arena must be %d-byte aligned and hold %zu "
                "bytes (got %zu bytes at %p)", m->name, FLOWC_ALIGN, m->arena_bytes, bytes, arena);
  if (ctx->arena_owned) free(ctx->arena);
  ctx->arena = arena ? arena : alloc_aligned(m->arena_bytes);
  ctx->arena_owned = arena == NULL;
  if (!ctx->arena) return fail(ctx, FLOWC_ERR_NOMEM, "%s: out of memory", m->name);
  return FLOWC_OK;
}

int FLOWC_RT(rt_set_arena)(flowc_ctx *ctx, void *arena, size_t bytes) {
  if (!ctx) return FLOWC_ERR_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  int status = set_arena(ctx, arena, bytes);
  pthread_mutex_unlock(&ctx->lock);
  return status;
}

int FLOWC_RT(rt_device_ms)(flowc_ctx *ctx, double *ms) {
  if (!ctx || !ms) return FLOWC_ERR_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  int status = ctx->gpu ? FLOWC_RT(cuda_device_ms)(ctx, ms)
                        : fail(ctx, FLOWC_ERR_ARGUMENT, "%s: no device time: the model runs "
                               "on the CPU only", ctx->model->name);
  pthread_mutex_unlock(&ctx->lock);
  return status;
}

static int run(flowc_ctx *ctx) {
  int bad = unusable(ctx);
  if (bad) return bad;
  const flowc_model *m = ctx->model;
  if (m->gpu) {
    int gs = FLOWC_RT(cuda_run)(ctx);
    for (int i = 0; gs == FLOWC_OK && i < m->num_outputs; i++)
      if (ctx->out_copy[i]) memcpy(ctx->out_copy[i], ctx->outputs[i], m->outputs[i].bytes);
    return gs;
  }
  if (m->num_dims) {
    int resolved = resolve_dims(ctx);
    if (resolved) return resolved;
  }
  FLOWC_RT(pool_enter)(ctx->pool);
  int status = m->num_partitions ? FLOWC_RT(rt_run_partitions)(ctx) : FLOWC_OK;
  if (status == FLOWC_OK)
    m->entry(ctx->inputs, ctx->outputs, ctx->arena, ctx->weights, ctx->thread_scratch,
             ctx->variables, m->num_dims ? ctx->dim_values : NULL);
  FLOWC_RT(pool_leave)();
  if (status == FLOWC_OK && m->num_partitions) status = FLOWC_RT(rt_partitions_finish)(ctx);
  if (status) return status;
  for (int i = 0; i < m->num_outputs; i++)
    if (ctx->out_copy[i]) memcpy(ctx->out_copy[i], ctx->outputs[i], output_bytes(ctx, i));
  return FLOWC_OK;
}

int FLOWC_RT(rt_run)(flowc_ctx *ctx) {
  if (!ctx) return FLOWC_ERR_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  int status = run(ctx);
  pthread_mutex_unlock(&ctx->lock);
  return status;
}
