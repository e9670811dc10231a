"""Every `flowc` command with a bad value for every option: one line, `flowc: error: ...`,
exit status 1, no traceback (README, "Every error is one line").

The cases come from the argparse parsers themselves: each subcommand's positionals and
options are walked and given bad values by their kind (a `Count`'s bounds, choices, flags,
NAME=VALUE bindings, paths read or written, free text from `FREE_TEXT`), so an option
added later is covered, or fails `test_every_option_has_bad_values` until it is. Each case
runs in-process with the other arguments valid (`base_args`); compiling commands must fail
before compiling.
"""

from __future__ import annotations

import argparse
import traceback
from pathlib import Path

import numpy as np
import pytest

from flowc.cli import build_parser, main
from flowc.cli.common import Count

GRAPH = ("graph @g(%x: f32[N,4]) -> (y: f32[N,4]) {\n"
         "  %0 = relu %x : (f32[N,4]) -> f32[N,4] loc(\"r\")\n  return %0\n}\n")

# bad values of options that take free text, by (command, option)
FREE_TEXT: dict[tuple[str, str], list[str]] = {
    ("opt", "--pipeline"): ["no-such-pass", "cse{nope=1}", "cse{", "fuse,", "cse{}}",
                            "constant-fold{max_bytes=-1}", "constant-fold{max_bytes=x}",
                            "prune{keep_stateful=maybe}", "pack-weights{panel_bytes=0}",
                            "pack-weights{max_k=-1}", "winograd{tile=3}",
                            "winograd{min_size=-1}", "partition{default_device=tpu:0}",
                            "place{devices=cpu:0,place=zz}"],
    ("opt", "--print-ir-after"): ["no-such-pass"],
    ("compile", "--pipeline"): ["no-such-pass", "cse{nope=1}"],
    ("compile", "--target"): ["no-such-target"],
    ("compile", "--name"): ["flowc_rt"],  # any other text is made a C identifier
    ("compile", "--gpu-arch"): ["sm_1", "x"],
    ("compile", "--cpu"): ["no-such-cpu", "znver99"],
    ("compile", "--features"): ["+no-such-feature", "avx2", "+avx2,,"],
    ("compile", "--custom-op"): ["Swish", "com.example::Swish", "com.example::Swish=no.c",
                                 "com.example::Swish=no.c:"],
    ("compile", "--devices"): ["tpu:0", ",", "gpu"],
    ("compile", "--remat"): ["everything", "dots-saveable"],
    ("compile", "--precision"): ["i8", "BF16"],
    ("compile", "--optimizer"): ["adamx{lr=1}", "adam{foo=1}", "sgd{lr=x}", "sgd{lr=-1}",
                                 "sgd{lr=1", "{", "sgd{momentum=0.9,momentum=0.5}"],
    ("compile", "--frozen"): ["no-such-initializer", ","],
    ("compile", "--loss-output"): ["no-such-output"],
    ("compile", "--inference"): ["no-such-tensor"],
    # the TensorFlow options, on the base command lines' non-TF models: refused by name
    # (tests/frontend/tf/test_tf_errors.py gives them bad values on TF models)
    **{(command, option): values for command in ("import", "compile")
       for option, values in (("--signature", ["serving_default"]), ("--feed", ["x=4:f32", "x"]),
                              ("--fetch", ["y", "y:1"]))},
    ("run", "--fetch"): ["no-such-output"],
    ("quantize", "--percentile"): ["x", "40", "101", ""],
    ("view", "--stage"): ["no-such-pass"],
    ("launch", "--hosts"): ["no-such-host"],
    ("launch", "--mpiexec"): ["/no/such/mpiexec"],
    ("launch", "--measure"): ["profile.json"],  # with a TARGET (tests/distributed has more)
}
OUTPUTS = {"output", "output_dir", "dump_dir", "trace", "json", "profile"}  # paths written
# options that act only together with another: (command, option) -> the other
WITH = {("compile", "--place"): ["--devices", "cpu:0,cpu:1"],
        ("compile", "--device-profiles"): ["--devices", "cpu:0,cpu:1"],
        **{("compile", option): ["--train"] for option in ("--loss", "--optimizer", "--frozen",
                                                           "--loss-output")}}
