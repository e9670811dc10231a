/* robust_asan_driver.c: drives one artifact (model name "m", input x f32, output y f32)
 * through its C API under AddressSanitizer/UndefinedBehaviorSanitizer
 * (tests/robust/test_robust_sanitizers.py builds and runs it).
 *
 * Exercises: many create/run/destroy cycles; set_threads 1 and 2; a caller-provided arena;
 * failure paths (bad index, wrong dtype code, wrong rank, wrong dims, NULL data, NULL ctx
 * error, bad thread count, too-small arena), each needing a non-empty message; and four
 * threads each running its own context, whose results must equal the single-thread ones.
 * Prints "ok RUNS" on success; any sanitizer report makes the process fail. */
#include <pthread.h>
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
  printf("ok %d\n", RUNS * 2 + THREADS * RUNS);
  return 0;
}
