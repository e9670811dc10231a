/* mpi_abi.h: the MPI library, found and bound once per process (mpi_abi.c), for the
 * runtime's channels between tasks (mpi.c) and the all_reduce op's halves (allreduce.c).
 * Nothing links MPI.
 *
 * flowc_mpi_loaded says whether a known MPI library (libmpi.so.12, libmpi.so.40,
 * libmpi_abi.so.1) is already loaded in the process. flowc_mpi_open (thread-safe; the
 * first call decides for the process) dlopen()s one already loaded, else $FLOWC_LIBMPI,
 * else those names on the search path; binds the functions below; and tells the three
 * ABIs' handles apart: Open MPI exports ompi_mpi_comm_world (handles are addresses of
 * exported objects), the MPI-5 standard ABI answers MPI_Abi_get_version with a major
 * version >= 1 (small integer handles: MPI_COMM_WORLD 0x101, MPI_BYTE 0x247), MPICH's
 * classic ABI otherwise (int handles: 0x44000000, 0x4c00010d). Handles are passed as
 * intptr_t (an int handle reaches the callee in the same register); requests and statuses
 * are written into 64-bit and 64-byte slots, big enough for each ABI's. It returns the
 * table, or NULL with *why set to FLOWC_MPI_NO_LIBRARY (*detail: what was tried) or
 * FLOWC_MPI_MISSING (*detail: the missing symbol's name).
 *
 * The runtime's objects (compiled with FLOWC_PREFIX) define the functions hidden, with
 * the model's prefix, and call them so (FLOWC_MPI). */
#ifndef FLOWC_MPI_ABI_H
#define FLOWC_MPI_ABI_H
#include <stdint.h>

#define FLOWC_MPI_CAT2(a, b) a##b
#define FLOWC_MPI_CAT(a, b) FLOWC_MPI_CAT2(a, b)
#ifdef FLOWC_PREFIX
#define FLOWC_MPI(name) FLOWC_MPI_CAT(FLOWC_PREFIX, name)
#else
#define FLOWC_MPI(name) name
#endif

typedef intptr_t mpi_h;
typedef struct { int64_t words[8]; } mpi_status;

typedef struct flowc_mpi_lib {
  void *lib;
  const char *abi; /* "Open MPI", "MPI standard ABI" or "MPICH" */
  int (*Initialized)(int *);
  int (*Finalized)(int *);
  int (*Init_thread)(int *, char ***, int, int *);
  int (*Finalize)(void);
  int (*Comm_rank)(mpi_h, int *);
  int (*Comm_size)(mpi_h, int *);
  int (*Comm_dup)(mpi_h, mpi_h *);
  int (*Comm_free)(mpi_h *);
  int (*Isend)(const void *, int, mpi_h, int, int, mpi_h, mpi_h *);
  int (*Irecv)(void *, int, mpi_h, int, int, mpi_h, mpi_h *);
  int (*Iallreduce)(const void *, void *, int, mpi_h, mpi_h, mpi_h, mpi_h *);
  int (*Test)(mpi_h *, int *, mpi_status *);
  int (*Cancel)(mpi_h *);
  int (*Request_free)(mpi_h *);
  mpi_h world, byte, f32, f64, i32, sum; /* MPI_COMM_WORLD, MPI_BYTE, ..., MPI_SUM */
  int thread_multiple;                   /* MPI_THREAD_MULTIPLE */
} flowc_mpi_lib;

#define FLOWC_MPI_NO_LIBRARY 1
#define FLOWC_MPI_MISSING 2

__attribute__((visibility("hidden"))) int FLOWC_MPI(flowc_mpi_loaded)(void);
__attribute__((visibility("hidden"))) const flowc_mpi_lib *FLOWC_MPI(flowc_mpi_open)(
    int *why, const char **detail);

#endif
