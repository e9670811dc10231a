"""Kernel temporaries as caller memory (flowc/codegen/scratch.py): allocs outside parallel
loops become arguments, allocs inside OpenMP regions slices of one thread-scratch
argument (regions share a slot's bytes, allocs of one region do not), and a lowered kernel
that calls an allocator is refused."""

from __future__ import annotations

import pytest
from mlir import ir

from flowc.codegen import scratch
from flowc.codegen.cpu import pipeline as cpu_pipeline
from flowc.codegen.kernel_code import KernelScratch, pack, unpack
from flowc.codegen.mlir_walk import inside, ops_named
from flowc.ir.errors import FlowcError

KERNEL = """
func.func @k(%a: memref<16xf32>) {
  %t = memref.alloc() : memref<100xf32>
  %c0 = arith.constant 0 : index
  %f = memref.load %a[%c0] : memref<16xf32>
  memref.store %f, %t[%c0] : memref<100xf32>
  omp.parallel {
    %p = memref.alloc() : memref<10xf32>
    %q = memref.alloc() : memref<300xi8>
    memref.store %f, %p[%c0] : memref<10xf32>
    %b = arith.constant 1 : i8
    memref.store %b, %q[%c0] : memref<300xi8>
    omp.terminator
  }
  omp.parallel {
    %r = memref.alloc() : memref<2x64xf32>
    memref.store %f, %r[%c0, %c0] : memref<2x64xf32>
    omp.terminator
  }
  memref.dealloc %t : memref<100xf32>
  return
}
"""


def test_allocs_become_scratch_arguments_and_thread_slices():
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(KERNEL)
        fn = cpu_pipeline.kernel_function(module, "k")
        sizes = scratch.scratch_arguments(fn, lambda op: inside(op, "omp.parallel"))
        assert sizes == [400]
        per_thread = scratch.thread_scratch(fn, module)
        # region 1: 40 -> 64 and 300 -> 320 bytes; region 2: 512; a slot holds the larger
        assert per_thread == 512
        args = fn.regions[0].blocks[0].arguments
        assert [str(a.type) for a in args] == [
            "memref<16xf32>", "memref<100xf32>", f"memref<{512 * scratch.MAX_SLOTS}xi8>"]
        text = str(module)
        assert "memref.alloc" not in text and "memref.dealloc" not in text
        assert text.count("call @__kmpc_global_thread_num") == 2  # once per region
        assert text.count("memref.view") == 3
        assert module.operation.verify()


def test_no_thread_scratch_without_allocs_in_parallel_loops():
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse("func.func @k(%a: memref<4xf32>) { return }")
        fn = cpu_pipeline.kernel_function(module, "k")
        assert scratch.thread_scratch(fn, module) == 0
        assert len(fn.regions[0].blocks[0].arguments) == 1


def test_a_kernel_calling_an_allocator_is_refused():
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse("""
        llvm.func @malloc(i64) -> !llvm.ptr
        llvm.func @k() {
          %n = llvm.mlir.constant(64 : i64) : i64
          %p = llvm.call @malloc(%n) : (i64) -> !llvm.ptr
          llvm.return
        }""")
        assert ops_named(module.operation, "llvm.call")
        with pytest.raises(FlowcError, match="kernel k: the lowered kernel calls malloc: "
                                             "kernels take all their memory from the caller"):
            cpu_pipeline.check_llvm_only(module, "kernel k")


def test_scratch_sizes_pack_with_their_payload():
    sizes = {"m_k0": KernelScratch((128, 64), 256), "m_k1": KernelScratch()}
    assert unpack(pack(sizes, b"\x00bitcode")) == (sizes, b"\x00bitcode")
    assert KernelScratch((128, 64), 256).arguments == 3 and KernelScratch().arguments == 0
