"""A model's file and its external data (flowc/frontend/onnx_external.py): data stays inside
the model's folder, only regular files are read, sizes are checked before reading, and
every refusal is one line naming the model, the tensor and the reason."""

from __future__ import annotations

import os
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from flowc.frontend import onnx_external
from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret

W = np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)


def model(location: str, offset: int | str | None = None, length: int | str | None = None,
          dims=(2, 3)) -> onnx.ModelProto:
    """y = x + w, with w's data at `location` (external_data fields as given)."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims),
                    data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            w.external_data.add(key=key, value=str(value))
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save(tmp_path, proto: onnx.ModelProto, name: str = "m.onnx"):
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_bytes(proto.SerializeToString())
    return path


def refused(path, pattern: str) -> str:
    with pytest.raises(OnnxImportError) as info:
        import_onnx(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: initializer 'w': "), message
    assert re.search(pattern, message), message
    return message


def check_result(path) -> None:
    x = np.random.default_rng(6).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(interpret(import_onnx(path), {"x": x})["y"], x + W)


def test_external_data_in_the_folder_and_a_subfolder(tmp_path):
    path = save(tmp_path, model("w.bin"))
    (path.parent / "w.bin").write_bytes(W.tobytes())
    check_result(path)
    (path.parent / "data").mkdir()
    (path.parent / "data" / "all.bin").write_bytes(b"\x07" * 16 + W.tobytes() + b"tail")
    path = save(tmp_path, model("data/all.bin", offset=16, length=W.nbytes), "sub.onnx")
    check_result(path)


def test_onnx_saved_external_data_round_trips(tmp_path):
    proto = model("unused")
    proto.graph.ClearField("initializer")
    proto.graph.initializer.append(numpy_helper.from_array(W, "w"))
    path = tmp_path / "model" / "m.onnx"
    (path.parent / "weights").mkdir(parents=True)
    onnx.save(proto, path, save_as_external_data=True, location="weights/w.data",
              size_threshold=0)
    check_result(path)


def test_symlinked_directory_escape_is_refused(tmp_path):
    path = save(tmp_path, model("root/etc/passwd"))
    (path.parent / "root").symlink_to("/")
    refused(path, r"location 'root/etc/passwd' resolves to /etc/passwd, outside the "
                  r"model's folder")


def test_symlinked_file_inside_the_folder_is_followed(tmp_path):
    path = save(tmp_path, model("link.bin"))
    (path.parent / "w.bin").write_bytes(W.tobytes())
    (path.parent / "link.bin").symlink_to("w.bin")
    check_result(path)
    (tmp_path / "outside.bin").write_bytes(W.tobytes())
    (path.parent / "link.bin").unlink()
    (path.parent / "link.bin").symlink_to(tmp_path / "outside.bin")
    refused(path, "outside the model's folder")


@pytest.mark.parametrize("location, pattern", [
    ("../secret.bin", r"resolves to .*secret\.bin, outside the model's folder"),
    ("/etc/passwd", r"'/etc/passwd' is an absolute path"),
    ("/proc/self/environ", r"'/proc/self/environ' is an absolute path"),
    ("sub/../../secret.bin", "outside the model's folder"),
])
def test_locations_outside_the_folder_are_refused(tmp_path, location, pattern):
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    refused(save(tmp_path, model(location)), pattern)


def test_proc_through_a_symlink_is_refused(tmp_path):
    path = save(tmp_path, model("env"))
    (path.parent / "env").symlink_to("/proc/self/environ")
    refused(path, "outside the model's folder")


def test_system_files_are_refused_even_when_inside_the_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_external, "_SYSTEM", (str(tmp_path / "model"),))
    refused(save(tmp_path, model("w.bin")), r"is a system file")


def test_a_fifo_is_refused_without_blocking(tmp_path):
    path = save(tmp_path, model("pipe"))
    os.mkfifo(path.parent / "pipe")
    refused(path, r"external data file 'pipe' is a FIFO")


def test_a_directory_is_refused(tmp_path):
    path = save(tmp_path, model("d"))
    (path.parent / "d").mkdir()
    refused(path, r"external data file 'd' is a directory")
    refused(save(tmp_path, model(".")), r"external data file '\.' is a directory")


def test_a_missing_file_is_one_line(tmp_path):
    refused(save(tmp_path, model("nope.bin")), r"cannot open external data file 'nope\.bin' "
                                               r"\(No such file or directory\)")


def test_sparse_64gib_file_is_refused_before_reading(tmp_path):
    path = save(tmp_path, model("huge.bin"))
    (path.parent / "huge.bin").touch()
    os.truncate(path.parent / "huge.bin", 64 << 30)  # sparse: no disk, no reads
    refused(path, r"holds 68719476736 bytes but dims \[2, 3\] need 24")


def test_sparse_file_matching_huge_dims_is_refused_by_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_external, "memory_bytes", lambda: 16 << 30)
    path = save(tmp_path, model("huge.bin", dims=(1 << 34,)))
    (path.parent / "huge.bin").touch()
    os.truncate(path.parent / "huge.bin", 64 << 30)
    refused(path, r"external data of 68719476736 bytes does not fit in this machine's memory")


def test_dims_past_the_tensor_limit_are_refused_before_opening(tmp_path):
    refused(save(tmp_path, model("absent.bin", dims=(2**40, 2**40, 2**40))),
            r"dims \[1099511627776, 1099511627776, 1099511627776\] of f32 exceed the limit "
            r"of 281474976710656 bytes")


@pytest.mark.parametrize("offset, length, pattern", [
    (0, 20, r"holds 20 bytes but dims \[2, 3\] need 24"),
    (40, None, r"offset 40 is past the end of 'w\.bin' \(32 bytes\)"),
    (16, 24, r"offset 16 \+ length 24 runs past the end of 'w\.bin' \(32 bytes\)"),
    ("-1", None, r"offset '-1' is not an integer >= 0"),
    (None, "1e3", r"length '1e3' is not an integer >= 0"),
    (None, "+24", r"length '\+24' is not an integer >= 0"),
])
def test_offset_and_length_are_checked(tmp_path, offset, length, pattern):
    path = save(tmp_path, model("w.bin", offset, length))
    (path.parent / "w.bin").write_bytes(W.tobytes() + bytes(8))  # 32 bytes
    refused(path, pattern)


def test_offset_without_length_takes_the_rest_of_the_file(tmp_path):
    path = save(tmp_path, model("w.bin", offset=8))
    (path.parent / "w.bin").write_bytes(bytes(8) + W.tobytes())
    check_result(path)


def test_duplicate_keys_are_refused(tmp_path):
    proto = model("w.bin")
    proto.graph.initializer[0].external_data.add(key="location", value="/etc/passwd")
    path = save(tmp_path, proto)
    refused(path, r"external data key 'location' given twice")


def test_external_data_in_a_model_proto_is_not_read(tmp_path, monkeypatch):
    (tmp_path / "w.bin").write_bytes(W.tobytes())
    monkeypatch.chdir(tmp_path)  # onnx's reader would look here
    with pytest.raises(OnnxImportError, match=r"^<model>: initializer 'w': its data is "
                                              r"external and was not read"):
        import_onnx(model("w.bin"))


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_model_file_that_is_not_a_file(tmp_path, kind):
    path = tmp_path / "m.onnx"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    name = "a FIFO" if kind == "fifo" else "a directory"
    with pytest.raises(OnnxImportError, match=f"^{re.escape(str(path))}: is {name}, not an "
                                              "ONNX model file$"):
        import_onnx(path)


def test_huge_model_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "m.onnx"
    path.touch()
    os.truncate(path, 3 << 30)
    with pytest.raises(OnnxImportError, match=r": 3221225472 bytes, more than an ONNX "
                                              r"protobuf can hold \(2147483648\)"):
        import_onnx(path)


def test_onnx_validation_errors_are_one_line(tmp_path, monkeypatch):
    def reject(*_):
        raise onnx.checker.ValidationError("Field 'x' is bad\n\n==> Context: ...")

    monkeypatch.setattr("flowc.frontend.onnx.unsupported_nodes", reject)
    path = save(tmp_path, model("w.bin"))
    (path.parent / "w.bin").write_bytes(W.tobytes())
    with pytest.raises(OnnxImportError) as info:
        import_onnx(path)
    assert str(info.value) == f"{path}: onnx refuses the model: Field 'x' is bad"


def test_memory_error_is_one_line(tmp_path, monkeypatch):
    def exhaust(*_):
        raise MemoryError

    monkeypatch.setattr("flowc.frontend.onnx.unsupported_nodes", exhaust)
    path = save(tmp_path, model("w.bin"))
    (path.parent / "w.bin").write_bytes(W.tobytes())
    with pytest.raises(OnnxImportError, match=r": out of memory while importing the model$"):
        import_onnx(path)


def test_attribute_and_body_tensors_are_confined_too(tmp_path):
    value = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[2, 3],
                        data_location=TensorProto.EXTERNAL)
    value.external_data.add(key="location", value="../secret.bin")
    const = helper.make_node("Constant", [], ["c"], name="k", value=value)
    then = helper.make_graph([const], "then", [], [helper.make_tensor_value_info(
        "c", TensorProto.FLOAT, [2, 3])])
    proto = model("w.bin")
    proto.graph.node.append(helper.make_node("If", ["cond"], ["z"], name="if",
                                             then_branch=then, else_branch=then))
    path = save(tmp_path, proto)
    (path.parent / "w.bin").write_bytes(W.tobytes())
    with pytest.raises(OnnxImportError, match=r": attribute 'value' of node 'k' \(Constant\): "
                                              r"external data location '\.\./secret\.bin' "
                                              r"resolves to .* outside the model's folder"):
        import_onnx(path)
