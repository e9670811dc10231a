"""The ONNX importer: an ONNX model as a flowc IR graph.

Contract:
- `import_onnx(path_or_model)` returns a verified Graph. Graph inputs that are not
  initializers become inputs (`dim_param` becomes a symbolic dim, a missing dim `?`);
  initializers become named `constant` nodes; ONNX node names are kept as node names, and
  the model file as the location.
- The model file and its external data are read by `onnx_external` (regular files only,
  sizes checked before reading, external data confined to the model's folder); a model
  given as a ModelProto must carry its data (an external tensor in it is refused). onnx's
  own refusals (`ValidationError`) and running out of memory are one-line errors too.
- Models of opset 13 and newer import as they are; older ones are first converted to
  opset 13 with `onnx.version_converter` (an error names the ops it could not convert);
  opset-8 Scans, which it converts wrongly, become Loops over their batch (`onnx_scan8`).
- Nodes convert through `onnx_nodes.CONVERTERS`, else straight onto the registry op that
  names them (`OpDef.onnx`); com.microsoft's quantized ops (QLinearAdd, ...) through
  `onnx_quant.MS_CONVERTERS` and `onnx_quant_gemm.MS_GEMM_CONVERTERS` (QGemm, ...),
  ai.onnx.preview.training's optimizers (Adam, ...) and ai.onnx.ml's ops through
  `onnx_nodes.OTHER_DOMAINS`. An op with neither that has a function body (a standard
  function op from `onnx.defs`, or a model-local function) is inlined through its body.
- Shape arithmetic on known values (small integer results of constants, `shape`/`size` of
  static types) is folded into constants as it is imported (`onnx_fold`), so the ops
  whose result rank depends on such values (Reshape, ConstantOfShape, Expand ...) get
  static types.
- If/Loop bodies become closed flowc bodies: the outer values they read become explicit
  operands (see `onnx_nodes`), except small integer and bool constants (at most
  BIND_MAX_ELEMENTS elements: axes, shapes), which are copied into the body so its types
  are as static (a float one, perhaps a weight training will update, stays an operand).
- Sequences and optionals are resolved at import (`onnx_sequence`): `bind` maps graph
  input names to the values the model will be fed (as `onnx.backend` feeds them: a list of
  arrays for a sequence, None for an empty optional). A sequence input of n tensors becomes
  the graph inputs `name.0` .. `name.{n-1}` (typed as fed), a present optional the input
  `name` (or, holding a sequence, as a sequence), an empty one nothing; bound int and bool
  inputs of at most BIND_MAX_ELEMENTS elements are known at import (positions, split
  sizes, trip counts, conditions), their values baked in. A sequence graph output becomes
  outputs `name.0` ...; `ImportedOnnx.forms` says how to reassemble them.
- Every unsupported op (bodies included) is reported in one error listing each offending
  node with its op and opset, before anything is built. Any other problem names the file,
  node and op.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from flowc.frontend import custom_ops
from flowc.frontend.onnx_attrs import (
    OnnxImportError,
    node_attrs,
    quoted,
    resolve_refs,
    tensor_type,
    to_array,
)
from flowc.frontend.onnx_external import load_external, read_model
from flowc.frontend.onnx_fold import make_folded
from flowc.frontend.onnx_functions import DEFAULT_DOMAINS, Functions
from flowc.frontend.onnx_nodes import NodeContext, converter, is_supported, takes_structured
from flowc.frontend.onnx_rules import check_no_stray_refs, check_opset, check_unique
from flowc.frontend.onnx_scan8 import mark_scan8, rewrite_scan8
from flowc.frontend.onnx_sequence import Opt, Seq, is_structured
from flowc.ir import Graph, Node, Tensor, TensorType, Value, dtype
from flowc.ir.build import const_value, make_node
from flowc.ir.errors import FlowcError
from flowc.ir.types import bf16, f16, f32
from flowc.ir.verifier import verify

__all__ = ["MIN_OPSET", "ImportedOnnx", "OnnxImportError", "import_onnx", "import_onnx_model",
           "import_onnx_with_values", "unsupported_nodes"]

MIN_OPSET = 13
# function ops whose f16/bf16 operands are computed in f32 (onnxruntime's kernels do; the
# f16 roundings between the steps of their bodies miss ONNX's reference results)
WIDENED_FUNCTIONS = frozenset({"Attention"})
BIND_MAX_ELEMENTS = 64  # bound int/bool inputs up to this size are known at import
Form = str | list[str] | None  # a graph output: one output, a sequence's outputs, empty


def _load(model: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    if isinstance(model, onnx.ModelProto):
        return model, "<model>"
    path = os.fspath(model)
    proto = read_model(path)
    load_external(proto, path)
    return proto, path


def _opset(imports: Sequence[onnx.OperatorSetIdProto]) -> int:
    for entry in imports:
        if entry.domain in DEFAULT_DOMAINS:
            return entry.version
    return 0


def _upgrade(proto: onnx.ModelProto, path: str) -> onnx.ModelProto:
    """`proto` at opset >= MIN_OPSET, converting older models with onnx.version_converter
    (a model importing no default-domain opset, such as one of training optimizers only,
    has nothing to convert)."""
    opset = _opset(proto.opset_import)
    check_opset(opset, path)
    check_no_stray_refs(proto.graph, path)
    if opset >= MIN_OPSET or all(e.domain not in DEFAULT_DOMAINS for e in proto.opset_import):
        return proto
    scan8: set[str] = set()
    if opset < 9:
        proto, scan8 = mark_scan8(proto, path)
    try:
        converted = onnx.version_converter.convert_version(proto, MIN_OPSET)
    except Exception as exc:  # the converter raises RuntimeError and ValueError alike
        missing = unsupported_nodes(proto, path)
        if missing:  # ops neither onnx nor flowc knows: say so rather than why conversion failed
            raise _unsupported(path, missing) from None
        lines = str(exc).strip().splitlines()
        raise OnnxImportError(f"{path}: opset {opset} is older than {MIN_OPSET} and "
                              "onnx.version_converter cannot convert "
                              f"{', '.join(_unconvertible(proto)) or 'it'}: "
                              f"{lines[0] if lines else repr(exc)}") from None
    rewrite_scan8(converted, proto, scan8)
    return converted


def _unconvertible(proto: onnx.ModelProto) -> list[str]:
    """The nodes the version converter fails on, each tried alone in a one-node model."""
    known = {v.name: v for v in [*proto.graph.input, *proto.graph.value_info,
                                 *proto.graph.output]}
    culprits = []
    for i, node in enumerate(proto.graph.node):
        inputs = [known.get(n) or onnx.ValueInfoProto(name=n) for n in node.input if n]
        outputs = [known.get(n) or onnx.ValueInfoProto(name=n) for n in node.output if n]
        single = helper.make_model(helper.make_graph([node], "node", inputs, outputs),
                                   opset_imports=proto.opset_import)
        try:
            onnx.version_converter.convert_version(single, MIN_OPSET)
        except Exception:  # as in _upgrade
            culprits.append(f"node '{node.name or f'#{i}'}' ({node.op_type})")
    return culprits



def unsupported_nodes(model: onnx.ModelProto, path: str = "<model>") -> list[str]:
    """One line per node (bodies included) whose op flowc can neither convert nor inline;
    OnnxImportError (naming `path`) for recursive model-local functions."""
    functions = Functions(model, path)
    opset = _opset(model.opset_import)
    lines: list[str] = []

    def visit(nodes: Sequence[onnx.NodeProto], prefix: str) -> None:
        for i, node in enumerate(nodes):
            name = f"{prefix}{node.name or f'#{i}'}"
            known = (is_supported(node.op_type, node.domain)
                     or custom_ops.lookup(node.domain, node.op_type) is not None)
            if not known and not functions.has_body(node, opset):
                domain = node.domain or "ai.onnx"
                lines.append(f"  node '{name}': {domain}.{node.op_type} (opset {opset})")
            elif not known:
                visit(functions.fixed_body(node, opset), f"{name}/")
            for attr in node.attribute:
                for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                    visit(g.node, f"{name}/{attr.name}/")

    visit(model.graph.node, "")
    return lines


class _Scope:
    """One flowc graph being built from one ONNX graph: its names, and for a body the
    outer values it reads (each becomes a body input, in first-use order; a small integer
    or bool constant is copied in instead)."""

    def __init__(self, graph: Graph, parent: _Scope | None, where: str = ""):
        self.graph = graph
        self.parent = parent
        self.env: dict[str, Any] = {}  # a Value, or a Seq or Opt (onnx_sequence)
        self.captures: list[Value] = []
        self.used: set[str] = set()
        self.outer: _Scope | None = None  # an in-line body's scope reads the enclosing one's
        self.where = where

    def inline(self) -> _Scope:
        """A scope for a body imported in line: new names, its own inputs, outer reads."""
        inner = _Scope(self.graph, None, self.where)
        inner.used, inner.outer = self.used, self
        return inner

    def unique(self, name: str) -> str:
        """ONNX names need not be unique across nodes and tensors; flowc's are."""
        candidate, k = name, 1
        while candidate in self.used:
            candidate, k = f"{name}_{k}", k + 1
        self.used.add(candidate)
        return candidate

    def lookup(self, name: str) -> Any:
        if name in self.env:
            return self.env[name]
        if self.outer is not None:
            return self.outer.lookup(name)
        outer = self.parent.lookup(name) if self.parent is not None else None
        if outer is None:
            return None
        if is_structured(outer):
            raise OnnxImportError(f"{self.where}: body '{self.graph.name}' reads sequence or "
                                  f"optional {quoted(name)}: flowc resolves those at import, "
                                  "so only in bodies imported in line (an If whose "
                                  "condition, a Loop whose trip count is known at import)")
        known = const_value(outer)
        if (known is not None and known.size <= BIND_MAX_ELEMENTS
                and known.dtype.kind in "biu"):  # axes, shapes: copied in, so the body's
            # types use them as the outer graph's do (never floats: a weight read in a
            # body must stay the outer value, which training makes a variable)
            value = self.graph.append(make_node("constant", [], {"value": Tensor(known)},
                                                name=self.unique(name), loc=outer.node.loc)).out()
            self.env[name] = value
            return value
        value = self.graph.add_input(self.unique(name), outer.type)
        self.env[name] = value
        self.captures.append(outer)
        return value


