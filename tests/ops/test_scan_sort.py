"""``cumsum``, ``cumprod`` and ``sort`` (``tfc.ops.scan_sort``): references against numpy
written out independently, gradients against central finite differences (float64, rtol
1e-6, atol 1e-8), and the type errors."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.errors import TfcError
from tfc.ir.registry import infer_types, lookup
from tfc.ir.types import DType, TensorType
from tfc.testing import check_gradients

RNG = np.random.default_rng(3)


def ref(kind: str, *arrays: np.ndarray, **attrs) -> list[np.ndarray]:
    opdef = lookup(kind)
    return opdef.reference(None, list(arrays), opdef.check_attrs(attrs))


def loop_scan(x: np.ndarray, prod: bool, exclusive: bool, reverse: bool) -> np.ndarray:
    """A scan along axis 1 written as the definition: one element after the other."""
    out = np.empty_like(x)
    n = x.shape[1]
    for r in range(x.shape[0]):
        run = x.dtype.type(1 if prod else 0)
        for j in (reversed(range(n)) if reverse else range(n)):
            nxt = run * x[r, j] if prod else run + x[r, j]
            out[r, j] = run if exclusive else nxt
            run = nxt
    return out


@pytest.mark.parametrize("kind", ["cumsum", "cumprod"])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_reference_is_the_in_order_definition(kind, exclusive, reverse) -> None:
    x = RNG.normal(size=(3, 6)).astype(np.float32)
    got = ref(kind, x, axis=1, exclusive=exclusive, reverse=reverse)[0]
    np.testing.assert_array_equal(got, loop_scan(x, kind == "cumprod", exclusive, reverse))
    i = np.arange(18, dtype=np.int32).reshape(3, 6) - 9
    got = ref(kind, i, axis=1, exclusive=exclusive, reverse=reverse)[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, loop_scan(i, kind == "cumprod", exclusive, reverse))


def test_scan_of_f16_accumulates_in_f32() -> None:
    x = np.full((1, 3000), 1.0, np.float16)  # f16 alone stops counting at 2048
    got = ref("cumsum", x, axis=1)[0]
    assert got.dtype == np.float16 and got[0, -1] == np.float16(3000)


def test_cumsum_starts_from_plus_zero() -> None:
    """As the llvm kernel and TF: 0 + -0 is +0, so a leading -0 does not survive (numpy's
    accumulate would keep it); a -0 later in the row is absorbed the same way."""
    for dt in (np.float16, np.float32, np.float64):
        x = np.array([[-0.0, -0.0, 1.0]], dt)
        got = ref("cumsum", x, axis=1)[0]
        assert not np.signbit(got).any(), got
        got = ref("cumsum", x, axis=1, exclusive=True, reverse=True)[0]
        assert not np.signbit(got).any(), got


def order_by_hand(row: list[float], descending: bool) -> list[int]:
    """Stable order with NaN the largest: sort (key, index) pairs."""
    def key(i: int):
        v = row[i]
        big = np.isnan(v)
        k = (1, 0.0) if big else (0, v)
        return ((-k[0], -k[1]) if descending else k, i)
    return sorted(range(len(row)), key=key)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_with_nan_largest(descending) -> None:
    x = np.array([[3, np.nan, 1, 3, -0.0, 0.0, np.nan, -np.inf, np.inf, 1]], np.float32)
    values, indices = ref("sort", x, descending=descending)
    want = order_by_hand([float(v) for v in x[0]], descending)
    assert indices.dtype == np.int32 and indices[0].tolist() == want
    np.testing.assert_array_equal(values[0], x[0, want])
    values, indices = ref("sort", x, descending=descending, k=4)
    assert indices[0].tolist() == want[:4]


def test_sort_along_a_middle_axis() -> None:
    x = RNG.integers(0, 3, size=(2, 5, 3)).astype(np.int64)
    values, indices = ref("sort", x, axis=1, descending=True, k=2)
    assert values.shape == indices.shape == (2, 2, 3)
    for a in range(2):
        for c in range(3):
            want = order_by_hand([float(v) for v in x[a, :, c]], True)[:2]
            assert indices[a, :, c].tolist() == want
            np.testing.assert_array_equal(values[a, :, c], x[a, want, c])


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_gradient(exclusive, reverse) -> None:
    x = RNG.normal(size=(3, 4))
    check_gradients("cumsum", x, axis=1, exclusive=exclusive, reverse=reverse)
    check_gradients("cumsum", x, axis=0, exclusive=exclusive, reverse=reverse, order=2)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_gradient_is_right_at_zeros(exclusive, reverse) -> None:
    x = RNG.normal(size=(2, 5))
    x[0, 2] = 0.0
    x[1, 1] = x[1, 3] = 0.0  # two zeros: only the terms skipping both survive
    check_gradients("cumprod", x, axis=1, exclusive=exclusive, reverse=reverse)
    check_gradients("cumprod", x.T.copy(), axis=0, exclusive=exclusive, reverse=reverse,
                    order=2)


def test_sort_gradient_goes_back_to_the_places() -> None:
    x = RNG.normal(size=(3, 5))
    check_gradients("sort", x, axis=1, descending=True, k=3)
    check_gradients("sort", x, axis=0, order=2)


def test_type_errors() -> None:
    f = TensorType(DType.f32, (3, 4))
    with pytest.raises(TfcError, match="k=5 is larger than axis 1"):
        infer_types("sort", [f], {"k": 5})
    with pytest.raises(TfcError, match="axis"):
        infer_types("cumsum", [f], {"axis": 2})
    with pytest.raises(TfcError, match="rank >= 1"):
        infer_types("sort", [TensorType(DType.f32, ())], {})
    with pytest.raises(TfcError, match="bool"):
        infer_types("cumsum", [TensorType(DType.bool, (3,))], {})
    assert infer_types("sort", [TensorType(DType.f32, ("B", 4))], {"k": 2})[2] == [
        TensorType(DType.f32, ("B", 2)), TensorType(DType.i32, ("B", 2))]
