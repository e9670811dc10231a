"""The default pipeline on the model zoo: fewer nodes, same outputs after every pass."""

import pytest

from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.ir.interpret import interpret
from flowc.passes import PassManager, parse_pipeline
from flowc.testing.tolerance import assert_close

# Node counts before the default pipeline and after its rewrites (up to prune; fuse then
# groups nodes into kernels): the MLP's matmul+add becomes a gemm;
# the CNN's two batch norms fold into their convs (with their 8 parameters); the
# transformer's equal constants merge (three reshape shapes, two LayerNorm scales of ones).
COUNTS = {"mlp": (9, 8), "cnn": (25, 15), "transformer_encoder": (46, 43)}


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_default_pipeline_shrinks_and_keeps_results(name):
    model = zoo.MODELS[name]()
    graph = import_onnx(model)
    feeds = zoo.sample_input(model, batch=3, seed=7)
    want = interpret(graph, feeds)
    current, after = graph, {}
    for p in parse_pipeline("default"):
        current = PassManager([p]).run(current)  # verified after the pass
        after[p.name] = len(current.nodes)
        got = interpret(current, feeds)
        for out_name in want:
            # f32; folding BatchNorm into conv weights rounds differently
            assert_close(got[out_name], want[out_name], "composite", err_msg=f"after {p.name}")
    assert (len(graph.nodes), after["prune"]) == COUNTS[name]
    assert len(current.nodes) <= after["pack-weights"]  # fusing never adds nodes
