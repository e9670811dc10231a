"""Every registry op has a CPU lowering rule (or is one the artifact handles itself), on
every target; and every op with a rule compiles and runs one case here, against the
interpreter. Deeper cases per family live in the other test_kernels_* files."""

import subprocess

import numpy as np
import pytest
from kernel_harness import check_op, compile_body, op_body

from flowc.codegen.lower import NOT_KERNELS, lookup
from flowc.codegen.target import TARGETS, get_target
from flowc.ir import Tensor
from flowc.ir.ops import OPS
from flowc.ir.ops.bf16_matmul import pack as pack_bf16
from flowc.ir.ops.quant import pack, pack_conv
from flowc.ir.ops.winograd import winograd_filter
from flowc.ir.types import bf16, i32, u8

RNG = np.random.default_rng(3)


def f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def ints(*values):
    return np.array(values, np.int64)


def _branch(op):
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node

    body = Graph(op)
    x = body.add_input("x", TensorType("f32", (2, 3)))
    body.add_output("y", body.append(make_node(op, [x])).out())
    return body


def _loop_body():
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node

    body = Graph("step")
    i = body.add_input("i", TensorType("i64", ()))
    c = body.add_input("c", TensorType("bool", ()))
    x = body.add_input("x", TensorType("f32", (3,)))
    body.add_output("c_next", body.append(make_node("identity", [c])).out())
    body.add_output("x_next", body.append(make_node("tanh", [x])).out())
    body.add_output("i_scan", body.append(make_node("identity", [i])).out())
    return body


