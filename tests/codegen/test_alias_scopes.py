"""Accesses inside OpenMP regions carry the alias scopes of the kernel's noalias arguments
(flowc/codegen/cpu/alias_scopes.py): an Expand's loop, outlined into a parallel region,
stores vectors instead of one float after each reload of its value; kernels that may run
in place (arguments without noalias) get no scopes."""

from __future__ import annotations

import re

import numpy as np
from kernel_harness import check_op, op_body

from flowc.codegen.cpu.compiler import compile_kernels

EXPAND = [np.random.default_rng(2).standard_normal((1, 64, 1, 1)).astype(np.float32),
          np.array([1, 64, 56, 56], np.int64)]


def lowered(op: str, inputs: list, attrs: dict | None = None, consts: tuple = ()) -> str:
    files: dict[str, str] = {}
    compile_kernels([("kernel", op_body(op, inputs, attrs, consts))], "host",
                    dump=files.__setitem__, cache=False)
    return files["kernels.ll"]


def test_parallel_region_accesses_are_scoped_and_vectorized():
    ll = lowered("expand", EXPAND, consts=(1,))
    assert "kernel..omp_par" in ll, "the expand is no longer a parallel region"
    assert re.search(r"store <\d+ x float>.*!alias\.scope", ll), ll[:2000]
    assert "!noalias" in ll


def test_expand_in_a_parallel_region_is_still_right():
    check_op("expand", EXPAND, consts=(1,))


def test_in_place_kernels_get_no_scopes():
    x = np.zeros((64, 4096), np.float32)
    ll = lowered("relu", [x])
    assert "!alias.scope" not in ll and "!noalias" not in ll
