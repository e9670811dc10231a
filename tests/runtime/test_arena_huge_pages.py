"""An arena of 2 MiB or more asks for transparent huge pages (runtime.c `alloc_aligned`:
huge-page aligned, madvise(MADV_HUGEPAGE)), so a few TLB entries cover it. Checked in a
fresh process: its anonymous huge pages grow by the arena's size over the first run (the
arena is touched then), where the kernel gives THP on request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import flowc

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

CHILD = """
import sys, numpy as np, flowc
def anon_huge_kib():
    for line in open('/proc/self/smaps_rollup'):
        if line.startswith('AnonHugePages:'):
            return int(line.split()[1])
model = flowc.load(sys.argv[1], threads=1)
x = np.full((768, 768), 1e-3, np.float32)   # 2.25 MiB: below numpy's own THP threshold
before = anon_huge_kib()
y = model(x)
print(anon_huge_kib() - before, float(y[0, 0]))
"""


def _thp_on_request() -> bool:
    try:
        mode = THP.read_text()
    except OSError:
        return False
    return "[never]" not in mode


@pytest.mark.skipif(not _thp_on_request(), reason="no transparent huge pages on this kernel")
def test_a_large_arena_gets_huge_pages(tmp_path):
    # ((x @ x) @ x) @ x: two 2.25 MiB intermediates live at once, an arena of 4.5 MiB
    nodes, prev = [], "x"
    for k in range(3):
        nodes.append(helper.make_node("MatMul", [prev, "x"], [f"m{k}"], name=f"mm{k}"))
        prev = f"m{k}"
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [768, 768]) for n in ("x", prev)]
    graph = helper.make_graph(nodes, "chain", [io[0]], [io[1]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    out = tmp_path / "chain"
    flowc.compile(model, out)
    arena = json.loads((out / "manifest.json").read_text())["arena_bytes"]
    assert arena >= 2 << 20
    result = subprocess.run([sys.executable, "-c", CHILD, str(out)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    grown_kib, y00 = result.stdout.split()
    np.testing.assert_allclose(float(y00), 768**3 * 1e-12, rtol=1e-3)
    assert int(grown_kib) >= 2048, f"anonymous huge pages grew by {grown_kib} KiB"
