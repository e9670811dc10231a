/* flowc_rt.h: the thin runtime's internal interface.
 *
 * The runtime (runtime.c, pool.c) is compiled into every artifact with
 * -DFLOWC_PREFIX=<model>_ , so each of its global symbols carries the model's prefix and
 * several artifacts link into one program without clashes. The generated model file
 * (<model>_model.c) fills in a flowc_model descriptor and wraps these functions in the
 * public <model>_* API declared by <model>.h.
 *
 * No global mutable state: everything lives in a flowc_ctx; the only per-thread variable is
 * the pool of the run in progress, used by the OpenMP entry points that kernels may call
 * (mpi.c keeps two process-wide flags and mpi_abi.c the MPI library's table: MPI itself is
 * process-wide).
 *
 * Memory: create allocates the context, its input/output buffers (every entry's), the
 * arena (one for all entries, the largest entry's: every intermediate tensor and kernel
 * scratch buffer), the thread-scratch region, maps the weights and allocates the
 * variables block (filled from their initial values); set_threads replaces the pool and
 * the thread-scratch region; a partitioned model's
 * partition threads and rendezvous are made by create. A run allocates nothing (kernels
 * never allocate: flowc/codegen/scratch.py), except that glibc allocates this library's
 * thread-local block (dynamic TLS, when it is dlopen'ed) at a thread's first access: pool
 * workers touch it before pool_create returns, a calling thread in its first run.
 *
 * Calls on one context are serialized by its `lock`: every entry point that reads or
 * changes the context (run, run_with, run_entry, set_threads, set_arena, set_input, set_output, the
 * input/output accessors, variable, save/load_checkpoint, destroy) takes it, so a control call made while another thread
 * runs the context waits for that run to return (set_threads never replaces the pool a run
 * is using; destroy never frees what a run is using). Runs on one context therefore happen
 * one at a time; parallel runs need one context per thread. Nothing may call into a context
 * once destroy has begun (destroy frees the lock itself).
 */
#ifndef FLOWC_RT_H
#define FLOWC_RT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifndef FLOWC_PREFIX
#error "compile the flowc runtime with -DFLOWC_PREFIX=<model>_"
#endif
#define FLOWC_CAT2(a, b) a##b
#define FLOWC_CAT(a, b) FLOWC_CAT2(a, b)
#define FLOWC_RT(name) FLOWC_CAT(FLOWC_PREFIX, name)
#define FLOWC_HIDDEN __attribute__((visibility("hidden")))

#ifndef FLOWC_STATUS_CODES
#define FLOWC_STATUS_CODES
/* Status codes (also in every <model>.h and in flowc/runtime/abi.py). */
#define FLOWC_OK 0
#define FLOWC_ERR_ARGUMENT 1 /* bad index, null pointer, unknown name */
#define FLOWC_ERR_SHAPE 2    /* an input or output of the wrong shape */
#define FLOWC_ERR_DTYPE 3    /* an input or output of the wrong element type */
#define FLOWC_ERR_NOMEM 4    /* an allocation failed */
#define FLOWC_ERR_WEIGHTS 5  /* the weights file is missing, unreadable or mismatched */
#define FLOWC_ERR_CPU 6      /* this CPU lacks a feature the kernels were built for */
#define FLOWC_ERR_THREADS 7  /* the thread pool could not start */
#define FLOWC_ERR_DEVICE 8   /* GPU: no CUDA driver or device, unsupported GPU, CUDA error */
#endif

#define FLOWC_ALIGN 64
/* The largest tensor, arena, weights blob or inputs+outputs total an artifact may state
 * (flowc/ir/limits.py MAX_TENSOR_BYTES, 2**48): create re-checks every size against it. */
#define FLOWC_MAX_BYTES ((uint64_t)1 << 48)
#define FLOWC_ERROR_BYTES 512
#define FLOWC_WEIGHTS_HEADER 64 /* side file: "FLOWCWTS", u32 abi, u32 0, hash[16], u64 bytes */

