"""`flowc view`: draw a graph at any stage as HTML, SVG or DOT.

Contract: `load_view_graph(path, stage)` reads a `.flowc` file, an `.onnx` model
(imported), or a dump folder written by `flowc compile --dump-dir` / `flowc opt --dump-dir`
(the graph after the pass `stage` names, by pass name or number; by default the last one:
the compiled graph `NAME.flowc` when present); an artifact directory stands for the dump
folder inside it, and one without is an error saying how to draw its graph. `run(args)`
writes `-o OUT` in the format its suffix names (`.html`, `.svg`, `.dot`); the HTML page of
a dump folder holding a memory report (`memory.json`, from `flowc compile --dump-dir`) also
shows the arena over time, and `--memory` draws only that chart (`.svg` or `.html`). A
`.json` file is a runtime profile (`flowc run DIR --profile trace.json`), drawn as a
timeline (`.svg` or `.html`). Bad paths, stages, suffixes, traces and a `--memory` without
a report are `FlowcError`s naming the path. `add_parser(subparsers)` registers the command.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowc.cli.common import Count, write_text
from flowc.ir.errors import FlowcError

if TYPE_CHECKING:
    from flowc.ir.graph import Graph

# flowc.view (and networkx), and the IR, load only when `flowc view` runs: every other
# command's start-up skips them (bench/results/compile_time.md)
WRITERS = (".html", ".svg", ".dot")
_STEP = re.compile(r"(\d\d)-(.+)\.flowc\Z")


def dump_stage(folder: Path, stage: str | None) -> Path:
    """The IR file of `folder` (a dump folder) for `stage` (see the module contract)."""
    steps = sorted(p for p in folder.iterdir() if _STEP.match(p.name))
    finals = [p for p in folder.glob("*.flowc") if not _STEP.match(p.name)]
    if stage is None:
        if finals:
            return finals[0]
        if steps:
            return steps[-1]
    else:
        for p in steps:
            number, name = _STEP.match(p.name).groups()
            if stage in (number, name, str(int(number))):
                return p
    names = ", ".join(p.name for p in [*steps, *finals]) or "none"
    what = f"no stage '{stage}'" if stage else "no flowc IR"
    raise FlowcError(f"'{folder}': {what} (IR files: {names}); dump one with "
                     "'flowc compile --dump-dir DIR' or 'flowc opt --dump-dir DIR'")


def dump_folder(path: Path) -> Path:
    """`path`, or for an artifact directory (it has a manifest.json) the dump folder inside
    it (`flowc compile -o DIR --dump-dir DIR/dump`); an artifact holding none is an error
    saying how to draw its graph (the manifest names no source: artifacts hold no paths)."""
    manifest = path / "manifest.json"
    if not manifest.is_file():
        return path
    dumps = [d for d in sorted(path.iterdir()) if d.is_dir() and any(d.glob("*.flowc"))]
    if len(dumps) == 1:
        return dumps[0]
    if dumps:
        raise FlowcError(f"'{path}': an artifact directory holding several dump folders "
                         f"({', '.join(d.name for d in dumps)}); draw one of them")
    try:
        name = f" of model '{json.loads(manifest.read_text())['name']}'"
    except (OSError, ValueError, KeyError, TypeError):
        name = ""
    raise FlowcError(f"'{path}': an artifact directory{name}, which holds no graph; draw the "
                     f"model it was compiled from (flowc view MODEL -o OUT), or recompile with "
                     f"--dump-dir {path}/dump and draw that (flowc view {path} -o OUT)")


def load_view_graph(path: str, stage: str | None = None) -> Graph:
    """The graph that `flowc view PATH` draws."""
    p = Path(path)
    if not p.exists():
        raise FlowcError(f"'{path}': no such file or folder")
    if p.is_dir():
        p = dump_stage(dump_folder(p), stage)
    elif stage is not None:
        raise FlowcError(f"--stage {stage}: '{path}' is a file; --stage picks the graph after a "
                         "pass in a dump folder (flowc compile/opt --dump-dir DIR)")
    if p.suffix == ".onnx":
        from flowc.frontend.onnx import import_onnx  # onnx loads only for models

        return import_onnx(str(p))
    if p.suffix != ".flowc":
        raise FlowcError(f"'{path}': expected a .flowc graph, an .onnx model or a dump folder")
    from flowc.ir.parser import parse  # the IR loads only when a graph is drawn

    return parse(p.read_text(), str(p))


def memory_report(path: str, required: bool) -> dict | None:
    """The memory report of the dump folder `path` (None when there is none and it is not
    `required`)."""
    report = dump_folder(Path(path)) / "memory.json"
    if report.is_file():
        from flowc.view.memory import load_layout

        return load_layout(report)
    if required:
        raise FlowcError(f"'{path}': --memory draws a dump folder's memory report, and there "
                         "is no memory.json here; write one with 'flowc compile --dump-dir "
                         "DIR'")
    return None


def run(args: argparse.Namespace) -> int:
    from flowc.view import build_view, to_dot, to_html, to_svg
    from flowc.view.html import memory_page, timeline_page
    from flowc.view.memory import memory_svg
    from flowc.view.timeline import load_trace, one_run, timeline_svg

    suffix = Path(args.output).suffix
    chart = "the memory chart" if args.memory else (
        "a profile's timeline" if args.file.endswith(".json") else "")
    formats = (".html", ".svg") if chart else WRITERS
    if suffix not in formats:
        raise FlowcError(f"'{args.output}': the output must end in {', '.join(formats)} "
                         f"(the format{' of ' + chart if chart else ''})")
    if args.run is not None and (args.memory or not args.file.endswith(".json")):
        raise FlowcError(f"--run {args.run}: only a profile trace (.json) has runs; "
                         f"'{args.file}' is not one")
    if args.file.endswith(".json") and not args.memory:
        trace = load_trace(Path(args.file))
        if args.run is not None:
            trace = one_run(trace, args.run)
        text = timeline_svg(trace) if suffix == ".svg" else timeline_page(trace, args.file)
    elif args.memory:
        layout = memory_report(args.file, required=True)
        text = memory_svg(layout) if suffix == ".svg" else memory_page(layout)
    else:
        view = build_view(load_view_graph(args.file, args.stage))
        folder = Path(args.file).is_dir()
        memory = memory_report(args.file, required=False) if folder else None
        writers = {".html": lambda v: to_html(v, memory), ".svg": to_svg, ".dot": to_dot}
        text = writers[suffix](view)
    write_text(args.output, text)
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    view = sub.add_parser(
        "view", help="draw a graph as HTML, SVG or DOT",
        description="Draw FILE (a .flowc graph, an .onnx model, a folder written by "
                    "--dump-dir, or an artifact directory holding one) with nodes by op, "
                    "fused kernels as nested clusters, devices as coloured groups, "
                    "send/recv transfers marked and tensor types on edges; or a profile "
                    "(trace .json of 'flowc run DIR --profile') as a "
                    "timeline. The HTML page is self-contained (open it in a browser).")
    view.add_argument("file", metavar="FILE_OR_DIR", help="what to draw")
    view.add_argument("-o", "--output", metavar="OUT", required=True,
                      help="where to write: OUT.html, OUT.svg or OUT.dot")
    view.add_argument("--stage", metavar="PASS",
                      help="in a dump folder, the graph after this pass (name or number; "
                           "default: the last)")
    view.add_argument("--memory", action="store_true",
                      help="draw only the arena over time (a dump folder's memory.json): "
                           "each tensor's offset and size during the steps it is live")
    view.add_argument("--run", type=Count(0, 10**9), metavar="K",
                      help="of a profile trace, draw only run K (runs count from 0)")
    return view
