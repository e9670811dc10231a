"""bench/ops.py's table: one single-node ONNX model per op on a typical shape, attributes
as torch exports them, and the ops left out with why.

Shapes: elementwise ops on 1x64x56x56 f32 (200k elements, a ResNet stage's activation);
matmuls 256x512x512; conv 1x64x56x56 3x3 64->64; reductions, softmaxes and norms of
rows over the last axis of 64x1024; gathers and scatters of 512 rows of a 4096x256 table
or 32 of each 1024-row; sequences of 64 steps. A `Tensor` with `const` is an initializer
(weights, shapes, axes: what torch exports as constants); the others are graph inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

E = (1, 64, 56, 56)  # elementwise
ROWS = (64, 1024)  # reductions, softmax, norms over the last axis
ATT = (1, 8, 128, 64)  # attention's [batch, heads, sequence, head size]


@dataclass(frozen=True)
class Tensor:
    """An input of the node: `fill` is normal, small (normal / 16: weights that keep a
    recurrence out of saturation), positive (0.5..2), unit (-0.9..0.9), ge1 (1..3), bool,
    int:LO:HI (uniform in [LO, HI)), perm:N (distinct values below N along the last axis),
    distinct:N (distinct values below N in the whole tensor), or a literal list for a
    constant."""
    dtype: str
    shape: tuple[int, ...]
    fill: Any = "normal"
    const: bool = False


@dataclass(frozen=True)
class Case:
    op: str
    inputs: tuple[Tensor | None, ...]  # None: an optional input left out
    attrs: dict[str, Any] = field(default_factory=dict)
    opset: int = 17
    outputs: int = 1
    label: str = ""  # shown instead of the first input's shape
    out_shape: tuple[int, ...] | None = None  # the f32 output's, where ONNX infers no type


def const(dtype: str, values: list, shape: tuple[int, ...] | None = None) -> Tensor:
    return Tensor(dtype, (len(values),) if shape is None else shape, values, const=True)


def f32(shape: tuple[int, ...], fill: Any = "normal", is_const: bool = False) -> Tensor:
    return Tensor("float32", shape, fill, is_const)


def i64(values: list) -> Tensor:
    return const("int64", values)


def unary(op: str, fill: str = "normal", opset: int = 17, **attrs: Any) -> Case:
    return Case(op, (f32(E, fill),), attrs, opset)


def binary(op: str, dtype: str = "float32", fill: str = "normal", opset: int = 17,
           **attrs: Any) -> Case:
    return Case(op, (Tensor(dtype, E, fill), Tensor(dtype, E, fill)), attrs, opset)


def reduce(op: str, fill: str = "normal") -> Case:
    return Case(op, (f32(ROWS, fill), i64([-1])), {"keepdims": 1}, 18)


def rows(op: str, *extra: Tensor, opset: int = 17, **attrs: Any) -> Case:
    return Case(op, (f32(ROWS), *extra), attrs, opset)


def _conv_weights(cin: int, cout: int, k: int) -> tuple[Tensor, Tensor]:
    return f32((cout, cin, k, k), "normal", True), f32((cout,), "normal", True)


def _rnn(op: str, gates: int) -> Case:
    hidden = 256
    return Case(op, (f32((64, 1, 256)), f32((1, gates * hidden, 256), "small", True),
                     f32((1, gates * hidden, hidden), "small", True),
                     f32((1, 2 * gates * hidden), "small", True)),
                {"hidden_size": hidden}, 14, label="seq 64, batch 1, 256->256")


def _quant_cases() -> list[Case]:
    scale, zp = const("float32", [0.02], ()), const("uint8", [128], ())
    w_zp = const("uint8", [128], ())
    weight = Tensor("uint8", (512, 512), "int:0:256", const=True)
    conv_w = Tensor("uint8", (64, 64, 3, 3), "int:0:256", const=True)
    u8 = Tensor("uint8", E, "int:0:256")
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    return [
        Case("QuantizeLinear", (f32(E), scale, zp)),
        Case("DequantizeLinear", (u8, scale, zp)),
        Case("DynamicQuantizeLinear", (f32(E),), outputs=3),
        Case("MatMulInteger", (Tensor("uint8", (256, 512), "int:0:256"), weight, zp, w_zp),
             label="256x512 @ 512x512 u8"),
        Case("QLinearMatMul", (Tensor("uint8", (256, 512), "int:0:256"), scale, zp, weight,
                               scale, w_zp, scale, zp), label="256x512 @ 512x512 u8"),
        Case("ConvInteger", (u8, conv_w, zp, w_zp), conv, label="1x64x56x56 u8, 3x3, 64->64"),
        Case("QLinearConv", (u8, scale, zp, conv_w, scale, w_zp, scale, zp), conv,
             label="1x64x56x56 u8, 3x3, 64->64"),
    ]


def _cases() -> list[Case]:
    w, b = _conv_weights(64, 64, 3)
    ch = f32((64,), "normal", True)
    var = f32((64,), "positive", True)
    table = f32((4096, 256))
    att = f32(ATT)
    cases = [
        *(unary(op) for op in ("Neg", "Abs", "Exp", "Erf", "Tanh", "Sigmoid", "Relu",
                               "Round", "Ceil", "Floor", "Sin", "Cos", "Tan", "Sinh", "Cosh",
                               "Asinh", "Softplus", "Softsign", "Sign",
                               "HardSigmoid", "HardSwish", "Identity", "IsNaN", "IsInf")),
        *(unary(op, "positive") for op in ("Sqrt", "Log", "Reciprocal")),
        unary("Acosh", "ge1"), unary("Atanh", "unit"),
        *(unary(op, "unit") for op in ("Acos", "Asin")), unary("Atan"),
        *(Case(op, (f32((64, 1024), "unit"), const("int64", [1], ())), opset=opset,
               label="64x1024, axis 1") for op, opset in (("CumSum", 17), ("CumProd", 26))),
        unary("LeakyRelu", alpha=0.01), unary("ThresholdedRelu", alpha=1.0),
        unary("Shrink", bias=0.0, lambd=0.5), unary("Gelu", opset=20),
        unary("Mish", opset=22), unary("Swish", opset=24, alpha=1.0),
        *(unary(op) for op in ("Elu", "Celu", "Selu")),
        unary("Dropout", opset=13),
        Case("Clip", (f32(E), const("float32", [0.0], ()), const("float32", [6.0], ()))),
        Case("Not", (Tensor("bool", E, "bool"),)),
        Case("BitwiseNot", (Tensor("int32", E, "int:-1000:1000"),), opset=18),
        Case("Cast", (f32(E),), {"to": 10}, label="1x64x56x56 f32->f16"),
        Case("CastLike", (f32(E), const("float16", [0.0], ())), label="1x64x56x56 f32->f16"),
        *(binary(op) for op in ("Add", "Sub", "Mul", "Max", "Min", "Sum", "Mean", "Equal",
                                "Less", "Greater", "LessOrEqual", "GreaterOrEqual")),
        binary("Div", fill="positive"),
        Case("Pow", (f32(E, "positive"), const("float32", [2.0], ()))),
        binary("Mod", "int64", "int:1:1000", fmod=0),
        *(binary(op, "bool", "bool") for op in ("And", "Or", "Xor")),
        *(binary(op, "int32", "int:-1000:1000", opset=18) for op in ("BitwiseAnd", "BitwiseOr",
                                                           "BitwiseXor")),
        binary("BitShift", "uint32", "int:0:8", direction="LEFT"),
        Case("Where", (Tensor("bool", E, "bool"), f32(E), f32(E))),
        Case("PRelu", (f32(E), f32((64, 1, 1), "normal", True))),
        Case("MatMul", (f32((256, 512)), f32((512, 512), "normal", True)),
             label="256x512 @ 512x512"),
        Case("Gemm", (f32((256, 512)), f32((512, 512), "normal", True),
                      f32((512,), "normal", True)), {"transB": 1},
             label="256x512 @ (512x512)^T + b"),
        Case("Einsum", (att, att), {"equation": "bhqd,bhkd->bhqk"}, 12,
             label="bhqd,bhkd->bhqk 1x8x128x64"),
        Case("Conv", (f32(E), w, b), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
             label="1x64x56x56, 3x3, 64->64"),
        Case("ConvTranspose", (f32((1, 64, 28, 28)), f32((64, 32, 2, 2), "normal", True),
                               f32((32,), "normal", True)),
             {"kernel_shape": [2, 2], "strides": [2, 2]}, label="1x64x28x28, 2x2/2, 64->32"),
        Case("MaxPool", (f32((1, 64, 112, 112)),),
             {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
             label="1x64x112x112, 3x3/2"),
        Case("AveragePool", (f32(E),), {"kernel_shape": [2, 2], "strides": [2, 2]}),
        Case("LpPool", (f32(E),), {"kernel_shape": [2, 2], "strides": [2, 2], "p": 2}, 18),
        Case("GlobalAveragePool", (f32(E),)), Case("GlobalMaxPool", (f32(E),)),
        Case("BatchNormalization", (f32(E), ch, ch, ch, var), {"epsilon": 1e-5}, 15),
        Case("InstanceNormalization", (f32(E), ch, ch), {"epsilon": 1e-5}),
        Case("GroupNormalization", (f32(E), ch, ch), {"num_groups": 32, "epsilon": 1e-5}, 21),
        Case("MeanVarianceNormalization", (f32(E),), out_shape=E),
        Case("LRN", (f32(E),), {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}),
        rows("LayerNormalization", f32((1024,), "normal", True), f32((1024,), "normal", True),
             axis=-1, epsilon=1e-5),
        rows("RMSNormalization", f32((1024,), "normal", True), opset=23, axis=-1),
        rows("LpNormalization", axis=-1, p=2),
        *(rows(op, opset=13, axis=-1) for op in ("Softmax", "LogSoftmax", "Hardmax")),
        *(reduce(op) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare")),
        reduce("ReduceProd", "unit"), reduce("ReduceLogSum", "positive"),
        *(rows(op, axis=-1, keepdims=1) for op in ("ArgMax", "ArgMin")),
        Case("TopK", (f32(ROWS), i64([10])), {"axis": -1}, 11, 2, "64x1024, k=10"),
        Case("Reshape", (f32(E), i64([1, 64, 3136]))),
        Case("Flatten", (f32(E),), {"axis": 1}),
        Case("Squeeze", (f32(E), i64([0])), opset=13),
        Case("Unsqueeze", (f32(E), i64([0])), opset=13),
        Case("Transpose", (f32(E),), {"perm": [0, 2, 3, 1]}),
        Case("Concat", (f32(E), f32(E)), {"axis": 1}),
        Case("Split", (f32(E), i64([32, 32])), {"axis": 1}, 13, 2),
        Case("Slice", (f32(E), i64([1, 1]), i64([-1, -1]), i64([2, 3])),
             label="1x64x56x56 [:, :, 1:-1, 1:-1]"),
        Case("Pad", (f32(E), i64([0, 0, 1, 1, 0, 0, 1, 1])), {"mode": "constant"}),
        Case("Expand", (f32((1, 64, 1, 1)), i64(list(E))), label="1x64x1x1 -> 1x64x56x56"),
        Case("Tile", (f32((1, 64, 28, 28)), i64([1, 1, 2, 2]))),
        Case("Trilu", (f32((8, 256, 256)),), {"upper": 1}, 14),
        Case("Shape", (f32(E),)), Case("Size", (f32(E),)),
        Case("EyeLike", (f32((1024, 1024)),)),
        Case("Range", (const("float32", [0.0], ()), const("float32", [200704.0], ()),
                       const("float32", [1.0], ())), opset=11, label="0..200704"),
        Case("ConstantOfShape", (i64(list(E)),), opset=9, label="1x64x56x56"),
        *(Case(op, (const("int64", [1024], ()),), opset=17, label="1024")
          for op in ("HannWindow", "HammingWindow", "BlackmanWindow")),
        Case("Gather", (f32((4096, 256), "normal", True), Tensor("int64", (1, 512),
                                                                 "int:0:4096")),
             {"axis": 0}, label="4096x256 table, 512 indices"),
        Case("GatherElements", (f32(ROWS), Tensor("int64", (64, 32), "int:0:1024")),
             {"axis": 1}, label="64x1024, 64x32 indices"),
        Case("GatherND", (table, Tensor("int64", (512, 1), "int:0:4096")),
             label="4096x256, 512 index rows"),
        Case("ScatterND", (table, Tensor("int64", (512, 1), "distinct:4096"), f32((512, 256))),
             label="4096x256, 512 rows"),
        Case("ScatterElements", (f32(ROWS), Tensor("int64", (64, 32), "perm:1024"),
                                 f32((64, 32))), {"axis": 1}, 16, label="64x1024, 64x32"),
        Case("Scatter", (f32(ROWS), Tensor("int64", (64, 32), "perm:1024"), f32((64, 32))),
             {"axis": 1}, 10, label="64x1024, 64x32"),
        Case("OneHot", (Tensor("int64", (512,), "int:0:1000"), const("int64", [1000], ()),
                        const("float32", [0.0, 1.0])), {"axis": -1}, 11,
             label="512 indices, depth 1000"),
        Case("Resize", (f32(E), const("float32", [], (0,)),
                        const("float32", [1.0, 1.0, 2.0, 2.0])),
             {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
              "nearest_mode": "floor"}, 13, label="1x64x56x56 x2 nearest"),
        Case("Resize", (f32(E), const("float32", [], (0,)),
                        const("float32", [1.0, 1.0, 2.0, 2.0])),
             {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, 13,
             label="1x64x56x56 x2 linear"),
        Case("Upsample", (f32(E), const("float32", [1.0, 1.0, 2.0, 2.0])), {"mode": "nearest"},
             9, label="1x64x56x56 x2 nearest"),
        Case("DepthToSpace", (f32(E),), {"blocksize": 2, "mode": "CRD"}),
        Case("SpaceToDepth", (f32((1, 16, 112, 112)),), {"blocksize": 2}),
        Case("CenterCropPad", (f32(E), i64([48, 48])), {"axes": [2, 3]}, 18,
             label="1x64x56x56 -> 48x48"),
        Case("ReverseSequence", (f32((64, 16, 256)), Tensor("int64", (16,), "int:1:65")),
             {"batch_axis": 1, "time_axis": 0}, 10, label="64 steps x 16 x 256"),
        Case("NegativeLogLikelihoodLoss", (f32((64, 1000)), Tensor("int64", (64,),
                                                                   "int:0:1000")),
             {"reduction": "mean"}, 13, label="64x1000"),
        Case("SoftmaxCrossEntropyLoss", (f32((64, 1000)), Tensor("int64", (64,), "int:0:1000")),
             {"reduction": "mean"}, 13, label="64x1000"),
        Case("Attention", (att, att, att), opset=23, label="q=k=v 1x8x128x64"),
        Case("RotaryEmbedding", (att, f32((128, 32)), f32((128, 32)),
                                 Tensor("int64", (1, 128), "int:0:128")), opset=23,
             label="1x8x128x64"),
        Case("AffineGrid", (f32((1, 2, 3)), i64(list(E))), {"align_corners": 0}, 20,
             label="theta 1x2x3 -> 1x56x56x2"),
        Case("SwiGLU", (f32((64, 1024)), f32((64, 1024))), opset=28, label="64x1024 (A, B)",
             out_shape=(64, 1024)),
        Case("CausalConvWithState", (f32((1, 64, 128)), f32((64, 1, 4), "normal", True)),
             opset=27, outputs=2, label="1x64x128, k=4 depthwise"),
        _rnn("LSTM", 4), _rnn("GRU", 3), _rnn("RNN", 1),
        *_quant_cases(),
    ]
    return cases


def case_name(case: Case) -> str:
    """The row's name: the op, and the mode where one op has several rows."""
    if case.op == "Resize":
        return f"Resize {case.attrs['mode']}"
    return case.op


