/* Train a flowc training artifact from C, checkpoint it, and resume.
 *
 *   train STEPS CHECKPOINT_OUT [CHECKPOINT_IN] < batch.bin
 *
 * Built with -include MODEL.h -DMODEL=name (see the Makefile): works for any artifact made
 * by `flowc compile MODEL.onnx --train ...`. Its run performs one step: it reads the
 * model's inputs and `labels` and writes `loss`, updating the weights and the optimizer's
 * state (variables of the context) in place. batch.bin holds every input's bytes in the
 * input table's order (the labels last), fed to every step. Prints one line per step,
 * `step K loss L`, then saves every variable (weights, optimizer slots, step counter) to
 * CHECKPOINT_OUT, a safetensors file; with CHECKPOINT_IN it first loads one, so a run that
 * resumes from step K's checkpoint continues exactly where the first one stopped. */
#include <stdio.h>
#include <stdlib.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(suffix) CAT(MODEL, CAT(_, suffix))
#define CTX CAT(MODEL, _ctx)

static int fail(CTX *ctx, const char *what) {
    fprintf(stderr, "train: %s: %s\n", what, ctx ? FN(error)(ctx) : "out of memory");
    FN(destroy)(ctx);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s STEPS CHECKPOINT_OUT [CHECKPOINT_IN] < batch.bin\n", argv[0]);
        return 2;
    }
    int steps = atoi(argv[1]);
    CTX *ctx = NULL;
    if (FN(create)(&ctx) != 0)
        return fail(ctx, "create");
    if (argc == 4 && FN(load_checkpoint)(ctx, argv[3]) != 0)
        return fail(ctx, "load_checkpoint");
    for (int i = 0; i < FN(num_inputs)(); i++) {
        size_t bytes = FN(input_bytes)(i);
        if (fread(FN(input)(ctx, i), 1, bytes, stdin) != bytes) {
            fprintf(stderr, "train: batch.bin ends before input '%s' (%zu bytes)\n",
                    FN(input_name)(i), bytes);
            FN(destroy)(ctx);
            return 1;
        }
    }
    for (int step = 0; step < steps; step++) {
        if (FN(run)(ctx) != 0)
            return fail(ctx, "run");
        printf("step %d loss %.9g\n", step, *(const float *)FN(output)(ctx, 0));
    }
    if (FN(save_checkpoint)(ctx, argv[2]) != 0)
        return fail(ctx, "save_checkpoint");
    FN(destroy)(ctx);
    return 0;
}
