"""`CompileOptions`: every option of `flowc.compile`, typed, in one place.

Contract:
- `CompileOptions(...)` is a frozen dataclass; its fields are the options `flowc.compile`
  takes (`compile(model, out, options)` or `compile(model, out, target=..., ...)`, the
  keywords overriding `options`' fields: `with_overrides`). An unknown keyword is a
  FlowcError naming it and the known ones.
- Fields that a user sets on the command line carry their flag in `metadata["flag"]` and
  their help text in `metadata["help"]`; `flowc compile`'s options are generated from these
  fields (`add_arguments`) and read back (`from_args`), so the API and the CLI cannot drift.
  Callbacks, the cache object, the progress reporter and the backend are API-only.
- Values are checked where they are used (the driver, the passes, the cache), so that each
  error names the option as the user spelled it (`--devices: ...`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from flowc.ir.errors import FlowcError

if TYPE_CHECKING:
    from flowc.codegen.backend import Backend
    from flowc.codegen.cache import CompileCache
    from flowc.codegen.target import Target
    from flowc.progress import Progress

Weights = Literal["auto", "embed", "file"]
Report = Callable[[str], Any]


def _cli(flags: str | tuple[str, ...], help: str, **argparse_kw: Any) -> dict[str, Any]:
    return {"flag": (flags,) if isinstance(flags, str) else flags, "help": help,
            "argparse": argparse_kw}


@dataclass(frozen=True)
class CompileOptions:
    """How to compile a model into an artifact (see `flowc.codegen.driver.compile`)."""

    target: str | Target = field(default="host", metadata=_cli(
        "--target", "target (default: this host; x86-64 (SSE2), x86-64-v2, x86-64-v3 (AVX2), "
                    "x86-64-v4 (AVX-512), aarch64; nvptx: the whole graph on an NVIDIA GPU)",
        metavar="TARGET"))
    cpu: str | None = field(default=None, metadata=_cli(
        "--cpu", "the LLVM CPU the kernels are tuned and selected for (e.g. znver4, "
                 "neoverse-n1), over the target's; its implied features are not checked at "
                 "load: list them with --features", metavar="NAME"))
    features: str | None = field(default=None, metadata=_cli(
        "--features", "LLVM features merged over the target's (e.g. +avx2,+fma,-avx512f); "
                      "the manifest records them and the loader refuses a CPU lacking one",
        metavar="+F,-F,..."))
    gpu_archs: tuple[str, ...] = field(default=(), metadata=_cli(
        "--gpu-arch", "with --target nvptx or nodes on gpu:0 (--devices cpu:0,gpu:0): a GPU "
                      "architecture to build a cubin for (repeatable; default sm_80 and sm_90)",
        metavar="SM", action="append"))
    gpu_matmul: str = field(default="cuda-cores", metadata=_cli(
        "--gpu-matmul", "GPU matmuls of bf16/f16 operands: cuda-cores (f32 multiply-adds; the "
                        "default) or tensor-cores (mma.sync, when every --gpu-arch is sm_80 "
                        "or newer; not yet run on a GPU)",
        choices=("tensor-cores", "cuda-cores")))
    name: str | None = field(default=None, metadata=_cli(
        "--name", "symbol prefix (default: the model file's name)", metavar="NAME"))
    batch: int | None = field(default=None, metadata=_cli(
        "--batch", "size of symbolic leading dims (no default: a symbolic dim without "
                   "--batch or --dim is an error listing them)", metavar="N"))
    dims: Mapping[str, int | tuple[int, int]] = field(default_factory=dict, metadata=_cli(
        "--dim", "size of a symbolic dim by name (SYM=SIZE), or its bound (SYM=LO..HI: "
                 "API dims={SYM: (LO, HI)}); repeatable", metavar="SYM=SIZE",
        action="append"))
    pipeline: str = field(default="default", metadata=_cli(
        ("-p", "--pipeline"), "pass pipeline (default)", metavar="PIPELINE"))
    weights: Weights = field(default="auto", metadata=_cli(
        "--weights", "embed the weights in the library, or write NAME.weights (auto: a file "
                     "above 64 MiB)", choices=("auto", "embed", "file")))
    dump_dir: str | os.PathLike | None = field(default=None, metadata=_cli(
        "--dump-dir", "write the optimized graph, the generated C and kernel IR here",
        metavar="DIR"))
    print_ir_after_all: bool = field(default=False, metadata=_cli(
        "--print-ir-after-all", "print the graph to stderr after each pass"))
    devices: str | None = field(default=None, metadata=_cli(
        "--devices", "place the graph on these devices (e.g. cpu:0,gpu:0): the place pass "
                     "runs before partitioning", metavar="DEV,DEV"))
    place: tuple[str, ...] = field(default=(), metadata=_cli(
        "--place", "with --devices: run NODE (a node name or the source ONNX node's name) on "
                   "DEVICE (gpu:0, or partial: gpu); repeatable", metavar="NODE=DEVICE",
        action="append"))
    device_profiles: str | None = field(default=None, metadata=_cli(
        "--device-profiles", "with --devices: a JSON file of device and link figures "
                             "overriding the built-in ones (see flowc/passes/place_devices.py)",
        metavar="FILE"))
    remat: str = field(default="off", metadata=_cli(
        "--remat", "recompute cheap activations (elementwise and shape ops) in the backward "
                   "pass of a training step instead of keeping them from the forward pass: "
                   "POLICY dots_saveable (the default of a bare --remat: keep the results of "
                   "matmul, gemm, conv, norms, reductions), nothing_saveable (recompute any "
                   "pure op), off (see flowc/passes/remat.py)", metavar="POLICY", nargs="?",
        const="dots_saveable"))
    precision: str = field(default="f32", metadata=_cli(
        "--precision", "f32 (default), bf16 or f16: an f32 model's matmul/gemm weights "
                       "stored in that type and the products computed in it with f32 "
                       "accumulation; everything else, inputs and outputs stay f32 (the "
                       "command reports the outputs' difference from the f32 build; see "
                       "flowc/passes/precision.py)", metavar="TYPE"))
    profile: bool = field(default=False, metadata=_cli(
        "--profile", "time every kernel call (for 'flowc run DIR --profile' and 'flowc "
                     "profile DIR'); off by default: no cost, no symbols"))
    train: bool = field(default=False, metadata=_cli(
        "--train", "compile a training artifact of an ONNX model: every float initializer "
                   "becomes a variable; its train_step entry takes the model's inputs and "
                   "'labels', returns 'loss' and updates the variables, its run entry is "
                   "inference on the current ones (see --loss, --optimizer, --frozen)"))
    loss: str = field(default="cross-entropy", metadata=_cli(
        "--loss", "with --train: the loss on the model's output, mean over the batch: softmax "
                  "cross entropy of logits [N, C] against int64 labels [N], or mse against a "
                  "target of the output's shape", choices=("cross-entropy", "mse")))
    optimizer: str = field(default="sgd{lr=0.01}", metadata=_cli(
        "--optimizer", "with --train: the update, written like a pass's options: "
                       "sgd{lr=0.05,momentum=0.9,nesterov=true}, "
                       "adam{lr=0.001,beta1=0.9,beta2=0.999}, adamw{lr=0.001,weight_decay=0.01}, "
                       "rmsprop{lr=0.01,alpha=0.99}, adagrad{lr=0.01}", metavar="SPEC"))
    data_parallel: bool = field(default=False, metadata=_cli(
        "--data-parallel", "with --train: the step averages each gradient over the ranks of "
                           "the MPI job it runs in (bucketed allreduces) before the update; "
                           "one process is unchanged (docs/distributed.md)"))
    frozen: tuple[str, ...] = field(default=(), metadata=_cli(
        "--frozen", "with --train: initializers that stay constant (names separated by "
                    "commas; repeatable)", metavar="NAME,...", action="append"))
    loss_output: str | None = field(default=None, metadata=_cli(
        "--loss-output", "with --train: the model output the loss takes (needed when the "
                         "model has several)", metavar="NAME"))
    inference: tuple[str, ...] = field(default=(), metadata=_cli(
        "--inference", "a graph with variables compiled as is (not --train): give it a "
                       "second entry; run computes only these tensors (names separated by "
                       "commas; repeatable), train_step runs the whole graph, on one context",
                       metavar="NAME,...", action="append"))
    signature: str | None = field(default=None, metadata=_cli(
        "--signature", "a TensorFlow SavedModel: the signature to compile (default "
                       "serving_default, else its only one)", metavar="NAME"))
    feeds: tuple[str, ...] = field(default=(), metadata=_cli(
        "--feed", "a TensorFlow model: feed tensor NODE[:i] as an input of this shape and "
                  "dtype (e.g. x=4x16:f32; any tensor can be fed); repeatable",
        metavar="NODE[:i]=SHAPE:DTYPE", action="append"))
    fetches: tuple[str, ...] = field(default=(), metadata=_cli(
        "--fetch", "a TensorFlow model: compute tensor NODE[:i] (an output named NODE, or "
                   "NODE_i); repeatable; the graph is pruned to the fetches", metavar="NODE[:i]",
        action="append"))
    tf_config: str | None = field(default=None, metadata=_cli(
        "--config", "a TensorFlow model: its feeds and fetches from a tf2xla.Config in text "
                    "form (tfcompile's model.config.pbtxt)", metavar="FILE"))
    custom_ops: tuple[Any, ...] = field(default=(), metadata=_cli(
        "--custom-op", "compute ONNX op DOMAIN::OpName with the C function SYMBOL (default: "
                       "opname in lower case) of lib.c, int fn(const flowc_custom_args *) "
                       "(flowc_custom_op.h; docs/custom_ops.md); its output types are the "
                       "model's declared ones (the Python API takes a shape function: "
                       "flowc.frontend.custom_ops.CustomOp); repeatable",
        metavar="DOMAIN::OpName=lib.c[:SYMBOL]", action="append"))
    # API only: objects and callbacks
    cache: CompileCache | bool | None = None
    """None: the environment's cache ($FLOWC_CACHE_DIR); False: none; or a CompileCache."""
    explain_placement: Report | None = None
    """Receives the placer's report (with `devices`)."""
    explain_memory: Report | None = None
    """Receives the arena layout over time (plan/memreport.py)."""
    progress: Progress | None = None
    """Hears the passes, the kernels and the link stage; None: silent."""
    backend: Backend | None = None
    """The CPU targets' kernel compiler, a `flowc.codegen.backend.Backend` (None: flowc's
    MLIR/LLVM `CpuBackend`); tests substitute their own. GPU kernels use `GpuBackend`."""

    def with_overrides(self, overrides: Mapping[str, Any]) -> CompileOptions:
        """These options with `overrides`' fields replaced; an unknown name is an error."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise FlowcError(f"flowc.compile: unknown option{'s' * (len(unknown) > 1)} "
                             f"{', '.join(unknown)}; the options are {', '.join(sorted(known))}")
        fixed = {k: tuple(v) if k in ("gpu_archs", "place", "feeds", "fetches", "custom_ops")
                 and v is not None else v
                 for k, v in overrides.items()}
        for key in ("frozen", "inference"):  # names, each item maybe several, by commas
            if key in fixed:
                items = fixed[key] or ()
                fixed[key] = tuple(name.strip() for item in ([items] if isinstance(items, str)
                                                             else items)
                                   for name in item.split(",") if name.strip())
        if fixed.get("gpu_archs") is None and "gpu_archs" in fixed:
            fixed["gpu_archs"] = ()
        if fixed.get("dims") is None and "dims" in fixed:
            fixed["dims"] = {}
        return dataclasses.replace(self, **fixed)


def cli_fields() -> list[dataclasses.Field]:
    """The fields `flowc compile` exposes as flags, in declaration order."""
    return [f for f in dataclasses.fields(CompileOptions) if "flag" in f.metadata]


def add_arguments(parser: argparse.ArgumentParser,
                  types: Mapping[str, Callable[[str], Any]] | None = None) -> None:
    """Add one flag per CLI field of CompileOptions to `parser`, in declaration order, each
    stored under the field's name (`types`: a converter per field name, for fields whose
    text needs one, e.g. a checked count for `batch`). A boolean field is a flag that sets
    it; an `append` field collects a list (`from_args` makes it the field's value); any
    other takes one value, defaulting to the field's default."""
    types = types or {}
    for f in cli_fields():
        kw = dict(f.metadata["argparse"])
        if isinstance(f.default, bool):
            kw["action"] = "store_true"
        elif kw.get("action") == "append":
            kw["default"] = []
        else:
            kw["default"] = f.default
        if f.name in types:
            kw["type"] = types[f.name]
        parser.add_argument(*f.metadata["flag"], dest=f.name, help=f.metadata["help"], **kw)


def from_args(args: argparse.Namespace,
              parse: Mapping[str, Callable[[Any], Any]] | None = None,
              **api: Any) -> CompileOptions:
    """The CompileOptions of `args` parsed by a parser `add_arguments` built (`parse`: a
    converter per field name for values that need one after argparse, e.g. the `--dim`
    list into a mapping; it raises FlowcError naming the flag for a bad value); `api`
    sets API-only fields (and any other field, over the command line's value)."""
    parse = parse or {}
    values = {f.name: parse.get(f.name, lambda v: v)(getattr(args, f.name))
              for f in cli_fields()}
    return CompileOptions().with_overrides({**values, **api})
