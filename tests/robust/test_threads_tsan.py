"""The runtime's thread pool inside real artifacts under ThreadSanitizer: the runtime and
model code built with -fsanitize=thread (a `CC` wrapper, as tests/robust/
test_robust_sanitizers.py does for ASan), driven by tests/robust/c/threads_tsan_driver.c at
1, 2 and 4 threads and from two threads at once. Two artifacts: a GELU + layer norm model
whose kernels are parallel loops on the context's pool, and a model placed on cpu:0 and
cpu:1 whose cpu:1 partition runs a parallel GELU on its own pool. The kernels come from LLVM
uninstrumented: this checks the runtime's synchronization, not the kernels' accesses.
Skipped where `cc` cannot build and run -fsanitize=thread programs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import flowc
from flowc.frontend import api
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node

ROOT = Path(__file__).resolve().parents[2]
SAN = ["-fsanitize=thread", "-g"]


def _have_tsan(tmp: Path) -> bool:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        return False
    (tmp / "probe.c").write_text("int main(void) { return 0; }\n")
    probe = subprocess.run([cc, *SAN, "probe.c", "-o", "probe"], cwd=tmp, capture_output=True)
    return probe.returncode == 0 and subprocess.run(
        ["./probe"], cwd=tmp, capture_output=True).returncode == 0


def pool_model() -> Graph:
    g = Graph("m")
    x = g.add_input("x", TensorType("f32", (64, 768)))
    ln = g.append(make_node("layer_normalization", [x, x], {"axis": 0}))
    g.add_output("y", g.append(make_node("gelu", [ln.out()])).out())
    return g


def partition_model() -> Graph:
    with api.Graph("m") as g:
        x = api.placeholder("f32", (64, 4096), name="x")
        with api.device("cpu:0"):
            h = x * x
        with api.device("cpu:1"):
            y = api.gelu(h)
        with api.device("cpu:0"):
            g.output("y", y - h)
    return g.ir


@pytest.mark.parametrize("make", [pool_model, partition_model])
def test_threads_artifact_pools_under_thread_sanitizer(tmp_path, make):
    if not _have_tsan(tmp_path):
        pytest.skip("cc cannot build and run -fsanitize=thread programs here")
    cc = os.environ.get("CC", "cc")
    wrapper = tmp_path / "cc_tsan"
    wrapper.write_text(f"#!/bin/sh\nexec {cc} {' '.join(SAN)} \"$@\"\n")
    wrapper.chmod(0o755)
    old = os.environ.get("CC")
    os.environ["CC"] = str(wrapper)
    try:
        flowc.compile(make(), tmp_path / "a", name="m", cache=False)
    finally:
        if old is None:
            del os.environ["CC"]
        else:
            os.environ["CC"] = old
    driver = ROOT / "tests/robust/c/threads_tsan_driver.c"
    subprocess.run([str(wrapper), "-I", "a", str(driver), "a/libm.a", "-lm", "-lpthread",
                    "-ldl", "-o", "drv"], cwd=tmp_path, check=True)
    done = subprocess.run([str(tmp_path / "drv")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TSAN_OPTIONS": "halt_on_error=1"})
    assert done.returncode == 0 and "ThreadSanitizer" not in done.stderr, done.stderr[-4000:]
    assert done.stdout.startswith("ok ")
