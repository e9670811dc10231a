"""Element types, dimensions and tensor types of the flowc IR.

Contract:
- A `DType` is one of a fixed set (`DTYPES`), named in text by its short name (`f32`,
  `bf16`, `i64`, `bool` ...) and mapped one-to-one onto a numpy dtype (bfloat16 and the
  narrow types via ml_dtypes).
- Narrow types (`f8E4M3FN`, `f8E4M3FNUZ`, `f8E5M2`, `f8E5M2FNUZ`, `f8E8M0FNU`, `f4E2M1FN`,
  `i4`, `u4`, `i2`, `u2`) hold one element per byte of storage, as ml_dtypes does:
  `bits` is the width of the value, `itemsize` the bytes one element occupies. They are
  storage and cast types (`DType.narrow`); only the interpreter computes on them.
- String tensors are not a flowc dtype: no registry op computes on them, they have no fixed
  element size for an arena, and C callers would need an ownership convention.
- A dimension is an `int` >= 0 (static), a `str` naming a symbolic dim bound at run time
  (for example a batch dim `N`) or an expression over such symbols in its canonical text
  (`N*S`, `S+1`, `ceildiv(S,2)`: `ir/dims.py`; a TensorType canonicalizes the text it is
  given, so equal expressions are equal dims), or `None` for a dim that no rule can name
  (printed `?`).
- `TensorType(dtype, shape)` is immutable and hashable; rank 0 is `shape == ()`.
- `VarType(tensor)` is the type of a variable handle: the state a `variable` node names.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from flowc.ir import dims

Dim = int | str | None
SYMBOL_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class DType:
    """An element type: its text name, its numpy dtype and its kind."""

    name: str
    np_name: str
    kind: str  # "bool", "int", "uint" or "float"
    bits: int

    @property
    def np(self) -> np.dtype:
        return _NUMPY[self.name]

    @property
    def itemsize(self) -> int:
        """Bytes one element occupies in memory (narrow types take a whole byte)."""
        return self.np.itemsize

    @property
    def narrow(self) -> bool:
        """Whether this is one of the sub-byte or 8-bit float types (see the contract)."""
        return self.name in NARROW

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"DType({self.name})"


_TABLE = [
    ("bool", "bool", "bool", 8),
    ("i8", "int8", "int", 8),
    ("i16", "int16", "int", 16),
    ("i32", "int32", "int", 32),
    ("i64", "int64", "int", 64),
    ("u8", "uint8", "uint", 8),
    ("u16", "uint16", "uint", 16),
    ("u32", "uint32", "uint", 32),
    ("u64", "uint64", "uint", 64),
    ("f16", "float16", "float", 16),
    ("bf16", "bfloat16", "float", 16),
    ("f32", "float32", "float", 32),
    ("f64", "float64", "float", 64),
    ("f8E4M3FN", "float8_e4m3fn", "float", 8),
    ("f8E4M3FNUZ", "float8_e4m3fnuz", "float", 8),
    ("f8E5M2", "float8_e5m2", "float", 8),
    ("f8E5M2FNUZ", "float8_e5m2fnuz", "float", 8),
    ("f8E8M0FNU", "float8_e8m0fnu", "float", 8),
    ("f4E2M1FN", "float4_e2m1fn", "float", 4),
    ("i4", "int4", "int", 4),
    ("u4", "uint4", "uint", 4),
    ("i2", "int2", "int", 2),
    ("u2", "uint2", "uint", 2),
]
NARROW = frozenset(("f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f8E8M0FNU", "f4E2M1FN",
                    "i4", "u4", "i2", "u2"))
DTYPES: dict[str, DType] = {n: DType(n, np_name, k, b) for n, np_name, k, b in _TABLE}
_NUMPY: dict[str, np.dtype] = {
    n: np.dtype(getattr(ml_dtypes, np_name, None) or np_name) for n, np_name, _, _ in _TABLE
}
_FROM_NUMPY: dict[np.dtype, DType] = {_NUMPY[n]: d for n, d in DTYPES.items()}
_ML_NAMES = frozenset(np_name for _, np_name, _, _ in _TABLE if hasattr(ml_dtypes, np_name))

bool_ = DTYPES["bool"]
i8, i16, i32, i64 = (DTYPES[n] for n in ("i8", "i16", "i32", "i64"))
u8, u16, u32, u64 = (DTYPES[n] for n in ("u8", "u16", "u32", "u64"))
f16, bf16, f32, f64 = (DTYPES[n] for n in ("f16", "bf16", "f32", "f64"))


def dtype(value: DType | str | np.dtype | type) -> DType:
    """The DType for a DType, a text name (`f32`), a numpy name (`float32`) or dtype."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    try:
        npd = np.dtype(getattr(ml_dtypes, value) if value in _ML_NAMES else value)
    except TypeError as exc:
        raise TypeError(f"not a dtype: {value!r}") from exc
    if npd not in _FROM_NUMPY:
        raise TypeError(f"flowc has no dtype for numpy dtype {npd} (from {value!r})")
    return _FROM_NUMPY[npd]


def check_dim(dim: object) -> Dim:
    """`dim` if it is a valid dimension, else TypeError naming it."""
    if dim is None:
        return None
    if isinstance(dim, bool) or not isinstance(dim, int | str | np.integer):
        raise TypeError(f"a dim is an int >= 0, a symbol name or None; got {dim!r}")
    if isinstance(dim, str):
        if SYMBOL_RE.match(dim):
            return dim
        try:
            return dims.canonical(dim)
        except ValueError:
            raise TypeError(f"symbolic dim {dim!r} is neither an identifier nor a dim "
                            "expression") from None
    if dim < 0:
        raise TypeError(f"a static dim must be >= 0; got {dim}")
    return int(dim)


def format_dim(dim: Dim) -> str:
    return "?" if dim is None else str(dim)


@dataclass(frozen=True)
class TensorType:
    """A tensor's element type and shape; printed `f32[N,784]`, rank 0 as `f32[]`."""

    dtype: DType
    shape: tuple[Dim, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(check_dim(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def num_elements(self) -> int | None:
        """The element count when every dim is static, else None (exact: never wraps)."""
        if not self.is_static:
            return None
        return math.prod(self.shape)

    def with_shape(self, shape: tuple[Dim, ...]) -> TensorType:
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dt: DType) -> TensorType:
        return TensorType(dt, self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.name}[{','.join(format_dim(d) for d in self.shape)}]"


@dataclass(frozen=True)
class VarType:
    """The type of a variable handle; printed `var<f32[784,10]>`."""

    tensor: TensorType

    def __str__(self) -> str:
        return f"var<{self.tensor}>"


Type = TensorType | VarType


def tensor_type_of(array: np.ndarray) -> TensorType:
    """The static TensorType of a numpy array."""
    return TensorType(dtype(array.dtype), tuple(int(d) for d in array.shape))


def dims_compatible(declared: Dim, actual: Dim) -> bool:
    """Whether an `actual` dim may stand where `declared` is stated (None is a wildcard)."""
    if declared is None or actual is None:
        return True
    if isinstance(declared, str) or isinstance(actual, str):
        return declared == actual or isinstance(declared, str) != isinstance(actual, str)
    return declared == actual
