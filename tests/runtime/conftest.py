"""Fixtures of the runtime tests: one small artifact built with the naive test backend."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "artifact"))

from naive_backend import NaiveBackend

import flowc
from flowc.examples import zoo


@pytest.fixture(scope="session")
def built_mlp(tmp_path_factory):
    """The zoo MLP at batch 2, compiled once; tests copy it before damaging it."""
    out = tmp_path_factory.mktemp("runtime_mlp")
    flowc.compile(zoo.mlp(), out, batch=2, backend=NaiveBackend())
    return out


@pytest.fixture
def mlp_copy(built_mlp, tmp_path):
    """A private copy of the built MLP artifact that a test may break."""
    return Path(shutil.copytree(built_mlp, tmp_path / "mlp"))
