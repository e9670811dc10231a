"""A weights side file that is missing, truncated or from another model is refused."""

from __future__ import annotations

import hashlib
import json
import re
import shutil

import numpy as np
import pytest
from naive_backend import NaiveBackend

import flowc
from flowc.examples import zoo
from flowc.runtime import ArtifactError, RuntimeStatusError
from flowc.runtime.abi import WEIGHTS_HEADER


@pytest.fixture(scope="module")
def side_file_mlp(tmp_path_factory):
    out = tmp_path_factory.mktemp("side")
    flowc.compile(zoo.mlp(), out / "a", batch=2, weights="file", backend=NaiveBackend())
    flowc.compile(zoo.mlp(seed=9), out / "b", batch=2, weights="file", backend=NaiveBackend())
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
    """The loader's digest check refuses it; so does the C runtime's header check when the
    manifest's digest was changed to match (what a C program using the API gets)."""
    art = shutil.copytree(side_file_mlp / "a", tmp_path / "a")
    shutil.copyfile(side_file_mlp / "b" / "mlp.weights", art / "mlp.weights")
    with pytest.raises(ArtifactError, match=r"mlp\.weights: the weights file does not match "
                                            r"the manifest \(its sha256 is "):
        flowc.load(art)
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["files"]["mlp.weights"] = hashlib.sha256((art / "mlp.weights").read_bytes()
                                                      ).hexdigest()
    (art / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RuntimeStatusError, match=r"weights file '.*mlp.weights' belongs to "
                                                 r"another model or flowc version .*"
                                                 r"\[FLOWC_ERR_WEIGHTS\]"):
        flowc.load(art)


def test_weights_file_with_a_nan_written_in(side_file_mlp, tmp_path):
    """One weight overwritten in place (the size unchanged) is caught by the digest."""
    art = shutil.copytree(side_file_mlp / "a", tmp_path / "a")
    data = bytearray((art / "mlp.weights").read_bytes())
    data[WEIGHTS_HEADER:WEIGHTS_HEADER + 4] = np.float32(np.nan).tobytes()
    (art / "mlp.weights").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="^" + re.escape(
            f"{art / 'mlp.weights'}: the weights file does not match the manifest (its sha256 "
            "is ")):
        flowc.load(art)

