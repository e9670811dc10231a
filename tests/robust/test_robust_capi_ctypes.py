"""The artifact's C API called through ctypes with bad arguments (tests/robust/py/
robust_capi_calls.py, in a subprocess so that a crash shows as its exit status): a
context whose creation failed and is used anyway, NULL contexts, data and shapes, absurd
ranks, dtype codes and indices, a misaligned arena, a thread count of 0, and too few or
mistyped arguments. Each gives its status code and a message naming the model, or
ctypes' TypeError/ArgumentError, never a crash. The same from C, under ASan/UBSan, is
tests/robust/c/robust_asan_driver.c (`misuse`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import flowc

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parent / "py" / "robust_capi_calls.py"

EXPECTED = {   # case: (status, a fragment of the message)
    "create_missing_weights": (5, "cannot open weights file '/nonexistent/w.weights'"),
    "run_broken": (1, "w: this context is unusable, its creation failed (w: cannot open"),
    "set_input_broken": (1, "is unusable"),
    "set_output_broken": (1, "is unusable"),
    "set_threads_broken": (1, "is unusable"),
    "set_arena_broken": (1, "is unusable"),
    "create_null_out": (1, "no context: the context pointer is NULL"),
    "run_null": (1, "no context"),
    "set_input_null_ctx": (1, "no context"),
    "set_threads_null": (1, "no context"),
    "set_arena_null": (1, "no context"),
    "create": (0, ""),
    "set_input_null_data": (1, "w: input 'x': data is NULL"),
    "set_input_null_shape": (2, "(no shape given)"),
    "set_input_rank_huge": (2, "expected rank 2, shape [4,16]; got rank 1073741824"),
    "set_input_rank_negative": (2, "got rank -5"),
    "set_input_dtype_unknown": (3, "expected dtype f32, got unknown"),
    "set_input_index_huge": (1, "input index 1073741824 out of range (the model has 1)"),
    "set_arena_misaligned": (1, "the arena must be 64-byte aligned"),
    "set_threads_zero": (1, "thread count must be 1..1024, got 0"),
    "run_after_misuse": (0, ""),
    "run_with_broken": (1, "is unusable"),
    "run_with_null_inputs": (1, "w: run_with: input 0 'x': data is NULL"),
    "run_with_null_output": (1, "w: run_with: output 0 'y': data is NULL"),
    "run_with": (0, ""),
    "run_after_run_with": (0, ""),
}
RAISES = ("run_no_arguments", "set_input_too_few", "set_threads_wrong_type")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("capi") / "w"
    flowc.compile(ROOT / "flowc/examples/mlp.flowc", out, name="w", batch=4, weights="file")
    return out


def test_robust_capi_misuse_through_ctypes(artifact):
    result = subprocess.run([sys.executable, str(SCRIPT), str(artifact), "w"],
                            capture_output=True, text=True, timeout=120)
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and lines[-1:] == ["done"], \
        f"crashed (status {result.returncode}) after: {lines[-1:]}\n{result.stderr[-2000:]}"
    seen = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in lines[:-1]}
    for case, (status, fragment) in EXPECTED.items():
        assert seen[case].startswith(f"status={status} "), (case, seen[case])
        assert fragment in seen[case], (case, seen[case])
    for case in RAISES:   # ctypes refuses before calling C
        assert seen[case].split(" ")[0] in ("raised=TypeError", "raised=ArgumentError"), \
            (case, seen[case])
    assert seen["output_broken_index"] == "pointer=None"
    assert seen["input_null"] == "pointer=None"
    # run_with wrote the caller's (unaligned) output; the next plain run did not
    assert seen["run_with_result"] == "wrote=True left_alone=True"
