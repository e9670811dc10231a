"""Every user-facing error of placement: device lists, profile files, constraints, the CLI."""

import json

import pytest

from flowc.cli import main
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.passes import parse_pipeline
from flowc.passes.place import Place


def small_graph() -> Graph:
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (4,)))
    g.add_output("y", g.append(make_node("relu", [x], name="r")).out())
    return g


def place_error(**options) -> str:
    with pytest.raises(FlowcError) as info:
        Place(**options).run(small_graph())
    return str(info.value)


@pytest.mark.parametrize(("devices", "message"), [
    ("gpu", "place: devices: 'gpu' is a partial device name; list devices by full name, "
            "like cpu:0 or gpu:1"),
    ("cpu:0;cpu:0", "place: devices: device 'cpu:0' is listed twice"),
    ("tpu:0", "place: devices: device 'tpu:0': 'tpu:0' is not job:NAME, task:N, cpu:N or "
              "gpu:N"),
    (";", "place: devices: no devices listed (expected e.g. cpu:0;gpu:0)"),
])
def test_device_lists(devices, message):
    assert place_error(devices=devices) == message


@pytest.mark.parametrize(("content", "message"), [
    ("{", "not valid JSON: Expecting property name enclosed in double quotes at line 1 "
          "column 2"),
    ("[]", "expected a JSON object with 'devices' and/or 'links'"),
    ('{"device": {}}', "unknown key 'device' (known: devices, links)"),
    ('{"devices": {"gpu": {"flop": 1}}}', "devices.gpu: unknown key 'flop' (known: flops, "
                                          "memory_bandwidth, memory_bytes, launch_latency)"),
    ('{"devices": {"gpu": {"memory_bandwidth": -1}}}',
     "devices.gpu.memory_bandwidth: expected a positive number, found -1"),
    ('{"devices": {"gpu": {"flops": {"f32": "fast"}}}}',
     'devices.gpu.flops.f32: expected a positive number, found "fast"'),
    ('{"devices": {"gpu": {"flops": []}}}',
     'devices.gpu.flops: expected an object of flop/s by dtype, like {"f32": 1.9e11}'),
    ('{"devices": {"npu": {}}}', "devices.npu: device 'npu': 'npu' is not job:NAME, task:N, "
                                 "cpu:N or gpu:N"),
    ('{"devices": {"gpu": 3}}', "devices.gpu: expected an object with flops, "
                                "memory_bandwidth, memory_bytes, launch_latency"),
    ('{"links": {}}', "links: expected a list of"),
    ('{"links": [{"between": ["cpu"]}]}',
     'links[0].between: expected two device names, like ["cpu:0", "gpu:0"]'),
    ('{"links": [{"between": ["cpu", "gpu"], "speed": 1}]}',
     "links[0]: unknown key 'speed' (known: between, bandwidth, latency)"),
    ('{"links": [{"between": ["cpu", "gpu"], "latency": true}]}',
     "links[0].latency: expected a positive number, found true"),
])
def test_profile_files_name_the_file_and_key(tmp_path, content, message):
    path = tmp_path / "devices.json"
    path.write_text(content)
    text = place_error(devices="cpu:0;gpu:0", profiles=str(path))
    assert text.startswith(f"{path}: {message}")


def test_missing_profile_file(tmp_path):
    path = tmp_path / "nope.json"
    assert place_error(devices="cpu:0", profiles=str(path)) == (
        f"cannot read device profiles '{path}': No such file or directory")


def test_a_profile_file_overrides_the_builtin_figures(tmp_path):
    path = tmp_path / "devices.json"
    path.write_text(json.dumps({"devices": {"gpu": {"memory_bytes": 8e10},
                                            "gpu:1": {"flops": {"f32": 1e13}}}}))
    reports = []
    Place(devices="cpu:0;gpu:0;gpu:1", profiles=str(path), explain=reports.append).run(
        small_graph())
    by_name = reports[0].cluster.by_name
    assert by_name["gpu:0"].profile.memory_bytes == 8e10
    assert by_name["gpu:1"].profile.memory_bytes == 8e10
    assert by_name["gpu:1"].profile.rate("f32") == 1e13
    assert by_name["gpu:0"].profile.rate("f32") == 6.7e13
    assert by_name["gpu:1"].profile.rate("f16") == 9.89e14


@pytest.mark.parametrize(("options", "message"), [
    ({"place": "r"}, "place: 'r' must look like NODE=DEVICE (e.g. fc1=gpu:0)"),
    ({"place": "r=npu:0"}, "place r=npu:0: device 'npu:0': 'npu:0' is not job:NAME, task:N, "
                           "cpu:N or gpu:N"),
    ({"place": "relu=cpu:0"}, "cannot place graph @g on cpu:0, gpu:0: --place relu=cpu:0: "
                              "no node named 'relu' in @g (passes before placement may have "
                              "merged or removed it: --dump-dir shows the graph placed)"),
    ({"place": "rr=cpu:0"}, "cannot place graph @g on cpu:0, gpu:0: --place rr=cpu:0: "
                           "no node named 'rr' in @g (passes before placement may have "
                           "merged or removed it: --dump-dir shows the graph placed; "
                           "close: r)"),
    ({"place": "r=gpu:3"}, "cannot place graph @g on cpu:0, gpu:0: 'r' (relu): gpu:3 "
                           "(--place r=gpu:3) matches no device of the compile"),
    ({"available": "tpu=add"}, "place: available 'tpu=add' must look like TYPE=OP|OP with "
                               "TYPE cpu or gpu (e.g. gpu=matmul|relu)"),
    ({"available": "cpu=add;gpu=add"},
     "cannot place graph @g on cpu:0, gpu:0: 'r' (relu): no device is left (cpu:0: "
     "availability: no cpu kernel for relu; gpu:0: availability: no gpu kernel for relu)"),
])
def test_constraint_errors(options, message):
    assert place_error(devices="cpu:0;gpu:0", **options) == message


