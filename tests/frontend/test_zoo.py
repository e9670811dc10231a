"""The model zoo imported from ONNX and interpreted, against onnxruntime (independent)."""

import onnxruntime as ort
import pytest

from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.testing.tolerance import assert_close


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
@pytest.mark.parametrize("batch", [1, 3])
def test_zoo_model_matches_onnxruntime(name, batch):
    model = zoo.MODELS[name]()
    feeds = zoo.sample_input(model, batch=batch, seed=batch)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    graph = import_onnx(model)
    results = interpret(graph, feeds)
    for (out_name, _), want in zip(graph.outputs, expected, strict=True):
        # f32 throughout; onnxruntime fuses and reorders sums: a whole-model tolerance
        assert_close(results[out_name], want, "composite", err_msg=out_name)


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_zoo_model_text_round_trips(name):
    graph = import_onnx(zoo.MODELS[name]())
    text = print_graph(graph, resources=True)
    assert print_graph(parse(text), resources=True) == text
