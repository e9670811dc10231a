/* threads_tsan_driver.c: drives one artifact (model "m", input x f32, output y f32) whose
 * kernels have parallel loops, built with its runtime under ThreadSanitizer
 * (tests/robust/test_threads_tsan.py). At 1, 2 and 4 threads, and then from two threads
 * at once each with its own context of 2 threads, every run's output must equal the
 * 1-thread output bit for bit (each element is computed by the same code whichever thread
 * runs its block). Prints "ok RUNS" on success. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m.h"

#define RUNS 6

static float *reference;
static size_t n_in, n_out;

static void fill(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = (float)((int)((i * 7) % 13) - 6) / 4.0f;
}

static int run_at(int threads, int runs) {
  m_ctx *ctx = NULL;
  if (m_create(&ctx) != FLOWC_OK || m_set_threads(ctx, threads) != FLOWC_OK) {
    fprintf(stderr, "create/set_threads %d: %s\n", threads, ctx ? m_error(ctx) : "-");
    return 1;
  }
  int bad = 0;
  for (int r = 0; r < runs && !bad; r++) {
    fill(m_input_x(ctx), n_in);
    if (m_run(ctx) != FLOWC_OK) {
      fprintf(stderr, "run at %d threads: %s\n", threads, m_error(ctx));
      bad = 1;
    } else if (!reference) {
      reference = malloc(n_out * sizeof(float));
      memcpy(reference, m_output_y(ctx), n_out * sizeof(float));
    } else if (memcmp(m_output_y(ctx), reference, n_out * sizeof(float))) {
      fprintf(stderr, "run %d at %d threads differs from 1 thread\n", r, threads);
      bad = 1;
    }
  }
  m_destroy(ctx);
  return bad;
}

static void *concurrent(void *arg) {
  (void)arg;
  return (void *)(size_t)run_at(2, RUNS);
}

int main(void) {
  n_in = m_input_bytes(0) / sizeof(float);
  n_out = m_output_bytes(0) / sizeof(float);
  int bad = run_at(1, 1) || run_at(2, RUNS) || run_at(4, RUNS) || run_at(1, RUNS);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, concurrent, NULL);
  for (int i = 0; i < 2; i++) {
    void *result;
    pthread_join(t[i], &result);
    bad |= result != NULL;
  }
  free(reference);
  if (bad) return 1;
  printf("ok %d\n", 4 * RUNS + 1);
  return 0;
}
