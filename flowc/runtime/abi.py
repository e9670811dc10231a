"""The artifact ABI shared by the code generator and the loader (no compiler imports).

Contract: these tables match `flowc_rt.h` (status codes, dtype codes, the weights side-file
header) and are the only place the Python side defines them; `ABI_VERSION` changes whenever
the C API, the descriptor layout or the manifest format changes incompatibly.
"""

from __future__ import annotations

import numpy as np

# 2: the narrow dtype codes 13..22; 3: NAME_run_with; 4: variables, checkpoints;
# 5: entries (flowc_model.entries, NAME_train_step, the manifest's `entries`); 6: dims given
# at run time (flowc_model.dims, flowc_tensor_desc.dim_of, the entry's `dims` argument)
ABI_VERSION = 6
MANIFEST_FORMAT = "flowc-artifact"
MANIFEST_FILE = "manifest.json"
ALIGN = 64  # bytes: every buffer a kernel sees is aligned to this
WEIGHTS_MAGIC = b"FLOWCWTS"
WEIGHTS_HEADER = 64  # magic[8], u32 abi, u32 0, graph hash[16 ascii], u64 data bytes, padding

# Element types in code order (the C runtime's DTYPE_NAMES): name -> (numpy name, bytes).
DTYPES: dict[str, tuple[str, int]] = {
    "bool": ("bool", 1), "i8": ("int8", 1), "i16": ("int16", 2), "i32": ("int32", 4),
    "i64": ("int64", 8), "u8": ("uint8", 1), "u16": ("uint16", 2), "u32": ("uint32", 4),
    "u64": ("uint64", 8), "f16": ("float16", 2), "bf16": ("bfloat16", 2),
    "f32": ("float32", 4), "f64": ("float64", 8),
    # Narrow types, one element per byte (the low bits; ml_dtypes' layout): codes 13..22.
    "f8E4M3FN": ("float8_e4m3fn", 1), "f8E4M3FNUZ": ("float8_e4m3fnuz", 1),
    "f8E5M2": ("float8_e5m2", 1), "f8E5M2FNUZ": ("float8_e5m2fnuz", 1),
    "f8E8M0FNU": ("float8_e8m0fnu", 1), "f4E2M1FN": ("float4_e2m1fn", 1),
    "i4": ("int4", 1), "u4": ("uint4", 1), "i2": ("int2", 1), "u2": ("uint2", 1),
}
DTYPE_CODES: dict[str, int] = {name: code for code, name in enumerate(DTYPES)}

STATUS: dict[int, str] = {
    0: "FLOWC_OK", 1: "FLOWC_ERR_ARGUMENT", 2: "FLOWC_ERR_SHAPE", 3: "FLOWC_ERR_DTYPE",
    4: "FLOWC_ERR_NOMEM", 5: "FLOWC_ERR_WEIGHTS", 6: "FLOWC_ERR_CPU", 7: "FLOWC_ERR_THREADS",
    8: "FLOWC_ERR_DEVICE",
}


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of an artifact dtype name (bf16 and the narrow types need ml_dtypes,
    loaded only then)."""
    np_name = "bfloat16" if name == "bf16" else DTYPES[name][0]
    if hasattr(np, np_name):
        return np.dtype(np_name)
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, np_name))


def weights_header(graph_hash: str, data_bytes: int) -> bytes:
    """The 64-byte header of a weights side file (see flowc_rt.h)."""
    head = (WEIGHTS_MAGIC + ABI_VERSION.to_bytes(4, "little") + bytes(4)
            + graph_hash.encode("ascii")[:16].ljust(16, b"0") + data_bytes.to_bytes(8, "little"))
    return head.ljust(WEIGHTS_HEADER, b"\0")
