"""Attribute values of IR nodes: hashable, immutable, printable.

An attribute value is one of: `bool`, `int`, `float`, `str`, `DType`, `TensorType`,
`Tensor` (constant data), a `Graph` (a nested body, a `Body`), or a tuple of those. `Attrs` is the
hashable, sorted mapping a node holds. `normalize` turns user input (lists, numpy scalars,
numpy arrays) into these forms.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from flowc.ir.types import DType, TensorType, dtype, tensor_type_of


class Tensor:
    """Immutable constant data with its type and content digest.

    `data` is a read-only numpy array, or None when the text form elided the bytes
    (`dense_resource<...>` without a resource section): such a tensor keeps its type and
    digest, prints the same, and fails clearly if anything needs its values.
    """

    __slots__ = ("_data", "digest", "type")

    def __init__(self, data: np.ndarray | None, type: TensorType | None = None,
                 digest: str | None = None, *, owned: bool = False):
        """`owned`: `data` is a C-contiguous array nothing else will write (the parser's
        view of its resource buffer), kept without a copy; otherwise the data is copied."""
        if data is not None:
            array = data if owned else np.array(data, copy=True, order="C")
            assert array.flags.c_contiguous
            array.flags.writeable = False
            type = tensor_type_of(array)
            digest = content_digest(array)
        elif type is None or digest is None:
            raise ValueError("an elided Tensor needs its type and digest")
        self._data = array if data is not None else None
        self.type = type
        self.digest = digest

    @property
    def is_elided(self) -> bool:
        return self._data is None

    @property
    def data(self) -> np.ndarray:
        if self._data is None:
            raise ValueError(
                f"constant {self.type} sha256:{self.digest} was elided from the IR text; "
                "re-print with resources (flowc ... --emit-resources) to keep its data")
        return self._data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tensor) and (self.type, self.digest) == (other.type, other.digest)

    def __hash__(self) -> int:
        return hash((self.type, self.digest))

    def __repr__(self) -> str:
        return f"Tensor({self.type}, sha256:{self.digest})"


def content_digest(array: np.ndarray) -> str:
    """The first 16 hex digits of sha256 over dtype, shape and little-endian bytes."""
    h = hashlib.sha256()
    h.update(f"{array.dtype.str}{array.shape}".encode())
    h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[:16]


class Body:
    """The base of graph-valued attributes (nested bodies): `flowc.ir.graph.Graph` is its
    one subclass. `normalize` and the printer test for it, so that neither imports the
    graph module (which imports this one)."""

    __slots__ = ()


def normalize(value: Any) -> Any:
    """The canonical attribute form of `value`; TypeError for what cannot be an attribute."""
    if isinstance(value, bool | str | DType | TensorType | Tensor | Body):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    if isinstance(value, np.dtype):
        return dtype(value)
    if isinstance(value, np.ndarray):
        return Tensor(value)
    if isinstance(value, list | tuple):
        return tuple(normalize(v) for v in value)
    raise TypeError(f"{type(value).__name__} {value!r} cannot be an attribute value")


class Attrs(Mapping[str, Any]):
    """A hashable mapping from attribute names to normalized values, kept sorted."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, Any] | None = None, **kwargs: Any):
        merged = dict(items or {}, **kwargs)
        self._items = tuple(sorted((k, normalize(v)) for k, v in merged.items()))
        self._hash = hash(self._items)

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Attrs) and self._items == other._items

    def replace(self, **changes: Any) -> Attrs:
        return Attrs({**dict(self._items), **changes})

    def __repr__(self) -> str:
        return "Attrs(" + ", ".join(f"{k}={v!r}" for k, v in self._items) + ")"
