"""The `structural` family of `flowc.testing.hostile` (issue [19]): a small valid model
(MatMul, Add, Relu, Transpose, Softmax) with one to three structural mutations: wrong
attribute types, cycles, self-loops, recursive and mutually recursive functions, duplicate
names, missing initializers, wrong or absent opsets and IR versions, odd element types,
no outputs, outputs nothing defines, broken If branches, empty names, stray attribute
references. A case is `must_fail` when a mutation breaks ONNX's rules (INVALID)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto, helper

from flowc.testing.hostile_case import Case, Env, f32_tensor, model_of

KINDS = ("attr_type", "cycle", "self_loop", "recursion", "mutual_recursion", "dup_output",
         "dup_input", "input_is_init", "missing_input", "opset", "no_opset", "ir_version",
         "elem_type", "no_outputs", "undefined_output", "if_branch", "empty_names",
         "attr_ref")
# kinds whose models break ONNX's rules: compiling them is a finding
INVALID = ("attr_type", "cycle", "self_loop", "recursion", "mutual_recursion", "dup_output",
           "dup_input", "missing_input", "undefined_output", "if_branch", "empty_names",
           "attr_ref")
VALID_OPSETS = (1, 6, 7, 12)   # older opsets are converted, not refused
WRONG_ATTRS = [("perm", 1.5), ("perm", "01"), ("perm", [1.0, 0.0]), ("perm", [5, -9]),
               ("perm", [0, 0]), ("perm", [0, 1, 2]), ("axis", "last"), ("axis", 1.5),
               ("axis", [1, 2]), ("axis", 99), ("axis", -2**63), ("to", 1.0),
               ("keepdims", "yes"), ("junk", b"\xff\xfe")]


@dataclass
class _Model:
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    inits: list = field(default_factory=list)
    functions: list = field(default_factory=list)
    opset: int | None = 18
    ir_version: int | None = None
    details: list = field(default_factory=list)


def _base() -> _Model:
    f32 = TensorProto.FLOAT
    return _Model(
        nodes=[helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
               helper.make_node("Add", ["m", "b"], ["a"], name="add"),
               helper.make_node("Relu", ["a"], ["r"], name="relu"),
               helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0], name="tr"),
               helper.make_node("Softmax", ["t"], ["y"], axis=-1, name="sm")],
        inputs=[("x", f32, [2, 4])], outputs=[("y", f32, [3, 2])],
        inits=[f32_tensor("w", [4, 3]), f32_tensor("b", [3])])


def _recursive_functions(mutual: bool) -> list[onnx.FunctionProto]:
    imports = [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]
    f = helper.make_function("local", "F", ["i"], ["o"], [helper.make_node(
        "G" if mutual else "F", ["i"], ["o"], domain="local")], imports)
    g = helper.make_function("local", "G", ["i"], ["o"], [helper.make_node(
        "F", ["i"], ["o"], domain="local")], imports)
    return [f, g] if mutual else [f]


def _mutate(kind: str, m: _Model, rng: random.Random) -> None:
    nodes, say = m.nodes, m.details.append
    if kind == "attr_type":
        name, value = rng.choice(WRONG_ATTRS)
        node = rng.choice(nodes)
        for a in list(node.attribute):
            if a.name == name:
                node.attribute.remove(a)
        node.attribute.append(helper.make_attribute(name, value))
        say(f"{node.name}.{name}={value!r}")
    elif kind == "cycle":   # an earlier node reads a later node's output
        i = rng.randrange(len(nodes) - 1)
        j = rng.randrange(i + 1, len(nodes))
        nodes[i].input[0] = nodes[j].output[0]
        say(f"{nodes[i].name} reads {nodes[j].output[0]}")
    elif kind == "self_loop":
        node = rng.choice(nodes)
        node.input[0] = node.output[0]
        say(f"{node.name} reads its own output")
    elif kind in ("recursion", "mutual_recursion"):
        m.functions = _recursive_functions(kind == "mutual_recursion")
        i = rng.randrange(1, len(nodes))
        nodes[i] = helper.make_node("F", list(nodes[i].input[:1]), list(nodes[i].output),
                                    name=nodes[i].name, domain="local")
        say(f"{nodes[i].name} calls F")
    elif kind == "dup_output":
        i = rng.randrange(1, len(nodes))
        nodes[i].output[0] = nodes[rng.randrange(i)].output[0]
        say(f"{nodes[i].name} also writes {nodes[i].output[0]!r}")
    elif kind == "dup_input":
        m.inputs = m.inputs + m.inputs[:1]
    elif kind == "input_is_init":
        shape = rng.choice([[4, 3], [2, 2], []])
        m.inputs = [*m.inputs, ("w", TensorProto.FLOAT, shape)]
        say(f"input w {shape} is also an initializer [4, 3]")
    elif kind == "missing_input":
        node = rng.choice(nodes)
        gone = rng.choice([*node.input, "nowhere"])
        m.inits = [t for t in m.inits if t.name != gone]
        # an initializer that is also a graph input (input_is_init) stays defined by the input
        if gone == "nowhere" or gone not in {"w", "b"} or gone in {i[0] for i in m.inputs}:
            node.input[0] = gone = "nowhere"
        say(f"{node.name} reads {gone!r}, which nothing defines")
    elif kind == "opset":
        m.opset = rng.choice([*VALID_OPSETS, 99, 10**9, -1, 0])
        say(f"opset {m.opset}")
    elif kind == "no_opset":
        m.opset = None
    elif kind == "ir_version":
        m.ir_version = rng.choice([0, 1, 99, -5])
        say(f"ir_version {m.ir_version}")
    elif kind == "elem_type":
        t = rng.choice([0, 8, 99, 16, 17, 23])
        m.inputs = [("x", t, [2, 4]), *m.inputs[1:]]
        say(f"x elem_type {t}")
    elif kind == "no_outputs":
        m.outputs = []
    elif kind == "undefined_output":
        m.outputs = [*m.outputs, ("nowhere", TensorProto.FLOAT, None)]
    elif kind == "if_branch":
        bad = helper.make_graph([helper.make_node("Relu", ["missing"], ["o"])], "then", [],
                                [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
        nodes.append(helper.make_node("If", ["c"], ["z"], name="if", then_branch=bad,
                                      else_branch=bad))
        m.inits.append(helper.make_tensor("c", TensorProto.BOOL, [], [True]))
        m.outputs = [*m.outputs, ("z", TensorProto.FLOAT, None)]
    elif kind == "empty_names":
        node = rng.choice(nodes)
        node.output[0] = ""
        say(f"{node.name}'s output named ''")
    else:   # a ref_attr_name outside any function
        a = helper.make_attribute("perm", [1, 0])
        a.ref_attr_name = "p"
        node = next((n for n in nodes if n.op_type == "Transpose"), nodes[-1])
        del node.attribute[:]
        node.attribute.append(a)


def structural_case(seed: int, env: Env) -> Case:
    rng = random.Random(f"structural:{seed}")
    kinds = sorted(set(rng.sample(KINDS, rng.choice([1, 1, 2, 3]))),
                   key=KINDS.index)
    m = _base()
    for kind in kinds:
        _mutate(kind, m, rng)
    version = m.opset if m.opset is None or m.opset >= 0 else 18
    model = model_of(m.nodes, m.inputs, m.outputs, m.inits, opset=version,
                     functions=m.functions)
    if m.opset is not None and m.opset < 0:
        model.opset_import[0].version = m.opset
    if m.ir_version is not None:
        model.ir_version = m.ir_version
    must_fail = any(k in INVALID for k in kinds) or (
        "opset" in kinds and m.opset not in VALID_OPSETS)
    detail = f" ({'; '.join(m.details)})" if m.details else ""
    return Case("structural", "+".join(kinds), seed,
                f"MatMul-Add-Relu-Transpose-Softmax with {' + '.join(kinds)}{detail}",
                model=model, must_fail=must_fail, params=(tuple(kinds), detail))


__all__ = ["INVALID", "KINDS", "structural_case"]
