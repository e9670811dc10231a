/* checkpoint.c: the variables block (created from the initial values, reached by name) and
 * checkpoints: safetensors files (an 8-byte little-endian header length, a JSON header
 * {name: {"dtype", "shape", "data_offsets"}, "__metadata__": {string: string}} padded with
 * spaces to a multiple of 8 bytes, then each tensor's raw little-endian bytes, one after
 * another). See flowc_rt.h. Failures return a status with a one-line message in ctx->error
 * and change no variable. */
#define _GNU_SOURCE
#include "flowc_rt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define fail FLOWC_RT(rt_fail)
#define text flowc_text
#define reader flowc_json
#define put FLOWC_RT(json_put)
#define puts_ FLOWC_RT(json_puts)
#define put_string FLOWC_RT(json_put_string)
#define ws FLOWC_RT(json_ws)
#define syntax FLOWC_RT(json_syntax)
#define eat FLOWC_RT(json_eat)
#define string FLOWC_RT(json_string)
#define integers FLOWC_RT(json_integers)
#define MAX_NAME FLOWC_JSON_MAX_STRING
#define MAX_HEADER ((uint64_t)100 << 20) /* safetensors' own limit on the JSON header */

/* safetensors' dtype names in abi.py DTYPES order; NULL: it has none for that dtype. */
static const char *const ST_DTYPES[] = {
    "BOOL", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64", "F16", "BF16", "F32", "F64",
    "F8_E4M3", NULL, "F8_E5M2", NULL, NULL, NULL, NULL, NULL, NULL, NULL};
#define NUM_ST ((int)(sizeof ST_DTYPES / sizeof ST_DTYPES[0]))

static const char *st_dtype(int dtype) {
  return dtype >= 0 && dtype < NUM_ST ? ST_DTYPES[dtype] : NULL;
}

int FLOWC_RT(rt_init_variables)(flowc_ctx *ctx) {
  const flowc_model *m = ctx->model;
  if (!m->variables_bytes) return FLOWC_OK;
  void *p = NULL;
  if (posix_memalign(&p, FLOWC_ALIGN, m->variables_bytes) != 0)
    return fail(ctx, FLOWC_ERR_NOMEM, "%s: out of memory allocating %zu bytes of variables",
                m->name, m->variables_bytes);
  ctx->variables = p;
  memset(p, 0, m->variables_bytes);
  for (int i = 0; i < m->num_variables; i++)
    if (m->variable_inits[i] >= 0)
      memcpy(ctx->variables + m->variable_offsets[i], ctx->weights + m->variable_inits[i],
             m->variables[i].bytes);
  return FLOWC_OK;
}

static int find_variable(const flowc_model *m, const char *name) {
  for (int i = 0; i < m->num_variables; i++)
    if (strcmp(m->variables[i].name, name) == 0) return i;
  return -1;
}

void *FLOWC_RT(rt_variable)(flowc_ctx *ctx, const char *name) {
  if (!ctx) return NULL;
  pthread_mutex_lock(&ctx->lock);
  void *p = NULL;
  if (!FLOWC_RT(rt_unusable)(ctx)) {
    int i = name ? find_variable(ctx->model, name) : -1;
    if (i < 0)
      fail(ctx, FLOWC_ERR_ARGUMENT, "%s: no variable named '%.200s'", ctx->model->name,
           name ? name : "(null)");
    else
      p = ctx->variables + ctx->model->variable_offsets[i];
  }
  pthread_mutex_unlock(&ctx->lock);
  return p;
}

