"""The placer on synthetic cost profiles where the right answer is known by hand, its
determinism, colocation, availability injection, memory capacity, and the driver hook.
Its golden cases are tests/golden/place_*.flowc; its errors tests/passes/test_place_errors.py."""

import json

import numpy as np
import pytest

import flowc
from flowc.examples import zoo
from flowc.frontend import api
from flowc.frontend.onnx import import_onnx
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import State, interpret
from flowc.passes import PassManager, parse_pipeline, print_pipeline
from flowc.passes.place import Place, insert_place
from flowc.testing.tolerance import assert_close

# A "cpu" of 1 GFLOP/s and 1 GB/s and a "gpu" 1000x faster, 1 us launches, a 1 GB/s link
# with 100 us latency: numbers that make every estimate easy to check by hand.
PROFILE = {
    "devices": {
        "cpu": {"flops": {"default": 1e9, "f32": 1e9}, "memory_bandwidth": 1e9,
                "launch_latency": 1e-6},
        "gpu": {"flops": {"default": 1e12, "f32": 1e12}, "memory_bandwidth": 1e12,
                "launch_latency": 1e-6},
    },
    "links": [{"between": ["cpu", "gpu"], "bandwidth": 1e9, "latency": 1e-4}],
}


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "devices.json"
    path.write_text(json.dumps(PROFILE))
    return str(path)


def chain(n: int = 256, layers: int = 3) -> Graph:
    g = Graph("chain")
    x = g.add_input("x", TensorType("f32", (n, n)))
    w = g.append(make_node("constant", [], {"value": np.ones((n, n), np.float32)}, name="w"))
    for i in range(layers):
        x = g.append(make_node("matmul", [x, w.out()], name=f"mm{i}")).out()
    s = g.add_input("s", TensorType("f32", (4,)))
    g.add_output("y", x)
    g.add_output("z", g.append(make_node("neg", [s], name="small")).out())
    return g


def run_place(graph: Graph, **options) -> tuple[Graph, object]:
    reports = []
    placed = Place(explain=reports.append, **options).run(graph)
    return placed, reports[0]


def devices(graph: Graph) -> dict[str, str]:
    return {n.name: n.device for n in graph.nodes if n.name}


def test_big_matmul_chain_goes_to_the_fast_device(profile):
    placed, report = run_place(chain(), devices="cpu:0;gpu:0", profiles=profile)
    assert [devices(placed)[f"mm{i}"] for i in range(3)] == ["gpu:0"] * 3
    # mm0 by hand: 2*256^3 flops; on the CPU 33.554 ms (+1 us launch); on the GPU the
    # input x (256 KiB) crosses first: 100 us + 262144 B / 1 GB/s = 362.144 us, then
    # 33.554 us of compute
    first = report.choices[0]
    assert first.node.name == "mm0" and first.why == "cost"
    start, run, _, moved = first.estimates["cpu:0"]
    assert (start, moved) == (0.0, 0) and run == pytest.approx(2 * 256**3 / 1e9 + 1e-6)
    start, run, _, moved = first.estimates["gpu:0"]
    assert start == pytest.approx(1e-4 + 262144 / 1e9) and moved == 262144
    assert run == pytest.approx(2 * 256**3 / 1e12 + 1e-6)


def test_tiny_op_next_to_host_data_stays_on_cpu(profile):
    placed, report = run_place(chain(), devices="cpu:0;gpu:0", profiles=profile)
    assert devices(placed)["small"] == "cpu:0"
    choice = next(c for c in report.choices if c.node.name == "small")
    # on the GPU: 16 bytes in (100.016 us) and out again, for 12 flops saved
    assert choice.estimates["gpu:0"][2] > choice.estimates["cpu:0"][2]
    assert choice.why == "cost"


def test_a_fast_link_moves_the_tiny_op_when_the_cpu_is_busy(tmp_path):
    fast = json.loads(json.dumps(PROFILE))
    fast["links"][0].update(latency=1e-9, bandwidth=1e12)
    path = tmp_path / "fast.json"
    path.write_text(json.dumps(fast))
    g = chain()
    # pin the matmuls to the CPU: it is busy 100 ms, so even the tiny op goes to the GPU
    placed, _ = run_place(g, devices="cpu:0;gpu:0", profiles=str(path),
                          place="mm0=cpu:0;mm1=cpu:0;mm2=cpu:0")
    assert devices(placed)["small"] == "gpu:0"


