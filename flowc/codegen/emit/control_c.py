"""The C of a control step (plan/control_steps.py) inside the entry function.

Contract: `render_control(program, call, kernel_c, depth)` returns the C lines of the
control step `call.control`:
- `if`: `if (*(const int8_t *)COND) { THEN } else { ELSE }`, each branch its calls, then
  each branch result copied into the node's result buffer (booleans are one byte);
- `loop`: in a block of its own, the trip count read at run time from M's buffer (no M:
  no limit) and the condition from cond's (none: true); each carried value's initial value
  copied into its slot (the node's result buffer), each `padded` scan result zeroed; then
  `for (itD = 0; itD < tripsD && goD; ++itD)`: the iteration number and condition written
  into their slots (each only when a call of the body or its results read it), the body's
  calls, the condition read back (a loop with one), each scan
  element copied into row `itD` of its result, carried values staged (swaps) then copied
  into their slots. D is the nesting depth, so nested loops keep their own counters.
A step's views (`ControlStep.views`) are pointers into their base, `(char *)(BASE) +
OFFSET + itD * ROW`, wherever a body (nested ones included) names them (`views`: value ->
C pointer expression). A moved carried value k (`ControlStep.moved`) is read through
`char *cD_k`: the slot before the first iteration, then the scan row the iteration wrote
(the pointer moves instead of a copy); after the loop the slot gets its last value once.
`kernel_c(call, args)` renders one kernel call (entry.py: with profiling, timed: a loop's
kernels are then counted once per iteration); `args` are `body_arguments`.
"""

from __future__ import annotations

from collections.abc import Callable

from flowc.codegen.emit.entry_args import pointer
from flowc.codegen.plan.control_steps import Body, View
from flowc.codegen.plan.program import Call, Program, Storage, nbytes
from flowc.ir.graph import Value

KernelC = Callable[[Call, list[str]], str]
Views = dict[Value, str]


def _ptr(program: Program, views: Views, v: Value) -> str:
    return views[v] if v in views else pointer(program.where(v))


def body_arguments(program: Program, body: Body, j: int, views: Views | None = None
                   ) -> list[str]:
    """The C arguments of call `j` of `body` (a kernel call): operands, results, its
    scratch buffers (arena offsets), then `ts` when it takes thread scratch."""
    call = body.calls[j]
    args = [_ptr(program, views or {}, v) for v in (*call.operands, *call.results)]
    args += [pointer(Storage("arena", offset)) for offset in body.scratch.get(j, [])]
    return args + (["ts"] if program.needs(call).per_thread else [])


def _at(base: str, view: View, it: str) -> str:
    """The C pointer of `view` given its base's pointer `base` (module docstring)."""
    return "".join([f"(char *)({base})", f" + {view.offset}" * bool(view.offset),
                    f" + {it} * {view.row}" * bool(view.row)])


def _copy(dst: str, src: str, size: int, pad: str) -> list[str]:
    return [] if dst == src else [f"{pad}memcpy({dst}, {src}, {size}u);"]


def _body(program: Program, body: Body, kernel_c: KernelC, depth: int, views: Views
          ) -> list[str]:
    pad = "  " * (depth + 1)
    lines = []
    for j, call in enumerate(body.calls):
        lines.append(f"{pad}/* {', '.join(call.nodes)} */")
        if call.control is not None:
            lines += render_control(program, call, kernel_c, depth + 1, views)
        else:
            lines.append(pad + kernel_c(call, body_arguments(program, body, j, views)))
    return lines


