/* flowc_custom_op.h: the signature of a custom op's kernel (docs/custom_ops.md).
 *
 * A custom op's C function is `int fn(const flowc_custom_args *args)`. It reads
 * `args->inputs[i]` and writes `args->outputs[j]`: dense row-major buffers, 64-byte
 * aligned, of the element types (`*_dtypes`: the artifact ABI's codes, 11 = f32) and
 * shapes (`*_shapes[i][0..rank)`) given; outputs never alias inputs. `attr_names` and
 * `attr_values` are the node's numeric scalar attributes (ints as doubles). It returns 0;
 * any other value stops the process with a message naming the op (a kernel cannot fail
 * in the middle of a run). It may be called from several threads at once, on different
 * buffers. */
#ifndef FLOWC_CUSTOM_OP_H
#define FLOWC_CUSTOM_OP_H
#include <stdint.h>

typedef struct flowc_custom_args {
  int32_t num_inputs, num_outputs;
  const void *const *inputs;
  void *const *outputs;
  const int32_t *input_dtypes, *output_dtypes;
  const int32_t *input_ranks, *output_ranks;
  const int64_t *const *input_shapes;
  const int64_t *const *output_shapes;
  int32_t num_attrs;
  const char *const *attr_names;
  const double *attr_values;
} flowc_custom_args;

#endif