CASES: dict[str, Case] = {case_name(c): c for c in _cases()}

# Ops of the node-test scope (tests/frontend/test_onnx_backend.py SCOPE_OPS) not benched.
LEFT_OUT = {
    "If": "control flow: its cost is its branch's ops, each benched on its own",
    "Loop": "control flow: its cost is its body's ops, each benched on its own",
    "Scan": "control flow: its cost is its body's ops, each benched on its own",
    "Constant": "no input: a value stored in the artifact (Range/ConstantOfShape time that)",
    **{op: "resolved at import (a sequence is a list of tensors while importing): no kernel"
       for op in ("SequenceConstruct", "SequenceEmpty", "SequenceLength", "SequenceAt",
                  "SequenceInsert", "SequenceErase", "ConcatFromSequence", "SplitToSequence",
                  "SequenceMap", "Optional", "OptionalHasElement", "OptionalGetElement")},
    **{op: "its result's extent depends on input values: the compiled path folds those, so "
       "a one-node model compiles to a constant" for op in ("NonZero", "Compress", "Unique",
                                                            "NonMaxSuppression")},
    **{op: "imported after this table's last run (2026-12-04, helpers ops2/ops3): to be "
       "benched in the next round" for op in (
           "BitCast", "DFT", "STFT", "MelWeightMatrix", "GridSample", "DeformConv", "RoiAlign",
           "Col2Im", "MaxUnpool", "Det", "TensorScatter", "TfIdfVectorizer", "TreeEnsemble",
           "Binarizer", "ArrayFeatureExtractor", "LinearAttention", "FlexAttention",
           "Adagrad", "Adam", "Momentum")},
}