/* ---- saving ---------------------------------------------------------------------------- */
static void put_meta(text *t, const char *key, const char *value, int *first) {
  if (!*first) puts_(t, ",");
  *first = 0;
  put_string(t, key);
  puts_(t, ":");
  put_string(t, value);
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static int build_header(flowc_ctx *ctx, text *t) {
  const flowc_model *m = ctx->model;
  int first = 1;
  puts_(t, "{\"__metadata__\":{");
  put_meta(t, "format", "flowc", &first);
  put_meta(t, "flowc.model", m->name, &first);
  put_meta(t, "flowc.version", m->flowc_version, &first);
  put_meta(t, "flowc.graph_hash", m->graph_hash, &first);
  for (const char *const *kv = m->checkpoint_metadata; kv && kv[0] && kv[1]; kv += 2)
    put_meta(t, kv[0], kv[1], &first);
  puts_(t, "}");
  size_t offset = 0;
  for (int i = 0; i < m->num_variables; i++) {
    const flowc_tensor_desc *d = &m->variables[i];
    const char *dt = st_dtype(d->dtype);
    if (!dt)
      return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: variable '%.200s' has dtype %s, which a "
                  "safetensors checkpoint cannot hold", m->name, d->name,
                  FLOWC_RT(rt_dtype_name)(d->dtype));
    char buf[64];
    puts_(t, ",");
    put_string(t, d->name);
    puts_(t, ":{\"dtype\":\"");
    puts_(t, dt);
    puts_(t, "\",\"shape\":[");
    for (int k = 0; k < d->rank; k++) {
      snprintf(buf, sizeof buf, k ? ",%lld" : "%lld", (long long)d->shape[k]);
      puts_(t, buf);
    }
    snprintf(buf, sizeof buf, "],\"data_offsets\":[%zu,%zu]}", offset, offset + d->bytes);
    puts_(t, buf);
    offset += d->bytes;
  }
  puts_(t, "}");
  while (!t->failed && t->used % 8) puts_(t, " ");
  return t->failed ? fail(ctx, FLOWC_ERR_NOMEM, "%s: out of memory writing a checkpoint header",
                          m->name)
                   : FLOWC_OK;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int save(flowc_ctx *ctx, const char *path) {
  const flowc_model *m = ctx->model;
  if (!path) return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: save_checkpoint: path is NULL", m->name);
  text t = {0};
  int status = build_header(ctx, &t);
  if (status) {
    free(t.data);
    return status;
  }
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", path) >= (int)sizeof tmp) {
    free(t.data);
    return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: checkpoint path too long", m->name);
  }
  int fd = mkstemp(tmp);
  if (fd < 0) {
    free(t.data);
    return fail(ctx, FLOWC_ERR_WEIGHTS, "%s: cannot write checkpoint '%.1000s': %s", m->name,
                path, strerror(errno));
  }
  unsigned char len[8];
  for (int k = 0; k < 8; k++) len[k] = (unsigned char)((uint64_t)t.used >> (8 * k));
  int bad = write_all(fd, (const char *)len, 8) || write_all(fd, t.data, t.used);
  for (int i = 0; !bad && i < m->num_variables; i++)
    bad = write_all(fd, ctx->variables + m->variable_offsets[i], m->variables[i].bytes);
  int err = bad ? errno : 0;
  if (!bad && fsync(fd) != 0) bad = 1, err = errno;
  if (close(fd) != 0 && !bad) bad = 1, err = errno;
  if (!bad && rename(tmp, path) != 0) bad = 1, err = errno;
  free(t.data);
  if (bad) {
    unlink(tmp);
    return fail(ctx, FLOWC_ERR_WEIGHTS, "%s: cannot write checkpoint '%.1000s': %s", m->name,
                path, strerror(err ? err : EIO));
  }
  return FLOWC_OK;
}

int FLOWC_RT(rt_save_checkpoint)(flowc_ctx *ctx, const char *path) {
  if (!ctx) return FLOWC_ERR_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  int status = FLOWC_RT(rt_unusable)(ctx);
  if (!status) status = save(ctx, path);
  pthread_mutex_unlock(&ctx->lock);
  return status;
}

/* ---- loading ----------------------------------------------------------------------------- */
typedef struct {
  flowc_ctx *ctx;
  const char *path;
  int fd;
  uint64_t data_at, data_bytes; /* where the tensors' bytes start, and how many there are */
  char model[MAX_NAME + 1];     /* the checkpoint's model name, from its metadata */
  char *staged;
  unsigned char *seen;
} loading;

static int mismatch(loading *l, const char *fmt, const char *name, const char *detail) {
  const flowc_model *m = l->ctx->model;
  char of[MAX_NAME + 32] = "";
  if (l->model[0] && strcmp(l->model, m->name) != 0)
    snprintf(of, sizeof of, " (of model '%.200s')", l->model);
  char what[768];
  snprintf(what, sizeof what, fmt, name, detail);
  return fail(l->ctx, FLOWC_ERR_ARGUMENT, "%s: checkpoint '%.1000s'%s does not fit: %s",
              m->name, l->path, of, what);
}

