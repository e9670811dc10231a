"""ai.onnx.ml TreeEnsemble (opset 5) imported as comparisons and matmuls by constant path
matrices (issue [13]): no per-sample branching.

Every branch node's test is computed for every sample at once: its feature
(`nodes_featureids`, a gather of X's columns) against its split by its mode (`nodes_modes`:
<=, <, >=, >, ==, !=, or membership in its set: `membership_values`, sets delimited by NaN,
in the order the member nodes come in the node list), or true where the feature is NaN and
`nodes_missing_value_tracks_true` says so. Each root-to-leaf path of each tree (a tree whose
root's two branches are one leaf is that leaf) is reached where all of its tests go its
way: the count of tests that do (a matmul of the tests, and of their negations, by 0/1
path matrices) equals the path's length. The leaf's weight goes to its target
(`leaf_targetids`) by `aggregate_function`: SUM and AVERAGE (over trees) as a matmul,
MIN and MAX as a masked reduction (targets no leaf reaches keep the dtype's max / min, as
onnx.reference). The result is [N, n_targets] in X's dtype.

Refused with a one-line error naming the node: a post_transform other than NONE, an
unknown mode or aggregate_function, a non-float or non-2-D X.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import Value

_COMPARE = {0: "less_or_equal", 1: "less", 2: "greater_or_equal", 3: "greater", 4: "equal"}


def _array(ctx, name: str, default=None) -> np.ndarray:
    value = ctx.attrs.get(name, default)
    if value is None:
        ctx.fail(f"attribute '{name}' is required")
    return np.asarray(value).reshape(-1)


def _paths(ctx, roots, true_ids, false_ids, true_leaf, false_leaf):
    """[(leaf, [(node, went_true)...])] for every root-to-leaf path, trees in order."""
    paths = []

    def walk(node: int, trail: list, depth: int) -> None:
        if depth > len(true_ids):
            ctx.fail("the trees have a cycle")
        for went, child, leaf in ((True, true_ids[node], true_leaf[node]),
                                  (False, false_ids[node], false_leaf[node])):
            if leaf:
                paths.append((int(child), [*trail, (node, went)]))
            else:
                walk(int(child), [*trail, (node, went)], depth + 1)

    for root in roots:
        if true_leaf[root] and false_leaf[root] and true_ids[root] == false_ids[root]:
            paths.append((int(true_ids[root]), []))
        else:
            walk(int(root), [], 0)
    return paths


def convert_tree_ensemble(ctx) -> Sequence[Value]:
    (x,) = ctx.inputs
    if not x.type.dtype.is_float or x.type.rank != 2:
        ctx.fail(f"X must be a 2-D float tensor, found {x.type}")
    if int(ctx.attrs.get("post_transform", 0)) != 0:
        ctx.fail(f"post_transform {ctx.attrs['post_transform']} is not imported (NONE is)")
    aggregate = int(ctx.attrs.get("aggregate_function", 1))
    if aggregate not in (0, 1, 2, 3):
        ctx.fail(f"aggregate_function must be 0-3 (AVERAGE, SUM, MIN, MAX), found {aggregate}")
    dt = x.type.dtype.np
    modes = _array(ctx, "nodes_modes").astype(np.int64)
    features = _array(ctx, "nodes_featureids").astype(np.int64)
    splits = _array(ctx, "nodes_splits").astype(dt)
    true_ids, false_ids = _array(ctx, "nodes_truenodeids"), _array(ctx, "nodes_falsenodeids")
    true_leaf, false_leaf = _array(ctx, "nodes_trueleafs"), _array(ctx, "nodes_falseleafs")
    targets, weights = _array(ctx, "leaf_targetids"), _array(ctx, "leaf_weights").astype(dt)
    roots = _array(ctx, "tree_roots")
    n_targets = int(ctx.attrs["n_targets"])
    missing = _array(ctx, "nodes_missing_value_tracks_true", np.zeros(len(modes)))
    if bad := sorted(set(modes.tolist()) - set(range(7))):
        ctx.fail(f"nodes_modes {bad} are not modes (0-6: LEQ, LT, GTE, GT, EQ, NEQ, MEMBER)")

    def op(name: str, *operands: Value, **attrs) -> Value:
        return ctx.emit(name, list(operands), attrs)[0]

    def k(value, dtype=dt) -> Value:
        return ctx.constant(np.asarray(value, dtype=dtype))

    feat = op("gather", x, k(features, np.int64), axis=1)          # [N, nodes]
    test = None
    for mode in sorted(set(modes.tolist())):
        if mode == 6:
            sets = _member_sets(ctx, modes, dt)
            hit = op("reduce_max", op("cast", op("equal", op("unsqueeze", feat, k([-1], np.int64)),
                                                 k(sets)), to=x.type.dtype),
                     k([-1], np.int64), keepdims=0)
            result = op("greater", hit, k(0.0))
        elif mode == 5:
            result = op("not", op("equal", feat, k(splits)))
        else:
            result = op(_COMPARE[mode], feat, k(splits))
        chosen = op("and", result, k(modes == mode, bool))
        test = chosen if test is None else op("or", test, chosen)
    if missing.any():
        test = op("or", test, op("and", op("isnan", feat), k(missing.astype(bool), bool)))
    paths = _paths(ctx, roots, true_ids, false_ids, true_leaf, false_leaf)
    goes_true = np.zeros((len(modes), len(paths)), dt)
    goes_false = np.zeros_like(goes_true)
    for p, (_, trail) in enumerate(paths):
        for node, went in trail:
            (goes_true if went else goes_false)[node, p] = 1
    t = op("cast", test, to=x.type.dtype)
    count = op("add", op("matmul", t, k(goes_true)),
               op("matmul", op("sub", k(1.0), t), k(goes_false)))
    reached = op("equal", count, k([len(trail) for _, trail in paths]))
    leaf = np.array([leaf for leaf, _ in paths], np.int64)
    to_target = np.zeros((len(paths), n_targets), bool)
    to_target[np.arange(len(paths)), targets[leaf].astype(np.int64)] = True
    if aggregate in (0, 1):
        scale = 1.0 / len(roots) if aggregate == 0 else 1.0
        route = np.where(to_target, weights[leaf][:, None] * scale, 0).astype(dt)
        return [op("matmul", op("cast", reached, to=x.type.dtype), k(route))]
    fill = np.finfo(dt).max if aggregate == 2 else np.finfo(dt).min
    both = op("and", op("unsqueeze", reached, k([-1], np.int64)), k(to_target, bool))
    values = op("where", both, k(np.broadcast_to(weights[leaf][:, None], to_target.shape)),
                k(fill))
    return [op("reduce_min" if aggregate == 2 else "reduce_max", values, k([1], np.int64),
               keepdims=0)]


def _member_sets(ctx, modes: np.ndarray, dt) -> np.ndarray:
    """[nodes, longest set] of each member node's set (NaN-padded: NaN equals nothing)."""
    values = np.asarray(ctx.attrs.get("membership_values", ()), np.float64).reshape(-1)
    groups, current = [], []
    for v in values:
        if np.isnan(v):
            groups.append(current)
            current = []
        else:
            current.append(v)
    members = np.flatnonzero(modes == 6)
    if current or len(groups) != len(members):
        ctx.fail(f"membership_values hold {len(groups)} NaN-delimited sets for "
                 f"{len(members)} member nodes")
    sets = np.full((len(modes), max([len(g) for g in groups] + [1])), np.nan, dt)
    for node, group in zip(members, groups, strict=True):
        sets[node, :len(group)] = group
    return sets
