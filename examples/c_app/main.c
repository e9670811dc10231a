/* main.c: run the zoo MLP artifact (model name "mlp") from C through its typed accessors.
 *
 *   flowc compile mlp.onnx -o mlp_artifact --batch 2 --name mlp
 *   cc -O2 -Imlp_artifact main.c mlp_artifact/libmlp.a -lm -lpthread -o main
 *   ./main [x.bin]      (x.bin: the input as raw float32, else a fixed pattern)
 *
 * Prints each output as "output NAME [shape]" and then its values, one per line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mlp.h"

static int fail(mlp_ctx *ctx, const char *what) {
  fprintf(stderr, "main: %s: %s\n", what, mlp_error(ctx));
  mlp_destroy(ctx);
  return 1;
}

int main(int argc, char **argv) {
  mlp_ctx *ctx = NULL;
  if (mlp_create(&ctx) != FLOWC_OK) return fail(ctx, "create");
  if (mlp_set_threads(ctx, 2) != FLOWC_OK) return fail(ctx, "set_threads");

  float *x = mlp_input_x(ctx);
  size_t n = mlp_input_bytes(0) / sizeof(float);
  if (argc > 1) {
    FILE *f = fopen(argv[1], "rb");
    if (!f || fread(x, sizeof(float), n, f) != n) {
      fprintf(stderr, "main: cannot read %zu floats from %s\n", n, argv[1]);
      return 1;
    }
    fclose(f);
  } else {
    for (size_t i = 0; i < n; i++) x[i] = (float)sin(0.1 * (double)i);
  }

  if (mlp_run(ctx) != FLOWC_OK) return fail(ctx, "run");

  const float *probs = mlp_output_probs(ctx);
  const int64_t *shape = mlp_output_shape(0);
  printf("output %s [%lld,%lld]\n", mlp_output_name(0), (long long)shape[0],
         (long long)shape[1]);
  for (size_t i = 0; i < mlp_output_bytes(0) / sizeof(float); i++) printf("%.9g\n", probs[i]);
  mlp_destroy(ctx);
  return 0;
}
