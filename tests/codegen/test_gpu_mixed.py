"""Mixed CPU+GPU artifacts without a GPU: a graph placed on cpu:0 and gpu:0 compiles to ONE
artifact (CPU partitions as native code, the GPU partition as PTX/cubins and a step table)
whose send/recv pairs between the two are asynchronous copies on the partition's CUDA
stream. The runtime runs it through the fake libcuda (gpu_fake_cuda.c) in its *lazy*
mode, where copies and launches only happen when the stream is synchronized or an event
recorded after them is waited on, with the GPU stages compiled for the host
(gpu_emulate.py): outputs match the interpreter (the tolerance table's "composite": whole
models, and the GPU stages' summation order differs from numpy's), the driver calls come in
the right order with the channels' sizes, and failures name the partition (and the nodes or
channel)."""

from __future__ import annotations

import faulthandler
import json
import subprocess
import sys

import numpy as np
import pytest
from gpu_emulate import emulation_library, fake_driver
from test_multidevice_artifact import placed_model

import flowc
from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.interpret import interpret
from flowc.runtime.errors import RuntimeStatusError
from flowc.runtime.loader import load
from flowc.testing.tolerance import assert_close


@pytest.fixture(autouse=True)
def no_hang():
    """A deadlocked run would stall the whole suite: after 10 minutes, dump every thread's
    stack and exit (a failure to read, not a silent stall)."""
    faulthandler.dump_traceback_later(600, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("mixed")


@pytest.fixture(scope="module")
def driver(work):
    return fake_driver(work)


_BUILT: dict = {}


def mixed_artifact(work, key, model, **kw):
    """(artifact dir, manifest, emulation library) of `model` compiled on cpu:0,gpu:0 (or
    `devices`)."""
    if key not in _BUILT:
        out, dump = work / key, work / f"{key}.dump"
        kw.setdefault("devices", "cpu:0,gpu:0")
        manifest = flowc.compile(model, out, dump_dir=dump, **kw)
        lib_dir = work / f"{key}.emu"
        lib_dir.mkdir()
        _BUILT[key] = out, manifest, emulation_library(dump, lib_dir)
    return _BUILT[key]


def use(monkeypatch, driver, kernels, trace=None, **env):
    monkeypatch.setenv("FLOWC_CUDA_LIBRARY", str(driver))
    monkeypatch.setenv("FAKE_CUDA_KERNELS", str(kernels))
    monkeypatch.setenv("FAKE_CUDA_LAZY", "1")
    if trace is not None:
        trace.unlink(missing_ok=True)
        monkeypatch.setenv("FAKE_CUDA_TRACE", str(trace))
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))


def alternate(graph: Graph, batch: int = 2) -> list[str]:
    """`--place` pins putting every other compute node on gpu:0, the rest on cpu:0 (the
    nodes the passes before placement leave)."""
    from flowc.codegen.plan.bind import bind_dims
    from flowc.passes import PassManager, parse_pipeline

    graph = bind_dims(graph, batch, None, strict=False)[0]
    graph = PassManager(parse_pipeline("cse,constant-fold,simplify,cse,prune")).run(graph)
    nodes = [n for n in graph.nodes if n.op != "constant" and n.name]
    return [f"{n.name}={'gpu:0' if i % 2 else 'cpu:0'}" for i, n in enumerate(nodes)]


@pytest.fixture(scope="module")
def mlp_mixed(work):
    """The zoo MLP with fc2's gemm on gpu:0: cpu:0 -> gpu:0 -> cpu:0."""
    return mixed_artifact(work, "mlp", zoo.mlp(), batch=2, place=["fc2/Gemm=gpu:0"])


def test_mixed_artifact_has_cpu_and_gpu_partitions(mlp_mixed, work):
    out, manifest, _ = mlp_mixed
    assert [p["device"] for p in manifest["partitions"]] == ["cpu:0", "gpu:0"]
    assert manifest["target"]["gpu_devices"] == ["gpu:0"]
    assert manifest["target"]["gpu_archs"] == ["sm_80", "sm_90"]
    model_c = (work / "mlp.dump" / "mlp_model.c").read_text()
    assert "static const flowc_gpu_program gpu_partition" in model_c
    assert '{"gpu:0", ' in model_c and "0, &gpu_partition}" in model_c
    assert "{FLOWC_GPU_RECV, 0, {FLOWC_GPU_ARENA, 0u}}" in model_c
    # the CPU object defines the CPU partitions' kernels only; the gemm is PTX
    symbols = subprocess.run(["nm", "-g", str(out / "libmlp.a")], capture_output=True,
                             text=True, check=True).stdout
    defined = {line.split()[-1] for line in symbols.splitlines() if " T " in line}
    assert {"mlp_k0", "mlp_k2"} <= defined and "mlp_k1" not in defined
    assert (work / "mlp.dump" / "gpu.kernels.sm_80.ptx").read_text().count(".entry mlp_k1_s")


