"""The facts the registry holds about ops (flowc/ir/ops/registry.py: traits, `flops`,
`tolerance`, `anchor`) are consistent for every op, and no module of passes/, codegen/ or
testing/ keeps its own set of op names (or table keyed by them) instead of asking the
registry, except the few listed with their reasons in ALLOWED."""

import ast
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import flowc
from flowc.ir.ops import (
    ANCHOR_KINDS,
    ELEMENTWISE,
    HAS_BODY,
    OPS,
    PURE,
    SELECTS,
    STATEFUL,
    TOLERANCES,
    TRANSCENDENTAL,
    KernelContext,
    infer_types,
)
from flowc.ir.ops.cost import TRANSCENDENTAL_FLOPS
from flowc.ir.ops.fused import KINDS, anchors
from flowc.ir.types import TensorType, i64, tensor_type_of

RNG = np.random.default_rng(5)
X = RNG.integers(-9, 9, (2, 3, 4)).astype(np.int64)
# operands of the ops whose facts are checked by running their kernel (views, RESHAPE_LIKE
# and SELECTS ops): op -> (operands, attributes)
SAMPLES = {
    "identity": ([X], {}),
    "stop_gradient": ([X], {}),
    "reshape": ([X, np.array([4, -1])], {}),
    "flatten": ([X], {"axis": 2}),
    "squeeze": ([X[:1], np.array([0])], {}),
    "unsqueeze": ([X, np.array([1, 3])], {}),
    "cast": ([X], {"to": i64}),
    "gather": ([X, np.array([2, 0])], {"axis": 1}),
    "slice": ([X, np.array([1]), np.array([4]), np.array([2])], {}),
    "concat": ([X, X[:, :1]], {"axis": 1}),
}


def run_kernel(op, operands, attrs):
    opdef = OPS[op]
    types = [TensorType(i64, a.shape) if a.dtype == object else tensor_type_of(a)
             for a in operands]
    results = infer_types(opdef, types, attrs, operands)
    return opdef.kernel(KernelContext(opdef.resolve_attrs(attrs), results, op), *operands)


def sample_node(op, shape=(2, 3, 4, 5)):
    """A node of `op` as a FLOPs rule sees it: every operand and its result of `shape`."""
    t = TensorType("f32", shape)
    operands = max(1, len(OPS[op].inputs))
    return SimpleNamespace(op=op, inputs=[SimpleNamespace(type=t)] * operands, types=(t,),
                           attrs={"kernel_shape": (2, 2)})


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_has_a_tolerance_class_and_a_flops_rule(op):
    opdef = OPS[op]
    assert opdef.tolerance in TOLERANCES
    assert opdef.anchor is None or opdef.anchor in ANCHOR_KINDS
    flops = opdef.flops(sample_node(op))
    assert isinstance(flops, float) and math.isfinite(flops) and flops >= 0, (op, flops)


def test_defaults_come_from_the_elementwise_and_transcendental_traits():
    node = sample_node("add")
    assert OPS["add"].flops(node) == 2 * 3 * 4 * 5 and OPS["add"].tolerance == "elementwise"
    assert OPS["exp"].flops(node) == TRANSCENDENTAL_FLOPS * 2 * 3 * 4 * 5
    assert OPS["exp"].tolerance == "transcendental"
    assert OPS["transpose"].flops(node) == 0.0  # not elementwise, no rule: moves data only


def test_matmul_flops_are_two_m_n_k():
    a, b, out = TensorType("f32", (8, 16)), TensorType("f32", (16, 4)), TensorType("f32", (8, 4))
    node = SimpleNamespace(inputs=[SimpleNamespace(type=a), SimpleNamespace(type=b)],
                           types=(out,), attrs={})
    assert OPS["matmul"].flops(node) == 2 * 8 * 4 * 16


def test_transcendental_ops_are_elementwise():
    assert [op for op in OPS if OPS[op].has(TRANSCENDENTAL) and not OPS[op].has(ELEMENTWISE)] == []


def test_views_share_operand_0s_buffer():
    views = sorted(op for op in OPS if OPS[op].is_view)
    assert views and set(views) <= set(SAMPLES), "give each view op a sample above"
    for op in views:
        opdef = OPS[op]
        assert opdef.has(PURE) and not opdef.has(STATEFUL) and not opdef.has(HAS_BODY), op
        assert not opdef.inputs[0].endswith(("?", "*")), f"{op}: operand 0 is its data"
        operands, attrs = SAMPLES[op]
        result = run_kernel(op, operands, attrs)
        assert np.shares_memory(result, operands[0]), f"{op}'s result is not a view"
        assert OPS[op].reshape_like and OPS[op].narrow, op


def test_reshape_like_ops_keep_operand_0s_elements_in_order():
    ops = sorted(op for op in OPS if OPS[op].reshape_like)
    assert set(ops) <= set(SAMPLES), "give each RESHAPE_LIKE op a sample above"
    for op in ops:
        operands, attrs = SAMPLES[op]
        result = np.asarray(run_kernel(op, operands, attrs))
        assert np.array_equal(result.ravel(), operands[0].ravel().astype(result.dtype)), op


def test_selecting_ops_run_on_symbolic_elements():
    ops = sorted(op for op in OPS if OPS[op].has(SELECTS))
    assert ops and set(ops) <= set(SAMPLES), "give each SELECTS op a sample above"
    for op in ops:
        operands, attrs = SAMPLES[op]
        want = run_kernel(op, operands, attrs)
        symbolic = [operands[0].astype(object), *operands[1:]]
        if op == "concat":
            symbolic = [a.astype(object) for a in operands]
        got = run_kernel(op, symbolic, attrs)
        assert got.dtype == object and np.array_equal(got.astype(np.int64), want), op


