"""`flowc inspect DIR`: describe an artifact directory from its manifest.

Contract: `add_parser(subparsers)` registers the command; `run(args)` prints the model,
target, inputs, outputs (with their named dims where dims are given at run time) and
variables, the entries after `run` (a training artifact's
`train_step`: its inputs, outputs, arena and labels check), bound dims, arena and memory
plan, devices and partitions, files (with their sizes, or `missing`) and kernels, and
returns 0. It uses the runtime's manifest reader only (an unreadable manifest is its ArtifactError).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _describe(t: dict[str, Any]) -> str:
    return f"{t['name']}: {t['dtype']}[{','.join(map(str, t['shape']))}]"


def run(args: argparse.Namespace) -> int:
    from flowc.runtime.loader import read_manifest

    path = Path(args.dir)
    m = read_manifest(path)
    target = m.get("target", {})
    print(f"artifact {path}: model '{m['name']}', flowc {m.get('flowc_version')}, "
          f"ABI {m['abi_version']}, graph {m['graph_hash']}")
    print(f"target: {target.get('triple')} cpu={target.get('cpu')} "
          f"features={','.join(target.get('features', [])) or '-'}")
    if target.get("gpu_archs"):
        print(f"gpu: {', '.join(target.get('gpu_devices', [])) or 'every kernel'}; archs "
              f"{', '.join(target['gpu_archs'])}; cubins {', '.join(target['cubins']) or 'none'}"
              f"; ptx {target.get('ptx')}")
    symbolic = m.get("dims", {})  # dims given at run time: the shapes with their names
    for kind in ("inputs", "outputs", "variables"):
        for i, t in enumerate(m.get(kind, [])):
            shapes = symbolic.get(kind)
            print(f"{kind[:-1]} {_describe({**t, 'shape': shapes[i]} if shapes else t)}")
    for e in m.get("entries", [])[1:]:  # run, entry 0, is the inputs and outputs above
        labels = (f"; {e['labels']['input']} checked in [0, {e['labels']['classes']})"
                  if e.get("labels") else "")
        print(f"entry {e['name']} ({m['name']}_{e['name']}): "
              f"{', '.join(map(_describe, e['inputs']))} -> "
              f"{', '.join(map(_describe, e['outputs']))}; arena {e['arena_bytes']} bytes"
              f"{labels}")
    dims = ", ".join(f"{k}={v[0]}..{v[1]} (run time)" if isinstance(v, list) else f"{k}={v}"
                     for k, v in m.get("symbolic_dims", {}).items()) or "none"
    weights = m["weights"]
    where = f"in {weights['file']}" if weights.get("file") else "embedded"
    print(f"bound dims: {dims}; arena: {m.get('arena_bytes')} bytes; weights: "
          f"{weights['bytes']} bytes {where}")
    plan = m.get("memory_plan")
    if plan:
        print(f"memory plan: arena {plan['arena_bytes']} bytes, lower bound "
              f"{plan['lower_bound_bytes']}, intermediates {plan['intermediate_bytes']}, "
              f"{plan['in_place']} written in place")
    for device, d in m.get("devices", {}).items():
        print(f"  device {device}: arena {d['arena_bytes']} bytes at offset "
              f"{d['arena_offset']}, lower bound {d['lower_bound_bytes']}")
    for k, part in enumerate(m.get("partitions", [])):
        sends = ", ".join(f"{s['key']} ({s['bytes']} bytes)" for s in part["sends"]) or "none"
        print(f"partition {k} {part['device']}: sends {sends}")
    for name in m["files"]:
        file = path / name
        size = file.stat().st_size if file.exists() else "missing"
        print(f"file {name}: {size} bytes")
    print(f"kernels: {len(m.get('kernels', []))}")
    for k in m.get("kernels", []):
        print(f"  {k['symbol']}: {', '.join(k['nodes'])}")
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    insp = sub.add_parser("inspect", help="describe an artifact directory",
                          description="Print an artifact's manifest: inputs, outputs, target, "
                                      "sizes, files and kernels.")
    insp.add_argument("dir", metavar="DIR")
    return insp