def test_driver_only_fields_are_not_pipeline_options():
    with pytest.raises(FlowcError, match="pass 'place' has no option 'supports'"):
        parse_pipeline("place{supports=x}")


def test_cli_compile_errors(tmp_path, capsys):
    src = tmp_path / "g.flowc"
    src.write_text("graph @g(%x: f32[4]) -> (y: f32[4]) {\n"
                   "  %0 = relu %x : (f32[4]) -> f32[4] loc(\"r\")\n  return %0\n}\n")
    assert main(["compile", str(src), "-o", str(tmp_path / "a"), "--place", "r=gpu:0"]) == 1
    assert capsys.readouterr().err.strip() == (
        "flowc: error: placement constraints and device profiles need devices to place on "
        "(--devices cpu:0,gpu:0)")
    assert main(["compile", str(src), "-o", str(tmp_path / "a"), "--devices", "cpu:0,gpu:0",
                 "--place", "r=gpu:1"]) == 1
    err = capsys.readouterr().err
    assert "cannot place graph @g on cpu:0, gpu:0: 'r' (relu): gpu:1 (--place r=gpu:1) " \
           "matches no device of the compile" in err


def test_cli_compile_explains_and_dumps(tmp_path, capsys):
    src = tmp_path / "g.flowc"
    src.write_text("graph @g(%x: f32[4]) -> (y: f32[4]) {\n"
                   "  %0 = relu %x : (f32[4]) -> f32[4] loc(\"r\")\n  return %0\n}\n")
    dump = tmp_path / "dump"
    assert main(["compile", str(src), "-o", str(tmp_path / "a"), "--devices", "cpu:0,gpu:0",
                 "--explain-placement", "--dump-dir", str(dump)]) == 0
    out = capsys.readouterr().out
    assert "r (relu) -> cpu:0 [cost]\n" in out  # 4 elements: the launch and copies lose
    assert "    gpu:0: start " in out
    assert (dump / "placement.txt").read_text() in out
    assert "@cpu:0" in (dump / "g.flowc").read_text()


FUSED = ("graph @g(%x: f32[4]) -> (y: f32[4]) {\n"
         "  %0 = relu %x : (f32[4]) -> f32[4] loc(fused[\"bn0/BatchNormalization\", "
         "\"conv0/Conv\"])\n  %1 = neg %0 : (f32[4]) -> f32[4] loc(\"n\")\n  return %1\n}\n")


def test_a_source_node_merged_into_another_is_placed_by_its_name(tmp_path, capsys):
    """`--place conv0/Conv=...` names the Conv folded into its BatchNorm: the fused node."""
    src = tmp_path / "g.flowc"
    src.write_text(FUSED)
    assert main(["opt", str(src), "-p", "place{devices=cpu:0;cpu:1,place=conv0/Conv=cpu:1}"]) == 0
    assert "f32[4] @cpu:1 loc(fused[" in capsys.readouterr().out


def test_a_placement_error_is_one_line_without_an_unrelated_ir_window(tmp_path, capsys):
    src = tmp_path / "g.flowc"
    src.write_text(FUSED)
    assert main(["opt", str(src), "-p", "place{devices=cpu:0;cpu:1,place=conv0/Conv=gpu:3;"
                 "nope=cpu:0}"]) == 1
    err = capsys.readouterr().err
    assert err == ("flowc: error: pass 'place' (after: none) on graph @g failed: cannot place "
                   "graph @g on cpu:0, cpu:1: 2 problems: (1) --place nope=cpu:0: no node named "
                   "'nope' in @g (passes before placement may have merged or removed it: "
                   "--dump-dir shows the graph placed) (2) 'bn0/BatchNormalization' (relu): "
                   "gpu:3 (--place conv0/Conv=gpu:3) matches no device of the compile\n")


def test_a_binary_profile_file_is_not_json(tmp_path):
    path = tmp_path / "devices.json"
    path.write_bytes(b"\xff\xfe\x00")
    assert place_error(devices="cpu:0", profiles=str(path)) == (
        f"{path}: not valid JSON: not UTF-8 text (invalid start byte at byte 0)")


@pytest.mark.parametrize(("options", "message"), [
    (["--devices", "cpu:0,tpu:0"], "--devices: device 'tpu:0': 'tpu:0' is not job:NAME, "
                                   "task:N, cpu:N or gpu:N"),
    (["--devices", "cpu:0", "--place", "r"], "--place: 'r' must look like NODE=DEVICE (e.g. "
                                             "fc1=gpu:0)"),
])
def test_cli_compile_checks_placement_options_before_the_passes(tmp_path, capsys, options,
                                                                 message):
    src = tmp_path / "g.flowc"
    src.write_text(FUSED)
    assert main(["compile", str(src), "-o", str(tmp_path / "a"), *options]) == 1
    assert capsys.readouterr().err == f"flowc: error: {message}\n"
