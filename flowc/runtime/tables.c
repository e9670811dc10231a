/* tables.c: what a context checks and maps before it runs: the model tables' sizes
 * (re-checked against FLOWC_MAX_BYTES before anything is allocated from them) and the
 * weights side file (a regular file of the right size and header, mapped read-only).
 * Failures return a non-zero status with a message in ctx->error. See flowc_rt.h. */
#define _GNU_SOURCE
#include "flowc_rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define fail FLOWC_RT(rt_fail)

static const char *const DTYPE_NAMES[] = {
    "bool",       "i8",     "i16",        "i32",       "i64",      "u8", "u16", "u32",
    "u64",        "f16",    "bf16",       "f32",       "f64",      "f8E4M3FN", "f8E4M3FNUZ",
    "f8E5M2",     "f8E5M2FNUZ", "f8E8M0FNU", "f4E2M1FN", "i4",       "u4", "i2",  "u2"};
#define NUM_DTYPES ((int)(sizeof DTYPE_NAMES / sizeof DTYPE_NAMES[0]))
/* Bytes of one element, in DTYPE_NAMES' order (abi.py DTYPES; narrow types take a byte). */
static const unsigned char DTYPE_BYTES[NUM_DTYPES] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8,
                                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

const char *FLOWC_RT(rt_dtype_name)(int dtype) {
  return dtype >= 0 && dtype < NUM_DTYPES ? DTYPE_NAMES[dtype] : "unknown";
}

/* The path of the weights side file: given, or next to the library holding the model. */
static int weights_path(flowc_ctx *ctx, const char *given, char *path, size_t size) {
  if (given) {
    snprintf(path, size, "%s", given);
    return FLOWC_OK;
  }
  Dl_info info;
  if (!dladdr((const void *)ctx->model, &info) || !info.dli_fname)
    return fail(ctx, FLOWC_ERR_WEIGHTS, "%s: cannot find the library's directory to look for "
                "weights file '%s'; pass its path", ctx->model->name, ctx->model->weights_file);
  const char *slash = strrchr(info.dli_fname, '/');
  int dir = slash ? (int)(slash - info.dli_fname) : 1;
  snprintf(path, size, "%.*s/%s", dir, slash ? info.dli_fname : ".", ctx->model->weights_file);
  return FLOWC_OK;
}

int FLOWC_RT(rt_map_weights)(flowc_ctx *ctx, const char *given) {
  const flowc_model *m = ctx->model;
  char path[4096];
  int status = weights_path(ctx, given, path, sizeof path);
  if (status) return status;
  /* O_NONBLOCK: a FIFO or device in its place is refused below instead of blocking here */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return fail(ctx, FLOWC_ERR_WEIGHTS, "%s: cannot open weights file '%s': %s", m->name, path,
                strerror(errno));
  struct stat st;
  size_t want = FLOWC_WEIGHTS_HEADER + m->weights_bytes;
  int err = fstat(fd, &st) != 0 ? errno : 0;
  if (err || !S_ISREG(st.st_mode)) {
    close(fd);
    return fail(ctx, FLOWC_ERR_WEIGHTS, "%s: weights file '%s' is not a regular file%s%s",
                m->name, path, err ? ": " : "", err ? strerror(err) : "");
  }
  if ((size_t)st.st_size != want) {
    close(fd);
    return fail(ctx, FLOWC_ERR_WEIGHTS, "%s: weights file '%s' has %lld bytes, expected %zu",
                m->name, path, (long long)st.st_size, want);
  }
  void *map = mmap(NULL, want, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED)
    return fail(ctx, FLOWC_ERR_WEIGHTS, "%s: cannot map weights file '%s': %s", m->name, path,
                strerror(errno));
  ctx->map = map;
  ctx->map_bytes = want;
  const char *head = map;
  uint32_t abi;
  memcpy(&abi, head + 8, sizeof abi);
  if (memcmp(head, "FLOWCWTS", 8) != 0 || abi != (uint32_t)m->abi_version ||
      memcmp(head + 16, m->graph_hash, 16) != 0)
    return fail(ctx, FLOWC_ERR_WEIGHTS, "%s: weights file '%s' belongs to another model or "
                "flowc version (expected graph %.16s, ABI %d)", m->name, path, m->graph_hash,
                m->abi_version);
  ctx->weights = head + FLOWC_WEIGHTS_HEADER;
  return FLOWC_OK;
}

/* Whether descriptor d states the byte size its dtype and shape make, within
 * FLOWC_MAX_BYTES, computed without overflow: `span` (size-0 dims counted as 1, as the
 * compiler bounds it) never passes the limit, and the byte count never passes `span`. */
static int check_desc(flowc_ctx *ctx, const char *what, const flowc_tensor_desc *d) {
  const char *model = ctx->model->name;
  if (d->dtype < 0 || d->dtype >= NUM_DTYPES || d->rank < 0 || (d->rank > 0 && !d->shape))
    return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: %s '%s' has a malformed descriptor (dtype %d, "
                "rank %d)", model, what, d->name, d->dtype, d->rank);
  uint64_t span = DTYPE_BYTES[d->dtype], bytes = span;
  for (int k = 0; k < d->rank; k++) {
    int64_t dim = d->shape[k];
    if (dim < 0)
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: %s '%s': dim %d is %lld; a dim must be >= 0",
                  model, what, d->name, k, (long long)dim);
    if (dim > 1 && span > FLOWC_MAX_BYTES / (uint64_t)dim)
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: %s '%s': dim %d is %lld, so the tensor would "
                  "take more than %llu bytes (flowc's limit)", model, what, d->name, k,
                  (long long)dim, (unsigned long long)FLOWC_MAX_BYTES);
    if (dim > 1) span *= (uint64_t)dim;
    bytes *= (uint64_t)dim;
  }
  if (bytes != (uint64_t)d->bytes)
    return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: %s '%s' states %zu bytes, its dtype %s and "
                "shape make %llu", model, what, d->name, d->bytes,
                FLOWC_RT(rt_dtype_name)(d->dtype), (unsigned long long)bytes);
  return FLOWC_OK;
}

