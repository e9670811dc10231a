"""`flowc launch -n N TARGET [ARGS...]`: run an artifact placed over N tasks (or a Python
program that loads one) on N MPI ranks, a thin wrapper over `mpiexec` (issue [16]).

Contract: `add_parser(subparsers)` registers the command; `run(args)` starts
`mpiexec -n N` (the one next to this Python, else on PATH, else `--mpiexec`) on
`python -m flowc run DIR ARGS...` when TARGET is a directory, `python TARGET ARGS...` when
it is a .py file, with FLOWC_LIBMPI (`flowc.distributed.library()` as seen from that
mpiexec's install), FLOWC_MPI_TIMEOUT (`--timeout`: how long a rank waits for a peer's
message before its run fails naming the peer and channel) and FLOWC_LAUNCH_DIR (where each
rank reports a normal exit) in the ranks' environment. It returns mpiexec's status when
non-zero (naming the ranks that did not report completion); 1 when some rank did not report
completion (MPICH's mpiexec can return 0 when a rank exited early), naming the ranks; 124
when the job ran past `--job-timeout` (the whole job is killed); else 0. With `--measure
PROFILE.json` and no TARGET, the ranks run flowc/cli/measure_link.py instead: ping-pongs
that price the network link between each two ranks' tasks, merged into that device profile
(`measure`), which `flowc compile --device-profiles` gives the placer's cost model. The
compiler is not imported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from flowc.cli import run as run_cli
from flowc.cli.common import Count, Parser
from flowc.ir.errors import FlowcError


def find_mpiexec(given: str | None) -> str:
    """The mpiexec to use: `given`, else the one next to this Python, else PATH's."""
    if given:
        return given
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.is_file() else shutil.which("mpiexec")
    if not found:
        raise FlowcError("flowc launch: no mpiexec next to this Python or on PATH; install "
                         "an MPI (pip install 'flowc[mpi]', i.e. mpich and mpi4py) or give "
                         "--mpiexec")
    return found


def is_open_mpi(mpiexec: str) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                             timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Open MPI" in out.stdout + out.stderr or "prte" in out.stdout.lower()


def library_for(mpiexec: str) -> str | None:
    """The MPI library of that mpiexec's install (its prefix's lib/), else distributed's."""
    from flowc import distributed

    if os.environ.get("FLOWC_LIBMPI"):
        return os.environ["FLOWC_LIBMPI"]
    lib = Path(mpiexec).resolve().parent.parent / "lib"
    for name in distributed.LIBRARIES:
        if (lib / name).is_file():
            return str(lib / name)
    return distributed.library()


def program(target: str) -> list[str]:
    """What each rank runs for TARGET (an artifact directory or a .py file)."""
    path = Path(target)
    if (path / "manifest.json").is_file():
        return [sys.executable, "-m", "flowc", "run", str(path)]
    if path.suffix == ".py" and path.is_file():
        return [sys.executable, str(path)]
    raise FlowcError(f"flowc launch: '{target}' is neither an artifact directory (with a "
                     "manifest.json) nor a .py file")


def check_run_options(args: argparse.Namespace) -> None:
    """A directory's ARGS are `flowc run` options: parsed here first, so a bad one is one
    error (SystemExit(1), printed by the parser) rather than one per rank."""
    if Path(args.target).is_dir():
        parser = Parser(prog="flowc")
        run_cli.add_parser(parser.add_subparsers(dest="command")).parse_args(
            [args.target, *args.args])


def command(args: argparse.Namespace, mpiexec: str, ranks_run: list[str]) -> list[str]:
    ompi = is_open_mpi(mpiexec)
    hosts = (["--host" if ompi else "-hosts", args.hosts] if args.hosts else
             ["--oversubscribe"] if ompi else [])
    return [mpiexec, "-n", str(args.n), *hosts, *ranks_run]