def test_one_device_takes_everything_and_inputs_and_constants_stay_unplaced():
    placed, report = run_place(chain(), devices="cpu:0")
    assert set(devices(placed).values()) == {"cpu:0", None}
    assert devices(placed)["w"] is None  # constants are copied where they are used
    assert all(c.why == "only device" for c in report.choices)
    assert all(n.device is None for n in placed.inputs)


def test_deterministic_and_ties_go_to_the_first_device():
    g = chain(64)
    a, _ = run_place(g, devices="cpu:0;cpu:1")
    b, _ = run_place(g, devices="cpu:0;cpu:1")
    assert devices(a) == devices(b)
    assert [devices(a)[f"mm{i}"] for i in range(3)] == ["cpu:0"] * 3
    # the tiny op finishes sooner on the idle second CPU than after the chain on the first
    assert devices(a)["small"] == "cpu:1"
    c, _ = run_place(g, devices="cpu:1;cpu:0")
    assert [devices(c)[f"mm{i}"] for i in range(3)] == ["cpu:1"] * 3


def test_injected_availability_keeps_ops_where_kernels_exist(profile):
    placed, report = run_place(chain(), devices="cpu:0;gpu:0", profiles=profile,
                               supports=lambda op, kind: kind == "cpu")
    assert {d for n, d in devices(placed).items() if n != "w"} == {"cpu:0"}
    assert report.choices[0].why == "availability"
    assert report.choices[0].excluded["gpu:0"] == "availability: no gpu kernel for matmul"


def test_memory_capacity_excludes_a_device(tmp_path):
    small = json.loads(json.dumps(PROFILE))
    small["devices"]["gpu"]["memory_bytes"] = 1000
    path = tmp_path / "small.json"
    path.write_text(json.dumps(small))
    placed, report = run_place(chain(), devices="cpu:0;gpu:0", profiles=str(path))
    assert devices(placed)["mm0"] == "cpu:0"
    assert report.choices[0].excluded["gpu:0"].startswith("memory: ")


def test_api_device_context_and_colocation_with_a_variable(profile):
    with api.Graph("state") as g:
        x = api.placeholder("f32", (256, 256), name="x")
        v = api.Variable(np.ones((256, 256), np.float32), name="v")
        with api.device("gpu"):
            r = v.read()
        y = api.matmul(x, r)
        v.assign(y)
        g.output("y", y)
    placed, _ = run_place(g.ir, devices="cpu:0;gpu:0;gpu:1", profiles=profile)
    by_op = {}
    for n in placed.nodes:
        by_op.setdefault(n.op, set()).add(n.device)
    assert by_op["variable"] == by_op["read_variable"] == by_op["assign"] == {"gpu:0"}
    assert by_op["matmul"] == {"gpu:0"}  # big, and its operand is already there
    np.testing.assert_array_equal(interpret(placed, {"x": np.eye(256, dtype=np.float32)})["y"],
                                  np.ones((256, 256), np.float32))


def test_place_names_an_onnx_node():
    graph = import_onnx(zoo.MODELS["mlp"]())
    placed, report = run_place(graph, devices="cpu:0;cpu:1", place="fc1/MatMul=cpu:1")
    assert devices(placed)["fc1/MatMul"] == "cpu:1"
    assert report.device_of("fc1/MatMul") == "cpu:1"
    assert report.choices[0].constraints == ["--place fc1/MatMul=cpu:1"]


def test_no_devices_leaves_the_graph_alone():
    g = chain()
    assert Place().run(g) is g


def test_pipeline_text_never_holds_the_driver_callbacks():
    p = Place(devices="cpu:0;gpu:0", supports=lambda op, kind: True, explain=print)
    assert print_pipeline([p]) == "place{devices=cpu:0;gpu:0}"
    assert print_pipeline(parse_pipeline("place{devices=cpu:0;gpu:0,place=a=gpu:0}")) == \
        "place{devices=cpu:0;gpu:0,place=a=gpu:0}"
    assert print_pipeline(parse_pipeline("place")) == "place"


