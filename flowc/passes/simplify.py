"""`simplify`: algebraic simplification by a table of rewrite patterns.

Requires: a well-formed graph (run `cse` first so that shared subexpressions are one value,
which the recognizers need). Guarantees: the result computes the same outputs (up to
floating-point rounding where BatchNorm is folded into weights), and
- identities vanish: x*1, 1*x, x+0, 0+x, x-0, x/1, `identity`, and `reshape`, `transpose`,
  `cast`, `expand` that do not change their operand's type;
- transpose(transpose(x)) is one transpose (or none), reshape(reshape(x)) one reshape;
- add(matmul(a, b), c) with 2-D a, b and c broadcasting to the result is gemm(a, b, c) (so is
  add(gemm(a, b), c) of a gemm without C and beta 1, c a row);
- a gemm operand marked transposed (transA/transB) that is a constant read only there is
  stored transposed instead, and the flag cleared;
- 2-D transposes go into gemm's transA/transB flags: of a gemm's operand, of a gemm's
  result, of a matmul's 2-D weight (simplify_gemm); a bias added after the reshape back
  of such a product becomes its C;
- batch_normalization after a conv or gemm with constant weights is folded into them
  (inference: the weights are scaled per output channel, the shift joins the bias);
- slice(x, s, s + c) with a run-time start s on one static axis becomes a gather of the
  static size c where s provably lies in [0, d - c], the only place where the two agree
  (a loop body's iteration number lies in [0, M - 1] for a constant trip count M);
- a concat of more than 32 operands becomes a concat of concats of at most 32 (one wide
  concat kernel compiles in time quadratic in its operands);
- decomposed LayerNorm, GELU (erf and tanh forms) and softmax become `layer_normalization`,
  `gelu` and `softmax` (see simplify_recognize);
- resize and one_hot with constant sizes are decomposed (simplify_decompose), and with
  `top_k_rounds` (the driver sets it for GPU targets, which have no top_k kernel) so is
  top_k with a constant k, into k rounds of arg_max; CPU targets lower top_k as one
  partial-sort pass per row (codegen/lower/top_k.py).
A rewrite never merges a producer that has other users, never looks through a node with
control dependencies or on another device, and never rewrites a node with control
dependencies. Nodes left unused are erased; nested bodies are simplified too. The driver
is `flowc.passes.rewrite.apply_patterns`; each pattern's name is its statistics counter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flowc.ir.graph import Graph, Node, rebuild
from flowc.passes import simplify_decompose as d
from flowc.passes import simplify_gemm as gm
from flowc.passes import simplify_patterns as p
from flowc.passes import simplify_recognize as r
from flowc.passes.registry import register
from flowc.passes.rewrite import Pattern, apply_patterns, bodies, map_bodies

# op -> [(pattern name, pattern)], tried in order.
PATTERNS: dict[str, list[tuple[str, Pattern]]] = {
    "identity": [("identity-removed", p.identity)],
    "mul": [("mul-one-removed", p.mul_one), ("layer-norm-recognized", r.layer_norm),
            ("layer-norm-scale-absorbed", r.layer_norm_scale), ("gelu-recognized", r.gelu)],
    "add": [("add-zero-removed", p.add_zero), ("matmul-add-to-gemm", p.matmul_add_to_gemm),
            ("gemm-bias-through-reshape", gm.gemm_bias_through_reshape),
            ("layer-norm-bias-absorbed", r.layer_norm_bias)],
    "sub": [("sub-zero-removed", p.sub_zero)],
    "div": [("div-one-removed", p.div_one), ("layer-norm-recognized", r.layer_norm),
            ("softmax-recognized", r.softmax)],
    "reshape": [("reshape-simplified", p.reshape)],
    "transpose": [("transpose-simplified", p.transpose),
                  ("transposed-gemm-swapped", gm.transposed_gemm)],
    "cast": [("cast-removed", p.cast)],
    "expand": [("expand-removed", p.expand)],
    "gemm": [("gemm-transposed-operand", gm.gemm_transposed_operand),
             ("gemm-constant-transposed", p.gemm_transposed_constant)],
    "matmul": [("matmul-transposed-weight", gm.matmul_transposed_weight)],
    "concat": [("wide-concat-split", p.wide_concat)],
    "slice": [("slice-at-run-time-start", p.slice_at_run_time_start)],
    "batch_normalization": [("batch-norm-into-conv", p.batch_norm_into_conv),
                            ("batch-norm-into-gemm", p.batch_norm_into_gemm)],
    "resize": [("resize-decomposed", d.resize)],
    "one_hot": [("one-hot-decomposed", d.one_hot)],
    "top_k": [("top-k-decomposed", d.top_k)],
    "dft": [("dft-decomposed", d.dft)],
    "stft": [("stft-decomposed", d.stft)],
    "col2im": [("col2im-decomposed", d.col2im)],
    "max_unpool": [("max-unpool-decomposed", d.max_unpool)],
}


@register
@dataclass(frozen=True)
class Simplify:
    """Apply the algebraic rewrite patterns in PATTERNS."""

    name: ClassVar[str] = "simplify"
    top_k_rounds: bool = False

    def run(self, graph: Graph) -> Graph:
        if any(bodies(n) for n in graph.nodes):
            graph = rebuild(graph, lambda node, _old: self._bodies(node))
        patterns = PATTERNS if self.top_k_rounds else {
            op: rules for op, rules in PATTERNS.items() if op != "top_k"}
        return apply_patterns(graph, patterns)

    def _bodies(self, node: Node) -> Node:
        """`node` with its bodies simplified; a loop's body knows the range of its
        iteration number (p.KNOWN_RANGES) while it is."""
        counter = p.loop_counter_range(node)
        if counter is None:
            return map_bodies(node, self.run)
        token = p.KNOWN_RANGES.set({**p.KNOWN_RANGES.get(), counter[0]: counter[1]})
        try:
            return map_bodies(node, self.run)
        finally:
            p.KNOWN_RANGES.reset(token)
