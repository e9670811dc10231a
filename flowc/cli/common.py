"""What the `flowc` commands share: options, input and output blocks.

Contract: every function raises `FlowcError` (naming the option, file or input) for bad
input or a file it cannot read or write, never a bare OSError or traceback.
- `error(message)` prints the one `flowc: error: MESSAGE` line on stderr.
- `Parser` is the argparse parser of every `flowc` command: a malformed command line (an
  unknown option, a value of the wrong kind) is one line, `flowc: error: COMMAND: ... (see
  'flowc COMMAND --help')`, with exit status 1, like every other error.
- `Count(lo, hi)` is the argparse type of every whole-number option: it accepts lo..hi.
- `add_report_options(parser)` adds `-q/--quiet` and `-v/--verbose` (exclusive);
  `progress_from(args, bar)` makes the `flowc.progress.Progress` they ask for (a progress bar
  on a terminal stderr, per-pass and per-kernel lines when verbose, nothing when quiet).
- `write_text(path, text)` writes a file.
- `read_source(path)` reads a .flowc file, stdin (`-`) or an ONNX model (imported);
  `load_graph(path)` parses it; `source_chunks(text, split)` / `split_chunks(text)` cut a
  text at `// -----` lines (`--split-input-file`), line numbers counting from the top.
- `parse_binding(text, what)` splits `NAME=VALUE`; `parse_sizes(items, what)` reads
  `NAME=SIZE` bindings into a dict; `load_inputs(items)` reads `--input NAME=X.npy` feeds.
- `random_array(rng, dtype, shape)` is one seeded random input (bools, floats, small ints).
- `emit_results(results, output_dir)` prints fetched arrays, or saves them as `.npy` files.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from flowc.ir.errors import FlowcError
from flowc.progress import Progress

if TYPE_CHECKING:
    from flowc.ir.graph import Graph

SPLIT_RE = re.compile(r"^// -----[ \t]*$", re.MULTILINE)
SPLIT_MARKER = "// -----\n"


def error(message: str) -> None:
    print(f"flowc: error: {message}", file=sys.stderr)


class Parser(argparse.ArgumentParser):
    """argparse's parser, reporting a malformed command line as one `flowc: error:` line
    with exit status 1 (argparse's own: the usage block, then a line, status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.removeprefix("flowc").strip()
        where = f"{command}: " if command else ""
        self.exit(1, f"flowc: error: {where}{message} (see '{self.prog} --help')\n")


class Count:
    """The argparse type of a whole-number option accepting `lo`..`hi`; its message says
    what was expected and what was found."""

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi

    def __call__(self, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            value = None
        if value is None or not self.lo <= value <= self.hi:
            raise argparse.ArgumentTypeError(f"expected a whole number from {self.lo} to "
                                             f"{self.hi}, found '{text}'")
        return value

    def __repr__(self) -> str:
        return f"Count({self.lo}, {self.hi})"


SEED = Count(0, 2**63 - 1)
THREADS = Count(0, 1024)  # 0: every core; the runtime runs at most 1024
RUNS = Count(1, 10**9)


def add_report_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", action="store_true",
                       help="print nothing but errors (no progress bar, no summary)")
    group.add_argument("-v", "--verbose", action="store_true",
                       help="print each pass's time, node counts and counters, and each "
                            "kernel's compile time and cache hit or miss, to stderr")


def progress_from(args: argparse.Namespace, bar: bool | None = None) -> Progress:
    """The Progress for `--quiet` / `--verbose` / neither (a bar when stderr is a terminal,
    unless `bar` is False: when something else streams to stderr meanwhile)."""
    level = "quiet" if args.quiet else "verbose" if args.verbose else "normal"
    return Progress(level=level, bar=bar)


def write_text(path: str | Path, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise FlowcError(f"cannot write '{path}': {exc.strerror or exc}") from None


# ---- input graphs ----------------------------------------------------------------------
def is_onnx_file(path: str) -> bool:
    """Whether FILE is an ONNX model: a `.onnx` name, or content that starts as a serialized
    ModelProto does (field 1, `ir_version`, a varint: byte 0x08, never the start of text)."""
    if path == "-":
        return False
    if Path(path).suffix.lower() == ".onnx":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(1) == b"\x08"
    except OSError:
        return False


def read_source(path: str) -> tuple[str | Graph, str]:
    """(text, name for error messages) of FILE, or of stdin when FILE is `-`; an ONNX model
    is imported, so its Graph stands for the text."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    if is_onnx_file(path):
        from flowc.frontend.onnx import import_onnx  # onnx loads only for ONNX input

        return import_onnx(path), path
    try:
        return Path(path).read_text(), path
    except OSError as exc:
        raise FlowcError(f"cannot read '{path}': {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise FlowcError(f"cannot read '{path}': not UTF-8 text ({exc.reason}); expected a "
                         ".flowc graph or an ONNX model") from None


def split_chunks(text: str) -> list[str]:
    """The chunks between `// -----` lines, each padded with the newlines before it so that
    error line numbers count from the top of the whole file."""
    chunks, start, line = [], 0, 0
    for m in SPLIT_RE.finditer(text):
        chunks.append("\n" * line + text[start:m.start()])
        line += text[start:m.end()].count("\n")
        start = m.end()
    chunks.append("\n" * line + text[start:])
    return chunks


def load_graph(path: str) -> Graph:
    """The graph of FILE (see `read_source`), parsed and verified."""
    text, name = read_source(path)
    from flowc.ir.parser import parse  # after reading: a missing file is a quick error

    return parse(text, name) if isinstance(text, str) else text


def source_chunks(text: str | Graph, split: bool) -> list[str | Graph]:
    """The graphs to process: the parts of the text (`--split-input-file`), or an imported
    ONNX graph alone."""
    if not isinstance(text, str):
        return [text]
    return split_chunks(text) if split else [text]


# ---- bindings and feeds ------------------------------------------------------------------
def parse_binding(text: str, what: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    if not eq or not name or not value:
        raise FlowcError(f"{what} '{text}' must look like NAME=VALUE")
    return name, value


def parse_sizes(items: Sequence[str], what: str) -> dict[str, int]:
    sizes = {}
    for text in items:
        name, eq, value = text.partition("=")
        if not eq or not name or not value.isdigit():
            raise FlowcError(f"{what} '{text}' must look like NAME=SIZE (a whole number)")
        sizes[name] = int(value)
    return sizes


def load_inputs(items: Sequence[str]) -> dict[str, np.ndarray]:
    """The feeds of `--input NAME=PATH.npy` options."""
    feeds = {}
    for text in items:
        name, path = parse_binding(text, "--input")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except OSError as exc:
            raise FlowcError(f"--input {name}: cannot read '{path}': "
                             f"{exc.strerror or exc}") from None
        except ValueError as exc:
            why = "it holds pickled objects, which are refused" if "pickle" in str(exc) \
                else str(exc)
            raise FlowcError(f"--input {name}: '{path}' is not a .npy array file ({why})") \
                from None
    return feeds


def random_array(rng: np.random.Generator, dtype: np.dtype, shape: Sequence[int]
                 ) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "f" or dtype.name.startswith(("bfloat", "float")):  # ml_dtypes too
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 10, size=shape).astype(dtype)


def emit_results(results: Mapping[str, np.ndarray], output_dir: str | None) -> None:
    """Print each array (name, dtype, shape, values), or save it as OUTPUT_DIR/NAME.npy."""
    if not output_dir:
        for name, array in results.items():
            print(f"{name}: dtype={array.dtype} shape={tuple(array.shape)}")
            print(np.array2string(np.asarray(array), threshold=1000))
        return
    out = Path(output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, array in results.items():
            path = out / (re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".npy")
            np.save(path, array, allow_pickle=False)
            print(f"{name}: wrote {path}")
    except OSError as exc:
        raise FlowcError(f"cannot write to '{out}': {exc.strerror or exc}") from None