/* The model tables' sizes, re-checked before anything is allocated from them: every
 * input, output and variable descriptor (check_desc, every entry's too), the inputs' and
 * outputs' aligned total, each entry's arena and labels input, each variable inside the variables block (and its initial value inside the
 * weights), the arena (and each partition's region inside it), the weights and the
 * variables block, each within FLOWC_MAX_BYTES. */
int FLOWC_RT(rt_check_sizes)(flowc_ctx *ctx) {
  const flowc_model *m = ctx->model;
  uint64_t io = 0;
  for (int i = 0; i < m->num_inputs + m->num_outputs; i++) {
    int in = i < m->num_inputs;
    const flowc_tensor_desc *d = in ? &m->inputs[i] : &m->outputs[i - m->num_inputs];
    int status = check_desc(ctx, in ? "input" : "output", d);
    if (status) return status;
    io += flowc_round_up(d->bytes);
    if (io > FLOWC_MAX_BYTES)
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: the inputs and outputs take more than %llu "
                  "bytes together (flowc's limit)", m->name, (unsigned long long)FLOWC_MAX_BYTES);
  }
  if (m->num_entries < 0 || (m->num_entries && !m->entries))
    return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: malformed entry table (%d entries)", m->name,
                m->num_entries);
  for (int k = 1; k < m->num_entries; k++) {
    const flowc_entry *e = &m->entries[k];
    for (int i = 0; i < e->num_inputs + e->num_outputs; i++) {
      int in = i < e->num_inputs;
      int status = check_desc(ctx, in ? "input" : "output",
                              in ? &e->inputs[i] : &e->outputs[i - e->num_inputs]);
      if (status) return status;
      io += flowc_round_up(in ? e->inputs[i].bytes : e->outputs[i - e->num_inputs].bytes);
      if (io > FLOWC_MAX_BYTES)
        return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: the inputs and outputs take more than "
                    "%llu bytes together (flowc's limit)", m->name,
                    (unsigned long long)FLOWC_MAX_BYTES);
    }
  }
  for (int k = 0; k < m->num_entries; k++) {
    const flowc_entry *e = &m->entries[k];
    if (e->arena_bytes > m->arena_bytes || e->labels >= e->num_inputs ||
        (e->labels >= 0 && e->inputs[e->labels].dtype != 4 /* i64 */))
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: entry '%s' has a malformed descriptor (arena "
                  "%zu bytes of %zu, labels input %d)", m->name, e->name, e->arena_bytes,
                  m->arena_bytes, e->labels);
  }
  for (int i = 0; i < m->num_variables; i++) {
    int status = check_desc(ctx, "variable", &m->variables[i]);
    if (status) return status;
    if (m->variable_offsets[i] % FLOWC_ALIGN || m->variable_offsets[i] > m->variables_bytes ||
        m->variables[i].bytes > m->variables_bytes - m->variable_offsets[i])
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: variable '%s' (%zu bytes at offset %zu) lies "
                  "outside the variables block of %zu bytes", m->name, m->variables[i].name,
                  m->variables[i].bytes, m->variable_offsets[i], m->variables_bytes);
    if (m->variable_inits[i] >= 0 && ((uint64_t)m->variable_inits[i] > m->weights_bytes ||
        m->variables[i].bytes > m->weights_bytes - (size_t)m->variable_inits[i]))
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: variable '%s': its initial value lies outside "
                  "the weights", m->name, m->variables[i].name);
  }
  const char *big = (uint64_t)m->arena_bytes > FLOWC_MAX_BYTES ? "arena" :
                    (uint64_t)m->weights_bytes > FLOWC_MAX_BYTES ? "weights" :
                    (uint64_t)m->thread_scratch_bytes > FLOWC_MAX_BYTES ? "thread_scratch" :
                    (uint64_t)m->variables_bytes > FLOWC_MAX_BYTES ? "variables" : NULL;
  if (big)
    return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: %s_bytes is %zu, more than %llu (flowc's "
                "limit)", m->name, big, big[0] == 'a' ? m->arena_bytes :
                big[0] == 'w' ? m->weights_bytes : big[0] == 't' ? m->thread_scratch_bytes :
                m->variables_bytes,
                (unsigned long long)FLOWC_MAX_BYTES);
  for (int i = 0; i < m->num_partitions; i++) {
    const flowc_partition *p = &m->partitions[i];
    if (p->arena_offset > m->arena_bytes || p->arena_bytes > m->arena_bytes - p->arena_offset)
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: partition %d's arena region (%zu bytes at "
                  "offset %zu) lies outside the arena of %zu bytes", m->name, i, p->arena_bytes,
                  p->arena_offset, m->arena_bytes);
  }
  return FLOWC_OK;
}
