"""Progress and messages of a compile: the one object the pass and kernel loops report to.

Contract: `Progress(stream=sys.stderr, level="normal", bar=None)` receives events from the
pass manager (`pass_started(index, total, name)`, `pass_done(record)` with a
`passes.manager.PassRecord`), from the kernel compiler (`kernels_started(total)`,
`kernel_started(symbol)`, `kernel_done(symbol, seconds, cached)`: cached None for a
kernel built without reading the cache, as with a dump) and from the driver
(`stage(name)`: "linking", ...), and turns them into output on `stream`:
- `level="normal"`: a one-line progress bar (passes run, kernels compiled, cache hits)
  redrawn in place with `\\r` while `bar` is on, and nothing else. `bar=None` turns it on
  exactly when `stream` is a terminal (`isatty()`) and `$TERM` is not `dumb`; so a compile
  whose stderr is a file or a pipe writes nothing there.
- `level="verbose"`: also one line per pass (wall and verify seconds, node counts, the
  pass's counters) and per kernel (compile seconds, cache hit or miss), and a summary at
  `close()`, whether or not `stream` is a terminal (lines are written above the bar).
- `level="quiet"`: nothing at all.
`hide()` erases the bar until the next event (call it before writing other output to the
terminal); `close()` erases it for good (the terminal is left as it was) and, verbose,
prints the summary; it may be called more than once. Redraws are throttled to one per
`interval` seconds, except when a stage begins or ends. Nothing here imports another part
of flowc, so the passes, codegen and the CLI can all use it.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any, TextIO

LEVELS = ("quiet", "normal", "verbose")
BAR_WIDTH = 16


class Progress:
    def __init__(self, stream: TextIO | None = None, level: str = "normal",
                 bar: bool | None = None, interval: float = 0.1):
        if level not in LEVELS:
            raise ValueError(f"progress level {level!r}: expected one of {', '.join(LEVELS)}")
        self.stream = stream if stream is not None else sys.stderr
        self.level = level
        if bar is None:
            bar = _is_terminal(self.stream)
        self.bar = bar and level != "quiet"
        self.interval = interval
        self.passes = [0, 0]  # done, total
        self.kernels = [0, 0]
        self.cached = 0
        self.current = ""
        self.pass_seconds = 0.0
        self.kernel_seconds = 0.0
        self._start = time.perf_counter()
        self._drawn = 0.0  # when the bar was last drawn
        self._shown = False  # whether a bar is on the screen now
        self._closed = False

    @property
    def verbose(self) -> bool:
        return self.level == "verbose"

    # ---- events ------------------------------------------------------------------------
    def pass_started(self, index: int, total: int, name: str) -> None:
        self.passes = [index, total]
        self.current = f"pass {name}"
        self._draw(force=index == 0)

    def pass_done(self, record: Any) -> None:
        self.passes[0] += 1
        self.pass_seconds += record.wall_s + record.verify_s
        if self.verbose:
            counters = ", ".join(f"{k}={v}" for k, v in record.stats.items())
            self.line(f"pass {self.passes[0]}/{self.passes[1]} {record.name}: "
                      f"{record.wall_s:.3f} s (verify {record.verify_s:.3f} s), nodes "
                      f"{record.nodes_before} -> {record.nodes_after}"
                      + (f"; {counters}" if counters else ""))
        self._draw(force=self.passes[0] == self.passes[1])

    def kernels_started(self, total: int) -> None:
        self.kernels = [0, total]
        self.current = "kernels"
        self._draw(force=True)

    def kernel_started(self, symbol: str) -> None:
        self.current = f"kernel {symbol}"
        self._draw()

    def kernel_done(self, symbol: str, seconds: float, cached: bool | None) -> None:
        """`cached`: a cache hit, a miss, or None: built without reading the cache."""
        self.kernels[0] += 1
        self.cached += bool(cached)
        self.kernel_seconds += seconds
        if self.verbose:
            how = {True: "cache hit", False: "cache miss"}.get(
                cached, "built without reading the cache (--dump-dir dumps every kernel)")
            self.line(f"kernel {self.kernels[0]}/{self.kernels[1]} {symbol}: "
                      f"{seconds:.3f} s, {how}")
        self._draw(force=self.kernels[0] == self.kernels[1])

    def stage(self, name: str) -> None:
        self.current = name
        self._draw(force=True)

    # ---- output ------------------------------------------------------------------------
    def line(self, text: str) -> None:
        """One message line on the stream (above the bar, which is redrawn after it)."""
        if self.level == "quiet":
            return
        shown = self._shown
        self._erase()
        self.stream.write(f"flowc: {text}\n")
        if shown:
            self._draw(force=True)
        self.stream.flush()

    def hide(self) -> None:
        """Erase the bar (before someone else writes to the terminal); the next event
        draws it again."""
        self._erase()
        self.stream.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._erase()
        if self.verbose:
            total = time.perf_counter() - self._start
            self.line(f"done in {total:.2f} s: {self.passes[0]} passes "
                      f"{self.pass_seconds:.2f} s, {self.kernels[0]} kernels "
                      f"{self.kernel_seconds:.2f} s ({self.cached} from the cache)")
        self.stream.flush()

    def text(self) -> str:
        """The bar's text now (without the leading `\\r`)."""
        parts = []
        if self.passes[1]:  # a bar for the phase in progress, a count for the one done
            bar = "" if self.kernels[1] else f"{_bar(*self.passes)} "
            parts.append(f"passes {bar}{self.passes[0]}/{self.passes[1]}")
        if self.kernels[1]:
            parts.append(f"kernels {_bar(*self.kernels)} {self.kernels[0]}/{self.kernels[1]}"
                         f", {self.cached} cached")
        if self.current:
            parts.append(self.current)
        return "flowc: " + " | ".join(parts)

    def _draw(self, force: bool = False) -> None:
        if not self.bar or self._closed:
            return
        now = time.perf_counter()
        if not force and now - self._drawn < self.interval:
            return
        self._drawn = now
        width = _columns(self.stream) - 1
        self.stream.write("\r\x1b[K" + self.text()[:width])
        self.stream.flush()
        self._shown = True

    def _erase(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self._shown = False


def _bar(done: int, total: int) -> str:
    filled = BAR_WIDTH * done // total if total else BAR_WIDTH
    return "[" + "#" * filled + "-" * (BAR_WIDTH - filled) + "]"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size().columns

