"""The ONNX importer's per-op conversion table: ONNX node -> flowc nodes.

Contract: `CONVERTERS[op_type](ctx)` converts one ONNX node and returns its result Values,
one per ONNX output (missing trailing ones are allowed; the driver checks the node's named
outputs against them). An op without an entry maps straight onto the registry op whose
`OpDef.onnx` names it, attributes by name (`convert_default`). Entries exist only where
the ONNX encoding differs from the registry's: an attribute that is an operand in newer
opsets, an enum, an output count the registry takes as an attribute, or a body.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from flowc.frontend.onnx_attrs import OnnxImportError, onnx_dtype
from flowc.frontend.onnx_cache_ops import convert_tensor_scatter
from flowc.frontend.onnx_compose import CONVERTERS as COMPOSED_CONVERTERS
from flowc.frontend.onnx_deform_conv import convert_deform_conv
from flowc.frontend.onnx_functions import DEFAULT_DOMAINS
from flowc.frontend.onnx_grid_sample import convert_grid_sample
from flowc.frontend.onnx_linalg import convert_det
from flowc.frontend.onnx_ml import ML_CONVERTERS, ML_DOMAIN
from flowc.frontend.onnx_optim import TRAINING_CONVERTERS, TRAINING_DOMAIN
from flowc.frontend.onnx_quant import CONVERTERS as QUANT_CONVERTERS
from flowc.frontend.onnx_quant import MS_CONVERTERS
from flowc.frontend.onnx_quant_gemm import MS_GEMM_CONVERTERS
from flowc.frontend.onnx_resize import convert_resize
from flowc.frontend.onnx_rnn import convert_recurrent
from flowc.frontend.onnx_roi_align import convert_roi_align
from flowc.frontend.onnx_scan import convert_scan
from flowc.frontend.onnx_scatter import CONVERTERS as SCATTER_CONVERTERS
from flowc.frontend.onnx_signal import convert_dft, convert_mel_weight_matrix
from flowc.frontend.onnx_stable import CONVERTERS as STABLE_CONVERTERS
from flowc.frontend.onnx_tfidf import convert_tfidf
from flowc.ir import Graph, TensorType, Value
from flowc.ir.build import const_value
from flowc.ir.graph import INPUT_OP, Node
from flowc.ir.ops import ONNX_OPS
from flowc.ir.types import bool_, i64


@dataclass
class NodeContext:
    """What a converter sees: the ONNX node, its operands (None where absent), its
    attributes as flowc values, how many outputs the node names, and the driver's hooks."""

    node: onnx.NodeProto
    inputs: list[Value | None]
    attrs: dict[str, Any]
    where: str
    emit: Callable[[str, Sequence[Value | None], dict[str, Any]], Sequence[Value]]
    constant: Callable[[np.ndarray], Value]
    body: Callable[[onnx.GraphProto, Sequence[TensorType]], tuple[Graph, list[Value]]]
    splice: Callable[[Graph, Sequence[Value]], list[Value]]
    opset: int = 0  # the model's default-domain opset (for ops whose form changed)

    @property
    def num_outputs(self) -> int:
        names = list(self.node.output)
        while names and not names[-1]:
            names.pop()
        return len(names)

    def fail(self, message: str) -> None:
        raise OnnxImportError(f"{self.where}: {message}")


def convert_default(ctx: NodeContext) -> Sequence[Value]:
    return ctx.emit(ONNX_OPS[ctx.node.op_type].name, ctx.inputs, ctx.attrs)


def _cast(ctx: NodeContext) -> Sequence[Value]:
    ctx.attrs["to"] = onnx_dtype(ctx.attrs["to"], f"{ctx.where}: attribute 'to'")
    return ctx.emit("cast", ctx.inputs, ctx.attrs)


def _bitcast(ctx: NodeContext) -> Sequence[Value]:
    ctx.attrs["to"] = onnx_dtype(ctx.attrs["to"], f"{ctx.where}: attribute 'to'")
    return ctx.emit("bitcast", ctx.inputs, ctx.attrs)


def _cast_like(ctx: NodeContext) -> Sequence[Value]:
    x, like = ctx.inputs
    return ctx.emit("cast", [x], {**ctx.attrs, "to": like.type.dtype})


_CONSTANT_FORMS = {"value_float": np.float32, "value_floats": np.float32,
                   "value_int": np.int64, "value_ints": np.int64}


