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

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import flowc
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close

BENCH = Path(__file__).resolve().parents[2] / "bench"
ALLOCATORS = {"malloc", "calloc", "realloc", "free", "aligned_alloc", "posix_memalign",
              "memalign", "valloc", "pvalloc"}
# the runtime's objects (create/destroy/set_threads allocate there, never in run)
RUNTIME_OBJECTS = {"runtime.o", "tables.o", "pool.o", "partition.o", "cuda.o"}


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
    n = max(int(np.prod(i.shape)) for i in session.get_inputs())
    for threads in (1, 3):
        with flowc.load(out, threads=threads) as m:
            for _ in range(2):
                got = m.run(*[feeds[i.name] for i in session.get_inputs()])
                for (name, y), w in zip(got.items(), want, strict=True):
                    assert_close(y, w, "composite", n, err_msg=f"{name} at {threads} threads")


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