typedef struct {
  const char *name;
  int32_t dtype; /* a code of abi.py's DTYPES */
  int32_t rank;
  const int64_t *shape; /* a dynamic axis: its dim's upper bound */
  size_t bytes;         /* at the bounds */
  const int32_t *dim_of; /* an input's axes: the dim (index in flowc_model.dims) read from
                            it, -1 for a fixed size; NULL: every axis fixed */
} flowc_tensor_desc;

/* A dim given at run time (issue [12]): the size of axis `axis` of input `input` in the
 * shape the caller gives (set_input, set_input_shape), in [lo, hi]. The arena and the
 * owned buffers are planned at the upper bounds (offsets fixed at the bound sizes); a run
 * of smaller dims uses the front of each buffer. */
typedef struct {
  const char *name;
  int64_t lo, hi;
  int32_t input, axis;
} flowc_dim;

/* Runs the kernels in order: inputs[i] and outputs[j] are 64-byte aligned buffers of the
 * described sizes (of the run's dims: `dims`, one value per flowc_model.dims, NULL for a
 * model without), arena holds arena_bytes (kernels' scratch buffers included), weights the
 * weights blob, thread_scratch the thread-scratch region (thread_scratch_bytes per thread
 * slot of the pool, slot t at t * thread_scratch_bytes; kernels index it by their slot,
 * `__kmpc_global_thread_num`), variables the variables block (variables_bytes: each
 * variable at its offset, read and written in place). Cannot fail, and allocates nothing. */
typedef void (*flowc_entry_fn)(void *const *inputs, void *const *outputs, char *arena,
                               const char *weights, char *thread_scratch, char *variables,
                               const int64_t *dims);

/* ---- partitions (partition.c): a graph split over devices by the partition pass ----
 * Each partition (one per device) has its own entry function (a CPU device) or GPU program
 * (a gpu:N device, run by cuda.c), run on its own thread, and its own region of the
 * context's arena (a GPU partition's region lives on the device). Partitions exchange
 * tensors through the context's rendezvous: channel k (one send/recv pair, known at
 * compile time) has a staging buffer; rt_send copies into it and marks it full, rt_recv
 * waits until it is full and copies out (a GPU partition copies to and from the device
 * instead). Channels are reset at the start of every run. */
typedef struct flowc_rendezvous flowc_rendezvous;
typedef void (*flowc_part_fn)(void *const *inputs, void *const *outputs, char *arena,
                              const char *weights, char *thread_scratch, char *variables,
                              const int64_t *dims, flowc_rendezvous *rv);
struct flowc_gpu_program_s;
typedef struct {
  const char *device;  /* cpu:0, cpu:1 ... gpu:0 */
  size_t arena_offset; /* its region of the context's arena */
  size_t arena_bytes;
  flowc_part_fn run;   /* arena points at the region; NULL for a GPU partition */
  const struct flowc_gpu_program_s *gpu; /* a GPU partition: its program (cuda.c) */
} flowc_partition;
typedef struct {
  const char *key; /* rendezvous key: send_device;tensor_name;recv_device */
  size_t bytes;    /* 0: a control edge (a signal, no data) */
} flowc_channel;

/* ---- GPU programs (cuda.c): kernels that run on an NVIDIA GPU ----
 * Either the whole model (flowc_model.gpu) or one partition of a mixed CPU+GPU model
 * (flowc_partition.gpu). Kernel arguments are device pointers into one device block
 * (arena | weights span | scratch | inputs | outputs); an argument names its buffer by kind
 * and index/offset. Launches and transfers run in order on one stream. */
enum { FLOWC_GPU_INPUT, FLOWC_GPU_OUTPUT, FLOWC_GPU_WEIGHT, FLOWC_GPU_ARENA, FLOWC_GPU_SCRATCH,
       FLOWC_GPU_NONE };