X = f(2, 3, 4)
B = RNG.integers(0, 2, (2, 3)).astype(bool)
# op -> (operands, attrs, indices of constant operands)
CASES = {
    "constant": ([], {"value": Tensor(f(3, 5))}, ()),
    "identity": ([X], {}, ()), "stop_gradient": ([X], {}, ()),
    "add": ([X, f(4)], {}, ()), "sub": ([X, f(3, 1)], {}, ()), "mul": ([X, X], {}, ()),
    "div": ([X, f(1)], {}, ()), "pow": ([np.abs(X), f(4)], {}, ()),
    "max": ([X, f(4), f(3, 1)], {}, ()), "min": ([X, X * 2], {}, ()),
    "mod": ([X, f(4)], {"fmod": 1}, ()), "relu": ([X], {}, ()), "neg": ([X], {}, ()),
    "abs": ([X], {}, ()), "sign": ([X], {}, ()), "sqrt": ([np.abs(X)], {}, ()),
    "rsqrt": ([np.abs(X) + 1], {}, ()), "reciprocal": ([X], {}, ()), "exp": ([X], {}, ()),
    "log": ([np.abs(X) + 0.1], {}, ()), "erf": ([X], {}, ()), "tanh": ([X], {}, ()),
    "sin": ([X], {}, ()), "cos": ([X], {}, ()), "floor": ([X], {}, ()), "ceil": ([X], {}, ()),
    "round": ([X], {}, ()), "atan": ([X], {}, ()), "asin": ([np.tanh(X)], {}, ()),
    "acos": ([np.tanh(X)], {}, ()),
    "bitwise_and": ([ints(12, -7, 5), ints(10, 3, -1)], {}, ()),
    "bitwise_or": ([ints(12, -7, 5), ints(10, 3, -1)], {}, ()),
    "bitwise_xor": ([ints(12, -7, 5), ints(10, 3, -1)], {}, ()),
    "bitwise_not": ([ints(12, -7, 0)], {}, ()),
    "bit_shift": ([ints(-12, 7, 5, 1), ints(2, 1, 64, -1)], {"direction": "RIGHT"}, ()),
    "sigmoid": ([X], {}, ()), "softplus": ([X], {}, ()), "softsign": ([X], {}, ()),
    "leaky_relu": ([X], {}, ()),
    "hard_sigmoid": ([X], {}, ()), "gelu": ([X], {}, ()), "clip": ([X, np.float32(-.5),
                                                                      np.float32(.5)], {}, ()),
    "isnan": ([X], {}, ()), "cast": ([X], {"to": i32}, ()), "where": ([B, f(2, 3), f(3)], {}, ()),
    "not": ([B], {}, ()), "and": ([B, B.T[:1].T], {}, ()), "or": ([B, B], {}, ()),
    "xor": ([B, B[:1]], {}, ()), "equal": ([X, X.round()], {}, ()), "less": ([X, f(4)], {}, ()),
    "greater": ([X, f(4)], {}, ()), "less_or_equal": ([X, f(4)], {}, ()),
    "greater_or_equal": ([X, f(4)], {}, ()),
    "matmul": ([f(2, 5, 6), f(6, 7)], {}, ()),
    "packed_matmul": ([f(2, 5, 6), f(3, 6, 4)], {}, (1,)),
    "gemm": ([f(5, 6), f(7, 6), f(7)], {"transB": 1}, ()),
    "batch_normalization": ([f(2, 3, 4, 5), f(3), f(3), f(3), np.abs(f(3))], {}, ()),
    "layer_normalization": ([X, f(4), f(4)], {}, ()), "softmax": ([X], {}, ()),
    "layer_norm_grad": ([X, f(4), f(*X.shape)], {}, ()),
    "log_softmax": ([X], {"axis": 1}, ()),
    "conv": ([f(1, 3, 8, 9), f(4, 3, 3, 3), f(4)], {"pads": (1, 1, 1, 1)}, ()),
    "conv_transpose": ([f(1, 3, 5, 6), f(3, 2, 3, 3)], {"strides": (2, 2)}, ()),
    "winograd_conv": ([f(1, 6, 7, 3), winograd_filter(f(3, 3, 3, 4), 4), f(4)],
                      {"tile": 4, "pads": (1, 1, 1, 1)}, (1,)),
    "qmatmul": ([RNG.integers(0, 256, (5, 9)).astype(np.uint8),
                 pack(RNG.integers(-128, 128, (9, 20)).astype(np.int8))], {"n": 20}, ()),
    "bf16_matmul": ([f(5, 9).astype(bf16.np), pack_bf16(f(9, 20).astype(bf16.np)), f(20)],
                    {"n": 20}, ()),
    "qconv": ([RNG.integers(0, 256, (1, 6, 7, 5)).astype(np.uint8),
               pack_conv(RNG.integers(-128, 128, (18, 5, 3, 3)).astype(np.int8))],
              {"kernel": (3, 3), "strides": (2, 1), "o": 18}, ()),
    "qconv_requant": ([RNG.integers(0, 256, (1, 6, 7, 5)).astype(np.uint8),
                       pack_conv(RNG.integers(-128, 128, (18, 5, 3, 3)).astype(np.int8)),
                       RNG.integers(-500, 500, 18).astype(np.int32),
                       np.full(18, 0.004, np.float32)],
                      {"kernel": (3, 3), "strides": (1, 1), "o": 18, "zero": 9, "to": u8}, ()),
    "max_pool": ([f(1, 2, 7, 8)], {"kernel_shape": (2, 2), "strides": (2, 2)}, ()),
    "average_pool": ([f(1, 2, 7, 8)], {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1)}, ()),
    "global_max_pool": ([f(2, 3, 4, 5)], {}, ()), "global_average_pool": ([f(2, 3, 4, 5)], {}, ()),
    "cumsum": ([X, np.int64(-2)], {"exclusive": 1}, (1,)),
    "cumprod": ([X, np.int64(-1)], {"exclusive": 1, "reverse": 1}, (1,)),
    "bitcast": ([X], {"to": "i32"}, ()),
    "reduce_sum": ([X, ints(1)], {}, (1,)), "reduce_mean": ([X, ints(0, 2)], {"keepdims": 0}, (1,)),
    "reduce_max": ([X, None], {}, ()), "reduce_min": ([X, None], {"keepdims": 0}, ()),
    "reduce_prod": ([X, None], {}, ()), "arg_max": ([X], {"axis": 1}, ()),
    "arg_min": ([X], {"axis": -1, "keepdims": 0}, ()),
    "reshape": ([X, ints(4, -1)], {}, (1,)), "transpose": ([X], {"perm": (1, 2, 0)}, ()),
    "concat": ([X, X[:, :1]], {"axis": 1}, ()), "split": ([X, ints(1, 3)], {"axis": 2}, (1,)),
    "slice": ([X, ints(2, 0), ints(-5, 3), ints(2, 1), ints(-1, 2)], {}, (1, 2, 3, 4)),
    "gather": ([X, ints(2, 0, -1)], {"axis": 2}, ()),
    "scatter_add": ([X, ints(2, 0, -1, 2), f(2, 3, 4)], {"axis": 2}, ()),
    "scatter_reduce": ([X, ints(2, 0, -1, 2), f(2, 3, 4)], {"axis": 2, "reduction": "max"}, ()),
    "pad": ([X, ints(0, 1, 2, 0, 0, 1)], {"mode": "reflect"}, (1,)),
    "expand": ([f(3, 1), ints(2, 3, 4)], {}, (1,)), "squeeze": ([X[:1], ints(0)], {}, (1,)),
    "unsqueeze": ([X, ints(1)], {}, (1,)), "flatten": ([X], {"axis": 1}, ()),
    "shape": ([X], {}, ()), "range": ([np.int64(2), np.int64(20), np.int64(3)], {}, (0, 1, 2)),
    "constant_of_shape": ([ints(2, 3)], {}, (0,)), "tile": ([X, ints(1, 2, 2)], {}, (1,)),
    "trilu": ([X, np.int64(1)], {"upper": 0}, (1,)),
    "loop": ([np.array(4, np.int64), None, f(3)], {"body": _loop_body()}, (0,)),
    "gather_elements": ([X, RNG.integers(-3, 3, (2, 3, 4))], {"axis": 1}, ()),
    "size": ([X], {}, ()),
    "softmax_cross_entropy": ([f(5, 4) * 3, ints(3, 0, 1, 3, 2)], {}, ()),
    "mse": ([X, f(2, 3, 4)], {}, ()),
    "if": ([np.array(True), f(2, 3)], {"then_branch": _branch("exp"),
                                        "else_branch": _branch("tanh")}, ()),
}



