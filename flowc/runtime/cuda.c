/* cuda.c: the runtime's CUDA backend, for artifacts whose kernels run (wholly or in part)
 * on an NVIDIA GPU.
 *
 * Only a model with a GPU program (model->gpu: every kernel; or a partition's gpu: one
 * partition of a mixed CPU+GPU model) calls into this file; a CPU-only artifact never
 * loads the driver. cuda_create dlopen()s libcuda.so.1 (or $FLOWC_CUDA_LIBRARY), picks
 * the device ($FLOWC_CUDA_DEVICE, else N of a partition's gpu:N, else 0), loads the image
 * for its compute capability (a cubin of the same major version and at most its minor,
 * else JIT-compiles the PTX, which needs at least its architecture; also when the driver
 * rejects the cubin), allocates one device block (arena, the weights the kernels read,
 * scratch, the inputs and outputs that live on the device), uploads the weights, creates
 * a stream and, for a partition, one event per channel it sends on.
 * A run copies the inputs in, then runs the steps in order on the stream: launches, and
 * for a partition its transfers (a recv waits for the channel's host buffer and copies it
 * in with cuMemcpyHtoDAsync; a send copies out with cuMemcpyDtoHAsync, records the
 * channel's event and marks the channel full at once: the host recv waits on the event,
 * cuda_wait_channel), copies the outputs out and synchronizes the stream. Two timing
 * events bracket the steps (after the input copies, before the output copies):
 * cuda_device_ms is the device time between them in the last completed run (for a
 * partition it includes the waits for the CPU partitions' sends). The context's
 * own input/output buffers are page-locked (cuMemHostRegister) at create, the staging
 * buffers of its channels when the rendezvous is made, so those copies are asynchronous
 * (a buffer the driver will not lock, or a caller's own buffer, stays pageable: the copy
 * is then synchronous, still correct).
 * Every failure is a status (FLOWC_ERR_DEVICE, or FLOWC_ERR_NOMEM for device memory) with
 * a message naming the model (and the partition: "NAME: partition gpu:0: ..."): "no CUDA
 * driver", "no CUDA device", "unsupported GPU architecture", "out of device memory", or
 * the driver's own error string with the kernel's graph nodes or the channel's key.
 *
 * The driver API is declared here (no CUDA headers needed): the few functions used, with
 * the _v2 entry points the driver exports for the 64-bit API.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowc_rt.h"

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;

#define CU_ATTR_CC_MAJOR 75
#define CU_ATTR_CC_MINOR 76
#define CU_OUT_OF_MEMORY 2
#define CU_NO_DEVICE 100
#define CU_EVENT_DISABLE_TIMING 2

typedef struct {
  void *lib;
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*PrimaryCtxRelease)(CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*MemHostRegister)(void *, size_t, unsigned);
  CUresult (*MemHostUnregister)(void *);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, CUstream, void **, void **);
  CUresult (*GetErrorString)(CUresult, const char **);
} cuda_api;

struct flowc_gpu_ctx {
  cuda_api api;
  const flowc_gpu_program *program; /* the model's, or its GPU partition's */
  const char *device_name;          /* gpu:N of the partition, or NULL */
  CUdevice device;
  CUcontext context;
  CUmodule module;
  CUstream stream;
  CUfunction *functions;
  CUevent *events;  /* per channel: the event a send of this program records, or NULL */
  void **pinned;    /* per channel: its staging buffer, when page-locked (cuda_pin_channels) */
  void *pinned_io;  /* the context's own input/output buffers, when page-locked */
  CUevent span[2];  /* timing events around the steps of a run (cuda_device_ms) */
  int timed;        /* a run recorded both since create */
  CUdeviceptr base; /* one block: arena | weights span | scratch | inputs | outputs */
  size_t weights_at, scratch_at, in_at, out_at;
  char who[128];    /* "NAME" or "NAME: partition gpu:0", heading every message */
  char arch[16];    /* sm_XY of the device */
  char error[FLOWC_ERROR_BYTES]; /* this backend's last failure (its own buffer: during a
                                   run the GPU partition's thread reports through rt_abort,
                                   which copies it into ctx->error once) */
};

static size_t round_up(size_t n) { return (n + FLOWC_ALIGN - 1) / FLOWC_ALIGN * FLOWC_ALIGN; }

static int gfail(struct flowc_gpu_ctx *gc, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(gc->error, sizeof gc->error, fmt, ap);
  va_end(ap);
  return status;
}

