"""ONNX LSTM and GRU compiled (issue [11]): the per-step work of the loop an RNN imports as.

- each step reads its row of the input projection through a pointer (a row view,
  plan/control_steps.py), no gather kernel, and stores no iteration number nothing
  reads; the gate chain is fused inside the body (passes/fuse.py); the whole thing
  matches onnxruntime;
- at batch 1, the step's gate slices are views at byte offsets of the one gemm result
  (no split kernel) and the hidden state is written once per step, into its row of Y: the
  carried value is read through a pointer moved to that row (no copy in the loop);
- a loop whose trip count is an input and that has a scan output (its rows would be the
  trip count) is refused at compile time, so no run can write past the scan buffer;
  through the compiled session (the ONNX backend), the trip count is folded and each value
  gets an artifact of its own.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from control_models import loop_model
from onnx import TensorProto, helper, numpy_helper

import flowc
from flowc.ir.errors import FlowcError
from flowc.testing.engines import run_onnxruntime
from flowc.testing.tolerance import assert_close

SEQ, BATCH, SIZE = 6, 4, 16


def rnn_model(op: str, batch: int = BATCH) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    gates = {"LSTM": 4, "GRU": 3}[op]
    inits = [numpy_helper.from_array(rng.uniform(-0.3, 0.3, shape).astype(np.float32), name)
             for name, shape in (("W", (1, gates * SIZE, SIZE)), ("R", (1, gates * SIZE, SIZE)),
                                 ("B", (1, 2 * gates * SIZE)))]
    node = helper.make_node(op, ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=SIZE)
    graph = helper.make_graph(
        [node], "rnn", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                      (SEQ, batch, SIZE))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h")],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_rnn_step_reads_its_row_in_place_and_fuses_its_gates(op, tmp_path):
    model = rnn_model(op)
    flowc.compile(model, tmp_path / "m", name="m", dump_dir=tmp_path / "dump", profile=True)
    x = np.random.default_rng(1).standard_normal((SEQ, BATCH, SIZE)).astype(np.float32)
    with flowc.load(tmp_path / "m") as art:
        got = art.run(X=x)
        per_step = len(art.profiler.last)
    for g, want in zip(got.values(), run_onnxruntime(model, {"X": x}), strict=True):
        assert_close(g, want, "matmul", n=2 * SIZE, scale=SEQ)
    entry = (tmp_path / "dump" / "m_model.c").read_text()
    row = BATCH * {"LSTM": 4, "GRU": 3}[op] * SIZE * 4  # bytes of one step's projection
    assert re.search(rf"\(char \*\)\(arena \+ \d+\) \+ it1 \* {row}", entry), entry
    body = (tmp_path / "dump" / "m.flowc").read_text().split("loop ", 1)[1]
    assert "gather" not in entry and "= gather" in body  # in the body, but no kernel
    assert "= it1;" not in entry  # nothing reads the iteration slot: no store into it
    assert body.count("= fused") >= 1
    # the projection before the loop, then a handful of kernels per step (the gate chain
    # in few kernels: 9 body nodes and more otherwise)
    assert (per_step - 1) % SEQ == 0 and (per_step - 1) // SEQ <= 5, per_step


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_rnn_step_at_batch_1_slices_its_gates_and_writes_y_once(op, tmp_path):
    model = rnn_model(op, batch=1)
    flowc.compile(model, tmp_path / "m", name="m", dump_dir=tmp_path / "dump", profile=True)
    x = np.random.default_rng(2).standard_normal((SEQ, 1, SIZE)).astype(np.float32)
    with flowc.load(tmp_path / "m") as art:
        got = art.run(X=x)
        per_step = (len(art.profiler.last) - 1) // SEQ
    for g, want in zip(got.values(), run_onnxruntime(model, {"X": x}), strict=True):
        assert_close(g, want, "matmul", n=2 * SIZE, scale=SEQ)
    entry = (tmp_path / "dump" / "m_model.c").read_text()
    loop = entry[entry.index("for (int64_t it1"):entry.index("memcpy(out[0]")]
    assert "memcpy" not in loop.split("\n    }\n")[0], loop  # nothing copied per step
    assert re.search(r"c1_0 = \(char \*\)\(arena \+ \d+\) \+ it1 \* 64;", loop), loop
    assert re.search(r"\(char \*\)\(arena \+ \d+\) \+ (64|128)\b", loop), loop  # a gate
    body = (tmp_path / "dump" / "m.flowc").read_text().split("loop ", 1)[1]
    assert "= split" in body and "split" not in loop  # in the body, but no kernel
    assert per_step == 3, per_step  # the gemm(s) and the gate kernels


def test_trip_count_input_with_a_scan_output_is_refused_at_compile(tmp_path):
    model = loop_model(heavy=True, trips=None, scan=True)
    with pytest.raises(FlowcError, match=r"node 'Loop_0' \(loop\).* result #1 is f32\[\?,1,8\].*"
                                         r"depends on the value of input\(s\) 'M'"):
        flowc.compile(model, tmp_path / "m", name="m")


def test_trip_count_input_with_a_scan_output_compiles_per_value():
    from flowc.onnx_backend import FlowcBackend

    model = loop_model(heavy=True, trips=None, scan=True)
    rep = FlowcBackend.prepare(model, "CPU")
    h0 = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    for trips in (2, 5, 3):
        want = run_onnxruntime(model, {"h0": h0, "M": np.array(trips, np.int64)})
        got = rep.run([h0, np.array(trips, np.int64)])
        assert got[1].shape == (trips, 1, 8)
        for g, w in zip(got, want, strict=True):
            assert_close(g, w, "matmul", n=8, scale=trips)
