"""TfIdfVectorizer (frontend/onnx_tfidf.py) against onnx.reference on random token rows:
every mode with and without weights, n-gram sizes 1 to 3, skips, sizes outside
[min, max] in the pool, a batch; its refusals name the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret

RNG = np.random.default_rng(17)
POOL = dict(pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 3, 5, 5, 6, 7],
            ngram_counts=[0, 4, 10], ngram_indexes=[0, 1, 2, 3, 4, 5, 6, 7, 8])


def model(shape, elem=TensorProto.INT64, **attrs):
    node = helper.make_node("TfIdfVectorizer", ["X"], ["Y"], **{**POOL, **attrs})
    out = [*shape[:-1], 9]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", elem, shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])


@pytest.mark.parametrize("mode, weighted", [("TF", False), ("IDF", False), ("IDF", True),
                                            ("TFIDF", False), ("TFIDF", True)])
@pytest.mark.parametrize("lo, hi, skips", [(1, 3, 2), (2, 2, 0), (1, 1, 4), (3, 3, 1)])
def test_matches_onnx_reference(mode, weighted, lo, hi, skips):
    attrs = {"mode": mode, "min_gram_length": lo, "max_gram_length": hi,
             "max_skip_count": skips}
    if weighted:
        attrs["weights"] = list(RNG.uniform(0.5, 2, 9).astype(np.float32))
    m = model([3, 14], **attrs)
    x = RNG.integers(2, 9, (3, 14)).astype(np.int64)
    if weighted or mode == "TF":
        (want,) = ReferenceEvaluator(m).run(None, {"X": x})
    else:  # onnx.reference fails without weights: the spec's counts, or 1 where nonzero
        (tf,) = ReferenceEvaluator(model([3, 14], **{**attrs, "mode": "TF"})).run(
            None, {"X": x})
        want = tf if mode == "TFIDF" else (tf > 0).astype(np.float32)
    np.testing.assert_allclose(interpret(import_onnx(m), {"X": x})["Y"], want, rtol=1e-6)


def test_refusals_name_the_node():
    with pytest.raises(OnnxImportError, match=r"\(TfIdfVectorizer\): mode must be TF, IDF "
                                              "or TFIDF, found 'BM25'"):
        import_onnx(model([5], mode="BM25", min_gram_length=1, max_gram_length=1,
                          max_skip_count=0))
    with pytest.raises(OnnxImportError, match=r"only integer tokens are imported"):
        import_onnx(model([5], TensorProto.FLOAT, mode="TF", min_gram_length=1,
                          max_gram_length=1, max_skip_count=0))
