"""The CPU-only multi-partition path: a graph placed on two (and three) logical CPU devices
with the API's `device(...)` compiles to ONE artifact whose partitions run on their own
threads and exchange tensors through the runtime's send/recv rendezvous; results match the
interpreter (loader, and a C program linking libNAME.a, one context per thread); the
manifest and header state each device's arena; lossy_bf16 transfers; clear errors. The
model's cpu:0 waits for a value cpu:1 computes from one cpu:0 sent, so running the
partitions one after the other would hang: the runs show they run concurrently.
Tolerances: flowc.testing.tolerance, whole graphs ("composite"); bf16 transfers: one bf16
rounding carried through the graph (bf16 "transcendental", 16 ulp of bf16)."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import threading

import ml_dtypes
import numpy as np
import pytest

import flowc
from flowc.codegen.emit.link import RUNTIME_DIR, RUNTIME_SOURCES
from flowc.codegen.plan.program import build_program
from flowc.frontend import api
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close

CHANNEL = {"tensor_name": "a:0", "send_device": "cpu:0", "recv_device": "cpu:1"}


def placed_model(devices=("cpu:0", "cpu:1", "cpu:2")):
    """x -> matmul on A -> tanh/relu on B (both read one recv) -> sub back on A; a neg on C
    (when given) reads the same matmul result; a control edge from A to B."""
    a, b = devices[0], devices[1]
    with api.Graph("mdev") as g:
        x = api.placeholder("f32", (4, 16), name="x")
        w = api.constant(np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32),
                         name="w")
        with api.device(a):
            h = api.matmul(x, w)
            first = api.exp(x)
        with api.device(b), api.control_dependencies([first]):
            t = api.tanh(h)
            r = api.relu(h)
            m = t * r
        with api.device(a):
            y = api.sub(m, h)
        g.output("y", y)
        g.output("first", first)
        if len(devices) > 2:
            with api.device(devices[2]):
                g.output("z", api.neg(h) + x[:, :8])
    return g.ir


def feeds():
    return {"x": np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """(artifact dir, manifest, graph); the generated C is dumped next to it, in dump/."""
    root = tmp_path_factory.mktemp("mdev")
    graph = placed_model()
    out = root / "art"
    return out, flowc.compile(graph, out, dump_dir=root / "dump"), graph


def check(model, graph, x=None, wire=None):
    """`model`'s results match the interpreter's within the `composite` bound; with `wire`
    (bf16 for lossy transfers) both sides are rounded to that dtype first and compared
    within its `transcendental` bound (16 ulp: rounded values go through further ops)."""
    x = x if x is not None else feeds()
    got = model.run(**x)
    want = interpret(graph, x)
    assert set(got) == set(want)
    for name in want:
        if wire is None:
            assert_close(got[name], want[name], "composite", err_msg=name)
        else:
            assert_close(got[name].astype(wire), want[name].astype(wire), "transcendental",
                         err_msg=name)


def test_partitioned_artifact_matches_the_interpreter(artifact):
    out, _manifest, graph = artifact
    with flowc.load(out, threads=2) as model:
        for _ in range(3):  # channels reset between runs
            check(model, graph)


def test_manifest_and_header_state_each_devices_arena(artifact):
    out, manifest, _ = artifact
    parts = manifest["partitions"]
    assert [p["device"] for p in parts] == ["cpu:0", "cpu:1", "cpu:2"]
    regions = manifest["devices"]
    assert set(regions) == {"cpu:0", "cpu:1", "cpu:2"}
    spans = sorted((r["arena_offset"], r["arena_offset"] + r["arena_bytes"])
                   for r in regions.values())
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))  # disjoint regions
    assert spans[-1][1] <= manifest["arena_bytes"]
    sends = {s["key"]: s["bytes"] for p in parts for s in p["sends"]}
    assert sends["cpu:0;MatMul:0;cpu:1"] == 4 * 8 * 4
    assert sends["cpu:0;MatMul:0;cpu:2"] == 4 * 8 * 4
    assert sends["cpu:0;^Exp;cpu:1"] == 0
    assert json.loads((out / "manifest.json").read_text())["partitions"] == parts
    header = (out / "mdev.h").read_text()
    assert "partitioned over 3 devices" in header
    for device, r in regions.items():
        assert f" *   {device}: {r['arena_bytes']} arena bytes at offset " \
               f"{r['arena_offset']}" in header


def test_one_model_runs_from_several_threads(artifact):
    out, _, graph = artifact
    x = feeds()
    want = interpret(graph, x)
    errors: list[BaseException] = []

    def worker():
        try:
            with flowc.load(out, threads=1) as model:
                for _ in range(20):
                    got = model.run(**x)
                    for name in want:
                        assert_close(got[name], want[name], "composite")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_lossy_bf16_transfers(tmp_path):
    graph = placed_model(("cpu:0", "cpu:1"))
    pipeline = "cse,constant-fold,simplify,cse,prune,partition{lossy_bf16=true},fuse"
    flowc.compile(graph, tmp_path, pipeline=pipeline, dump_dir=tmp_path / "dump")
    dumped = (tmp_path / "dump" / "mdev_model.c").read_text()
    assert "mdev_rt_send(rv, 0," in dumped
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    sends = {s["key"]: s["bytes"] for p in manifest["partitions"] for s in p["sends"]}
    assert sends["cpu:0;MatMul:0;cpu:1"] == 4 * 8 * 2  # bf16 on the wire
    with flowc.load(tmp_path) as model:
        check(model, graph, wire=ml_dtypes.bfloat16)


C_MAIN = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mdev.h"

static float x[4 * 16];
static float *results[4][3];

static void *work(void *arg) {
  long k = (long)arg;
  mdev_ctx *ctx;
  if (mdev_create(&ctx)) { fprintf(stderr, "%s\n", mdev_error(ctx)); exit(1); }
  for (int rep = 0; rep < 10; rep++) {
    memcpy(mdev_input(ctx, 0), x, sizeof x);
    if (mdev_run(ctx)) { fprintf(stderr, "%s\n", mdev_error(ctx)); exit(1); }
  }
  for (int j = 0; j < mdev_num_outputs(); j++) {
    results[k][j] = malloc(mdev_output_bytes(j));
    memcpy(results[k][j], mdev_output(ctx, j), mdev_output_bytes(j));
  }
  mdev_destroy(ctx);
  return NULL;
}

int main(int argc, char **argv) {
  FILE *f = fopen(argv[1], "rb");
  if (!f || fread(x, sizeof x, 1, f) != 1) return 2;
  fclose(f);
  pthread_t t[4];
  for (long k = 0; k < 4; k++) pthread_create(&t[k], NULL, work, (void *)k);
  for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
  for (int j = 0; j < mdev_num_outputs(); j++) {
    size_t n = mdev_output_bytes(j) / sizeof(float);
    for (int k = 1; k < 4; k++)
      if (memcmp(results[0][j], results[k][j], n * sizeof(float))) return 3;
    printf("output %s\n", mdev_output_name(j));
    for (size_t i = 0; i < n; i++) printf("%.9g\n", results[0][j][i]);
  }
  return 0;
}
"""