def test_mixed_mlp_matches_interpreter_and_copies_in_order(mlp_mixed, driver, monkeypatch,
                                                           work):
    out, manifest, kernels = mlp_mixed
    trace = work / "mlp.trace"
    use(monkeypatch, driver, kernels, trace)
    model = load(out)
    created = trace.read_text().split("\n")[:5]  # own input/output buffers page-locked
    assert created[0] == f"pin {2 * 64 * 4 + 128}"  # x: 512 bytes; probs: 80, rounded to 64
    assert created[1].startswith("htod ") and created[2] == "sync"  # the weights span
    feeds = zoo.sample_input(zoo.mlp(), batch=2)
    want = interpret(import_onnx(zoo.mlp()), feeds)
    sends = {s["key"]: s["bytes"] for p in manifest["partitions"] for s in p["sends"]}
    to_gpu, to_cpu = sends["cpu:0;fc1/Relu:0;gpu:0"], sends["gpu:0;fc2/Gemm:0;cpu:0"]
    assert (to_gpu, to_cpu) == (2 * 128 * 4, 2 * 10 * 4)
    # create makes the rendezvous (a run allocates nothing): its GPU channels page-locked
    assert created[3:] == [f"pin {to_gpu}", f"pin {to_cpu}"]
    for _ in range(2):  # the second run reuses the channels, events and device memory
        trace.unlink()
        got = model.run(**feeds)
        assert_close(got["probs"], want["probs"], "composite")
        calls = trace.read_text().split("\n")[:-1]
        # the GPU partition: the received relu in, the gemm's stages, its result out, the
        # event recorded; the host recv waits on that event; the stream synchronized last
        # event 1 is the channel's; 2 and 3 (timing) bracket the partition's steps
        launches = [c for c in calls if c.startswith("launch mlp_k1_s")]
        assert calls[:2] == ["record 2", f"htod {to_gpu}"]
        assert calls[2:2 + len(launches)] == launches
        after = calls[2 + len(launches):]
        assert after[:2] == [f"dtoh {to_cpu}", "record 1"]  # the host waits after these
        assert "wait 1" in after[2:]
        assert [c for c in after[2:] if c != "wait 1"] == ["record 3", "sync"]
        assert 0 <= model.last_device_ms() < 1e3


def test_mixed_zoo_models_with_alternating_devices_match_interpreter(work, driver,
                                                                     monkeypatch):
    """Every other node of each zoo model on the GPU: many transfers both ways, graph inputs
    read and outputs written by both partitions; two threads per CPU partition."""
    for name in sorted(zoo.MODELS):
        model = zoo.MODELS[name]()
        graph = import_onnx(model)
        out, manifest, kernels = mixed_artifact(work, f"zoo_{name}", model, batch=2,
                                                place=alternate(graph))
        assert len(manifest["partitions"]) == 2, name
        use(monkeypatch, driver, kernels)
        feeds = zoo.sample_input(model, batch=2)
        want = interpret(graph, feeds)
        got = load(out, threads=2).run(**feeds)  # CPU partitions get pools, the GPU one not
        for key, value in want.items():
            assert_close(got[key], value, "composite", err_msg=f"{name} {key}")


@pytest.mark.parametrize("devices", [("gpu:0", "cpu:0"), ("cpu:0", "gpu:0", "cpu:1")])
def test_control_edges_and_partition_orders(work, driver, monkeypatch, devices):
    """The multi-device test model: on gpu:0 + cpu:0 the GPU partition comes first (it runs
    on the caller's thread) and a control edge crosses from the GPU to the CPU (a 0-byte
    channel whose event the CPU still waits on); on cpu:0 + gpu:0 + cpu:1 the GPU partition
    runs beside two CPU ones, and a control edge goes the other way. Each side computes an
    output."""
    graph = placed_model(devices)
    key = "ctrl" if len(devices) == 2 else "three"
    out, manifest, kernels = mixed_artifact(work, key, graph, devices=",".join(devices))
    assert [p["device"] for p in manifest["partitions"]] == list(devices)
    assert any(s["bytes"] == 0 for p in manifest["partitions"] for s in p["sends"])
    use(monkeypatch, driver, kernels)
    x = {"x": np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)}
    got, want = load(out).run(**x), interpret(graph, x)
    for key, value in want.items():
        assert_close(got[key], value, "composite", err_msg=key)