BINDINGS = ("NAME=", "SYM=", "NODE=")  # metavars of NAME=VALUE options


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """A graph, an ONNX model, a binary file, a folder, a .npy array, and a tiny artifact
    compiled with --profile."""
    root = tmp_path_factory.mktemp("cli_bad")
    (root / "g.flowc").write_text(GRAPH)
    (root / "binary.bin").write_bytes(b"\xff\xfe\x00garbage")
    (root / "folder").mkdir()
    np.save(root / "a.npy", np.ones(3, np.float32))  # of no input's shape
    np.savez(root / "cal.npz", x=np.ones((2, 3, 4), np.float32))  # m.onnx's calibration
    import onnx

    from flowc.examples import zoo

    onnx.save(zoo.mlp(features=4, hidden=4, classes=2), str(root / "m.onnx"))
    assert main(["compile", str(root / "g.flowc"), "-o", str(root / "art"), "--profile",
                 "--batch", "2", "-q"]) == 0
    return {k: str(root / v) for k, v in [("graph", "g.flowc"), ("onnx", "m.onnx"),
                                           ("binary", "binary.bin"), ("folder", "folder"),
                                           ("npy", "a.npy"), ("artifact", "art"),
                                           ("npz", "cal.npz"),
                                           ("root", ".")]}


def base_args(command: str, files: dict[str, str]) -> list[str]:
    """A valid command line of `command` (options with bad values are added to it)."""
    out = str(Path(files["root"]) / "out")
    return {
        "opt": [files["graph"]], "verify": [files["graph"]], "import": [files["onnx"]],
        "run": [files["artifact"], "--random-inputs"], "inspect": [files["artifact"]],
        "profile": [files["artifact"], "--runs", "1"],
        "bench": [files["artifact"], "--runs", "1"],
        "compile": [files["graph"], "-o", out, "--batch", "2"],
        "view": [files["graph"], "-o", out + ".html"],
        "cache": ["info"], "demo": [],
        "quantize": [files["onnx"], "--calibration", files["npz"], "-o", out + ".onnx"],
        "launch": ["-n", "2", files["artifact"]],
    }[command]


def bad_paths(action: argparse.Action, files: dict[str, str]) -> list[str]:
    if action.dest in OUTPUTS:  # somewhere nothing can be written
        return [files["graph"] + "/x.html", "/proc/flowc-no-such/x.html"]
    return ["/no/such/file", files["folder"], files["binary"]]


def bad_values(command: str, action: argparse.Action, files: dict[str, str]) -> list[str]:
    """Bad values of `action` by its kind; [] when its kind is unknown."""
    metavar = str(action.metavar or "")
    if action.nargs == argparse.REMAINDER:  # another command's options (launch: run's)
        return ["--no-such-option"]
    if isinstance(action.type, Count):
        lo, hi = action.type.lo, action.type.hi
        return [str(lo - 1), str(hi + 1), "x", "1.5", "", "9" * 40]
    if action.choices:
        return ["no-such-choice"]
    if metavar.startswith(BINDINGS):
        values = ["novalue", "=3", "X="]
        if "SIZE" in metavar:
            values += ["N=-1", "N=x", "NOSUCHDIM=2"]
        if "PATH" in metavar:
            values += [f"x={p}" for p in [*bad_paths(action, files), files["graph"],
                                          files["npy"]]] + [f"nosuchinput={files['npy']}"]
        if "DEVICE" in metavar:
            values += ["r=tpu:0", "nosuchnode=cpu:0"]
        return values
    key = next((k for k in FREE_TEXT if k[0] == command and k[1] in action.option_strings),
               None)
    if key:
        return FREE_TEXT[key]
    if action.dest in OUTPUTS or "FILE" in metavar or "DIR" in metavar or "MODEL" in metavar:
        return bad_paths(action, files)
    return []


def cases(files: dict[str, str]) -> list[tuple[str, list[str]]]:
    """(case id, argv) of every bad command line."""
    found = [("no command", []), ("unknown command", ["nope"]),
             ("--version=x", ["--version=x"])]
    for command, parser in commands().items():
        base = base_args(command, files)
        found.append((f"{command} --bogus", [command, *base, "--bogus"]))
        positionals = [a for a in parser._actions if not a.option_strings]
        if positionals:
            found.append((f"{command} without arguments", [command]))
        for k, action in enumerate(positionals):
            for value in bad_values(command, action, files):
                args = list(base)
                args[k] = value
                found.append((f"{command} {action.dest}={value!r}", [command, *args]))
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            option = action.option_strings[-1]
            if action.nargs == 0:  # a flag given a value
                found.append((f"{command} {option}=x", [command, *base, f"{option}=x"]))
                continue
            extra = WITH.get((command, option), [])
            for value in bad_values(command, action, files):
                found.append((f"{command} {option} {value!r}",
                              [command, *base, *extra, f"{option}={value}"]))
    return found


