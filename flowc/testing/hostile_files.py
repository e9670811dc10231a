"""The file families of `flowc.testing.hostile`: external data that reaches outside the
model's folder or lies about its size (`external`), and mutated manifests and files of a
real compiled artifact (`manifest`).

Every case is built in a fresh folder (`setup` or `artifact` gets it). The campaign's
outside folder holds `secret.bin`, whose bytes are the campaign's marker: a model that
manages to read it carries the marker into its artifact, which the runner looks for.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

from onnx import TensorProto, helper

from flowc.testing.hostile_case import Case, Env, model_of

N = 8   # the external tensor: f32[8], 32 bytes, as long as the marker


def _external_model(entries: dict[str, str], dims=(N,)) -> object:
    w = TensorProto()
    w.name, w.data_type, w.data_location = "w", TensorProto.FLOAT, TensorProto.EXTERNAL
    w.dims.extend(dims)
    for key, value in entries.items():
        e = w.external_data.add()
        e.key, e.value = key, value
    return model_of([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                    [("x", TensorProto.FLOAT, [N])], [("y", TensorProto.FLOAT, [N])], [w])


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def external_case(seed: int, env: Env) -> Case:
    rng = random.Random(f"external:{seed}")
    kind = rng.choice(["control", "dotdot", "absolute", "symlink_dir", "symlink_file",
                       "proc", "proc_symlink", "fifo", "sparse_huge", "offset_past_eof",
                       "length_past_eof", "length_short", "length_long", "bad_offset",
                       "directory", "empty", "nul", "missing", "dims_huge"])
    rel_secret = "../../../outside/secret.bin"   # from work/cases/KEY/model/
    local = bytes(range(4 * N))
    entries: dict[str, str] = {"location": "w.bin"}
    dims: tuple = (N,)
    files: dict[str, bytes] = {"w.bin": local}
    links: dict[str, str] = {}
    fifo = sparse = None
    must_fail = kind != "control"
    if kind == "dotdot":
        entries["location"] = rel_secret
    elif kind == "absolute":
        entries["location"] = str(env.secret)
    elif kind == "symlink_dir":
        links["root"] = str(env.outside)
        entries["location"] = "root/secret.bin"
    elif kind == "symlink_file":
        links["link.bin"] = str(env.secret)
        entries["location"] = "link.bin"
    elif kind == "proc":
        entries["location"] = rng.choice(["/proc/self/environ", "/proc/self/cmdline",
                                          "/proc/self/mem", "/dev/zero", "/dev/urandom"])
        entries["length"] = str(4 * N)
    elif kind == "proc_symlink":
        links["p"] = "/proc"
        entries["location"] = "p/self/environ"
    elif kind == "fifo":
        fifo = "w.fifo"
        entries["location"] = fifo
    elif kind == "sparse_huge":
        sparse = ("big.bin", rng.choice([2**33, 2**36]))
        entries["location"] = "big.bin"
        if rng.random() < 0.5:
            entries["offset"] = str(sparse[1] - 4 * N)   # a valid tail: legitimately fine
            entries["length"] = str(4 * N)
            must_fail = False
    elif kind == "offset_past_eof":
        entries |= {"offset": str(rng.choice([33, 1000, 2**40])), "length": str(4 * N)}
    elif kind == "length_past_eof":
        entries |= {"offset": "0", "length": str(rng.choice([33, 10**6, 2**40]))}
    elif kind == "length_short":
        entries["length"] = "16"
    elif kind == "length_long":
        files["w.bin"] = local * 2
        entries["length"] = "64"
    elif kind == "bad_offset":
        entries["offset"] = rng.choice(["-1", "abc", str(2**64), "1e3", "", " 0"])
        must_fail = entries["offset"] != " 0"   # int(" 0") is 0: harmless
    elif kind == "directory":
        entries["location"] = rng.choice([".", "sub", "sub/"])
    elif kind == "empty":
        entries["location"] = ""
    elif kind == "nul":
        entries["location"] = "w.bin\x00" + rel_secret
    elif kind == "missing":
        entries["location"] = "nope.bin"
    else:
        dims = (rng.choice([2**31, 2**40, 2**62]),)

    def setup(folder: Path, env: Env) -> None:
        for name, data in files.items():
            _write(folder / name, data)
        (folder / "sub").mkdir()
        for name, target in links.items():
            (folder / name).symlink_to(target)
        if fifo:
            os.mkfifo(folder / fifo)
        if sparse:
            with open(folder / sparse[0], "wb") as f:
                f.truncate(sparse[1])

    what = (f"Add(x, w) with w f32{list(dims)} external {entries!r}"
            + (f", {links}" if links else "") + (" (a FIFO)" if fifo else "")
            + (f" (sparse file of {sparse[1]} bytes)" if sparse else ""))
    return Case("external", kind, seed, what, model=_external_model(entries, dims),
                setup=setup, must_fail=must_fail,
                params=(kind, tuple(sorted(entries.items())), dims))


# ---- manifest ---------------------------------------------------------------------------
WRONG = [None, 0, -1, 2**62, 2**70, 1.5, float("nan"), "", "x", "../outside/secret.bin",
         "/etc/passwd", "a/b", "..", [], [1, -2], [2**62], ["a"], {}, {"a": 1}, True]
MANIFEST_KINDS = ["control", "fifo", "deep_list", "deep_dict", "huge_sparse", "huge_valid",
                  "wrong_type", "path_field", "symlink_weights", "symlink_library",
                  "symlink_manifest", "weights_nan", "evil_library", "truncated_library",
                  "library_fifo", "weights_fifo", "manifest_dir", "not_utf8", "big_shape",
                  "dup_keys", "threads"]


# manifest fields the loader must check (a wrong value must be refused), and fields it
# may ignore (a wrong value must not crash it)
CHECKED = [("name",), ("graph_hash",), ("format",), ("abi_version",), ("inputs",),
           ("inputs", 0), ("inputs", 0, "name"), ("inputs", 0, "dtype"),
           ("inputs", 0, "shape"), ("inputs", 0, "shape", 0), ("outputs", 0, "shape"),
           ("outputs", 0, "dtype"), ("files",), ("weights",), ("weights", "file"),
           ("weights", "bytes"), ("weights", "sha256")]
LOOSE = [("threads_default",), ("arena_bytes",), ("partitions",), ("symbolic_dims",),
         ("kernels",), ("flowc_version",), ("target",), ("memory_plan",), ("link_flags",)]


def _set(obj, path, value) -> None:
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


def manifest_case(seed: int, env: Env) -> Case:
    rng = random.Random(f"manifest:{seed}")
    kind = rng.choice(MANIFEST_KINDS)
    picks = [rng.random() for _ in range(4)]
    detail, field, value = "", "", None
    threads = rng.choice([2**32 + 1, -1, 10**6])
    if kind == "threads":
        detail = f"threads_default {threads}"
    elif kind == "wrong_type":
        field = rng.choice(CHECKED + LOOSE)
        value = WRONG[int(picks[1] * len(WRONG))]
        detail = f"{'.'.join(map(str, field))} = {value!r}"
    elif kind == "path_field":
        field = rng.choice(["name", "weights.file", "files key"])
        value = rng.choice([*WRONG[7:11], ".", "", "lib/../g"])
        detail = f"{field} = {value!r}"

    def build(art: Path, env: Env) -> None:
        shutil.copytree(env.base_artifact, art, symlinks=True)
        mf = art / "manifest.json"
        m = json.loads(mf.read_text())
        lib, weights = art / f"lib{m['name']}.so", art / m["weights"]["file"]
        text = None
        if kind == "control":
            text = json.dumps(m)
        elif kind == "fifo":
            mf.unlink()
            os.mkfifo(mf)
        elif kind == "deep_list":
            text = "[" * 100000 + "]" * 100000
        elif kind == "deep_dict":
            text = '{"a":' * 100000 + "1" + "}" * 100000
        elif kind == "huge_sparse":
            with open(mf, "r+b") as f:
                f.truncate(2**30)
        elif kind == "huge_valid":
            text = json.dumps(m) + " " * (64 << 20)
        elif kind == "wrong_type":
            _set(m, field, value)
            text = json.dumps(m)
        elif kind == "path_field":
            if field == "name":
                m["name"] = value
            elif field == "weights.file":
                m["weights"]["file"] = value
            else:
                m["files"][value] = next(iter(m["files"].values()))
            text = json.dumps(m)
        elif kind in ("symlink_weights", "symlink_library", "symlink_manifest"):
            target = {"symlink_weights": weights, "symlink_library": lib,
                      "symlink_manifest": mf}[kind]
            outside = env.outside / f"{art.parent.name}_{target.name}"
            shutil.copyfile(target, outside)   # the same bytes, but outside the folder
            target.unlink()
            target.symlink_to(outside)
        elif kind == "weights_nan":
            raw = bytearray(weights.read_bytes())
            raw[-4:] = b"\x00\x00\xc0\x7f"   # the last weight becomes NaN
            weights.write_bytes(bytes(raw))
        elif kind == "evil_library":
            shutil.copyfile(env.evil_library, lib)
        elif kind == "truncated_library":
            raw = lib.read_bytes()
            lib.write_bytes(raw[:int(picks[2] * len(raw))])
        elif kind in ("library_fifo", "weights_fifo"):
            target = lib if kind == "library_fifo" else weights
            target.unlink()
            os.mkfifo(target)
        elif kind == "manifest_dir":
            mf.unlink()
            mf.mkdir()
        elif kind == "not_utf8":
            text = None
            mf.write_bytes(b"\xff\xfe" + mf.read_bytes())
        elif kind == "big_shape":
            m["inputs"][0]["shape"] = [2**62, 2**62]
            m["arena_bytes"] = 2**70
            text = json.dumps(m)
        elif kind == "dup_keys":
            text = json.dumps(m)[:-1] + ', "name": "evil"}'
        else:
            m["threads_default"] = threads
            text = json.dumps(m)
        if text is not None:
            mf.write_text(text)

    must_fail = kind not in ("control", "huge_valid", "threads") and not (
        kind == "wrong_type" and field in LOOSE)
    what = f"the base artifact with {kind}{' ' + detail if detail else ''}"
    cut = picks[2] if kind == "truncated_library" else None
    return Case("manifest", kind, seed, what, artifact=build, must_fail=must_fail,
                check=False, params=(kind, detail, cut))


def case(family: str, seed: int, env: Env) -> Case:
    return external_case(seed, env) if family == "external" else manifest_case(seed, env)


__all__ = ["MANIFEST_KINDS", "case", "external_case", "manifest_case"]
