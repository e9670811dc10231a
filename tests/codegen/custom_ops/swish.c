#include <math.h>
#include "flowc_custom_op.h"

/* y = x * sigmoid(beta * x), f32, any shape */
int swish(const flowc_custom_args *args) {
  const float *x = args->inputs[0];
  float *y = args->outputs[0];
  double beta = 1.0;
  for (int i = 0; i < args->num_attrs; i++)
    if (args->attr_names[i][0] == 'b') beta = args->attr_values[i];
  int64_t n = 1;
  for (int d = 0; d < args->input_ranks[0]; d++) n *= args->input_shapes[0][d];
  for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-(float)beta * x[i]));
  return 0;
}
