"""``cumsum``, ``cumprod`` and ``sort`` (``tfc.ops.scan_sort``): references against numpy
written out independently, gradients against central finite differences (float64, rtol
1e-6, atol 1e-8; cumprod's at rows with 0 to 3 zeros, orders 1 and 2, a symbolic axis)
and against the sum of products (f32, rtol 1.2e-7), and the type errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tfc.errors import TfcError
from tfc.ir.autodiff import gradients
from tfc.ir.builder import Builder
from tfc.ir.core import Graph
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.registry import infer_types, lookup
from tfc.ir.types import DType, TensorType
from tfc.testing import check_graph_gradients, check_gradients, type_of

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


def zero_rows(n: int) -> np.ndarray:
    """Rows with no zero, one (first, middle, last), two (adjacent too) and three zeros."""
    x = RNG.normal(size=(8, n))
    x[1, 0] = 0.0
    x[2, n // 2] = 0.0
    x[3, -1] = 0.0
    x[4, [1, n - 2]] = 0.0
    x[5, [2, 3]] = 0.0
    x[6, [0, 3, n - 1]] = 0.0
    x[7, :] = 0.0
    return x


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_gradient_of_a_symbolic_axis(exclusive, reverse) -> None:
    """Linear in the axis, so it may be symbolic (the n x n form needed it static): rows
    with 0 to 3 zeros (and all zeros), orders 1 and 2, against finite differences."""
    def sin_sum(b: Builder, values: list) -> Any:  # (random cotangents need static shapes)
        return b("sum", b("sin", values[0]))

    x = zero_rows(7)
    for order in (1, 2):
        check_graph_gradients(
            lambda b, t: b("cumprod", t, axis=1, exclusive=exclusive, reverse=reverse), x,
            types=[TensorType(DType.f64, ("B", "N"))], order=order, loss=sin_sum,
            what="cumprod")
    check_graph_gradients(
        lambda b, t: b("cumprod", t, axis=0, exclusive=exclusive, reverse=reverse),
        x.T.copy(), types=[TensorType(DType.f64, ("N", "B"))], order=2, loss=sin_sum,
        what="cumprod")


def cumprod_grad_by_products(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``dx_k = sum_{i >= k} g_i * prod_{j <= i, j != k} x_j`` along axis 1, in longdouble."""
    x, g = x.astype(np.longdouble), g.astype(np.longdouble)
    out = np.zeros_like(x)
    for k in range(x.shape[1]):
        for i in range(k, x.shape[1]):
            out[:, k] += g[:, i] * np.prod(np.delete(x[:, :i + 1], k, axis=1), axis=1)
    return out


def cumprod_gradient(x: np.ndarray, g: np.ndarray, **attrs) -> np.ndarray:
    graph = Graph("cumprod_grad")
    xa = graph.add_arg(type_of(x), "x")
    ga = graph.add_arg(type_of(g), "g")
    y = Builder(graph)("cumprod", xa, axis=1, **attrs)
    (dx,) = gradients(graph, [y], [xa], [ga])
    graph.set_results([dx])
    return run_graph(graph, [x, g], ExecContext({}, 0))[0]


def test_cumprod_gradient_of_f32_keeps_terms_whose_products_left_f32() -> None:
    """f32 rows whose running product underflows (1e-20 * 1e-20 * 1e-10) and comes back
    (* 1e20 * 1e20): divided in f32, the terms past the underflow would be lost (every
    gradient of the row 100% off); worked in f64, each is within 1 ulp of f32."""
    x = np.ones((2, 8), np.float32)
    x[:, 1:6] = [1e-20, 1e-20, 1e-10, 1e20, 1e20]
    x[1, 6] = 0.0
    g = RNG.normal(size=(2, 8)).astype(np.float32)
    got = cumprod_gradient(x, g)
    assert got.dtype == np.float32
    want = cumprod_grad_by_products(x, g)
    np.testing.assert_allclose(got, want.astype(np.float64), rtol=1.2e-7, atol=0)


def test_cumprod_gradient_is_linear_in_the_axis() -> None:
    """No value of the gradient graph is larger than a few rows' worth of the input (the
    n x n form made a [2, 1000, 1000] tensor)."""
    graph = Graph("cumprod_grad")
    x = graph.add_arg(TensorType(DType.f32, (2, 1000)), "x")
    y = Builder(graph)("cumprod", x, axis=1, reverse=True)
    (dx,) = gradients(graph, [y], [x])
    graph.set_results([dx])
    largest = max(v.type.num_elements() or 0 for op in graph.ops for v in op.results)
    assert largest == 2000


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
