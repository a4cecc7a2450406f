"""The llvm kernels of ``cumsum``, ``cumprod`` and ``sort`` (``kernels_array``) against the
reference, bit for bit (the sign of zero too): scans along every axis of an odd shape with
every attr, in order as numpy's accumulate (f16 through f32); sorts of rows with ties, NaN,
+-inf and +-0 along a first and a last axis, both directions, the whole axis (the merge
sort) and the first k (the selection kernel while k is small, else the merge sort), a
symbolic batch of rows; long rows (1e5: many merge passes, ties, NaN, +-0, k near n), a
symbolic sorted axis (the path picked per binding), rows split across threads; and a
sort of 1e6 that must take well under a second (n log n: the counting kernel it
replaced needed minutes)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tfc
from tfc.backends.llvm.kernels_array import sort_passes, sort_selects

RNG = np.random.default_rng(2)


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def native_and_reference(build, x: np.ndarray) -> tuple[list, list]:
    ph = tfc.placeholder(tfc.as_dtype(x.dtype.name), [None, *x.shape[1:]])
    outs = build(ph)
    got = []
    for backend in ("llvm", "reference"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a fallback to the reference warns
            with tfc.Session(backend=backend) as s:
                got.append([np.asarray(v) for v in s.run(outs, {ph: x})])
    return got[0], got[1]


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes(), (a, b)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64])
def test_scans_match_the_reference(dtype) -> None:
    if np.dtype(dtype).kind == "f":
        x = RNG.normal(size=(3, 5, 7)).astype(dtype)
        x[0, 0, :2] = -0.0
    else:
        x = RNG.integers(-4, 5, size=(3, 5, 7)).astype(dtype)
    builds = [lambda t, f=f, a=a, e=e, r=r: [f(t, a, e, r)]
              for f in (tfc.cumsum, tfc.math.cumprod) for a in (0, 1, 2, -1)
              for e in (False, True) for r in (False, True)]
    got, want = native_and_reference(lambda t: [o for bld in builds for o in bld(t)], x)
    for g, w in zip(got, want):
        same_bits(g, w)


def rows(dtype) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        x = RNG.integers(-3, 4, size=(6, 40)).astype(dtype)
        x[1, ::3] = np.nan
        x[2, ::4] = np.inf
        x[2, 1::4] = -np.inf
        x[3, ::2] = -0.0
        x[4] = RNG.normal(size=40)
        return x
    return RNG.integers(-3, 4, size=(6, 40)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64])
def test_sorts_match_the_reference(dtype) -> None:
    x = rows(dtype)

    def build(t):
        outs = []
        for d in ("ASCENDING", "DESCENDING"):
            outs += [tfc.sort(t, -1, d), tfc.argsort(t, -1, d), tfc.sort(t, 0, d),
                     tfc.argsort(t, 0, d)]
        for k in (1, 3, 40):
            outs += list(tfc.math.top_k(t, k))
        v, i = tfc.apply("sort", t, axis=0, descending=False, k=2)
        return outs + [v, i]
    got, want = native_and_reference(build, x)
    for g, w in zip(got, want):
        same_bits(g, w)


def test_top_k_of_long_rows() -> None:
    """30000 logits, top 5 (the selection kernel: 5 passes over each row)."""
    x = RNG.normal(size=(4, 30000)).astype(np.float32)
    got, want = native_and_reference(lambda t: list(tfc.math.top_k(t, 5)), x)
    for g, w in zip(got, want):
        same_bits(g, w)
    np.testing.assert_array_equal(got[1], np.argsort(-x, axis=1, kind="stable")[:, :5])


def long_rows(dtype, n: int = 100_000) -> np.ndarray:
    """Two rows of ``n``: few distinct values (long runs of ties) with NaN, +-inf and
    +-0 sprinkled (floats), and distinct-ish normal values."""
    x = np.empty((2, n), dtype)
    if np.dtype(dtype).kind == "f":
        x[0] = RNG.integers(-50, 51, size=n)
        at = RNG.permutation(n)
        x[0, at[:300]] = np.nan
        x[0, at[300:600]] = -0.0
        x[0, at[600:700]] = np.inf
        x[0, at[700:800]] = -np.inf
        x[1] = RNG.normal(size=n)
    else:
        x[0] = RNG.integers(-50, 51, size=n)
        x[1] = RNG.integers(-2**30, 2**30, size=n)
    return x


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32])
def test_long_rows_match_the_reference(dtype) -> None:
    """Rows of 1e5 (17 merge passes), both directions, argsort and top_k with k near n
    (the merge path: ``sort_selects`` picks it for these k) and small k (selection)."""
    x = long_rows(dtype)
    n = x.shape[1]
    assert not sort_selects(n - 3, n) and sort_selects(2, n)

    def build(t):
        outs = []
        for d in ("ASCENDING", "DESCENDING"):
            outs += [tfc.sort(t, -1, d), tfc.argsort(t, -1, d)]
        for k in (2, 1000, n - 3, n):
            outs += list(tfc.math.top_k(t, k))
        v, i = tfc.apply("sort", t, axis=1, descending=False, k=n - 1)
        return outs + [v, i]

    got, want = native_and_reference(build, x)
    for g, w in zip(got, want):
        same_bits(g, w)
    np.testing.assert_array_equal(got[1], np.argsort(x, axis=1, kind="stable"))


def test_long_first_axis() -> None:
    """Sorting along axis 0 of a (3000, 3) array: the row is strided in memory."""
    x = long_rows(np.float32, 3000).T.copy()
    got, want = native_and_reference(
        lambda t: [tfc.sort(t, 0), tfc.argsort(t, 0, "DESCENDING"), *tfc.math.top_k(
            tfc.transpose(t), 2500)], x)
    for g, w in zip(got, want):
        same_bits(g, w)


def test_many_rows_split_across_threads() -> None:
    """512 rows of 700 (merge sort; the row loop is split across the threads, each row
    with its own slab of scratch), with a top k taking the merge path too."""
    x = RNG.integers(-20, 21, size=(512, 700)).astype(np.float32)
    x[::7, ::5] = np.nan
    got, want = native_and_reference(
        lambda t: [tfc.sort(t, -1, "DESCENDING"), tfc.argsort(t, -1), *tfc.math.top_k(t, 600)],
        x)
    for g, w in zip(got, want):
        same_bits(g, w)


def test_symbolic_sorted_axis_picks_a_path_per_binding() -> None:
    """A top 6 along an axis of unknown length: selection passes for a row of 30000
    (15 merge passes), the merge sort for a row of 40 (6 merge passes); one session."""
    assert sort_selects(6, 30000) and not sort_selects(6, 40)
    ph = tfc.placeholder(tfc.float32, [3, None])
    outs = list(tfc.math.top_k(ph, 6)) + [tfc.argsort(ph, -1, "DESCENDING")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tfc.Session(backend="llvm") as s:
            for n in (30000, 40, 6, 30000):
                x = RNG.integers(-5, 6, size=(3, n)).astype(np.float32)
                v, i, order = s.run(outs, {ph: x})
                want = np.argsort(-x, axis=1, kind="stable")
                np.testing.assert_array_equal(order, want)
                np.testing.assert_array_equal(i, want[:, :6])
                same_bits(v, np.take_along_axis(x, want[:, :6], axis=1))
            with pytest.raises(tfc.TfcError, match="k=6"):
                s.run(outs, {ph: np.zeros((3, 5), np.float32)})


def test_sorting_a_million_takes_the_merge_passes() -> None:
    """1e6 floats with ties, sorted with their indices in 20 merge passes, bit for bit as
    numpy's stable sort (~0.2 s on one loaded core here; the counting kernel this
    replaced compared every pair, 1e12 comparisons: its speed is measured in benchmarks,
    not asserted here)."""
    x = RNG.normal(size=(1_000_000,)).astype(np.float32)
    x[::1000] = x[1::1000]  # ties
    assert sort_passes(x.size) == 20 and not sort_selects(-1, x.size)
    ph = tfc.placeholder(tfc.float32, [None])
    outs = [tfc.sort(ph), tfc.argsort(ph)]
    with tfc.Session(backend="llvm") as s:
        values, order = s.run(outs, {ph: x})
    want = np.argsort(x, kind="stable")
    np.testing.assert_array_equal(order, want)
    same_bits(values, x[want])
