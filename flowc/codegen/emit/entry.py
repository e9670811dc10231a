"""The generated C file `NAME_model.c`: the entry function, the tables, the public API.

Contract: `render_model_c(program, info, graph_hash, cpu_features, embedded)` returns C
source that (with the runtime compiled under the prefix `NAME_`, the kernels object and,
when `embedded`, the weights object defining `NAME_weights`) implements every function
`NAME.h` declares. The entry function calls the kernels in program order with pointers
into the inputs, outputs, weights and arena (then the call's scratch buffers, arena slots
the plan gave it, and `ts`, the thread-scratch region, for a kernel that takes one), runs
control steps (`if`/`loop` bodies, control_c.py), then copies the outputs that no kernel
wrote in place. An artifact with several entries
(`Program.siblings`: a training artifact's `train_step`) gets one entry function per
entry (`entry_NAME`), its descriptor tables (`NAME_inputs` ...), the model's table of
entries and `NAME_<entry>` wrappers of the runtime's `rt_run_entry`; the model's arena and
thread scratch are the largest entry's. Only the functions of `NAME.h` have
default visibility. Names (tensors, nodes) appear only as `c_text.c_string` literals and
in `c_text.c_comment` comments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowc.codegen.emit.c_text import c_comment, c_string
from flowc.codegen.emit.control_c import render_control
from flowc.codegen.emit.entry_args import ENTRY_PARAMS, ENTRY_UNUSED, call_arguments, pointer
from flowc.codegen.emit.gpu_entry import model_field, render_gpu_program
from flowc.codegen.emit.header import C_TYPES, ModelInfo, TensorInfo
from flowc.codegen.emit.partition_entry import model_fields, output_field, render_partitioned
from flowc.codegen.emit.profile_c import profile_api, profile_prelude, timed
from flowc.codegen.kernel_code import KernelScratch
from flowc.codegen.kernels import dim_symbols
from flowc.codegen.plan.dynamic import c_bytes, dim_indices, dims_locals, dims_tables
from flowc.codegen.plan.partitions import host_kernels
from flowc.codegen.plan.program import Call, Kernel, Program
from flowc.codegen.plan.state import copy_step
from flowc.runtime.abi import ABI_VERSION, DTYPE_CODES

# CPU features the runtime checks before running (gcc's __builtin_cpu_supports names).
X86_FEATURES = ("sse3", "ssse3", "sse4.1", "sse4.2", "avx", "avx2", "fma", "f16c", "bmi",
                "bmi2", "popcnt",
                "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512vnni",
                "avx512bf16", "avx512fp16")


def _descs(kind: str, tensors: Sequence[TensorInfo], program: Program,
           table: str = "") -> list[str]:
    """The descriptor table `TABLEKINDs` (`inputs`, `train_step_inputs` ...)."""
    lines = []
    for i, t in enumerate(tensors):
        dims = ", ".join(str(d) for d in t.shape) or "0"
        lines.append(f"static const int64_t {table}{kind}_shape_{i}[] = {{{dims}}};")
    rows = []
    symbolic = {"input": program.symbolic_inputs,
                "output": program.symbolic_outputs}.get(kind) if program.dims else None
    for i, (t, tt) in enumerate(zip(tensors, _types(kind, program), strict=True)):
        nbytes = int(tt.num_elements) * tt.dtype.np.itemsize
        dim_of = ""
        if symbolic is not None:
            lines.append(f"static const int32_t {table}{kind}_dims_{i}[] = "
                         f"{{{dim_indices(symbolic[i], program.dims)}}};")
            dim_of = f", {table}{kind}_dims_{i}"
        rows.append(f"  {{{c_string(t.name)}, {DTYPE_CODES[t.dtype]}, {len(t.shape)}, "
                    f"{table}{kind}_shape_{i}, {nbytes}u{dim_of}}},")
    body = "\n".join(rows) or "  {0}"
    lines.append(f"static const flowc_tensor_desc {table}{kind}s[] = {{\n{body}\n}};")
    return lines


def _types(kind: str, program: Program) -> list:
    """The TensorTypes of the program's inputs, outputs or variables."""
    if kind == "variable":
        return [v.type for v in program.variables]
    return [t for _, t in (program.inputs if kind == "input" else program.outputs)]


