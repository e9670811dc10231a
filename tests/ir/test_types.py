import ml_dtypes
import numpy as np
import pytest

from flowc.ir.types import DTYPES, TensorType, VarType, dtype


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_every_dtype_maps_to_numpy_and_back(name):
    dt = DTYPES[name]
    assert dtype(dt.np) is dt
    assert dtype(name) is dt


def test_bfloat16_is_ml_dtypes():
    assert DTYPES["bf16"].np == np.dtype(ml_dtypes.bfloat16)
    assert dtype("bfloat16").name == "bf16"


def test_tensor_type_text_and_properties():
    t = TensorType("f32", ("N", 3, None))
    assert str(t) == "f32[N,3,?]"
    assert t.rank == 3 and not t.is_static and t.num_elements is None
    assert str(TensorType("i64", ())) == "i64[]"
    assert TensorType("f32", (0, 4)).num_elements == 0
    assert str(VarType(TensorType("f32", (2,)))) == "var<f32[2]>"


@pytest.mark.parametrize("bad, message", [
    ((-1,), "must be >= 0"), (("3x",), "neither an identifier nor a dim expression"),
    ((1.5,), "a dim is"),
])
def test_bad_dims_are_rejected(bad, message):
    with pytest.raises(TypeError, match=message):
        TensorType("f32", bad)


def test_unknown_dtype_is_named():
    with pytest.raises(TypeError, match="complex64"):
        dtype(np.complex64)
