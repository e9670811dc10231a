"""The steps `flowc.testing.hostile_run` runs in its child processes: the CLI, a load and
run through the Python API checked against onnxruntime, and a C program built on an
artifact's header. Each returns an exit status: 0 ok, 1 with one `flowc: error:` line on
stderr, 3 with a `wrong:` line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

RUN_INPUT_LIMIT = 64 << 20   # larger inputs are not drawn: the run step is skipped


def cli(argv: list[str]) -> int:
    from flowc.cli import main

    return main(argv)


def api_run(art: Path, model: Path, names: list[str] | None, check: bool,
            out: Path) -> int:
    """Load and run `art` on random inputs; 1 with one `flowc: error:` line for an
    ArtifactError, 3 with a `wrong:` line when names or outputs disagree."""
    import numpy as np

    import flowc
    from flowc.cli.common import random_array
    from flowc.runtime.errors import ArtifactError

    try:
        m = flowc.load(art, threads=1)
    except ArtifactError as exc:
        print(f"flowc: error: {exc}", file=sys.stderr)
        return 1
    with m:
        got = [n for n, _, _ in m.inputs]
        if names is not None and sorted(got) != sorted(names):
            print(f"wrong: input names {got!r}, the model's {names!r}", file=sys.stderr)
            return 3
        if sum(np.dtype(d).itemsize * math.prod(s) for _, d, s in m.inputs) > \
                RUN_INPUT_LIMIT:   # (math.prod: numpy's wraps past 2**63)
            print("run skipped: inputs too large", flush=True)
            return 0
        rng = np.random.default_rng(0)
        feeds = {n: random_array(rng, d, s) for n, d, s in m.inputs}
        try:
            result = m.run(**feeds)
        except ArtifactError as exc:
            print(f"flowc: error: {exc}", file=sys.stderr)
            return 1
    with open(out, "wb") as f:
        for value in result.values():
            f.write(np.ascontiguousarray(value).tobytes())
    return compare(model, feeds, result) if check else 0


def compare(model: Path, feeds: dict, result: dict) -> int:
    import numpy as np

    try:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(model), options,
                                       providers=["CPUExecutionProvider"])
        want = dict(zip([o.name for o in session.get_outputs()],
                        session.run(None, feeds), strict=True))
    except Exception as exc:   # onnxruntime refuses it: nothing to compare with
        print(f"onnxruntime: {type(exc).__name__}", flush=True)
        return 0
    for name, ref in want.items():
        got = result.get(name)
        if got is None or np.shape(got) != np.shape(ref) or not np.allclose(
                np.asarray(got, np.float64), np.asarray(ref, np.float64),
                rtol=1e-4, atol=1e-5, equal_nan=True):
            print(f"wrong: output {name!r} differs from onnxruntime's "
                  f"({None if got is None else np.shape(got)} vs {np.shape(ref)})",
                  file=sys.stderr)
            return 3
    return 0


def header(art: Path, folder: Path) -> int:
    """Build and run a C program that includes the artifact's header."""
    name = json.loads((art / "manifest.json").read_text())["name"]
    main = folder / "main.c"
    main.write_text(f'#include "{name}.h"\nint main(void) {{ return 0; }}\n')
    build = subprocess.run(["cc", "-o", str(folder / "prog"), str(main), f"-I{art}",
                            f"-L{art}", f"-l{name}", f"-Wl,-rpath,{art}"],
                           capture_output=True, text=True)
    if build.returncode:
        print(f"wrong: the header does not compile: {build.stderr.strip()[-300:]}",
              file=sys.stderr)
        return 3
    return subprocess.run([str(folder / "prog")]).returncode


__all__ = ["RUN_INPUT_LIMIT", "api_run", "cli", "compare", "header"]
