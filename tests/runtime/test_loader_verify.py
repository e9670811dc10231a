"""`flowc.load` checks the artifact before running any of it (flowc/runtime/verify.py):
hostile manifests (a FIFO, deep nesting, huge), files that are not regular or lead outside
the directory, and a library whose digest differs (its constructor must not run)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from naive_backend import NaiveBackend

import flowc
from flowc.examples import zoo
from flowc.runtime import ArtifactError
from flowc.runtime.verify import MANIFEST_MAX_BYTES


def load_error(path: Path) -> str:
    with pytest.raises(ArtifactError) as info:
        flowc.load(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def at_once(call: Callable[[], Any], fifo: Path) -> Any:
    """What `call` returns (or the ArtifactError it raises), within a second; fails the test
    if it is still blocked then (opening `fifo`, which is then given a writer so that the
    call ends instead of hanging the suite)."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except ArtifactError as exc:
            result["value"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(1.0)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5.0)
        pytest.fail(f"blocked on the FIFO {fifo}")
    return result["value"]


def test_fifo_manifest_is_refused_at_once(mlp_copy):
    manifest = mlp_copy / "manifest.json"
    manifest.unlink()
    os.mkfifo(manifest)
    error = at_once(lambda: flowc.load(mlp_copy), manifest)
    assert str(error) == f"{manifest}: the manifest is not a regular file (found a FIFO)"


@pytest.fixture(scope="module")
def side_file_mlp(tmp_path_factory):
    out = tmp_path_factory.mktemp("side") / "mlp"
    flowc.compile(zoo.mlp(), out, batch=2, weights="file", backend=NaiveBackend())
    return out


def test_weights_file_that_is_a_fifo(side_file_mlp, tmp_path):
    """Refused by the loader, and by the C runtime (which opens it non-blocking) for a C
    program passing its path."""
    art = shutil.copytree(side_file_mlp, tmp_path / "a")
    model = flowc.load(art)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    ctx = ctypes.c_void_p()
    create = model._fn("create_with_weights")
    status = at_once(lambda: create(ctypes.byref(ctx), str(fifo).encode()), fifo)
    assert status == 5
    assert model._fn("error")(ctx).decode() == f"mlp: weights file '{fifo}' is not a regular file"
    model._fn("destroy")(ctx)
    (art / "mlp.weights").unlink()
    os.mkfifo(art / "mlp.weights")
    error = at_once(lambda: flowc.load(art), art / "mlp.weights")
    assert str(error) == (f"{art / 'mlp.weights'}: the weights file is not a regular file "
                          "(found a FIFO)")


def test_deeply_nested_manifest(mlp_copy):
    (mlp_copy / "manifest.json").write_text("[" * 100000)
    assert load_error(mlp_copy) == (f"{mlp_copy / 'manifest.json'}: not a readable manifest: "
                                    "JSON nested too deeply")


def test_oversized_manifest(mlp_copy):
    (mlp_copy / "manifest.json").write_bytes(b" " * (MANIFEST_MAX_BYTES + 1))
    assert load_error(mlp_copy).endswith(f"not a readable manifest: larger than "
                                         f"{MANIFEST_MAX_BYTES} bytes")


def test_manifest_that_is_not_utf8(mlp_copy):
    (mlp_copy / "manifest.json").write_bytes(b'{"format": "\xff"}')
    assert "not a readable manifest: 'utf-8' codec can't decode" in load_error(mlp_copy)


def test_malformed_field_is_shown_short(mlp_copy):
    manifest = json.loads((mlp_copy / "manifest.json").read_text())
    manifest["files"] = {"a" * 10000: [[[[[1]]]]]}
    (mlp_copy / "manifest.json").write_text(json.dumps(manifest))
    message = load_error(mlp_copy)
    assert message.startswith(f"{mlp_copy / 'manifest.json'}: malformed files {{'aaa")
    assert len(message) < 400


