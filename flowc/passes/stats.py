"""Per-pass statistics: counters a pass bumps while it runs, collected by the PassManager.

Contract: inside `Pass.run`, call `count("nodes-folded", n)` (a kebab-case counter name
and a non-negative int). The PassManager opens a `collect()` scope around each pass and
reports the counters it gathered under that pass's name. Outside any scope (a pass run
directly, as in unit tests) `count` does nothing, so passes never need to know who runs them.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from contextvars import ContextVar

_current: ContextVar[Counter | None] = ContextVar("flowc_pass_stats", default=None)


def count(stat: str, n: int = 1) -> None:
    """Add `n` to counter `stat` of the pass now running (no-op outside `collect`)."""
    counters = _current.get()
    if counters is not None and n:
        counters[stat] += n


@contextlib.contextmanager
def collect() -> Iterator[Counter]:
    """A scope whose `count` calls land in the yielded Counter."""
    counters: Counter = Counter()
    token = _current.set(counters)
    try:
        yield counters
    finally:
        _current.reset(token)
