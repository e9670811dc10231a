"""Which loops of a kernel run on the runtime's threads (flowc/codegen/cpu/omp.py): tiny
parallel loops are made serial, big elementwise/reduction/pool ops get a parallel loop,
every OpenMP worksharing loop is dynamic and `nowait` (no `__kmpc_barrier` left), and
artifacts built that way match the interpreter at 1, 2 and 4 threads, run after run."""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir

import flowc
from flowc.codegen.cpu import omp
from flowc.codegen.cpu import pipeline as cpu_pipeline
from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.kernels import build_module
from flowc.codegen.target import get_target
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close

HOST = get_target("host")


def graph(kind: str) -> Graph:
    g = Graph(kind)
    if kind == "tiny_matmul":  # 2 column tiles of 4x64x32: far below the threshold
        a = g.add_input("a", TensorType("f32", (4, 64)))
        b = g.add_input("b", TensorType("f32", (64, 64)))
        node = make_node("matmul", [a, b])
    elif kind == "gelu":
        node = make_node("gelu", [g.add_input("a", TensorType("f32", (64, 4096)))])
    elif kind == "small_gelu":
        node = make_node("gelu", [g.add_input("a", TensorType("f32", (4, 64)))])
    elif kind == "layer_norm":
        x = g.add_input("x", TensorType("f32", (128, 768)))
        s = g.add_input("s", TensorType("f32", (768,)))
        b = g.add_input("b", TensorType("f32", (768,)))
        node = make_node("layer_normalization", [x, s, b], {"axis": -1})
    elif kind == "max_pool":
        x = g.add_input("x", TensorType("f32", (8, 32, 64, 64)))
        node = make_node("max_pool", [x], {"kernel_shape": (2, 2), "strides": (2, 2)})
    elif kind == "conv":
        x = g.add_input("x", TensorType("f32", (8, 16, 32, 32)))
        w = g.add_input("w", TensorType("f32", (16, 16, 3, 3)))
        node = make_node("conv", [x, w], {"pads": (1, 1, 1, 1)})
    g.add_output("y", g.append(node).out())
    return g


def lowered(kind: str) -> str:
    with ir.Context(), ir.Location.unknown():
        module = cpu_pipeline.lower(build_module("k", graph(kind), HOST), HOST, kind)
        return str(module)


@pytest.mark.parametrize("kind", ["tiny_matmul", "small_gelu"])
def test_threads_small_kernels_never_fork(kind):
    text = lowered(kind)
    assert "omp.parallel" not in text


@pytest.mark.parametrize("kind", ["gelu", "layer_norm", "max_pool", "conv"])
def test_threads_big_kernels_get_nowait_parallel_loops(kind):
    text = lowered(kind)
    regions = text.count("omp.parallel")
    assert regions >= 1
    assert text.count("omp.wsloop nowait") == regions


def test_threads_dynamic_loops_without_barrier_in_the_object():
    obj = compile_kernels([("k", graph("gelu"))], HOST, dump=None).object
    assert b"__kmpc_fork_call" in obj and b"__kmpc_dispatch_next_8u" in obj
    assert b"__kmpc_barrier" not in obj and b"__kmpc_for_static_init" not in obj


