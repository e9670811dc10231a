"""Kernel profiles: `flowc compile --profile`, `flowc run DIR --profile trace.json`,
`flowc profile DIR`, and no profiling symbol or timing call when profiling is off."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import flowc
from flowc.cli import main
from flowc.ir.errors import FlowcError

MLP = Path(__file__).parents[2] / "flowc" / "examples" / "mlp.flowc"


def _symbols(art: Path) -> str:
    return "".join(subprocess.run(["nm", *flags, str(art / lib)], capture_output=True,
                                  text=True, check=True).stdout
                   for flags, lib in ((["-D"], "libmlp.so"), ([], "libmlp.a")))


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    base = tmp_path_factory.mktemp("prof")
    assert main(["compile", str(MLP), "-o", str(base / "art"), "--batch", "4", "--profile",
                 "--dump-dir", str(base / "dump")]) == 0
    return base


def test_trace_is_trace_event_json_covering_every_run(profiled, capsys):
    trace = profiled / "trace.json"
    assert main(["run", str(profiled / "art"), "--profile", str(trace), "--runs", "3"]) == 0
    assert "(6 events: kernel calls and transfers, 3 runs)" in capsys.readouterr().out
    manifest = json.loads((profiled / "art" / "manifest.json").read_text())
    kernels = {k["symbol"]: k["nodes"] for k in manifest["kernels"]}
    events = json.loads(trace.read_text())["traceEvents"]
    calls = [e for e in events if e["ph"] == "X"]
    for e in events:
        assert {"ph", "pid", "name"} <= set(e) and e["ph"] in ("X", "M")
    for e in calls:
        assert isinstance(e["tid"], int) and e["ts"] >= 0 and e["dur"] >= 0
        assert e["args"]["nodes"] == kernels[e["name"]]
    for run in range(3):  # each run calls every kernel once, in order, without overlap
        mine = [e for e in calls if e["args"]["run"] == run]
        assert [e["name"] for e in mine] == ["mlp_k0", "mlp_k1"]
        assert mine[0]["ts"] + mine[0]["dur"] <= mine[1]["ts"]
    assert calls == sorted(calls, key=lambda e: e["ts"])


def test_profile_prints_top_kernels_with_their_nodes(profiled, capsys):
    assert main(["profile", str(profiled / "art"), "--runs", "5"]) == 0
    out = capsys.readouterr().out
    assert "mlp: 5 runs, 10 kernel calls" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("mlp_k")]
    assert {r[0] for r in rows} == {"mlp_k0", "mlp_k1"}
    assert all(r[1] == "5" for r in rows)
    assert float(rows[0][2]) >= float(rows[1][2])  # most time first
    # the gemm is named by its add and the matmul merged into it (fused locations)
    assert "fc1/add, fc1/matmul, fc1/relu" in out and "fc2/add, fc2/matmul" in out


def test_loader_exposes_events_and_profiling_off_costs_nothing(profiled, tmp_path, capsys):
    import numpy as np

    model = flowc.load(profiled / "art")
    model.run(x=np.ones((4, 16), np.float32))
    assert list(model.profiler.last["kernel"]) == [0, 1] and model.profiler.dropped == 0
    assert (model.profiler.last["end_ns"] >= model.profiler.last["start_ns"]).all()
    assert "mlp_run_profiled" in _symbols(profiled / "art")
    assert "clock_gettime" in (profiled / "dump" / "mlp_model.c").read_text()

    assert main(["compile", str(MLP), "-o", str(tmp_path / "plain"), "--batch", "4",
                 "--dump-dir", str(tmp_path / "dump")]) == 0
    assert "prof" not in _symbols(tmp_path / "plain")
    assert "prof" not in (tmp_path / "dump" / "mlp_model.c").read_text()
    assert flowc.load(tmp_path / "plain").profiler is None
    capsys.readouterr()
    assert main(["profile", str(tmp_path / "plain")]) == 1
    assert "compiled without profiling; recompile it with 'flowc compile --profile'" \
        in capsys.readouterr().err
    assert main(["profile", str(profiled / "art"), "--runs", "0"]) == 1
    assert "argument --runs: expected a whole number from 1 to 1000000000, found '0'" \
        in capsys.readouterr().err
    assert main(["profile", str(tmp_path / "none")]) == 1  # one line, no traceback
    assert capsys.readouterr().err == (f"flowc: error: {tmp_path / 'none'}: no such artifact "
                                       "directory\n")


def test_partitioned_profile_has_a_track_per_partition_and_transfer_events(tmp_path, capsys):
    art = tmp_path / "art"
    flowc.compile(MLP, art, batch=4, devices="cpu:0,cpu:1", place=["fc2/add=cpu:1"],
                  profile=True)
    manifest = json.loads((art / "manifest.json").read_text())
    [part0, part1] = manifest["partitions"]
    trace = tmp_path / "trace.json"
    assert main(["run", str(art), "--profile", str(trace), "--runs", "3"]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {1: f"partition 0 ({part0['device']})",
                     2: f"partition 1 ({part1['device']})"}
    calls = [e for e in events if e["ph"] == "X"]
    kernels = {k["symbol"] for k in manifest["kernels"]}
    keys = [s["key"] for p in manifest["partitions"] for s in p["sends"]]
    assert keys  # the placement moves a tensor between the devices
    for run in range(3):
        mine = [e for e in calls if e["args"]["run"] == run]
        assert sorted(e["name"] for e in mine if e["cat"] == "kernel") == sorted(kernels)
        transfers = {e["name"] for e in mine if e["cat"] == "transfer"}
        assert transfers == {f"{op} {key}" for key in keys for op in ("send", "recv")}
        for key in keys:  # a send on its device's track, its recv on the other, later
            send = next(e for e in mine if e["name"] == f"send {key}")
            recv = next(e for e in mine if e["name"] == f"recv {key}")
            assert send["tid"] == 1 + [part0, part1].index(
                next(p for p in (part0, part1) if p["device"] == key.split(";")[0]))
            assert recv["tid"] != send["tid"]
            assert recv["ts"] + recv["dur"] >= send["ts"]
    assert {e["tid"] for e in calls} == {1, 2}
    _two_contexts_at_once(art, len(kernels) + 2 * len(keys))
    assert main(["profile", str(art), "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert f"send {keys[0]}" in out and f"recv {keys[0]}" in out


def _two_contexts_at_once(art: Path, per_run: int) -> None:
    """Profiled runs of two contexts on two threads: each run records exactly its own
    events (the partitions' threads of the other context record nothing into it)."""
    import threading

    import numpy as np

    counts: list[list[int]] = [[], []]

    def worker(i: int) -> None:
        model = flowc.load(art)
        for _ in range(15):
            model.run(x=np.ones((4, 16), np.float32))
            counts[i].append(len(model.profiler.last))
        model.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts == [[per_run] * 15] * 2


def test_profile_of_a_gpu_model_is_refused(tmp_path):
    with pytest.raises(FlowcError, match=r"--profile times kernels of CPU models only; this "
                                         r"one runs \(wholly or in part\) on a GPU"):
        flowc.compile(MLP, tmp_path / "art", batch=4, target="nvptx", profile=True)


def test_profile_of_an_artifact_with_dims_given_at_run_time(tmp_path, capsys):
    """A dynamic artifact ([12]) runs through the kernel timer too: `flowc profile` times
    it at the dims' upper bounds, and a profiled run of another size returns its shape."""
    art = tmp_path / "dyn"
    assert main(["compile", str(MLP), "-o", str(art), "--dim", "N=1..16", "--profile"]) == 0
    capsys.readouterr()
    kernels = len(json.loads((art / "manifest.json").read_text())["kernels"])
    assert main(["profile", str(art), "--runs", "3"]) == 0
    assert f"mlp: 3 runs, {3 * kernels} kernel calls" in capsys.readouterr().out
    model = flowc.load(art)
    assert model.run(np.ones((5, 16), np.float32))["y"].shape == (5, 8)
    assert len(model.profiler.last) == kernels