def _cpu_check(features: Sequence[str]) -> list[str]:
    checks = [f for f in features if f in X86_FEATURES]
    lines = ["static const char *cpu_missing(void) {"]
    if checks:
        lines.append("#if defined(__x86_64__) || defined(__i386__)")
        lines.append("  __builtin_cpu_init();")
        for f in checks:
            lines.append(f'  if (!__builtin_cpu_supports("{f}")) return "{f}";')
        lines.append("#endif")
    lines += ["  return 0;", "}"]
    return lines


def kernel_prototype(program: Program, kernel: Kernel) -> str:
    needs = program.scratch.get(kernel.symbol, KernelScratch())
    params = (["const void *"] * len(kernel.body.inputs) + ["void *"] * len(kernel.body.outputs)
              + ["const int64_t *"] * bool(dim_symbols(kernel.body))
              + ["void *"] * needs.arguments)
    return f"FLOWC_HIDDEN void {kernel.symbol}({', '.join(params)});"


def _entry(program: Program, profile: bool = False, function: str = "entry") -> list[str]:
    lines = [f"static void {function}({ENTRY_PARAMS}) {{", f"  {ENTRY_UNUSED}",
             *dims_locals(program)]
    index = {k.symbol: i for i, k in enumerate(program.kernels)}

    def kernel_c(call: Call, args: list[str]) -> str:
        call_c = f"{call.kernel.symbol}({', '.join(args)});"
        if profile:  # profile_c.py: time the call into the run's event buffer
            call_c = timed(call_c, index[call.kernel.symbol])
        return call_c

    for step, call in enumerate(program.calls):
        lines.append(f"  /* {c_comment(', '.join(call.nodes))} */")
        if call.state is not None:  # a variable copied out or in (plan/state.py)
            dst, src, nbytes = copy_step(program, call)
            lines.append(f"  memmove({pointer(dst)}, {pointer(src)}, {nbytes}u);")
        elif call.control is not None:  # an if/loop running its bodies (control_c.py)
            lines += render_control(program, call, kernel_c)
        else:
            lines.append(f"  {kernel_c(call, call_arguments(program, step))}")
    for j, source, nbytes in program.copies:
        size = (c_bytes(program.symbolic_outputs[j], program.dims) if program.dims
                else f"{nbytes}u")
        lines.append(f"  memcpy(out[{j}], {pointer(source)}, {size});")
    lines.append("}")
    return lines


def _state_tables(program: Program, info: ModelInfo, flowc_version: str) -> list[str]:
    """The variables' tables (descriptors, block offsets, initial values' weights offsets,
    -1 for zeros) and the checkpoint metadata (key, value pairs, then NULL)."""
    offsets = ", ".join(f"{v.offset}u" for v in program.variables) or "0"
    inits = ", ".join(str(-1 if v.init is None else v.init) for v in program.variables) or "0"
    meta = "".join(f"{c_string(k)}, {c_string(v)}, "
                   for k, v in program.checkpoint_metadata.items())
    return [*_descs("variable", info.variables, program),
            f"static const size_t variable_offsets[] = {{{offsets}}};",
            f"static const int64_t variable_inits[] = {{{inits}}};",
            f"static const char *const checkpoint_metadata[] = {{{meta}0}};",
            f"static const char flowc_version[] = {c_string(flowc_version)};"]


def _state_fields(program: Program) -> list[str]:
    """The model descriptor's variable fields (designated: they follow the optional ones)."""
    return [f"  .num_variables = {len(program.variables)}, .variables = variables,",
            "  .variable_offsets = variable_offsets, .variable_inits = variable_inits,",
            f"  .variables_bytes = {program.variables_bytes}u, .flowc_version = flowc_version,",
            "  .checkpoint_metadata = checkpoint_metadata,"]


def _entries(program: Program, info: ModelInfo, profile: bool) -> list[str]:
    """The entries after `run`: their descriptor tables and functions (`entry_NAME`), and
    the table of every entry (entry 0: `run`, the model's inputs, outputs and `entry`)."""
    lines = []
    rows = [f"  {{\"run\", {len(info.inputs)}, inputs, {len(info.outputs)}, outputs, entry, "
            f"{program.arena_bytes}u, -1, 0}},"]
    for p, e in zip(program.siblings, info.entries, strict=True):
        lines += [*_descs("input", e.inputs, p, f"{e.name}_"),
                  *_descs("output", e.outputs, p, f"{e.name}_"),
                  *_entry(p, profile, f"entry_{e.name}")]
        labels = -1 if e.labels is None else e.labels
        rows.append(f"  {{{c_string(e.name)}, {len(e.inputs)}, {e.name}_inputs, "
                    f"{len(e.outputs)}, {e.name}_outputs, entry_{e.name}, {e.arena_bytes}u, "
                    f"{labels}, {e.classes}}},")
    body = "\n".join(rows)
    return [*lines, f"static const flowc_entry entries[] = {{\n{body}\n}};"]