def test_weights_in_a_side_file(work, driver, monkeypatch):
    """weights="file": the GPU partition uploads its span of the mapped side file."""
    out, _, kernels = mixed_artifact(work, "mlp_file", zoo.mlp(), batch=2,
                                     place=["fc2/Gemm=gpu:0"], weights="file")
    assert (out / "mlp.weights").is_file()
    use(monkeypatch, driver, kernels)
    feeds = zoo.sample_input(zoo.mlp(), batch=2)
    assert_close(load(out).run(**feeds)["probs"],
                 interpret(import_onnx(zoo.mlp()), feeds)["probs"], "composite")


def test_no_driver_names_the_partition(mlp_mixed, monkeypatch):
    monkeypatch.setenv("FLOWC_CUDA_LIBRARY", "libflowc-no-such-cuda.so.1")
    with pytest.raises(RuntimeStatusError, match=r"mlp: partition gpu:0: no CUDA driver "
                                                 r"\(cannot load libflowc-no-such-cuda"):
        load(mlp_mixed[0])


@pytest.mark.parametrize("env, message", [
    ({"FAKE_CUDA_DEVICES": 0}, "mlp: partition gpu:0: no CUDA device"),
    ({"FAKE_CUDA_MEM": 1000}, "mlp: partition gpu:0: out of device memory allocating "
                              r"\d+ bytes on sm_80 \[FLOWC_ERR_NOMEM\]"),
    ({"FAKE_CUDA_CC": 75}, "mlp: partition gpu:0: unsupported GPU architecture sm_75: the "
                           "artifact has sm_80, sm_90, ptx sm_80; recompile with --gpu-arch "
                           "sm_75"),
    ({"FLOWC_CUDA_DEVICE": 3}, r"mlp: partition gpu:0: no CUDA device 3 \(1 present\)"),
])
def test_device_failures_name_the_partition(mlp_mixed, driver, monkeypatch, env, message):
    use(monkeypatch, driver, mlp_mixed[2], **env)
    with pytest.raises(RuntimeStatusError, match=message):
        load(mlp_mixed[0])


def test_a_failed_launch_fails_the_run_naming_its_nodes_without_hanging(mlp_mixed, driver,
                                                                        monkeypatch):
    """The CPU partition waits on the GPU's send, which never comes: the failure wakes it."""
    use(monkeypatch, driver, mlp_mixed[2], FAKE_CUDA_FAIL_LAUNCH="mlp_k1_s0")
    model = load(mlp_mixed[0])
    feeds = zoo.sample_input(zoo.mlp(), batch=2)
    with pytest.raises(RuntimeStatusError, match=r"mlp: partition gpu:0: CUDA error 700 "
                                                 r"\(fake driver error\) in launching "
                                                 r"mlp_k1_s0 \(nodes fc2/Gemm\)"):
        model.run(**feeds)
    monkeypatch.delenv("FAKE_CUDA_FAIL_LAUNCH")
    assert_close(model.run(**feeds)["probs"],
                 interpret(import_onnx(zoo.mlp()), feeds)["probs"], "composite")


def matmul_chain(n: int) -> Graph:
    g = Graph("big")
    x = g.add_input("x", TensorType("f32", (n, n)))
    w = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    c = g.append(make_node("constant", [], {"value": w}, name="w")).out()
    h = g.append(make_node("matmul", [x, c], name="mm")).out()
    g.add_output("y", g.append(make_node("relu", [h], name="act")).out())
    return g


def test_the_placer_puts_a_large_matmul_on_the_gpu_and_explains_it(tmp_path):
    reports: list[str] = []
    manifest = flowc.compile(matmul_chain(512), tmp_path / "a", devices="cpu:0,gpu:0",
                             explain_placement=reports.append)
    text = "".join(reports)
    assert "device gpu:0: GFLOP/s default 67000" in text
    assert "mm (matmul) -> gpu:0 [cost]" in text
    assert manifest["target"]["gpu_archs"] == ["sm_80", "sm_90"]  # all on the GPU


