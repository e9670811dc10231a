/* robust_asan_driver.c: drives one artifact (model name "m", input x f32, output y f32)
 * through its C API under AddressSanitizer/UndefinedBehaviorSanitizer
 * (tests/robust/test_robust_sanitizers.py builds and runs it).
 *
 * Exercises: many create/run/destroy cycles; set_threads 1 and 2; a caller-provided arena;
 * failure paths (bad index, wrong dtype code, wrong rank, wrong dims, NULL data, NULL ctx
 * error, bad thread count, too-small arena), each needing a non-empty message; API misuse
 * (NULL contexts and pointers, absurd ranks, dtype codes and indices, misaligned caller
 * buffers, through set_input/set_output and through run_with, which must give the aligned
 * result exactly: `misuse`); and four
 * threads each running its own context, whose results must equal the single-thread ones.
 * Prints "ok RUNS" on success; any sanitizer report makes the process fail. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m.h"

#define RUNS 20
#define THREADS 4

static float *reference;

static int check(int status, m_ctx *ctx, const char *what, int want_fail) {
  if ((status != FLOWC_OK) != want_fail) {
    fprintf(stderr, "%s: status %d (%s)\n", what, status, ctx ? m_error(ctx) : "-");
    return 1;
  }
  if (want_fail && (!m_error(ctx) || !m_error(ctx)[0])) {
    fprintf(stderr, "%s: failed with an empty message\n", what);
    return 1;
  }
  return 0;
}

static void fill(float *x, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) x[i] = (float)((int)((i * 7 + seed) % 13) - 6) / 4.0f;
}

static void *worker(void *arg) {
  (void)arg;
  m_ctx *ctx = NULL;
  if (m_create(&ctx) != FLOWC_OK || m_set_threads(ctx, 1) != FLOWC_OK) return (void *)1;
  size_t n = m_input_bytes(0) / sizeof(float), k = m_output_bytes(0) / sizeof(float);
  for (int r = 0; r < RUNS; r++) {
    fill(m_input_x(ctx), n, 0);
    if (m_run(ctx) != FLOWC_OK || memcmp(m_output_y(ctx), reference, k * sizeof(float)))
      return (void *)1;
  }
  m_destroy(ctx);
  return NULL;
}

/* API misuse: NULL contexts and pointers, absurd ranks, dtype codes and indices,
 * misaligned caller buffers. Each call must fail with its status (and a message where a
 * context exists) or, for misaligned buffers, give the aligned run's exact result. */
