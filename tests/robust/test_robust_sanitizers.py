"""The C runtime and a compiled artifact under AddressSanitizer and UndefinedBehavior-
Sanitizer: tests/robust/c/robust_asan_driver.c runs the zoo-style MLP (flowc/examples/
mlp.flowc) through its C API: repeated create/run/destroy, 1 and 2 threads, caller
buffers, every failure path of set_input/set_threads/set_arena, and four threads each with
its own context. The artifact's runtime and model code are built with the sanitizers (a `CC`
wrapper); the kernels come from LLVM uninstrumented. Skipped where `cc` has no ASan.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import flowc

ROOT = Path(__file__).resolve().parents[2]
SAN = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]


def _have_asan(tmp: Path) -> bool:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        return False
    (tmp / "probe.c").write_text("int main(void) { return 0; }\n")
    probe = subprocess.run([cc, *SAN, "probe.c", "-o", "probe"], cwd=tmp, capture_output=True)
    return probe.returncode == 0 and subprocess.run(
        ["./probe"], cwd=tmp, capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("asan")
    if not _have_asan(tmp):
        pytest.skip("the C compiler has no AddressSanitizer/UBSan runtime here")
    wrapper = tmp / "cc_san"
    wrapper.write_text(f"#!/bin/sh\nexec {os.environ.get('CC', 'cc')} {' '.join(SAN)} \"$@\"\n")
    wrapper.chmod(0o755)
    old = os.environ.get("CC")
    os.environ["CC"] = str(wrapper)
    try:
        flowc.compile(ROOT / "flowc/examples/mlp.flowc", tmp / "a", name="m", batch=2, cache=False)
    finally:
        if old is None:
            del os.environ["CC"]
        else:
            os.environ["CC"] = old
    subprocess.run([str(wrapper), "-I", "a", str(ROOT / "tests/robust/c/robust_asan_driver.c"),
                    "a/libm.a", "-lm", "-lpthread", "-ldl", "-o", "drv"], cwd=tmp, check=True)
    return tmp / "drv"


def _run(drv: Path, leaks: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "ASAN_OPTIONS": f"detect_leaks={int(leaks)}:abort_on_error=0",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    return subprocess.run([str(drv)], capture_output=True, text=True, env=env, timeout=300)


def test_robust_runtime_under_asan_ubsan(driver):
    """No invalid access, no undefined behaviour, every failure has a message, and
    threaded results equal single-threaded ones."""
    result = _run(driver, leaks=False)
    assert result.returncode == 0, result.stderr[-3000:]
    print(f"\nsanitizers: {result.stdout.strip()}, clean")
    assert result.stdout.startswith("ok ")


def test_robust_runtime_no_leaks(driver):
    result = _run(driver, leaks=True)
    assert result.returncode == 0 and "LeakSanitizer" not in result.stderr, \
        result.stderr[-3000:]
