"""ONNX's structural rules the importer enforces (issue [19], hostile `structural` cases):
unique input/output/initializer names, one definition per name, attribute references only
inside functions, opsets the installed onnx defines, attribute text that is UTF-8. Each
broken rule is a one-line OnnxImportError naming the file and, where there is one, the
node."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from flowc.frontend.onnx import OnnxImportError, import_onnx

F = TensorProto.FLOAT


def vi(name, shape=(3,)):
    return helper.make_tensor_value_info(name, F, shape)


def model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def refused(m, pattern: str) -> str:
    with pytest.raises(OnnxImportError, match=pattern) as info:
        import_onnx(m)
    assert "\n" not in str(info.value)
    return str(info.value)


RELU = [helper.make_node("Relu", ["x"], ["y"], name="r")]


def test_a_duplicate_graph_input_is_refused():
    # it was imported as a second input renamed x_1
    refused(model(RELU, [vi("x"), vi("x")], [vi("y")]),
            r"^<model>: graph 'g' declares input 'x' 2 times \(ONNX names must be unique\)$")


def test_a_duplicate_graph_output_is_refused():
    refused(model(RELU, [vi("x")], [vi("y"), vi("y")]), "declares output 'y' 2 times")


def test_a_duplicate_initializer_is_refused():
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    refused(model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")],
                  [w, w]), "declares initializer 'w' 2 times")


def test_a_name_defined_twice_is_refused():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"),
             helper.make_node("Neg", ["x"], ["y"], name="b")]
    refused(model(nodes, [vi("x")], [vi("y")]),
            r"^<model>: node 'b' \(Neg\): output 'y' is already defined \(ONNX graphs define "
            r"each name once\)$")


@pytest.mark.parametrize("opset", [18, 6])
def test_an_attribute_reference_outside_a_function_is_refused(opset):
    # it was dropped: the Transpose ran with its default perm; at opset 6 the version
    # converter dropped it before the importer looked (hostile campaign, structural)
    a = helper.make_attribute("perm", [1, 0])
    a.ref_attr_name = "p"
    node = helper.make_node("Transpose", ["x"], ["y"], name="t")
    node.attribute.append(a)
    refused(model([node], [vi("x", (2, 3))], [vi("y", (3, 2))], opset=opset),
            r"^<model>: node 't' \(Transpose\): attribute 'perm' refers to 'p' "
            r"\(ref_attr_name\) outside a function body")


@pytest.mark.parametrize("opset", [99, 10**9])
def test_an_opset_newer_than_onnx_defines_is_refused(opset):
    newest = onnx.defs.onnx_opset_version()
    refused(model(RELU, [vi("x")], [vi("y")], opset=opset),
            rf"^<model>: opset {opset} is newer than {newest}, the newest the installed onnx "
            rf"{onnx.__version__} defines")


def test_the_newest_opset_onnx_defines_imports():
    import_onnx(model(RELU, [vi("x")], [vi("y")], opset=onnx.defs.onnx_opset_version()))


def test_attribute_bytes_that_are_not_utf8_are_refused():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    node.attribute.append(helper.make_attribute("junk", b"\xff\xfe"))
    refused(model([node], [vi("x")], [vi("y")]),
            r"^<model>: node 'r' \(Relu\): attribute 'junk' holds bytes that are not UTF-8 "
            r"text: b'\\xff\\xfe'$")


def test_a_constant_gather_index_past_its_axis_is_refused():
    # hostile sizes:7: it compiled and ran, the index clamped to the last row
    i = numpy_helper.from_array(np.array([0, 2**32], np.int64), "i")
    refused(model([helper.make_node("Gather", ["x", "i"], ["y"], name="g")], [vi("x", (4, 3))],
                  [vi("y", (2, 3))], [i]),
            r"^<model>: node 'g' \(Gather\): .*index 4294967296 is out of range \[-4, 3\] for "
            r"axis 0 of size 4$")


def test_a_name_with_a_line_break_stays_on_one_line():
    # hostile names:74: an output named '$(id)\u2028...' defined twice printed its U+2028
    name = "y\u2028\n#define x 1"
    nodes = [helper.make_node("Relu", ["x"], [name], name="a"),
             helper.make_node("Neg", ["x"], [name], name="b\rc")]
    message = refused(model(nodes, [vi("x")], [vi(name)]), "is already defined")
    assert message.startswith(r"<model>: node 'b\rc' (Neg): output 'y\u2028\n#define x 1' ")
    assert len(message.splitlines()) == 1
