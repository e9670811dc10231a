"""Random well-typed graphs over the op registry, as replayable recipes.

A `Recipe` is a list of `Step`s (op, operand indices, attributes, constant data); step i
defines value i. `build(recipe)` turns it into a `flowc.ir.Graph` through `make_node`, so
the registry's type rules decide what is well typed: a step they reject makes the recipe
invalid (`build` returns None) and the generator or shrinker just tries something else.
Recipes rather than graphs are generated because shrinking a recipe (drop a step, route
its users to its operand) is a list edit.

What the generator aims at: broadcasting shapes, odd sizes that divide no tile size,
size-1 and (rarely) size-0 dims, f32/i32/i64 values mixed through casts, chains of
elementwise ops that fusion groups, constants that the pipeline folds, and matmul,
reductions, softmax, transpose, reshape, concat and where between them. Values stay
finite (no exp/log of unbounded inputs) so that comparisons mean something.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.types import DTYPES

DIMS = (1, 1, 2, 3, 5, 7, 9, 17, 33)
UNARY_F = ("relu", "neg", "abs", "tanh", "sigmoid", "floor", "ceil", "sin", "cos", "erf",
           "softplus", "gelu")
UNARY_ANY = ("relu", "neg", "abs")
BINARY = ("add", "sub", "mul", "max", "min")
COMPARE = ("greater", "less", "equal", "greater_or_equal")
REDUCE = ("reduce_sum", "reduce_max", "reduce_min", "reduce_mean")


@dataclass(frozen=True)
class Step:
    """One value of a recipe: an input (op "input"), a constant (op "constant", `data`), or
    a node of `op` on the values `args` (indices of earlier steps) with `attrs`."""

    op: str
    args: tuple[int, ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()
    data: np.ndarray | None = field(default=None, compare=False)


@dataclass
class Recipe:
    """Steps and the indices of the values the graph returns."""

    steps: list[Step]
    outputs: list[int]


def build(recipe: Recipe, name: str = "random") -> Graph | None:
    """The graph of `recipe`, or None when a step is ill typed (registry rules reject it)."""
    g = Graph(name)
    values: list[Any] = []
    try:
        for i, step in enumerate(recipe.steps):
            if step.op == "input":
                values.append(g.add_input(f"x{i}", TensorType(str(step.data.dtype),
                                                               step.data.shape)))
            elif step.op == "constant":
                node = make_node("constant", [], {"value": Tensor(step.data)}, name=f"c{i}")
                values.append(g.append(node).out())
            else:
                node = make_node(step.op, [values[a] for a in step.args], dict(step.attrs),
                                 name=f"n{i}")
                values.append(g.append(node).out())
        for k, idx in enumerate(recipe.outputs):
            g.add_output(f"y{k}", values[idx])
    except (FlowcError, IndexError, ValueError):
        return None
    return g


# No finite value near the f32 limit: a sum of such values overflows to +-inf or not (and
# two opposite overflows make NaN) depending on the order of the additions, which engines
# legitimately differ in (the long run's first findings were exactly that, in matmuls).
SPECIAL_VALUES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e15, -1e15, 1e-30, 1e-40,
                           -1e-45, 88.8, -104.0], np.float32)


def with_special_values(recipe: Recipe, seed: int, fraction: float = 0.2) -> Recipe:
    """`recipe` with about `fraction` of each f32 input's elements replaced by special
    values (NaN, +-inf, -0, large, tiny and subnormal magnitudes, the edges of exp), for
    differential runs of NaN/Inf propagation and range limits."""
    rng = np.random.default_rng(seed)
    steps = []
    for step in recipe.steps:
        if step.op == "input" and step.data.dtype == np.float32 and step.data.size:
            data = step.data.copy()
            pick = rng.random(data.shape) < fraction
            data[pick] = rng.choice(SPECIAL_VALUES, size=int(pick.sum()))
            step = Step(step.op, step.args, step.attrs, np.asarray(data))
        steps.append(step)
    return Recipe(steps, list(recipe.outputs))


def feeds(recipe: Recipe) -> dict[str, np.ndarray]:
    """The input arrays of `recipe` (stored in its input steps), keyed by input name."""
    return {f"x{i}": s.data for i, s in enumerate(recipe.steps) if s.op == "input"}


def _shape(rng: np.random.Generator, rank: int, zero_ok: bool) -> tuple[int, ...]:
    dims = [int(rng.choice(DIMS)) for _ in range(rank)]
    if zero_ok and rank and rng.random() < 0.05:
        dims[int(rng.integers(rank))] = 0
    return tuple(dims)


def _array(rng: np.random.Generator, shape: tuple[int, ...], dt: str) -> np.ndarray:
    if dt == "f32":
        return rng.uniform(-3, 3, shape).astype(np.float32)
    if dt == "bool":   # an array even for shape () (a numpy.bool_ scalar breaks onnxruntime)
        return np.asarray(rng.random(shape) < 0.5)
    return rng.integers(-9, 10, shape).astype(DTYPES[dt].np)


class _Gen:
    """Grows one recipe; `types[i]` is (dtype name, shape) of value i."""

    def __init__(self, rng: np.random.Generator, zero_ok: bool) -> None:
        self.rng, self.zero_ok = rng, zero_ok
        self.steps: list[Step] = []
        self.types: list[tuple[str, tuple[int, ...]]] = []

    def add(self, step: Step) -> bool:
        graph = build(Recipe([*self.steps, step], [len(self.steps)]))
        if graph is None:
            return False
        t = graph.outputs[0][1].type
        self.steps.append(step)
        self.types.append((t.dtype.name, tuple(t.shape)))
        return True

    def leaf(self, shape: tuple[int, ...], dt: str = "f32", const: bool = False) -> int:
        data = _array(self.rng, shape, dt)
        self.add(Step("constant" if const else "input", data=data))
        return len(self.steps) - 1

    def pick(self, dt: str | None = "f32") -> int:
        ok = [i for i, (d, _) in enumerate(self.types) if dt is None or d == dt]
        if not ok:
            return self.leaf(_shape(self.rng, int(self.rng.integers(1, 4)), self.zero_ok), dt)
        recent = ok[-4:] if self.rng.random() < 0.7 else ok   # favour chains (fusion)
        return int(self.rng.choice(recent))

    def broadcast_partner(self, a: int) -> int:
        """A new leaf whose shape broadcasts against value `a` (suffix, 1s, or equal)."""
        dt, shape = self.types[a]
        r = self.rng
        if shape and r.random() < 0.6:
            shape = shape[int(r.integers(len(shape) + 1)):]
        shape = tuple(1 if r.random() < 0.3 else d for d in shape)
        if r.random() < 0.2:
            shape = (1, *shape)
        return self.leaf(shape, dt, const=r.random() < 0.5)

    def step(self) -> None:
        r = self.rng
        kind = r.choice(["unary", "binary", "binary", "matmul", "reduce", "softmax",
                         "transpose", "reshape", "concat", "where", "cast", "clip"])
        a = self.pick("f32" if kind in ("unary", "matmul", "softmax", "clip") else None)
        dt, shape = self.types[a]
        if kind == "unary":
            self.add(Step(str(r.choice(UNARY_F)), (a,)))
        elif kind == "binary":
            other = self.pick(dt) if r.random() < 0.3 else self.broadcast_partner(a)
            self.add(Step(str(r.choice(BINARY)), (a, other) if r.random() < 0.5 else (other, a)))
        elif kind == "matmul" and shape:
            n = int(r.choice(DIMS))
            w = self.leaf((shape[-1], n), "f32", const=r.random() < 0.7)
            self.add(Step("matmul", (a, w)))
        elif kind == "reduce" and shape:
            axes = sorted({int(x) for x in r.integers(-len(shape), len(shape), 2)})
            ax = self.leaf((len(axes),), "i64", const=True)
            self.steps[ax] = Step("constant", data=np.array(axes, np.int64))
            keep = int(r.integers(2))
            self.add(Step(str(r.choice(REDUCE)), (a, ax), (("keepdims", keep),)))
        elif kind == "softmax" and shape:
            self.add(Step("softmax", (a,), (("axis", int(r.integers(-len(shape), len(shape)))),)))
        elif kind == "transpose" and len(shape) > 1:
            self.add(Step("transpose", (a,), (("perm", tuple(int(p) for p in
                                                              r.permutation(len(shape)))),)))
        elif kind == "reshape":
            target = [-1] if r.random() < 0.5 else [1, -1]
            s = self.leaf((len(target),), "i64", const=True)
            self.steps[s] = Step("constant", data=np.array(target, np.int64))
            self.add(Step("reshape", (a, s)))
        elif kind == "concat" and shape:
            other = self.pick(dt)
            self.add(Step("concat", (a, other), (("axis", int(r.integers(len(shape)))),)))
        elif kind == "where":
            b = self.broadcast_partner(a)
            c = len(self.steps)
            if self.add(Step(str(r.choice(COMPARE)), (a, b))):
                self.add(Step("where", (c, a, b)))
        elif kind == "cast":
            to = str(r.choice([d for d in ("f32", "i32", "i64") if d != dt]))
            self.add(Step("cast", (a,), (("to", DTYPES[to]),)))
        elif kind == "clip":
            lo, hi = self.leaf((), "f32", True), self.leaf((), "f32", True)
            self.add(Step("clip", (a, lo, hi)))
        else:
            self.add(Step(str(r.choice(UNARY_ANY)), (a,)))


def random_recipe(seed: int, n_nodes: int = 6, zero_ok: bool = True) -> Recipe:
    """A random well-typed recipe of about `n_nodes` op steps (reproducible from `seed`)."""
    gen = _Gen(np.random.default_rng(seed), zero_ok)
    gen.leaf(_shape(gen.rng, int(gen.rng.integers(1, 4)), zero_ok))
    for _ in range(n_nodes):
        gen.step()
    used = {a for s in gen.steps for a in s.args}
    sinks = [i for i, s in enumerate(gen.steps)
             if s.op not in ("input", "constant") and i not in used]
    return Recipe(gen.steps, sinks or [0])