def _entry_api(info: ModelInfo) -> list[str]:
    """NAME_num_entries, NAME_entry_name and, per entry after `run`, its function and
    tables (header.py documents them)."""
    n, api = info.name, "__attribute__((visibility(\"default\")))"
    if not info.entries:
        return []
    lines = [f"{api} int {n}_num_entries(void) {{ return model.num_entries; }}",
             f"{api} const char *{n}_entry_name(int k) {{",
             "  return k >= 0 && k < model.num_entries ? entries[k].name : 0;\n}"]
    for k, e in enumerate(info.entries, start=1):
        lines += [f"{api} int {n}_{e.name}({n}_ctx *ctx, const void *const *inputs, "
                  "void *const *outputs) {",
                  f"  return {n}_rt_run_entry((flowc_ctx *)ctx, {k}, inputs, outputs);\n}}"]
        for kind in ("input", "output"):
            table, count = f"{e.name}_{kind}s", len(e.inputs if kind == "input" else e.outputs)
            get = f"(i >= 0 && i < {count} ? &{table}[i] : 0)"
            lines += [
                f"{api} int {n}_{e.name}_num_{kind}s(void) {{ return {count}; }}",
                f"{api} const char *{n}_{e.name}_{kind}_name(int i) {{",
                f"  return {get} ? {table}[i].name : 0;\n}}",
                f"{api} int {n}_{e.name}_{kind}_dtype(int i) {{ "
                f"return {get} ? {table}[i].dtype : -1; }}",
                f"{api} int {n}_{e.name}_{kind}_rank(int i) {{ "
                f"return {get} ? {table}[i].rank : -1; }}",
                f"{api} const int64_t *{n}_{e.name}_{kind}_shape(int i) {{",
                f"  return {get} ? {table}[i].shape : 0;\n}}",
                f"{api} size_t {n}_{e.name}_{kind}_bytes(int i) {{ "
                f"return {get} ? {table}[i].bytes : 0; }}",
            ]
    return lines


def _dims_api(info: ModelInfo) -> list[str]:
    """The functions of a model with dims given at run time (header.py documents them)."""
    n, api, ctx = info.name, "__attribute__((visibility(\"default\")))", "(flowc_ctx *)ctx"
    if not info.dims:
        return []
    get = "k >= 0 && k < model.num_dims"
    return [
        f"{api} int {n}_set_input_shape({n}_ctx *ctx, int i, int rank, const int64_t *shape) {{",
        f"  return {n}_rt_set_input_shape({ctx}, i, rank, shape);\n}}",
        f"{api} const int64_t *{n}_run_output_shape(const {n}_ctx *ctx, int i) {{",
        f"  return {n}_rt_output_shape((const flowc_ctx *)ctx, i);\n}}",
        f"{api} int {n}_num_dims(void) {{ return model.num_dims; }}",
        f"{api} const char *{n}_dim_name(int k) {{ return {get} ? model.dims[k].name : 0; }}",
        f"{api} int64_t {n}_dim_lo(int k) {{ return {get} ? model.dims[k].lo : -1; }}",
        f"{api} int64_t {n}_dim_hi(int k) {{ return {get} ? model.dims[k].hi : -1; }}",
    ]


