"""The ONNX importer's error messages: each names the file (`<model>` for a proto), the
node and its op, and says what was expected and found."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from flowc.frontend import Graph, api, placeholder
from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.frontend.partial import partial_graph
from flowc.ir import FlowcError, InterpretError

F = TensorProto.FLOAT


def vi(name, elem=F, shape=(3,)):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, initializers=(), functions=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    imports = [helper.make_opsetid("", 18)] + [helper.make_opsetid(f.domain, 1)
                                               for f in functions]
    return helper.make_model(graph, opset_imports=imports, functions=list(functions))


def raises(m, pattern):
    with pytest.raises(OnnxImportError, match=pattern):
        import_onnx(m)


def test_string_input():
    raises(model([helper.make_node("Identity", ["s"], ["y"])], [vi("s", TensorProto.STRING)],
                 [vi("y", TensorProto.STRING)]),
           "<model>: input 's' has element type STRING, which flowc does not support")


def test_sequence_input():
    seq = helper.make_tensor_sequence_value_info("s", F, None)
    raises(model([helper.make_node("Identity", ["s"], ["y"])], [seq], [vi("y")]),
           r"<model>: input 's' is of kind sequence_type, not a tensor \(flowc imports "
           r"tensors only\)")


def test_constant_with_a_sparse_value():
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.ones(1, np.float32)),
                                       numpy_helper.from_array(np.zeros(1, np.int64)), [3])
    node = helper.make_node("Constant", [], ["y"], sparse_value=sparse, name="c")
    raises(model([node], [], [vi("y")]),
           "node 'c' \\(Constant\\): attribute 'sparse_value' is of kind SPARSE_TENSOR, which "
           "flowc does not import")


def test_constant_with_a_string_value():
    node = helper.make_node("Constant", [], ["y"], value_string="hi", name="c")
    raises(model([node], [], [vi("y")]),
           r"node 'c' \(Constant\): attribute 'value_string' is not imported \(value, "
           r"value_float\(s\), value_int\(s\) are\)")


def test_more_outputs_than_flowc_computes():
    node = helper.make_node("Relu", ["x"], ["y", "extra"], name="r")
    raises(model([node], [vi("x")], [vi("y")]),
           r"node 'r' \(Relu\): flowc computes 1 of its 2 outputs")


def test_input_not_produced():
    raises(model([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [vi("x")],
                 [vi("y")]),
           r"node 'r' \(Relu\): input 'ghost' is not produced by any node")


def test_output_not_produced():
    raises(model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x")], [vi("z")]),
           "<model>: graph output 'z' is not produced")


def test_folded_shape_arithmetic_error_names_the_node():
    node = helper.make_node("Gather", ["d", "i"], ["y"], name="g")
    inits = [numpy_helper.from_array(np.arange(3, dtype=np.int64), "d"),
             numpy_helper.from_array(np.array([7], np.int64), "i")]
    raises(model([node], [], [vi("y", TensorProto.INT64, (1,))], inits),
           r"node 'g' \(Gather\): .*index 7 is out of range \[-3, 2\] for axis 0 of size 3")


def test_function_body_missing_an_output():
    fn = helper.make_function("my.ops", "Broken", ["a"], ["b", "c"],
                              [helper.make_node("Relu", ["a"], ["b"])],
                              [helper.make_opsetid("", 18)])
    node = helper.make_node("Broken", ["x"], ["y", "z"], domain="my.ops", name="br")
    raises(model([node], [vi("x")], [vi("y"), vi("z")], functions=[fn]),
           r"node 'br' \(Broken\): its function body does not produce 'c'")


def test_unsupported_op_inside_a_function_body():
    fn = helper.make_function("my.ops", "Odd", ["a"], ["b"],
                              [helper.make_node("ImageDecoder", ["a"], ["b"], name="dec")],
                              [helper.make_opsetid("", 18)])
    node = helper.make_node("Odd", ["x"], ["y"], domain="my.ops", name="odd")
    raises(model([node], [vi("x", shape=(2, 2))], [vi("y", shape=())], functions=[fn]),
           r"1 node\(s\) use ops flowc does not support:\n  node 'odd/dec': ai.onnx.ImageDecoder")


def test_reshape_to_a_shape_of_unknown_length():
    with Graph():
        x = placeholder("f32", (6,), name="x")
        s = placeholder("i64", ("K",), name="s")
        with pytest.raises(FlowcError, match=r"\(reshape\) at .*: shape i64\[K\] has no "
                           "static length: the result's rank would depend on run-time values"):
            api.reshape(x, s)


def test_feeding_a_node_without_results():
    with Graph() as g:
        x = placeholder("f32", (2,), name="x")
        v = api.Variable(np.zeros(2, np.float32), name="v")
        a = v.assign(x)
    with pytest.raises(InterpretError, match=r"cannot feed '.*': node .* has no results"):
        partial_graph(g.ir, [a.node.name], [])
