"""The object file's contract: only the kernel symbols defined, only libc/libm needed,
byte-identical output, cross targets, dumps, and clear errors."""

import subprocess

import numpy as np
import pytest
from kernel_harness import op_body

from flowc.codegen import lower
from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.kernels import check_supported, kernel_operands, single_node_body
from flowc.codegen.target import get_target
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError

LIBM = {"exp", "expf", "log", "logf", "erff", "erf", "tanhf", "tanh", "sinf", "cosf", "sin",
        "cos", "powf", "pow", "log1pf", "log1p", "fmodf", "fmod", "memcpy", "memset",
        "memmove", "sqrtf", "floorf", "ceilf",
        # OpenMP entry points of parallel loops: the artifact renames them to its runtime's
        "__kmpc_fork_call", "__kmpc_global_thread_num", "__kmpc_for_static_init_8",
        "__kmpc_for_static_init_8u", "__kmpc_for_static_fini", "__kmpc_barrier"}


def symbols(obj: bytes, tmp_path) -> tuple[set[str], set[str]]:
    path = tmp_path / "k.o"
    path.write_bytes(obj)
    out = subprocess.run(["nm", str(path)], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if parts[0] == "U":
            undefined.add(parts[1])
        elif parts[-2] in "TDRB":
            defined.add(parts[-1])
    return defined, undefined


def _bodies():
    f = np.zeros((8, 16), np.float32)
    return [("model_k0", op_body("matmul", [f, np.zeros((16, 4), np.float32)])),
            ("model_k1", op_body("gelu", [f])),
            ("model_k2", op_body("tanh", [f])),
            ("model_k3", op_body("add", [f, np.arange(16, dtype=np.float32)], consts=(1,)))]


def test_object_defines_only_kernels_and_needs_only_libc_libm(tmp_path):
    obj = compile_kernels(_bodies(), "host").object
    defined, undefined = symbols(obj, tmp_path)
    assert defined == {"model_k0", "model_k1", "model_k2", "model_k3"}
    undefined.discard("_GLOBAL_OFFSET_TABLE_")
    assert undefined <= LIBM, undefined - LIBM


def test_same_input_same_bytes():
    assert (compile_kernels(_bodies(), "host", cache=False)
            == compile_kernels(_bodies(), "host", cache=False))  # both really compiled


@pytest.mark.parametrize("target,machine", [("x86-64", "X86-64"), ("aarch64", "AArch64")])
def test_cross_targets_emit_objects(tmp_path, target, machine):
    obj = compile_kernels(_bodies()[:2], target).object
    path = tmp_path / "k.o"
    path.write_bytes(obj)
    header = subprocess.run(["readelf", "-h", str(path)], capture_output=True, text=True,
                            check=True).stdout
    assert machine in header


def test_dump_writes_every_stage():
    seen = {}
    compile_kernels(_bodies()[:1], "host", dump=lambda name, text: seen.__setitem__(name, text))
    for name in ("model_k0.input.mlir", "model_k0.schedule.mlir", "model_k0.llvm.mlir",
                 "kernels.ll", "kernels.s"):
        assert seen[name].strip(), name
    assert "linalg.matmul" in seen["model_k0.input.mlir"]
    assert "llvm.func @model_k0" in seen["model_k0.llvm.mlir"]


def test_unknown_target_is_named():
    with pytest.raises(FlowcError, match="unknown target 'riscv'; known targets: host"):
        get_target("riscv")


def test_missing_rule_names_op_node_and_target(monkeypatch):
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (4,)))
    node = g.append(make_node("exp", [x], name="act/Exp"))
    g.add_output("y", node.out())
    lower.lookup("exp", get_target("host"))  # load the table before patching it
    monkeypatch.delitem(lower.RULES, "exp")
    with pytest.raises(FlowcError, match=r"no lowering rule for op 'exp' \(node 'act/Exp' "
                                         r"\(exp\)\) on target host"):
        check_supported(g, "host")
    with pytest.raises(FlowcError, match="no lowering rule for op 'exp'"):
        compile_kernels([("k", single_node_body(node))], "host")


def test_a_body_of_unknown_dims_is_refused():
    """(Symbolic dims compile: tests/codegen/test_kernels_dynamic.py.)"""
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (None, 4)))
    node = g.append(make_node("exp", [x], name="e"))
    with pytest.raises(FlowcError, match=r"node 'e' \(exp\): a dim is \? \(no rule names its "
                                         r"size\); a kernel needs sizes or symbolic dims"):
        compile_kernels([("k", single_node_body(node))], "host")


def test_duplicate_symbols_are_refused():
    body = _bodies()[1][1]
    with pytest.raises(FlowcError, match="duplicate kernel symbols"):
        compile_kernels([("k", body), ("k", body)], "host")


def test_single_node_body_inlines_small_constants_only():
    body = _bodies()[3][1]
    assert [n.name for n in body.inputs] == ["in0"]
    assert [n.op for n in body.nodes] == ["constant", "add"]
    big = op_body("add", [np.zeros((8, 17), np.float32), np.ones(17, np.float32)], consts=(1,))
    assert [n.name for n in big.inputs] == ["in0", "in1"]


def test_single_node_body_inputs_are_kernel_operands_in_order():
    # The artifact passes kernel_operands(node) as the kernel's input buffers: the body must
    # take exactly those, one input per use (an operand used twice is passed twice), with
    # small constants copied in.
    from flowc.ir import Tensor

    g = Graph()
    x = g.add_input("x", TensorType("f32", (4,)))
    small = g.append(make_node("constant", [], {"value": Tensor(np.ones(4, np.float32))}))
    w = g.append(make_node("constant", [], {"value": Tensor(np.ones(32, np.float32))}))
    node = g.append(make_node("where", [g.append(make_node("less", [x, small.out()])).out(),
                                        x, x]))
    assert kernel_operands(node) == [node.inputs[0], x, x]
    body = single_node_body(node)
    assert [n.name for n in body.inputs] == ["in0", "in1", "in2"]
    add = g.append(make_node("add", [x, small.out()]))
    assert kernel_operands(add) == [x] and len(single_node_body(add).inputs) == 1
    big = g.append(make_node("reshape", [w.out(), g.append(make_node(
        "constant", [], {"value": Tensor(np.array([4, 8], np.int64))})).out()]))
    assert kernel_operands(big) == [w.out()] and len(single_node_body(big).inputs) == 1


def test_scratch_sizes_come_back_from_the_cache(tmp_path):
    """A kernel's scratch (a padded conv input: one buffer) is cached with its code: a warm
    compile (object hit) and one from the kernels' entries alone report the same sizes."""
    from flowc.codegen.cache import CompileCache

    x, w = np.zeros((1, 4, 10, 10), np.float32), np.zeros((8, 4, 3, 3), np.float32)
    bodies = [("cached_k0", op_body("conv", [x, w], {"pads": (1, 1, 1, 1)}))]
    cache = CompileCache(tmp_path / "cache")
    cold = compile_kernels(bodies, "host", cache=cache)
    assert cold.scratch["cached_k0"].buffers  # the padded input
    assert compile_kernels(bodies, "host", cache=cache) == cold
    assert cache.stats["object.hits"] == 1
    for path in (tmp_path / "cache").rglob("*"):
        if path.parent.parent.name == "object":
            path.unlink()
    assert compile_kernels(bodies, "host", cache=cache) == cold
    assert cache.stats["kernel.hits"] == 1
