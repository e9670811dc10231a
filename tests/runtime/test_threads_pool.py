"""The runtime's pool under stress (tests/runtime/threads_pool_stress.c): every iteration
once, every slot once, barriers that order writes, nested regions serial and whole, regions
after the workers fell asleep; at 1 to 4 threads, built plainly and under ThreadSanitizer."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from flowc.codegen.emit.link import RUNTIME_DIR, RUNTIME_SOURCES

STRESS = Path(__file__).with_name("threads_pool_stress.c")
pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")


def build(tmp: Path, *flags: str) -> subprocess.CompletedProcess:
    sources = [str(RUNTIME_DIR / src) for src in RUNTIME_SOURCES]
    return subprocess.run(["cc", *flags, "-Wall", "-DFLOWC_PREFIX=t_",
                           f"-I{RUNTIME_DIR}", *sources, str(STRESS), "-o", "stress",
                           "-lpthread", "-lm", "-ldl"], cwd=tmp, capture_output=True,
                          text=True, check=False)


def test_threads_pool_stress(tmp_path: Path):
    built = build(tmp_path, "-O2")
    assert built.returncode == 0, built.stderr
    done = subprocess.run([str(tmp_path / "stress"), "300"], capture_output=True, text=True,
                          timeout=300)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stdout + done.stderr


def test_threads_pool_is_race_free_under_thread_sanitizer(tmp_path: Path):
    if build(tmp_path, "-O1", "-g", "-fsanitize=thread").returncode != 0:
        pytest.skip("cc cannot build -fsanitize=thread programs here")
    done = subprocess.run([str(tmp_path / "stress"), "60"], capture_output=True, text=True,
                          timeout=600, env={"TSAN_OPTIONS": "halt_on_error=1 exitcode=66"})
    assert done.returncode == 0 and "WARNING: ThreadSanitizer" not in done.stderr, \
        done.stderr[-4000:]
    assert done.stdout == "ok\n"
