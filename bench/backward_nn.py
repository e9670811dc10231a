"""The backward ops of issue [10]'s nn rules against torch's, at one thread: each case a
flowc artifact of `gradients(...)` of one forward node (seeded inputs, the cotangent an
input), checked against torch's backward, best of --repeats calls after one warm call.

Cases: a resnet 3x3 conv's dX+dW (stride 1 and 2), max_pool 3x3/2 (resnet stem),
average_pool 3x3/2, a BERT embedding's dW (scatter_add), layer norm and training batch
norm and softmax (compositions of reductions and elementwise ops; torch's time for these
three includes its forward, as flowc's backward recomputes the statistics). Writes
bench/results/backward_nn.md and prints it. About a minute.

    .venv/bin/python bench/backward_nn.py [--repeats 5] [--output PATH]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import flowc
from flowc.ir import Graph, TensorType
from flowc.ir.autodiff import gradients
from flowc.ir.build import make_node

RNG = np.random.default_rng(0)
F = torch.nn.functional


def f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv(n, c, m, h, s):
    o = (h - 1) // s + 1
    x, w, dy = f(n, c, h, h), f(m, c, 3, 3) * 0.1, f(n, m, o, o)

    def ref(tx, tw, tdy):
        return torch.ops.aten.convolution_backward(tdy, tx, tw, None, [s, s], [1, 1], [1, 1],
                                                   False, [0, 0], 1, [True, True, False])[:2]

    return ("conv", [x, w], {"pads": [1, 1, 1, 1], "strides": [s, s]}, dy, [0, 1], ref)


def max_pool():
    x, dy = f(8, 64, 112, 112), f(8, 64, 56, 56)

    def ref(tx, tdy):
        _, ind = F.max_pool2d(tx, 3, 2, 1, return_indices=True)
        return [torch.ops.aten.max_pool2d_with_indices_backward(tdy, tx, [3, 3], [2, 2], [1, 1],
                                                                [1, 1], False, ind)]

    return ("max_pool", [x], {"kernel_shape": [3, 3], "strides": [2, 2],
                              "pads": [1, 1, 1, 1]}, dy, [0], ref)


def average_pool():
    x, dy = f(8, 64, 112, 112), f(8, 64, 56, 56)

    def ref(tx, tdy):
        return [torch.ops.aten.avg_pool2d_backward(tdy, tx, [3, 3], [2, 2], [1, 1], False,
                                                   True, None)]

    return ("average_pool", [x], {"kernel_shape": [3, 3], "strides": [2, 2],
                                  "pads": [1, 1, 1, 1], "count_include_pad": 1}, dy, [0], ref)


def embedding():
    w, idx, dy = f(30522, 768), RNG.integers(0, 30522, (64, 128)), f(64, 128, 768)

    def ref(tw, tidx, tdy):
        return [torch.ops.aten.embedding_dense_backward(tdy, tidx, tw.shape[0], -1, False)]

    return ("gather", [w, idx], {}, dy, [0], ref)


def autograd_case(op, arrays, attrs, fwd, wrt):
    dy = f(*arrays[0].shape)

    def ref(*tensors):
        *ins, tdy = tensors
        ins = [t.detach().clone().requires_grad_(i in wrt) for i, t in enumerate(ins)]
        return torch.autograd.grad(fwd(*ins), [ins[i] for i in wrt], tdy)

    return (op, arrays, attrs, dy, wrt, ref)


CASES = {
    "conv 3x3 8x64x56x56 -> 64, stride 1 (dX+dW)": lambda: conv(8, 64, 64, 56, 1),
    "conv 3x3 8x64x56x56 -> 128, stride 2 (dX+dW)": lambda: conv(8, 64, 128, 56, 2),
    "max_pool 3x3/2 8x64x112x112": max_pool,
    "average_pool 3x3/2 8x64x112x112": average_pool,
    "embedding 30522x768, 64x128 indices (dW)": embedding,
    "layer_normalization 8192x768 (dX, dScale, dB)": lambda: autograd_case(
        "layer_normalization", [f(8192, 768), f(768), f(768)], {},
        lambda x, s, b: F.layer_norm(x, (768,), s, b), [0, 1, 2]),
    "batch_normalization training 8x64x56x56 (dX, dScale, dB)": lambda: autograd_case(
        "batch_normalization", [f(8, 64, 56, 56), f(64), f(64), f(64), np.ones(64, np.float32)],
        {"training_mode": 1},
        lambda x, s, b, m, v: F.batch_norm(x, m, v, s, b, training=True), [0, 1, 2]),
    "softmax 12288x128": lambda: autograd_case("softmax", [f(12288, 128)], {},
                                               lambda x: torch.softmax(x, -1), [0]),
}


def best_ms(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def run_case(build, repeats, work: Path):
    op, arrays, attrs, dy, wrt, ref = build()
    g = Graph("bwd")
    ins = [g.add_input(f"x{i}", TensorType(str(a.dtype).replace("float", "f").replace(
        "int", "i"), a.shape)) for i, a in enumerate(arrays)]
    node = g.append(make_node(op, ins, attrs))
    dyv = g.add_input("dy", TensorType("f32", dy.shape))
    for i, grad in zip(wrt, gradients(g, [node.out()], [ins[i] for i in wrt], [dyv]),
                       strict=True):
        g.add_output(f"d{i}", grad)
    flowc.compile(g, work)
    feeds = {f"x{i}": a for i, a in enumerate(arrays)} | {"dy": dy}
    with flowc.load(work, threads=1) as model:
        got = model(**feeds)
        ours = best_ms(lambda: model(**feeds), repeats)
    tensors = [torch.from_numpy(a) for a in (*arrays, dy)]
    want = ref(*tensors)
    got = got if isinstance(got, tuple) else (got,)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b.numpy(), rtol=2e-3, atol=2e-2)
    return ours, best_ms(lambda: ref(*tensors), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" /
                                                "backward_nn.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    lines = ["# backward_nn: flowc's nn backward ops vs torch, one thread", "",
             f"{platform.processor() or platform.machine()}, torch {torch.__version__}, best "
             f"of {args.repeats} calls after a warm one; outputs checked against torch.", "",
             "| case | flowc ms | torch ms | flowc/torch |", "| --- | ---: | ---: | ---: |"]
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, build) in enumerate(CASES.items()):
            ours, theirs = run_case(build, args.repeats, Path(tmp) / f"case{k}")
            lines.append(f"| {name} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    Path(args.output).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