static int misuse(const float *ref) {
  int bad = 0;
  size_t n = m_input_bytes(0) / sizeof(float), k = m_output_bytes(0) / sizeof(float);
  int rank = m_input_rank(0), dt = m_input_dtype(0);
  const int64_t *shape = m_input_shape(0);
  int64_t two[2] = {1, 1};
  bad |= m_create(NULL) != FLOWC_ERR_ARGUMENT;
  bad |= m_run(NULL) != FLOWC_ERR_ARGUMENT;
  bad |= m_set_threads(NULL, 1) != FLOWC_ERR_ARGUMENT;
  bad |= m_set_arena(NULL, NULL, 0) != FLOWC_ERR_ARGUMENT;
  bad |= m_set_input(NULL, 0, two, dt, rank, shape) != FLOWC_ERR_ARGUMENT;
  bad |= m_set_output(NULL, 0, two, dt, rank, shape) != FLOWC_ERR_ARGUMENT;
  bad |= m_input(NULL, 0) != NULL || m_output(NULL, 0) != NULL || m_input_x(NULL) != NULL;
  bad |= !m_error(NULL) || !m_error(NULL)[0];
  m_destroy(NULL);
  if (bad) fprintf(stderr, "misuse: a NULL context was not refused\n");
  m_ctx *ctx = NULL;
  if (m_create(&ctx) != FLOWC_OK) return 1;
  char *raw_x = malloc(n * sizeof(float) + 64), *raw_y = malloc(k * sizeof(float) + 64);
  float *x = (float *)(raw_x + 4);
  bad |= check(m_set_input(ctx, 0, x, dt, -1, shape), ctx, "rank -1", 1);
  bad |= check(m_set_input(ctx, 0, x, dt, 1 << 30, two), ctx, "rank 2^30", 1);
  bad |= check(m_set_input(ctx, 0, x, dt, rank, NULL), ctx, "NULL shape", 1);
  bad |= check(m_set_input(ctx, 0, x, -1, rank, shape), ctx, "dtype -1", 1);
  bad |= check(m_set_input(ctx, 0, x, 99, rank, shape), ctx, "dtype 99", 1);
  bad |= check(m_set_input(ctx, 0x7fffffff, x, dt, rank, shape), ctx, "index INT_MAX", 1);
  bad |= check(m_set_output(ctx, -2147483647 - 1, x, dt, rank, shape), ctx, "INT_MIN", 1);
  bad |= check(m_set_output(ctx, 0, NULL, m_output_dtype(0), m_output_rank(0),
                            m_output_shape(0)), ctx, "output NULL", 1);
  bad |= m_input(ctx, -1) != NULL || m_input(ctx, 1) != NULL || m_output(ctx, 9) != NULL;
  char *arena = malloc(m_arena_bytes() + 128);
  char *aligned_arena = arena + (64 - (uintptr_t)arena % 64);
  if (m_arena_bytes() > 0)
    bad |= check(m_set_arena(ctx, aligned_arena + 8, m_arena_bytes()), ctx, "arena +8", 1);
  bad |= check(m_set_arena(ctx, aligned_arena, m_arena_bytes()), ctx, "own arena", 0);
  /* misaligned input and output (4 and 12 bytes past 64-byte boundaries): copied */
  for (int shift = 4; shift <= 12; shift += 8) {
    float *xs = (float *)(raw_x + shift), *ys = (float *)(raw_y + shift);
    fill(xs, n, 0);
    bad |= check(m_set_input(ctx, 0, xs, dt, rank, shape), ctx, "misaligned input", 0);
    bad |= check(m_set_output(ctx, 0, ys, m_output_dtype(0), m_output_rank(0),
                              m_output_shape(0)), ctx, "misaligned output", 0);
    bad |= check(m_run(ctx), ctx, "misaligned run", 0);
    if (memcmp(ys, ref, k * sizeof(float))) {
      fprintf(stderr, "misaligned buffers (+%d): result differs\n", shift);
      bad = 1;
    }
    /* the same buffers in one run_with call */
    memset(ys, 0, k * sizeof(float));
    const void *ins[1] = {xs};
    void *outs[1] = {ys};
    bad |= check(m_run_with(ctx, ins, outs), ctx, "misaligned run_with", 0);
    if (memcmp(ys, ref, k * sizeof(float))) {
      fprintf(stderr, "misaligned run_with (+%d): result differs\n", shift);
      bad = 1;
    }
  }
  const void *no_inputs[1] = {NULL};
  void *outs_y[1] = {raw_y};
  bad |= check(m_run_with(ctx, no_inputs, outs_y), ctx, "run_with NULL input", 1);
  bad |= check(m_run_with(ctx, NULL, NULL), ctx, "run_with NULL tables", 1);
  bad |= m_run_with(NULL, no_inputs, outs_y) != FLOWC_ERR_ARGUMENT;
  bad |= check(m_set_arena(ctx, NULL, 0), ctx, "arena back to owned", 0);
  bad |= check(m_run(ctx), ctx, "run after misuse", 0);
  m_destroy(ctx);
  free(arena);
  free(raw_x);
  free(raw_y);
  return bad;
}

/* Random API call sequences (a fixed xorshift seed, FUZZ_CALLS calls): set_input,
 * set_output, run, set_threads, set_arena, input/output, each with arguments drawn from
 * pools of valid and invalid values. Every failure must carry a message; every successful
 * run must leave the reference result where the output is currently bound (all input
 * candidates hold the same data, so whichever is bound gives the reference). */
#define FUZZ_CALLS 3000
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static unsigned pick(unsigned n) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (unsigned)(rng_state % n);
}

