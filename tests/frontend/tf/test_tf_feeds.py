"""Feeds and fetches as tfcompile takes them (--feed/--fetch, a tf2xla.Config), pruning,
and a SavedModel's variables read from its checkpoint bundle without a copy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flowc.cli import main
from flowc.frontend.tf import TfImportError, import_tf
from flowc.frontend.tf.bundle import read_bundle
from flowc.frontend.tf.loader import const_array, load_graph
from flowc.ir.build import const_value
from flowc.ir.interpret import interpret

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tf"
CONFIG = """
feed { id { node_name: "Relu" } shape { dim { size: 4 } dim { size: 32 } }
       type: DT_FLOAT name: "hidden" }
fetch { id { node_name: "Identity" } name: "probs" }
fetch { id { node_name: "BiasAdd_1" } }
"""


def test_feeding_an_inner_tensor_prunes_what_it_computes(tmp_path):
    config = tmp_path / "mlp.config.pbtxt"
    config.write_text(CONFIG)
    graph = import_tf(FIXTURES / "mlp.pb", config=config)
    assert [n.name for n in graph.inputs] == ["hidden"]
    assert [name for name, _ in graph.outputs] == ["probs", "BiasAdd_1"]
    names = {n.name for n in graph.nodes}
    assert "MatMul_1" in names and "MatMul" not in names and "Relu" not in names
    hidden = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    out = interpret(graph, {"hidden": hidden})
    logits = out["BiasAdd_1"]
    expected = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(out["probs"], expected / expected.sum(1, keepdims=True),
                               rtol=1e-5)


def test_feed_and_fetch_options_match_the_config(tmp_path):
    by_options = import_tf(FIXTURES / "mlp.pb", feeds=["Relu=4x32:float32"],
                           fetches=["Identity", "BiasAdd_1"])
    assert [n.name for n in by_options.inputs] == ["Relu"]
    assert [name for name, _ in by_options.outputs] == ["Identity", "BiasAdd_1"]
    out = tmp_path / "mlp.flowc"
    assert main(["import", str(FIXTURES / "mlp.pb"), "--feed", "Relu=4x32:f32", "--fetch",
                 "Identity_1", "-o", str(out)]) == 0
    assert "-> (Identity_1: f32[4])" in out.read_text()


def test_config_errors(tmp_path):
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("feed { id { node_name: 3 }")
    with pytest.raises(TfImportError, match=r"bad\.pbtxt: not a tf2xla\.Config in text form"):
        import_tf(FIXTURES / "mlp.pb", config=bad)
    bad.write_text('feed { id { node_name: "x" } shape { dim { size: -1 } } }\n'
                   'fetch { id { node_name: "Identity" } }')
    with pytest.raises(TfImportError, match="feed 0 \\('x'\\) needs a static shape"):
        import_tf(FIXTURES / "mlp.pb", config=bad)
    bad.write_text('feed { id { node_name: "Relu" } }\nfetch { id { node_name: "Identity" } }')
    with pytest.raises(TfImportError, match="feed 'Relu' \\(Relu:0\\) needs its shape and "
                                            "dtype: --feed Relu:0=SHAPE:DTYPE"):
        import_tf(FIXTURES / "mlp.pb", config=bad)
    good = tmp_path / "good.pbtxt"   # a Placeholder's own shape and dtype where not given
    good.write_text('feed { id { node_name: "x" } }\nfetch { id { node_name: "Identity" } }')
    assert [str(n.types[0]) for n in import_tf(FIXTURES / "mlp.pb", config=good).inputs] \
        == ["f32[4,16]"]


def test_checkpoint_values_are_views_of_the_data_shard():
    bundle = read_bundle(str(FIXTURES / "cnn_saved" / "variables" / "variables"))
    frozen = load_graph(FIXTURES / "cnn.pb")
    kernel = bundle["k1/.ATTRIBUTES/VARIABLE_VALUE"]
    assert isinstance(kernel.base, np.memmap) or isinstance(kernel.base.base, np.memmap)
    consts = [const_array(n, n.name) for n in frozen.nodes.values() if n.op == "Const"]
    assert any(c.shape == kernel.shape and np.array_equal(c, kernel) for c in consts)
    graph = import_tf(FIXTURES / "cnn_saved")
    weights = [const_value(n.out()) for n in graph.nodes if n.op == "constant"]
    assert any(np.shares_memory(w, kernel) or (w.shape == kernel.shape and
                                               _same_file_view(w, kernel)) for w in weights)


def _same_file_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether `a` is a view of a memory-mapped file (a second map of the same shard)."""
    base = a
    while base.base is not None and not isinstance(base, np.memmap):
        base = base.base
    return isinstance(base, np.memmap) and np.array_equal(a, b)


def test_unknown_batch_dim_is_the_batch_symbol(tmp_path):
    """A SavedModel exported with a None batch dim: its input's leading dim is the symbol
    `batch` (bound by --batch); here the MLP's signature and Placeholder edited to -1."""
    import shutil

    from flowc.frontend.tf.protos import SavedModel

    saved = shutil.copytree(FIXTURES / "mlp_saved", tmp_path / "m")
    model = SavedModel()
    model.ParseFromString((saved / "saved_model.pb").read_bytes())
    meta = model.meta_graphs[0]
    meta.signature_def["serving_default"].inputs["x"].tensor_shape.dim[0].size = -1
    placeholder = next(n for n in meta.graph_def.node if n.name == "serving_default_x")
    placeholder.attr["shape"].shape.dim[0].size = -1
    (saved / "saved_model.pb").write_bytes(model.SerializeToString())
    graph = import_tf(saved)
    assert str(graph.inputs[0].types[0]) == "f32[batch,16]"
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    fixed = import_tf(FIXTURES / "mlp_saved", feeds=["serving_default_x=3x16:f32"])
    got, want = interpret(graph, {"x": x}), interpret(fixed, {"serving_default_x": x})
    np.testing.assert_allclose(got["probs"], want["probs"], rtol=1e-6)