class _Importer:
    def __init__(self, proto: onnx.ModelProto, path: str, bind: dict[str, Any] | None = None):
        self.proto = proto
        self.path = path
        self.bind = bind
        self.bound: dict[Node, np.ndarray] = {}  # inputs whose bound values are known
        self.forms: dict[str, Form] = {}
        self.opset = _opset(proto.opset_import)
        self.functions = Functions(proto, path)
        self.folded: set[Node] = set()  # constants that folding made (dropped if unused)

    # ---- graphs -----------------------------------------------------------------------
    def main(self) -> tuple[Graph, dict[str, Value]]:
        onnx_graph = self.proto.graph
        check_unique(onnx_graph, self.path)
        scope = _Scope(Graph(onnx_graph.name.replace(" ", "_") or "main"), None, self.path)
        initializers = {t.name: t for t in onnx_graph.initializer}
        declared = {i.name: i for i in onnx_graph.input}
        for info in onnx_graph.input:
            if info.name not in initializers:
                scope.env[info.name] = self._input(scope, info)
        for name, tensor in initializers.items():
            array = to_array(tensor, f"{self.path}: initializer {quoted(name)}")
            if name in declared:
                self._check_initializer(name, array, declared[name])
            scope.env[name] = self._constant(scope, array, name)
        self._nodes(onnx_graph.node, scope, None, "")
        return self._outputs(onnx_graph, scope), scope.env

    def _input(self, scope: _Scope, info: onnx.ValueInfoProto) -> Any:
        """A graph input: a tensor input, or as bound (see the module docstring)."""
        kind = info.type.WhichOneof("value")
        if self.bind is None or info.name not in self.bind:
            if kind != "tensor_type" and self.bind is not None:
                raise OnnxImportError(f"{self.path}: input {quoted(info.name)} is a {kind} "
                                      "and is not bound to a value")
            return scope.graph.add_input(scope.unique(info.name),
                                         tensor_type(info, f"{self.path}: input"))
        fed = self.bind[info.name]
        if kind == "tensor_type":
            value = scope.graph.add_input(scope.unique(info.name),
                                          tensor_type(info, f"{self.path}: input"))
            array = np.asarray(fed)
            if array.dtype.kind in "biu" and array.size <= BIND_MAX_ELEMENTS:
                self.bound[value.node] = array
            return value
        if kind not in ("sequence_type", "optional_type"):
            raise OnnxImportError(f"{self.path}: input {quoted(info.name)} is of kind {kind}, "
                                  "which flowc does not import")
        if fed is None:
            if kind != "optional_type":
                raise OnnxImportError(f"{self.path}: input {quoted(info.name)} is a sequence, "
                                      "bound to None")
            return Opt(None)
        value = (Seq(tuple(self._bound_tensor(scope, f"{info.name}.{i}", a)
                           for i, a in enumerate(fed)))
                 if isinstance(fed, list | tuple) else self._bound_tensor(scope, info.name, fed))
        return Opt(value) if kind == "optional_type" else value

    def _bound_tensor(self, scope: _Scope, name: str, fed: Any) -> Value:
        array = np.asarray(fed)
        try:
            t = TensorType(dtype(array.dtype), array.shape)
        except TypeError as exc:
            raise OnnxImportError(f"{self.path}: input {quoted(name)}: {exc}") from None
        return scope.graph.add_input(scope.unique(name), t)

    def known(self, value: Value | None) -> np.ndarray | None:
        """`value`'s value where import knows it: a constant, or a bound input's."""
        if value is None or is_structured(value):
            return None
        found = const_value(value)
        return self.bound.get(value.node) if found is None else found

    def _check_initializer(self, name: str, array: np.ndarray, info: onnx.ValueInfoProto):
        want = tensor_type(info, f"{self.path}: input")
        got = TensorType(dtype(array.dtype), array.shape)
        if want.dtype != got.dtype or want.rank != got.rank or any(
                isinstance(d, int) and d != a for d, a in zip(want.shape, got.shape,
                                                              strict=True)):
            raise OnnxImportError(f"{self.path}: initializer {quoted(name)} is {got} but the "
                                  f"graph declares it as {want}")

    def _outputs(self, onnx_graph: onnx.GraphProto, scope: _Scope) -> Graph:
        for info in onnx_graph.output:
            value = scope.lookup(info.name)
            if value is None:
                raise OnnxImportError(f"{self.path}: graph output {quoted(info.name)} is not "
                                      "produced")
            if is_structured(value) and scope.parent is not None:
                raise OnnxImportError(f"{scope.where}: body '{scope.graph.name}' yields "
                                      f"sequence or optional {quoted(info.name)}: flowc "
                                      "resolves those at import, so only from bodies imported "
                                      "in line (an If whose condition, a Loop whose trip "
                                      "count is known at import)")
            form = self._add_output(scope, info.name, value)
            if scope.parent is None:
                self.forms[info.name] = form
        graph = scope.graph
        used = {v.node for n in graph.nodes for v in n.inputs if v is not None}
        used |= {c for n in graph.nodes for c in n.ctrl} | {v.node for _, v in graph.outputs}
        graph.nodes = [n for n in graph.nodes if n not in self.folded or n in used]
        return graph

    def _add_output(self, scope: _Scope, name: str, value: Any) -> Form:
        """Add `value` as the graph output(s) `name`; its form (see `Form`)."""
        if isinstance(value, Opt):
            return None if value.value is None else self._add_output(scope, name, value.value)
        if isinstance(value, Seq):
            names = [f"{name}.{i}" for i in range(len(value.items))]
            for n, v in zip(names, value.items, strict=True):
                scope.graph.add_output(n, v)
            return names
        scope.graph.add_output(name, value)
        return name

    def inline_body(self, scope: _Scope, onnx_graph: onnx.GraphProto, args: Sequence[Any],
                    refs: dict[str, onnx.AttributeProto] | None, prefix: str) -> list[Any]:
        """Import a body's nodes in line, into `scope`'s graph, its inputs bound to `args`
        (Values, Seqs or Opts); its outputs."""
        check_unique(onnx_graph, self.path)
        if len(onnx_graph.input) != len(args):
            raise OnnxImportError(f"{self.path}: body '{onnx_graph.name}' declares "
                                  f"{len(onnx_graph.input)} inputs, expected {len(args)}")
        inner = scope.inline()
        for info, arg in zip(onnx_graph.input, args, strict=True):
            inner.env[info.name] = arg
        for t in onnx_graph.initializer:
            if t.name not in inner.env:
                array = to_array(t, f"{self.path}: initializer {quoted(t.name)}")
                inner.env[t.name] = self._constant(inner, array, t.name)
        self._nodes(onnx_graph.node, inner, refs, prefix)
        outputs = [inner.lookup(info.name) for info in onnx_graph.output]
        if any(v is None for v in outputs):
            raise OnnxImportError(f"{self.path}: body '{onnx_graph.name}' does not produce "
                                  "all its outputs")
        return outputs

    def body(self, parent: _Scope, onnx_graph: onnx.GraphProto, formal: Sequence[TensorType],
             refs: dict[str, onnx.AttributeProto] | None) -> tuple[Graph, list[Value]]:
        """A closed flowc body for an If/Loop/Scan graph attribute, and the outer values it
        reads (its trailing inputs). `formal` types the body's declared inputs where ONNX
        leaves their shape out; `refs` are the enclosing function call's attributes (None
        outside any function)."""
        check_unique(onnx_graph, self.path)
        scope = _Scope(Graph(onnx_graph.name.replace(" ", "_") or "body"), parent,
                       parent.where)
        if len(onnx_graph.input) != len(formal):
            raise OnnxImportError(f"{self.path}: body '{onnx_graph.name}' declares "
                                  f"{len(onnx_graph.input)} inputs, expected {len(formal)}")
        for info, fallback in zip(onnx_graph.input, formal, strict=True):
            t = self._body_input_type(info, fallback)
            scope.env[info.name] = scope.graph.add_input(scope.unique(info.name), t)
        for t in onnx_graph.initializer:
            if t.name not in scope.env:
                array = to_array(t, f"{self.path}: initializer {quoted(t.name)}")
                scope.env[t.name] = self._constant(scope, array, t.name)
        self._nodes(onnx_graph.node, scope, refs, "")
        return self._outputs(onnx_graph, scope), scope.captures

    def _body_input_type(self, info: onnx.ValueInfoProto, operand: TensorType) -> TensorType:
        """A body input's declared type; where ONNX leaves the shape out, any shape of the
        operand's rank (a loop-carried value may change shape between iterations)."""
        declared = info.type.tensor_type
        if declared.elem_type and declared.HasField("shape"):
            return tensor_type(info, f"{self.path}: body input")
        return TensorType(operand.dtype, (None,) * operand.rank)

    # ---- nodes ------------------------------------------------------------------------
    def _constant(self, scope: _Scope, array: np.ndarray, name: str | None = None) -> Value:
        node = make_node("constant", [], {"value": Tensor(array)},
                         name=scope.unique(name or "Constant"), loc=self.path)
        return scope.graph.append(node).out()

    def _nodes(self, nodes: Sequence[onnx.NodeProto], scope: _Scope,
               refs: dict[str, onnx.AttributeProto] | None, prefix: str) -> None:
        for i, onnx_node in enumerate(nodes):
            self._node(onnx_node, i, scope, refs, prefix)

    def _node(self, onnx_node: onnx.NodeProto, i: int, scope: _Scope,
              refs: dict[str, onnx.AttributeProto] | None, prefix: str) -> None:
        """Import one node; `refs` None outside a function body (where `_upgrade` has
        refused attribute references)."""
        base = f"{prefix}{onnx_node.name or f'{onnx_node.op_type}_{i}'}"
        where = f"{self.path}: node {quoted(base)} ({onnx_node.op_type})"
        onnx_node = resolve_refs(onnx_node, refs or {})
        inputs: list[Any] = []
        for n in onnx_node.input:
            value = scope.lookup(n) if n else None
            if n and value is None:
                raise OnnxImportError(f"{where}: input {quoted(n)} is not produced by any "
                                      "node")
            inputs.append(value)
        while inputs and inputs[-1] is None:
            inputs.pop()
        custom = custom_ops.lookup(onnx_node.domain, onnx_node.op_type)
        known = is_supported(onnx_node.op_type, onnx_node.domain) or custom is not None
        if not known and not self.functions.has_body(onnx_node, self.opset):
            # only a function body's own nodes get here: the model's were checked up front
            domain = onnx_node.domain or "ai.onnx"
            raise _unsupported(self.path, [f"  node '{base}': {domain}.{onnx_node.op_type} "
                                           f"(opset {self.opset})"])
        if not known:
            results = self._inline(onnx_node, inputs, scope, base, where)
        else:
            if any(is_structured(v) for v in inputs) and not takes_structured(
                    onnx_node.op_type, onnx_node.domain):
                raise OnnxImportError(f"{where}: an operand is a sequence or optional; "
                                      f"{onnx_node.op_type} takes tensors")
            scope.where = where
            ctx = NodeContext(
                onnx_node, inputs, node_attrs(onnx_node, where), where,
                emit=lambda op, operands, attrs: self._emit(scope, op, operands, attrs, base,
                                                            where),
                constant=lambda array: self._constant(scope, array, f"{base}/const"),
                body=lambda g, formal: self.body(scope, g, formal, refs),
                opset=self.opset,
                known=self.known,
                inline=lambda g, args, tag="": self.inline_body(scope, g, args, refs,
                                                                f"{base}/{tag}"))
            try:
                results = (custom_ops.convert(ctx, custom, self.declared(onnx_node, where))
                           if custom is not None
                           else converter(onnx_node.op_type, onnx_node.domain)(ctx))
            except OnnxImportError:
                raise
            except (FlowcError, TypeError, ValueError) as exc:
                raise OnnxImportError(f"{where}: {exc}") from None
            except KeyError as exc:   # converters read required attributes by name
                raise OnnxImportError(f"{where}: missing attribute {exc}") from None
        outputs = list(onnx_node.output)
        if any(outputs[len(results):]):
            raise OnnxImportError(f"{where}: flowc computes {len(results)} of its "
                                  f"{len(outputs)} outputs")
        for name, value in zip(outputs, results, strict=False):
            if name in scope.env:
                raise OnnxImportError(f"{where}: output {quoted(name)} is already defined (ONNX "
                                      "graphs define each name once)")
            if name:
                scope.env[name] = value

    def declared(self, node: onnx.NodeProto, where: str) -> list[TensorType | None]:
        """The model's declared static type of each output of `node` (None: none)."""
        infos = {v.name: v for v in [*self.proto.graph.value_info, *self.proto.graph.output]}
        types: list[TensorType | None] = []
        for name in node.output:
            try:
                types.append(tensor_type(infos[name], where) if name in infos else None)
            except (FlowcError, KeyError, ValueError):
                types.append(None)
        return types

    def _emit(self, scope: _Scope, op: str, operands: Sequence[Value | None],
              attrs: dict[str, Any], base: str, where: str) -> Sequence[Value]:
        node, folded = make_folded(op, operands, attrs, OnnxImportError, where,
                                   name=scope.unique(base), loc=self.path)
        if folded is not None:
            values = [self._constant(scope, array, node.name) for array in folded]
            self.folded.update(v.node for v in values)
            return values
        return scope.graph.append(node).outputs

    def _inline(self, onnx_node: onnx.NodeProto, inputs: list[Value | None], scope: _Scope,
                base: str, where: str) -> list[Value]:
        """Convert a function op through its body, in the caller's graph (those of
        WIDENED_FUNCTIONS on f16/bf16 operands: in f32, the results cast back)."""
        missing = self.functions.missing_inputs(onnx_node, self.opset)
        if missing:
            raise OnnxImportError(f"{where}: required input(s) {', '.join(map(quoted, missing))} "
                                  "missing")
        narrow = {v.type.dtype for v in inputs if v is not None and v.type.dtype in (f16, bf16)}
        widen = onnx_node.op_type in WIDENED_FUNCTIONS and len(narrow) == 1
        if widen:
            inputs = [v if v is None or v.type.dtype not in narrow else
                      self._emit(scope, "cast", [v], {"to": f32}, f"{base}/widened", where)[0]
                      for v in inputs]
        types = [None if v is None else v.type for v in inputs]
        try:
            function, defaults = self.functions.body(onnx_node, self.opset, types)
        except Exception as exc:  # onnx's function builders raise what they like
            raise OnnxImportError(f"{where}: cannot expand its function body: {exc}") from None
        call_refs = {**defaults, **{a.name: a for a in onnx_node.attribute}}
        inner = _Scope(scope.graph, None)
        inner.used = scope.used
        for formal, value in zip(function.input, inputs, strict=False):
            if value is not None:
                inner.env[formal] = value
        self._nodes(function.node, inner, call_refs, f"{base}/")
        results: list[Value | None] = []
        for formal, actual in zip(function.output, onnx_node.output, strict=False):
            value = inner.env.get(formal)
            if value is None and actual:
                raise OnnxImportError(f"{where}: its function body does not produce "
                                      f"'{formal}'")
            results.append(value)
        if widen:
            back = next(iter(narrow))
            results = [v if v is None or v.type.dtype != f32 else
                       self._emit(scope, "cast", [v], {"to": back}, f"{base}/narrowed", where)[0]
                       for v in results]
        return results


