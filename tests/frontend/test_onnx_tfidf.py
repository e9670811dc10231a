"""TfIdfVectorizer (frontend/onnx_tfidf.py) beyond the node tests (which are all mode TF):
IDF and TFIDF with and without weights, min_gram_length 1 with skips, against onnxruntime
(onnx's reference fails without weights); a string pool is refused."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret

X = np.array([[1, 2, 3, 1, 2, 2, 3, 1], [3, 3, 1, 2, 1, 2, 3, 2]], np.int32)
POOL = dict(ngram_counts=[0, 3], ngram_indexes=[4, 0, 1, 2, 3, 5],
            pool_int64s=[1, 2, 3, 1, 2, 2, 3, 3, 1])


def tfidf(x_type=TensorProto.INT32, **attrs):
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="tfidf", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, X.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])


@pytest.mark.parametrize("mode", ["IDF", "TFIDF"])
@pytest.mark.parametrize("weights", [None, [0.5, 1, 2, 3, 4, 5]])
def test_modes_and_skips_match_the_reference(mode, weights):
    attrs = dict(POOL, mode=mode, min_gram_length=1, max_gram_length=2, max_skip_count=2)
    if weights:
        attrs["weights"] = weights
    m = tfidf(**attrs)
    session = onnxruntime.InferenceSession(m.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    want, = session.run(None, {"x": X})
    np.testing.assert_array_equal(interpret(import_onnx(m), {"x": X})["y"], want)


def test_a_string_pool_is_refused():
    m = tfidf(mode="TF", min_gram_length=1, max_gram_length=1, ngram_counts=[0],
              ngram_indexes=[0], pool_strings=["a"])
    with pytest.raises(OnnxImportError, match=r"node 'tfidf' \(TfIdfVectorizer\): "
                       "pool_strings: string tensors are not a flowc dtype"):
        import_onnx(m)
