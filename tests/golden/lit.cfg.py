"""lit configuration for flowc's golden tests (`python -m lit -v tests/golden`).

RUN lines call `flowc` and `filecheck` by name: the directory of the Python running lit
(the virtual environment's bin/) goes first on PATH, so both resolve to that environment's
executables; a PYTHONPATH set for lit is passed on. `%flowc` is the same command spelled
as `python -m flowc`, for environments where the `flowc` script is not installed next to
the interpreter.
"""

import os
import sys

import lit.formats

config.name = "flowc-golden"  # noqa: F821  (lit provides `config`)
config.test_format = lit.formats.ShTest(execute_external=False)  # noqa: F821
config.suffixes = [".flowc"]  # noqa: F821
config.test_source_root = os.path.dirname(__file__)  # noqa: F821
config.excludes = ["lit.cfg.py"]  # noqa: F821

bindir = os.path.dirname(sys.executable)  # not resolved: a venv's python is a symlink
config.environment["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])  # noqa: F821
if os.environ.get("PYTHONPATH"):  # a worktree's flowc (PYTHONPATH=WT) is the one tested
    config.environment["PYTHONPATH"] = os.environ["PYTHONPATH"]  # noqa: F821
config.substitutions.append(("%flowc", f"{sys.executable} -m flowc"))  # noqa: F821

try:  # ops another part of flowc may not define yet: `// REQUIRES: op-NAME`
    from flowc.ir.ops import OPS

    for op in OPS:
        config.available_features.add(f"op-{op}")  # noqa: F821
except ImportError:
    pass
