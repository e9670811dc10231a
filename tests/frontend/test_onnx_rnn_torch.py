"""torch `nn.LSTM` and `nn.GRU` (batch_first, 2 layers, bidirectional) exported to ONNX
with both of torch's exporters, imported by flowc and run on the interpreter and compiled
(the ONNX backend's compiled engine: an artifact for the fed shapes) against torch and
onnxruntime. The dynamo exporter needs onnxscript (skipped without it).

Tolerance: `matmul` of inner size input + hidden, widened by the layers times the sequence
length (each step and layer feeds the next)."""

from __future__ import annotations

import io

import onnx
import pytest

from flowc.frontend.onnx import import_onnx
from flowc.ir.interpret import interpret
from flowc.testing.engines import run, run_onnxruntime
from flowc.testing.tolerance import assert_close

torch = pytest.importorskip("torch")

INPUT, HIDDEN, LAYERS = 5, 7, 2


class Recurrent(torch.nn.Module):
    """An nn.LSTM or nn.GRU returning its output sequence and its final hidden states."""

    def __init__(self, kind: str):
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(INPUT, HIDDEN, num_layers=LAYERS, batch_first=True,
                                           bidirectional=True)

    def forward(self, x):
        y, state = self.rnn(x)
        return y, state[0] if isinstance(state, tuple) else state


def export(module, x, dynamo: bool, dynamic: bool) -> onnx.ModelProto:
    if dynamo:
        pytest.importorskip("onnxscript", reason="torch's dynamo exporter needs onnxscript")
        shapes = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")},) if dynamic \
            else None
        return torch.onnx.export(module, (x,), dynamo=True, dynamic_shapes=shapes,
                                 verbose=False).model_proto
    f = io.BytesIO()
    axes = {"x": {0: "batch", 1: "seq"}} if dynamic else None
    torch.onnx.export(module, (x,), f, dynamo=False, input_names=["x"],
                      output_names=["y", "h"], dynamic_axes=axes, opset_version=17)
    return onnx.load_from_string(f.getvalue())


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_torch_export_matches_torch_and_onnxruntime(kind, dynamo, dynamic):
    torch.manual_seed(0)
    module = Recurrent(kind).eval()
    x = torch.randn(3, 6, INPUT)
    m = export(module, x, dynamo, dynamic)
    g = import_onnx(m)
    loops = [n for n in g.nodes if n.op == "loop"]
    assert len(loops) == 2 * LAYERS      # one per layer and direction
    # another batch and a longer sequence than exported with, where the model left the dims
    # dynamic (the dynamo exporter specializes the sequence length)
    declared = g.inputs[0].out().type.shape
    feed = torch.randn(*(d if isinstance(d, int) else new
                         for d, new in zip(declared, (2, 9, INPUT), strict=True)))
    assert dynamic == (tuple(feed.shape) != tuple(x.shape))
    with torch.no_grad():
        want_torch = [t.numpy() for t in module(feed)]
    name = g.inputs[0].name
    interpreted = interpret(g, {name: feed.numpy()})
    feeds = {m.graph.input[0].name: feed.numpy()}
    want_ort = run_onnxruntime(m, feeds)
    compiled = run(m, feeds, engines=("compiled",))["compiled"]
    for k, ((out, _), wt, wo) in enumerate(zip(g.outputs, want_torch, want_ort, strict=True)):
        for got, how in ((interpreted[out], "interpreted"), (compiled[k], "compiled")):
            for want, engine in ((wt, "torch"), (wo, "onnxruntime")):
                assert_close(got, want, "matmul", n=INPUT + HIDDEN,
                             scale=LAYERS * feed.shape[1],
                             err_msg=f"{out} {how} against {engine}")
    if not dynamic:
        assert all(v.type.is_static for n in loops for v in n.outputs)
