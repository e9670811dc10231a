"""`flowc cache info|clear`: show or clear the compile cache.

Contract: `add_parser(subparsers)` registers the command; `run(args)` prints the cache's
root, entries and bytes (per kind) or clears it, and returns 0; an empty FLOWC_CACHE_DIR
(the cache disabled) is said, not an error.
"""

from __future__ import annotations

import argparse
from typing import Any


def run(args: argparse.Namespace) -> int:
    from flowc.codegen.cache import default_cache

    cache = default_cache()
    if not cache.enabled:
        print("compile cache: disabled (FLOWC_CACHE_DIR is empty)")
        return 0
    if args.action == "clear":
        print(f"compile cache {cache.root}: removed {cache.clear()} entries")
        return 0
    info = cache.info()
    print(f"compile cache {info['root']}: {info['entries']} entries, {info['bytes']} bytes "
          f"(bound {info['max_bytes']} bytes)")
    for kind, k in info["kinds"].items():
        print(f"  {kind}: {k['entries']} entries, {k['bytes']} bytes")
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    cache = sub.add_parser(
        "cache", help="show or clear the compile cache",
        description="The compile cache ($FLOWC_CACHE_DIR, default ~/.cache/flowc; empty "
                    "disables it) keeps compiled kernels and runtime objects between compiles.")
    cache.add_argument("action", choices=("info", "clear"))
    return cache
