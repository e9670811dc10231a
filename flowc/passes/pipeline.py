"""Pipeline strings: `cse,prune{keep_stateful=false}`.

Grammar: passes separated by `,`; each is a registered pass name, optionally followed by
`{option=value,...}` where each option is one of the pass's dataclass fields and the value
is read by the field's type (`true`/`false`, an int, a float, or a bare string). A whole
string may also be the name of a default pipeline in `PIPELINES`. `print_pipeline` writes
the canonical form, every option of a pass with options spelled out (as MLIR does; a field
with `metadata={"print_default": False}` only when it differs from its default), so
`print_pipeline(parse_pipeline(s)) == s` for every canonical `s` and printing is a fixed
point for any `s`. Unknown passes and options raise FlowcError listing the known ones.
Fields with `metadata={"option": False}` are set only by code (e.g. a driver's callback):
they are neither parsed nor printed.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from flowc.ir.errors import FlowcError
from flowc.ir.option_text import parse_option_list
from flowc.passes.registry import PASSES

Pipeline = list  # a list of pass instances, run in order

# Named default pipelines: (pass string, why this step is here), in order.
PIPELINES: dict[str, list[tuple[str, str]]] = {
    "default": [
        ("qdq", "quantized matmuls and convs as integer kernels, before folding dequantizes "
                "their weights (CPU)"),
        ("cse", "merge pure nodes computing the same thing (duplicate constants, ops)"),
        ("constant-fold", "compute what depends only on constants and static shapes"),
        ("simplify", "remove identities, collapse chains, form gemm, fold batch norms"),
        ("cse", "merge what folding and simplification made equal"),
        ("prune", "drop nodes the rewrites, or the frontend, left unused; keep stateful ones"),
        ("qdq-layout", "quantized conv chains channels-last between their qconvs (after "
                       "folding gives the scales as constants)"),
        ("widen", "bf16/f16 convs with constant filters as f32 convs between casts (the "
                  "f32 rewrites below then take them)"),
        ("channels-last", "2-D conv chains in NHWC, filters transposed once (after BN folding)"),
        ("partition", "send/recv on every edge between devices (nothing on one device)"),
        ("pack-weights", "constant matmul weights in column panels, read in one stream (CPU)"),
        ("winograd", "stride-1 3x3 f32 convs as Winograd F(4x4,3x3), filters done once (CPU)"),
        ("fuse", "group what is left into kernels (fused nodes) for codegen"),
        ("schedule", "last: order the kernels to keep peak memory low (codegen runs this order)"),
    ],
}

# The passes that make an ONNX model's training step (`flowc compile --train`) from its
# forward graph and loss, before the pipeline (`apply_optimizer.training_passes`).
TRAINING_PASSES: list[tuple[str, str]] = [
    ("gradients", "the backward graph: d loss / d each read of a trainable variable, as "
                  "outputs grad/X (before any rewrite: flowc differentiates before fusion)"),
    ("apply-optimizer", "the optimizer's update of each variable from its grad/X output"),
]

# Passes an option of `flowc.compile` adds to any pipeline (`with_option_pass`): option ->
# (pass, the pass it goes right before, why there).
OPTION_PASSES: dict[str, tuple[str, str, str]] = {
    "remat": ("remat", "fuse", "recompute cheap activations next to their backward readers: "
                               "after the last cse (which would merge the clones back into "
                               "the forward nodes), before fuse (which puts them in the "
                               "backward kernels that read them)"),
    "precision": ("precision", "channels-last", "matmul/conv weights and products in bf16 "
                                                "(f32 accumulation): after simplify (gemms "
                                                "formed, batch norms folded into the weights), "
                                                "before the f32-only layout rewrites"),
    "data_parallel": ("split-all-reduce", "fuse", "each gradient allreduce as a start and a "
                                                  "wait, which the schedule puts apart to "
                                                  "overlap it with the backward pass"),
}

_ITEM_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_-]*)\s*(?:\{([^{}]*)\})?\s*(?:,|$)")


def _known_passes() -> str:
    return ", ".join(sorted(PASSES))


def _convert(pass_name: str, field: dataclasses.Field, text: str) -> Any:
    kind = field.type if isinstance(field.type, type) else {"bool": bool, "int": int,
                                                              "float": float}.get(field.type, str)
    if kind is bool:
        if text not in ("true", "false"):
            raise FlowcError(f"pass '{pass_name}': option '{field.name}' takes true or false, "
                             f"found '{text}'")
        return text == "true"
    try:
        return kind(text)
    except ValueError:
        raise FlowcError(f"pass '{pass_name}': option '{field.name}' takes "
                         f"{kind.__name__}, found '{text}'") from None


def make_pass(name: str, options: dict[str, str] | None = None) -> Any:
    """An instance of the pass `name` with `options` (text values) set."""
    cls = PASSES.get(name)
    if cls is None:
        raise FlowcError(f"unknown pass '{name}' (known passes: {_known_passes()}; "
                         f"pipelines: {', '.join(PIPELINES)})")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.metadata.get("option", True)}
    values = {}
    for key, text in (options or {}).items():
        if key not in fields:
            known = ", ".join(fields) or "none"
            raise FlowcError(f"pass '{name}' has no option '{key}' (its options: {known})")
        values[key] = _convert(name, fields[key], text)
    return cls(**values)


def parse_pipeline(text: str) -> list[Any]:
    """The pass instances `text` names (see the module docstring)."""
    text = text.strip()
    if text in PIPELINES:
        return [p for step, _ in PIPELINES[text] for p in parse_pipeline(step)]
    passes, pos = [], 0
    while pos < len(text):
        m = _ITEM_RE.match(text, pos)
        if not m or m.end() == pos:
            raise FlowcError(f"malformed pipeline '{text}' at column {pos + 1}: expected "
                             "a pass name like cse or prune{keep_stateful=false}")
        options = parse_option_list(f"pass '{m.group(1)}'", m.group(2))
        passes.append(make_pass(m.group(1), options))
        pos = m.end()
        if text[m.end() - 1:m.end()] == "," and pos == len(text):
            raise FlowcError(f"malformed pipeline '{text}': it ends with ','")
    return passes


def _format(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def print_pipeline(passes: list[Any]) -> str:
    """The canonical text of a list of pass instances."""
    items = []
    for p in passes:
        fields = [f for f in dataclasses.fields(p) if f.metadata.get("option", True)]
        options = ",".join(f"{f.name}={_format(getattr(p, f.name))}" for f in fields
                           if f.metadata.get("print_default", True)
                           or getattr(p, f.name) != f.default)
        items.append(f"{p.name}{{{options}}}" if options else p.name)
    return ",".join(items)


def with_option_pass(passes: list[Any], option: str, instance: Any) -> list[Any]:
    """`passes` with `instance` (the pass `OPTION_PASSES[option]` names) inserted right
    before the first pass it goes before, or last (before a final `schedule`) when the
    pipeline has none."""
    _, before, _ = OPTION_PASSES[option]
    names = [p.name for p in passes]
    at = names.index(before) if before in names else (
        len(names) - 1 if names and names[-1] == "schedule" else len(names))
    return [*passes[:at], instance, *passes[at:]]
