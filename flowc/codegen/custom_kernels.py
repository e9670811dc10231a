"""Custom ops in artifacts: the user's C functions linked in as the kernels of `custom_call`
nodes (flowc/ir/ops/custom.py, flowc/frontend/custom_ops.py).

Contract: `with_custom_ops(backend, graphs, later=False)` is `backend` itself unless a
graph holds a custom_call node or `later`; then a `CustomOpBackend` around it:
`check_supported` and `compile` take the single-node bodies of custom_call nodes
themselves and hand every other kernel to the inner backend. Each custom kernel is a
generated C function of the kernel ABI (codegen/README.md) that fills a
`flowc_custom_args` (flowc/runtime/flowc_custom_op.h) and calls the user's function,
stopping the process with a message naming the op and node if it returns nonzero. Before
compiling, each source is checked against the declared signature (it is compiled after the
prototype `int fn(const flowc_custom_args *)`) and for a global definition of the
function; a failure is a one-line FlowcError naming the node, the op, the function and the
file. Sources are compiled with `$CC -O2 -fPIC` (the directory of each on the include
path); the result, the inner backend's object and the wrappers are linked into one
relocatable object (`$CC -r`) in which only the kernel symbols stay global, as the kernel
contract asks.
The halves of an allreduce (`all_reduce_start`, `all_reduce_wait`: flowc/ir/ops/
collective.py) are kernels of this kind too, whose functions are the runtime's
(`flowc_allreduce_start`/`_wait`, flowc/runtime/allreduce.c; no user source: the link step
renames the wrappers' references to the runtime's prefixed functions) with the attribute
`bucket`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flowc.codegen.backend import Dump, Kernels
from flowc.codegen.emit.c_text import c_string
from flowc.codegen.emit.link import RUNTIME_DIR, compiler, run_tool
from flowc.codegen.kernel_code import KernelCode
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph
from flowc.ir.types import TensorType
from flowc.runtime.abi import DTYPE_CODES

CUSTOM_CFLAGS = ("-O2", "-fPIC", "-fvisibility=hidden", "-std=gnu11")
RUNTIME_CALLS = {"all_reduce_start": "flowc_allreduce_start",
                 "all_reduce_wait": "flowc_allreduce_wait"}  # op -> the runtime's function
CALL_OPS = ("custom_call", *RUNTIME_CALLS)


def custom_node(body: Graph) -> Any:
    """The custom_call (or allreduce half) node of a single-node kernel body, else None."""
    nodes = [n for n in body.nodes if n.op in CALL_OPS]
    return nodes[0] if len(nodes) == 1 and len(body.nodes) == 1 else None


def call_of(node: Any) -> dict[str, Any]:
    """What a wrapper calls for `node`: custom_call's attributes (`symbol`, `source`,
    `attr_names`, `attr_values`, `domain`, `op_type`), or the same for a runtime call
    (`source` None)."""
    if node.op == "custom_call":
        return dict(node.attrs)
    return {"symbol": RUNTIME_CALLS[node.op], "source": None, "attr_names": ("bucket",),
            "attr_values": (float(node.attrs.get("bucket", 0)),), "domain": "flowc",
            "op_type": node.op}


def with_custom_ops(backend: Any, graphs: Sequence[Graph], later: bool = False) -> Any:
    """`backend`, wrapped in a CustomOpBackend when a graph holds a custom_call node, or
    when `later` says that the pipeline adds such kernels (a data-parallel step's
    allreduces)."""
    if later or any(n.op == "custom_call" for g in graphs for n in g.nodes):
        return CustomOpBackend(backend)
    return backend


class CustomOpBackend:
    """Custom kernels here, the rest by `inner` (see the module docstring)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = inner.name

    def get_target(self, name: Any) -> Any:
        return self.inner.get_target(name)

    def check_supported(self, body: Graph, target: Any) -> None:
        if custom_node(body) is None:
            self.inner.check_supported(body, target)

    def manifest_target(self, code: KernelCode) -> dict[str, Any]:
        return self.inner.manifest_target(code)

    def compile(self, kernels: Kernels, target: Any, dump: Dump | None, cache: Any,
                progress: Any) -> KernelCode:
        custom = [(sym, body) for sym, body in kernels if custom_node(body) is not None]
        rest = [(sym, body) for sym, body in kernels if custom_node(body) is None]
        code = self.inner.compile(rest, target, dump, cache, progress) if rest else KernelCode()
        if not custom:
            return code
        with tempfile.TemporaryDirectory(prefix="flowc-custom-") as tmp:
            obj = build_custom(Path(tmp), custom, code.object, dump)
        return KernelCode(obj, dict(code.scratch), code.gpu)


def _where(node: Any) -> str:
    a = node.attrs
    return (f"node {node.label()}: custom op {a['domain']}::{a['op_type']}: function "
            f"'{a['symbol']}' in {a['source']}")


def check_source(node: Any, tmp: Path) -> None:
    """The user's file compiles after the declared prototype of its function."""
    a = node.attrs
    check = tmp / f"check_{a['symbol']}.c"
    check.write_text(f'#include "flowc_custom_op.h"\nint {a["symbol"]}(const flowc_custom_args '
                     f'*args);\n#include {c_string(a["source"])}\n')
    try:
        run_tool([compiler(), *CUSTOM_CFLAGS, f"-I{RUNTIME_DIR}",
                  f"-I{Path(a['source']).parent}", "-fsyntax-only", check.name], tmp,
                 "checking a custom op")
    except FlowcError as exc:
        text = str(exc)
        if "conflicting types" in text:
            raise FlowcError(f"{_where(node)} does not have the declared signature int "
                             f"{a['symbol']}(const flowc_custom_args *args)") from None
        first = next((ln for ln in text.splitlines() if "error" in ln), text.splitlines()[-1])
        raise FlowcError(f"{_where(node)}: the file does not compile: {first.strip()}") from None