def _constant(ctx: NodeContext) -> Sequence[Value]:
    if len(ctx.attrs) != 1:
        ctx.fail(f"expected one value attribute, found {sorted(ctx.attrs)}")
    (key, value), = ctx.attrs.items()
    if key not in ("value", *_CONSTANT_FORMS):
        ctx.fail(f"attribute '{key}' is not imported (value, value_float(s), value_int(s) are)")
    return [ctx.constant(np.asarray(value, dtype=_CONSTANT_FORMS.get(key)))]


def _constant_of_shape(ctx: NodeContext) -> Sequence[Value]:
    if "value" in ctx.attrs:
        ctx.attrs["value"] = np.asarray(ctx.attrs["value"])
    return convert_default(ctx)


def _reduce(ctx: NodeContext) -> Sequence[Value]:
    """Reduce ops before opset 18 (ReduceSum before 13) take `axes` as an attribute."""
    if "axes" in ctx.attrs:
        axes = ctx.constant(np.asarray(ctx.attrs.pop("axes"), dtype=np.int64))
        ctx.inputs = [ctx.inputs[0], axes]
    return convert_default(ctx)


def _scalar_axes(ctx: NodeContext) -> Sequence[Value]:
    """Squeeze/Unsqueeze axes are 1-D; onnx's own function bodies pass a scalar too."""
    if len(ctx.inputs) > 1 and ctx.inputs[1] is not None and ctx.inputs[1].type.rank == 0:
        one = ctx.constant(np.array([1], np.int64))
        ctx.inputs[1] = ctx.emit("reshape", [ctx.inputs[1], one], {})[0]
    return convert_default(ctx)


def _split(ctx: NodeContext) -> Sequence[Value]:
    """Split before opset 18 has no num_outputs: equal parts, one per named output."""
    if (len(ctx.inputs) < 2 or ctx.inputs[1] is None) and "num_outputs" not in ctx.attrs:
        ctx.attrs["num_outputs"] = len(ctx.node.output)
    return convert_default(ctx)


def _with_output_count(ctx: NodeContext) -> Sequence[Value]:
    """Ops whose optional extra outputs the registry computes when `num_outputs` asks."""
    ctx.attrs["num_outputs"] = max(ctx.num_outputs, 1)
    return convert_default(ctx)


def _sum(ctx: NodeContext) -> Sequence[Value]:
    """ONNX Sum: a broadcasting add over one or more operands."""
    if not ctx.inputs or any(v is None for v in ctx.inputs):
        ctx.fail("Sum needs one or more operands, none of them absent")
    total = ctx.inputs[0]
    for v in ctx.inputs[1:]:
        total = ctx.emit("add", [total, v], {})[0]
    return [total] if len(ctx.inputs) > 1 else ctx.emit("identity", [total], {})


def _mean(ctx: NodeContext) -> Sequence[Value]:
    """ONNX Mean: Sum, divided by the operand count (in the operands' dtype)."""
    total, = _sum(ctx)
    count = ctx.constant(np.array(len(ctx.inputs), dtype=total.type.dtype.np))
    return ctx.emit("div", [total, count], {})


def _dropout(ctx: NodeContext) -> Sequence[Value]:
    """ONNX Dropout for inference: the identity, and an all-true mask. Training mode with a
    nonzero ratio draws random numbers, which flowc does not do."""
    x, ratio, training = [*ctx.inputs, None, None][:3]
    training_value, ratio_value = const_value(training), const_value(ratio)
    if training is not None and (training_value is None or bool(training_value)) and (
            ratio is None or ratio_value is None or float(ratio_value) != 0.0):
        ctx.fail("random dropout (training mode with a nonzero or unknown ratio) is not "
                 "supported; flowc imports Dropout for inference only")
    y = ctx.emit("identity", [x], {})
    if ctx.num_outputs < 2:
        return y
    shape = ctx.emit("shape", [x], {})[0]
    return [*y, *ctx.emit("constant_of_shape", [shape], {"value": np.array([True])})]