typedef struct {
  int32_t kind; /* FLOWC_GPU_* */
  size_t at;    /* input/output index, or byte offset in the weights/arena/scratch */
} flowc_gpu_arg;
typedef struct {
  int32_t function; /* index into functions */
  uint32_t grid, block;
  int32_t num_args;
  const flowc_gpu_arg *args;
  const char *nodes; /* the graph nodes it computes (error messages) */
} flowc_gpu_launch;
/* A step of a GPU partition: a launch, or a transfer through the rendezvous (a recv copies
 * the channel's staging buffer to `buf` host-to-device; a send copies `buf` device-to-host
 * into it and records an event the receiver waits on). */
enum { FLOWC_GPU_LAUNCH, FLOWC_GPU_RECV, FLOWC_GPU_SEND };
typedef struct {
  int32_t op;    /* FLOWC_GPU_LAUNCH / RECV / SEND */
  int32_t index; /* the launch, or the channel */
  flowc_gpu_arg buf;
} flowc_gpu_step;
typedef struct {
  int32_t arch;  /* 80 for sm_80 ... */
  int32_t is_ptx; /* PTX text (JIT on devices of at least arch), else a cubin */
  const unsigned char *data;
} flowc_gpu_image;
typedef struct flowc_gpu_program_s {
  int32_t num_images;
  const flowc_gpu_image *images;
  int32_t num_functions;
  const char *const *functions;
  int32_t num_launches;
  const flowc_gpu_launch *launches;
  size_t scratch_bytes;
  const flowc_gpu_arg *results; /* per output: where it is on the device after the steps;
                                   FLOWC_GPU_NONE: not this program's to copy out */
  size_t arena_bytes;           /* the device arena (a partition's region) */
  size_t weights_offset, weights_bytes; /* the span of the weights blob kernels read */
  const unsigned char *on_device; /* per input, then per output: 1 when it has a device
                                     buffer (inputs are copied in); NULL: all of them */
  int32_t num_steps;            /* 0: the launches in order (a whole-model program) */
  const flowc_gpu_step *steps;
} flowc_gpu_program;
struct flowc_gpu_ctx;

/* ---- entries: the named programs an artifact exports over one context ----
 * Entry 0 is `run` (NAME_run, run_with, set_input...: the model's inputs, outputs and
 * entry function); a training artifact adds `train_step` (NAME_train_step). Every entry
 * reads and writes the same variables block and weights and runs in the one arena
 * (arena_bytes of the model: the largest entry's); each has its own inputs and outputs.
 * `labels` >= 0: that input (i64) holds class indices, which rt_run_entry checks to lie
 * in [0, classes) before the entry runs (a bad one fails the call and nothing runs). */
typedef struct {
  const char *name;
  int32_t num_inputs;
  const flowc_tensor_desc *inputs;
  int32_t num_outputs;
  const flowc_tensor_desc *outputs;
  flowc_entry_fn entry;
  size_t arena_bytes; /* what its plan uses, at most the model's arena_bytes */
  int32_t labels;     /* -1: no input checked */
  int64_t classes;
} flowc_entry;

