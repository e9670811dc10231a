"""Shared fixtures of the artifact tests: artifacts compiled once per session with the
naive test backend (naive_backend.py), so these tests do not wait on MLIR."""

from __future__ import annotations

import pytest
from artifact_util import compile_naive

from flowc.examples import zoo


@pytest.fixture(scope="session")
def mlp_model():
    return zoo.mlp()


@pytest.fixture(scope="session")
def naive_mlp(tmp_path_factory, mlp_model):
    """(artifact dir, manifest) of the zoo MLP at batch 3, naive kernels."""
    out = tmp_path_factory.mktemp("naive_mlp")
    return out, compile_naive(mlp_model, out, batch=3)