def _if(ctx: NodeContext) -> Sequence[Value]:
    """ONNX If bodies read outer values implicitly; flowc bodies are closed, so every value
    either branch reads becomes an operand, and both branches take all of them. A condition
    known at import (often folded shape arithmetic) imports only the branch it takes, in
    line: the other branch never runs and need not even be well typed for these shapes."""
    known = const_value(ctx.inputs[0])
    if known is not None:
        branch = "then_branch" if bool(np.asarray(known).reshape(-1)[0]) else "else_branch"
        body, captures = ctx.body(ctx.attrs[branch], [])
        return ctx.splice(body, captures)
    then_body, then_caps = ctx.body(ctx.attrs["then_branch"], [])
    else_body, else_caps = ctx.body(ctx.attrs["else_branch"], [])
    operands = list(dict.fromkeys([*then_caps, *else_caps]))
    for body, caps in ((then_body, then_caps), (else_body, else_caps)):
        by_value = dict(zip(caps, body.inputs, strict=True))
        inputs: list[Node] = []
        for v in operands:
            inputs.append(by_value.get(v) or _unused_input(body, inputs, v))
        body.inputs = inputs
    return ctx.emit("if", [ctx.inputs[0], *operands],
                    {"then_branch": then_body, "else_branch": else_body})


def _unused_input(body: Graph, new_inputs: list[Node], value: Value) -> Node:
    """A body input for an operand this body does not read (both branches take all)."""
    taken = {n.name for n in [*body.all_nodes(), *new_inputs]}
    name, k = "unused", 0
    while name in taken:
        name, k = f"unused_{k}", k + 1
    return Node(INPUT_OP, (), None, (value.type,), name=name)


def _loop(ctx: NodeContext) -> Sequence[Value]:
    """ONNX Loop: body (iteration, cond, carried...) -> (cond, carried..., scans...); the
    values the body reads from outside become trailing operands (`captures`)."""
    m, cond, *carried = ctx.inputs + [None] * (2 - len(ctx.inputs))
    formal = [TensorType(i64, ()), TensorType(bool_, ())] + [v.type for v in carried]
    body, captures = ctx.body(ctx.attrs["body"], formal)
    return ctx.emit("loop", [m, cond, *carried, *captures],
                    {"body": body, "captures": len(captures)})


CONVERTERS: dict[str, Callable[[NodeContext], Sequence[Value]]] = {
    "Cast": _cast,
    "BitCast": _bitcast,
    "CastLike": _cast_like,
    "Constant": _constant,
    "ConstantOfShape": _constant_of_shape,
    **{op: _reduce for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                              "ReduceProd")},
    "Split": _split,
    "Sum": _sum,
    "Mean": _mean,
    "Dropout": _dropout,
    "Squeeze": _scalar_axes,
    "Unsqueeze": _scalar_axes,
    "LayerNormalization": _with_output_count,
    "MaxPool": _with_output_count,
    "If": _if,
    "Loop": _loop,
    "Scan": convert_scan,
    **{op: convert_recurrent for op in ("LSTM", "GRU", "RNN")},
    **STABLE_CONVERTERS,   # ReduceLogSumExp, ReduceL2 without over/underflow
    **COMPOSED_CONVERTERS,  # issue [13]: ops as compositions of registry ops
    "Resize": convert_resize,
    "DFT": convert_dft,
    "MelWeightMatrix": convert_mel_weight_matrix,
    "GridSample": convert_grid_sample,
    "TensorScatter": convert_tensor_scatter,
    "Det": convert_det,
    "RoiAlign": convert_roi_align,
    "DeformConv": convert_deform_conv,
    "TfIdfVectorizer": convert_tfidf,
    **SCATTER_CONVERTERS,  # GatherND, ScatterND, ScatterElements
    **QUANT_CONVERTERS,    # QuantizeLinear, MatMulInteger, QLinearConv, ...: onnx_quant.py
}


# the converters of ai.onnx.preview.training's optimizers and ai.onnx.ml's ops
OTHER_DOMAINS = {TRAINING_DOMAIN: TRAINING_CONVERTERS, ML_DOMAIN: ML_CONVERTERS}


def is_supported(op_type: str, domain: str = "") -> bool:
    """Whether the table or the registry converts `op_type` of `domain` (the default one,
    com.microsoft's quantized ops, or those of OTHER_DOMAINS: `converter`)."""
    if domain == "com.microsoft":
        return op_type in MS_CONVERTERS or op_type in MS_GEMM_CONVERTERS
    if domain in OTHER_DOMAINS:
        return op_type in OTHER_DOMAINS[domain]
    return domain in DEFAULT_DOMAINS and (op_type in CONVERTERS or op_type in ONNX_OPS)


def converter(op_type: str, domain: str):
    """The converter of a supported node (`convert_default` for a registry op)."""
    if domain == "com.microsoft":
        return MS_CONVERTERS.get(op_type) or MS_GEMM_CONVERTERS[op_type]
    if domain in OTHER_DOMAINS:
        return OTHER_DOMAINS[domain][op_type]
    return CONVERTERS.get(op_type, convert_default)
