"""The peak memory of a compile, measured in a child process (tests of compile-time memory).

Contract: `compile_peak(model, out, small)` runs `flowc.compile(small, out + "_small")`
and then `flowc.compile(model, out)` (no compile cache) in a fresh Python process with this
one's module path, and returns by how many bytes its peak resident set (VmHWM, Linux's
/proc/self/status) grew past its resident set before the second compile: the first loads
the compiler's modules, so that what is measured is the compile's own memory. A failing
child is an AssertionError quoting its stderr's end.
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = """
import sys
import flowc

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

flowc.compile(sys.argv[3], sys.argv[2] + "_small", cache=False)
before = status("VmRSS")
flowc.compile(sys.argv[1], sys.argv[2], cache=False)
print(status("VmHWM") - before)
"""


def compile_peak(model: str, out: str, small: str, timeout: float = 300) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", CHILD, model, out, small],
                          capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])
