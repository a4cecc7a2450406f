"""The llvm kernels of ``cumsum``, ``cumprod`` and ``sort`` (``kernels_array``) against the
reference, bit for bit (the sign of zero too): scans along every axis of an odd shape with
every attr, in order as numpy's accumulate (f16 through f32); sorts of rows with ties, NaN,
+-inf and +-0 along a first and a last axis, both directions, the whole axis (the counting
kernel) and the first k (the selection kernel), a symbolic batch of rows."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tfc

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