def _api(info: ModelInfo) -> list[str]:
    n = info.name
    api = "__attribute__((visibility(\"default\")))"
    ctx = "(flowc_ctx *)ctx"
    lines = [
        f"{api} int {n}_create({n}_ctx **out) {{",
        f"  return {n}_rt_create(&model, 0, (flowc_ctx **)out);\n}}",
        f"{api} int {n}_create_with_weights({n}_ctx **out, const char *path) {{",
        f"  return {n}_rt_create(&model, path, (flowc_ctx **)out);\n}}",
        f"{api} void {n}_destroy({n}_ctx *ctx) {{ {n}_rt_destroy({ctx}); }}",
        f"{api} const char *{n}_error(const {n}_ctx *ctx) {{",
        f"  return {n}_rt_error((const flowc_ctx *)ctx);\n}}",
        f"{api} int {n}_run({n}_ctx *ctx) {{ return {n}_rt_run({ctx}); }}",
        f"{api} int {n}_run_with({n}_ctx *ctx, const void *const *inputs, "
        "void *const *outputs) {",
        f"  return {n}_rt_run_with({ctx}, inputs, outputs);\n}}",
        f"{api} int {n}_device_ms({n}_ctx *ctx, double *ms) {{",
        f"  return {n}_rt_device_ms({ctx}, ms);\n}}",
        f"{api} int {n}_set_threads({n}_ctx *ctx, int threads) {{",
        f"  return {n}_rt_set_threads({ctx}, threads);\n}}",
        f"{api} int {n}_set_arena({n}_ctx *ctx, void *arena, size_t bytes) {{",
        f"  return {n}_rt_set_arena({ctx}, arena, bytes);\n}}",
        f"{api} size_t {n}_arena_bytes(void) {{ return model.arena_bytes; }}",
        f"{api} int {n}_abi_version(void) {{ return {ABI_VERSION}; }}",
        f"{api} const char *{n}_graph_hash(void) {{ return model.graph_hash; }}",
        f"{api} int {n}_num_inputs(void) {{ return model.num_inputs; }}",
        f"{api} int {n}_num_outputs(void) {{ return model.num_outputs; }}",
    ]
    lines += [
        f"{api} void *{n}_variable({n}_ctx *ctx, const char *name) {{",
        f"  return {n}_rt_variable({ctx}, name);\n}}",
        f"{api} int {n}_save_checkpoint({n}_ctx *ctx, const char *path) {{",
        f"  return {n}_rt_save_checkpoint({ctx}, path);\n}}",
        f"{api} int {n}_load_checkpoint({n}_ctx *ctx, const char *path) {{",
        f"  return {n}_rt_load_checkpoint({ctx}, path);\n}}",
        f"{api} int {n}_num_variables(void) {{ return model.num_variables; }}",
    ]
    for kind in ("input", "output", "variable"):
        count = f"model.num_{kind}s"
        get = f"(i >= 0 && i < {count} ? &{kind}s[i] : 0)"
        lines += [
            f"{api} const char *{n}_{kind}_name(int i) {{",
            f"  return {get} ? {kind}s[i].name : 0;\n}}",
            f"{api} int {n}_{kind}_dtype(int i) {{ return {get} ? {kind}s[i].dtype : -1; }}",
            f"{api} int {n}_{kind}_rank(int i) {{ return {get} ? {kind}s[i].rank : -1; }}",
            f"{api} const int64_t *{n}_{kind}_shape(int i) {{",
            f"  return {get} ? {kind}s[i].shape : 0;\n}}",
            f"{api} size_t {n}_{kind}_bytes(int i) {{ return {get} ? {kind}s[i].bytes : 0; }}",
        ]
    lines += [
        f"{api} int {n}_set_input({n}_ctx *ctx, int i, const void *data, int dtype, int rank,"
        " const int64_t *shape) {",
        f"  return {n}_rt_set_input({ctx}, i, data, dtype, rank, shape);\n}}",
        f"{api} int {n}_set_output({n}_ctx *ctx, int i, void *data, int dtype, int rank,"
        " const int64_t *shape) {",
        f"  return {n}_rt_set_output({ctx}, i, data, dtype, rank, shape);\n}}",
        f"{api} void *{n}_input({n}_ctx *ctx, int i) {{ return {n}_rt_input({ctx}, i); }}",
        f"{api} const void *{n}_output(const {n}_ctx *ctx, int i) {{",
        f"  return {n}_rt_output((const flowc_ctx *)ctx, i);\n}}",
    ]
    lines += _dims_api(info)
    for i, t in enumerate(info.inputs):
        lines.append(f"{api} {C_TYPES[t.dtype]} *{n}_input_{t.c_name}({n}_ctx *ctx) {{ "
                     f"return {n}_rt_input({ctx}, {i}); }}")
    for i, t in enumerate(info.outputs):
        lines.append(f"{api} const {C_TYPES[t.dtype]} *{n}_output_{t.c_name}"
                     f"(const {n}_ctx *ctx) {{ "
                     f"return {n}_rt_output((const flowc_ctx *)ctx, {i}); }}")
    return lines


