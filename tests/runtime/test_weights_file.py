"""A weights side file that is missing, truncated or from another model is refused."""

from __future__ import annotations

import shutil

import naive_backend
import pytest

import flowc
from flowc.examples import zoo
from flowc.runtime import ArtifactError, RuntimeStatusError


@pytest.fixture(scope="module")
def side_file_mlp(tmp_path_factory):
    out = tmp_path_factory.mktemp("side")
    flowc.compile(zoo.mlp(), out / "a", batch=2, weights="file", backend=naive_backend)
    flowc.compile(zoo.mlp(seed=9), out / "b", batch=2, weights="file", backend=naive_backend)
    return out


def test_missing_weights_file(side_file_mlp, tmp_path):
    art = shutil.copytree(side_file_mlp / "a", tmp_path / "a")
    (art / "mlp.weights").unlink()
    with pytest.raises(ArtifactError, match=r"missing artifact file 'mlp\.weights'"):
        flowc.load(art)


def test_truncated_weights_file(side_file_mlp, tmp_path):
    art = shutil.copytree(side_file_mlp / "a", tmp_path / "a")
    data = (art / "mlp.weights").read_bytes()
    (art / "mlp.weights").write_bytes(data[:-100])
    with pytest.raises(ArtifactError, match="the weights file is truncated or from another"):
        flowc.load(art)


def test_weights_file_of_another_model(side_file_mlp, tmp_path):
    art = shutil.copytree(side_file_mlp / "a", tmp_path / "a")
    shutil.copyfile(side_file_mlp / "b" / "mlp.weights", art / "mlp.weights")
    with pytest.raises(RuntimeStatusError, match=r"weights file '.*mlp.weights' belongs to "
                                                 r"another model or flowc version .*"
                                                 r"\[FLOWC_ERR_WEIGHTS\]"):
        flowc.load(art)
