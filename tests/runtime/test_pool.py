"""The runtime's thread pool and OpenMP entry points, driven from C as kernels would."""

from __future__ import annotations

import subprocess
from pathlib import Path

from flowc.codegen.emit.link import RUNTIME_DIR, RUNTIME_SOURCES

PROGRAM = r"""
#include <stdint.h>
#include <stdio.h>
#include "flowc_rt.h"

typedef void (*micro)(int32_t *, int32_t *, ...);
void t___kmpc_fork_call(void *loc, int32_t argc, micro fn, ...);
void t___kmpc_for_static_init_8(void *, int32_t, int32_t, int32_t *, int64_t *, int64_t *,
                                int64_t *, int64_t, int64_t);
void t___kmpc_for_static_fini(void *, int32_t);
void t___kmpc_barrier(void *, int32_t);
int32_t t___kmpc_global_thread_num(void *);

/* out[i] = i * i for i in [0, n), the loop split over the team as OpenMP would. */
static void body(int32_t *gtid, int32_t *btid, int64_t *out, int64_t *n, int64_t *seen) {
  (void)btid;
  int64_t lo = 0, hi = *n - 1, stride = 1;
  int32_t last = 0;
  t___kmpc_for_static_init_8(0, *gtid, 34, &last, &lo, &hi, &stride, 1, 1);
  for (int64_t i = lo; i <= hi; i++) out[i] = i * i;
  t___kmpc_for_static_fini(0, *gtid);
  t___kmpc_barrier(0, *gtid);
  __atomic_fetch_or(seen, (int64_t)1 << t___kmpc_global_thread_num(0), __ATOMIC_SEQ_CST);
}

int main(void) {
  char err[256];
  for (int threads = 1; threads <= 4; threads++) {
    flowc_pool *pool = threads > 1 ? t_pool_create(threads, err, sizeof err) : 0;
    for (int64_t n = 0; n < 40; n += 7) {
      int64_t out[64] = {0}, seen = 0;
      t_pool_enter(pool);
      t___kmpc_fork_call(0, 3, (micro)body, out, &n, &seen);
      t_pool_leave();
      for (int64_t i = 0; i < n; i++)
        if (out[i] != i * i) return printf("bad %d %lld\n", threads, (long long)i), 1;
      if (seen != ((int64_t)1 << threads) - 1)
        return printf("team %d saw %llx\n", threads, (long long)seen), 1;
    }
    if (pool) t_pool_destroy(pool);
  }
  puts("ok");
  return 0;
}
"""


def test_openmp_entry_points_split_loops_over_the_pool(tmp_path: Path):
    (tmp_path / "t.c").write_text(PROGRAM)
    sources = [*(str(RUNTIME_DIR / src) for src in RUNTIME_SOURCES), "t.c"]
    subprocess.run(["cc", "-O1", "-DFLOWC_PREFIX=t_", f"-I{RUNTIME_DIR}", *sources, "-o", "t",
                    "-lpthread", "-lm"], cwd=tmp_path, check=True)
    done = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "ok\n")