def test_narrow_ops_convert_or_move_whole_elements():
    for op, opdef in OPS.items():
        if opdef.narrow:
            assert opdef.reshape_like or not opdef.inputs, op


def test_every_fused_kind_but_elementwise_has_anchors():
    assert ("elementwise", *ANCHOR_KINDS) == KINDS
    assert anchors("elementwise") == frozenset()
    for kind in ANCHOR_KINDS:
        ops = anchors(kind)
        assert ops, kind
        for op in ops:
            opdef = OPS[op]
            assert opdef.has(PURE) and not opdef.has(ELEMENTWISE), op
            assert not opdef.has(HAS_BODY) and not opdef.has(STATEFUL), op


# --- no op-name sets outside the registry --------------------------------------------------

ROOT = Path(flowc.__file__).parent
SCANNED = ("passes", "codegen", "testing")
# (module, name) -> why a set of op names is right there
ALLOWED = {
    ("testing/graphgen.py", "UNARY_F"): "the random-graph generator's menu: which ops "
    "graphs draw from (recorded seeds depend on it), not a fact about the ops",
    ("testing/graphgen.py", "UNARY_ANY"): "the generator's menu (as UNARY_F)",
    ("testing/graphgen.py", "BINARY"): "the generator's menu (as UNARY_F)",
    ("testing/graphgen.py", "COMPARE"): "the generator's menu (as UNARY_F)",
    ("testing/graphgen.py", "REDUCE"): "the generator's menu (as UNARY_F)",
    ("passes/schedule.py", "EARLY_OPS"): "a scheduling policy for the send/recv and "
    "all_reduce_start/wait protocols, code specific to those ops",
    ("passes/schedule.py", "DEFERRED_OPS"): "a scheduling policy (as EARLY_OPS)",
    ("codegen/custom_kernels.py", "RUNTIME_CALLS"): "a lowering table: the runtime function "
    "each allreduce half calls",
    ("codegen/plan/state.py", "UPDATE_OPS"): "a lowering table: the kernel op each "
    "variable update (assign_add, assign_sub) runs as",
    ("codegen/plan/partitions.py", "TRANSFER_OPS"): "the send/recv protocol: the artifact's "
    "transport calls are code specific to those two ops",
    ("codegen/plan/control.py", "CONTROL_OPS"): "the ops control_steps.py and control_c.py "
    "run as steps of the entry (code specific to if and loop), a lowering table's keys",
    ("codegen/plan/control.py", "HEAVY_OPS"): "a codegen policy: the ops whose own kernels "
    "are tiled, packed or parallel, which an scf region would run as plain loops",
    ("codegen/lower/per_sample.py", "PER_SAMPLE"): "a lowering table: the ops whose static "
    "rule the per-sample loop reuses for a batch of run-time extent ([12])",
    ("passes/remat.py", "CHEAP"): "the dots_saveable policy's menu of data-movement ops "
    "recomputed besides elementwise ones (as JAX's checkpoint policies name primitives)",
    # tables keyed by op of what a pass or codegen does with each (conventions.md: rewrite
    # and lowering tables are keyed by op), not facts about the ops
    ("passes/simplify.py", "PATTERNS"): "the rewrite pattern table",
    ("passes/channels_last.py", "GLOBAL_POOLS"): "a rewrite: the reduction replacing each "
    "global pool",
    ("passes/constant_fold.py", "_ARITH"): "the pass's own integer arithmetic on symbolic "
    "dims, per op",
    ("codegen/lower/__init__.py", "NOT_KERNELS"): "the lowering table's other half: the ops "
    "the artifact runs itself, each with its reason",
}


def _strings(node: ast.expr) -> list[str] | None:
    """The string elements of a set/tuple/list display, or of frozenset/set/tuple(...) of
    one, or the string keys of a dict display; None for any other expression."""
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant)
                and isinstance(k.value, str)]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("frozenset", "set", "tuple") and len(node.args) == 1):
        node = node.args[0]
    if not isinstance(node, ast.Set | ast.Tuple | ast.List):
        return None
    return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def op_name_sets(path: Path) -> list[tuple[str, int]]:
    """(name, line) of each module-level assignment in `path` of a collection (or a dict
    keyed by) at least two strings, all of them registry op names."""
    found = []
    for stmt in ast.parse(path.read_text()).body:
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            continue
        strings = _strings(value)
        if strings and len(strings) >= 2 and all(s in OPS for s in strings):
            found += [(t.id, stmt.lineno) for t in targets if isinstance(t, ast.Name)]
    return found


def test_the_scan_finds_op_name_sets(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text('A = frozenset({"exp", "log"})\nB: tuple = ("reshape", "flatten")\n'
                    'C = ("matmul", "elementwise")\nD = ["add"]\ndef f():\n'
                    '    E = {"add", "mul"}\nF = {"exp": 8, "tanh": 8}\nG = {"exp": 1, 2: 3}\n'
                    'H = {"pure": 1, "exp": 2}\n')
    assert op_name_sets(path) == [("A", 1), ("B", 2), ("F", 7)]


def test_no_module_keeps_its_own_op_name_sets():
    found = []
    for part in SCANNED:
        for path in sorted((ROOT / part).rglob("*.py")):
            module = path.relative_to(ROOT).as_posix()
            found += [f"{module}:{line}: {name}" for name, line in op_name_sets(path)
                      if (module, name) not in ALLOWED]
    assert found == [], ("facts about ops belong on their OpDef (flowc/ir/ops): "
                         + "; ".join(found))


def test_every_allowed_op_name_set_still_exists():
    for module, name in ALLOWED:
        assert name in [n for n, _ in op_name_sets(ROOT / module)], (module, name)