typedef struct {
  const char *name;
  const char *graph_hash;
  int32_t abi_version;
  int32_t num_inputs;
  const flowc_tensor_desc *inputs;
  int32_t num_outputs;
  const flowc_tensor_desc *outputs;
  size_t arena_bytes;
  size_t thread_scratch_bytes;  /* per thread slot (kernels' per-thread buffers); 0: none */
  const unsigned char *weights; /* embedded blob, or NULL when weights_file is used */
  size_t weights_bytes;
  const char *weights_file; /* side file name (next to the library), or NULL */
  const char *(*cpu_missing)(void); /* the first CPU feature missing, or NULL */
  flowc_entry_fn entry; /* partitioned: runs after every partition, copying outputs */
  int32_t num_partitions; /* 0: not partitioned, `entry` runs the whole graph */
  const flowc_partition *partitions;
  int32_t num_channels;
  const flowc_channel *channels;
  const flowc_gpu_program *gpu; /* non-NULL: every kernel runs on a GPU (cuda.c) */
  /* Variables (checkpoint.c; codegen/plan/state.py): state kept across runs in one block
   * of variables_bytes the context owns (outside the arena); variable i has descriptor
   * variables[i], lives at variable_offsets[i] (64-byte aligned) and starts as the
   * weights' bytes at variable_inits[i] (-1: zeros). Checkpoints record flowc_version and
   * the pairs of checkpoint_metadata (key, value, ..., NULL) in their "__metadata__". */
  int32_t num_variables;
  const flowc_tensor_desc *variables;
  const size_t *variable_offsets;
  const int64_t *variable_inits;
  size_t variables_bytes;
  const char *flowc_version;
  const char *const *checkpoint_metadata;
  /* Entries (above): entries[0] repeats inputs, outputs and entry; 0 entries: that one. */
  int32_t num_entries;
  const flowc_entry *entries;
  /* Dims given at run time (flowc_dim); output_shapes writes every output's shape (output
   * 0's dims, then output 1's ...) for the values `dims`. 0 dims: a static model. */
  int32_t num_dims;
  const flowc_dim *dims;
  void (*output_shapes)(const int64_t *dims, int64_t *shapes);
  /* Partitioned: per output, the partition whose steps compute it (-1: none, an input or
   * weight passed through); under MPI that partition's rank sends it to the others. */
  const int32_t *output_partition;
} flowc_model;

typedef struct flowc_pool flowc_pool;

typedef struct flowc_ctx {
  const flowc_model *model;
  pthread_mutex_t lock; /* held by every call on the context (see the top of the file) */
  char error[FLOWC_ERROR_BYTES];
  void **inputs;       /* what run() reads: owned buffers or the caller's */
  void **outputs;      /* what run() writes: owned buffers or the caller's (aligned) */
  void **out_copy;     /* caller's unaligned output buffers, filled after run() */
  char *owned;         /* one block: owned input and output buffers */
  char *arena;
  int arena_owned;
  const char *weights;
  void *map;
  size_t map_bytes;
  flowc_pool *pool;
  int threads;
  /* The thread-scratch region: thread_scratch_bytes per slot, `threads` slots per partition
   * (partition p's slots from p * threads), allocated by create and set_threads. */
  char *thread_scratch;
  flowc_rendezvous *rendezvous; /* partitioned models: created on the first run */
  struct flowc_gpu_ctx *gpu;    /* GPU models: driver, device memory, module, stream */
  char *variables;              /* the variables block (model->variables_bytes) */
  void **entry_io;              /* entries after the first: their inputs, outputs, copies */
  /* A model with dims (num_dims > 0): their values for the next run (computed by run from
   * the inputs' shapes), then each input's shape as last given, then each output's shape
   * as of the last run (before one: at the bounds). NULL for a static model. */
  int64_t *dim_values;
} flowc_ctx;

FLOWC_HIDDEN int FLOWC_RT(rt_create)(const flowc_model *m, const char *weights_path,
                                     flowc_ctx **out);
FLOWC_HIDDEN void FLOWC_RT(rt_destroy)(flowc_ctx *ctx);
FLOWC_HIDDEN const char *FLOWC_RT(rt_error)(const flowc_ctx *ctx);
/* The device time of the last run's kernels (GPU models; see cuda_device_ms). */
FLOWC_HIDDEN int FLOWC_RT(rt_device_ms)(flowc_ctx *ctx, double *ms);
/* Record a printf-style message as ctx's error and return `status` (runtime.c, cuda.c). */
FLOWC_HIDDEN int FLOWC_RT(rt_fail)(flowc_ctx *ctx, int status, const char *fmt, ...);
FLOWC_HIDDEN int FLOWC_RT(rt_set_input)(flowc_ctx *ctx, int index, const void *data,
                                        int dtype, int rank, const int64_t *shape);