static int fuzz_calls(const float *ref, int *runs) {
  size_t n = m_input_bytes(0) / sizeof(float), k = m_output_bytes(0) / sizeof(float);
  int rank = m_input_rank(0), dt = m_input_dtype(0), bad = 0;
  int orank = m_output_rank(0), odt = m_output_dtype(0);
  const int64_t *shape = m_input_shape(0), *oshape = m_output_shape(0);
  int64_t wrong[16] = {0};
  memcpy(wrong, shape, (size_t)rank * sizeof(int64_t));
  wrong[0] += 1;
  /* one aligned and one misaligned buffer each, not overlapping */
  char *raw_x = malloc(2 * n * 4 + 256), *raw_y = malloc(2 * k * 4 + 256);
  char *ax = raw_x + (64 - (uintptr_t)raw_x % 64), *ay = raw_y + (64 - (uintptr_t)raw_y % 64);
  float *xs[2] = {(float *)ax, (float *)(ax + n * 4 + 68)};
  float *ys[2] = {(float *)ay, (float *)(ay + k * 4 + 68)};
  size_t arena_bytes = m_arena_bytes();
  char *arena_raw = malloc(arena_bytes + 128);
  char *arena = arena_raw + (64 - (uintptr_t)arena_raw % 64);
  m_ctx *ctx = NULL;
  if (m_create(&ctx) != FLOWC_OK) return 1;
  fill(m_input_x(ctx), n, 0);
  int out_at = -1; /* -1: the owned output buffer; 0, 1: ys[0], ys[1] */
  for (int call = 0; call < FUZZ_CALLS; call++) {
    int status = FLOWC_OK, what = (int)pick(6);
    float *buf = pick(5) ? xs[pick(2)] : NULL;
    if (buf) fill(buf, n, 0); /* (the aligned one may be bound: same data, rewritten) */
    int dtypes[] = {dt, dt, dt, dt + 1, -1, 1000}, ranks[] = {rank, rank, rank, 0, -1, 1 << 30};
    int index = pick(4) ? 0 : (int[]){1, -1, 0x7fffffff}[pick(3)];
    const int64_t *shapes[] = {shape, shape, shape, wrong, NULL};
    switch (what) {
    case 0:
      status = m_set_input(ctx, index, buf, dtypes[pick(6)], ranks[pick(6)], shapes[pick(5)]);
      break;
    case 1: {
      int which = (int)pick(3);
      float *y = which < 2 ? ys[which] : NULL;
      const int64_t *osh = pick(5) ? oshape : wrong;
      status = m_set_output(ctx, index, y, pick(6) ? odt : odt + 1, pick(6) ? orank : -1, osh);
      if (status == FLOWC_OK) out_at = which;
      break;
    }
    case 2:
    case 3:
      status = m_run(ctx);
      if (status == FLOWC_OK) {
        const float *got = out_at < 0 ? m_output_y(ctx) : ys[out_at];
        if (memcmp(got, ref, k * sizeof(float))) {
          fprintf(stderr, "fuzz call %d: run result differs (output at %d)\n", call, out_at);
          bad = 1;
        }
        ++*runs;
      }
      break;
    case 4:
      status = m_set_threads(ctx, (int[]){-1, 0, 1, 2, 3, 2000}[pick(6)]);
      break;
    default: {
      unsigned a = pick(4);
      status = a == 0   ? m_set_arena(ctx, NULL, 0)
               : a == 1 ? m_set_arena(ctx, arena, arena_bytes)
               : a == 2 ? m_set_arena(ctx, arena + 8, arena_bytes)
                        : m_set_arena(ctx, arena, arena_bytes ? arena_bytes - 1 : 0);
    }
    }
    if (status != FLOWC_OK && (!m_error(ctx) || !m_error(ctx)[0])) {
      fprintf(stderr, "fuzz call %d (kind %d): status %d without a message\n", call, what,
              status);
      bad = 1;
    }
    if (status < 0 || status > FLOWC_ERR_DEVICE) {
      fprintf(stderr, "fuzz call %d: unknown status %d\n", call, status);
      bad = 1;
    }
  }
  m_destroy(ctx);
  free(arena_raw);
  free(raw_x);
  free(raw_y);
  return bad;
}