# Why an op is slower than 2x onnxruntime, where it is (written after reading its kernel):
# ops.py puts these in the results' reason column. FLOOR: flowc's per-call cost (the
# Python loader's run_into: argument checks, ctypes addresses, the lock; its C entry takes
# about 0.5 us of it) against onnxruntime's run_with_iobinding.
FLOOR = ("the per-call floor: the kernel takes about a microsecond, the rest is flowc's "
         "loader (~6 us a call, against onnxruntime's ~2 us)")
CONSTANT = "a constant result (flowc folds it): " + FLOOR
CONVPERF = "helper convperf's kernel (issue [13]: convs, pools, top-k)"
SCATTER = ("reduction 'none' imported as where(hit, scatter_add(zeros, updates), data) "
           "(frontend/onnx_scatter.py): a zero fill, two serial scatters (updates, hit "
           "mask) and a where over the whole data, where onnxruntime copies the data once and "
           "writes the updates")
REASONS: dict[str, str] = {
    "Sin": "libm's sinf called once per element (a scalar loop): lower/fastmath.py has "
           "vector exp/tanh/erf, no sin/cos; one needs an argument reduction exact over all "
           "of f32 (Payne-Hanek beyond ~1e5), not written",
    "Cos": "libm's cosf called once per element; as Sin",
    **{op: f"libm's {op.lower()}f called once per element (a scalar loop); no vector "
       "polynomial written (lower/fastmath.py has exp/tanh/erf only)"
       for op in ("Acos", "Asin", "Atan")},
    "ConvTranspose": "a conv over the input dilated by the strides (lower/conv.py): at "
                     "stride 2, 3 of 4 multiply-adds read inserted zeros, plus the padding and "
                     "layout transposes; " + CONVPERF,
    "MaxPool": "3x3/2: one generic over output x window reading with stride 2 "
               "(lower/pool.py); " + CONVPERF,
    "TopK": "simplify decomposes it into k rounds of arg_max over each row: 10 passes over "
            "64x1024 at k=10; " + CONVPERF,
    "GlobalAveragePool": "lower/pool.py folds the 3136 elements of each channel in one "
                         "generic: a chain of dependent scalar adds (as reduce_sum over a "
                         "contiguous axis was before its row fold, which would apply); "
                         + CONVPERF,
    "GlobalMaxPool": "as GlobalAveragePool: one generic fold of each channel's 3136 "
                     "elements; " + CONVPERF,
    "ReverseSequence": "imported as gather_elements along the time axis at where(t < len, "
                       "len-1-t, t) (frontend/onnx_compose.py): an index per element of the "
                       "64x16x256 input, computed and read one element at a time, where "
                       "onnxruntime copies 256-float rows",
    "ScatterElements": SCATTER + " (2048 single elements, one serial scalar step each)",
    "Scatter": SCATTER + " (as ScatterElements)",
    "ScatterND": SCATTER + " (512 rows of 256)",
    "RotaryEmbedding": "imported through its ONNX function body: slices, gathers of the "
                       "cos/sin caches at the positions, muls, adds and a concat as several "
                       "kernels and passes over 1x8x128x64; onnxruntime runs one kernel",
    "SoftmaxCrossEntropyLoss": "imported through its ONNX function body: reshape, transpose, "
                               "log_softmax (a row kernel), transpose back (two copies of "
                               "64x1000), gather_elements, mean: 7 kernels; onnxruntime one",
    "MeanVarianceNormalization": "imported through its ONNX function body: two reduce_means "
                                 "over axes (0, 2, 3) (not trailing: no row fold), sub, pow, "
                                 "sqrt, div as separate passes over 1x64x56x56",
    "Resize nearest": "now one vectorized broadcast copy for both axes (16-lane shuffles "
                      "duplicating elements; was one kernel per axis: 124 us); the remaining "
                      "gap not examined",
    "Upsample": "as Resize nearest (imported as Resize)",
    "QuantizeLinear": "one vectorized loop (divide by the scale, round to even, clamp, "
                      "convert), bound by the vector division; helper qlayout's kernels "
                      "(issue [14])",
    "DynamicQuantizeLinear": "imported as reduce_min and reduce_max passes (row folds) then "
                             "QuantizeLinear's loop, bound by its division; onnxruntime "
                             "finds min and max in one pass; helper qlayout's (issue [14])",
    "And": "a bool kernel that may run in place (no noalias): LLVM vectorizes it 16 bytes at "
           "a time over 56-byte rows behind an overlap check (strategy/elementwise.py "
           "vectorizes f32/f64 results only), and " + FLOOR,
    "Or": "as And",
    "Xor": "as And",
    "Not": "as And",
    "GatherElements": FLOOR,
    "EyeLike": "a 4 MiB constant (the 1024x1024 identity) copied from the weights to the "
               "output, where onnxruntime writes zeros and the diagonal",
    "NegativeLogLikelihoodLoss": FLOOR,
    "Shape": CONSTANT, "Size": CONSTANT, "HannWindow": CONSTANT, "HammingWindow": CONSTANT,
    "BlackmanWindow": CONSTANT,
}
