/* Model tables with sizes that disagree or wrap, handed to the runtime's create
 * (tests/runtime/test_runtime_sizes.py builds it with -DFLOWC_PREFIX=t_ and runs it).
 * For each case it prints one line: the case's name, create's status and its message.
 * Each bad table must fail create with FLOWC_ERR_ARGUMENT before anything is allocated;
 * the good one must succeed. */
#include <stdio.h>

#include "flowc_rt.h"

int t_rt_create(const flowc_model *m, const char *weights_file, flowc_ctx **out);
void t_rt_destroy(flowc_ctx *ctx);
const char *t_rt_error(const flowc_ctx *ctx);

static void entry(void *const *in, void *const *out, char *arena, const char *w) {
  (void)in; (void)out; (void)arena; (void)w;
}

static const int64_t small[] = {4, 16};
static const int64_t wraps[] = {((int64_t)1 << 58) + 1, 16}; /* f32: 2**64 + 64 bytes */
static const int64_t huge[] = {(int64_t)1 << 31, (int64_t)1 << 31};
static const int64_t negative[] = {-5, 16};
static const int64_t empty_huge[] = {0, (int64_t)1 << 40, (int64_t)1 << 40};

static void run(const char *name, flowc_tensor_desc in, size_t arena) {
  flowc_tensor_desc out = {"y", 11, 2, small, 256};
  flowc_model m = {0};
  m.name = "m";
  m.graph_hash = "0123456789abcdef";
  m.num_inputs = 1;
  m.inputs = &in;
  m.num_outputs = 1;
  m.outputs = &out;
  m.arena_bytes = arena;
  m.entry = entry;
  flowc_ctx *ctx = NULL;
  int status = t_rt_create(&m, NULL, &ctx);
  printf("%s %d %s\n", name, status, status ? t_rt_error(ctx) : "ok");
  t_rt_destroy(ctx);
}

static void step(void *const *in, void *const *out, char *arena, const char *w, char *ts,
                 char *vars) {
  (void)in; (void)out; (void)arena; (void)w; (void)ts; (void)vars;
}

/* A model of two entries: `run` (as above) and `second`, in an arena of 1024 bytes. */
static void run_entries(const char *name, flowc_entry second) {
  flowc_tensor_desc x = {"x", 11, 2, small, 256}, y = {"y", 11, 2, small, 256};
  flowc_model m = {0};
  m.name = "m";
  m.graph_hash = "0123456789abcdef";
  m.num_inputs = m.num_outputs = 1;
  m.inputs = &x;
  m.outputs = &y;
  m.arena_bytes = 1024;
  m.entry = step;
  flowc_entry entries[2] = {{"run", 1, &x, 1, &y, step, 512, -1, 0}, second};
  m.num_entries = 2;
  m.entries = entries;
  flowc_ctx *ctx = NULL;
  int status = t_rt_create(&m, NULL, &ctx);
  printf("%s %d %s\n", name, status, status ? t_rt_error(ctx) : "ok");
  t_rt_destroy(ctx);
}

int main(void) {
  run("good", (flowc_tensor_desc){"x", 11, 2, small, 256}, 1024);
  run("wrapped_input", (flowc_tensor_desc){"x", 11, 2, wraps, 64}, 0);
  run("huge_input", (flowc_tensor_desc){"x", 11, 2, huge, 0}, 0);
  run("negative_dim", (flowc_tensor_desc){"x", 11, 2, negative, 0}, 0);
  run("empty_but_huge", (flowc_tensor_desc){"x", 11, 3, empty_huge, 0}, 0);
  run("bytes_mismatch", (flowc_tensor_desc){"x", 11, 2, small, 128}, 0);
  run("bad_dtype", (flowc_tensor_desc){"x", 99, 2, small, 256}, 0);
  run("huge_arena", (flowc_tensor_desc){"x", 11, 2, small, 256}, (size_t)1 << 60);
  static const int64_t four[] = {4};
  static const flowc_tensor_desc step_in[] = {{"x", 11, 2, small, 256},
                                              {"labels", 4, 1, four, 32}};
  static const flowc_tensor_desc step_bad[] = {{"x", 11, 2, small, 256},
                                               {"labels", 4, 1, four, 8}};
  static const flowc_tensor_desc loss = {"loss", 11, 0, small, 4};
  run_entries("entries_good", (flowc_entry){"train_step", 2, step_in, 1, &loss, step, 1024, 1,
                                            10});
  run_entries("entry_bad_desc", (flowc_entry){"train_step", 2, step_bad, 1, &loss, step, 1024,
                                              1, 10});
  run_entries("entry_big_arena", (flowc_entry){"train_step", 2, step_in, 1, &loss, step, 2048,
                                               1, 10});
  run_entries("entry_labels_index", (flowc_entry){"train_step", 2, step_in, 1, &loss, step,
                                                  1024, 2, 10});
  run_entries("entry_labels_dtype", (flowc_entry){"train_step", 2, step_in, 1, &loss, step,
                                                  1024, 0, 10});
  return 0;
}