FLOWC_HIDDEN int FLOWC_RT(rt_set_output)(flowc_ctx *ctx, int index, void *data, int dtype,
                                         int rank, const int64_t *shape);
FLOWC_HIDDEN void *FLOWC_RT(rt_input)(flowc_ctx *ctx, int index);
/* A model with dims: the shape of input `index` for the next runs (its rank, its fixed
 * axes as described; its dynamic ones are checked by run); and output `index`'s shape as
 * of the last run (NULL for a bad index). A static model's are its descriptors'. */
FLOWC_HIDDEN int FLOWC_RT(rt_set_input_shape)(flowc_ctx *ctx, int index, int rank,
                                              const int64_t *shape);
FLOWC_HIDDEN const int64_t *FLOWC_RT(rt_output_shape)(const flowc_ctx *ctx, int index);
FLOWC_HIDDEN const void *FLOWC_RT(rt_output)(const flowc_ctx *ctx, int index);
FLOWC_HIDDEN int FLOWC_RT(rt_set_threads)(flowc_ctx *ctx, int threads);
FLOWC_HIDDEN int FLOWC_RT(rt_set_arena)(flowc_ctx *ctx, void *arena, size_t bytes);
FLOWC_HIDDEN int FLOWC_RT(rt_run)(flowc_ctx *ctx);
FLOWC_HIDDEN int FLOWC_RT(rt_run_with)(flowc_ctx *ctx, const void *const *inputs,
                                       void *const *outputs);
/* Entry k (see flowc_entry) on the caller's buffers, as rt_run_with (which is entry 0):
 * inputs[i] and outputs[j] hold entry k's tensors; its labels are checked first. */
FLOWC_HIDDEN int FLOWC_RT(rt_run_entry)(flowc_ctx *ctx, int k, const void *const *inputs,
                                        void *const *outputs);
FLOWC_HIDDEN const char *FLOWC_RT(rt_dtype_name)(int dtype);
/* tables.c: the model tables' sizes re-checked (before create allocates from them), and
 * the weights side file mapped (`given`, or the one next to the library). */
FLOWC_HIDDEN int FLOWC_RT(rt_check_sizes)(flowc_ctx *ctx);
FLOWC_HIDDEN int FLOWC_RT(rt_map_weights)(flowc_ctx *ctx, const char *given);
/* Variables and checkpoints (checkpoint.c): rt_init_variables (by create, after the
 * weights) allocates the variables block and fills it with the initial values;
 * rt_variable is variable `name`'s buffer (NULL and a message for an unknown name);
 * save writes a safetensors file through a temporary file renamed over `path`; load
 * checks the file against the variables, reads it into a staging block and only then
 * copies it over the variables (a failure changes nothing). */
FLOWC_HIDDEN int FLOWC_RT(rt_init_variables)(flowc_ctx *ctx);
FLOWC_HIDDEN void *FLOWC_RT(rt_variable)(flowc_ctx *ctx, const char *name);
FLOWC_HIDDEN int FLOWC_RT(rt_save_checkpoint)(flowc_ctx *ctx, const char *path);
FLOWC_HIDDEN int FLOWC_RT(rt_load_checkpoint)(flowc_ctx *ctx, const char *path);
/* JSON (json.c) for the checkpoints' safetensors headers: json_put* append to a text
 * buffer (NUL-terminated; `failed` once out of memory; the caller frees `data`), escaping
 * strings; the reader reads [p, end): json_eat skips white space and one expected char,
 * json_string a string (at most FLOWC_JSON_MAX_STRING bytes of UTF-8), json_integers an
 * array of at most `max` non-negative integers; each returns 0 on a syntax error, which
 * json_syntax records (the first one) in `error`. */
