"""Compile-time errors: each names the input, node or file and says what to do."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest
from artifact_util import compile_naive
from naive_backend import NaiveBackend, compile_object

import flowc
from flowc.codegen.kernel_code import KernelCode
from flowc.codegen.plan.arena import Buffer, plan_arena
from flowc.ir import FlowcError, Graph, Tensor, TensorType
from flowc.ir.build import make_node


def graph_with_input(t: TensorType) -> Graph:
    g = Graph("g")
    x = g.add_input("x", t)
    g.add_output("y", g.append(make_node("relu", [x], name="r")).out())
    return g


def test_unbound_symbol(tmp_path):
    g = graph_with_input(TensorType("f32", (4, "S")))
    with pytest.raises(FlowcError, match=re.escape(
            "graph @g has symbolic dims with no size: S (input 'x' dim 1); give each a size "
            "or a bound: dims={'S': SIZE} or dims={'S': (LO, HI)}")):
        compile_naive(g, tmp_path)


def test_unknown_dim(tmp_path):
    with pytest.raises(FlowcError, match=re.escape(
            "input 'x' is f32[?,3]: dim 0 has no size or name")):
        compile_naive(graph_with_input(TensorType("f32", (None, 3))), tmp_path)


def test_named_dims_bind(tmp_path):
    g = graph_with_input(TensorType("f32", ("N", "S")))
    manifest = compile_naive(g, tmp_path, batch=2, dims={"S": 5})
    assert manifest["inputs"][0]["shape"] == [2, 5]
    assert manifest["symbolic_dims"] == {"N": 2, "S": 5}


def test_variable_without_initial_value_starts_at_zero(tmp_path):
    """Stateful graphs compile (tests/artifact/test_state.py); a variable without `init`
    starts as zeros."""
    g = Graph("state")
    x = g.add_input("x", TensorType("f32", (2,)))
    v = g.append(make_node("variable", [], {"type": TensorType("f32", (2,)),
                                            "shared_name": "v"}, name="v")).out()
    g.append(make_node("assign", [v, x], name="store"))
    g.add_output("y", x)
    compile_naive(g, tmp_path, pipeline="")
    with flowc.runtime.load(tmp_path) as model:
        np.testing.assert_array_equal(model.variables()["v"], [0, 0])
        model.run(x=np.array([1, 2], np.float32))
        np.testing.assert_array_equal(model.variables()["v"], [1, 2])


def test_unsupported_op_is_reported_before_codegen(tmp_path):
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2, 3)))
    g.add_output("y", g.append(make_node("erf", [x], name="my_erf")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "no naive kernel for node(s) 'my_erf' (erf) on target host")):
        compile_naive(g, tmp_path)


class RecordingBackend(NaiveBackend):
    """The naive backend, noting each `compile` call."""

    def __init__(self):
        self.compiled = []

    def compile(self, kernels, target, dump, cache, progress) -> KernelCode:
        self.compiled.append([sym for sym, _ in kernels])
        return super().compile(kernels, target, dump, cache, progress)


def test_every_unsupported_kernel_is_named_before_any_codegen(tmp_path):
    """The compile tail checks every kernel first: one error naming both unsupported nodes
    (each its own kernel, no fusion), and the backend never compiled anything."""
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2, 3)))
    e = g.append(make_node("erf", [x], name="my_erf")).out()
    r = g.append(make_node("relu", [e], name="fine")).out()
    g.add_output("y", g.append(make_node("floor", [r], name="my_floor")).out())
    backend = RecordingBackend()
    with pytest.raises(FlowcError, match=re.escape(
            "cannot compile graph @g for target host:\n"
            "  no naive kernel for node(s) 'my_erf' (erf) on target host\n"
            "  no naive kernel for node(s) 'my_floor' (floor) on target host")):
        compile_naive(g, tmp_path, pipeline="", backend=backend)
    assert backend.compiled == []
    compile_naive(graph_with_input(TensorType("f32", (2, 3))), tmp_path / "ok", backend=backend)
    assert backend.compiled == [["g_k0"]]


def test_elided_constant(tmp_path):
    g = Graph("g")
    c = Tensor(None, TensorType("f32", (100,)), "0123456789abcdef")
    g.add_output("y", g.append(make_node("constant", [], {"value": c}, name="w")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "constant 'w' (constant) (f32[100]) has no data: it was elided")):
        compile_naive(g, tmp_path)


class ExtraSymbolBackend(NaiveBackend):
    """A backend breaking the kernel contract: its object defines one global too many."""

    def compile(self, kernels, target, dump, cache, progress) -> KernelCode:
        obj = compile_object(kernels)
        extra = compile_object([("helper_not_prefixed", kernels[0][1])])
        return KernelCode(_link_relocatable(obj.object, extra.object), obj.scratch)


def _link_relocatable(a: bytes, b: bytes) -> bytes:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "a.o").write_bytes(a)
        Path(tmp, "b.o").write_bytes(b)
        subprocess.run(["ld", "-r", "a.o", "b.o", "-o", "c.o"], cwd=tmp, check=True)
        return Path(tmp, "c.o").read_bytes()


def test_kernel_object_breaking_the_contract(tmp_path):
    g = graph_with_input(TensorType("f32", (2, 3)))
    with pytest.raises(FlowcError, match=re.escape(
            "the kernel object breaks the kernel contract: it defines ['helper_not_prefixed'] "
            "beyond the kernels and lacks none of them")):
        import flowc

        flowc.compile(g, tmp_path, backend=ExtraSymbolBackend())


def test_bad_weights_mode(tmp_path):
    with pytest.raises(FlowcError, match=re.escape(
            "weights='mmap': expected one of auto, embed, file")):
        compile_naive(graph_with_input(TensorType("f32", (2,))), tmp_path, weights="mmap")


def test_arena_plan_never_overlaps_live_buffers():
    rng = np.random.default_rng(0)
    buffers = []
    for i in range(200):
        first = int(rng.integers(0, 50))
        buffers.append(Buffer(i, int(rng.integers(0, 5000)), first,
                              first + int(rng.integers(0, 10))))
    offsets, total = plan_arena(buffers)
    for a in buffers:
        assert offsets[a.key] % 64 == 0
        assert offsets[a.key] + a.nbytes <= total
        for b in buffers:
            if a.key < b.key and a.first <= b.last and b.first <= a.last and a.nbytes and \
                    b.nbytes:
                assert (offsets[a.key] + a.nbytes <= offsets[b.key]
                        or offsets[b.key] + b.nbytes <= offsets[a.key]), (a, b)
    assert total < sum(b.nbytes + 64 for b in buffers)  # reuse happened


def test_every_ir_dtype_has_an_artifact_abi_code():
    """Artifacts take and return every flowc dtype: the ABI's table covers the IR's."""
    from flowc.ir.types import DTYPES as IR_DTYPES
    from flowc.runtime.abi import DTYPES as ABI_DTYPES
    from flowc.runtime.abi import numpy_dtype

    assert set(IR_DTYPES) == set(ABI_DTYPES)
    for name, dt in IR_DTYPES.items():
        assert numpy_dtype(name) == dt.np, name


class BrokenBackend(NaiveBackend):
    """A kernel compiler with a bug: it raises something other than a FlowcError."""

    def compile(self, kernels, target, dump, cache, progress) -> KernelCode:
        raise KeyError("oops")


def test_a_kernel_compiler_bug_is_reported_with_the_kernels(tmp_path):
    import flowc

    with pytest.raises(FlowcError, match=re.escape(
            "the kernel compiler failed (KeyError: 'oops') on kernels g_k0 (relu)")):
        flowc.compile(graph_with_input(TensorType("f32", (2, 3))), tmp_path,
                      backend=BrokenBackend())


def test_kernel_code_joins_one_object_and_one_gpu_binary():
    from flowc.codegen.kernel_code import GpuBinary

    binary = GpuBinary(("sm_80",), [])
    joined = KernelCode.join([KernelCode(object=b"obj"), KernelCode(), KernelCode(gpu=binary)])
    assert joined == KernelCode(b"obj", gpu=binary)
    with pytest.raises(FlowcError, match=re.escape(
            "kernel code of 2 CPU objects and 0 GPU binaries: an artifact links at most one "
            "of each")):
        KernelCode.join([KernelCode(object=b"a"), KernelCode(object=b"b")])
