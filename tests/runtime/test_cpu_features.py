"""An artifact built for a CPU feature this machine lacks is refused with a clear message."""

from __future__ import annotations

import platform
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from naive_backend import NaiveBackend

import flowc
from flowc.codegen.emit.entry import X86_FEATURES
from flowc.examples import zoo
from flowc.runtime import RuntimeStatusError


def missing_feature(tmp_path: Path) -> str | None:
    """A feature the runtime can check that this CPU lacks (asked the way it asks)."""
    checks = "".join(f'  if (!__builtin_cpu_supports("{f}")) {{ puts("{f}"); return 0; }}\n'
                     for f in X86_FEATURES)
    (tmp_path / "probe.c").write_text(f"#include <stdio.h>\nint main(void) {{\n{checks}}}\n")
    subprocess.run(["cc", "probe.c", "-o", "probe"], cwd=tmp_path, check=True)
    return subprocess.run(["./probe"], cwd=tmp_path, capture_output=True, text=True,
                          check=True).stdout.strip() or None


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 feature checks")
def test_artifact_for_a_missing_cpu_feature_is_refused(tmp_path):
    feature = missing_feature(tmp_path)
    if feature is None:
        pytest.skip("this CPU has every feature the runtime checks")

    class FutureCpuBackend(NaiveBackend):
        """The naive kernels, for a CPU with `feature` (and without sse4a)."""

        def get_target(self, name="host"):
            return replace(super().get_target(name), features=f"+{feature},-sse4a")

    manifest = flowc.compile(zoo.mlp(), tmp_path / "art", batch=1, backend=FutureCpuBackend())
    assert manifest["target"]["features"] == [feature]
    with pytest.raises(RuntimeStatusError, match=(
            f"cannot create a context: mlp: this CPU lacks '{feature}', which the artifact "
            r"was compiled for; recompile it for this machine \(flowc compile --target host\) "
            r"\[FLOWC_ERR_CPU\]")):
        flowc.load(tmp_path / "art")
