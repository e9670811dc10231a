/* two_models.c: two artifacts linked into one program, used through the generic API.
 *
 * Every symbol of an artifact starts with its model name, so nothing clashes. The names
 * are given at build time (see the Makefile): -DMODEL_A=mlp -DMODEL_B=cnn with
 * -include mlp.h -include cnn.h. Each model's inputs get a fixed pattern (f32 inputs
 * only); each output is printed as "output MODEL/NAME [shape]" and then its values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define STR2(a) #a
#define STR(a) STR2(a)

/* One function per model, stamped out for each prefix. */
#define DEFINE_RUNNER(M)                                                                   \
  static int CAT(run_, M)(double phase) {                                                  \
    CAT(M, _ctx) *ctx = NULL;                                                              \
    if (CAT(M, _create)(&ctx) != FLOWC_OK) {                                              \
      fprintf(stderr, "%s: %s\n", STR(M), CAT(M, _error)(ctx));                            \
      CAT(M, _destroy)(ctx);                                                               \
      return 1;                                                                            \
    }                                                                                      \
    for (int i = 0; i < CAT(M, _num_inputs)(); i++) {                                      \
      float *x = CAT(M, _input)(ctx, i);                                                   \
      for (size_t k = 0; k < CAT(M, _input_bytes)(i) / sizeof(float); k++)                 \
        x[k] = (float)sin(phase + 0.1 * (double)k);                                        \
    }                                                                                      \
    if (CAT(M, _run)(ctx) != FLOWC_OK) {                                                   \
      fprintf(stderr, "%s: %s\n", STR(M), CAT(M, _error)(ctx));                            \
      CAT(M, _destroy)(ctx);                                                               \
      return 1;                                                                            \
    }                                                                                      \
    for (int j = 0; j < CAT(M, _num_outputs)(); j++) {                                     \
      const float *y = CAT(M, _output)(ctx, j);                                            \
      printf("output %s/%s [", STR(M), CAT(M, _output_name)(j));                           \
      for (int d = 0; d < CAT(M, _output_rank)(j); d++)                                    \
        printf(d ? ",%lld" : "%lld", (long long)CAT(M, _output_shape)(j)[d]);              \
      printf("]\n");                                                                       \
      for (size_t k = 0; k < CAT(M, _output_bytes)(j) / sizeof(float); k++)                \
        printf("%.9g\n", y[k]);                                                            \
    }                                                                                      \
    CAT(M, _destroy)(ctx);                                                                 \
    return 0;                                                                              \
  }

DEFINE_RUNNER(MODEL_A)
DEFINE_RUNNER(MODEL_B)

int main(void) {
  return CAT(run_, MODEL_A)(0.0) || CAT(run_, MODEL_B)(1.0);
}