def stop(proc: subprocess.Popen) -> None:
    """Ends the job: SIGTERM to mpiexec's process group (mpiexec then ends the ranks it
    started, which Open MPI's puts in process groups of their own), SIGKILL after 10 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run(args: argparse.Namespace) -> int:
    if args.measure:
        return measure(args)
    if args.target is None:
        raise FlowcError("flowc launch: give an artifact DIR or a PROGRAM.py to run (or "
                         "--measure PROFILE.json)")
    ranks_run = program(args.target)  # a bad target or run option is reported before
    try:  # mpiexec is sought
        check_run_options(args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return launch_job(args, [*ranks_run, *args.args])


def measure(args: argparse.Namespace) -> int:
    """`--measure FILE`: the ranks' ping-pongs (flowc/cli/measure_link.py) priced as the
    network links between their tasks, merged into the device profile FILE (created if
    missing; a link it has between the same two tasks is replaced); 0, or the job's
    failure status."""
    if args.target is not None:
        raise FlowcError(f"flowc launch: --measure runs its own ping-pong between the ranks; "
                         f"give no DIR or PROGRAM.py (found '{args.target}')")
    if args.n < 2:
        raise FlowcError("flowc launch: --measure prices the links between ranks: give -n 2 "
                         "or more")
    profile = read_profile(args.measure)
    with tempfile.TemporaryDirectory(prefix="flowc-measure-") as tmp:
        out = Path(tmp, "links.json")
        status = launch_job(args, [sys.executable, "-m", "flowc.cli.measure_link", str(out)])
        if status:
            return status
        measured = json.loads(out.read_text())
    pairs = [set(link["between"]) for link in measured]
    profile["links"] = [link for link in profile.get("links", [])
                        if not (isinstance(link, dict) and isinstance(link.get("between"), list)
                                and set(map(str, link["between"])) in pairs)] + measured
    Path(args.measure).write_text(json.dumps(profile, indent=2) + "\n")
    for link in measured:
        a, b = link["between"]
        print(f"flowc launch: link {a} <-> {b}: latency {link['latency'] * 1e6:.3g} us, "
              f"bandwidth {link['bandwidth'] / 1e9:.3g} GB/s (ping-pong) -> {args.measure}")
    return 0


def read_profile(path: str) -> dict[str, Any]:
    """The device profile at `path` to merge links into ({} if there is none yet)."""
    if not Path(path).exists():
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FlowcError(f"flowc launch: --measure {path}: not a readable JSON device profile "
                         f"({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("links", []), list):
        raise FlowcError(f"flowc launch: --measure {path}: a device profile is a JSON object "
                         "whose 'links' is a list")
    return data


def launch_job(args: argparse.Namespace, ranks_run: list[str]) -> int:
    """`ranks_run` on `args.n` ranks (see the module docstring); the launcher's status."""
    mpiexec = find_mpiexec(args.mpiexec)
    argv = command(args, mpiexec, ranks_run)
    with tempfile.TemporaryDirectory(prefix="flowc-launch-") as reports:
        env = dict(os.environ, FLOWC_MPI_TIMEOUT=str(args.timeout), FLOWC_LAUNCH_DIR=reports)
        lib = library_for(mpiexec)
        if lib:
            env["FLOWC_LIBMPI"] = lib
        proc = subprocess.Popen(argv, env=env, start_new_session=True)
        try:
            status = proc.wait(timeout=args.job_timeout or None)
        except subprocess.TimeoutExpired:
            stop(proc)
            print(f"flowc launch: the job ran past --job-timeout {args.job_timeout} s and was "
                  "killed", file=sys.stderr)
            return 124
        missing = [r for r in range(args.n) if not Path(reports, f"rank-{r}.done").is_file()]
        unreported = (f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} "
                      "did not report completion")
        if status:
            print(f"flowc launch: mpiexec exited with status {status}"
                  + (f"; {unreported}" if missing else ""), file=sys.stderr)
            return status if status > 0 else 1
        if missing:
            print(f"flowc launch: {unreported} (exited early or never started), though "
                  "mpiexec returned 0", file=sys.stderr)
            return 1
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    launch = sub.add_parser(
        "launch", help="run an artifact placed over tasks on MPI ranks (mpiexec)",
        description="Run TARGET on N MPI ranks: an artifact directory compiled with "
                    "--devices /job:worker/task:0/cpu:0,/job:worker/task:1/cpu:0 ... (each "
                    "rank runs `flowc run DIR ARGS`, rank r the partitions of task r), or a "
                    "Python program that calls flowc.load. Fails when a rank fails, or exits "
                    "without reporting completion.")
    launch.add_argument("-n", type=Count(1, 4096), required=True, metavar="N",
                        help="ranks to start: one per task")
    launch.add_argument("--timeout", type=Count(1, 10**7), default=600, metavar="S",
                        help="how long a rank waits for a peer's message before its run "
                             "fails naming the peer (600 s)")
    launch.add_argument("--job-timeout", type=Count(0, 10**7), default=0, metavar="S",
                        help="kill the whole job after S seconds (0: never)")
    launch.add_argument("--hosts", metavar="H1,H2", help="hosts to start ranks on (mpiexec's "
                        "-hosts / --host); default: this machine")
    launch.add_argument("--mpiexec", metavar="PATH", help="the mpiexec to use")
    launch.add_argument("--measure", metavar="PROFILE.json",
                        help="instead of a TARGET: price the network link between every "
                             "two ranks' tasks by ping-pong (latency, bandwidth) into this "
                             "device profile (created or updated), for compile "
                             "--device-profiles")
    launch.add_argument("target", nargs="?", metavar="DIR|PROGRAM.py",
                        help="artifact directory or Python program")
    launch.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="`flowc run` options (--input, --threads ...) or the program's")
    return launch
