"""`flowc launch --measure PROFILE.json` (issue [16]): the ranks' ping-pongs price the network
link between their tasks in a device profile (merged into an existing one: its other entries
kept, a link between the same tasks replaced) under each MPI found; the placer's cost model
reads it (`--explain-placement` prices the transfers between tasks with it); bad command
lines are one-line errors before any MPI runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from mpi_installs import SKIP_REASON, environment, installs

from flowc.cli import main

TASKS = "/job:worker/task:0", "/job:worker/task:1"
GRAPH = """graph @mp(%x: f32[64,256]) -> (y: f32[64,256]) {
  %0 = tanh %x : (f32[64,256]) -> f32[64,256] loc("t")
  %1 = sigmoid %0 : (f32[64,256]) -> f32[64,256] loc("s")
  return %1
}
"""


def measure(python: str, n: int, profile, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "flowc", "launch", "-n", str(n), "--job-timeout",
                           "120", "--measure", str(profile)], capture_output=True, text=True,
                          env=environment(**extra), timeout=180, check=False)


@pytest.mark.skipif(not installs(), reason=SKIP_REASON)
@pytest.mark.parametrize("install", [pytest.param(i, id=i[0]) for i in installs()])
def test_measure_fills_the_link_the_placer_prices_transfers_with(install, tmp_path):
    profile = tmp_path / "devices.json"
    kept = {"between": ["cpu", "gpu"], "bandwidth": 5e10}
    profile.write_text(json.dumps({"devices": {"cpu": {"launch_latency": 2e-6}}, "links": [
        {"between": list(reversed(TASKS)), "bandwidth": 1, "latency": 1}, kept]}))
    done = measure(install[1], 2, profile)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"link {TASKS[0]} <-> {TASKS[1]}: latency " in done.stdout
    data = json.loads(profile.read_text())
    assert data["devices"] == {"cpu": {"launch_latency": 2e-6}}
    (link,) = [x for x in data["links"] if x != kept]
    assert link["between"] == list(TASKS) and kept in data["links"]
    assert 0 < link["latency"] < 0.1 and 1e7 < link["bandwidth"] < 1e13  # not the old 1, 1
    # the placer reads it: t's 64 KiB to task 1 costs latency + bytes / bandwidth
    (tmp_path / "g.flowc").write_text(GRAPH)
    place = (f"place{{devices={TASKS[0]}/cpu:0;{TASKS[1]}/cpu:0,profiles={profile},"
             f"place=s={TASKS[1]}/cpu:0}}")
    out = subprocess.run([sys.executable, "-m", "flowc", "opt", str(tmp_path / "g.flowc"), "-p",
                          place, "--explain-placement"], capture_output=True, text=True,
                         env=environment(), timeout=120, check=True).stderr
    estimate = (link["latency"] + 65536 / link["bandwidth"]) * 1e6
    assert (f"  t: {TASKS[0]}/cpu:0 -> {TASKS[1]}/cpu:0, 65536 bytes, {estimate:.3f} us "
            "(network)") in out, out
    assert (f"between tasks {TASKS[0]} and {TASKS[1]}: 1 transfers, 65536 bytes, "
            f"{estimate:.3f} us estimated") in out


@pytest.mark.skipif(not installs(), reason=SKIP_REASON)
def test_three_ranks_give_three_links(tmp_path):
    profile = tmp_path / "devices.json"
    done = measure(installs()[0][1], 3, profile)
    assert done.returncode == 0, done.stderr[-3000:]
    pairs = [x["between"] for x in json.loads(profile.read_text())["links"]]
    assert pairs == [[f"/job:worker/task:{a}", f"/job:worker/task:{b}"]
                     for a, b in ((0, 1), (0, 2), (1, 2))]


@pytest.mark.parametrize("argv, message", [
    (["-n", "2", "--measure", "{p}", "some_dir"], "--measure runs its own ping-pong between "
     "the ranks; give no DIR or PROGRAM.py (found 'some_dir')"),
    (["-n", "1", "--measure", "{p}"], "--measure prices the links between ranks: give -n 2 "
     "or more"),
    (["-n", "2", "--measure", "{bad}"], "--measure {bad}: not a readable JSON device profile"),
    (["-n", "2", "--measure", "{list}"], "--measure {list}: a device profile is a JSON object "
     "whose 'links' is a list"),
    (["-n", "2"], "give an artifact DIR or a PROGRAM.py to run (or --measure PROFILE.json)"),
])
def test_bad_measure_command_lines_are_one_line_errors(argv, message, tmp_path, capsys):
    paths = {"p": str(tmp_path / "p.json"), "bad": str(tmp_path / "bad.json"),
             "list": str(tmp_path / "list.json")}
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text('{"links": {}}')
    assert main(["launch", *(a.format(**paths) for a in argv)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.format(**paths) in err, err
    assert not (tmp_path / "p.json").exists()