def render_control(program: Program, call: Call, kernel_c: KernelC, depth: int = 1,
                   views: Views | None = None) -> list[str]:
    step = call.control
    assert step is not None
    node, pad = step.node, "  " * depth
    views = dict(views or {})
    if not step.is_loop:
        for view, at in step.views.items():
            views[view] = _at(_ptr(program, views, at.base), at, "")
        cond = _ptr(program, views, call.operands[0])
        lines = [f"{pad}if (*(const int8_t *)({cond})) {{"]
        for k, body in enumerate(step.bodies):
            if k:
                lines.append(f"{pad}}} else {{")
            lines += _body(program, body, kernel_c, depth, views)
            for result, src in zip(node.outputs, body.outputs, strict=True):
                lines += _copy(_ptr(program, views, result), _ptr(program, views, src),
                               nbytes(result.type), pad + "  ")
        return [*lines, f"{pad}}}"]
    return _loop(program, call, kernel_c, depth, views)


def _loop(program: Program, call: Call, kernel_c: KernelC, depth: int, views: Views
          ) -> list[str]:
    step = call.control
    assert step is not None
    node, pad, inner = step.node, "  " * depth, "  " * (depth + 1)
    body = step.bodies[0]
    graph = body.graph
    m, cond = node.inputs[0], node.inputs[1]
    n = step.carried()
    it, trips, go = f"it{depth}", f"trips{depth}", f"go{depth}"

    def ptr(v: Value) -> str:
        return _ptr(program, views, v)

    limit = f"*(const int64_t *)({ptr(m)})" if m is not None else "INT64_MAX"
    start = f"*(const int8_t *)({ptr(cond)})" if cond is not None else "1"
    lines = [f"{pad}{{", f"{inner}const int64_t {trips} = {limit};",
             f"{inner}int8_t {go} = {start};"]
    for k in range(n):
        lines += _copy(ptr(node.outputs[k]), ptr(node.inputs[2 + k]), nbytes(node.types[k]),
                       inner)
    scans = node.outputs[n:]
    for result in scans[len(scans) - node.attrs.get("padded", 0):]:
        lines.append(f"{inner}memset({ptr(result)}, 0, {nbytes(result.type)}u);")
    moved = {k: f"c{depth}_{k}" for k in step.moved}
    slots = {k: ptr(node.outputs[k]) for k in moved}
    for k, var in moved.items():
        lines.append(f"{inner}char *{var} = (char *)({slots[k]});")
        views[node.outputs[k]] = var
    for view, at in step.views.items():
        views[view] = _at(ptr(at.base), at, it)
    lines.append(f"{inner}for (int64_t {it} = 0; {it} < {trips} && {go}; ++{it}) {{")
    deep = "  " * (depth + 2)
    read = {v for c in body.calls for v in c.operands} | set(body.outputs[cond is None:])
    for slot, (ctype, var) in zip(graph.inputs[:2], (("int64_t", it), ("int8_t", go)),
                                  strict=True):
        if slot.out() in read:  # else no store: nothing in the body reads the slot
            lines.append(f"{deep}*({ctype} *)({ptr(slot.out())}) = {var};")
    lines += _body(program, body, kernel_c, depth + 1, views)
    if cond is not None:
        lines.append(f"{deep}{go} = *(const int8_t *)({ptr(body.outputs[0])});")
    for result, src in zip(node.outputs[n:], body.outputs[1 + n:], strict=True):
        row = nbytes(src.type)
        lines += _copy(_at(ptr(result), View(result, 0, row), it), ptr(src), row, deep)
    carried = list(zip(node.outputs[:n], body.outputs[1:1 + n], strict=True))
    staged = {k: pointer(Storage("arena", step.base + offset))
              for k, offset in step.temps.items()}
    for k, src in staged.items():
        lines += _copy(src, ptr(carried[k][1]), nbytes(carried[k][0].type), deep)
    for k, (slot, src) in enumerate(carried):
        if k not in moved:
            lines += _copy(ptr(slot), staged.get(k, ptr(src)), nbytes(slot.type), deep)
    lines += [f"{deep}{moved[k]} = {ptr(carried[k][1])};" for k in moved]
    lines.append(f"{inner}}}")
    for k, var in moved.items():
        lines.append(f"{inner}if ({var} != (char *)({slots[k]})) "
                     f"memcpy({slots[k]}, {var}, {nbytes(node.types[k])}u);")
    return [*lines, f"{pad}}}"]
