"""bench/kernels_common.py's burst timing (bench/perf.py at several threads): settle waits
for the process's other busy threads, bursts run each engine's functions `burst` times per
round in rotated order, and OtherLoad reads a core count."""

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import kernels_common as kc


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_settle_waits_until_other_threads_are_idle():
    worker = threading.Thread(target=_spin, args=(0.3,))
    start = time.perf_counter()
    worker.start()
    # 50 ms slices: on a loaded machine the spinning thread still gets far more than the
    # 10% of a slice that counts as idle (5 ms slices can fall between its time slices)
    slept = kc.settle(0.0, 5.0, slice_s=0.05)
    assert slept >= 0.25 and time.perf_counter() - start >= 0.25
    worker.join()


def test_settle_returns_at_the_cap_and_after_the_minimum():
    assert kc.settle(0.05, 1.0) >= 0.05
    worker = threading.Thread(target=_spin, args=(1.0,))
    worker.start()
    assert kc.settle(0.0, 0.1) < 0.5
    worker.join()


def test_time_bursts_rounds_bursts_and_rotation():
    calls = []
    engines = {e: {f"{e}{k}": (lambda e=e, k=k: calls.append(f"{e}{k}")) for k in range(2)}
               for e in ("a", "b", "c")}
    out = kc.time_bursts(engines, rounds=3, burst=2, warmup=1, settle_min=0.0,
                         settle_max=0.05, ramp_s=0.0)
    assert set(out["times"]) == {"a0", "a1", "b0", "b1", "c0", "c1"}
    assert all(len(r) == 3 and all(len(c) == 2 for c in r) for r in out["times"].values())
    timed = calls[6:]  # after one warm-up call of each function
    firsts = [timed[i * 12] for i in range(3)]  # 3 engines x 2 functions x 2 calls per round
    assert firsts == ["a0", "b0", "c0"]  # each round starts with the next engine
    assert timed[:4] == ["a0", "a0", "a1", "a1"]
    assert len(out["settle_s"]) == 3 + 3 * 3
    # no ramp: the first call after the settle is the burst's first
    assert out["first_s"]["a"] == [r[0] for r in out["times"]["a0"]]


def test_time_bursts_ramp_calls_the_first_function_until_ramp_s():
    calls = []

    def slow(name: str) -> None:
        calls.append(name)
        time.sleep(0.004)

    engines = {"a": {"a0": lambda: slow("a0"), "a1": lambda: slow("a1")}}
    out = kc.time_bursts(engines, rounds=2, burst=1, warmup=0, settle_min=0.0,
                         settle_max=0.05, ramp_s=0.02)
    per_round = len(calls) // 2
    assert per_round >= 2 + 4  # the ramp: 20 ms of 4 ms calls, then a0 and a1 once
    assert calls[:per_round - 2] == ["a0"] * (per_round - 2)
    assert len(out["first_s"]["a"]) == 2 and all(t >= 0.004 for t in out["first_s"]["a"])
    assert [len(r) for r in out["times"]["a1"]] == [1, 1]


def test_other_load_is_a_core_count():
    load = kc.OtherLoad()
    time.sleep(0.05)
    cores = load.cores()
    assert cores is None or 0.0 <= cores <= 64


def test_perf_loader_quick_run_writes_its_table(tmp_path, capsys):
    import perf_loader

    out = tmp_path / "loader.md"
    assert perf_loader.main(["--quick", "--models", "matmul_1024", "--out", str(out)]) == 0
    text = out.read_text()
    assert text in capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.startswith("| matmul_1024 |"))
    assert len(row.split("|")) == 9  # model, 5 variants, other cores
    assert "run, outputs kept" in text and "base loader: `main`" in text


def test_report_names_rows_timed_on_a_busy_machine():
    import perf_report

    rows = [{"model": "mlp", "threads": 1, "other_load_cores": 0.02},
            {"model": "resnet", "threads": 2, "other_load_cores": 0.9},
            {"model": "bert", "threads": 2, "other_load_cores": None}]
    (line,) = perf_report.busy_line(rows)
    assert line.endswith("quiet machine): resnet@2 (0.90)")
    assert perf_report.busy_line(rows[:1]) == []