#define FLOWC_JSON_MAX_STRING 1024
typedef struct {
  char *data;
  size_t used, size;
  int failed;
} flowc_text;
typedef struct {
  const char *p, *end;
  const char *error; /* the first syntax error, or NULL */
} flowc_json;
FLOWC_HIDDEN void FLOWC_RT(json_put)(flowc_text *t, const char *s, size_t n);
FLOWC_HIDDEN void FLOWC_RT(json_puts)(flowc_text *t, const char *s);
FLOWC_HIDDEN void FLOWC_RT(json_put_string)(flowc_text *t, const char *s);
FLOWC_HIDDEN void FLOWC_RT(json_ws)(flowc_json *r);
FLOWC_HIDDEN int FLOWC_RT(json_syntax)(flowc_json *r, const char *what);
FLOWC_HIDDEN int FLOWC_RT(json_eat)(flowc_json *r, char c);
FLOWC_HIDDEN int FLOWC_RT(json_string)(flowc_json *r, char *out);
FLOWC_HIDDEN int FLOWC_RT(json_integers)(flowc_json *r, uint64_t *out, int max, int *count);
/* The lock-held body of an entry point: ok (0) when ctx is usable (runtime.c). */
FLOWC_HIDDEN int FLOWC_RT(rt_unusable)(flowc_ctx *ctx);
/* n rounded up to a multiple of FLOWC_ALIGN. */
static inline size_t flowc_round_up(size_t n) {
  return (n + FLOWC_ALIGN - 1) / FLOWC_ALIGN * FLOWC_ALIGN;
}

/* Partitions (partition.c): rt_partitions_create (by create) makes the rendezvous and
 * starts a worker thread per partition after the first (joined by rendezvous_destroy);
 * rt_partitions_sync (by set_threads) gives each worker a pool of the context's thread
 * count; rt_run_partitions runs every partition of ctx->model, partition 0 on the calling
 * thread (with the context's pool), each other one on its worker, and returns when all are
 * done. send/recv are what the generated partition functions call. */
FLOWC_HIDDEN int FLOWC_RT(rt_partitions_create)(flowc_ctx *ctx);
FLOWC_HIDDEN int FLOWC_RT(rt_partitions_sync)(flowc_ctx *ctx);
FLOWC_HIDDEN int FLOWC_RT(rt_run_partitions)(flowc_ctx *ctx);
FLOWC_HIDDEN void FLOWC_RT(rendezvous_destroy)(flowc_rendezvous *rv);
FLOWC_HIDDEN void FLOWC_RT(rt_send)(flowc_rendezvous *rv, int channel, const void *data);
FLOWC_HIDDEN void FLOWC_RT(rt_recv)(flowc_rendezvous *rv, int channel, void *data);

/* GPU partitions (cuda.c) reach the rendezvous through these: rt_recv_wait waits until the
 * channel is full and returns 0 (non-zero when the run failed instead), rt_slot is the
 * channel's staging buffer (NULL for a control channel), rt_send_mark marks the channel
 * full; rt_abort records the run's first failure (status and message) and wakes every
 * waiting recv. */
FLOWC_HIDDEN int FLOWC_RT(rt_recv_wait)(flowc_rendezvous *rv, int channel);
FLOWC_HIDDEN void *FLOWC_RT(rt_slot)(flowc_rendezvous *rv, int channel);
FLOWC_HIDDEN void FLOWC_RT(rt_send_mark)(flowc_rendezvous *rv, int channel);
FLOWC_HIDDEN int FLOWC_RT(rt_abort)(flowc_rendezvous *rv, int status, const char *message);

/* Tasks on MPI ranks (mpi.c; issue [16]). mpi_create (by rt_partitions_create) sets *out
 * to NULL when every partition runs in this process (one task, no MPI, or one rank), else
 * to the transport: this rank runs the partitions mpi_local says, a channel mpi_remote
 * says crosses tasks goes over MPI (mpi_send posts a send from `data`, which must stay
 * untouched until mpi_end_run; mpi_recv waits for the message with a timeout, giving up
 * when rt_run_failed says so), mpi_end_run waits for the run's sends (returns `status`
 * when non-zero), mpi_share_outputs sends each output from the rank that computed it to the
 * others. The failing calls write their message into `message` (or ctx->error). */
