"""Feeds and fetches as tfcompile takes them: `--feed NODE[:i]=SHAPE:DTYPE`,
`--fetch NODE[:i]`, or a tf2xla.Config in text form (`--config model.config.pbtxt`).

Contract: `parse_feed(text)` and `parse_fetch(text)` parse one option (SHAPE is dims joined
by `x` or `,`, empty for a scalar; DTYPE a flowc or numpy name: f32, float32, int64 ...);
`read_config(path)` reads a tf2xla.Config (`feed { id { node_name: "x" } shape { dim { size:
4 } } type: DT_FLOAT name: "x" }`, `fetch { id { node_name: "y" output_index: 1 } }`).
Each gives `Feed`s and `Fetch`es; every malformed one is a TfImportError naming the option
or file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from flowc.frontend.tf.dtypes import shape_of, tf_dtype
from flowc.frontend.tf.errors import TfImportError
from flowc.frontend.tf.loader import Ref
from flowc.frontend.tf.protos import TfConfig
from flowc.ir import dtype
from flowc.ir.types import DTYPES, DType

_DT_CODES = {"DT_FLOAT": 1, "DT_DOUBLE": 2, "DT_INT32": 3, "DT_UINT8": 4, "DT_INT16": 5,
             "DT_INT8": 6, "DT_STRING": 7, "DT_INT64": 9, "DT_BOOL": 10, "DT_BFLOAT16": 14,
             "DT_UINT16": 17, "DT_HALF": 19, "DT_UINT32": 22, "DT_UINT64": 23}
_REF = re.compile(r"^([^:=\s]+)(?::(\d+))?$")


@dataclass(frozen=True)
class Feed:
    """A tensor the caller supplies: its graph input's name, and its shape and dtype where
    given (else a Placeholder's own)."""

    ref: Ref
    name: str
    shape: tuple[int | None, ...] | None = None
    dtype: DType | None = None


@dataclass(frozen=True)
class Fetch:
    ref: Ref
    name: str


def default_name(ref: Ref) -> str:
    return ref[0] if ref[1] == 0 else f"{ref[0]}_{ref[1]}"


def _ref(text: str, option: str) -> Ref:
    m = _REF.match(text.strip())
    if m is None:
        raise TfImportError(f"{option} '{text}': expected NODE or NODE:INDEX")
    return m.group(1), int(m.group(2) or 0)


def parse_fetch(text: str) -> Fetch:
    ref = _ref(text, "--fetch")
    return Fetch(ref, default_name(ref))


def parse_feed(text: str) -> Feed:
    """`NODE[:i]=SHAPE:DTYPE`, e.g. `x=4x16:f32`, `lengths:1=:int32` (a scalar)."""
    where = f"--feed '{text}'"
    tensor, sep, rest = text.partition("=")
    shape_text, sep2, dtype_text = rest.rpartition(":")
    if not sep or not sep2 or not dtype_text:
        raise TfImportError(f"{where}: expected NODE[:INDEX]=SHAPE:DTYPE (e.g. x=4x16:f32)")
    ref = _ref(tensor, "--feed")
    dims = [d for d in re.split(r"[x,]", shape_text.strip()) if d]
    if not all(d.isdigit() for d in dims):
        raise TfImportError(f"{where}: shape '{shape_text}' is not dims joined by x (4x16)")
    dt = _dtype(dtype_text.strip())
    if dt is None:
        raise TfImportError(f"{where}: unknown dtype '{dtype_text}' (f32, float32, int64 ...)")
    return Feed(ref, default_name(ref), tuple(int(d) for d in dims), dt)


def _dtype(name: str) -> DType | None:
    """A flowc dtype name (f32) or a numpy one spelled out (float32), not a type code."""
    if name in DTYPES:
        return DTYPES[name]
    try:
        return dtype(name) if np.dtype(name).name == name else None
    except TypeError:
        return None


def read_config(path: str) -> tuple[list[Feed], list[Fetch]]:
    from google.protobuf import text_format

    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise TfImportError(f"cannot read '{path}': {exc.strerror or exc}") from None
    text = re.sub(r"\b(DT_[A-Z0-9]+)\b", lambda m: str(_DT_CODES.get(m.group(1), -1)), text)
    try:
        config = text_format.Parse(text, TfConfig())
    except text_format.ParseError as exc:
        raise TfImportError(f"{path}: not a tf2xla.Config in text form: {exc}") from None
    feeds = []
    for i, feed in enumerate(config.feed):
        where = f"{path}: feed {i}"
        if not feed.id.node_name:
            raise TfImportError(f"{where} has no id.node_name")
        ref = (feed.id.node_name, int(feed.id.output_index))
        shape = shape_of(feed.shape) if feed.HasField("shape") else None  # the Placeholder's
        if shape is not None and None in shape:
            raise TfImportError(f"{where} ('{ref[0]}') needs a static shape")
        dt = tf_dtype(feed.type, where) if feed.type else None
        feeds.append(Feed(ref, feed.name or default_name(ref), shape, dt))
    fetches = []
    for i, fetch in enumerate(config.fetch):
        if not fetch.id.node_name:
            raise TfImportError(f"{path}: fetch {i} has no id.node_name")
        ref = (fetch.id.node_name, int(fetch.id.output_index))
        fetches.append(Fetch(ref, fetch.name or default_name(ref)))
    if not fetches:
        raise TfImportError(f"{path}: the config fetches nothing")
    return feeds, fetches
