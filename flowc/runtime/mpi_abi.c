/* mpi_abi.c: the MPI library and its ABI's handles, once per process. See mpi_abi.h. */
#include "flowc_rt.h"
#include "mpi_abi.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const KNOWN[] = {"libmpi.so.12", "libmpi.so.40", "libmpi_abi.so.1", NULL};

static flowc_mpi_lib table;
static int failure;      /* FLOWC_MPI_NO_LIBRARY, FLOWC_MPI_MISSING or 0 */
static char detail[512]; /* what failed */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *open_known(int flags) {
  void *lib = NULL;
  for (int i = 0; KNOWN[i] && !lib; i++) lib = dlopen(KNOWN[i], flags);
  return lib;
}

int FLOWC_MPI(flowc_mpi_loaded)(void) {
  void *lib = open_known(RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  if (lib) dlclose(lib);
  return lib != NULL;
}

static void *open_library(void) {
  void *lib = open_known(RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  const char *given = getenv("FLOWC_LIBMPI");
  if (!lib && given && *given) {
    lib = dlopen(given, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) snprintf(detail, sizeof detail, "FLOWC_LIBMPI=%s: %s", given, dlerror());
    return lib;
  }
  if (!lib) lib = open_known(RTLD_NOW | RTLD_GLOBAL);
  if (!lib) snprintf(detail, sizeof detail, "none of libmpi.so.12, libmpi.so.40, "
                     "libmpi_abi.so.1 on the library path; set FLOWC_LIBMPI");
  return lib;
}

#define SYM(field, name)                                                   \
  do {                                                                     \
    *(void **)&table.field = dlsym(table.lib, name);                       \
    if (!table.field) return name;                                         \
  } while (0)
#define HANDLE(field, name)                                                \
  do {                                                                     \
    table.field = (mpi_h)dlsym(table.lib, name);                           \
    if (!table.field) return name;                                         \
  } while (0)

/* Binds the entry points and the ABI's handles; the missing symbol's name, or NULL. */
static const char *bind(void) {
  SYM(Initialized, "MPI_Initialized");
  SYM(Finalized, "MPI_Finalized");
  SYM(Init_thread, "MPI_Init_thread");
  SYM(Finalize, "MPI_Finalize");
  SYM(Comm_rank, "MPI_Comm_rank");
  SYM(Comm_size, "MPI_Comm_size");
  SYM(Comm_dup, "MPI_Comm_dup");
  SYM(Comm_free, "MPI_Comm_free");
  SYM(Isend, "MPI_Isend");
  SYM(Irecv, "MPI_Irecv");
  SYM(Iallreduce, "MPI_Iallreduce");
  SYM(Test, "MPI_Test");
  SYM(Cancel, "MPI_Cancel");
  SYM(Request_free, "MPI_Request_free");
  int (*abi_version)(int *, int *);
  *(void **)&abi_version = dlsym(table.lib, "MPI_Abi_get_version");
  int major = -1, minor = -1;
  if (dlsym(table.lib, "ompi_mpi_comm_world")) {
    table.abi = "Open MPI", table.thread_multiple = 3;
    HANDLE(world, "ompi_mpi_comm_world");
    HANDLE(byte, "ompi_mpi_byte");
    HANDLE(f32, "ompi_mpi_float");
    HANDLE(f64, "ompi_mpi_double");
    HANDLE(i32, "ompi_mpi_int");
    HANDLE(sum, "ompi_mpi_op_sum");
  } else if (abi_version && abi_version(&major, &minor) == 0 && major >= 1) {
    table.abi = "MPI standard ABI", table.thread_multiple = 4096;
    table.world = 0x101, table.byte = 0x247, table.f32 = 0x210, table.f64 = 0x214;
    table.i32 = 0x209, table.sum = 0x21;
  } else {
    table.abi = "MPICH", table.thread_multiple = 3;
    table.world = 0x44000000, table.byte = 0x4c00010d, table.f32 = 0x4c00040a;
    table.f64 = 0x4c00080b, table.i32 = 0x4c000405, table.sum = 0x58000003;
  }
  return NULL;
}

static void load(void) {
  if (!(table.lib = open_library())) {
    failure = FLOWC_MPI_NO_LIBRARY;
    return;
  }
  const char *missing = bind();
  if (missing) {
    failure = FLOWC_MPI_MISSING;
    snprintf(detail, sizeof detail, "%s", missing);
  }
}

const flowc_mpi_lib *FLOWC_MPI(flowc_mpi_open)(int *why, const char **what) {
  pthread_once(&once, load);
  *why = failure, *what = detail;
  return failure ? NULL : &table;
}
