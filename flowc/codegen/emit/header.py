"""The per-model C header `NAME.h`: the artifact's public C API, documented in comments.

Contract: `accessor_names(names)` gives the C names used for typed accessors (derived by
`c_text.c_identifier`; the manifest records them); `render_header(info)` returns the header
text for a `ModelInfo`; every name in it goes through `c_text.c_comment`. Every exported
symbol starts with `NAME_`, so several models link into one
program. The status codes are the same in every header (guarded), matching flowc_rt.h.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowc.codegen.emit.c_text import c_comment, c_identifier
from flowc.runtime.abi import ABI_VERSION, DTYPE_CODES, STATUS

C_TYPES = {
    "bool": "uint8_t", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
    "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
    "f16": "uint16_t", "bf16": "uint16_t", "f32": "float", "f64": "double",
    # narrow types: one element per byte, in its low bits
    "f8E4M3FN": "uint8_t", "f8E4M3FNUZ": "uint8_t", "f8E5M2": "uint8_t",
    "f8E5M2FNUZ": "uint8_t", "f8E8M0FNU": "uint8_t", "f4E2M1FN": "uint8_t",
    "i4": "uint8_t", "u4": "uint8_t", "i2": "uint8_t", "u2": "uint8_t",
}


@dataclass(frozen=True)
class TensorInfo:
    name: str  # as in the graph
    c_name: str  # its accessor suffix
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class EntryInfo:
    """An entry of the artifact after `run` (a training artifact's `train_step`)."""

    name: str  # its C function is NAME_<name>
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    arena_bytes: int  # what its plan uses of the one arena
    labels: int | None = None  # the input of class indices checked before it runs
    classes: int = 0  # ... each in [0, classes)


@dataclass(frozen=True)
class ModelInfo:
    name: str  # the symbol prefix
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    arena_bytes: int
    weights_file: str | None
    regions: tuple = ()  # partitions.Region per device, when the graph is partitioned
    memory: tuple[str, ...] = ()  # the working-memory statement (working_memory.py)
    variables: tuple[TensorInfo, ...] = ()  # state kept across runs (plan/state.py)
    entries: tuple[EntryInfo, ...] = ()  # the entries after `run` (a training artifact's)
    dims: tuple[str, ...] = ()  # dims given at run time: one line each (dynamic.dims_note)


# the API's own functions NAME_input_X / NAME_output_X (the descriptor getters): a tensor's
# typed accessor never takes one of these suffixes (a tensor named "shape" gets "shape_2")
RESERVED_SUFFIXES = ("name", "dtype", "rank", "shape", "bytes")


def accessor_names(names: list[str]) -> list[str]:
    """Distinct C identifiers for `names`, in order (a clash, with each other or with a
    RESERVED_SUFFIXES getter, gets `_2`, `_3` ...)."""
    used: set[str] = set(RESERVED_SUFFIXES)
    result = []
    for name in names:
        base = candidate = c_identifier(name)
        k = 2
        while candidate in used:
            candidate, k = f"{base}_{k}", k + 1
        used.add(candidate)
        result.append(candidate)
    return result


def _shape(t: TensorInfo) -> str:
    return f"{t.dtype}[{','.join(map(str, t.shape))}]"


def _regions(info: ModelInfo) -> str:
    """The header's lines on partitions: one per device, with its arena region."""
    if not info.regions:
        return ""
    rows = "".join(f"\n *   {c_comment(r.device)}: {r.nbytes} arena bytes at offset "
                   f"{r.offset}" for r in info.regions)
    return (f"\n * The graph is partitioned over {len(info.regions)} devices; {info.name}_run runs "
            "the first on the\n * calling thread and each other on a worker thread of the "
            "context, each in its own\n * region of the arena:" + rows)


def _memory(info: ModelInfo) -> str:
    return "".join(f"\n * {c_comment(line)}" for line in info.memory)


def _entries_note(info: ModelInfo) -> str:
    """The top comment's line on the entries after `run`, when there are any."""
    if not info.entries:
        return ""
    names = ", ".join(f"{info.name}_{e.name}" for e in info.entries)
    return (f"\n * Besides {info.name}_run (inference) it exports {names} on the same context "
            "(see Entries).")


def _entry_api(info: ModelInfo) -> str:
    """The declarations and documentation of the entries after `run`."""
    n = info.name
    if not info.entries:
        return ""
    text = [f"""
/* Entries. The artifact exports {len(info.entries) + 1} programs over one context: entry 0,
 * `run` ({n}_run, {n}_run_with and the accessors above), and each one below,
 * called like {n}_run_with: inputs[i] and outputs[j] point at its input i and
 * output j, in the dtypes and shapes of its tables ({n}_ENTRY_input_*; not
 * checked), aligned buffers used in place, others copied; the context keeps no pointer
 * to them. That form (rather than one typed parameter per tensor) is the same for every
 * model, so one C program drives any training artifact through the tables. All entries
 * share the variables (weights, optimizer state), the weights and the arena; calls on a
 * context take turns. */
int {n}_num_entries(void);
const char *{n}_entry_name(int k);"""]
    for e in info.entries:
        rows = "\n".join([f" *   input {i} '{c_comment(t.name)}': {_shape(t)}"
                          for i, t in enumerate(e.inputs)]
                         + [f" *   output {i} '{c_comment(t.name)}': {_shape(t)}"
                            for i, t in enumerate(e.outputs)])
        labels = "" if e.labels is None else (
            f"\n * Before anything runs it checks that every element of input "
            f"'{c_comment(e.inputs[e.labels].name)}' lies in\n * [0, {e.classes}); else it "
            f"fails with FLOWC_ERR_ARGUMENT, nothing changes, and\n * {n}_error names the "
            "first bad label and its index.")
        what = ("\n * One training step: it reads the model's inputs and the labels, writes the\n"
                " * loss of the batch (before the update) and updates the parameters and the\n"
                " * optimizer's state in place; a later run computes with the new weights."
                if e.name == "train_step" else "")
        text.append(f"""
/* Entry '{c_comment(e.name)}' ({e.arena_bytes} arena bytes).{what}{labels}
{rows} */
int {n}_{e.name}({n}_ctx *ctx, const void *const *inputs, void *const *outputs);""")
        for kind in ("input", "output"):
            text.append(f"""int {n}_{e.name}_num_{kind}s(void);
const char *{n}_{e.name}_{kind}_name(int i);
int {n}_{e.name}_{kind}_dtype(int i);
int {n}_{e.name}_{kind}_rank(int i);
const int64_t *{n}_{e.name}_{kind}_shape(int i);
size_t {n}_{e.name}_{kind}_bytes(int i);""")
    return "\n".join(text) + "\n"


def _shapes_note(info: ModelInfo) -> str:
    return ("shapes are fixed at compile time" if not info.dims else
            "each dynamic dim is shown at its upper bound")


def _dims_note(info: ModelInfo) -> str:
    """The header's lines on dims given at run time (none for a static model)."""
    if not info.dims:
        return ""
    lines = "\n".join(f" *   {c_comment(line)}" for line in info.dims)
    n = info.name
    return f"""
 * Dims given at run time, each read from an input's shape (its bounds, where it is read):
{lines}
 * Give each input's actual shape with {n}_set_input (or {n}_set_input_shape before
 * {n}_run_with); a run checks each dim against its bounds and every input axis of a dim
 * against the others (FLOWC_ERR_SHAPE naming the input, axis, dim and values: nothing
 * runs). Buffers and the arena are sized at the bounds, offsets fixed at the bound sizes;
 * a run uses the front of each buffer. After a run, {n}_run_output_shape(ctx, i) is
 * output i's shape (its byte size: the product times the element size); the outputs'
 * buffers must hold that many bytes (at most {n}_output_bytes(i)).
 * {n}_num_dims, {n}_dim_name, {n}_dim_lo and {n}_dim_hi list the dims."""


def _dims_api(info: ModelInfo) -> str:
    n = info.name
    return "" if not info.dims else f"""
/* Dims given at run time (see the top of this file). */
int {n}_set_input_shape({n}_ctx *ctx, int i, int rank, const int64_t *shape);
const int64_t *{n}_run_output_shape(const {n}_ctx *ctx, int i);
int {n}_num_dims(void);
const char *{n}_dim_name(int k);
int64_t {n}_dim_lo(int k);
int64_t {n}_dim_hi(int k);
"""


def render_header(info: ModelInfo) -> str:
    n = info.name
    guard = f"FLOWC_MODEL_{n.upper()}_H"
    status = "\n".join(f"#define {name} {code}" for code, name in STATUS.items())
    dtypes = "\n".join(f"#define FLOWC_DTYPE_{name.upper()} {code}"
                       for name, code in DTYPE_CODES.items())
    tables = "\n".join(
        [f" *   input {i} '{c_comment(t.name)}': {_shape(t)}" for i, t in enumerate(info.inputs)]
        + [f" *   output {i} '{c_comment(t.name)}': {_shape(t)}"
           for i, t in enumerate(info.outputs)]
        + [f" *   variable {i} '{c_comment(t.name)}': {_shape(t)}"
           for i, t in enumerate(info.variables)])
    accessors = []
    for i, t in enumerate(info.inputs):
        accessors.append(f"/* Input {i} '{c_comment(t.name)}', {_shape(t)}: write it before "
                         f"{n}_run. */\n{C_TYPES[t.dtype]} *{n}_input_{t.c_name}({n}_ctx *ctx);")
    for i, t in enumerate(info.outputs):
        accessors.append(f"/* Output {i} '{c_comment(t.name)}', {_shape(t)}: read it after "
                         f"{n}_run. */\nconst {C_TYPES[t.dtype]} *{n}_output_{t.c_name}"
                         f"(const {n}_ctx *ctx);")
    memory = _memory(info)
    weights = (f"Its weights are in '{c_comment(info.weights_file)}', mapped read-only from "
               f"the library's directory\n * (or from the path given to {n}_create_with_weights)."
               if info.weights_file else "Its weights are embedded in the library.")
    return f"""/* {n}.h: a model compiled by flowc (artifact ABI {ABI_VERSION}).
 *
 * Use: {n}_create, fill the inputs (typed accessors, or {n}_set_input), {n}_run, read the
 * outputs (or, on buffers of your own, {n}_run_with in one call), {n}_destroy. Functions
 * returning int return FLOWC_OK (0) or a status code; then {n}_error(ctx) is a non-empty
 * message. Calls on one context are serialized: a call made while another thread runs
 * it (set_threads, set_arena, set_input, set_output, the accessors, variable, the
 * checkpoints, destroy) waits for that
 * run to return, and runs take turns; for parallel runs use one context per thread. No
 * call may use a context once {n}_destroy has begun.{_entries_note(info)}
 * {weights}
 * Tensors are dense row-major; {_shapes_note(info)}:
{tables}{_dims_note(info)}
 * Temporaries live in one arena of {info.arena_bytes} bytes per context.{_regions(info)}{memory}
 */
#ifndef {guard}
#define {guard}

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

#ifndef FLOWC_STATUS_CODES
#define FLOWC_STATUS_CODES
{status}
#endif

#ifndef FLOWC_DTYPE_CODES
#define FLOWC_DTYPE_CODES
{dtypes}
#endif

typedef struct {n}_ctx {n}_ctx;

/* Creates a context in *out. On failure *out may still hold a context carrying the
 * message ({n}_error) that the caller must {n}_destroy; it is NULL only when out of memory. */
int {n}_create({n}_ctx **out);
/* As {n}_create, with the weights side file at weights_path (NULL: next to the library). */
int {n}_create_with_weights({n}_ctx **out, const char *weights_path);
/* Waits for a run in flight on another thread, then frees the context. */
void {n}_destroy({n}_ctx *ctx);
/* The message of the last failure on ctx; never empty after one. */
const char *{n}_error(const {n}_ctx *ctx);
/* Runs the model on the current inputs. */
int {n}_run({n}_ctx *ctx);
/* One run on the caller's buffers, in one call: inputs[i] and outputs[j] point at
 * input i and output j in the model's dtypes and shapes (not checked: see the tables).
 * As with set_input/set_output, 64-byte aligned buffers are used in place, others copied;
 * afterwards the context uses its own buffers again (it keeps no pointer to these). */
int {n}_run_with({n}_ctx *ctx, const void *const *inputs, void *const *outputs);
/* GPU models: *ms = the device time of the last run's kernels (CUDA events after the
 * input copies and before the output copies); FLOWC_ERR_ARGUMENT on a CPU-only model or
 * before a run. */
int {n}_device_ms({n}_ctx *ctx, double *ms);
/* Threads used by {n}_run: 1 (the default) to 1024, else FLOWC_ERR_ARGUMENT. */
int {n}_set_threads({n}_ctx *ctx, int threads);
/* Uses a caller-owned arena (64-byte aligned, {n}_arena_bytes() bytes); NULL: own one. */
int {n}_set_arena({n}_ctx *ctx, void *arena, size_t bytes);
size_t {n}_arena_bytes(void);

/* Tables. */
int {n}_abi_version(void);
const char *{n}_graph_hash(void);
int {n}_num_inputs(void);
int {n}_num_outputs(void);
const char *{n}_input_name(int i);
int {n}_input_dtype(int i);
int {n}_input_rank(int i);
const int64_t *{n}_input_shape(int i);
size_t {n}_input_bytes(int i);
const char *{n}_output_name(int i);
int {n}_output_dtype(int i);
int {n}_output_rank(int i);
const int64_t *{n}_output_shape(int i);
size_t {n}_output_bytes(int i);

/* Generic access by index. set_input checks dtype and shape; 64-byte aligned data is
 * used in place (it must stay valid until set again), other data is copied. set_output
 * likewise makes {n}_run write into the caller's buffer. {n}_input / {n}_output give the
 * context's own buffers (and make {n}_run use them again). */
int {n}_set_input({n}_ctx *ctx, int i, const void *data, int dtype, int rank,
    const int64_t *shape);
int {n}_set_output({n}_ctx *ctx, int i, void *data, int dtype, int rank,
    const int64_t *shape);
void *{n}_input({n}_ctx *ctx, int i);
const void *{n}_output(const {n}_ctx *ctx, int i);
{_dims_api(info)}
/* Variables: state the model keeps across runs in the context (outside the arena), set
 * from their initial values by {n}_create; runs read and assign them in graph order.
 * {n}_variable gives variable `name`'s buffer (dense, its dtype and shape; valid until
 * {n}_destroy; read or write it between runs), or NULL with {n}_error set for a name
 * the model has none of. The tables describe variable i = 0 .. {n}_num_variables() - 1.
 * {n}_save_checkpoint writes every variable to a safetensors file at `path` (through a
 * temporary file in the same directory, renamed: a failed save leaves no partial file
 * under `path`); its "__metadata__" holds the model name, flowc version and graph hash.
 * {n}_load_checkpoint reads one back, checking names, dtypes and shapes; on any failure
 * it changes no variable and {n}_error names the first mismatch. */
void *{n}_variable({n}_ctx *ctx, const char *name);
int {n}_num_variables(void);
const char *{n}_variable_name(int i);
int {n}_variable_dtype(int i);
int {n}_variable_rank(int i);
const int64_t *{n}_variable_shape(int i);
size_t {n}_variable_bytes(int i);
int {n}_save_checkpoint({n}_ctx *ctx, const char *path);
int {n}_load_checkpoint({n}_ctx *ctx, const char *path);
{_entry_api(info)}
/* Typed accessors. */
{chr(10).join(accessors)}

#ifdef __cplusplus
}}
#endif
#endif
"""
