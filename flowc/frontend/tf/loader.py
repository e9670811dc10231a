"""Reading a TensorFlow model into one flat graph of `TfNode`s: a frozen GraphDef (.pb) or a
SavedModel directory (saved_model.pb + variables/).

Contract:
- `load_graph(path, signature=None)` returns a `TfGraph`: every node of the GraphDef, with
  every call of a library function (StatefulPartitionedCall, PartitionedCall, or an op named
  after a function) inlined: the body's nodes are named `CALL/NODE` and the call node itself
  becomes an `IdentityN` of the function's results, so `CALL:i` still names output i (with
  the body's control outputs, `control_ret`, as its control inputs). Control inputs are
  kept (`TfNode.controls`); If/While bodies stay in the library (`TfGraph.functions`,
  `function_graph`).
- In a SavedModel, each resource or v1 variable (VarHandleOp, VariableV2) that the saver's
  restore graph assigns from a RestoreV2 gets that checkpoint entry's value (`TfNode.value`,
  a view of the memory-mapped shard); the graph's default feeds and fetches are the chosen
  signature's inputs and outputs, named by the signature's keys (sorted). A GraphDef has
  none (the importer takes its Placeholders and its sink nodes).
- `signature`: a SavedModel's signature key; default `serving_default`, else the only one.
  The meta graph is the one tagged `serve`, else the first.
- Every problem (unreadable or truncated file, a missing function, signature or node) is a
  TfImportError naming the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flowc.frontend.tf.bundle import read_bundle, read_string
from flowc.frontend.tf.dtypes import DT_STRING, shape_of, tf_dtype, to_array
from flowc.frontend.tf.errors import TfImportError
from flowc.frontend.tf.protos import GraphDef, SavedModel, TrackableObjectGraph
from flowc.ir import TensorType

Ref = tuple[str, int]   # (node name, output index)
CALL_OPS = ("StatefulPartitionedCall", "PartitionedCall")
# output argument names of multi-argument ops, for a function body's `node:arg:i` refs
OUTPUT_ARGS = {
    "FusedBatchNorm": ("y", "batch_mean", "batch_variance", "reserve_space_1",
                       "reserve_space_2"),
    "FusedBatchNormV2": ("y", "batch_mean", "batch_variance", "reserve_space_1",
                         "reserve_space_2"),
    "FusedBatchNormV3": ("y", "batch_mean", "batch_variance", "reserve_space_1",
                         "reserve_space_2", "reserve_space_3"),
    "Unique": ("y", "idx"), "TopKV2": ("values", "indices"),
}
MAX_FILE_BYTES = 2 ** 31   # protobuf's own limit on one message


@dataclass
class TfNode:
    """One node: its data inputs, its control inputs (`controls`), its attributes (AttrValue
    messages by name) and, for a variable, its checkpoint value."""

    name: str
    op: str
    inputs: list[Ref]
    attrs: dict[str, Any]
    value: np.ndarray | None = None
    controls: list[str] = field(default_factory=list)   # the nodes it runs after


@dataclass
class Signature:
    """A signature's (or tf2xla config's) tensors: (name, tensor, declared type or None)."""

    feeds: list[tuple[str, Ref, TensorType | None]] = field(default_factory=list)
    fetches: list[tuple[str, Ref]] = field(default_factory=list)


@dataclass
class TfGraph:
    path: str
    nodes: dict[str, TfNode]
    signature: Signature | None   # a SavedModel's; None for a GraphDef
    functions: dict[str, Any] = field(default_factory=dict)   # the library, by name
    # functions recovered from v1 frames (frames.py): name -> nodes, argument refs, results
    synthetic: dict[str, tuple[dict[str, TfNode], list[Ref], list[Ref]]] = field(
        default_factory=dict)

    def function_graph(self, name: str, prefix: str, where: str
                       ) -> tuple[TfGraph, list[Ref], list[Ref]]:
        """The body of library function `name` (an If branch, a While cond or body) as a
        flat graph of its own, its nodes named `PREFIX/NODE`: the graph, the refs its
        arguments are read through (`_Arg` nodes) and the refs of its results. A function
        recovered from a v1 frame keeps its nodes' names (`prefix` is not used)."""
        if name in self.synthetic:
            nodes, args, results = self.synthetic[name]
            return TfGraph(self.path, nodes, None, self.functions, self.synthetic), args, \
                results
        if name not in self.functions:
            raise TfImportError(f"{where}: calls function '{name}', which the library does "
                                "not define")
        function = self.functions[name]
        flat = _Flattener(self.functions, self.path)
        args = [(f"{prefix}/{a.name}", 0) for a in function.signature.input_arg]
        for ref in args:
            flat.nodes[ref[0]] = TfNode(ref[0], "_Arg", [], {})
        flat.inline(function, prefix, args)
        graph = TfGraph(self.path, flat.nodes, None, self.functions, self.synthetic)
        return graph, args, [(prefix, i) for i in range(len(function.signature.output_arg))]

    def node(self, name: str, what: str) -> TfNode:
        if name not in self.nodes:
            raise TfImportError(f"{self.path}: {what} names node '{name}', which the graph "
                                "does not have")
        return self.nodes[name]


