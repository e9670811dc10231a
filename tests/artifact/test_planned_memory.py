"""All run-time memory is planned (issue [18]): kernels take their temporaries from the
arena (scratch arguments) or the per-thread scratch region, so

- no object of an artifact but the runtime's (create, destroy, set_threads) references an
  allocator: checked on every member of `libNAME.a` for the benchmark models
  (bench/perf_models.py, small sizes here, full sizes under `slow`) and shapes whose
  kernels used to allocate (packed matmul panels, padded conv inputs, winograd rows,
  fused bodies), each also checked against onnxruntime or the interpreter at 1 and 3
  threads;
- `NAME_run` allocates nothing: an LD_PRELOAD shim counts malloc, calloc, realloc,
  aligned_alloc, posix_memalign, memalign and free calls of a C program over the second
  run (after create, set_threads and a warm-up run), on every thread; expected 0, for a
  plain and a partitioned model, at 1 and 3 threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import flowc
from flowc.codegen.emit.link import RUNTIME_SOURCES
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close

BENCH = Path(__file__).resolve().parents[2] / "bench"
ALLOCATORS = {"malloc", "calloc", "realloc", "free", "aligned_alloc", "posix_memalign",
              "memalign", "valloc", "pvalloc"}
# the runtime's objects (create/destroy/set_threads allocate there, never in run)
RUNTIME_OBJECTS = {f"{Path(src).stem}.o" for src in RUNTIME_SOURCES}


def perf_model(name: str, full: bool) -> onnx.ModelProto:
    sys.path.insert(0, str(BENCH))
    import perf_models

    builder, small = perf_models.MODELS[name]
    return builder() if full else builder(**small)


def allocating_objects(out: Path, name: str, tmp: Path) -> dict[str, set[str]]:
    """{member of libNAME.a: the allocators it references} for members outside the runtime."""
    work = tmp / f"ar-{name}"
    work.mkdir()
    subprocess.run(["ar", "x", str(out / f"lib{name}.a")], cwd=work, check=True)
    found = {}
    for obj in sorted(work.glob("*.o")):
        if obj.name.removeprefix(f"{name}_") in RUNTIME_OBJECTS:
            continue
        listing = subprocess.run(["nm", "-u", "-P", obj.name], cwd=work, capture_output=True,
                                 text=True, check=True).stdout
        used = {line.split()[0] for line in listing.splitlines() if line.strip()} & ALLOCATORS
        if used:
            found[obj.name] = used
    members = {o.name for o in work.glob("*.o")}
    assert f"{name}_kernels.o" in members, members  # the kernel object was checked
    return found


def check_onnx(model: onnx.ModelProto, out: Path) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32)
             for i in session.get_inputs()}
    want = session.run(None, feeds)
    for threads in (1, 3):
        with flowc.load(out, threads=threads) as m:
            for _ in range(2):
                got = m.run(*[feeds[i.name] for i in session.get_inputs()])
                for (name, y), w in zip(got.items(), want, strict=True):
                    # absolute part relative to the outputs' magnitude (as perf.py checks)
                    assert_close(y, w, "composite", scale=float(np.abs(w).max()),
                                 err_msg=f"{name} at {threads} threads")


def check_graph(graph: Graph, out: Path, k: int) -> None:
    """The artifact at `out` against the interpreter at 1 and 3 threads (`matmul` bound of
    inner size `k`)."""
    rng = np.random.default_rng(0)
    feeds = {n.name: rng.uniform(-1, 1, t.shape).astype(t.dtype.np)
             for n, t in zip(graph.inputs, graph.input_types, strict=True)}
    want = interpret(graph, feeds)
    for threads in (1, 3):
        with flowc.load(out, threads=threads) as m:
            got = m.run(**feeds)
            for name, w in want.items():
                assert_close(got[name], w, "matmul", k, err_msg=f"{name} @{threads}")


def shapes() -> dict[str, tuple[Graph, int]]:
    """Kernels that allocated temporaries before issue [18], with their inner sizes."""
    made = {}
    g = Graph("packed")  # K > 4096: packed panels of B
    a = g.add_input("a", TensorType("f32", (24, 4608)))
    b = g.add_input("b", TensorType("f32", (4608, 40)))
    g.add_output("y", g.append(make_node("matmul", [a, b])).out())
    made["packed"] = g, 4608
    g = Graph("padconv")  # a padded conv input, with a fused bias + relu epilogue
    x = g.add_input("x", TensorType("f32", (1, 8, 20, 20)))
    w = g.add_input("w", TensorType("f32", (16, 8, 3, 3)))
    bias = g.add_input("b", TensorType("f32", (16,)))
    conv = g.append(make_node("conv", [x, w, bias], {"pads": (1, 1, 1, 1)})).out()
    g.add_output("y", g.append(make_node("relu", [conv])).out())
    made["padconv"] = g, 8 * 9
    g = Graph("attn")  # fused softmax(q k^T) v: intermediates inside fused kernels
    q = g.add_input("q", TensorType("f32", (2, 16, 32)))
    k = g.add_input("k", TensorType("f32", (2, 32, 16)))
    v = g.add_input("v", TensorType("f32", (2, 16, 32)))
    s = g.append(make_node("matmul", [q, k])).out()
    p = g.append(make_node("softmax", [s], {"axis": -1})).out()
    g.add_output("y", g.append(make_node("matmul", [p, v])).out())
    made["attn"] = g, 32
    return made


MODELS = ["mlp", "resnet", "bert_layer", "matmul_1024", "mobilenet"]


@pytest.mark.parametrize("name", MODELS)
def test_bench_model_kernels_never_allocate(name, tmp_path):
    model = perf_model(name, full=False)
    flowc.compile(model, tmp_path / name, name=name)
    assert allocating_objects(tmp_path / name, name, tmp_path) == {}
    check_onnx(model, tmp_path / name)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_full_size_bench_model_kernels_never_allocate(name, tmp_path):
    model = perf_model(name, full=True)
    flowc.compile(model, tmp_path / name, name=name)
    assert allocating_objects(tmp_path / name, name, tmp_path) == {}
    check_onnx(model, tmp_path / name)


@pytest.mark.parametrize("kind", sorted(shapes()))
def test_kernels_that_used_to_allocate_take_scratch(kind, tmp_path):
    graph, k = shapes()[kind]
    manifest = flowc.compile(graph, tmp_path / kind, name=kind)
    assert allocating_objects(tmp_path / kind, kind, tmp_path) == {}
    if kind != "attn":  # (its fused kernels need no temporary)
        assert manifest["memory_plan"]["scratch_bytes"] > 0  # planned into the arena now
    check_graph(graph, tmp_path / kind, k)


def test_winograd_rows_are_per_thread_scratch(tmp_path):
    """A 3x3 stride-1 conv with constant weights (the winograd pass): its per-row buffers
    live in the per-thread region, sized at compile time and stated in the manifest and the
    header."""
    rng = np.random.default_rng(3)
    model = Graph("wino")
    x = model.add_input("x", TensorType("f32", (1, 16, 24, 24)))
    w = model.append(make_node("constant", [], {"value": Tensor(
        (rng.standard_normal((16, 16, 3, 3)) * 0.2).astype(np.float32))})).out()
    conv = model.append(make_node("conv", [x, w], {"pads": (1, 1, 1, 1)})).out()
    model.add_output("y", model.append(make_node("relu", [conv])).out())
    manifest = flowc.compile(model, tmp_path / "wino", name="wino")
    per_thread = manifest["working_memory"]["thread_scratch_bytes"]
    assert per_thread > 0
    header = (tmp_path / "wino" / "wino.h").read_text()
    assert f"+ {per_thread} bytes of per-thread scratch x threads" in header
    assert allocating_objects(tmp_path / "wino", "wino", tmp_path) == {}
    check_graph(model, tmp_path / "wino", 16 * 9)


SHIM = r"""
/* Counts allocator calls (every thread) while counting is on; forwards to glibc. */
#define _GNU_SOURCE
#include <stddef.h>
#include <errno.h>
extern void *__libc_malloc(size_t), *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t), *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
static int on;
static long calls;
void shim_count(int enable) { __atomic_store_n(&on, enable, __ATOMIC_SEQ_CST); }
long shim_calls(void) { return __atomic_load_n(&calls, __ATOMIC_SEQ_CST); }
static void hit(void) {
  if (__atomic_load_n(&on, __ATOMIC_RELAXED)) __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
}
void *malloc(size_t n) { hit(); return __libc_malloc(n); }
void *calloc(size_t k, size_t n) { hit(); return __libc_calloc(k, n); }
void *realloc(void *p, size_t n) { hit(); return __libc_realloc(p, n); }
void free(void *p) { hit(); __libc_free(p); }
void *aligned_alloc(size_t a, size_t n) { hit(); return __libc_memalign(a, n); }
void *memalign(size_t a, size_t n) { hit(); return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
  hit();
  void *p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
"""

DRIVER = r"""
/* argv: library, model name, threads. create, set_threads, zero inputs, a warm-up run,
 * then a counted run; prints the allocator calls of that run, then those of a set_threads
 * to one thread more (the shim's control). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int (*create_fn)(void **);
typedef int (*ctx_int_fn)(void *, int);
typedef int (*ctx_fn)(void *);
typedef void *(*input_fn)(void *, int);
typedef size_t (*bytes_fn)(int);
typedef int (*count_fn)(void);
static void *lib;
static const char *name;
static void *sym(const char *what) {
  char full[256];
  snprintf(full, sizeof full, "%s_%s", name, what);
  void *f = dlsym(lib, full);
  if (!f) { fprintf(stderr, "no symbol %s\n", full); exit(2); }
  return f;
}
int main(int argc, char **argv) {
  if (argc != 4) return 2;
  lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 2; }
  name = argv[2];
  void (*count)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "shim_count");
  long (*calls)(void) = (long (*)(void))dlsym(RTLD_DEFAULT, "shim_calls");
  if (!count || !calls) { fprintf(stderr, "the shim is not preloaded\n"); return 2; }
  void *ctx = 0;
  if (((create_fn)sym("create"))(&ctx)) { fprintf(stderr, "create failed\n"); return 1; }
  if (((ctx_int_fn)sym("set_threads"))(ctx, atoi(argv[3]))) return 1;
  int inputs = ((count_fn)sym("num_inputs"))();
  for (int i = 0; i < inputs; i++)
    memset(((input_fn)sym("input"))(ctx, i), 0, ((bytes_fn)sym("input_bytes"))(i));
  ctx_fn run = (ctx_fn)sym("run");
  if (run(ctx)) return 1; /* warm-up */
  count(1);
  int status = run(ctx);
  count(0);
  long in_run = calls();
  count(1); /* the control: replacing the pool allocates, and the shim sees it */
  status |= ((ctx_int_fn)sym("set_threads"))(ctx, atoi(argv[3]) + 1);
  count(0);
  printf("%ld %ld\n", in_run, calls() - in_run);
  ((void (*)(void *))sym("destroy"))(ctx);
  return status;
}
"""


@pytest.fixture(scope="module")
def counting(tmp_path_factory) -> Path:
    """A folder with `shim.so` (the counting LD_PRELOAD shim) and `driver`."""
    work = tmp_path_factory.mktemp("alloc_shim")
    (work / "shim.c").write_text(SHIM)
    (work / "driver.c").write_text(DRIVER)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", "shim.so", "shim.c"], cwd=work,
                   check=True)
    subprocess.run(["cc", "-O1", "-o", "driver", "driver.c", "-ldl"], cwd=work, check=True)
    return work


def allocations(counting: Path, out: Path, name: str, threads: int) -> tuple[int, int]:
    """(allocator calls of the counted run, of the control set_threads)."""
    done = subprocess.run([str(counting / "driver"), str(out / f"lib{name}.so"), name,
                           str(threads)], env={**os.environ, "LD_PRELOAD": str(
                               counting / "shim.so")}, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    in_run, control = map(int, done.stdout.split())
    return in_run, control


@pytest.fixture(scope="module")
def resnet_artifact(tmp_path_factory) -> Path:
    """The small bench ResNet: scratch arguments and per-thread (winograd) scratch."""
    out = tmp_path_factory.mktemp("alloc_resnet") / "resnet"
    manifest = flowc.compile(perf_model("resnet", full=False), out, name="resnet")
    assert manifest["working_memory"]["thread_scratch_bytes"] > 0
    assert manifest["memory_plan"]["scratch_bytes"] > 0
    return out


@pytest.mark.parametrize("threads", [1, 3])
def test_run_allocates_nothing(counting, resnet_artifact, threads):
    in_run, control = allocations(counting, resnet_artifact, "resnet", threads)
    assert control > 0  # the shim counts the runtime's allocations
    assert in_run == 0


@pytest.mark.parametrize("threads", [1, 3])
def test_partitioned_run_allocates_nothing(counting, tmp_path, threads):
    """Partition threads, their pools and the rendezvous are made by create and
    set_threads, never by a run."""
    from flowc.frontend import api

    with api.Graph("parts") as g:
        x = api.placeholder("f32", (64, 64), name="x")
        w = api.constant(np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32))
        with api.device("cpu:0"):
            h = api.matmul(x, w)
        with api.device("cpu:1"):
            t = api.tanh(h)
        with api.device("cpu:0"):
            g.output("y", api.sub(t, h))
    flowc.compile(g.ir, tmp_path / "parts", name="parts")
    in_run, control = allocations(counting, tmp_path / "parts", "parts", threads)
    assert control > 0
    assert in_run == 0