def test_cli_mixed_compile_with_a_place_pin(tmp_path):
    model = tmp_path / "mlp.onnx"
    model.write_bytes(zoo.mlp().SerializeToString())
    run = subprocess.run([sys.executable, "-m", "flowc", "compile", str(model), "-o",
                          str(tmp_path / "art"), "--devices", "cpu:0,gpu:0", "--place",
                          "fc1/Relu=gpu:0", "--gpu-arch", "sm_90", "--batch", "2",
                          "--explain-placement"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "fc1/Relu (relu) -> gpu:0 [constraint]" in run.stdout
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert manifest["target"]["gpu_archs"] == ["sm_90"]
    assert [p["device"] for p in manifest["partitions"]] == ["cpu:0", "gpu:0"]
    shown = subprocess.run([sys.executable, "-m", "flowc", "inspect", str(tmp_path / "art")],
                           capture_output=True, text=True, check=True).stdout
    assert "gpu: gpu:0; archs sm_90; cubins " in shown


def test_target_nvptx_with_a_split_graph_is_refused(tmp_path):
    with pytest.raises(FlowcError, match="--target nvptx puts the whole graph on the GPU, but "
                                         "this graph is split over devices"):
        flowc.compile(zoo.mlp(), tmp_path / "a", target="nvptx", batch=2,
                      devices="cpu:0,gpu:0", place=["fc2/Gemm=gpu:0"])


def test_gpu_archs_without_a_gpu_node_is_refused(tmp_path):
    with pytest.raises(FlowcError, match=r"gpu_archs \['sm_90'\] given for the CPU target .* "
                                         "and no node on a GPU"):
        flowc.compile(zoo.mlp(), tmp_path / "a", batch=2, gpu_archs=["sm_90"])


def test_c_program_under_thread_sanitizer(work, driver, monkeypatch, tmp_path):
    """The multi-device test's C program (4 contexts on 4 threads, 10 runs each) on the
    gpu:0 + cpu:0 artifact, the runtime and model file built with -fsanitize=thread, the
    fake driver lazy: same outputs on every thread as the interpreter's, no report."""
    from test_multidevice_artifact import (
        RUNTIME_DIR,
        RUNTIME_SOURCES,
        build_c_main,
        run_c_main,
        tsan_works,
    )

    if not tsan_works(tmp_path):
        pytest.skip("cc cannot build -fsanitize=thread programs here")
    graph = placed_model(("gpu:0", "cpu:0"))
    out, _, kernels = mixed_artifact(work, "ctrl", graph, devices="gpu:0,cpu:0")
    use(monkeypatch, driver, kernels)
    objects = ["mdev_kernels.o", "mdev_weights.o"]
    subprocess.run(["ar", "x", str(out / "libmdev.a"), *objects], cwd=tmp_path, check=True)
    runtime = [str(RUNTIME_DIR / src) for src in RUNTIME_SOURCES]
    build_c_main(out, tmp_path, "-g", "-fsanitize=thread", "-DFLOWC_PREFIX=mdev_",
                 f"-I{RUNTIME_DIR}", "-ldl", sources=(str(work / "ctrl.dump" / "mdev_model.c"),
                                                      *runtime, *objects))
    run_c_main(tmp_path, graph)


def test_a_graph_wholly_on_gpu0_builds_the_gpu_artifact(tmp_path, driver, monkeypatch):
    """Every node on gpu:0 (here by the text form's `@gpu:0`) with the default target: no
    partition, so the artifact is the --target nvptx one, and it runs."""
    src = tmp_path / "g.flowc"
    src.write_text('graph @g(%x: f32[4]) -> (y: f32[4]) {\n'
                   '  %0 = neg %x : (f32[4]) -> f32[4] @gpu:0 loc("n")\n'
                   '  return %0\n}\n')
    manifest = flowc.compile(src, tmp_path / "a", dump_dir=tmp_path / "dump")
    assert manifest["target"]["name"] == "nvptx" and manifest["partitions"] == []
    lib_dir = tmp_path / "emu"
    lib_dir.mkdir()
    use(monkeypatch, driver, emulation_library(tmp_path / "dump", lib_dir))
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(load(tmp_path / "a").run(x=x)["y"], -x)


@pytest.mark.parametrize(("matmul", "mma"), [("tensor-cores", True), ("cuda-cores", False)])
def test_gpu_matmul_reaches_the_gpu_partition(tmp_path, matmul, mma):
    """--gpu-matmul goes to a mixed artifact's GPU partition: a bf16 matmul pinned to gpu:0
    gets the tensor-core stage by default, the CUDA-core one with cuda-cores."""
    g = Graph("half")
    a = g.add_input("a", TensorType("bf16", (128, 64)))
    b = g.add_input("b", TensorType("bf16", (64, 128)))
    h = g.append(make_node("matmul", [a, b], name="mm")).out()
    g.add_output("y", g.append(make_node("relu", [h], name="act")).out())
    flowc.compile(g, tmp_path / "a", devices="cpu:0,gpu:0", place=["mm=gpu:0", "act=cpu:0"],
                  gpu_matmul=matmul, dump_dir=tmp_path / "d", cache=False)
    (stages,) = (tmp_path / "d").glob("gpu.*.stages.mlir")
    assert ("nvvm.mma.sync" in stages.read_text()) == mma
