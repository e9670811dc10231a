"""Compiling a 100 MiB SavedModel costs at most 2.5 copies of its weights: the model of
tf_saved_writer.py (25 variables of 1024x1024 float32, a matmul chain) is compiled by
`flowc.compile` in a child process, whose peak resident set (VmHWM) may grow by the
memory-mapped variables, their packed layout and the compiler's own memory, but not by
the weights blob built in memory, the side file's bytes or the written files read back
for the manifest (each a further copy: 4.5x before they were streamed). The artifact
loads (its manifest's hashes checked) and computes the chain."""

from __future__ import annotations

import numpy as np
from tf_saved_writer import write_chain_saved_model

import flowc
from flowc.testing.compile_memory import compile_peak


def test_compiling_a_100mb_saved_model_costs_at_most_2_5_copies(tmp_path):
    folder = str(tmp_path / "chain_saved")
    size = write_chain_saved_model(folder, width=1024, layers=25, seed=7)
    write_chain_saved_model(str(tmp_path / "small"), width=4, layers=2)
    peak = compile_peak(folder, str(tmp_path / "art"), str(tmp_path / "small"))
    assert peak <= 2.5 * size, f"peak RSS grew by {peak / 2**20:.0f} MiB"
    assert (tmp_path / "art" / "chain_saved.weights").stat().st_size == 64 + size
    weights = np.fromfile(f"{folder}/variables/variables.data-00000-of-00001",
                          np.float32).reshape(25, 1024, 1024)
    x = np.random.default_rng(1).standard_normal((1, 1024)).astype(np.float32)
    want = x.astype(np.float64)
    for w in weights:
        want = want @ w
    got = flowc.load(tmp_path / "art")(x)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