def _array(ctype: str, name: str, values: Sequence[Any]) -> str:
    body = ", ".join(str(v) for v in values) or "0"
    return f"static const {ctype} {name}[] = {{{body}}};"


def wrapper(sym: str, body: Graph, node: Any) -> str:
    """The kernel `sym`: the ABI's arguments as a flowc_custom_args for the user's function
    (or the runtime's)."""
    a = call_of(node)
    ins = [n.out().type for n in body.inputs]
    outs = list(node.types)
    lines = [f"int {a['symbol']}(const flowc_custom_args *args);"]

    def shapes(kind: str, types: list[TensorType]) -> list[str]:
        out = [_array("int64_t", f"{sym}_{kind}{i}", t.shape) for i, t in enumerate(types)]
        refs = ", ".join(f"{sym}_{kind}{i}" for i in range(len(types))) or "0"
        return [*out, f"static const int64_t *const {sym}_{kind}[] = {{{refs}}};"]

    lines += shapes("is", ins) + shapes("os", outs)
    lines += [_array("int32_t", f"{sym}_idt", [DTYPE_CODES[t.dtype.name] for t in ins]),
              _array("int32_t", f"{sym}_odt", [DTYPE_CODES[t.dtype.name] for t in outs]),
              _array("int32_t", f"{sym}_irk", [len(t.shape) for t in ins]),
              _array("int32_t", f"{sym}_ork", [len(t.shape) for t in outs]),
              _array("double", f"{sym}_av", [repr(float(v)) for v in a["attr_values"]]),
              f"static const char *const {sym}_an[] = "
              f"{{{', '.join(c_string(n) for n in a['attr_names']) or '0'}}};"]
    params = ([f"const void *in{i}" for i in range(len(ins))]
              + [f"void *out{i}" for i in range(len(outs))])
    message = c_string(f"flowc: custom op {a['domain']}::{a['op_type']} (function "
                       f"{a['symbol']}, node {node.label()}) returned %d\n")
    lines += [
        f"__attribute__((visibility(\"hidden\"))) void {sym}({', '.join(params)}) {{",
        f"  const void *ins[] = {{{', '.join(f'in{i}' for i in range(len(ins))) or '0'}}};",
        f"  void *outs[] = {{{', '.join(f'out{i}' for i in range(len(outs)))}}};",
        f"  flowc_custom_args args = {{{len(ins)}, {len(outs)}, ins, outs, {sym}_idt, "
        f"{sym}_odt, {sym}_irk, {sym}_ork, {sym}_is, {sym}_os, {len(a['attr_names'])}, "
        f"{sym}_an, {sym}_av}};",
        f"  int rc = {a['symbol']}(&args);",
        f"  if (rc) {{ fprintf(stderr, {message}, rc); abort(); }}",
        "}"]
    return "\n".join(lines)


def build_custom(tmp: Path, custom: Kernels, kernel_object: bytes,
                 dump: Dump | None) -> bytes:
    """One relocatable object: `kernel_object`, the wrappers and the users' sources, only
    the kernel symbols global (see the module docstring)."""
    nodes = [(sym, body, custom_node(body)) for sym, body in custom]
    users = [node for _, _, node in nodes if node.op == "custom_call"]
    for node in users:
        check_source(node, tmp)
    objects = []
    for i, source in enumerate(sorted({node.attrs["source"] for node in users})):
        obj = f"user{i}.o"
        run_tool([compiler(), *CUSTOM_CFLAGS, f"-I{RUNTIME_DIR}", f"-I{Path(source).parent}",
                  "-c", source, "-o", obj], tmp, f"compiling custom op source {source}")
        defined = {ln.split()[0] for ln in run_tool(["nm", "-g", "-P", "--defined-only", obj],
                                                     tmp, "listing symbols").splitlines()
                   if ln.split()}
        for node in users:
            if node.attrs["source"] == source and node.attrs["symbol"] not in defined:
                raise FlowcError(f"{_where(node)}: the file defines no global function "
                                 f"'{node.attrs['symbol']}' (missing, misspelt or static)")
        objects.append(obj)
    text = "\n\n".join(["#include <stdio.h>", "#include <stdlib.h>",
                        '#include "flowc_custom_op.h"',
                        *(wrapper(sym, body, node) for sym, body, node in nodes)])
    if dump:
        dump("custom_ops.c", text)
    (tmp / "custom_ops.c").write_text(text)
    run_tool([compiler(), *CUSTOM_CFLAGS, f"-I{RUNTIME_DIR}", "-c", "custom_ops.c", "-o",
              "custom_ops.o"], tmp, "compiling the custom op wrappers")
    objects.append("custom_ops.o")
    if kernel_object:
        (tmp / "kernels.o").write_bytes(kernel_object)
        objects.append("kernels.o")
    run_tool([compiler(), "-r", "-nostdlib", *objects, "-o", "all.o"], tmp,
             "linking the custom ops with the kernels")
    keep = tmp / "keep.txt"
    keep.write_text("".join(f"{s}\n" for s in ({sym for sym, _ in custom} | _globals(
        tmp, "kernels.o" if kernel_object else None))))
    run_tool(["objcopy", f"--keep-global-symbols={keep.name}", "all.o"], tmp,
             "hiding the custom op functions")
    return (tmp / "all.o").read_bytes()


def _globals(tmp: Path, obj: str | None) -> set[str]:
    """The global symbols `obj` defines (the inner backend's kernels)."""
    if obj is None:
        return set()
    out = run_tool(["nm", "-g", "-P", "--defined-only", obj], tmp, "listing symbols")
    return {ln.split()[0] for ln in out.splitlines() if ln.split()}
