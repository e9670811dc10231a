/* cuda.c: the runtime's CUDA backend, for artifacts whose kernels run on an NVIDIA GPU.
 *
 * Only a model with a GPU program (model->gpu) calls into this file; a CPU-only artifact
 * never loads the driver. cuda_create dlopen()s libcuda.so.1 (or $FLOWC_CUDA_LIBRARY),
 * picks device 0 ($FLOWC_CUDA_DEVICE), loads the image for its compute capability (a cubin
 * of the same major version and at most its minor, else JIT-compiles the PTX, which needs
 * at least its architecture; also when the driver rejects the cubin), allocates one device block (arena, weights, scratch, inputs,
 * outputs), uploads the weights and creates a stream. cuda_run copies the inputs in,
 * launches the kernels in order on the stream, copies the outputs out and synchronizes.
 * Every failure is a status (FLOWC_ERR_DEVICE, or FLOWC_ERR_NOMEM for device memory) with
 * a message: "no CUDA driver", "no CUDA device", "unsupported GPU architecture", "out of
 * device memory", or the driver's own error string.
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
typedef unsigned long long CUdeviceptr;

#define CU_ATTR_CC_MAJOR 75
#define CU_ATTR_CC_MINOR 76
#define CU_OUT_OF_MEMORY 2
#define CU_NO_DEVICE 100

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
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, CUstream, void **, void **);
  CUresult (*GetErrorString)(CUresult, const char **);
} cuda_api;

struct flowc_gpu_ctx {
  cuda_api api;
  CUdevice device;
  CUcontext context;
  CUmodule module;
  CUstream stream;
  CUfunction *functions;
  CUdeviceptr base; /* one block: arena | weights | scratch | inputs | outputs */
  size_t in_at, out_at;
  char arch[16]; /* sm_XY of the device */
};

#define fail FLOWC_RT(rt_fail) /* runtime.c */

static size_t round_up(size_t n) { return (n + FLOWC_ALIGN - 1) / FLOWC_ALIGN * FLOWC_ALIGN; }

/* A failed driver call: FLOWC_ERR_NOMEM for device memory, FLOWC_ERR_DEVICE otherwise. */
static int cu_fail(flowc_ctx *ctx, CUresult r, const char *what) {
  cuda_api *api = &ctx->gpu->api;
  const char *text = NULL;
  if (api->GetErrorString) api->GetErrorString(r, &text);
  if (r == CU_OUT_OF_MEMORY)
    return fail(ctx, FLOWC_ERR_NOMEM, "%s: out of device memory (%s)", ctx->model->name, what);
  return fail(ctx, FLOWC_ERR_DEVICE, "%s: CUDA error %d (%s) in %s", ctx->model->name, r,
              text ? text : "unknown", what);
}