/* The message of a failed driver call in buf: FLOWC_ERR_NOMEM for device memory,
 * FLOWC_ERR_DEVICE otherwise. */
static int cu_format(const struct flowc_gpu_ctx *gc, char *buf, size_t size, CUresult r,
                     const char *what) {
  const char *text = NULL;
  if (gc->api.GetErrorString) gc->api.GetErrorString(r, &text);
  if (r == CU_OUT_OF_MEMORY) {
    snprintf(buf, size, "%s: out of device memory (%s)", gc->who, what);
    return FLOWC_ERR_NOMEM;
  }
  snprintf(buf, size, "%s: CUDA error %d (%s) in %s", gc->who, r, text ? text : "unknown",
           what);
  return FLOWC_ERR_DEVICE;
}

static int cu_fail(struct flowc_gpu_ctx *gc, CUresult r, const char *what) {
  return cu_format(gc, gc->error, sizeof gc->error, r, what);
}

static int load_api(struct flowc_gpu_ctx *gc) {
  cuda_api *api = &gc->api;
  const char *name = getenv("FLOWC_CUDA_LIBRARY");
  if (!name || !*name) name = "libcuda.so.1";
  api->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!api->lib)
    return gfail(gc, FLOWC_ERR_DEVICE, "%s: no CUDA driver (cannot load %s: %s); the model's "
                 "kernels run on an NVIDIA GPU", gc->who, name, dlerror());
  struct { void **slot; const char *sym; } syms[] = {
    {(void **)&api->Init, "cuInit"},
    {(void **)&api->DeviceGetCount, "cuDeviceGetCount"},
    {(void **)&api->DeviceGet, "cuDeviceGet"},
    {(void **)&api->DeviceGetAttribute, "cuDeviceGetAttribute"},
    {(void **)&api->PrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
    {(void **)&api->PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
    {(void **)&api->CtxSetCurrent, "cuCtxSetCurrent"},
    {(void **)&api->ModuleLoadData, "cuModuleLoadData"},
    {(void **)&api->ModuleUnload, "cuModuleUnload"},
    {(void **)&api->ModuleGetFunction, "cuModuleGetFunction"},
    {(void **)&api->MemAlloc, "cuMemAlloc_v2"},
    {(void **)&api->MemFree, "cuMemFree_v2"},
    {(void **)&api->MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
    {(void **)&api->MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
    {(void **)&api->MemsetD8Async, "cuMemsetD8Async"},
    {(void **)&api->StreamCreate, "cuStreamCreate"},
    {(void **)&api->StreamDestroy, "cuStreamDestroy_v2"},
    {(void **)&api->StreamSynchronize, "cuStreamSynchronize"},
    {(void **)&api->EventCreate, "cuEventCreate"},
    {(void **)&api->EventDestroy, "cuEventDestroy_v2"},
    {(void **)&api->EventRecord, "cuEventRecord"},
    {(void **)&api->EventSynchronize, "cuEventSynchronize"},
    {(void **)&api->EventElapsedTime, "cuEventElapsedTime"},
    {(void **)&api->MemHostRegister, "cuMemHostRegister_v2"},
    {(void **)&api->MemHostUnregister, "cuMemHostUnregister"},
    {(void **)&api->LaunchKernel, "cuLaunchKernel"},
    {(void **)&api->GetErrorString, "cuGetErrorString"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(api->lib, syms[i].sym);
    if (!*syms[i].slot)
      return gfail(gc, FLOWC_ERR_DEVICE, "%s: no CUDA driver (%s lacks %s)", gc->who, name,
                   syms[i].sym);
  }
  return FLOWC_OK;
}

/* The image for an sm_<cc> device: a cubin of the same major and the highest minor not
 * above the device's, else the PTX (JIT) when its architecture is not above the device's;
 * -1 when none fits. */
static int pick_image(const flowc_gpu_program *g, int cc) {
  int best = -1, best_cc = -1;
  for (int i = 0; i < g->num_images; i++) {
    int arch = g->images[i].arch;
    if (!g->images[i].is_ptx && arch / 10 == cc / 10 && arch <= cc && arch > best_cc) {
      best = i;
      best_cc = arch;
    }
  }
  if (best >= 0) return best;
  for (int i = 0; i < g->num_images; i++)
    if (g->images[i].is_ptx && g->images[i].arch <= cc) return i;
  return -1;
}

/* The device ordinal: $FLOWC_CUDA_DEVICE, else N of the partition's gpu:N, else 0. */
static int ordinal(const struct flowc_gpu_ctx *gc) {
  const char *env = getenv("FLOWC_CUDA_DEVICE");
  if (env && *env) return atoi(env);
  const char *colon = gc->device_name ? strrchr(gc->device_name, ':') : NULL;
  return colon ? atoi(colon + 1) : 0;
}

static int open_device(struct flowc_gpu_ctx *gc) {
  cuda_api *api = &gc->api;
  const flowc_gpu_program *g = gc->program;
  CUresult r = api->Init(0);
  int count = 0;
  if (r == CU_NO_DEVICE || (r == 0 && api->DeviceGetCount(&count) == 0 && count == 0))
    return gfail(gc, FLOWC_ERR_DEVICE, "%s: no CUDA device", gc->who);
  if (r) return cu_fail(gc, r, "cuInit");
  int index = ordinal(gc);
  if (index < 0 || index >= count)
    return gfail(gc, FLOWC_ERR_DEVICE, "%s: no CUDA device %d (%d present)", gc->who, index,
                 count);
  if ((r = api->DeviceGet(&gc->device, index))) return cu_fail(gc, r, "cuDeviceGet");
  int major = 0, minor = 0;
  if ((r = api->DeviceGetAttribute(&major, CU_ATTR_CC_MAJOR, gc->device)) ||
      (r = api->DeviceGetAttribute(&minor, CU_ATTR_CC_MINOR, gc->device)))
    return cu_fail(gc, r, "cuDeviceGetAttribute");
  snprintf(gc->arch, sizeof gc->arch, "sm_%d%d", major, minor);
  int image = pick_image(g, major * 10 + minor);
  if (image < 0) {
    char built[128] = "";
    for (int i = 0; i < g->num_images; i++)
      snprintf(built + strlen(built), sizeof built - strlen(built), "%s%s sm_%d",
               i ? "," : "", g->images[i].is_ptx ? " ptx" : "", g->images[i].arch);
    return gfail(gc, FLOWC_ERR_DEVICE, "%s: unsupported GPU architecture %s: the artifact has"
                 "%s; recompile with --gpu-arch %s", gc->who, gc->arch, built, gc->arch);
  }
  if ((r = api->PrimaryCtxRetain(&gc->context, gc->device)))
    return cu_fail(gc, r, "cuDevicePrimaryCtxRetain");
  if ((r = api->CtxSetCurrent(gc->context))) return cu_fail(gc, r, "cuCtxSetCurrent");
  r = api->ModuleLoadData(&gc->module, g->images[image].data);
  if (r && !g->images[image].is_ptx) { /* a driver older than the ptxas: JIT the PTX */
    for (int i = 0; i < g->num_images; i++)
      if (g->images[i].is_ptx && g->images[i].arch <= major * 10 + minor) {
        image = i;
        r = api->ModuleLoadData(&gc->module, g->images[i].data);
        break;
      }
  }
  if (r)
    return cu_fail(gc, r, g->images[image].is_ptx ? "cuModuleLoadData (JIT of the PTX)"
                                                 : "cuModuleLoadData (cubin)");
  gc->functions = calloc((size_t)g->num_functions, sizeof(CUfunction));
  if (!gc->functions) return gfail(gc, FLOWC_ERR_NOMEM, "%s: out of memory", gc->who);
  for (int i = 0; i < g->num_functions; i++)
    if ((r = api->ModuleGetFunction(&gc->functions[i], gc->module, g->functions[i])))
      return cu_fail(gc, r, g->functions[i]);
  return FLOWC_OK;
}

static int on_device(const flowc_gpu_program *g, int i) { return !g->on_device || g->on_device[i]; }

/* Lays out the device block, allocates it, uploads the weights span, creates the stream,
 * the events of the program's sends, then the two timing events. */
static int allocate(flowc_ctx *ctx, struct flowc_gpu_ctx *gc) {
  const flowc_model *m = ctx->model;
  const flowc_gpu_program *g = gc->program;
  cuda_api *api = &gc->api;
  size_t at = round_up(g->arena_bytes);
  gc->weights_at = at;
  at += round_up(g->weights_bytes);
  gc->scratch_at = at;
  at += round_up(g->scratch_bytes);
  gc->in_at = at;
  for (int i = 0; i < m->num_inputs; i++)
    if (on_device(g, i)) at += round_up(m->inputs[i].bytes);
  gc->out_at = at;
  for (int j = 0; j < m->num_outputs; j++)
    if (on_device(g, m->num_inputs + j)) at += round_up(m->outputs[j].bytes);
  CUresult r = api->MemAlloc(&gc->base, at ? at : FLOWC_ALIGN);
  if (r == CU_OUT_OF_MEMORY)
    return gfail(gc, FLOWC_ERR_NOMEM, "%s: out of device memory allocating %zu bytes on %s",
                 gc->who, at, gc->arch);
  if (r) return cu_fail(gc, r, "cuMemAlloc");
  if ((r = api->StreamCreate(&gc->stream, 0))) return cu_fail(gc, r, "cuStreamCreate");
  if (g->num_steps) {
    gc->events = calloc((size_t)m->num_channels + 1, sizeof(CUevent));
    if (!gc->events) return gfail(gc, FLOWC_ERR_NOMEM, "%s: out of memory", gc->who);
    for (int k = 0; k < g->num_steps; k++)
      if (g->steps[k].op == FLOWC_GPU_SEND &&
          (r = api->EventCreate(&gc->events[g->steps[k].index], CU_EVENT_DISABLE_TIMING)))
        return cu_fail(gc, r, "cuEventCreate");
  }
  for (int k = 0; k < 2; k++)
    if ((r = api->EventCreate(&gc->span[k], 0))) return cu_fail(gc, r, "cuEventCreate");
  size_t io = 0; /* page-lock the context's own input/output buffers (best effort) */
  for (int i = 0; i < m->num_inputs; i++) io += round_up(m->inputs[i].bytes);
  for (int j = 0; j < m->num_outputs; j++) io += round_up(m->outputs[j].bytes);
  if (io && api->MemHostRegister(ctx->owned, io, 0) == 0) gc->pinned_io = ctx->owned;
  if (g->weights_bytes &&
      (r = api->MemcpyHtoDAsync(gc->base + gc->weights_at, ctx->weights + g->weights_offset,
                                g->weights_bytes, gc->stream)))
    return cu_fail(gc, r, "uploading the weights");
  if ((r = api->StreamSynchronize(gc->stream))) return cu_fail(gc, r, "uploading the weights");
  return FLOWC_OK;
}

int FLOWC_RT(cuda_create)(flowc_ctx *ctx) {
  const flowc_model *m = ctx->model;
  struct flowc_gpu_ctx *gc = ctx->gpu = calloc(1, sizeof *ctx->gpu);
  if (!gc) return FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_NOMEM, "%s: out of memory", m->name);
  gc->program = m->gpu;
  snprintf(gc->who, sizeof gc->who, "%s", m->name);
  for (int i = 0; !gc->program && i < m->num_partitions; i++)
    if (m->partitions[i].gpu) {
      gc->program = m->partitions[i].gpu;
      gc->device_name = m->partitions[i].device;
      snprintf(gc->who, sizeof gc->who, "%s: partition %s", m->name, gc->device_name);
    }
  int status = load_api(gc);
  if (status == FLOWC_OK) status = open_device(gc);
  if (status == FLOWC_OK) status = allocate(ctx, gc);
  if (status) FLOWC_RT(rt_fail)(ctx, status, "%s", gc->error);
  return status;
}

/* The device address of a kernel argument. */
static CUdeviceptr where(const flowc_ctx *ctx, const flowc_gpu_arg *a) {
  const struct flowc_gpu_ctx *gc = ctx->gpu;
  const flowc_gpu_program *g = gc->program;
  const flowc_model *m = ctx->model;
  size_t at = 0;
  switch (a->kind) {
  case FLOWC_GPU_ARENA: at = a->at; break;
  case FLOWC_GPU_WEIGHT: at = gc->weights_at + a->at - g->weights_offset; break;
  case FLOWC_GPU_SCRATCH: at = gc->scratch_at + a->at; break;
  case FLOWC_GPU_INPUT:
    at = gc->in_at;
    for (size_t i = 0; i < a->at; i++)
      if (on_device(g, (int)i)) at += round_up(m->inputs[i].bytes);
    break;
  default:
    at = gc->out_at;
    for (size_t j = 0; j < a->at; j++)
      if (on_device(g, m->num_inputs + (int)j)) at += round_up(m->outputs[j].bytes);
  }
  return gc->base + at;
}

static int launch(flowc_ctx *ctx, const flowc_gpu_launch *l) {
  struct flowc_gpu_ctx *gc = ctx->gpu;
  const char *fn = gc->program->functions[l->function];
  CUdeviceptr ptrs[64];
  void *params[64];
  if (l->num_args > 64)
    return gfail(gc, FLOWC_ERR_DEVICE, "%s: %s (%s) has %d arguments, more than 64", gc->who,
                 fn, l->nodes, l->num_args);
  for (int j = 0; j < l->num_args; j++) {
    ptrs[j] = where(ctx, &l->args[j]);
    params[j] = &ptrs[j];
  }
  CUresult r = gc->api.LaunchKernel(gc->functions[l->function], l->grid, 1, 1, l->block, 1, 1,
                                    0, gc->stream, params, NULL);
  if (!r) return FLOWC_OK;
  char what[FLOWC_ERROR_BYTES / 2];
  snprintf(what, sizeof what, "launching %s (nodes %s)", fn, l->nodes);
  return cu_fail(gc, r, what);
}

/* One transfer step of a partition; -1 when the run already failed elsewhere. */
static int transfer(flowc_ctx *ctx, const flowc_gpu_step *s) {
  struct flowc_gpu_ctx *gc = ctx->gpu;
  cuda_api *api = &gc->api;
  flowc_rendezvous *rv = ctx->rendezvous;
  const flowc_channel *ch = &ctx->model->channels[s->index];
  char what[FLOWC_ERROR_BYTES / 2];
  CUresult r = 0;
  if (s->op == FLOWC_GPU_RECV) {
    if (FLOWC_RT(rt_recv_wait)(rv, s->index)) return -1;
    if (ch->bytes && (r = api->MemcpyHtoDAsync(where(ctx, &s->buf),
                                               FLOWC_RT(rt_slot)(rv, s->index), ch->bytes,
                                               gc->stream))) {
      snprintf(what, sizeof what, "copying channel %s to the device", ch->key);
      return cu_fail(gc, r, what);
    }
    return FLOWC_OK;
  }
  if (ch->bytes && (r = api->MemcpyDtoHAsync(FLOWC_RT(rt_slot)(rv, s->index),
                                             where(ctx, &s->buf), ch->bytes, gc->stream))) {
    snprintf(what, sizeof what, "copying channel %s from the device", ch->key);
    return cu_fail(gc, r, what);
  }
  if ((r = api->EventRecord(gc->events[s->index], gc->stream))) {
    snprintf(what, sizeof what, "recording the event of channel %s", ch->key);
    return cu_fail(gc, r, what);
  }
  FLOWC_RT(rt_send_mark)(rv, s->index);
  return FLOWC_OK;
}

/* Inputs in, the steps (or the launches) in order, outputs out, synchronize. */
static int run_program(flowc_ctx *ctx) {
  struct flowc_gpu_ctx *gc = ctx->gpu;
  cuda_api *api = &gc->api;
  const flowc_model *m = ctx->model;
  const flowc_gpu_program *g = gc->program;
  CUresult r;
  if ((r = api->CtxSetCurrent(gc->context))) return cu_fail(gc, r, "cuCtxSetCurrent");
  for (int i = 0; i < m->num_inputs; i++) {
    flowc_gpu_arg a = {FLOWC_GPU_INPUT, (size_t)i};
    if (on_device(g, i) && (r = api->MemcpyHtoDAsync(where(ctx, &a), ctx->inputs[i],
                                                     m->inputs[i].bytes, gc->stream)))
      return cu_fail(gc, r, "copying an input to the device");
  }
  gc->timed = 0;
  if ((r = api->EventRecord(gc->span[0], gc->stream))) return cu_fail(gc, r, "cuEventRecord");
  int n = g->num_steps ? g->num_steps : g->num_launches;
  for (int k = 0; k < n; k++) {
    flowc_gpu_step s = g->num_steps ? g->steps[k] : (flowc_gpu_step){FLOWC_GPU_LAUNCH, k, {0, 0}};
    int status = s.op == FLOWC_GPU_LAUNCH ? launch(ctx, &g->launches[s.index])
                                          : transfer(ctx, &s);
    if (status) return status;
  }
  if ((r = api->EventRecord(gc->span[1], gc->stream))) return cu_fail(gc, r, "cuEventRecord");
  for (int j = 0; j < m->num_outputs; j++)
    if (g->results[j].kind != FLOWC_GPU_NONE &&
        (r = api->MemcpyDtoHAsync(ctx->outputs[j], where(ctx, &g->results[j]),
                                  m->outputs[j].bytes, gc->stream)))
      return cu_fail(gc, r, "copying an output from the device");
  if ((r = api->StreamSynchronize(gc->stream))) return cu_fail(gc, r, "running the kernels");
  gc->timed = 1;
  return FLOWC_OK;
}

int FLOWC_RT(cuda_device_ms)(flowc_ctx *ctx, double *ms) {
  struct flowc_gpu_ctx *gc = ctx->gpu;
  float t = 0;
  if (!gc->timed)
    return FLOWC_RT(rt_fail)(ctx, FLOWC_ERR_ARGUMENT, "%s: no device time: no run completed "
                             "since create", gc->who);
  CUresult r = gc->api.CtxSetCurrent(gc->context);
  if (!r) r = gc->api.EventElapsedTime(&t, gc->span[0], gc->span[1]);
  if (r) {
    int status = cu_fail(gc, r, "cuEventElapsedTime");
    return FLOWC_RT(rt_fail)(ctx, status, "%s", gc->error);
  }
  *ms = t;
  return FLOWC_OK;
}

int FLOWC_RT(cuda_run)(flowc_ctx *ctx) {
  int status = run_program(ctx);
  if (status) FLOWC_RT(rt_fail)(ctx, status, "%s", ctx->gpu->error);
  return status;
}

void FLOWC_RT(cuda_run_partition)(flowc_ctx *ctx, const flowc_partition *p) {
  (void)p; /* the context holds the one GPU partition's program */
  int status = run_program(ctx);
  if (status == 0) return;
  ctx->gpu->api.StreamSynchronize(ctx->gpu->stream); /* nothing in flight after a failure */
  if (status > 0) FLOWC_RT(rt_abort)(ctx->rendezvous, status, ctx->gpu->error);
}

void FLOWC_RT(cuda_pin_channels)(flowc_ctx *ctx) {
  struct flowc_gpu_ctx *gc = ctx->gpu;
  const flowc_gpu_program *g = gc->program;
  if (!g->num_steps || gc->pinned) return;
  gc->pinned = calloc((size_t)ctx->model->num_channels + 1, sizeof(void *));
  if (!gc->pinned || gc->api.CtxSetCurrent(gc->context)) return;
  for (int k = 0; k < g->num_steps; k++) {
    int ch = g->steps[k].index;
    size_t bytes = ctx->model->channels[ch].bytes;
    void *slot = FLOWC_RT(rt_slot)(ctx->rendezvous, ch);
    if (g->steps[k].op != FLOWC_GPU_LAUNCH && bytes && !gc->pinned[ch] &&
        gc->api.MemHostRegister(slot, bytes, 0) == 0)
      gc->pinned[ch] = slot;
  }
}

void FLOWC_RT(cuda_wait_channel)(flowc_ctx *ctx, int channel) {
  struct flowc_gpu_ctx *gc = ctx->gpu;
  if (!gc->events || !gc->events[channel]) return;
  CUresult r = gc->api.CtxSetCurrent(gc->context);
  if (!r) r = gc->api.EventSynchronize(gc->events[channel]);
  if (!r) return;
  char what[FLOWC_ERROR_BYTES / 2], message[FLOWC_ERROR_BYTES];
  snprintf(what, sizeof what, "waiting for channel %s", ctx->model->channels[channel].key);
  int status = cu_format(gc, message, sizeof message, r, what);
  FLOWC_RT(rt_abort)(ctx->rendezvous, status, message);
}

void FLOWC_RT(cuda_destroy)(flowc_ctx *ctx) {
  struct flowc_gpu_ctx *gc = ctx->gpu;
  if (!gc) return;
  cuda_api *api = &gc->api;
  if (gc->context) api->CtxSetCurrent(gc->context);
  for (int k = 0; gc->events && k < ctx->model->num_channels; k++)
    if (gc->events[k]) api->EventDestroy(gc->events[k]);
  for (int k = 0; gc->pinned && k < ctx->model->num_channels; k++)
    if (gc->pinned[k]) api->MemHostUnregister(gc->pinned[k]);
  if (gc->pinned_io) api->MemHostUnregister(gc->pinned_io);
  for (int k = 0; k < 2; k++)
    if (gc->span[k]) api->EventDestroy(gc->span[k]);
  if (gc->stream) api->StreamDestroy(gc->stream);
  if (gc->base) api->MemFree(gc->base);
  if (gc->module) api->ModuleUnload(gc->module);
  if (gc->context) api->PrimaryCtxRelease(gc->device);
  if (api->lib) dlclose(api->lib);
  free(gc->functions);
  free(gc->events);
  free(gc->pinned);
  free(gc);
  ctx->gpu = NULL;
}
