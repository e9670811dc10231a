"""ONNX sequences and optionals resolved at import (frontend/onnx_sequence.py): ops the node
tests do not cover against onnxruntime on both engines, re-import per fed structure, and
the one-line errors where a sequence's structure is known only at run time."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

from flowc.frontend.onnx import OnnxImportError
from flowc.onnx_backend import FlowcBackend

F = TensorProto.FLOAT
SEQ = helper.make_tensor_sequence_value_info


def model(nodes, inputs, outputs):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def ort(m, feeds):
    session = onnxruntime.InferenceSession(m.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("device", ["CPU", "CPU:interpret"])
@pytest.mark.parametrize("new_axis", [0, 1])
def test_split_erase_concat_match_onnxruntime(device, new_axis):
    nodes = [helper.make_node("SplitToSequence", ["x", "s"], ["q"], axis=1),
             helper.make_node("SequenceErase", ["q", "at"], ["r"]),
             helper.make_node("SequenceLength", ["r"], ["n"]),
             helper.make_node("ConcatFromSequence", ["r"], ["y"], axis=-1, new_axis=new_axis)]
    m = model(nodes, [helper.make_tensor_value_info("x", F, [2, 6]),
                      helper.make_tensor_value_info("s", TensorProto.INT64, ["k"]),
                      helper.make_tensor_value_info("at", TensorProto.INT64, [])],
              [helper.make_tensor_value_info("y", F, None),
               helper.make_tensor_value_info("n", TensorProto.INT64, None)])
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    rep = FlowcBackend.prepare(m, device)
    for split, at in (([2, 2, 2], -1), ([3, 3], 0)):  # a new structure: a new import
        feeds = {"x": x, "s": np.array(split), "at": np.array(at)}
        for got, want in zip(rep.run(feeds), ort(m, feeds), strict=True):
            np.testing.assert_array_equal(got, want)


def test_sequence_outputs_and_empty_optionals_come_back_as_fed():
    nodes = [helper.make_node("SequenceInsert", ["q", "x"], ["r"]),
             helper.make_node("OptionalHasElement", ["o"], ["has"])]
    opt = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(F, [2])))
    m = model(nodes, [SEQ("q", F, None), helper.make_tensor_value_info("x", F, [2]), opt],
              [SEQ("r", F, None), helper.make_tensor_value_info("has", TensorProto.BOOL, [])])
    rep = FlowcBackend.prepare(m)
    x = np.ones(2, np.float32)
    r, has = rep.run([[x * 2, x * 3], x, None])
    assert [a.tolist() for a in r] == [[2, 2], [3, 3], [1, 1]] and not has
    r, has = rep.run([[], x, x])
    assert [a.tolist() for a in r] == [[1, 1]] and has


def _error(nodes, inputs, outputs, feeds):
    with pytest.raises(OnnxImportError) as info:
        FlowcBackend.prepare(model(nodes, inputs, outputs), "CPU:interpret").run(feeds)
    return str(info.value)


def test_a_position_known_only_at_run_time_is_refused():
    nodes = [helper.make_node("Cast", ["p"], ["at"], to=TensorProto.INT64),
             helper.make_node("SequenceAt", ["q", "at"], ["y"], name="pick")]
    message = _error(nodes, [SEQ("q", F, None), helper.make_tensor_value_info("p", F, [])],
                     [helper.make_tensor_value_info("y", F, None)],
                     [[np.ones(2, np.float32)], np.array(0, np.float32)])
    assert "node 'pick' (SequenceAt): position must be known at import" in message


def test_a_sequence_reaching_a_tensor_op_is_refused():
    nodes = [helper.make_node("Add", ["q", "q"], ["y"], name="plus")]
    message = _error(nodes, [SEQ("q", F, None)], [helper.make_tensor_value_info("y", F, None)],
                     [[np.ones(2, np.float32)]])
    assert "node 'plus' (Add): an operand is a sequence or optional; Add takes tensors" \
        in message


def test_a_loop_over_sequences_needs_its_trip_count_at_import():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("SequenceInsert", ["s", "x"], ["s_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []), SEQ("s", F, None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), SEQ("s_out", F, None)])
    nodes = [helper.make_node("Cast", ["m"], ["trips"], to=TensorProto.INT64),
             helper.make_node("SequenceEmpty", [], ["e"]),
             helper.make_node("Loop", ["trips", "", "e"], ["r"], name="grow", body=body)]
    message = _error(nodes, [helper.make_tensor_value_info("m", F, []),
                             helper.make_tensor_value_info("x", F, [2])],
                     [SEQ("r", F, None)], [np.array(3, np.float32), np.ones(2, np.float32)])
    assert "node 'grow' (Loop): the trip count M (to unroll a loop over sequences) must be " \
        "known at import" in message
