"""A test-only kernel backend: plain C loops for a handful of f32 ops, compiled with cc.

It keeps the kernel contract of flowc/codegen/README.md (one object defining exactly the
kernel symbols, `void SYM(const T *in..., T *out...)`, inline constants, no other globals),
so the artifact side can be tested without waiting on MLIR. It is not a product backend:
the zoo end-to-end tests use the real one.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flowc.codegen.kernel_code import KernelCode, KernelScratch
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value

UNARY = {"relu": "x > 0.f ? x : 0.f", "neg": "-x", "exp": "expf(x)", "tanh": "tanhf(x)",
         "sigmoid": "1.f / (1.f + expf(-x))", "sqrt": "sqrtf(x)", "abs": "fabsf(x)"}
BINARY = {"add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b",
          "max": "a > b ? a : b", "min": "a < b ? a : b"}
SUPPORTED = {*UNARY, *BINARY, "matmul", "gemm", "packed_matmul", "softmax", "transpose",
             "constant"}


@dataclass(frozen=True)
class HostTarget:
    """The attributes of flowc.codegen.target.Target that the artifact side reads."""

    name: str = "host"
    triple: str = ""
    cpu: str = "generic"
    features: str = ""
    runnable: bool = True


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _index(name: str, shape: tuple[int, ...], out_shape: tuple[int, ...]) -> str:
    """C expression: the element of `name` (broadcast to out_shape) at flat output index i."""
    rank = len(out_shape)
    shape = (1,) * (rank - len(shape)) + tuple(shape)
    terms = []
    for axis, (d, s, os_) in enumerate(zip(shape, _strides(shape), _strides(out_shape),
                                           strict=True)):
        if d != 1:
            terms.append(f"((i / {os_}) % {out_shape[axis]}) * {s}")
    return f"{name}[{' + '.join(terms) or '0'}]"


def _node_c(node: Node, ref: dict[Value, str], out: str) -> list[str]:
    t = node.types[0]
    n = int(np.prod(t.shape, dtype=np.int64))
    ins = [None if v is None else ref[v] for v in node.inputs]
    shapes = [None if v is None else v.type.shape for v in node.inputs]
    if node.op in UNARY:
        return [f"for (long i = 0; i < {n}; i++) {{ float x = {_index(ins[0], shapes[0], t.shape)};"
                f" {out}[i] = {UNARY[node.op]}; }}"]
    if node.op in BINARY:
        a, b = (_index(ins[k], shapes[k], t.shape) for k in (0, 1))
        return [f"for (long i = 0; i < {n}; i++) {{ float a = {a}; float b = {b};"
                f" {out}[i] = {BINARY[node.op]}; }}"]
    if node.op == "transpose":
        perm = node.attrs.get("perm") or tuple(reversed(range(len(shapes[0]))))
        src = _strides(shapes[0])
        terms = " + ".join(f"((i / {s}) % {t.shape[k]}) * {src[perm[k]]}"
                           for k, s in enumerate(_strides(t.shape)))
        return [f"for (long i = 0; i < {n}; i++) {out}[i] = {ins[0]}[{terms or '0'}];"]
    if node.op in ("matmul", "gemm"):
        a, b = shapes[0], shapes[1]
        ta = node.op == "gemm" and node.attrs.get("transA", 0)
        tb = node.op == "gemm" and node.attrs.get("transB", 0)
        m, k = (a[-1], a[-2]) if ta else (a[-2], a[-1])
        cols = b[-2] if tb else b[-1]
        batch = int(np.prod(t.shape[:-2], dtype=np.int64))
        a_step = m * k if len(a) > 2 else 0
        b_step = k * cols if len(b) > 2 else 0
        ai = f"{ins[0]}[bt * {a_step} + " + (f"p * {m} + r]" if ta else f"r * {k} + p]")
        bi = f"{ins[1]}[bt * {b_step} + " + (f"c * {k} + p]" if tb else f"p * {cols} + c]")
        alpha = node.attrs.get("alpha", 1.0) if node.op == "gemm" else 1.0
        bias = ""
        if node.op == "gemm" and len(ins) > 2 and ins[2] is not None:
            beta = node.attrs.get("beta", 1.0)
            bias = f" + {beta!r}f * {_index(ins[2], shapes[2], (m, cols)).replace('i /', 'ij /')}"
        return [f"for (long bt = 0; bt < {batch}; bt++) for (long r = 0; r < {m}; r++) "
                f"for (long c = 0; c < {cols}; c++) {{ float s = 0.f; long ij = r * {cols} + c;"
                f" (void)ij; for (long p = 0; p < {k}; p++) s += {ai} * {bi};"
                f" {out}[bt * {m * cols} + ij] = {alpha!r}f * s{bias}; }}"]
    if node.op == "packed_matmul":  # B as column panels [N / NR, K, NR]
        k, (_, _, nr) = shapes[0][-1], shapes[1]
        rows, cols = n // t.shape[-1], t.shape[-1]
        full = len(ins) > 2 and int(np.prod(shapes[2])) == n  # a C of the result's shape
        start = (f"{ins[2]}[r * {cols} + c]" if full else f"{ins[2]}[c]" if len(ins) > 2
                 else "0.f")  # else a row bias [N]
        return [f"for (long r = 0; r < {rows}; r++) for (long c = 0; c < {cols}; c++) {{"
                f" float s = {start}; for (long p = 0; p < {k}; p++)"
                f" s += {ins[0]}[r * {k} + p]"
                f" * {ins[1]}[(c / {nr}) * {k * nr} + p * {nr} + c % {nr}];"
                f" {out}[r * {cols} + c] = s; }}"]
    if node.op == "softmax":
        axis = node.attrs.get("axis", -1) % len(t.shape)
        inner = int(np.prod(t.shape[axis + 1:], dtype=np.int64))
        size, outer = t.shape[axis], n // (t.shape[axis] * inner)
        x, at = ins[0], f"(o * {size} + j) * {inner} + q"
        return [f"for (long o = 0; o < {outer}; o++) for (long q = 0; q < {inner}; q++) {{"
                f" float mx = -INFINITY, s = 0.f;"
                f" for (long j = 0; j < {size}; j++) mx = fmaxf(mx, {x}[{at}]);"
                f" for (long j = 0; j < {size}; j++) {{ {out}[{at}] = expf({x}[{at}] - mx);"
                f" s += {out}[{at}]; }}"
                f" for (long j = 0; j < {size}; j++) {out}[{at}] /= s; }}"]
    raise FlowcError(f"no naive kernel for {node.label()}")


def kernel_c(symbol: str, body: Graph) -> tuple[str, KernelScratch]:
    """The kernel's C: its temporaries are scratch arguments after the outputs (the kernel
    contract: a kernel never allocates)."""
    ref: dict[Value, str] = {}
    params = []
    for i, node in enumerate(body.inputs):
        ref[node.out()] = f"in{i}"
        params.append(f"const float *restrict in{i}")
    params += [f"float *restrict out{i}" for i in range(len(body.outputs))]
    outputs = {v: f"out{i}" for i, (_, v) in enumerate(body.outputs)}
    lines = []
    temps = []
    for j, node in enumerate(body.nodes):
        v = node.out()
        if node.op == "constant":
            data = np.asarray(node.attrs["value"].data, np.float32).reshape(-1)
            values = ", ".join(f"{float(x)!r}f" for x in data) or "0"
            lines.append(f"  static const float c{j}[] = {{{values}}};")
            ref[v] = f"c{j}"
            continue
        name = outputs.get(v)
        if name is None:
            name = f"t{j}"
            params.append(f"float *restrict {name}")
            temps.append(max(v.type.num_elements, 1) * 4)
        ref[v] = name
        lines += ["  " + s for s in _node_c(node, ref, name)]
    lines = [f"void {symbol}({', '.join(params)}) {{", *lines, "}"]
    return "\n".join(lines), KernelScratch(tuple(temps))


def compile_object(kernels) -> KernelCode:
    """One object file defining every kernel of `kernels` (`(symbol, body)` pairs), by cc,
    and each kernel's scratch."""
    made = {sym: kernel_c(sym, body) for sym, body in kernels}
    source = "#include <math.h>\n\n" + "\n\n".join(c for c, _ in made.values()) + "\n"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.c").write_text(source)
        subprocess.run(["cc", "-O1", "-fPIC", "-c", "k.c", "-o", "k.o"], cwd=tmp, check=True)
        return KernelCode((Path(tmp) / "k.o").read_bytes(),
                            {sym: needs for sym, (_, needs) in made.items()})


class NaiveBackend:
    """The naive kernels as a `flowc.codegen.backend.Backend` for the host CPU."""

    name = "cpu"

    def get_target(self, name: object = "host") -> HostTarget:
        if isinstance(name, HostTarget):
            return name
        if name != "host":
            raise FlowcError(f"the naive test backend compiles for the host only, not {name}")
        triple = subprocess.run(["cc", "-dumpmachine"], capture_output=True, text=True,
                                check=True).stdout.strip()
        return HostTarget(triple=triple)

    def check_supported(self, body: Graph, target: HostTarget) -> None:
        bad = [f"'{n.name}' ({n.op})" for n in body.nodes if n.op not in SUPPORTED]
        bad += [f"'{n.name}' ({n.op}: {t})" for n in body.nodes for t in n.types
                if t.dtype.name != "f32"]
        if bad:
            raise FlowcError(f"no naive kernel for node(s) {', '.join(bad)} on target "
                             f"{target.name}")

    def compile(self, kernels, target: HostTarget, dump, cache, progress) -> KernelCode:
        compiled = compile_object(kernels)
        return KernelCode(object=compiled.object, scratch=compiled.scratch)

    def manifest_target(self, code: KernelCode) -> dict:
        return {}