def build_c_main(out, tmp_path, *flags: str, sources: tuple = ()) -> None:
    (tmp_path / "main.c").write_text(C_MAIN)
    subprocess.run(["cc", "-O1", *flags, f"-I{out}", "main.c", *sources, "-lm", "-lpthread",
                    "-o", "main"], cwd=tmp_path, check=True)


def run_c_main(tmp_path, graph) -> None:
    x = feeds()
    x["x"].tofile(tmp_path / "x.bin")
    done = subprocess.run([str(tmp_path / "main"), "x.bin"], cwd=tmp_path, capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got: dict[str, list[float]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("output "):
            current = got.setdefault(line.split()[1], [])
        else:
            current.append(float(line))
    want = interpret(graph, x)
    for name, values in want.items():
        assert_close(np.array(got[name], np.float32).reshape(values.shape), values,
                     "composite", err_msg=name)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")
def test_c_program_runs_all_partitions_per_run_call(artifact, tmp_path):
    out, _, graph = artifact
    build_c_main(out, tmp_path, sources=(str(out / "libmdev.a"),))
    run_c_main(tmp_path, graph)


def tsan_works(tmp_path) -> bool:
    (tmp_path / "t.c").write_text("int main(void) { return 0; }\n")
    done = subprocess.run(["cc", "-fsanitize=thread", "t.c", "-o", "t"], cwd=tmp_path,
                          capture_output=True, check=False)
    return done.returncode == 0 and subprocess.run(
        [str(tmp_path / "t")], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")
def test_runtime_is_race_free_under_thread_sanitizer(artifact, tmp_path):
    """The C program (4 contexts on 4 threads, each running the 3 partitions 10 times) with
    the runtime and the generated model file built with -fsanitize=thread: no report."""
    if not tsan_works(tmp_path):
        pytest.skip("cc cannot build -fsanitize=thread programs here")
    out, _, graph = artifact
    objects = ["mdev_kernels.o", "mdev_weights.o"]  # compiled code and data, not C
    subprocess.run(["ar", "x", str(out / "libmdev.a"), *objects], cwd=tmp_path, check=True)
    runtime = [str(RUNTIME_DIR / src) for src in RUNTIME_SOURCES]
    model_c = str(out.parent / "dump" / "mdev_model.c")
    build_c_main(out, tmp_path, "-g", "-fsanitize=thread", "-DFLOWC_PREFIX=mdev_",
                 f"-I{RUNTIME_DIR}", sources=(model_c, *runtime, *objects))
    run_c_main(tmp_path, graph)


def test_two_gpu_devices_are_a_clear_error(tmp_path):
    """(cpu:0 + gpu:0 mixed artifacts: tests/codegen/test_gpu_mixed.py.)"""
    graph = placed_model(("gpu:0", "gpu:1"))
    with pytest.raises(FlowcError, match=r"nodes .* on gpu:0 and .* on gpu:1: an artifact "
                                         "runs on one GPU device so far"):
        flowc.compile(graph, tmp_path)


def test_an_unpartitioned_cross_device_edge_is_refused():
    g = Graph("bad")
    x = g.add_input("x", TensorType("f32", (4,)))
    a = g.append(make_node("neg", [x], device="cpu:0", name="a"))
    g.append(make_node("send", [a.out()], CHANNEL, device="cpu:0", name="s"))
    r = g.append(make_node("recv", [], {**CHANNEL, "type": a.types[0]}, device="cpu:1"))
    b = g.append(make_node("exp", [a.out()], device="cpu:1", name="b"))
    g.add_output("y", g.append(make_node("add", [b.out(), r.out()], device="cpu:1")).out())
    with pytest.raises(FlowcError, match=r"node 'b' \(exp\) on cpu:1 uses 'a' \(neg\) on cpu:0 "
                                         "without a send/recv: run the partition pass"):
        build_program(g, "bad")


def pingpong(send_first: bool) -> Graph:
    """cpu:0 sends e to cpu:1 and receives m back; with send_first=False cpu:0 waits for m
    before sending e, which cpu:1 needs to compute m."""
    g = Graph("pp")
    x = g.add_input("x", TensorType("f32", (4,)))
    e = make_node("exp", [x], device="cpu:0", name="e")
    e_key = {"tensor_name": "e:0", "send_device": "cpu:0", "recv_device": "cpu:1"}
    m_key = {"tensor_name": "m:0", "send_device": "cpu:1", "recv_device": "cpu:0"}
    send_e = make_node("send", [e.out()], e_key, device="cpu:0", name="send_e")
    recv_m = make_node("recv", [], {**m_key, "type": e.types[0]}, device="cpu:0", name="recv_m")
    out = make_node("add", [recv_m.out(), e.out()], device="cpu:0", name="s")
    recv_e = make_node("recv", [], {**e_key, "type": e.types[0]}, device="cpu:1", name="recv_e")
    m = make_node("mul", [recv_e.out(), x], device="cpu:1", name="m")
    send_m = make_node("send", [m.out()], m_key, device="cpu:1", name="send_m")
    first = [send_e, recv_m] if send_first else [recv_m, send_e]
    for node in [e, *first, out, recv_e, m, send_m]:
        g.append(node)
    g.add_output("y", out.out())
    return g


def test_a_step_order_that_would_deadlock_is_refused():
    assert build_program(pingpong(send_first=True), "pp").regions
    with pytest.raises(FlowcError, match=r"the per-device step order would deadlock: "
                                         r"'recv_m' \(recv\), 'recv_e' \(recv\) would wait "
                                         "for a send that cannot run first"):
        build_program(pingpong(send_first=False), "pp")


def test_a_recv_without_its_send_is_refused():
    g = pingpong(send_first=True)
    g.nodes = [n for n in g.nodes if n.name != "send_m"]
    with pytest.raises(FlowcError, match=r"node 'recv_m' \(recv\): no send matches this recv "
                                         r"\(key cpu:1;m:0;cpu:0\)"):
        build_program(g, "pp")


def test_cli_compile_reports_two_gpu_devices(tmp_path):
    src = tmp_path / "g.flowc"
    src.write_text('graph @g(%x: f32[4]) -> (y: f32[4]) {\n'
                   '  %0 = neg %x : (f32[4]) -> f32[4] @gpu:0 loc("n")\n'
                   '  %1 = exp %0 : (f32[4]) -> f32[4] @gpu:1 loc("e")\n'
                   '  return %1\n}\n')
    done = subprocess.run([sys.executable, "-m", "flowc", "compile", str(src), "-o",
                           str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith("flowc: error: nodes 'n' (neg) on gpu:0 and 'e' (exp) on "
                                  "gpu:1: an artifact runs on one GPU device so far")


def test_a_graph_input_and_output_cross_devices(tmp_path):
    """A placed input sent to cpu:1 (a send straight from the caller's buffer) and an output
    computed on cpu:1 and also used on cpu:0."""
    g = Graph("io")
    g.add_input("x", TensorType("f32", (3, 5)))
    g.inputs[0] = g.inputs[0].replace(device="cpu:0")
    x = g.inputs[0].out()
    a = g.append(make_node("tanh", [x], device="cpu:1", name="a"))
    b = g.append(make_node("mul", [a.out(), x], device="cpu:0", name="b"))
    g.add_output("a", a.out())
    g.add_output("b", b.out())
    g.add_output("a_again", a.out())
    flowc.compile(g, tmp_path)
    x = {"x": np.random.default_rng(3).standard_normal((3, 5)).astype(np.float32)}
    with flowc.load(tmp_path) as model:
        check(model, g, x=x)


def test_inspect_lists_partitions_and_their_channels(artifact, capsys):
    from flowc.cli import main

    out, _, _ = artifact
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "partition 0 cpu:0: sends cpu:0;MatMul:0;cpu:1 (128 bytes), " in text
    assert "cpu:0;^Exp;cpu:1 (0 bytes)" in text
    assert "partition 1 cpu:1: sends cpu:1;Mul:0;cpu:0 (128 bytes)" in text
    assert "partition 2 cpu:2: sends none" in text


def test_placer_partitions_and_runs_the_zoo_mlp(tmp_path):
    """`flowc.compile(devices=..., place=...)`: the placer puts fc1/Relu on cpu:1 as told
    and fc2/Gemm next to it (its operand is there); partition inserts the two transfers;
    the artifact matches the interpreter."""
    from flowc.codegen.plan.bind import bind_dims
    from flowc.examples import zoo
    from flowc.frontend.onnx import import_onnx

    model = zoo.mlp()
    manifest = flowc.compile(model, tmp_path, batch=2, devices="cpu:0,cpu:1",
                             place=["fc1/Relu=cpu:1"])
    sends = [s["key"] for p in manifest["partitions"] for s in p["sends"]]
    assert "cpu:0;fc1/Add:0;cpu:1" in sends and len(sends) == 2
    graph, _ = bind_dims(import_onnx(model), 2, None, strict=False)
    x = {graph.inputs[0].name: np.random.default_rng(5).standard_normal(
        graph.inputs[0].types[0].shape).astype(np.float32)}
    with flowc.load(tmp_path) as artifact:
        check(artifact, graph, x=x)
