"""A standard torch module, exported as a user would (default init, the legacy exporter),
trains in flowc exactly as in torch: torch.nn.TransformerEncoderLayer + a linear head.

Its two LayerNorms start with equal weights, which the exporter writes as one initializer
and `Identity` copies; flowc must train them apart, as torch does (onnx_train unties them).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

import flowc

torch = pytest.importorskip("torch")


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


def test_a_default_initialised_transformer_layer_trains_as_in_torch(tmp_path):
    torch.manual_seed(0)
    model = Encoder()
    x, y = torch.randn(4, 6, 32), torch.randint(0, 5, (4,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (x,), str(tmp_path / "enc.onnx"), dynamo=False,
                          input_names=["x"], output_names=["out"], do_constant_folding=False,
                          opset_version=17)
    exported = onnx.load(str(tmp_path / "enc.onnx"))
    assert any(n.op_type == "Identity" for n in exported.graph.node)  # the merged initializers
    flowc.compile(tmp_path / "enc.onnx", tmp_path / "art", train=True,
                  optimizer="adam{lr=0.003}")
    art = flowc.load(tmp_path / "art", threads=1)
    optimizer = torch.optim.Adam(model.train().parameters(), lr=0.003)
    for step in range(10):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        assert art.train_step(x.numpy(), y.numpy()) == pytest.approx(loss.item(), rel=2e-3), step
    params = art.parameters()
    assert set(params) == set(model.state_dict())
    for name, value in model.state_dict().items():
        got, want = params[name], value.numpy()
        if name == "enc.self_attn.in_proj_bias":  # [q | k | v] biases: the key bias's
            keep = np.r_[0:32, 64:96]  # gradient is exactly 0 (softmax ignores it), so both
            got, want = got[keep], want[keep]  # engines' rounding noise, which Adam scales
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4, err_msg=name)
