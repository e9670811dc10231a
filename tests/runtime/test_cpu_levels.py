"""The load-time CPU check of each x86-64 level: the artifact's `cpu_missing()` (as the
compiler renders it) run against faked CPU flags refuses every CPU below the level, naming
the first feature it lacks, and accepts one at the level; and artifacts of each level load
here when this CPU has the level."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pytest

from flowc.codegen.driver import describe_target
from flowc.codegen.emit.entry import _cpu_check
from flowc.codegen.target import X86_LEVELS, get_target, level_features

# gcc's names of the checkable features each level adds (the runtime's X86_FEATURES)
CHECKED = {"x86-64-v2": ["sse3", "ssse3", "sse4.1", "sse4.2", "popcnt"],
           "x86-64-v3": ["avx", "avx2", "fma", "f16c", "bmi", "bmi2"],
           "x86-64-v4": ["avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"]}


def run_check(tmp_path: Path, level: str, cpu_flags: list[str]) -> str:
    """What the rendered check of `level`'s artifact says on a CPU with `cpu_flags`."""
    features = describe_target(get_target(level))["features"]
    flags = ", ".join(f'"{f}"' for f in cpu_flags) or "0"
    source = "\n".join([
        "#include <stdio.h>", "#include <string.h>",
        f"static const char *flags[] = {{{flags}, 0}};",
        "static int fake_supports(const char *f) {",
        "  for (int i = 0; flags[i]; i++) if (!strcmp(flags[i], f)) return 1;",
        "  return 0;", "}",
        "#define __builtin_cpu_init() ((void)0)",
        "#define __builtin_cpu_supports(f) fake_supports(f)",
        *_cpu_check(features),
        "int main(void) { const char *m = cpu_missing(); puts(m ? m : \"ok\"); return 0; }"])
    (tmp_path / "check.c").write_text(source)
    subprocess.run(["cc", "-O0", "check.c", "-o", "check"], cwd=tmp_path, check=True)
    return subprocess.run(["./check"], cwd=tmp_path, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 feature checks")
@pytest.mark.parametrize("level", list(X86_LEVELS))
def test_each_level_refuses_a_cpu_below_it(tmp_path, level):
    names = list(X86_LEVELS)
    below = [f for lv in names[:names.index(level)] for f in CHECKED[lv]]
    at = below + CHECKED[level]
    assert run_check(tmp_path, level, at) == "ok"
    assert run_check(tmp_path, level, below) in CHECKED[level]
    for dropped in CHECKED[level]:  # any one feature of the level missing is named
        assert run_check(tmp_path, level, [f for f in at if f != dropped]) == dropped
    assert set(CHECKED[level]) <= set(level_features(level)) | {"bmi"}
