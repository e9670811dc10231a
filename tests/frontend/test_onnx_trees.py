"""TreeEnsemble (frontend/onnx_trees.py) against onnx.reference on random ensembles: every
comparison mode, set membership, NaN features tracked true, every aggregate function, a
one-leaf tree; one compiled; its refusals name the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret
from flowc.onnx_backend import FlowcBackend

RNG = np.random.default_rng(19)


def ensemble(trees=3, depth=3, features=4, targets=3, aggregate=1, member=False, **extra):
    """A model of `trees` full binary trees of `depth`, the first a single leaf (node 0 and
    leaf 0: onnx.reference reads a one-leaf tree's leaf at its root's node index, the spec
    at the leaf its branches name; here they agree)."""
    a = {k: [] for k in ("modes", "feat", "splits", "tid", "fid", "tleaf", "fleaf")}
    roots, leaves, sets = [], 0, []
    for tree in range(trees):
        if tree == 0:   # a tree that is one leaf: both branches of its root to it
            roots.append(len(a["modes"]))
            for key, v in (("modes", 0), ("feat", 0), ("splits", 0.0), ("tid", leaves),
                           ("fid", leaves), ("tleaf", 1), ("fleaf", 1)):
                a[key].append(v)
            leaves += 1
            continue
        first = len(a["modes"])
        roots.append(first)
        count = 2 ** depth - 1
        for i in range(count):
            mode = int(RNG.integers(0, 7 if member else 6))
            a["modes"].append(mode)
            a["feat"].append(int(RNG.integers(0, features)))
            a["splits"].append(float(np.round(RNG.uniform(-1, 1), 1)))
            if mode == 6:
                sets.extend([*np.round(RNG.uniform(-1, 1, 3), 1), np.nan])
            for side, key, leaf_key in ((1, "tid", "tleaf"), (2, "fid", "fleaf")):
                child = 2 * i + side
                if child < count:
                    a[key].append(first + child)
                    a[leaf_key].append(0)
                else:
                    a[key].append(leaves)
                    a[leaf_key].append(1)
                    leaves += 1
    attrs = dict(
        nodes_modes=numpy_helper.from_array(np.array(a["modes"], np.uint8), "nodes_modes"),
        nodes_featureids=a["feat"], nodes_truenodeids=a["tid"], nodes_falsenodeids=a["fid"],
        nodes_trueleafs=a["tleaf"], nodes_falseleafs=a["fleaf"],
        nodes_splits=numpy_helper.from_array(np.array(a["splits"], np.float32), "s"),
        leaf_targetids=list(RNG.integers(0, targets, leaves)),
        leaf_weights=numpy_helper.from_array(RNG.uniform(-5, 5, leaves).astype(np.float32),
                                             "w"),
        tree_roots=roots, n_targets=targets, aggregate_function=aggregate, **extra)
    if sets:
        attrs["membership_values"] = numpy_helper.from_array(
            np.array(sets, np.float32), "m")
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, features])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, targets])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 5),
                                                   helper.make_opsetid("", 21)])


def samples(n=40, features=4):
    x = np.round(RNG.uniform(-1.2, 1.2, (n, features)), 1).astype(np.float32)
    x[RNG.random(x.shape) < 0.1] = np.nan
    return x


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("member", [False, True])
def test_matches_onnx_reference(aggregate, member):
    m = ensemble(aggregate=aggregate, member=member,
                 nodes_missing_value_tracks_true=list(RNG.integers(0, 2, 15)))
    x = samples()
    (want,) = ReferenceEvaluator(m).run(None, {"X": x})
    np.testing.assert_allclose(interpret(import_onnx(m), {"X": x})["Y"], want, rtol=1e-6)


def test_compiled_matches_onnx_reference():
    m = ensemble(trees=4, depth=2, member=True)
    x = samples(16)
    (want,) = ReferenceEvaluator(m).run(None, {"X": x})
    (got,) = FlowcBackend.prepare(m).run([x])
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("extra, message", [
    ({"post_transform": 1}, "post_transform 1 is not imported (NONE is)"),
    ({"aggregate": 7}, "aggregate_function must be 0-3"),
])
def test_refusals_name_the_node(extra, message):
    with pytest.raises(OnnxImportError, match=r"\(TreeEnsemble\)") as info:
        import_onnx(ensemble(**extra))
    assert message in str(info.value)