def _unsupported(path: str, missing: list[str]) -> OnnxImportError:
    return OnnxImportError(f"{path}: {len(missing)} node(s) use ops flowc does not support:\n"
                           + "\n".join(missing))


def import_onnx(model: str | os.PathLike | onnx.ModelProto) -> Graph:
    """The flowc graph of an ONNX model (see the module docstring)."""
    return import_onnx_with_values(model)[0]


def import_onnx_with_values(model: str | os.PathLike | onnx.ModelProto
                            ) -> tuple[Graph, dict[str, Value]]:
    """`import_onnx`, and the flowc value of each named tensor of the model's main graph
    (for mapping ONNX names onto the IR, as the shape-inference comparison does)."""
    imported = import_onnx_model(model)
    return imported.graph, imported.values


@dataclass(frozen=True)
class ImportedOnnx:
    """An imported model: its graph, the flowc value of each named tensor of its main
    graph, the names of its main graph's initializers (each a `constant` node of that name,
    in the file's order), the path errors name, and the form of each ONNX graph output (its
    flowc output's name; a sequence's list of them; None for an empty optional)."""

    graph: Graph
    values: dict[str, Value]
    initializers: tuple[str, ...]
    path: str
    forms: dict[str, Form]


def import_onnx_model(model: str | os.PathLike | onnx.ModelProto,
                      bind: dict[str, Any] | None = None) -> ImportedOnnx:
    """`import_onnx` with what the training route needs besides the graph (ImportedOnnx);
    `bind`: the fed values sequences resolve against (see the module docstring)."""
    path = "<model>" if isinstance(model, onnx.ModelProto) else os.fspath(model)
    try:
        proto, path = _load(model)
        proto = _upgrade(proto, path)
        missing = unsupported_nodes(proto, path)
        if missing:
            raise _unsupported(path, missing)
        importer = _Importer(proto, path, bind)
        graph, values = importer.main()
        initializers = tuple(t.name for t in proto.graph.initializer)
    except onnx.checker.ValidationError as exc:  # raised by onnx's own checks
        lines = str(exc).strip().splitlines()
        raise OnnxImportError(f"{path}: onnx refuses the model: "
                              f"{lines[0] if lines else type(exc).__name__}") from None
    except MemoryError:
        raise OnnxImportError(f"{path}: out of memory while importing the model") from None
    verify(graph)
    return ImportedOnnx(graph, values, initializers, path, importer.forms)
