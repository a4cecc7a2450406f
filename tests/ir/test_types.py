"""Element types, dimensions (ints, symbols, '?') and tensor types."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tfc.errors import TypeMismatch
from tfc.ir.types import (UNKNOWN, DType, TensorType, broadcast_dims, broadcast_shapes,
                          check_dim, dims_compatible, format_shape, scalar, shapes_compatible)


@pytest.mark.parametrize("dt, np_dtype", [
    (DType.f16, np.float16), (DType.f32, np.float32), (DType.f64, np.float64),
    (DType.i32, np.int32), (DType.i64, np.int64), (DType.bool, np.bool_)])
def test_dtype_numpy_round_trip(dt, np_dtype):
    assert dt.np == np.dtype(np_dtype)
    assert DType.from_numpy(np_dtype) is dt
    assert DType.from_numpy(np.dtype(np_dtype)) is dt
    assert dt.itemsize == np.dtype(np_dtype).itemsize
    assert DType(dt.value) is dt and repr(dt) == dt.value


def test_dtype_kinds():
    assert [d.value for d in DType if d.is_float] == ["f16", "f32", "f64"]
    assert [d.value for d in DType if d.is_int] == ["i32", "i64"]
    assert not DType.bool.is_float and not DType.bool.is_int


@pytest.mark.parametrize("bad", [np.complex64, np.uint8, np.int16, np.str_])
def test_dtype_from_unsupported_numpy(bad):
    with pytest.raises(TypeMismatch, match=f"numpy dtype {np.dtype(bad)} has no tfc"):
        DType.from_numpy(bad)


@pytest.mark.parametrize("t, text", [
    (TensorType(DType.f32, ("B", 784)), "f32[B,784]"),
    (TensorType(DType.i64, ()), "i64[]"),
    (TensorType(DType.bool, ("?", 3, "seq_len")), "bool[?,3,seq_len]"),
    (scalar(DType.f16), "f16[]"),
])
def test_printing(t, text):
    assert str(t) == text and repr(t) == text


def test_shape_normalized_to_tuple_of_python_ints():
    t = TensorType(DType.f32, [np.int64(2), 3])
    assert t.shape == (2, 3) and all(type(d) is int for d in t.shape)
    assert t == TensorType(DType.f32, (2, 3)) and hash(t) == hash(TensorType(DType.f32, (2, 3)))


def test_tensor_type_is_frozen():
    t = TensorType(DType.f32, (2,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.dtype = DType.f64  # type: ignore[misc]


def test_static_sizes():
    t = TensorType(DType.f32, (2, 3, 4))
    assert t.rank == 3 and t.is_static and t.num_elements() == 24 and t.nbytes() == 96
    s = TensorType(DType.f64, ("B", 10))
    assert not s.is_static and s.num_elements() is None
    assert s.nbytes() == 80 and s.nbytes(symbol_size=32) == 32 * 10 * 8
    assert scalar(DType.i32).num_elements() == 1 and scalar(DType.i32).rank == 0
    assert TensorType(DType.f32, (0, 5)).num_elements() == 0


def test_static_shape_is_the_shape_of_a_static_type_and_an_error_otherwise():
    assert TensorType(DType.f32, (2, 3)).static_shape == (2, 3)
    assert scalar(DType.i64).static_shape == ()
    for shape in [("B", 10), (3, UNKNOWN)]:
        with pytest.raises(TypeMismatch, match=r"has no static shape"):
            TensorType(DType.f32, shape).static_shape


def test_with_dtype_and_shape():
    t = TensorType(DType.f32, ("B", 3))
    assert t.with_dtype(DType.bool) == TensorType(DType.bool, ("B", 3))
    assert t.with_shape(["B"]) == TensorType(DType.f32, ("B",))


@pytest.mark.parametrize("bad", [-1, 1.5, True, "", "1B", "B-1", "a b", None, (2,)])
def test_invalid_dims(bad):
    with pytest.raises(TypeMismatch, match="invalid dimension"):
        check_dim(bad)
    with pytest.raises(TypeMismatch, match="invalid dimension"):
        TensorType(DType.f32, (2, bad))


@pytest.mark.parametrize("good", [0, 7, np.int32(3), "B", "_n2", UNKNOWN])
def test_valid_dims(good):
    assert check_dim(good) == good


@pytest.mark.parametrize("a, b, out", [
    (3, 3, 3), (1, 5, 5), (5, 1, 5), ("B", 1, "B"), (1, "B", "B"), ("B", "B", "B"),
    ("B", 4, 4), (4, "B", 4), ("?", 4, 4), (4, "?", 4), ("?", "?", "?"), ("B", "C", "?"),
    ("?", "B", "B"), (3, 4, None), (0, 1, 0), (0, 2, None)])
def test_broadcast_dims(a, b, out):
    assert broadcast_dims(a, b) == out


@pytest.mark.parametrize("shapes, out", [
    ([(2, 3), (3,)], (2, 3)),
    ([("B", 784), (784,)], ("B", 784)),
    ([("B", 1), (1, 10)], ("B", 10)),
    ([("B", 10), ()], ("B", 10)),
    ([(4, 1, 3), (5, 1), (1,)], (4, 5, 3)),
    ([("B", "?"), ("B", 7)], ("B", 7)),
    ([("B",), ("C",)], ("?",)),
    ([(2, 3), (4, 3)], None),
    ([("B", 3), (2, 4)], None),
    ([], ()),
])
def test_broadcast_shapes(shapes, out):
    assert broadcast_shapes(*shapes) == out


def test_broadcast_agrees_with_numpy_on_static_shapes():
    rng = np.random.default_rng(1)
    for _ in range(200):
        a = tuple(int(d) for d in rng.integers(1, 4, size=rng.integers(0, 4)))
        b = tuple(int(d) for d in rng.integers(1, 4, size=rng.integers(0, 4)))
        try:
            want = np.broadcast_shapes(a, b)
        except ValueError:
            want = None
        assert broadcast_shapes(a, b) == want, (a, b)


def test_compatibility():
    assert dims_compatible(3, 3) and not dims_compatible(3, 4)
    assert dims_compatible("B", 3) and dims_compatible(3, "?") and dims_compatible("B", "C")
    assert shapes_compatible(("B", 3), (8, 3))
    assert not shapes_compatible(("B", 3), (8, 4))
    assert not shapes_compatible(("B", 3), ("B", 3, 1))


def test_format_shape():
    assert format_shape(("B", 3)) == "[B,3]" and format_shape(()) == "[]"