typedef struct flowc_mpi flowc_mpi;
FLOWC_HIDDEN int FLOWC_RT(mpi_create)(flowc_ctx *ctx, flowc_mpi **out);
FLOWC_HIDDEN void FLOWC_RT(mpi_destroy)(flowc_mpi *mp);
FLOWC_HIDDEN int FLOWC_RT(mpi_local)(const flowc_mpi *mp, int partition);
FLOWC_HIDDEN int FLOWC_RT(mpi_remote)(const flowc_mpi *mp, int channel);
FLOWC_HIDDEN int FLOWC_RT(mpi_send)(flowc_mpi *mp, int channel, const void *data,
                                    char *message, size_t message_bytes);
FLOWC_HIDDEN int FLOWC_RT(mpi_recv)(flowc_mpi *mp, flowc_rendezvous *rv, int channel,
                                    void *data, char *message, size_t message_bytes);
FLOWC_HIDDEN int FLOWC_RT(mpi_end_run)(flowc_ctx *ctx, flowc_mpi *mp, int status);
FLOWC_HIDDEN int FLOWC_RT(mpi_share_outputs)(flowc_ctx *ctx, flowc_mpi *mp);
/* partition.c: non-zero once the run in progress has failed (rt_abort). */
FLOWC_HIDDEN int FLOWC_RT(rt_run_failed)(flowc_rendezvous *rv);
/* partition.c: after the output copies of a run, the MPI transport's share of outputs (a
 * no-op without one). */
FLOWC_HIDDEN int FLOWC_RT(rt_partitions_finish)(flowc_ctx *ctx);

/* CUDA backend (cuda.c), used only when the model has a GPU program (model->gpu, or a
 * partition's gpu): create after the weights are mapped, run instead of the entry function
 * (whole-model programs) or as the GPU partition's body (cuda_run_partition, errors through
 * rt_abort), destroy (safe on a failed create). cuda_wait_channel makes a host recv of a
 * channel the GPU sends on wait for that copy's event (a no-op for other channels). */
FLOWC_HIDDEN int FLOWC_RT(cuda_create)(flowc_ctx *ctx);
FLOWC_HIDDEN int FLOWC_RT(cuda_run)(flowc_ctx *ctx);
FLOWC_HIDDEN void FLOWC_RT(cuda_run_partition)(flowc_ctx *ctx, const flowc_partition *p);
FLOWC_HIDDEN void FLOWC_RT(cuda_wait_channel)(flowc_ctx *ctx, int channel);
/* Page-locks the staging buffers of the GPU partition's channels (once the rendezvous
 * exists; best effort: a buffer the driver will not lock stays pageable). */
FLOWC_HIDDEN void FLOWC_RT(cuda_pin_channels)(flowc_ctx *ctx);
/* The device time (ms) between the timing events around the last completed run's steps. */
FLOWC_HIDDEN int FLOWC_RT(cuda_device_ms)(flowc_ctx *ctx, double *ms);
FLOWC_HIDDEN void FLOWC_RT(cuda_destroy)(flowc_ctx *ctx);

/* The thread pool (pool.c). pool_run calls fn(arg, tid, n) once on each of the n threads
 * (the caller is thread 0) and returns when all are done; nested calls run on the caller
 * alone. */
typedef void (*flowc_task_fn)(void *arg, int tid, int nthreads);
FLOWC_HIDDEN flowc_pool *FLOWC_RT(pool_create)(int nthreads, char *error, size_t error_bytes);
FLOWC_HIDDEN void FLOWC_RT(pool_destroy)(flowc_pool *pool);
FLOWC_HIDDEN void FLOWC_RT(pool_run)(flowc_pool *pool, flowc_task_fn fn, void *arg);
FLOWC_HIDDEN void FLOWC_RT(pool_enter)(flowc_pool *pool); /* the pool of this thread's run */
FLOWC_HIDDEN void FLOWC_RT(pool_leave)(void);

#endif