int main(void) {
  size_t n = m_input_bytes(0) / sizeof(float), k = m_output_bytes(0) / sizeof(float);
  int rank = m_input_rank(0), bad = 0;
  const int64_t *shape = m_input_shape(0);
  int64_t wrong[8];
  for (int cycle = 0; cycle < RUNS; cycle++) {
    m_ctx *ctx = NULL;
    if (check(m_create(&ctx), ctx, "create", 0)) return 1;
    bad |= check(m_set_threads(ctx, 1 + cycle % 2), ctx, "set_threads", 0);
    fill(m_input_x(ctx), n, cycle);
    bad |= check(m_run(ctx), ctx, "run", 0);
    float *x = malloc(n * sizeof(float)), *y = malloc(k * sizeof(float));
    fill(x, n, cycle);
    bad |= check(m_set_input(ctx, 0, x, m_input_dtype(0), rank, shape), ctx, "set_input", 0);
    bad |= check(m_set_output(ctx, 0, y, m_output_dtype(0), m_output_rank(0),
                              m_output_shape(0)), ctx, "set_output", 0);
    bad |= check(m_run(ctx), ctx, "run with caller buffers", 0);
    /* failure paths */
    bad |= check(m_set_input(ctx, 7, x, m_input_dtype(0), rank, shape), ctx, "bad index", 1);
    bad |= check(m_set_input(ctx, -1, x, m_input_dtype(0), rank, shape), ctx, "index -1", 1);
    bad |= check(m_set_input(ctx, 0, x, m_input_dtype(0) + 1, rank, shape), ctx, "dtype", 1);
    memcpy(wrong, shape, (size_t)rank * sizeof(int64_t));
    wrong[rank] = 1;
    bad |= check(m_set_input(ctx, 0, x, m_input_dtype(0), rank + 1, wrong), ctx, "rank", 1);
    wrong[rank - 1] += 1;
    bad |= check(m_set_input(ctx, 0, x, m_input_dtype(0), rank, wrong), ctx, "dims", 1);
    bad |= check(m_set_input(ctx, 0, NULL, m_input_dtype(0), rank, shape), ctx, "NULL", 1);
    bad |= check(m_set_threads(ctx, -3), ctx, "threads -3", 1);
    if (m_arena_bytes() > 0) {
      char small[8];
      bad |= check(m_set_arena(ctx, small, 1), ctx, "small arena", 1);
    }
    bad |= check(m_run(ctx), ctx, "run after failures", 0);
    if (cycle == 0) {
      reference = malloc(k * sizeof(float));
      m_set_threads(ctx, 1);
      fill(m_input_x(ctx), n, 0);
      m_set_input(ctx, 0, m_input_x(ctx), m_input_dtype(0), rank, shape);
      m_ctx *second = NULL; /* a second context beside the first */
      bad |= check(m_create(&second) == FLOWC_OK ? FLOWC_OK : 1, NULL, "second create", 0);
      m_destroy(second);
      m_destroy(ctx);
      ctx = NULL;
      m_create(&ctx);
      m_set_threads(ctx, 1);
      fill(m_input_x(ctx), n, 0);
      bad |= check(m_run(ctx), ctx, "reference run", 0);
      memcpy(reference, m_output_y(ctx), k * sizeof(float));
    }
    free(x);
    free(y);
    m_destroy(ctx);
  }
  if (misuse(reference)) {
    fprintf(stderr, "API misuse checks failed\n");
    bad = 1;
  }
  int fuzz_runs = 0;
  if (fuzz_calls(reference, &fuzz_runs)) {
    fprintf(stderr, "API call fuzzing failed\n");
    bad = 1;
  }
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, worker, NULL);
  for (int t = 0; t < THREADS; t++) {
    void *result;
    pthread_join(threads[t], &result);
    if (result) {
      fprintf(stderr, "thread %d: wrong result or failure\n", t);
      bad = 1;
    }
  }
  free(reference);
  if (bad) return 1;
  printf("ok %d runs, %d random API calls (%d runs among them)\n",
         RUNS * 2 + THREADS * RUNS + fuzz_runs, FUZZ_CALLS, fuzz_runs);
  return 0;
}