static int load_api(flowc_ctx *ctx) {
  cuda_api *api = &ctx->gpu->api;
  const char *name = getenv("FLOWC_CUDA_LIBRARY");
  if (!name || !*name) name = "libcuda.so.1";
  api->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!api->lib)
    return fail(ctx, FLOWC_ERR_DEVICE, "%s: no CUDA driver (cannot load %s: %s); the model's "
                "kernels run on an NVIDIA GPU", ctx->model->name, name, dlerror());
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
    {(void **)&api->LaunchKernel, "cuLaunchKernel"},
    {(void **)&api->GetErrorString, "cuGetErrorString"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(api->lib, syms[i].sym);
    if (!*syms[i].slot)
      return fail(ctx, FLOWC_ERR_DEVICE, "%s: no CUDA driver (%s lacks %s)", ctx->model->name,
                  name, syms[i].sym);
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

static int open_device(flowc_ctx *ctx) {
  struct flowc_gpu_ctx *gc = ctx->gpu;
  cuda_api *api = &gc->api;
  const flowc_model *m = ctx->model;
  const flowc_gpu_program *g = m->gpu;
  CUresult r = api->Init(0);
  int count = 0;
  if (r == CU_NO_DEVICE || (r == 0 && api->DeviceGetCount(&count) == 0 && count == 0))
    return fail(ctx, FLOWC_ERR_DEVICE, "%s: no CUDA device", m->name);
  if (r) return cu_fail(ctx, r, "cuInit");
  const char *env = getenv("FLOWC_CUDA_DEVICE");
  int ordinal = env && *env ? atoi(env) : 0;
  if (ordinal < 0 || ordinal >= count)
    return fail(ctx, FLOWC_ERR_DEVICE, "%s: no CUDA device %d (%d present)", m->name, ordinal,
                count);
  if ((r = api->DeviceGet(&gc->device, ordinal))) return cu_fail(ctx, r, "cuDeviceGet");
  int major = 0, minor = 0;
  if ((r = api->DeviceGetAttribute(&major, CU_ATTR_CC_MAJOR, gc->device)) ||
      (r = api->DeviceGetAttribute(&minor, CU_ATTR_CC_MINOR, gc->device)))
    return cu_fail(ctx, r, "cuDeviceGetAttribute");
  snprintf(gc->arch, sizeof gc->arch, "sm_%d%d", major, minor);
  int image = pick_image(g, major * 10 + minor);
  if (image < 0) {
    char built[128] = "";
    for (int i = 0; i < g->num_images; i++)
      snprintf(built + strlen(built), sizeof built - strlen(built), "%s%s sm_%d",
               i ? "," : "", g->images[i].is_ptx ? " ptx" : "", g->images[i].arch);
    return fail(ctx, FLOWC_ERR_DEVICE, "%s: unsupported GPU architecture %s: the artifact has"
                "%s; recompile with --gpu-arch %s", m->name, gc->arch, built, gc->arch);
  }
  if ((r = api->PrimaryCtxRetain(&gc->context, gc->device)))
    return cu_fail(ctx, r, "cuDevicePrimaryCtxRetain");
  if ((r = api->CtxSetCurrent(gc->context))) return cu_fail(ctx, r, "cuCtxSetCurrent");
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
    return cu_fail(ctx, r, g->images[image].is_ptx ? "cuModuleLoadData (JIT of the PTX)"
                                                  : "cuModuleLoadData (cubin)");
  gc->functions = calloc((size_t)g->num_functions, sizeof(CUfunction));
  if (!gc->functions) return fail(ctx, FLOWC_ERR_NOMEM, "%s: out of memory", m->name);
  for (int i = 0; i < g->num_functions; i++)
    if ((r = api->ModuleGetFunction(&gc->functions[i], gc->module, g->functions[i])))
      return cu_fail(ctx, r, g->functions[i]);
  return FLOWC_OK;
}

int FLOWC_RT(cuda_create)(flowc_ctx *ctx) {
  const flowc_model *m = ctx->model;
  const flowc_gpu_program *g = m->gpu;
  ctx->gpu = calloc(1, sizeof *ctx->gpu);
  if (!ctx->gpu) return fail(ctx, FLOWC_ERR_NOMEM, "%s: out of memory", m->name);
  int status = load_api(ctx);
  if (status == FLOWC_OK) status = open_device(ctx);
  if (status) return status;
  struct flowc_gpu_ctx *gc = ctx->gpu;
  cuda_api *api = &gc->api;
  size_t at = round_up(m->arena_bytes) + round_up(m->weights_bytes) + round_up(g->scratch_bytes);
  gc->in_at = at;
  for (int i = 0; i < m->num_inputs; i++) at += round_up(m->inputs[i].bytes);
  gc->out_at = at;
  for (int i = 0; i < m->num_outputs; i++) at += round_up(m->outputs[i].bytes);
  CUresult r = api->MemAlloc(&gc->base, at ? at : FLOWC_ALIGN);
  if (r == CU_OUT_OF_MEMORY)
    return fail(ctx, FLOWC_ERR_NOMEM, "%s: out of device memory allocating %zu bytes on %s",
                m->name, at, gc->arch);
  if (r) return cu_fail(ctx, r, "cuMemAlloc");
  if ((r = api->StreamCreate(&gc->stream, 0))) return cu_fail(ctx, r, "cuStreamCreate");
  if (m->weights_bytes &&
      (r = api->MemcpyHtoDAsync(gc->base + round_up(m->arena_bytes), ctx->weights,
                                m->weights_bytes, gc->stream)))
    return cu_fail(ctx, r, "uploading the weights");
  if ((r = api->StreamSynchronize(gc->stream))) return cu_fail(ctx, r, "uploading the weights");
  return FLOWC_OK;
}

/* The device address of a kernel argument. */
static CUdeviceptr where(const flowc_ctx *ctx, const flowc_gpu_arg *a) {
  const struct flowc_gpu_ctx *gc = ctx->gpu;
  const flowc_model *m = ctx->model;
  size_t weights_at = round_up(m->arena_bytes);
  size_t scratch_at = weights_at + round_up(m->weights_bytes);
  size_t at = 0;
  switch (a->kind) {
  case FLOWC_GPU_ARENA: at = a->at; break;
  case FLOWC_GPU_WEIGHT: at = weights_at + a->at; break;
  case FLOWC_GPU_SCRATCH: at = scratch_at + a->at; break;
  case FLOWC_GPU_INPUT:
    at = gc->in_at;
    for (size_t i = 0; i < a->at; i++) at += round_up(m->inputs[i].bytes);
    break;
  default:
    at = gc->out_at;
    for (size_t i = 0; i < a->at; i++) at += round_up(m->outputs[i].bytes);
  }
  return gc->base + at;
}

int FLOWC_RT(cuda_run)(flowc_ctx *ctx) {
  struct flowc_gpu_ctx *gc = ctx->gpu;
  cuda_api *api = &gc->api;
  const flowc_model *m = ctx->model;
  const flowc_gpu_program *g = m->gpu;
  CUresult r;
  if ((r = api->CtxSetCurrent(gc->context))) return cu_fail(ctx, r, "cuCtxSetCurrent");
  for (int i = 0; i < m->num_inputs; i++) {
    flowc_gpu_arg a = {FLOWC_GPU_INPUT, (size_t)i};
    if ((r = api->MemcpyHtoDAsync(where(ctx, &a), ctx->inputs[i], m->inputs[i].bytes,
                                  gc->stream)))
      return cu_fail(ctx, r, "copying an input to the device");
  }
  CUdeviceptr ptrs[64];
  void *params[64];
  for (int k = 0; k < g->num_launches; k++) {
    const flowc_gpu_launch *l = &g->launches[k];
    if (l->num_args > 64) return fail(ctx, FLOWC_ERR_DEVICE, "%s: too many kernel arguments",
                                      m->name);
    for (int j = 0; j < l->num_args; j++) {
      ptrs[j] = where(ctx, &l->args[j]);
      params[j] = &ptrs[j];
    }
    if ((r = api->LaunchKernel(gc->functions[l->function], l->grid, 1, 1, l->block, 1, 1, 0,
                               gc->stream, params, NULL)))
      return cu_fail(ctx, r, g->functions[l->function]);
  }
  for (int j = 0; j < m->num_outputs; j++)
    if ((r = api->MemcpyDtoHAsync(ctx->outputs[j], where(ctx, &g->results[j]),
                                  m->outputs[j].bytes, gc->stream)))
      return cu_fail(ctx, r, "copying an output from the device");
  if ((r = api->StreamSynchronize(gc->stream))) return cu_fail(ctx, r, "running the kernels");
  return FLOWC_OK;
}

void FLOWC_RT(cuda_destroy)(flowc_ctx *ctx) {
  struct flowc_gpu_ctx *gc = ctx->gpu;
  if (!gc) return;
  cuda_api *api = &gc->api;
  if (gc->context) api->CtxSetCurrent(gc->context);
  if (gc->stream) api->StreamDestroy(gc->stream);
  if (gc->base) api->MemFree(gc->base);
  if (gc->module) api->ModuleUnload(gc->module);
  if (gc->context) api->PrimaryCtxRelease(gc->device);
  if (api->lib) dlclose(api->lib);
  free(gc->functions);
  free(gc);
  ctx->gpu = NULL;
}