@pytest.mark.parametrize("digest", ["..", -1, "", None, 2**70, float("nan"), "A" * 64])
def test_malformed_digest_is_refused(mlp_copy, digest):
    """A digest field the loader does not compare (embedded weights) is still checked: the
    hostile-model campaign's manifest family found these loaded."""
    manifest = json.loads((mlp_copy / "manifest.json").read_text())
    manifest["weights"]["sha256"] = digest
    (mlp_copy / "manifest.json").write_text(json.dumps(manifest))
    assert ": malformed weights {" in load_error(mlp_copy)


def test_library_symlinked_outside_the_directory(mlp_copy, tmp_path):
    outside = tmp_path / "elsewhere.so"
    shutil.move(mlp_copy / "libmlp.so", outside)
    (mlp_copy / "libmlp.so").symlink_to(outside)
    assert load_error(mlp_copy) == (f"{mlp_copy / 'libmlp.so'}: the library leads outside the "
                                    f"artifact directory (to {outside}); refusing to read it")


def test_symlink_inside_the_directory_is_followed(mlp_copy):
    (mlp_copy / "libmlp.so").rename(mlp_copy / "real.so")
    (mlp_copy / "libmlp.so").symlink_to("real.so")
    flowc.load(mlp_copy).close()


def test_manifest_symlinked_outside_the_directory(mlp_copy, tmp_path):
    outside = tmp_path / "manifest.json"
    shutil.move(mlp_copy / "manifest.json", outside)
    (mlp_copy / "manifest.json").symlink_to(outside)
    assert "the manifest leads outside the artifact directory" in load_error(mlp_copy)


def test_listed_file_that_is_a_directory(mlp_copy):
    (mlp_copy / "mlp.h").unlink()
    (mlp_copy / "mlp.h").mkdir()
    assert load_error(mlp_copy) == (f"{mlp_copy / 'mlp.h'}: the artifact file is not a regular "
                                    "file (found a directory)")


def _canary_library(directory: Path, canary: Path) -> bytes:
    """A shared library whose constructor creates `canary`."""
    source = directory / "canary.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void f(void) {\n'
                      f'  FILE *f = fopen("{canary}", "w"); if (f) fclose(f);\n}}\n')
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(directory / "canary.so"),
                    str(source)], check=True, capture_output=True)
    return (directory / "canary.so").read_bytes()


def test_library_with_another_digest_never_runs(mlp_copy, tmp_path):
    """A library that is not the one the manifest's digest names is refused before dlopen:
    its constructor does not run. (With the digest matching, it does: the canary works.)"""
    canary = tmp_path / "canary"
    (mlp_copy / "libmlp.so").write_bytes(_canary_library(tmp_path, canary))
    message = load_error(mlp_copy)
    assert re.fullmatch(re.escape(f"{mlp_copy / 'libmlp.so'}: the library does not match the "
                                  "manifest (its sha256 is ") + r"[0-9a-f]{16}\.\.\., the "
                        r"manifest says [0-9a-f]{16}\.\.\.\); the artifact is corrupted or "
                        r"mixed up with another build; recompile it", message), message
    assert not canary.exists()
    manifest = json.loads((mlp_copy / "manifest.json").read_text())
    manifest["files"]["libmlp.so"] = hashlib.sha256(
        (mlp_copy / "libmlp.so").read_bytes()).hexdigest()
    (mlp_copy / "manifest.json").write_text(json.dumps(manifest))
    assert "the library lacks the flowc API" in load_error(mlp_copy)
    assert canary.exists()


def test_library_with_one_byte_changed(mlp_copy):
    lib = mlp_copy / "libmlp.so"
    data = bytearray(lib.read_bytes())
    data[100] ^= 1
    lib.write_bytes(bytes(data))
    message = load_error(mlp_copy)
    assert message.startswith(f"{lib}: the library does not match the manifest (its sha256 ")
