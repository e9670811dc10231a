"""Seeded generators of hostile inputs for the compiler and the loader: small ONNX models
(and, for the file families, folders around them) that a user might download from someone
who means harm, or that a broken exporter might write.

Families (each `case(family, seed, env)` call gives one `Case`, fully determined by the
family, the seed and the campaign's `Env`):

- `names`: graph, input, output, node and initializer names holding C metacharacters
  (comment closers and openers, newlines with preprocessor lines, quotes, backslashes,
  trigraphs, CR, NUL, U+2028, random Unicode, very long names, duplicates); the payloads, if
  they ever ran as C, would create `env.canary`.
- `sizes`: negative, zero and huge dims (2**31 .. INT64_MAX) on inputs, initializers and the
  shape operands of Reshape, Expand, ConstantOfShape, Range and Tile; products past 2**64.
- `structural` (issue [19], `flowc.testing.hostile_struct`): wrong attribute types,
  cycles, recursive functions, duplicate names, missing initializers, wrong or absent
  opsets, broken subgraphs.
- `external` and `manifest` (`flowc.testing.hostile_files`): external data that reaches
  outside the model's folder or lies about its size, and mutated manifests and files of a
  real artifact.

A `Case` says what to do with it (compile then run, or load an artifact), whether the input
must be refused (`must_fail`: accepting it is a finding) and whether a run must match
onnxruntime (`check`). `flowc.testing.hostile_run` runs cases in child processes and
classifies what happened.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from onnx import TensorProto, helper

from flowc.testing import hostile_files
from flowc.testing.hostile_case import Case, Env, f32_tensor, model_of
from flowc.testing.hostile_struct import structural_case

FAMILIES = ("names", "sizes", "structural", "external", "manifest")
INT64_MAX = 2**63 - 1
HUGE = (-1, -5, 0, 2**31, 2**32, 2**40, 2**48, 2**58 + 1, 2**62, INT64_MAX, -(2**63))


def _i64(name: str, values) -> TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], list(values))


# ---- names ------------------------------------------------------------------------------
def payloads(canary: Path) -> list[str]:
    """Strings that run code if pasted unescaped into C: each creates `canary`."""
    ctor = ("__attribute__((constructor)) static void flowc_pwn(void) "
            f'{{ FILE *f = fopen("{canary}", "w"); if (f) fclose(f); }}')
    system = ("__attribute__((constructor)) static void flowc_pwn2(void) "
              f'{{ extern int system(const char *); system("touch {canary}"); }}')
    return [
        f"x */ {ctor} /* ",
        f"x */\n#include <stdio.h>\n{ctor}\n/* ",
        f"x\n#include <stdio.h>\n{ctor}\n// ",
        f'x"; {system} static const char *flowc_q = "',
        f"x\\\n{system} //",
        f"x ??/\n{system} //",
        f"x\r\n{system}\r\n//",
        f"x\u2028{system}\u2028//",
        f"x */ {system} /*",
        f"x\x00*/ {system} /*",
        # repeatable where a name is pasted twice (a header's summary and its entry)
        f"x */\n#ifndef FLOWC_PWN_B\n#define FLOWC_PWN_B\n{system}\n#endif\n/* ",
        f"x\n#ifndef FLOWC_PWN_L\n#define FLOWC_PWN_L\n{system}\n#endif\n// ",
        f'relu */ {{ extern int system(const char *); system("touch {canary}"); }} /* ',
    ]


META = ["*/", "/*", "//", "\n#define x 1\n", '"', "\\", "??/", "\r", "\x00", "\u2028",
        "\u2029", "\t", "'", "%s%n", "$(id)", "`id`", "..", "/", "{", "}", ";", "\x7f",
        "\x1b[2J", "entrée", "输入", "🙂", "\ufeff", "\u200b", "ä" * 3, "-", " ", ""]


def _random_name(rng: random.Random, canary: Path) -> str:
    how = rng.randrange(6)
    if how == 0:
        return rng.choice(payloads(canary))
    if how == 1:
        return "".join(rng.choice(META) for _ in range(rng.randint(1, 6))) or "\u2028"
    if how == 2:   # random code points, surrogates excluded (protobuf needs valid UTF-8)
        cps = [rng.choice([rng.randint(1, 0x7f), rng.randint(0x80, 0xd7ff),
                           rng.randint(0xe000, 0x10ffff)]) for _ in range(rng.randint(1, 12))]
        return "".join(map(chr, cps))
    if how == 3:
        return rng.choice(["n", "*/", "\\"]) * rng.choice([1000, 5000, 70000])
    if how == 4:
        return rng.choice(["main", "run", "create", "x", "y", "int", "void", "NULL", "0",
                           "_", "__attribute__", "flowc_rt", "g_k0", "g"])
    return "v" + "".join(rng.choice(META) for _ in range(2)) + str(rng.randrange(100))


def names_case(seed: int, env: Env) -> Case:
    """Add(x, w) -> Relu -> y, with some of its names replaced by hostile ones."""
    rng = random.Random(f"names:{seed}")
    roles = ["graph", "input", "output", "init", "mid", "node0", "node1"]
    chosen = rng.sample(roles, rng.randint(1, 3))
    name = {r: r[:4] for r in roles} | {"input": "x", "output": "y", "init": "w", "mid": "a"}
    for role in chosen:
        name[role] = _random_name(rng, env.canary)
    if rng.random() < 0.15:   # a duplicate: two roles share one hostile name
        a, b = rng.sample(["input", "output", "init", "mid"], 2)
        name[b] = name[a]
        chosen = [*chosen, f"{b}={a}"]
    nodes = [helper.make_node("Add", [name["input"], name["init"]], [name["mid"]],
                              name=name["node0"]),
             helper.make_node("Relu", [name["mid"]], [name["output"]], name=name["node1"])]
    m = model_of(nodes, [(name["input"], TensorProto.FLOAT, [2, 3])],
                 [(name["output"], TensorProto.FLOAT, [2, 3])],
                 [f32_tensor(name["init"], [2, 3])], name=name["graph"])
    shown = {r: (name[r] if len(name[r]) < 240 else f"{name[r][:20]!r}... ({len(name[r])})")
             for r in chosen if "=" not in r}
    return Case("names", "rename " + ",".join(chosen), seed,
                f"Add(x,w)->Relu->y with names {shown!r}", model=m)


# ---- sizes ------------------------------------------------------------------------------
def _dims(rng: random.Random, rank: int) -> list[int]:
    dims = [rng.choice([1, 2, 3, *HUGE]) for _ in range(rank)]
    if rng.random() < 0.3:   # a product past 2**64 from dims that are each "only" large
        dims = [2**32, 2**32, 16][:max(rank, 2)]
    return dims


LIMIT_BYTES = 2**48   # issue [20]: larger tensors are refused at compile time


def _too_big(dims) -> bool:
    return any(d < 0 for d in dims) or 4 * math.prod(dims) > LIMIT_BYTES


def _bad_reshape(shape: list[int], target: list[int]) -> bool:
    if sum(d == -1 for d in target) > 1 or any(d < -1 for d in target):
        return True
    dims = [shape[i] if d == 0 and i < len(shape) else d for i, d in enumerate(target)]
    if -1 in dims:
        rest = math.prod(d for d in dims if d != -1)
        return rest == 0 or math.prod(shape) % rest != 0
    return math.prod(dims) != math.prod(shape)


def sizes_case(seed: int, env: Env) -> Case:
    """One op fed negative, zero or huge dims; `must_fail` where the result is invalid or
    above LIMIT_BYTES."""
    rng = random.Random(f"sizes:{seed}")
    kind = rng.choice(["input", "initializer", "reshape", "expand", "constant_of_shape",
                       "range", "tile", "gather_index", "output"])
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    dims = _dims(rng, rng.randint(1, 3))
    must_fail = _too_big(dims)
    if kind == "input":
        m = model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                     [("x", f32, dims)], [("y", f32, None)])
    elif kind == "output":   # a declared output shape is a hint the real one overrides
        m = model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                     [("x", f32, [2, 3])], [("y", f32, dims)])
        must_fail = False
    elif kind == "initializer":
        w = helper.make_tensor("w", f32, [1], [1.0])
        del w.dims[:]
        w.dims.extend(dims)
        m = model_of([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                     [("x", f32, [1])], [("y", f32, None)], [w])
        must_fail = math.prod(dims) != 1 or any(d < 0 for d in dims)
    elif kind == "reshape":
        shape = rng.choice([[0, 8], [2, 3], [1]])
        m = model_of([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")],
                     [("x", f32, shape)], [("y", f32, None)], [_i64("s", dims)])
        must_fail = _bad_reshape(shape, dims)
    elif kind == "expand":
        m = model_of([helper.make_node("Expand", ["x", "s"], ["y"], name="expand")],
                     [("x", f32, [1] * len(dims))], [("y", f32, None)], [_i64("s", dims)])
    elif kind == "constant_of_shape":
        m = model_of([helper.make_node("ConstantOfShape", ["s"], ["c"], name="cos"),
                      helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                     [("x", f32, [1])], [("y", f32, None)], [_i64("s", dims)])
    elif kind == "range":   # the start is an input: the length is not known statically
        limit = rng.choice([h for h in HUGE if h]) * rng.choice([1, -1])
        delta = rng.choice([1, -1, 2**62])
        m = model_of([helper.make_node("Range", ["a", "b", "d"], ["y"], name="range")],
                     [("a", i64, [])], [("y", i64, None)],
                     [helper.make_tensor("b", i64, [], [max(min(limit, INT64_MAX), -2**63)]),
                      helper.make_tensor("d", i64, [], [delta])])
        dims, must_fail = [limit, delta], False
    elif kind == "tile":
        shape = [2, 3, 1][:len(dims)]
        m = model_of([helper.make_node("Tile", ["x", "r"], ["y"], name="tile")],
                     [("x", f32, shape)], [("y", f32, None)], [_i64("r", dims)])
        must_fail = _too_big([a * b for a, b in zip(shape, dims, strict=True)])
    else:   # a constant index far outside its axis
        m = model_of([helper.make_node("Gather", ["x", "i"], ["y"], name="gather", axis=0)],
                     [("x", f32, [4, 3])], [("y", f32, None)], [_i64("i", dims)])
        must_fail = any(not -4 <= d < 4 for d in dims)
    return Case("sizes", kind, seed, f"{kind} with dims/values {dims}", model=m,
                must_fail=must_fail, params=(kind, tuple(dims)))


def case(family: str, seed: int, env: Env) -> Case:
    """The hostile case `seed` of `family` (one of FAMILIES)."""
    if family in ("external", "manifest"):
        return hostile_files.case(family, seed, env)
    if family == "structural":
        return structural_case(seed, env)
    return {"names": names_case, "sizes": sizes_case}[family](seed, env)


__all__ = ["FAMILIES", "Case", "Env", "case", "f32_tensor", "model_of", "payloads"]