static int metadata(loading *l, reader *r) {
  char key[MAX_NAME + 1], value[MAX_NAME + 1];
  if (!eat(r, '{')) return syntax(r, "__metadata__ must be an object");
  if (eat(r, '}')) return 1;
  do {
    if (!string(r, key) || !eat(r, ':') || !string(r, value))
      return syntax(r, "__metadata__ must map strings to strings");
    if (strcmp(key, "flowc.model") == 0) memcpy(l->model, value, sizeof l->model);
  } while (eat(r, ','));
  return eat(r, '}') ? 1 : syntax(r, "expected '}'");
}

static void format_dims(char *buf, size_t size, const uint64_t *dims, int rank) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (int k = 0; k < rank && used < size; k++)
    used += (size_t)snprintf(buf + used, size - used, k ? ",%llu" : "%llu",
                             (unsigned long long)dims[k]);
  if (used < size) snprintf(buf + used, size - used, "]");
}

/* One tensor entry: checked against the variable of its name, its bytes read into the
 * staging block. Returns 1, 0 on a syntax error, -1 on a mismatch (message set). */
static int tensor(loading *l, reader *r, const char *name) {
  const flowc_model *m = l->ctx->model;
  char key[MAX_NAME + 1], dtype[MAX_NAME + 1] = "";
  uint64_t shape[64], offsets[2];
  int rank = -1, noffsets = -1;
  if (!eat(r, '{')) return syntax(r, "a tensor entry must be an object");
  do {
    if (!string(r, key) || !eat(r, ':')) return syntax(r, "expected a key and ':'");
    if (strcmp(key, "dtype") == 0) {
      if (!string(r, dtype)) return 0;
    } else if (strcmp(key, "shape") == 0) {
      if (!integers(r, shape, 64, &rank)) return 0;
    } else if (strcmp(key, "data_offsets") == 0) {
      if (!integers(r, offsets, 2, &noffsets)) return 0;
    } else {
      return syntax(r, "an unknown key in a tensor entry");
    }
  } while (eat(r, ','));
  if (!eat(r, '}')) return syntax(r, "expected '}'");
  if (!dtype[0] || rank < 0 || noffsets != 2)
    return syntax(r, "a tensor entry lacks dtype, shape or data_offsets");
  int i = find_variable(m, name);
  if (i < 0) return mismatch(l, "it holds '%.200s', which is no variable of this model%s",
                             name, ""), -1;
  const flowc_tensor_desc *d = &m->variables[i];
  const char *want = st_dtype(d->dtype);
  if (!want || strcmp(dtype, want) != 0) {
    char detail[128];
    snprintf(detail, sizeof detail, "%.40s, expected %s", dtype, want ? want : "?");
    return mismatch(l, "variable '%.200s' has dtype %s", name, detail), -1;
  }
  int same = rank == d->rank;
  for (int k = 0; same && k < rank; k++) same = shape[k] == (uint64_t)d->shape[k];
  if (!same) {
    uint64_t dims[64];
    char got[256], expected[256], detail[600];
    for (int k = 0; k < d->rank && k < 64; k++) dims[k] = (uint64_t)d->shape[k];
    format_dims(got, sizeof got, shape, rank);
    format_dims(expected, sizeof expected, dims, d->rank);
    snprintf(detail, sizeof detail, "%s, expected %s", got, expected);
    return mismatch(l, "variable '%.200s' has shape %s", name, detail), -1;
  }
  if (offsets[1] < offsets[0] || offsets[1] - offsets[0] != d->bytes ||
      offsets[1] > l->data_bytes) {
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%zu", d->bytes);
    return mismatch(l, "variable '%.200s': its data_offsets do not hold its %s bytes within "
                    "the file (truncated?)", name, bytes), -1;
  }
  if (l->seen[i]) return mismatch(l, "variable '%.200s' is in it twice%s", name, ""), -1;
  l->seen[i] = 1;
  char *dst = l->staged + m->variable_offsets[i];
  size_t done = 0;
  while (done < d->bytes) {
    ssize_t got = pread(l->fd, dst + done, d->bytes - done,
                        (off_t)(l->data_at + offsets[0] + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      return mismatch(l, "variable '%.200s': its bytes cannot be read%s", name, ""), -1;
    done += (size_t)got;
  }
  return 1;
}

/* The header `json` parsed and every tensor staged: 0, or a status (message set). */
static int parse(loading *l, const char *json, size_t n) {
  reader r = {json, json + n, NULL};
  char name[MAX_NAME + 1];
  int status = 0;
  if (!eat(&r, '{')) syntax(&r, "the header is not a JSON object");
  else if (!eat(&r, '}')) {
    do {
      if (!string(&r, name) || !eat(&r, ':')) {
        syntax(&r, "expected a name and ':'");
        break;
      }
      int ok = strcmp(name, "__metadata__") == 0 ? metadata(l, &r) : tensor(l, &r, name);
      if (ok < 0) return FLOWC_ERR_ARGUMENT;
      if (!ok) break;
    } while (eat(&r, ','));
    if (!r.error && !eat(&r, '}')) syntax(&r, "expected '}'");
  }
  ws(&r);
  if (!r.error && r.p != r.end) syntax(&r, "bytes after the header object");
  if (r.error)
    return fail(l->ctx, FLOWC_ERR_ARGUMENT, "%s: checkpoint '%.1000s' is not a safetensors "
                "file: its header is not valid (%s at byte %zu)", l->ctx->model->name, l->path,
                r.error, (size_t)(r.p - json) + 8);
  const flowc_model *m = l->ctx->model;
  for (int i = 0; i < m->num_variables && !status; i++)
    if (!l->seen[i]) status = mismatch(l, "it lacks variable '%.200s'%s", m->variables[i].name, "");
  return status;
}

static int load(flowc_ctx *ctx, const char *path) {
  const flowc_model *m = ctx->model;
  if (!path) return fail(ctx, FLOWC_ERR_ARGUMENT, "%s: load_checkpoint: path is NULL", m->name);
  loading l = {ctx, path, -1, 0, 0, "", NULL, NULL};
  l.fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (l.fd < 0)
    return fail(ctx, FLOWC_ERR_WEIGHTS, "%s: cannot open checkpoint '%.1000s': %s", m->name,
                path, strerror(errno));
  struct stat st;
  unsigned char len[8];
  uint64_t n = 0;
  int status = FLOWC_OK;
  char *json = NULL;
  if (fstat(l.fd, &st) != 0 || !S_ISREG(st.st_mode))
    status = fail(ctx, FLOWC_ERR_WEIGHTS, "%s: checkpoint '%.1000s' is not a regular file",
                  m->name, path);
  else if (st.st_size < 8 || pread(l.fd, len, 8, 0) != 8)
    status = fail(ctx, FLOWC_ERR_ARGUMENT, "%s: checkpoint '%.1000s' is not a safetensors "
                  "file: %lld bytes, too short for a header", m->name, path,
                  (long long)st.st_size);
  if (!status) {
    for (int k = 7; k >= 0; k--) n = n << 8 | len[k];
    if (n > MAX_HEADER || n > (uint64_t)st.st_size - 8)
      status = fail(ctx, FLOWC_ERR_ARGUMENT, "%s: checkpoint '%.1000s' is not a safetensors "
                    "file: its header length %llu does not fit its %lld bytes", m->name, path,
                    (unsigned long long)n, (long long)st.st_size);
  }
  if (!status) {
    l.data_at = 8 + n;
    l.data_bytes = (uint64_t)st.st_size - 8 - n;
    json = malloc(n ? n : 1);
    void *staged = NULL;
    l.seen = calloc((size_t)m->num_variables + 1, 1);
    if (posix_memalign(&staged, FLOWC_ALIGN, m->variables_bytes ? m->variables_bytes : 1) == 0)
      l.staged = staged;
    if (!json || !l.seen || !l.staged)
      status = fail(ctx, FLOWC_ERR_NOMEM, "%s: out of memory loading checkpoint '%.1000s'",
                    m->name, path);
    else if (pread(l.fd, json, n, 8) != (ssize_t)n)
      status = fail(ctx, FLOWC_ERR_WEIGHTS, "%s: cannot read checkpoint '%.1000s'", m->name,
                    path);
    else
      status = parse(&l, json, n);
  }
  if (!status && m->variables_bytes) /* commit: every check passed */
    memcpy(ctx->variables, l.staged, m->variables_bytes);
  close(l.fd);
  free(json);
  free(l.staged);
  free(l.seen);
  return status;
}

int FLOWC_RT(rt_load_checkpoint)(flowc_ctx *ctx, const char *path) {
  if (!ctx) return FLOWC_ERR_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  int status = FLOWC_RT(rt_unusable)(ctx);
  if (!status) status = load(ctx, path);
  pthread_mutex_unlock(&ctx->lock);
  return status;
}
