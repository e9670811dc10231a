"""Shared helpers of the codegen tests: compile bodies once per session, run them through
ctypes, compare with the reference interpreter.

`run_body(body, inputs)` compiles `body` (cached by its text and target), links the object
into a shared library with `cc -shared`, calls the kernel on 64-byte-aligned copies of
`inputs` (then its scratch buffers, `scratch_args`) and returns the outputs as numpy
arrays.
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from pathlib import Path

import numpy as np

import flowc.runtime
from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.kernel_code import KernelCode, KernelScratch
from flowc.codegen.kernels import single_node_body
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.printer import print_graph
from flowc.runtime.loader import aligned_empty
from flowc.testing.tolerance import assert_close, op_kind

_WORK = Path(tempfile.mkdtemp(prefix="flowc-codegen-tests-"))
_CACHE: dict[tuple[str, str], ctypes.CDLL] = {}
_OBJECTS: dict[tuple[str, str], KernelCode] = {}


def aligned(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of `array` whose data starts on a 64-byte boundary."""
    array = np.asarray(array)
    out = aligned_empty(array.shape, array.dtype)
    out[...] = array
    return out


def compile_body(body: Graph, target: str = "host") -> bytes:
    return compiled_body(body, target).object


def compiled_body(body: Graph, target: str = "host") -> KernelCode:
    key = (print_graph(body), target)
    if key not in _OBJECTS:
        _OBJECTS[key] = compile_kernels([("kernel", body)], target)
    return _OBJECTS[key]


def scratch_args(needs: KernelScratch) -> list[ctypes.c_void_p]:
    """Fresh 64-byte aligned scratch buffers for a kernel call (one thread slot of its
    thread scratch: the serial OpenMP shim's thread is slot 0); kept alive with the
    returned pointers by `_KEEP`."""
    sizes = [*needs.buffers, *([needs.per_thread] if needs.per_thread else [])]
    buffers = [aligned_empty((max(n, 1),), np.dtype(np.uint8)) for n in sizes]
    _KEEP[:] = buffers
    return [ctypes.c_void_p(b.ctypes.data) for b in buffers]


_KEEP: list[np.ndarray] = []


def body_scratch(body: Graph, target: str = "host") -> list[ctypes.c_void_p]:
    """Scratch arguments for a call of `body`'s compiled kernel."""
    return scratch_args(compiled_body(body, target).scratch["kernel"])


# The OpenMP entry points parallel kernels call, run serially (the artifact's runtime
# provides real ones under the model prefix; tests/runtime tests those).
SERIAL_KMPC = Path(flowc.runtime.__file__).with_name("kmpc_serial.c")


def link(obj: bytes, name: str) -> Path:
    o, so = _WORK / f"{name}.o", _WORK / f"{name}.so"
    o.write_bytes(obj)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(o), str(SERIAL_KMPC), "-lm"],
                   check=True)
    return so


def load_body(body: Graph, target: str = "host") -> ctypes.CDLL:
    key = (print_graph(body), target)
    if key not in _CACHE:
        _CACHE[key] = ctypes.CDLL(str(link(compile_body(body, target), f"k{len(_CACHE)}")))
    return _CACHE[key]


def run_body(body: Graph, inputs: list[np.ndarray], target: str = "host") -> list[np.ndarray]:
    lib = load_body(body, target)
    ins = [aligned(np.asarray(a, dtype=t.dtype.np)) for a, t in
           zip(inputs, body.input_types, strict=True)]
    outs = [aligned(np.zeros(t.shape, t.dtype.np)) for t in body.output_types]
    lib.kernel(*[ctypes.c_void_p(a.ctypes.data) for a in [*ins, *outs]],
               *body_scratch(body, target))
    return outs


def op_body(op: str, inputs: list, attrs: dict | None = None, consts: tuple = ()) -> Graph:
    """The single-node body of `op` on graph inputs typed like `inputs` (arrays, None for
    absent operands); operands whose index is in `consts` are constant nodes."""
    g = Graph()
    values = []
    for k, a in enumerate(inputs):
        if a is None:
            values.append(None)
        elif k in consts:
            values.append(g.append(make_node("constant", [], {"value": Tensor(np.asarray(a))}))
                          .out())
        else:
            values.append(g.add_input(f"i{k}", TensorType(a.dtype, a.shape)))
    node = g.append(make_node(op, values, attrs or {}))
    return single_node_body(node)


def check_op(op: str, inputs: list, attrs: dict | None = None, consts: tuple = (),
             kind: str | None = None, n: int | None = None) -> None:
    """Compile `op` on `inputs`, run it, and compare every output with the interpreter,
    within flowc.testing.tolerance's `kind` (default: the op's, `op_kind`) for `n` terms
    (default: the largest operand's size, a bound on any sum's length)."""
    body = op_body(op, inputs, attrs, consts)
    feeds = [a for k, a in enumerate(inputs) if a is not None and
             (k not in consts or np.asarray(a).size > 16)]
    expected = interpret(body, {n.name: a for n, a in zip(body.inputs, feeds, strict=True)})
    got = run_body(body, feeds)
    kind = kind or op_kind(op)
    n = n or max([np.asarray(a).size for a in inputs if a is not None] + [1])
    for (name, _), y in zip(body.outputs, got, strict=True):
        assert_close(y, expected[name], kind, n, err_msg=f"{op} output {name}")