def test_insert_place_goes_before_partition_and_fuse():
    passes = parse_pipeline("default")
    names = [p.name for p in insert_place(passes, Place(devices="cpu:0"))]
    assert names.index("place") == names.index("partition" if "partition" in names else "fuse") - 1
    assert names.index("place") > names.index("prune")
    replaced = insert_place(parse_pipeline("cse,place,fuse"), Place(devices="gpu:0"))
    assert [p.devices if p.name == "place" else p.name for p in replaced] == [
        "cse", "gpu:0", "fuse"]


def test_fuse_after_place_never_spans_devices(profile):
    g = Graph("mix")
    x = g.add_input("x", TensorType("f32", (256, 256)))
    mm = g.append(make_node("matmul", [x, x], name="mm"))
    r = g.append(make_node("relu", [mm.out()], name="r"))
    g.add_output("y", g.append(make_node("neg", [r.out()], name="n")).out())
    passes = [Place(devices="cpu:0;gpu:0", profiles=profile, place="n=cpu:0"),
              *parse_pipeline("fuse")]
    out = PassManager(passes).run(g)
    for node in out.nodes:
        if node.op == "fused":
            assert {n.device for n in node.attrs["body"].nodes} <= {None}
    assert {n.name: n.device for n in out.nodes}["n"] == "cpu:0"


def test_compile_places_on_two_logical_cpus_and_matches_the_interpreter(tmp_path, capsys):
    """The whole path: --devices and --place through the placer, partition (send/recv),
    codegen and the runtime's partition threads; results equal the interpreter's within
    the tolerance table's `composite` bound (a whole model)."""

    graph = import_onnx(zoo.MODELS["mlp"]())
    reports = []
    flowc.compile(graph, tmp_path / "a", batch=3, devices="cpu:0,cpu:1",
                  place=["fc1/Relu=cpu:1"], explain_placement=reports.append,
                  dump_dir=tmp_path / "dump")
    assert "fc1/Relu (relu) -> cpu:1 [constraint] constrained by --place fc1/Relu=cpu:1" \
        in reports[0]
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert set(manifest["devices"]) == {"cpu:0", "cpu:1"}
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    name = graph.inputs[0].name
    model = flowc.load(tmp_path / "a", threads=1)
    try:
        got = model.run(**{name: x})
    finally:
        model.close()
    want = interpret(graph, {name: x})
    for key, value in want.items():
        assert_close(got[key], value, "composite")


@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_honour_constraints_and_keep_semantics(seed):
    """Random graphs of elementwise ops and matmuls with random partial and full
    constraints: every node lands on a listed device its constraint allows, colocated
    nodes share one, the result computes what the input did, and placing is deterministic."""
    rng = np.random.default_rng(seed)
    specs = [None, None, None, "cpu", "gpu", "cpu:0", "gpu:1"]
    t = TensorType("f32", (8, 8))
    g = Graph(f"random{seed}")
    values = [g.add_input("a", t), g.add_input("b", t)]
    var = g.append(make_node("variable", [], {"type": t, "shared_name": "v"}, name="v"))
    values.append(g.append(make_node("read_variable", [var.out()], name="read")).out())
    for i in range(25):
        op = rng.choice(["relu", "neg", "add", "mul", "matmul", "tanh"])
        args = [values[k] for k in rng.integers(0, len(values), 2 if op in (
            "add", "mul", "matmul") else 1)]
        device = specs[rng.integers(len(specs))]
        values.append(g.append(make_node(str(op), args, name=f"n{i}", device=device)).out())
    g.append(make_node("assign", [var.out(), values[-1]], name="write",
                       ctrl=[values[2].node]))
    g.add_output("y", values[-1])
    g.add_output("z", values[len(values) // 2])
    placed, _ = run_place(g, devices="cpu:0;gpu:0;gpu:1")
    again, _ = run_place(g, devices="cpu:0;gpu:0;gpu:1")
    assert devices(placed) == devices(again)
    for old, new in zip(g.nodes, placed.nodes, strict=True):
        assert new.device in ("cpu:0", "gpu:0", "gpu:1")
        if old.device is not None:
            assert new.device.startswith(old.device)
    assert len({devices(placed)[n] for n in ("v", "read", "write")}) == 1
    feeds = {"a": rng.standard_normal((8, 8)).astype(np.float32),
             "b": rng.standard_normal((8, 8)).astype(np.float32)}

    init = rng.standard_normal((8, 8)).astype(np.float32)
    want = interpret(g, feeds, state=State({"v": init.copy()}))
    got = interpret(placed, feeds, state=State({"v": init.copy()}))
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])
