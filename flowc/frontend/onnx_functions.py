"""Function bodies for the ONNX importer: model-local functions and the standard function
ops of `onnx.defs` (fixed bodies, and context-dependent ones built for the operand types).

Contract: `Functions(model, path)` refuses recursive model-local functions (see the class),
then answers, per node, whether it has a body at the model's opset (`has_body`), the
required inputs it leaves out (`missing_inputs`), the nodes of a body that does not depend
on operand types (`fixed_body`, for the up-front unsupported-op check), and the body to
inline (`body`), with the schema's attribute defaults that the body's `ref_attr_name`
attributes may refer to.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper

from flowc.frontend.onnx_attrs import OnnxImportError, to_onnx_elem_type
from flowc.ir import TensorType

DEFAULT_DOMAINS = ("", "ai.onnx")


class Functions:
    """Function bodies: the model's own functions, and standard function ops (onnx.defs).
    A model-local function that the model's graph reaches and that calls itself, directly
    or through others, is an OnnxImportError naming the chain of calls."""

    def __init__(self, proto: onnx.ModelProto, path: str = "<model>"):
        self.local = {(f.domain, f.name): f for f in proto.functions}
        cycle = _first_cycle(self.local, _calls(proto.graph.node))
        if cycle:
            names = [f"{d}.{n}" if d else n for d, n in cycle]
            raise OnnxImportError(f"{path}: model-local function {names[0]} calls itself "
                                  f"({' -> '.join(names)}); recursive functions cannot be "
                                  "inlined")

    def has_body(self, node: onnx.NodeProto, opset: int) -> bool:
        if (node.domain, node.op_type) in self.local:
            return True
        schema = self._schema(node, opset)
        return schema is not None and any(v <= opset for v in [
            *schema.function_opset_versions, *schema.context_dependent_function_opset_versions])

    @staticmethod
    def _schema(node: onnx.NodeProto, opset: int):
        if node.domain not in DEFAULT_DOMAINS:
            return None
        try:
            return onnx.defs.get_schema(node.op_type, opset, "")
        except (onnx.defs.SchemaError, TypeError):  # TypeError: an op_type not valid UTF-8
            return None

    def missing_inputs(self, node: onnx.NodeProto, opset: int) -> list[str]:
        """The names of the required inputs (standard function ops) that `node` leaves
        empty or out."""
        schema = None if (node.domain, node.op_type) in self.local else self._schema(node,
                                                                                  opset)
        if schema is None:
            return []
        given = list(node.input)
        return [formal.name for i, formal in enumerate(schema.inputs)
                if formal.option == onnx.defs.OpSchema.FormalParameterOption.Single
                and (i >= len(given) or not given[i])]

    def fixed_body(self, node: onnx.NodeProto, opset: int) -> Sequence[onnx.NodeProto]:
        """The nodes of `node`'s function body where they do not depend on its operand types
        (model-local functions, standard function ops); () for context-dependent ones."""
        local = self.local.get((node.domain, node.op_type))
        if local is not None:
            return local.node
        schema = self._schema(node, opset)
        versions = [v for v in schema.function_opset_versions if v <= opset]
        if not versions:
            return ()
        return onnx.FunctionProto.FromString(
            schema.get_function_with_opset_version(max(versions))).node

    def body(self, node: onnx.NodeProto, opset: int, types: Sequence[TensorType | None]
             ) -> tuple[onnx.FunctionProto, dict[str, onnx.AttributeProto]]:
        """The function body for `node` (its references resolved) and the schema's attribute
        defaults, which its body may refer to."""
        local = self.local.get((node.domain, node.op_type))
        if local is not None:
            return local, {}
        schema = self._schema(node, opset)
        defaults = {name: a.default_value for name, a in schema.attributes.items()
                    if a.default_value.name}
        if any(v <= opset for v in schema.function_opset_versions):
            version = max(v for v in schema.function_opset_versions if v <= opset)
            data = schema.get_function_with_opset_version(version)
        else:
            version = max(v for v in schema.context_dependent_function_opset_versions
                          if v <= opset)
            protos = [_type_proto(t).SerializeToString() for t in types]
            data = schema.get_context_dependent_function_with_opset_version(
                version, node.SerializeToString(), protos)
        return onnx.FunctionProto.FromString(data), defaults


def _calls(nodes: Sequence[onnx.NodeProto]) -> list[tuple[str, str]]:
    """The (domain, op_type) of `nodes` and of the nodes of their graph attributes."""
    found, stack = [], list(nodes)
    while stack:
        node = stack.pop()
        found.append((node.domain, node.op_type))
        for attr in node.attribute:
            for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                stack.extend(g.node)
    return found


def _first_cycle(local: dict[tuple[str, str], onnx.FunctionProto],
                 roots: Sequence[tuple[str, str]]) -> list[tuple[str, str]] | None:
    """A chain of local functions reachable from `roots` that ends where it starts, or None
    (an iterative depth-first search: any depth of calls is fine)."""
    callees = {key: [c for c in dict.fromkeys(_calls(f.node)) if c in local]
               for key, f in local.items()}
    done: set[tuple[str, str]] = set()
    for root in dict.fromkeys(r for r in roots if r in local):
        if root in done:
            continue
        path, on_path, stack = [root], {root}, [iter(callees[root])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                stack.pop()
                continue
            if nxt in on_path:
                return [*path[path.index(nxt):], nxt]
            if nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(callees[nxt]))
    return None


def _type_proto(t: TensorType | None) -> onnx.TypeProto:
    if t is None:
        return onnx.TypeProto()
    return helper.make_tensor_type_proto(to_onnx_elem_type(t.dtype), list(t.shape))
