"""The ONNX training route builds its step by passes, so a `--dump-dir` shows the graph
before the gradients (forward and loss), after `gradients` (the backward graph, outputs
grad/X) and after `apply-optimizer` (the update), each file parsing back."""

from __future__ import annotations

import json
from pathlib import Path

from flowc.cli import main
from flowc.ir.parser import parse
from flowc.ir.phases import phases

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "train"


def test_dump_holds_the_graph_before_and_after_gradients_and_update(tmp_path):
    meta = json.loads((FIXTURES / "mlp_sgd.json").read_text())
    dump = tmp_path / "dump"
    assert main(["compile", str(FIXTURES / "mlp_sgd.onnx"), "-o", str(tmp_path / "art"),
                 "--train", "--loss", meta["loss"], "--optimizer", meta["optimizer"],
                 "--dump-dir", str(dump), "-q"]) == 0
    names = sorted(p.name for p in dump.glob("train_step.0*.flowc"))  # the step's entry
    assert names[:3] == ["train_step.00-input.flowc", "train_step.01-gradients.flowc",
                         "train_step.02-apply-optimizer.flowc"]
    assert "gradients" not in " ".join(p.name for p in dump.glob("0*.flowc"))  # run's
    before, grads, update = (parse((dump / n).read_text()) for n in names[:3])
    count = {name: [n.op for n in g.nodes] for name, g in
             (("before", before), ("grads", grads), ("update", update))}
    assert "softmax_cross_entropy" in count["before"] and "assign" not in count["before"]
    assert set(phases(before).values()) == {"forward"}
    assert "backward" in phases(grads).values() and "assign" not in count["grads"]
    params = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]
    assert [n for n, _ in grads.outputs] == ["loss", *(f"grad/{p}/read" for p in params)]
    assert [n for n, _ in update.outputs] == ["loss"]
    assert count["update"].count("assign") == 2 * len(params) + 1  # weight, momentum; step
    assert set(phases(update).values()) == {"forward", "backward", "update"}
