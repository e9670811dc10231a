/* Train a flowc training artifact from C, run inference on the trained weights,
 * checkpoint it, and resume.
 *
 *   train STEPS CHECKPOINT_OUT [CHECKPOINT_IN] < batch.bin
 *
 * Built with -include MODEL.h -DMODEL=name (see the Makefile): works for any artifact made
 * by `flowc compile MODEL.onnx --train ...`. Such an artifact exports two entries over one
 * context: NAME_train_step (the model's inputs and `labels` -> `loss`, updating the
 * weights and the optimizer's state, variables of the context, in place) and NAME_run
 * (plain inference: the model's inputs -> its outputs, on the current weights).
 * batch.bin holds every train_step input's bytes in its input table's order (the labels
 * last), fed to every step. Prints one line per step, `step K loss L`, then one line per
 * output of NAME_run on the batch's inputs with the trained weights, `output NAME v0 v1
 * ...` (float outputs), then saves every variable (weights, optimizer slots, step counter)
 * to CHECKPOINT_OUT, a safetensors file; with CHECKPOINT_IN it first loads one, so a run
 * that resumes from step K's checkpoint continues exactly where the first one stopped. */
#include <stdio.h>
#include <stdlib.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(suffix) CAT(MODEL, CAT(_, suffix))
#define CTX CAT(MODEL, _ctx)
#define MAX_TENSORS 64

static int fail(CTX *ctx, const char *what) {
    fprintf(stderr, "train: %s: %s\n", what, ctx ? FN(error)(ctx) : "out of memory");
    FN(destroy)(ctx);
    return 1;
}

/* A 64-byte aligned buffer (the entries use aligned buffers in place, copy others). */
static void *buffer(size_t bytes) {
    return aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s STEPS CHECKPOINT_OUT [CHECKPOINT_IN] < batch.bin\n", argv[0]);
        return 2;
    }
    int steps = atoi(argv[1]);
    int ins = FN(train_step_num_inputs)(), outs = FN(num_outputs)();
    if (ins > MAX_TENSORS || outs > MAX_TENSORS || FN(num_inputs)() != ins - 1) {
        fprintf(stderr, "train: not a training artifact of this program's shape\n");
        return 2;
    }
    CTX *ctx = NULL;
    if (FN(create)(&ctx) != 0)
        return fail(ctx, "create");
    if (argc == 4 && FN(load_checkpoint)(ctx, argv[3]) != 0)
        return fail(ctx, "load_checkpoint");
    void *inputs[MAX_TENSORS], *outputs[MAX_TENSORS];
    float loss;
    void *loss_out[1] = {&loss};
    for (int i = 0; i < ins; i++) {
        size_t bytes = FN(train_step_input_bytes)(i);
        inputs[i] = buffer(bytes);
        if (!inputs[i] || fread(inputs[i], 1, bytes, stdin) != bytes) {
            fprintf(stderr, "train: batch.bin ends before input '%s' (%zu bytes)\n",
                    FN(train_step_input_name)(i), bytes);
            FN(destroy)(ctx);
            return 1;
        }
    }
    for (int j = 0; j < outs; j++) {
        if (!(outputs[j] = buffer(FN(output_bytes)(j)))) {
            fprintf(stderr, "train: out of memory\n");
            FN(destroy)(ctx);
            return 1;
        }
    }
    for (int step = 0; step < steps; step++) {
        if (FN(train_step)(ctx, (const void *const *)inputs, loss_out) != 0)
            return fail(ctx, "train_step");
        printf("step %d loss %.9g\n", step, loss);
    }
    /* inference on the trained weights: the same inputs, without the labels */
    if (FN(run_with)(ctx, (const void *const *)inputs, outputs) != 0)
        return fail(ctx, "run");
    for (int j = 0; j < outs; j++) {
        if (FN(output_dtype)(j) != FLOWC_DTYPE_F32)
            continue;
        printf("output %s", FN(output_name)(j));
        for (size_t k = 0; k < FN(output_bytes)(j) / sizeof(float); k++)
            printf(" %.9g", ((const float *)outputs[j])[k]);
        printf("\n");
    }
    if (FN(save_checkpoint)(ctx, argv[2]) != 0)
        return fail(ctx, "save_checkpoint");
    FN(destroy)(ctx);
    for (int i = 0; i < ins; i++) free(inputs[i]);
    for (int j = 0; j < outs; j++) free(outputs[j]);
    return 0;
}
