"""Loading and running an artifact never imports the compiler (a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
import numpy as np
import flowc
model = flowc.load(sys.argv[1])
out = model(np.ones((2, 64), np.float32))
assert out.shape == (2, 10), out.shape
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("mlir", "llvmlite", "onnx")
             or m.startswith(("flowc.ir", "flowc.codegen", "flowc.passes", "flowc.frontend")))
print("BAD:" + ",".join(bad))
"""


def test_load_and_run_import_no_compiler(built_mlp):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(built_mlp)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "BAD:"


def test_importing_flowc_loads_neither_compiler_nor_runtime():
    code = ("import sys, flowc; print(sorted(m for m in sys.modules if m.startswith('flowc.') "
            "or m.split('.')[0] in ('mlir', 'llvmlite', 'numpy')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_dir_of_flowc_shows_compile_and_load():
    """They load on first use, and dir(flowc) hid them."""
    import flowc

    assert {"compile", "load", "__version__"} <= set(dir(flowc))