def test_threads_work_estimate_scales_with_the_loops():
    with ir.Context():
        module = ir.Module.parse("""
        func.func @f(%a: memref<64x4096xf32>, %b: memref<64x4096xf32>) {
          %c0 = arith.constant 0 : index
          %c1 = arith.constant 1 : index
          %c64 = arith.constant 64 : index
          %f = arith.constant 0.0 : f32
          scf.for %i = %c0 to %c64 step %c1 {
            %v = vector.transfer_read %a[%i, %c0], %f : memref<64x4096xf32>, vector<16xf32>
            %w = arith.addf %v, %v : vector<16xf32>
            vector.transfer_write %w, %b[%i, %c0] : vector<16xf32>, memref<64x4096xf32>
          }
          linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                           affine_map<(d0, d1) -> (d0, d1)>],
                          iterator_types = ["parallel", "parallel"]}
              ins(%a : memref<64x4096xf32>) outs(%b : memref<64x4096xf32>) {
          ^bb0(%x: f32, %y: f32):
            %z = arith.mulf %x, %x : f32
            %s = arith.addf %z, %x : f32
            linalg.yield %s : f32
          }
          return
        }
        """)
        ops = list(module.body.operations[0].regions[0].blocks[0].operations)
        loop = next(op for op in ops if op.operation.name == "scf.for")
        gen = next(op for op in ops if op.operation.name == "linalg.generic")
        assert omp.work(loop.operation) == 64 * 3 * 16
        assert omp.work(gen.operation) == 64 * 4096 * 2
        assert omp.work(gen.operation) >= omp.MIN_PARALLEL_WORK


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    g = Graph("thr")
    x = g.add_input("x", TensorType("f32", (64, 768)))
    s = g.add_input("s", TensorType("f32", (768,)))
    b = g.add_input("b", TensorType("f32", (768,)))
    a = g.add_input("a", TensorType("f32", (4, 64)))
    w = g.add_input("w", TensorType("f32", (64, 64)))
    p = g.add_input("p", TensorType("f32", (4, 16, 64, 64)))
    ln = g.append(make_node("layer_normalization", [x, s, b], {"axis": -1}))
    gelu = g.append(make_node("gelu", [ln.out()]))
    g.add_output("y", gelu.out())
    g.add_output("z", g.append(make_node("matmul", [a, w])).out())
    g.add_output("q", g.append(make_node("max_pool", [p], {"kernel_shape": (2, 2),
                                                           "strides": (2, 2)})).out())
    out = tmp_path_factory.mktemp("thr")
    flowc.compile(g, out)
    return g, out


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_threads_artifact_matches_interpreter(artifact, threads):
    g, out = artifact
    rng = np.random.default_rng(threads)
    feeds = {n.name: rng.standard_normal(n.types[0].shape).astype(np.float32)
             for n in g.inputs}
    want = interpret(g, feeds)
    model = flowc.load(out, threads=threads)
    first = None
    for _ in range(4):
        got = model.run(**feeds)
        # y: gelu of a layer norm over 768, z: a matmul of K = 64, q: a max pool
        for name, kind, n in (("y", "reduction", 768), ("z", "matmul", 64), ("q", "exact", 1)):
            assert_close(got[name], want[name], kind, n, err_msg=name)
        if first is None:
            first = {k: v.copy() for k, v in got.items()}
        for name, value in got.items():  # static blocks: the same bits every run
            np.testing.assert_array_equal(value, first[name])
    model.close()


def placed_gelu():
    """gelu of 64x4096 (a parallel loop) on cpu:1, an add on cpu:0 around it."""
    from flowc.frontend import api

    with api.Graph("pgelu") as g:
        x = api.placeholder("f32", (64, 4096), name="x")
        with api.device("cpu:0"):
            h = x + x
        with api.device("cpu:1"):
            y = api.gelu(h)
        with api.device("cpu:0"):
            g.output("y", y + h)
    return g.ir


def _threads() -> int:
    import os

    return len(os.listdir("/proc/self/task"))


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_threads_partitions_other_than_0_get_a_pool(tmp_path, threads):
    """Partition cpu:1 runs its parallel loop on a pool of its own: at T threads the
    process gains the partition's thread plus T-1 pool workers per partition; the results
    match the interpreter run after run, also after changing the thread count."""
    g = placed_gelu()
    flowc.compile(g, tmp_path / "a")
    x = {"x": np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)}
    want = interpret(g, x)["y"]
    before = _threads()
    model = flowc.load(tmp_path / "a", threads=threads)
    for _ in range(3):
        assert_close(model.run(**x)["y"], want, "transcendental")
    assert _threads() - before == 1 + 2 * (threads - 1)
    model.set_threads(3 - threads % 2)
    assert_close(model.run(**x)["y"], want, "transcendental")
    model.close()
