"""The artifact directory is written whole or not at all (flowc/codegen/emit/outdir.py): a new
compile replaces an old artifact entirely, refuses a directory that is not one, leaves
nothing behind when it fails, and names the artifact after the model's file."""

from __future__ import annotations

import errno
import os

import onnx
import pytest
from artifact_util import compile_naive, views_graph

import flowc
from flowc.codegen.emit import artifact
from flowc.examples import zoo
from flowc.ir.errors import FlowcError
from flowc.runtime.errors import ArtifactError


def test_another_model_replaces_every_file_of_the_old_one(tmp_path):
    out = tmp_path / "art"
    compile_naive(views_graph(), out, name="cnn", batch=2)
    assert (out / "libcnn.so").exists()
    compile_naive(zoo.mlp(), out, name="mlp", batch=2)
    assert sorted(p.name for p in out.iterdir()) == ["libmlp.a", "libmlp.so", "manifest.json",
                                                     "mlp.h"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]  # no staging left


def test_a_directory_that_is_not_an_artifact_is_refused(tmp_path):
    out = tmp_path / "photos"
    out.mkdir()
    (out / "cat.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(FlowcError, match=r"^output directory '.*photos' is not empty and holds "
                                         r"no flowc artifact \(no manifest.json\); refusing to "
                                         r"replace it: choose another directory$"):
        compile_naive(zoo.mlp(), out, batch=2)
    assert [p.name for p in out.iterdir()] == ["cat.jpg"]


def test_a_failed_write_leaves_the_old_artifact_and_nothing_else(tmp_path, monkeypatch):
    out = tmp_path / "art"
    compile_naive(zoo.mlp(), out, name="mlp", batch=2)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full_disk(build_dir, out_dir, name, *args, **kwargs):
        (out_dir / f".lib{name}.so.tmp").write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(artifact, "link", full_disk)
    with pytest.raises(OSError, match="No space left"):
        compile_naive(views_graph(), out, name="cnn", batch=2)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]


def test_the_default_name_is_the_model_files(tmp_path):
    model = zoo.mlp()
    model.graph.name = "main_graph"  # as every torch export
    path = tmp_path / "my-net.v2.onnx"
    onnx.save(model, path)
    manifest = compile_naive(str(path), tmp_path / "art", batch=2)
    assert manifest["name"] == "my_net_v2"
    assert (tmp_path / "art" / "libmy_net_v2.so").exists()


def test_a_dump_folder_inside_the_output_stays(tmp_path):
    out = tmp_path / "art"
    compile_naive(zoo.mlp(), out, name="mlp", dump_dir=out / "dump", batch=2)
    compile_naive(zoo.mlp(), out, name="mlp", dump_dir=out / "dump", batch=2)
    assert (out / "dump" / "mlp_model.c").exists() and (out / "manifest.json").exists()


def test_the_dump_folder_may_not_be_the_output(tmp_path):
    with pytest.raises(FlowcError, match="is the output directory; give the dump a folder"):
        compile_naive(zoo.mlp(), tmp_path / "art", dump_dir=tmp_path / "art", batch=2)


def test_reloading_a_recompiled_path_in_one_process_says_why(tmp_path):
    """dlopen returns the library it mapped first for a path: a second load of a recompiled
    artifact names that, not a bare graph-hash mismatch."""
    out = tmp_path / "art"
    compile_naive(zoo.mlp(), out, batch=3, name="mlp")
    first = flowc.load(out)
    compile_naive(zoo.mlp(), out, batch=2, name="mlp")
    with pytest.raises(ArtifactError, match="already loaded in this process"):
        flowc.load(out)
    first.close()


def test_compiling_into_the_working_directory_keeps_it(tmp_path, monkeypatch):
    """`-o .`: renaming the directory would leave the shell in a removed one."""
    out = tmp_path / "art"
    compile_naive(views_graph(), out, name="cnn", batch=2)
    monkeypatch.chdir(out)
    inode = os.stat(".").st_ino
    compile_naive(zoo.mlp(), ".", name="mlp", batch=2)
    assert os.stat(".").st_ino == inode and os.path.exists(os.getcwd())
    assert sorted(os.listdir(".")) == ["libmlp.a", "libmlp.so", "manifest.json", "mlp.h"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]