def parse_ref(text: str) -> Ref:
    """`node` or `node:i` (a GraphDef input or a signature's tensor name)."""
    name, _, index = text.partition(":")
    return name, int(index) if index.isdigit() else 0


def _read(path: str) -> bytes:
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            raise TfImportError(f"{path}: larger than protobuf's 2 GiB message limit")
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise TfImportError(f"cannot read '{path}': {exc.strerror or exc}") from None


def _parse(message: Any, data: bytes, path: str, kind: str) -> Any:
    try:
        message.ParseFromString(data)
    except Exception:  # protobuf's DecodeError (and RuntimeError from the upb parser)
        raise TfImportError(f"{path}: not a {kind} (truncated or corrupt protobuf)") from None
    return message


class _Flattener:
    """Builds the flat node table, inlining function calls (recursively)."""

    def __init__(self, functions: dict[str, Any], path: str):
        self.path = path
        self.functions = functions
        self.nodes: dict[str, TfNode] = {}
        self.stack: list[str] = []

    def add_graph(self, node_defs: Any) -> None:
        for nd in node_defs:
            inputs = [parse_ref(i) for i in nd.input if not i.startswith("^")]
            self._add(nd, nd.name, inputs, [i[1:] for i in nd.input if i.startswith("^")])

    def _add(self, nd: Any, name: str, inputs: list[Ref], controls: list[str]) -> None:
        if name in self.nodes:
            raise TfImportError(f"{self.path}: two nodes are named '{name}'")
        function = self._callee(nd)
        if function is None:
            self.nodes[name] = TfNode(name, nd.op, inputs, dict(nd.attr), controls=controls)
            return
        self.inline(function, name, inputs)
        self.nodes[name].controls += controls

    def _callee(self, nd: Any) -> Any:
        if nd.op in CALL_OPS:
            fname = nd.attr["f"].func.name
            if fname not in self.functions:
                raise TfImportError(f"{self.path}: node '{nd.name}' ({nd.op}) calls "
                                    f"function '{fname}', which the library does not define")
            return self.functions[fname]
        return self.functions.get(nd.op)

    def inline(self, function: Any, call: str, inputs: list[Ref]) -> None:
        """Add `function`'s body called as node `call` on `inputs`."""
        sig = function.signature
        if sig.name in self.stack:
            raise TfImportError(f"{self.path}: function '{sig.name}' calls itself")
        if len(inputs) != len(sig.input_arg):
            raise TfImportError(f"{self.path}: node '{call}' passes {len(inputs)} inputs to "
                                f"'{sig.name}', which takes {len(sig.input_arg)}")
        args = {a.name: ref for a, ref in zip(sig.input_arg, inputs, strict=True)}
        ops = {nd.name: nd.op for nd in function.node_def}

        def resolve(text: str) -> Ref:
            parts = text.split(":")
            if len(parts) == 1:
                if text not in args:
                    raise TfImportError(f"{self.path}: function '{sig.name}' reads '{text}', "
                                        "which is not one of its arguments")
                return args[text]
            node, arg, index = parts[0], parts[1], int(parts[2]) if len(parts) > 2 else 0
            if node not in ops:
                raise TfImportError(f"{self.path}: function '{sig.name}' reads '{text}' of a "
                                    "node it does not have")
            return f"{call}/{node}", self._offset(ops[node], arg) + index

        self.stack.append(sig.name)
        for nd in function.node_def:
            self._add(nd, f"{call}/{nd.name}",
                      [resolve(i) for i in nd.input if not i.startswith("^")],
                      [f"{call}/{i[1:]}" for i in nd.input if i.startswith("^")])
        self.stack.pop()
        rets = [resolve(function.ret[a.name]) for a in sig.output_arg]
        # the call's results come after the body's stateful ops (its control outputs)
        self.nodes[call] = TfNode(call, "IdentityN", rets, {}, controls=[
            f"{call}/{n}" for n in function.control_ret.values()])

    def _offset(self, op: str, arg: str) -> int:
        names = OUTPUT_ARGS.get(op)
        if names is None or arg not in names:
            return 0   # one output argument (possibly a list): `arg:i` is output i
        return names.index(arg)


