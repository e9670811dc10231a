"""Progress and messages: the bar on a terminal (a pseudo-terminal here), silence when
stderr is not one, `--verbose` lines per pass and kernel, `--quiet`."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from flowc.cli import main
from flowc.passes.manager import PassRecord
from flowc.progress import Progress

MLP = Path(__file__).parents[2] / "flowc" / "examples" / "mlp.flowc"


def _events(p: Progress) -> None:
    """A compile's events: 2 passes, 3 kernels (one from the cache), the link."""
    for i, name in enumerate(("cse", "fuse")):
        p.pass_started(i, 2, name)
        p.pass_done(PassRecord(name, 0.25, 0.125, 9, 7, {"nodes-fused": 2} if i else {}))
    p.kernels_started(3)
    for sym, hit in (("m_k0", False), ("m_k1", True), ("m_k2", False)):
        p.kernel_started(sym)
        p.kernel_done(sym, 0.5, hit)
    p.stage("linking")
    p.close()


def test_bar_redraws_in_place_and_is_erased_at_the_end(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the bar is cut to the terminal's width
    out = io.StringIO()
    _events(Progress(out, bar=True, interval=0.0))
    text = out.getvalue()
    frames = text.split("\r\x1b[K")
    assert "\n" not in text  # one line, redrawn
    assert "flowc: passes [########--------] 1/2 | pass fuse" in frames
    assert "flowc: passes 2/2 | kernels [##########------] 2/3, 1 cached | kernel m_k2" in frames
    assert "flowc: passes 2/2 | kernels [################] 3/3, 1 cached | kernel m_k2" in frames
    assert frames[-2].endswith("| linking") and frames[-1] == ""  # erased last
    monkeypatch.setenv("COLUMNS", "30")
    narrow = io.StringIO()
    _events(Progress(narrow, bar=True, interval=0.0))
    assert max(map(len, narrow.getvalue().split("\r\x1b[K"))) == 29


def test_no_bar_and_no_output_when_the_stream_is_not_a_terminal():
    out = io.StringIO()  # isatty() is False
    _events(Progress(out))
    assert out.getvalue() == ""


def test_verbose_prints_passes_kernels_and_a_summary_without_a_terminal():
    out = io.StringIO()
    _events(Progress(out, level="verbose"))
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["flowc: pass 1/2 cse: 0.250 s (verify 0.125 s), nodes 9 -> 7",
                         "flowc: pass 2/2 fuse: 0.250 s (verify 0.125 s), nodes 9 -> 7; "
                         "nodes-fused=2"]
    assert lines[2:5] == ["flowc: kernel 1/3 m_k0: 0.500 s, cache miss",
                          "flowc: kernel 2/3 m_k1: 0.500 s, cache hit",
                          "flowc: kernel 3/3 m_k2: 0.500 s, cache miss"]
    assert lines[5].startswith("flowc: done in ") and lines[5].endswith(
        ": 2 passes 0.75 s, 3 kernels 1.50 s (1 from the cache)")


def test_verbose_lines_go_above_the_bar():
    out = io.StringIO()
    p = Progress(out, level="verbose", bar=True, interval=0.0)
    p.pass_started(0, 1, "cse")
    p.pass_done(PassRecord("cse", 0.0, 0.0, 1, 1))
    p.close()
    # the bar is erased before the line, and the line starts a fresh row
    assert "\r\x1b[Kflowc: pass 1/1 cse" in out.getvalue()


def test_quiet_writes_nothing_even_on_a_terminal():
    out = io.StringIO()
    _events(Progress(out, level="quiet", bar=True))
    assert out.getvalue() == ""


def _compile(tmp_path: Path, *extra: str, terminal: bool) -> tuple[str, str]:
    """(stdout, stderr) of `flowc compile` of the MLP in a subprocess, its stderr a
    pseudo-terminal or a pipe."""
    cmd = [sys.executable, "-m", "flowc", "compile", str(MLP), "--batch", "2",
           "-o", str(tmp_path / "art"), *extra]
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "200"}
    if not terminal:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout, done.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, env=env, text=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    stdout = proc.stdout.read()
    assert proc.wait(timeout=300) == 0
    return stdout, b"".join(chunks).decode()


def test_compile_on_a_terminal_shows_the_bar_then_erases_it(tmp_path):
    stdout, stderr = _compile(tmp_path, terminal=True)
    assert "flowc: passes [" in stderr and "| kernels [" in stderr
    assert "kernels [################] 2/2" in stderr
    assert stderr.endswith("\r\x1b[K")  # the terminal is left clean
    assert stdout.startswith("compiled ")


@pytest.mark.parametrize("flags, want_stdout, want_stderr", [
    ((), "compiled ", ""),
    (("--quiet",), "", ""),
    (("-v",), "compiled ", "flowc: pass 1/"),
])
def test_compile_without_a_terminal(tmp_path, flags, want_stdout, want_stderr):
    stdout, stderr = _compile(tmp_path, *flags, terminal=False)
    assert stdout.startswith(want_stdout) and (stdout == "") == (want_stdout == "")
    assert "\r" not in stderr  # never a bar
    assert stderr.startswith(want_stderr) and (stderr == "") == (want_stderr == "")
    if flags == ("-v",):
        assert "flowc: kernel 2/2 mlp_k1: " in stderr and "flowc: done in " in stderr


def test_quiet_and_verbose_exclude_each_other(capsys):
    assert main(["compile", str(MLP), "-q", "-v"]) == 1
    assert "not allowed with argument" in capsys.readouterr().err


def test_opt_verbose_prints_each_pass(capsys):
    assert main(["opt", str(MLP), "-p", "cse,simplify", "-v"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("flowc: pass 1/2 cse: ")
    assert err[1].startswith("flowc: pass 2/2 simplify: ") and "matmul-add-to-gemm=2" in err[1]


def test_hide_erases_the_bar_until_the_next_event():
    out = io.StringIO()
    p = Progress(out, bar=True, interval=0.0)
    p.pass_started(0, 2, "cse")
    p.hide()
    assert out.getvalue().endswith("| pass cse\r\x1b[K")
    out.write("a report\n")  # what the caller prints meanwhile
    p.pass_done(PassRecord("cse", 0.0, 0.0, 1, 1))
    assert out.getvalue().endswith("a report\n\r\x1b[Kflowc: passes [########--------] 1/2"
                                   " | pass cse")


def test_verbose_with_a_dump_does_not_call_rebuilt_kernels_misses(tmp_path, capsys):
    """With --dump-dir every kernel is rebuilt without reading the cache: -v said "cache
    miss" for each while the summary said 0 misses."""
    assert main(["compile", str(MLP), "-o", str(tmp_path / "a"), "-v", "--batch", "2",
                 "--dump-dir", str(tmp_path / "dump")]) == 0
    out, err = capsys.readouterr()
    kernels = [line for line in err.splitlines() if line.startswith("flowc: kernel ")]
    assert kernels and all(line.endswith(", built without reading the cache (--dump-dir dumps "
                                         "every kernel)") for line in kernels)
    assert "with --dump-dir kernels are rebuilt (and dumped) without reading it\n" in out
