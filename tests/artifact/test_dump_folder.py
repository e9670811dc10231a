"""`flowc.compile(..., dump_dir=)`: the IR after every pass (files that parse back), every
kernel's MLIR with locations, the LLVM IR and assembly, and an index that leads from an ONNX
node to its kernel and the assembly that runs it."""

from __future__ import annotations

import json
import re

import flowc
from flowc.examples import zoo
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph


def test_dump_folder_follows_a_node_from_model_to_assembly(tmp_path):
    dump = tmp_path / "dump"
    manifest = flowc.compile(zoo.cnn(), tmp_path / "art", dump_dir=dump, name="cnn", batch=1)
    index = json.loads((dump / "index.json").read_text())
    listed = [e["file"] for e in index["files"]]
    on_disk = sorted(p.name for p in dump.iterdir() if not p.name.startswith("index."))
    assert sorted(listed) == on_disk
    assert "other" not in {e["what"] for e in index["files"]}

    passes = [n for n in listed if re.fullmatch(r"\d\d-.+\.flowc", n)]
    assert passes[0] == "00-input.flowc" and passes[-1].endswith("-schedule.flowc")
    assert len(passes) == 1 + len(flowc.passes.pipeline.PIPELINES["default"])
    for name in [*passes, "cnn.flowc"]:  # every dumped IR file parses back to itself
        text = (dump / name).read_text()
        assert print_graph(parse(text, name)) == text

    # one ONNX node, by its model name: index -> kernel -> MLIR location -> assembly label
    node, kernel = next((n["node"], n["kernel"]) for n in index["nodes"]
                        if n["node"] == "pool1/MaxPool")
    assert node in next(k["nodes"] for k in manifest["kernels"] if k["symbol"] == kernel)
    assert f'loc("{node}"' in (dump / f"{kernel}.input.mlir").read_text()
    assert re.search(rf"^{kernel}:", (dump / "kernels.s").read_text(), re.M)
    assert f"| `{node}` | `{kernel}` |" in (dump / "index.md").read_text()