def _restored_values(nodes: dict[str, TfNode], prefix: str, path: str,
                     objects: Any) -> None:
    """Give each variable the saver assigns from a RestoreV2 its checkpoint value; then
    each variable still without one the value the object graph gives it (`objects`, the
    SavedObjectGraph: a variable object named like the VarHandleOp's shared_name, whose
    checkpoint key the checkpoint's own object graph, same node ids, gives). Keras 3
    variables need the latter: the saver restores a copy, not the variable the functions
    use."""
    assigns = [n for n in nodes.values() if n.op in ("AssignVariableOp", "Assign")]
    if not assigns and not objects.nodes:
        return
    bundle = read_bundle(prefix)
    for assign in assigns:
        if len(assign.inputs) < 2:
            continue
        var = nodes.get(through_identity(nodes, assign.inputs[0])[0])
        source, index = through_identity(nodes, assign.inputs[1])
        restore = nodes.get(source)
        if var is None or restore is None or restore.op != "RestoreV2":
            continue
        names = nodes.get(through_identity(nodes, restore.inputs[1])[0])
        if names is None or names.op != "Const":
            raise TfImportError(f"{path}: the tensor names of '{restore.name}' are not a "
                                "constant")
        keys = [k.decode() for k in names.attrs["value"].tensor.string_val]
        if index >= len(keys) or keys[index] not in bundle:
            raise TfImportError(f"{path}: variable '{var.name}' is restored from a tensor the "
                                "checkpoint does not hold")
        var.value = bundle[keys[index]]
    missing = {_shared_name(n): n for n in nodes.values()
               if n.op == "VarHandleOp" and n.value is None}
    if missing and objects.nodes:
        keys = _checkpoint_keys(prefix)
        for index, obj in enumerate(objects.nodes):
            var = missing.get(obj.variable.name) if obj.HasField("variable") else None
            if var is not None and keys.get(index) in bundle:
                var.value = bundle[keys[index]]


def _shared_name(node: TfNode) -> str:
    shared = node.attrs["shared_name"].s.decode() if "shared_name" in node.attrs else ""
    return shared or node.name


def _checkpoint_keys(prefix: str) -> dict[int, str]:
    """{object graph node id: the checkpoint key of its VARIABLE_VALUE} from the
    checkpoint's _CHECKPOINTABLE_OBJECT_GRAPH (empty if it has none)."""
    raw = read_string(prefix, "_CHECKPOINTABLE_OBJECT_GRAPH")
    if raw is None:
        return {}
    graph = _parse(TrackableObjectGraph(), raw, f"{prefix}.index", "TrackableObjectGraph")
    return {i: a.checkpoint_key for i, node in enumerate(graph.nodes)
            for a in node.attributes if a.name == "VARIABLE_VALUE"}


