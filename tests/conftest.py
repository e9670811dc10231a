"""Session-wide test set-up: the compile cache (flowc/codegen/cache.py) lives in a fresh
directory for each test session, so tests never read or fill the user's ~/.cache/flowc and
a stale entry can never decide an outcome, while kernels that recur within the session
(the same op and shapes in many tests) compile once. Subprocesses inherit it."""

from __future__ import annotations

import os
import shutil
import tempfile

_CACHE_DIR = tempfile.mkdtemp(prefix="flowc-test-cache-")


def pytest_configure(config) -> None:
    os.environ["FLOWC_CACHE_DIR"] = _CACHE_DIR


def pytest_unconfigure(config) -> None:
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)