def render_model_c(program: Program, info: ModelInfo, graph_hash: str,
                   cpu_features: Sequence[str], embedded: bool, gpu: Any = None,
                   profile: bool = False, flowc_version: str = "") -> str:
    """`gpu`: the `GpuBinary` (flowc/codegen/kernel_code.py) of the kernels that run on a
    GPU: all of them (gpu_entry.py), or, for a partitioned program, those of its GPU partition
    (partition_entry.py); `profile`: time each kernel call and transfer (profile_c.py;
    CPU models, partitioned or not)."""
    if gpu is not None and not model_fields(program):
        return _render_gpu_model_c(program, info, graph_hash, embedded, gpu, flowc_version)

    n = info.name
    kernels = [kernel_prototype(program, k) for k in host_kernels(program)]
    has_weights = program.weights_bytes > 0
    weights = ([f"FLOWC_HIDDEN extern const unsigned char {n}_weights[];"]
               if has_weights and embedded else [])
    blob = f"{n}_weights" if has_weights and embedded else "0"
    side = c_string(info.weights_file) if info.weights_file else "0"
    scratch = max(p.thread_scratch_bytes for p in program.entries)
    model = [
        "static const flowc_model model = {",
        f"  {c_string(n)}, {c_string(graph_hash)}, {ABI_VERSION},",
        f"  {len(info.inputs)}, inputs, {len(info.outputs)}, outputs,",
        f"  {info.arena_bytes}u, {scratch}u, {blob}, {program.weights_bytes}u, {side},",
        "  cpu_missing, entry,",
        *model_fields(program),
        *_state_fields(program),
        *output_field(program),
        *([f"  .num_entries = {len(program.entries)}, .entries = entries,"]
          if info.entries else []),
        *([f"  .num_dims = {len(program.dims)}, .dims = dim_table, .output_shapes = output_shapes,"]
          if program.dims else []),
        "};",
    ]
    parts = [
        f"/* {n}_model.c: generated by flowc; the entry function and API of model {n}. */",
        "#include <string.h>",
        '#include "flowc_rt.h"',
        f'#include "{n}.h"',
        "",
        *kernels,
        *weights,
        "",
        *_descs("input", info.inputs, program),
        *_descs("output", info.outputs, program),
        *_state_tables(program, info, flowc_version),
        *dims_tables(program),
        "",
        *_cpu_check(cpu_features),
        "",
        *(profile_prelude(n) if profile else []),
        *(render_partitioned(program, gpu, profile) if model_fields(program)
          else _entry(program, profile)),
        *(_entries(program, info, profile) if info.entries else []),
        "",
        *model,
        "",
        *_api(info),
        *_entry_api(info),
        *(profile_api(n) if profile else []),
    ]
    return "\n".join(parts) + "\n"


def _render_gpu_model_c(program: Program, info: ModelInfo, graph_hash: str, embedded: bool,
                        gpu: Any, flowc_version: str) -> str:
    """The model file of a GPU model: no CPU kernels; the runtime's CUDA backend runs the
    launches of `gpu_program`, so the entry function does nothing."""
    n = info.name
    has_weights = program.weights_bytes > 0
    blob = f"{n}_weights" if has_weights and embedded else "0"
    side = c_string(info.weights_file) if info.weights_file else "0"
    parts = [
        f"/* {n}_model.c: generated by flowc; the GPU program and API of model {n}. */",
        "#include <string.h>",
        '#include "flowc_rt.h"',
        f'#include "{n}.h"',
        "",
        *([f"FLOWC_HIDDEN extern const unsigned char {n}_weights[];"]
          if has_weights and embedded else []),
        *_descs("input", info.inputs, program),
        *_descs("output", info.outputs, program),
        *_state_tables(program, info, flowc_version),
        "",
        *render_gpu_program(program, gpu),
        "",
        f"static void entry({ENTRY_PARAMS}) {{",
        f"  {ENTRY_UNUSED}",
        "}",
        "",
        "static const flowc_model model = {",
        f"  {c_string(n)}, {c_string(graph_hash)}, {ABI_VERSION},",
        f"  {len(info.inputs)}, inputs, {len(info.outputs)}, outputs,",
        f"  {program.arena_bytes}u, 0u, {blob}, {program.weights_bytes}u, {side},",
        "  0, entry,",
        model_field(),
        *_state_fields(program),
        "};",
        "",
        *_api(info),
    ]
    return "\n".join(parts) + "\n"