def test_every_option_has_bad_values(files):
    """A new option of unknown kind must say what is bad for it (FREE_TEXT), and whole
    numbers are bounded (Count), never a bare int."""
    for command, parser in commands().items():
        base_args(command, files)  # a new command needs a valid command line here
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.nargs == 0:
                continue
            assert action.type is not int, f"{command} {action.option_strings}: use Count"
            assert bad_values(command, action, files), (command, action.option_strings)


def test_every_bad_command_line_is_one_error_line(files, capsys):
    failures = []
    for name, argv in cases(files):
        try:
            status = main(argv)
        except SystemExit as exc:  # main returns statuses; a SystemExit escaping is a bug
            status = f"SystemExit({exc.code})"
        except BaseException:  # every escape is a failure to report
            status = "raised: " + traceback.format_exc().splitlines()[-1]
        err = capsys.readouterr().err
        lines = err.splitlines()
        if status != 1 or len(lines) != 1 or not lines[0].startswith("flowc: error: ") \
                or "Traceback" in err:
            failures.append(f"{name}: status {status}, stderr {err!r}")
    assert not failures, f"{len(failures)} bad command lines:\n" + "\n".join(failures)
    assert not (Path(files["root"]) / "out").exists()  # no bad command line compiled



@pytest.mark.parametrize(("argv", "message"), [
    (["compile", "M", "--batch", "-1"], "compile: argument --batch: expected a whole number "
     "from 0 to 281474976710656, found '-1' (see 'flowc compile --help')"),
    (["run", "F", "--seed", "x"], "run: argument --seed: expected a whole number from 0 to "
     "9223372036854775807, found 'x' (see 'flowc run --help')"),
    (["cache"], "cache: the following arguments are required: action (see 'flowc cache "
     "--help')"),
    ([], "the following arguments are required: COMMAND (see 'flowc --help')"),
    (["compile", "/no/such.onnx"], "/no/such.onnx: no such file; expected a .onnx model, "
     "a .flowc graph, a .pb GraphDef or a SavedModel directory"),
])
def test_messages(argv, message, capsys):
    assert main(argv) == 1
    assert capsys.readouterr().err == f"flowc: error: {message}\n"


def test_messages_about_files(files, capsys):
    graph, art = files["graph"], files["artifact"]
    for argv, message in [
        (["run", art, "--random-inputs", "--fetch", "z"], f"--fetch z: the artifact {art} has "
         "no output 'z' (its outputs: y; an artifact computes only its outputs)"),
        (["view", graph, "-o", "x.svg", "--stage", "fuse"], f"--stage fuse: '{graph}' is a "
         "file; --stage picks the graph after a pass in a dump folder (flowc compile/opt "
         "--dump-dir DIR)"),
        (["view", graph, "-o", "x.svg", "--run", "0"], f"--run 0: only a profile trace (.json) "
         f"has runs; '{graph}' is not one"),
        (["compile", graph, "-o", graph + "/a"], f"output '{graph}/a': '{graph}' is a file, "
         "not a directory; expected a directory to write the artifact into"),
        (["run", art, "--input", f"x={files['binary']}"], f"--input x: '{files['binary']}' is "
         "not a .npy array file (it holds pickled objects, which are refused)"),
        (["run", graph, "--threads", "2"], f"--threads applies to artifact directories; "
         f"'{graph}' is a graph, run on the reference interpreter"),
        (["run", graph, "--runs", "3"], f"--runs applies to artifact directories; '{graph}' "
         "is a graph, run on the reference interpreter"),
        (["compile", graph, "-o", graph + "x", "--dim", "M=2"], "dim M=2: no input of graph @g "
         "has a symbolic dim M (its symbolic dims: N)"),
    ]:
        assert main(argv) == 1, argv
        assert capsys.readouterr().err == f"flowc: error: {message}\n"


@pytest.mark.parametrize(("pipeline", "message"), [
    ("pack-weights{panel_bytes=0}", "pass 'pack-weights': option 'panel_bytes' must be >= 8, "
                                    "found 0"),
    ("winograd{tile=3}", "pass 'winograd': option 'tile' must be 4 or 2 (F(4x4, 3x3) or "
                         "F(2x2, 3x3)), found 3"),
    ("winograd{min_channels=-1}", "pass 'winograd': option 'min_channels' must be >= 0, "
                                  "found -1"),
])
def test_pass_options_out_of_range(pipeline, message):
    from flowc.ir.errors import FlowcError
    from flowc.passes import parse_pipeline

    with pytest.raises(FlowcError) as info:
        parse_pipeline(pipeline)
    assert str(info.value) == message
