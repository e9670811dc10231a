/* The OpenMP entry points that parallel flowc kernels call (`__kmpc_fork_call`, `__kmpc_flowc_threads`,
 * `__kmpc_dispatch_init/next_*` and a few more), run serially on the calling thread.
 * Artifacts never use this file: their runtime (pool.c) serves these entry points with its thread pool, under the artifact's prefix. It
 * is for linking bare kernel objects from `flowc.codegen.cpu.compiler.compile_kernels` on their
 * own: the kernel tests and the kernel benchmarks. */
#include <stdarg.h>
#include <stdint.h>
typedef void (*micro)(int32_t *, int32_t *, ...);
void __kmpc_fork_call(void *loc, int32_t argc, micro fn, ...) {
  void *a[16] = {0};
  va_list ap;
  va_start(ap, fn);
  for (int k = 0; k < argc && k < 16; k++) a[k] = va_arg(ap, void *);
  va_end(ap);
  int32_t gtid = 0, btid = 0;
  fn(&gtid, &btid, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
     a[11], a[12], a[13], a[14], a[15]);
}
int32_t __kmpc_global_thread_num(void *loc) { return 0; }
int32_t __kmpc_flowc_threads(void) { return 1; }
#define STATIC_INIT(SUFFIX, T) \
  void __kmpc_for_static_init_##SUFFIX(void *loc, int32_t gtid, int32_t sched, \
      int32_t *last, T *lower, T *upper, T *stride, T incr, T chunk) { \
    *last = 1; *stride = *upper - *lower + 1; }
STATIC_INIT(4, int32_t)
STATIC_INIT(4u, uint32_t)
STATIC_INIT(8, int64_t)
STATIC_INIT(8u, uint64_t)
void __kmpc_for_static_fini(void *loc, int32_t gtid) {}
/* Dynamic loops: the whole range, once. */
static __thread struct { int64_t lower, upper, incr; int served; } dyn;
#define DISPATCH(SUFFIX, T) \
  void __kmpc_dispatch_init_##SUFFIX(void *loc, int32_t gtid, int32_t sched, T lower, \
      T upper, T incr, T chunk) { \
    dyn.lower = (int64_t)lower; dyn.upper = (int64_t)upper; dyn.incr = (int64_t)incr; \
    dyn.served = 0; } \
  int32_t __kmpc_dispatch_next_##SUFFIX(void *loc, int32_t gtid, int32_t *last, T *lower, \
      T *upper, T *stride) { \
    if (dyn.served) return 0; \
    dyn.served = 1; *lower = (T)dyn.lower; *upper = (T)dyn.upper; *stride = (T)dyn.incr; \
    *last = 1; \
    return dyn.incr > 0 ? dyn.lower <= dyn.upper : dyn.lower >= dyn.upper; }
DISPATCH(4, int32_t)
DISPATCH(4u, uint32_t)
DISPATCH(8, int64_t)
DISPATCH(8u, uint64_t)
void __kmpc_barrier(void *loc, int32_t gtid) {}