def through_identity(nodes: dict[str, TfNode], ref: Ref) -> Ref:
    """`ref`, followed back through Identity and IdentityN (inlined call results)."""
    seen = 0
    while ref[0] in nodes and seen < len(nodes):
        node = nodes[ref[0]]
        if node.op == "Identity" and node.inputs:
            ref = node.inputs[0]
        elif node.op == "IdentityN" and ref[1] < len(node.inputs):
            ref = node.inputs[ref[1]]
        else:
            break
        seen += 1
    return ref


def _tensor_type(info: Any, where: str) -> TensorType | None:
    shape = shape_of(info.tensor_shape)
    if shape is None:
        return None
    return TensorType(tf_dtype(info.dtype, where), shape)


def _signature(meta: Any, key: str | None, path: str) -> Signature:
    names = [k for k in meta.signature_def if not k.startswith("__")]
    if key is None:
        if "serving_default" in meta.signature_def:
            key = "serving_default"
        elif len(names) == 1:
            key = names[0]
        else:
            raise TfImportError(f"{path}: the SavedModel has signatures "
                                f"{', '.join(sorted(names)) or '(none)'}; pick one with "
                                "--signature NAME")
    if key not in meta.signature_def:
        raise TfImportError(f"{path}: no signature '{key}' (it has "
                            f"{', '.join(sorted(names)) or 'none'})")
    sig = meta.signature_def[key]
    result = Signature()
    for name in sorted(sig.inputs):
        info = sig.inputs[name]
        result.feeds.append((name, parse_ref(info.name),
                             _tensor_type(info, f"{path}: signature input '{name}'")))
    for name in sorted(sig.outputs):
        result.fetches.append((name, parse_ref(sig.outputs[name].name)))
    return result


def _saved_model(folder: str, signature: str | None) -> TfGraph:
    path = os.path.join(folder, "saved_model.pb")
    if not os.path.isfile(path):
        raise TfImportError(f"{folder}: a directory without saved_model.pb (flowc reads "
                            "SavedModel directories; saved_model.pbtxt is not supported)")
    saved = _parse(SavedModel(), _read(path), path, "SavedModel")
    if not saved.meta_graphs:
        raise TfImportError(f"{path}: the SavedModel has no meta graph")
    meta = next((m for m in saved.meta_graphs if "serve" in m.meta_info_def.tags),
                saved.meta_graphs[0])
    sig = _signature(meta, signature, path)
    functions = _library(meta.graph_def)
    flat = _Flattener(functions, path)
    flat.add_graph(meta.graph_def.node)
    _restored_values(flat.nodes, os.path.join(folder, "variables", "variables"), path,
                     meta.object_graph_def)
    return TfGraph(path, flat.nodes, sig, functions)


def load_graph(path: str | os.PathLike, signature: str | None = None) -> TfGraph:
    """The flat graph of a frozen GraphDef file or a SavedModel directory."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return _saved_model(path, signature)
    if signature is not None:
        raise TfImportError(f"{path}: --signature picks a SavedModel's signature; a GraphDef "
                            "has none (use --feed/--fetch)")
    graph_def = _parse(GraphDef(), _read(path), path, "GraphDef")
    if not graph_def.node:
        raise TfImportError(f"{path}: not a GraphDef (no nodes; truncated or another format)")
    functions = _library(graph_def)
    flat = _Flattener(functions, path)
    flat.add_graph(graph_def.node)
    return TfGraph(path, flat.nodes, None, functions)


def _library(graph_def: Any) -> dict[str, Any]:
    return {f.signature.name: f for f in graph_def.library.function}


def const_array(node: TfNode, where: str) -> np.ndarray:
    """A Const node's value."""
    tensor = node.attrs["value"].tensor
    if tensor.dtype == DT_STRING:
        raise TfImportError(f"{where}: a string constant (flowc has no string tensors)")
    return to_array(tensor, where)