def _fused_body():
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node

    body = Graph("fused")
    a = body.add_input("a", TensorType("f32", (2, 3, 4)))
    b = body.add_input("b", TensorType("f32", (4,)))
    total = body.append(make_node("add", [a, b]))
    body.add_output("y", body.append(make_node("exp", [total.out()])).out())
    return body


if "fused" in OPS:  # the fuse pass's kernel op (issue [3]), once it is in the registry
    CASES["fused"] = ([X, f(4)], {"kind": "elementwise", "body": _fused_body()}, ())


@pytest.mark.parametrize("target", list(TARGETS))
def test_every_registry_op_has_a_rule_or_is_no_kernel(target):
    t = get_target(target)
    missing = [op for op in OPS if op not in NOT_KERNELS and lookup(op, t) is None]
    assert missing == []
    assert set(NOT_KERNELS) <= set(OPS)


def test_every_op_with_a_rule_has_a_case_here():
    assert sorted(op for op in OPS if op not in NOT_KERNELS) == sorted(CASES)


# what a kernel object may leave undefined: libm, memcpy/memset (never an allocator: kernels
# take all their memory from the caller), and the OpenMP entry points the
# artifact's link step renames to its runtime's (never memrefCopy or other MLIR
# runner-utils symbols, never libomp's other entries)
ALLOWED_UNDEFINED = {"_GLOBAL_OFFSET_TABLE_", "memcpy", "memset", "memmove", "expf", "exp",
                     "logf", "log", "log1pf", "log1p", "erff", "erf", "tanhf", "tanh",
                     "sinf", "sin", "cosf", "cos", "powf", "pow",
                     "atanf", "atan", "asinf", "asin", "acosf", "acos",
                     "fmodf", "fmod", "floorf", "floor", "ceilf", "ceil", "sqrtf", "sqrt",
                     "__kmpc_fork_call", "__kmpc_global_thread_num", "__kmpc_for_static_init_8",
                     "__kmpc_for_static_init_8u", "__kmpc_for_static_fini", "__kmpc_barrier"}


@pytest.mark.parametrize("op", sorted(CASES))
def test_registry_op_compiles_and_matches_interpreter(op, tmp_path):
    operands, attrs, consts = CASES[op]
    check_op(op, operands, attrs, consts)
    obj = tmp_path / "k.o"
    obj.write_bytes(compile_body(op_body(op, operands, attrs, consts)))
    listing = subprocess.run(["nm", "--undefined-only", str(obj)], capture_output=True,
                             text=True, check=True).stdout
    undefined = {line.split()[-1] for line in listing.splitlines() if line.strip()}
    assert undefined <= ALLOWED_UNDEFINED, undefined - ALLOWED_UNDEFINED
