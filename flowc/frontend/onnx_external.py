"""An ONNX model file and its external data, read by flowc itself (onnx's readers never
open a file on flowc's behalf).

Contract:
- `read_model(path)` parses the model file. It is opened without blocking and must be a
  regular file of at most `MAX_MODEL_BYTES` (protobuf's 2 GiB limit), checked before
  anything is read: a directory, FIFO or device is refused, never waited on. The format
  follows the file extension as in `onnx.load`.
- `load_external(proto, path)` gives every tensor that names external data (initializers,
  sparse initializers, attribute tensors; in If/Loop bodies and model functions too) its
  bytes, in place, so that nothing reads a file afterwards. For each tensor, before
  anything is read:
  - its byte size (dims product x item size, sub-byte types packed) is at most
    `MAX_TENSOR_BYTES` (2**48), and the model's external bytes together fit in the
    machine's physical memory;
  - `location` is resolved with realpath against the model's folder and must stay inside
    that folder's realpath, symlinks anywhere on the way included: `../`, absolute paths
    and symlinks out of the folder are refused, as is anything under /proc or /sys;
  - it is opened component by component from the folder with O_NOFOLLOW (a symlink
    swapped in after the check is refused) and without blocking, and must be a regular file;
  - `offset` and `length` are decimal integers >= 0 inside the file (`length` defaults to
    the rest of it) and the byte count equals the tensor's size.
  Then exactly that many bytes are read. A refusal is one `OnnxImportError` line naming the
  model file, the tensor and the reason; running out of memory is one as well.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator

import onnx

from flowc.frontend.onnx_attrs import OnnxImportError, onnx_dtype
from flowc.ir.limits import MAX_TENSOR_BYTES

MAX_MODEL_BYTES = 2**31  # protobuf cannot parse a larger message
_SYSTEM = ("/proc", "/sys")  # pseudo-files: sizes and contents that are not data
_OPEN = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIGITS = re.compile(r"[0-9]+\Z")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_model(path: str) -> onnx.ModelProto:
    """The ModelProto in the file `path`, without its external data (see the contract)."""
    try:
        fd = os.open(path, _OPEN)
    except FileNotFoundError:
        raise OnnxImportError(f"{path}: no such file") from None
    except OSError as exc:
        raise OnnxImportError(f"{path}: cannot open the model ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OnnxImportError(f"{path}: is {_kind(st.st_mode)}, not an ONNX model file")
    with open(fd, "rb") as f:
        if st.st_size > MAX_MODEL_BYTES:
            raise OnnxImportError(
                f"{path}: {st.st_size} bytes, more than an ONNX protobuf can hold "
                f"({MAX_MODEL_BYTES}); big weights belong in external data")
        try:
            data = f.read(MAX_MODEL_BYTES + 1)
        except OSError as exc:
            raise OnnxImportError(f"{path}: cannot read the model ({exc.strerror})") from None
    if len(data) > MAX_MODEL_BYTES:
        raise OnnxImportError(f"{path}: grew past {MAX_MODEL_BYTES} bytes while read")
    ext = os.path.splitext(path)[1]
    fmt = onnx.serialization.registry.get_format_from_file_extension(ext) or "protobuf"
    try:
        return onnx.load_model_from_string(data, format=fmt)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise OnnxImportError(f"{path}: not a readable ONNX model ({type(exc).__name__}: "
                              f"{exc})") from None


# ---- which tensors ----------------------------------------------------------------------
def _graph_tensors(graph: onnx.GraphProto) -> Iterator[tuple[onnx.TensorProto, str]]:
    for t in graph.initializer:
        yield t, f"initializer '{t.name}'"
    for s in graph.sparse_initializer:
        yield s.values, f"sparse initializer '{s.values.name}'"
        yield s.indices, f"indices of sparse initializer '{s.values.name}'"
    yield from _node_tensors(graph.node)


def _node_tensors(nodes) -> Iterator[tuple[onnx.TensorProto, str]]:
    for node in nodes:
        for a in node.attribute:
            what = f"attribute '{a.name}' of node '{node.name}' ({node.op_type})"
            if a.HasField("t"):
                yield a.t, what
            yield from ((t, what) for t in a.tensors)
            sparse = [a.sparse_tensor] if a.HasField("sparse_tensor") else []
            for s in [*sparse, *a.sparse_tensors]:
                yield s.values, what
                yield s.indices, what
            if a.HasField("g"):
                yield from _graph_tensors(a.g)
            for g in a.graphs:
                yield from _graph_tensors(g)


def _all_tensors(proto: onnx.ModelProto) -> Iterator[tuple[onnx.TensorProto, str]]:
    yield from _graph_tensors(proto.graph)
    for function in proto.functions:
        yield from ((t, f"{what} in function '{function.name}'")
                    for t, what in _node_tensors(function.node))


# ---- one tensor -------------------------------------------------------------------------
def _tensor_bytes(tensor: onnx.TensorProto, what: str) -> int:
    """The tensor's size in bytes, refused above MAX_TENSOR_BYTES (the product stops
    growing once past it, so any dims are safe)."""
    dt = onnx_dtype(tensor.data_type, what)
    count = 1
    for d in tensor.dims:
        if d < 0:
            raise OnnxImportError(f"{what}: dims {list(tensor.dims)} hold a negative dim")
        count = min(count * d, MAX_TENSOR_BYTES + 1)
    size = (count * dt.bits + 7) // 8 if dt.bits < 8 else count * dt.itemsize
    if size > MAX_TENSOR_BYTES:
        raise OnnxImportError(f"{what}: dims {list(tensor.dims)} of {dt.name} exceed the "
                              f"limit of {MAX_TENSOR_BYTES} bytes per tensor")
    return size


def _fields(tensor: onnx.TensorProto, what: str) -> tuple[str, int | None, int | None]:
    found: dict[str, str] = {}
    for entry in tensor.external_data:
        if entry.key in found and entry.key in ("location", "offset", "length"):
            raise OnnxImportError(f"{what}: external data key '{entry.key}' given twice")
        found[entry.key] = entry.value
    location = found.get("location", "")
    if not location or "\0" in location:
        raise OnnxImportError(f"{what}: external data without a valid 'location'")
    numbers: list[int | None] = []
    for key in ("offset", "length"):
        text = found.get(key)
        if text is not None and not _DIGITS.match(text):
            raise OnnxImportError(f"{what}: external data {key} '{text[:40]}' is not an "
                                  "integer >= 0")
        numbers.append(int(text) if text is not None else None)
    return location, numbers[0], numbers[1]


def _resolve(folder: str, location: str, what: str) -> str:
    """`location` as a path relative to `folder` (both realpaths), or an error."""
    if os.path.isabs(location):
        raise OnnxImportError(f"{what}: external data location '{location}' is an absolute "
                              "path (it must be relative to the model's folder)")
    resolved = os.path.realpath(os.path.join(folder, location))
    if os.path.commonpath([folder, resolved]) != folder:
        raise OnnxImportError(f"{what}: external data location '{location}' resolves to "
                              f"{resolved}, outside the model's folder {folder}")
    if any(resolved == s or resolved.startswith(s + "/") for s in _SYSTEM):
        raise OnnxImportError(f"{what}: external data location '{location}' is a system "
                              f"file ({resolved})")
    return os.path.relpath(resolved, folder)


def _open_inside(folder: str, relative: str, what: str) -> int:
    """A descriptor of `folder/relative`, walked without following any symlink."""
    parts = relative.split(os.sep)
    fds = [os.open(folder, _OPEN | os.O_DIRECTORY)]
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = _OPEN | _NOFOLLOW | (0 if last else os.O_DIRECTORY)
            fds.append(os.open(part, flags, dir_fd=fds[-1]))
        return fds.pop()
    except OSError as exc:
        reason = "a symlink appeared on its path" if exc.errno in (errno.ELOOP, errno.ENOTDIR) \
            else exc.strerror
        raise OnnxImportError(f"{what}: cannot open external data file '{relative}' "
                              f"({reason})") from None
    finally:
        for fd in fds:
            os.close(fd)


def _read_tensor(tensor: onnx.TensorProto, folder: str, budget: list[int], what: str) -> None:
    size = _tensor_bytes(tensor, what)
    location, offset, length = _fields(tensor, what)
    relative = _resolve(folder, location, what)
    fd = _open_inside(folder, relative, what)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OnnxImportError(f"{what}: external data file '{location}' is "
                              f"{_kind(st.st_mode)}")
    with open(fd, "rb") as f:
        start = offset or 0
        if start > st.st_size:
            raise OnnxImportError(f"{what}: external data offset {start} is past the end of "
                                  f"'{location}' ({st.st_size} bytes)")
        count = st.st_size - start if length is None else length
        if start + count > st.st_size:
            raise OnnxImportError(f"{what}: external data offset {start} + length {count} "
                                  f"runs past the end of '{location}' ({st.st_size} bytes)")
        if count != size:
            raise OnnxImportError(f"{what}: external data in '{location}' holds {count} "
                                  f"bytes but dims {list(tensor.dims)} need {size}")
        if size > budget[0]:
            raise OnnxImportError(f"{what}: external data of {size} bytes does not fit in "
                                  f"this machine's memory (with the tensors before it)")
        budget[0] -= size
        try:
            f.seek(start)
            data = f.read(size)  # one buffer of exactly `size` bytes, filled in place
        except MemoryError:
            raise OnnxImportError(f"{what}: out of memory reading {size} bytes of external "
                                  "data") from None
        except OSError as exc:
            raise OnnxImportError(f"{what}: cannot read external data file '{location}' "
                                  f"({exc.strerror})") from None
    if len(data) != size:
        raise OnnxImportError(f"{what}: external data file '{location}' ended after "
                              f"{len(data)} of {size} bytes (changed while read?)")
    tensor.raw_data = data
    tensor.data_location = onnx.TensorProto.DEFAULT
    del tensor.external_data[:]


def memory_bytes() -> int:
    """The machine's physical memory: the most external data one import reads."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return MAX_TENSOR_BYTES


def load_external(proto: onnx.ModelProto, path: str) -> None:
    """Read every external tensor of `proto`, the model in file `path` (see the contract)."""
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    budget = [memory_bytes()]
    for tensor, what in _all_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            _read_tensor(tensor, folder, budget, f"{path}: {what}")
