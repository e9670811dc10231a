"""From a graph with static shapes to a program: kernels in order and where every tensor lives.

Contract: `build_program(graph, prefix)` returns a `Program`:
- each `fused` node becomes one kernel whose body is its `body` attribute; every other
  compute node becomes a single-node kernel (`kernels.single_node_body`); kernels with the same body
  (same ops, attributes, types and inline constants) share one symbol `PREFIX_kN`;
- `constant` nodes feed kernels as weights (one blob, 64-byte aligned entries, equal
  constants stored once), except small ones (`kernel_operands` leaves them out) which are
  copied into the kernel bodies that use them, as the kernel contract allows;
- view ops (`OpDef.is_view`: identity, reshape, flatten, squeeze, unsqueeze) move no data:
  their result is their operand's buffer;
- each value lives in one place (`Storage`): a graph input, the weights blob, an output
  buffer (a kernel writes a graph output in place when it can) or the arena, planned by
  `memplan.plan_memory` over the calls' order (`Program.memory`: offsets and report);
  outputs that are inputs, weights, views or repeated are copied at the
  end (`Program.copies`);
- kernel scratch: `set_scratch(program, scratch)` takes what the kernel compiler reported
  (`kernel_code.KernelScratch` per symbol) and plans the arena again with each CPU
  call's scratch buffers in it, live during that call only (`Program.scratch_at`); the
  per-thread scratch of the whole program is the largest kernel's (`thread_scratch_bytes`,
  bytes per thread slot, which the runtime allocates per thread outside the arena);
- the arena, the weights and the inputs and outputs together each stay within 2**48 bytes
  (`ir/limits.py`); a FlowcError names the buffer at the arena's top (its node), the largest
  weight or the largest input/output otherwise (`check_sizes`).
Variables (`state.py`) live in the context's variables block (`Storage("variable",
offset)`, `Program.variables`), outside the arena; reads and assigns are copy steps
(`Call.state`) unless the order lets a read be a view of the variable or a kernel write
the variable in place. Send/recv aside, other stateful ops are refused with a FlowcError
naming the node: artifacts do not run them yet. A control-flow node (`if`, `loop`) whose
bodies are small (`control.one_kernel`) is one kernel like any other node (its scf
lowering, lower/control.py); a larger one is a control step (`Call.control`,
control_steps.py): its bodies' calls (kernels shared with the program's), planned per body
in one scratch buffer of the step; `control_steps.walk` visits every call, bodies'
included. A graph the `partition` pass split over devices keeps its send/recv nodes as
transfer steps (`Call.transfer`) and lists its devices' arena regions in
`Program.regions`, partition 0 first; see `partitions.py`.
Entries: an artifact may export several programs over one context (a training artifact's
`run` and `train_step`). `build_program(graph, prefix, base=other, entry=NAME)` builds one
more entry next to `other`: it takes `other`'s variables layout (each of its `variable`
nodes is the slot of that name, which must exist with the same type), starts from
`other`'s weights (same offsets; equal constants stored once) and kernels (same body, same
symbol; new kernels numbered after them), so the program built last holds the weights
blob and the kernels of all. Each entry plans its own arena; the artifact's arena is the
largest (`arena_bytes_of`). The caller makes the program built last entry 0 (`run`) by
listing the others in its `siblings` (`Program.entries`: it, then them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import BinaryIO

import numpy as np

from flowc.codegen.kernel_code import KernelScratch
from flowc.codegen.kernels import kernel_operands, single_node_body
from flowc.codegen.plan.arena import align
from flowc.codegen.plan.control import bodies, check_bodies, one_kernel
from flowc.codegen.plan.control_steps import (
    ControlStep,
    build_control,
    memplan_step,
    place_bodies,
    plan_bodies,
    refused,
    walk,
)
from flowc.codegen.plan.memplan import MemoryPlan, ScratchSlot, Step, plan_memory
from flowc.codegen.plan.partitions import (
    TRANSFER_OPS,
    Region,
    call_device,
    check_devices,
    check_no_deadlock,
    device_regions,
    is_gpu_device,
    is_partitioned,
)
from flowc.codegen.plan.state import (
    VariableSlot,
    place_state,
    state_steps,
    touches_variable,
    variable_slots,
)
from flowc.ir.attrs import Tensor
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.limits import MAX_ARENA_BYTES, MAX_WEIGHTS_BYTES, check_total
from flowc.ir.ops import OPS, PURE, is_view
from flowc.ir.printer import print_graph
from flowc.ir.types import TensorType

FUSED_OP = "fused"


@dataclass(frozen=True)
class Storage:
    """Where a tensor lives: kind is input|output|weight|arena|variable; index or byte
    offset (a variable's: in the variables block)."""

    kind: str
    at: int


@dataclass(frozen=True)
class Kernel:
    symbol: str
    body: Graph


@dataclass(frozen=True)
class Call:
    """One step of the entry function: a kernel applied to graph values, or (kernel None)
    the send/recv node `transfer` moving a value through the runtime's rendezvous, the
    read_variable/assign node `state` copying a variable out or in (`state.copy_step`), or
    an `if`/`loop` node running its bodies' calls (`control`, control_steps.py)."""

    kernel: Kernel | None
    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    nodes: tuple[str, ...]
    transfer: Node | None = None
    state: Node | None = None
    control: ControlStep | None = None


@dataclass
class Program:
    name: str
    graph: Graph
    inputs: list[tuple[str, TensorType]]
    outputs: list[tuple[str, TensorType]]
    kernels: list[Kernel] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    storage: dict[Value, Storage] = field(default_factory=dict)
    copies: list[tuple[int, Storage, int]] = field(default_factory=list)  # (output, from, bytes)
    weights: list[tuple[int, Tensor]] = field(default_factory=list)  # (offset, data)
    weights_bytes: int = 0
    arena_bytes: int = 0
    memory: MemoryPlan | None = None  # the arena plan and its report (memplan.py)
    regions: list[Region] = field(default_factory=list)  # per device, when partitioned
    scratch: dict[str, KernelScratch] = field(default_factory=dict)  # per kernel symbol
    thread_scratch_bytes: int = 0  # per thread slot: the largest kernel's
    views: dict[Value, Value] = field(default_factory=dict)  # a view's result -> its base
    kept: set[Value] = field(default_factory=set)  # arena values the output copies read
    variables: list[VariableSlot] = field(default_factory=list)  # state.py
    variables_bytes: int = 0
    # extra checkpoint "__metadata__" entries (string -> string): a training artifact's
    # loss and optimizer hyperparameters (driver.training_metadata)
    checkpoint_metadata: dict[str, str] = field(default_factory=dict)
    digests: dict[str, int] = field(default_factory=dict)  # weight digest -> offset
    entry: str = "run"  # this program's entry name (its C function: NAME_run, NAME_<entry>)
    siblings: list[Program] = field(default_factory=list)  # the artifact's other entries
    # (input index, classes): an input of class indices the runtime checks to lie in
    # [0, classes) before this entry runs (a training step's labels)
    labels: tuple[int, int] | None = None
    # dims given at run time (plan/dynamic.py: the program is planned at their bounds)
    dims: list = field(default_factory=list)  # dynamic.RunDim, sorted by name
    symbolic_inputs: list[TensorType] = field(default_factory=list)
    symbolic_outputs: list[TensorType] = field(default_factory=list)

    @property
    def entries(self) -> list[Program]:
        """Every entry of the artifact, this one (entry 0) first."""
        return [self, *self.siblings]

    def where(self, value: Value) -> Storage:
        return self.storage[value]

    def needs(self, call: Call) -> KernelScratch:
        """The scratch the kernel of `call` takes (none for a transfer or a GPU call, whose
        kernels the GPU path gives scratch of its own); a control step's one buffer is the
        region of its bodies (control_steps.py)."""
        if call.control is not None:
            return KernelScratch((call.control.region_bytes,))
        if call.kernel is None or is_gpu_device(call_device(call)):
            return KernelScratch()
        return self.scratch.get(call.kernel.symbol, KernelScratch())

    def scratch_at(self, step: int) -> list[Storage]:
        """Where the scratch buffers of the program's `step`-th call are (arena offsets)."""
        plan = self.memory
        assert plan is not None
        n = len(self.needs(self.calls[step]).buffers)
        return [Storage("arena", plan.scratch[ScratchSlot(step, k)]) for k in range(n)]


def nbytes(t: TensorType) -> int:
    return int(t.num_elements) * t.dtype.np.itemsize


def fused_body(node: Node) -> tuple[Graph, list[Value]]:
    body = node.attrs["body"]
    if len(body.inputs) != len([v for v in node.inputs if v is not None]):
        raise FlowcError(f"node {node.label()}: its body takes {len(body.inputs)} inputs but "
                         f"the node has {len(node.inputs)} operands")
    return body, [v for v in node.inputs if v is not None]


def _structure_key(body: Graph) -> str:
    """Equal for bodies that compute the same thing (names and locations ignored)."""
    anonymous = Graph("kernel", [n.replace(name=f"in{i}", loc=None)
                                 for i, n in enumerate(body.inputs)], [], [])
    mapping = {old.out(): new.out() for old, new in zip(body.inputs, anonymous.inputs,
                                                        strict=True)}
    for node in body.nodes:
        inputs = tuple(None if v is None else mapping[v] for v in node.inputs)
        new = anonymous.append(node.replace(inputs=inputs, ctrl=(), name=None, loc=None,
                                            merged=()))
        mapping.update(zip(node.outputs, new.outputs, strict=True))
    anonymous.outputs = [(f"out{i}", mapping[v]) for i, (_, v) in enumerate(body.outputs)]
    return print_graph(anonymous)


def check_node(node: Node) -> None:
    opdef = OPS.get(node.op)
    if node.op == FUSED_OP:
        return
    if opdef is None or not opdef.has(PURE):
        raise FlowcError(f"node {node.label()}: op '{node.op}' is stateful or communicates; "
                         "flowc artifacts run only pure tensor ops so far")
    if bodies(node):  # control flow (control.py)
        check_bodies(node, check_node)
    for i, t in enumerate(node.types):
        if not isinstance(t, TensorType) or not t.is_static:
            raise FlowcError(f"node {node.label()}: result #{i} is {t}; kernels need tensors "
                             "of static shape (bind symbolic dims first)")


def arena_bytes_of(program: Program) -> int:
    """The arena of the artifact: the largest of its entries'."""
    return max(p.arena_bytes for p in program.entries)


def _shared_slots(graph: Graph, base: Program, entry: str) -> list[VariableSlot]:
    """`graph`'s variables as slots of `base`'s layout (module docstring); a variable
    `base` lacks, or has with another type, is a FlowcError naming the node."""
    by_name = {s.name: s for s in base.variables}
    slots = []
    for node in graph.nodes:
        if node.op != "variable":
            continue
        name = node.attrs["shared_name"]
        slot = by_name.get(name)
        if slot is None or slot.type != node.attrs["type"]:
            has = "no variable of that name" if slot is None else f"it as {slot.type}"
            raise FlowcError(f"node {node.label()}: entry '{entry}' reads variable '{name}' "
                             f"({node.attrs['type']}) but entry '{base.entry}' has {has}; "
                             "the entries of an artifact share one variables layout")
        slots.append(replace(slot, node=node))
    return slots


def build_program(graph: Graph, prefix: str, base: Program | None = None,
                  entry: str = "run") -> Program:
    """The program for `graph` (static shapes), entry `entry`, next to `base` when given;
    see the module docstring."""
    program = Program(prefix, graph, [(n.name, n.types[0]) for n in graph.inputs],
                      [(name, v.type) for name, v in graph.outputs], entry=entry)
    root: dict[Value, Value] = {}  # a view's result -> the value whose buffer it is
    by_key: dict[str, Kernel] = {}
    check_devices(graph)
    if base is None:
        program.variables, program.variables_bytes = variable_slots(
            graph.nodes, lambda t: add_weight(program, t, f"the initial value of {t.type}"))
        slots = program.variables
    else:
        program.kernels = list(base.kernels)
        by_key = {_structure_key(k.body): k for k in base.kernels}
        program.weights, program.digests = list(base.weights), dict(base.digests)
        program.weights_bytes = base.weights_bytes
        program.variables, program.variables_bytes = base.variables, base.variables_bytes
        program.checkpoint_metadata = dict(base.checkpoint_metadata)
        slots = _shared_slots(graph, base, entry)
    for slot in slots:
        if is_gpu_device(slot.node.device):
            raise FlowcError(f"node {slot.node.label()}: variables on {slot.node.device} are "
                             "not supported yet")
        if is_partitioned(graph):
            raise FlowcError(f"node {slot.node.label()}: variables in a graph split over "
                             "devices are not supported yet")

    def kernel_call(node: Node) -> Call:
        body, operands = fused_body(node) if node.op == FUSED_OP else (
            single_node_body(node), kernel_operands(node))
        key = _structure_key(body)
        if key not in by_key:
            by_key[key] = Kernel(f"{prefix}_k{len(by_key)}", body)
            program.kernels.append(by_key[key])
        # the graph nodes a call runs (not the constants inlined into its body), with the
        # nodes rewrites merged into them (Node.merged)
        names = tuple(name for n in (body.nodes if node.op == FUSED_OP else [node])
                      if n.op != "constant" for name in n.source_names())
        return Call(by_key[key], tuple(root.get(v, v) for v in operands), node.outputs, names)

    def control_call(node: Node) -> Call:
        if is_partitioned(graph) or is_gpu_device(node.device):
            raise refused(node)
        step = build_control(node, root, build_calls)
        operands = tuple(root.get(v, v) for v in node.inputs if v is not None)
        return Call(None, operands, node.outputs, (node.name or node.op,), control=step)

    def build_calls(nodes: list[Node]) -> list[Call]:
        calls: list[Call] = []
        for node in nodes:
            if node.op in ("constant", "variable"):
                continue
            if node.op in TRANSFER_OPS:
                calls.append(Call(None, tuple(root.get(v, v) for v in node.inputs),
                                  node.outputs, (node.name or node.op,), node))
                continue
            if touches_variable(node.op):
                for kind, step in state_steps(node):
                    operands = tuple(root.get(v, v) for v in step.inputs[1:])
                    calls.append(kernel_call(step) if kind == "kernel" else Call(
                        None, operands, step.outputs, (step.name or step.op,), state=step))
                continue
            check_node(node)
            if is_view(node.op):
                root[node.out()] = root.get(node.inputs[0], node.inputs[0])
            elif bodies(node) and not one_kernel(node):
                calls.append(control_call(node))
            else:
                calls.append(kernel_call(node))
        return calls

    program.calls = build_calls(graph.nodes)
    check_no_deadlock(program.calls)
    program.views = root
    place_state(program, slots, lambda offset: Storage("variable", offset))
    _assign_storage(program)
    return program


def set_scratch(program: Program, scratch: dict[str, KernelScratch]) -> None:
    """Record the kernels' scratch and plan the arena again with it (module docstring)."""
    program.scratch = {k.symbol: scratch[k.symbol] for k in program.kernels
                       if k.symbol in scratch}
    program.thread_scratch_bytes = max(
        (program.needs(c).per_thread for c in walk(program.calls)), default=0)
    if any(program.needs(c).buffers for c in walk(program.calls)):  # else the plan stands
        _plan_arena(program)


def _assign_storage(program: Program) -> None:
    graph, root = program.graph, program.views
    storage = program.storage
    for i, node in enumerate(graph.inputs):
        storage[node.out()] = Storage("input", i)

    def weight(value: Value) -> Storage:
        return Storage("weight", add_weight(program, value.node.attrs["value"],
                                            f"constant {value.node.label()}"))

    written = {v for call in program.calls for v in call.results}
    claimed: set[Value] = set()
    for j, (_, value) in enumerate(graph.outputs):
        base = root.get(value, value)
        if base == value and base in written and base not in claimed:
            storage[base] = Storage("output", j)
            claimed.add(base)
    for call in walk(program.calls):
        body_outputs = [v for b in call.control.bodies for v in b.outputs] if call.control else []
        for v in [*call.operands, *body_outputs]:
            if v.node.op == "constant":
                storage.setdefault(v, weight(v))
    kept = {root.get(value, value) for _, value in graph.outputs}  # read by output copies
    for base in kept:
        if base.node.op == "constant":
            storage.setdefault(base, weight(base))
    program.kept = kept
    _plan_arena(program)


def add_weight(program: Program, tensor: Tensor, what: str) -> int:
    """The offset of `tensor` in the weights blob, added there unless an equal tensor is;
    `what` names it in the error for a tensor without data."""
    if tensor.is_elided:
        raise FlowcError(f"{what} ({tensor.type}) has no data: it was elided from the IR "
                         "text; print it with --emit-resources")
    if tensor.digest not in program.digests:
        program.digests[tensor.digest] = program.weights_bytes
        program.weights.append((program.weights_bytes, tensor))
        program.weights_bytes += align(tensor.data.nbytes)
    return program.digests[tensor.digest]


def _plan_arena(program: Program) -> None:
    """Plan the arena (with the kernels' scratch known so far) and place the arena values,
    their views and the output copies."""
    graph, root, storage = program.graph, program.views, program.storage
    for v in [v for v, where in storage.items() if where.kind == "arena"]:
        del storage[v]
    for view in root:
        storage.pop(view, None)
    plan_bodies(lambda calls: _memplan_steps(program, calls), program.calls, storage)
    program.memory = plan_arena_storage(program, program.kept)
    program.arena_bytes = program.memory.arena_bytes
    check_sizes(program)
    for v, offset in program.memory.offsets.items():
        storage[v] = Storage("arena", offset)
    place_bodies(storage, program.memory, program.calls, 0,
                 lambda offset: Storage("arena", offset))
    for view, base in root.items():
        if base in storage:
            storage[view] = storage[base]
    program.copies = []
    for j, (_, value) in enumerate(graph.outputs):
        where = storage[root.get(value, value)]
        if where != Storage("output", j):
            program.copies.append((j, where, nbytes(value.type)))
    if is_partitioned(graph):
        program.regions = device_regions(program.memory, program.calls)


def check_sizes(program: Program) -> None:
    """FlowcError when the arena, the weights or the inputs and outputs together break
    flowc's limits (`ir/limits.py`), naming the buffer at the top of the arena, the largest
    weight, or the largest input/output."""
    plan = program.memory
    if plan is not None and plan.offsets:
        top = max(plan.offsets, key=lambda v: (plan.offsets[v] + nbytes(v.type)))
        check_total(plan.arena_bytes, MAX_ARENA_BYTES,
                    f"model {program.name}: the arena (its top buffer: the result of node "
                    f"{top.node.label()}, {top.type})")
    if program.weights:
        big = max((t for _, t in program.weights), key=lambda t: t.data.nbytes)
        check_total(program.weights_bytes, MAX_WEIGHTS_BYTES,
                    f"model {program.name}: the weights (the largest: {big.type})")
    if program.variables:
        big = max(program.variables, key=lambda v: v.nbytes)
        check_total(program.variables_bytes, MAX_ARENA_BYTES,
                    f"model {program.name}: the variables (the largest: '{big.name}', "
                    f"{big.type})")
    io = [*program.inputs, *program.outputs]
    if io:
        name, t = max(io, key=lambda item: nbytes(item[1]))
        check_total(sum(align(nbytes(t)) for _, t in io), MAX_ARENA_BYTES,
                    f"model {program.name}: the inputs and outputs together (the largest: "
                    f"'{name}', {t})")


def plan_arena_storage(program: Program, kept: set[Value]) -> MemoryPlan:
    """The memory plan of the results no other storage holds, over the calls' order;
    those in `kept` (read by the output copies) live to the end."""
    steps = _memplan_steps(program, program.calls)
    planned = {v for call in program.calls for v in call.results if v not in program.storage}
    return plan_memory(steps, planned, kept)


def _memplan_steps(program: Program, calls: list[Call]) -> list[Step]:
    return [memplan_step(call, call_device(call), program.needs(call).buffers)
            for call in calls]


def write_weights(program: Program, out: BinaryIO) -> str:
    """Write the weights blob (`program.weights_bytes` bytes laid out as `program.weights`
    says, zeros between the entries) to `out`, one tensor at a time, so that no copy of
    the whole blob is made; returns its sha256 (hex)."""
    digest, at = hashlib.sha256(), 0
    for offset, tensor in program.weights:
        for chunk in (bytes(offset - at), as_bytes(tensor.data)):
            out.write(chunk)
            digest.update(chunk)
        at = offset + tensor.data.nbytes
    tail = bytes(program.weights_bytes - at)
    out.write(tail)
    digest.update(tail)
    return digest.hexdigest()


def as_bytes(data: np.ndarray) -> np.ndarray:
    """`data`'s bytes in C order as a flat uint8 array (a view when it is contiguous)."""
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
