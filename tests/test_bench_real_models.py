"""bench/real_models.py (issue [13]'s real-model table): its architectures have the published
models' sizes, and the bench runs end to end on tiny sizes, writing a row per model with a
one-line error for a model that fails."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the [reference] extra: the architectures are torch modules

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import real_models  # noqa: E402
import real_models_zoo  # noqa: E402

# Parameter counts of torchvision's resnet18/resnet50/mobilenet_v2/efficientnet_b0 and
# timm's vit_tiny_patch16_224 / mixer_s16_224.
PUBLISHED = {"resnet18": 11_689_512, "resnet50": 25_557_032, "mobilenet_v2": 3_504_872,
             "efficientnet_b0": 5_288_548, "vit_ti16": 5_717_416, "mixer_s16": 18_528_264}


def test_architectures_have_the_published_sizes():
    for name, count in PUBLISHED.items():
        module, _ = real_models_zoo.MODELS[name](False)
        assert sum(p.numel() for p in module.parameters()) == count, name


def test_quick_run_writes_rows_and_errors(tmp_path, monkeypatch):
    def broken(quick):
        raise ValueError("no such layer\nsecond line")

    monkeypatch.setitem(real_models_zoo.MODELS, "broken", broken)
    out = tmp_path / "table.md"
    assert real_models.main(["--quick", "--models", "unet,det_head,broken", "--threads", "1",
                             "--rounds", "2", "--runs", "1", "--warm", "1",
                             "--work", str(tmp_path / "w"), "--out", str(out)]) == 0
    text = out.read_text()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()
            if line.startswith("| ") and "---" not in line and "model" not in line}
    assert set(rows) == {"unet", "det_head", "broken"}
    assert "ERROR: export: ValueError: no such layer |" in rows["broken"]
    for name in ("unet", "det_head"):
        cells = [c.strip() for c in rows[name].split("|")[1:-1]]
        assert "MISMATCH" not in cells[2] and float(cells[2]) < 1e-3
        assert float(cells[5].strip("*")) > 0 and float(cells[6]) > 0
    assert (tmp_path / "w" / "unet.flowc").is_dir()
