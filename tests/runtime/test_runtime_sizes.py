"""The C runtime re-checks the sizes in a model's tables before allocating
(tests/runtime/sizes_check.c): a descriptor whose bytes disagree with its dtype and shape,
a dim that is negative or makes the tensor pass flowc's limit (2**48 bytes, also with a
size-0 dim elsewhere), a bad dtype code, or an arena over the limit fails create with
FLOWC_ERR_ARGUMENT and a message naming the tensor; nothing wraps."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flowc.codegen.emit.link import RUNTIME_DIR, RUNTIME_SOURCES
from flowc.ir.limits import MAX_ARENA_BYTES, MAX_TENSOR_BYTES, MAX_WEIGHTS_BYTES
from flowc.runtime.abi import DTYPES

CHECK = Path(__file__).with_name("sizes_check.c")
pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")

EXPECTED = {
    "good": (0, "ok"),
    "wrapped_input": (1, "m: input 'x': dim 0 is 288230376151711745, so the tensor would take "
                         "more than 281474976710656 bytes (flowc's limit)"),
    "huge_input": (1, "m: input 'x': dim 1 is 2147483648, so the tensor would take more than "
                      "281474976710656 bytes (flowc's limit)"),
    "negative_dim": (1, "m: input 'x': dim 0 is -5; a dim must be >= 0"),
    "empty_but_huge": (1, "m: input 'x': dim 2 is 1099511627776, so the tensor would take more "
                          "than 281474976710656 bytes (flowc's limit)"),
    "bytes_mismatch": (1, "m: input 'x' states 128 bytes, its dtype f32 and shape make 256"),
    "bad_dtype": (1, "m: input 'x' has a malformed descriptor (dtype 99, rank 2)"),
    "huge_arena": (1, "m: arena_bytes is 1152921504606846976, more than 281474976710656 "
                      "(flowc's limit)"),
    # a model of two entries (run and train_step), each entry's tables checked too
    "entries_good": (0, "ok"),
    "entry_bad_desc": (1, "m: input 'labels' states 8 bytes, its dtype i64 and shape make 32"),
    "entry_big_arena": (1, "m: entry 'train_step' has a malformed descriptor (arena 2048 "
                           "bytes of 1024, labels input 1)"),
    "entry_labels_index": (1, "m: entry 'train_step' has a malformed descriptor (arena 1024 "
                              "bytes of 1024, labels input 2)"),
    "entry_labels_dtype": (1, "m: entry 'train_step' has a malformed descriptor (arena 1024 "
                              "bytes of 1024, labels input 0)"),
}


def test_runtime_refuses_tables_with_bad_sizes(tmp_path: Path):
    sources = [str(RUNTIME_DIR / src) for src in RUNTIME_SOURCES]
    built = subprocess.run(["cc", "-O1", "-Wall", "-DFLOWC_PREFIX=t_", f"-I{RUNTIME_DIR}",
                            *sources, str(CHECK), "-o", "check", "-lpthread", "-lm", "-ldl"],
                           cwd=tmp_path, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    done = subprocess.run([str(tmp_path / "check")], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    got = {}
    for line in done.stdout.splitlines():
        name, status, message = line.split(" ", 2)
        got[name] = (int(status), message)
    assert got == EXPECTED


def test_runtime_limit_and_itemsizes_match_the_compiler():
    """flowc_rt.h's FLOWC_MAX_BYTES is ir/limits.py's limit; tables.c's DTYPE_BYTES are
    abi.py's element sizes, in code order."""
    header = (RUNTIME_DIR / "flowc_rt.h").read_text()
    shift = int(re.search(r"#define FLOWC_MAX_BYTES \(\(uint64_t\)1 << (\d+)\)", header)[1])
    assert 2**shift == MAX_TENSOR_BYTES == MAX_ARENA_BYTES == MAX_WEIGHTS_BYTES
    source = (RUNTIME_DIR / "tables.c").read_text()
    table = re.search(r"DTYPE_BYTES\[NUM_DTYPES\] = \{([^}]*)\}", source)[1]
    assert [int(b) for b in table.split(",")] == [size for _, size in DTYPES.values()]


def test_manifest_sizes_are_the_librarys(tmp_path: Path):
    """The manifest's arena_bytes and tensor sizes are exactly what the library reports
    (once a 2**64-byte arena was 18446744073709551616 in one and 0 in the other)."""
    import ctypes
    import math

    import flowc
    from flowc.codegen.driver import compile as compile_model
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node
    from flowc.ir.types import f32

    g = Graph("sizes")
    x = g.add_input("x", TensorType(f32, (3, 50)))
    a, b, c = (g.append(make_node(op, [x], name=op)).out() for op in ("exp", "neg", "abs"))
    s = g.append(make_node("add", [a, b], name="s")).out()
    g.add_output("y", g.append(make_node("add", [s, c], name="t")).out())
    manifest = compile_model(g, tmp_path / "art", pipeline="")
    with flowc.load(tmp_path / "art") as model:
        assert manifest["arena_bytes"] == model._fn("arena_bytes")() >= 3 * 600
        for kind in ("input", "output"):
            fn = model._fn(f"{kind}_bytes")
            fn.restype, fn.argtypes = ctypes.c_size_t, [ctypes.c_int]
            for k, t in enumerate(manifest[f"{kind}s"]):
                assert fn(k) == math.prod(t["shape"]) * 4 == 600
