"""sinh, cosh, asinh, acosh, atanh (tfc.api.ops: composed of registry ops, no op of their
own) against the exact value (x87 extended precision, ``np.longdouble``) on a dense sweep
of float32 and float64: tiny to huge magnitudes, 0 to 100, around 1, both signs, ±0, ±inf,
NaN; on the reference and the llvm backend. Their values at the special points, their
gradients against the closed forms (cosh, sinh, 1/sqrt(1 + x^2), 1/sqrt(x^2 - 1),
1/(1 - x^2)) including where a branch not taken would overflow, and their errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch
from tfc.testing import ulp_errors

BACKENDS = ["reference", "llvm"]
L = np.longdouble
EXACT = {"sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
         "atanh": np.arctanh}
# Max error in ulp over the sweep, measured on both backends (worst of the two, x86-64
# AVX-512 host; the test's sweep is a subset of the measured one), plus about 0.25 for
# numpy's host-dependent SIMD exp/log1p/expm1 on the reference: f32 sinh/cosh 3.71 (e^|x|/2
# as (e^(|x|/2)/2) e^(|x|/2) past 88.5: two exp errors; 2.38 below), asinh 2.39, acosh
# 2.84, atanh 2.00; f64 sinh 1.73, cosh 2.39, asinh 2.48, acosh 2.75, atanh 2.00.
MAX_ULP = {
    np.float32: {"sinh": 4.0, "cosh": 4.0, "asinh": 2.65, "acosh": 3.1, "atanh": 2.25},
    np.float64: {"sinh": 2.0, "cosh": 2.65, "asinh": 2.75, "acosh": 3.0, "atanh": 2.25},
}


def sweep(dtype) -> np.ndarray:
    fi = np.finfo(dtype)
    n = 40001
    mags = np.logspace(np.log10(float(fi.tiny)), np.log10(float(fi.max)), n)
    x = np.concatenate([mags, np.linspace(0, 100, n), 1 + np.linspace(-1e-3, 1e-3, 4001),
                        [0, np.inf, np.nan, 1, 0.5, 88.6, 89.4, 709.9, 710.4, float(fi.max)]])
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    return np.concatenate([x, -x])


def run(backend: str, fns: dict, x: np.ndarray) -> dict:
    with tfc.Graph().as_default():
        ph = tfc.placeholder(tfc.as_dtype(x.dtype), [x.size])
        outs = {k: fn(ph) for k, fn in fns.items()}
        with tfc.Session(backend=backend) as sess:
            return sess.run(outs, {ph: x})


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (numpy's, on the reference)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_ulp_error_on_a_dense_sweep(backend, dtype):
    x = sweep(dtype)
    got = run(backend, {k: getattr(tfc.math, k) for k in EXACT}, x)
    for name, fn in EXACT.items():
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exact = fn(x.astype(L))
        assert got[name].dtype == dtype
        err = ulp_errors(got[name], exact)
        k = int(np.argmax(err))
        assert err[k] <= MAX_ULP[dtype][name], \
            f"{name}({x[k]!r}) = {got[name][k]!r}, exact {exact[k]!r}: {err[k]:.3f} ulp"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_special_values(backend, dtype):
    """Signed zeros kept by the odd ones, tiny arguments exact (sinh(1e-30) is 1e-30, not
    0 as (e^x - e^-x)/2 gives), no overflow where the result fits (sinh(89) in f32 is
    2.2e38, e^89 is not finite), the domains' ends and NaN outside them."""
    inf, nan = np.inf, np.nan
    tiny = {np.float16: 1e-7, np.float32: 1e-30, np.float64: 1e-300}[dtype]
    big = {np.float16: 11.5, np.float32: 89.0, np.float64: 710.0}[dtype]
    x = np.array([0.0, -0.0, tiny, -tiny, inf, -inf, nan, big, -big, 1.0, -1.0, 0.5, 1.5,
                  -3.0], dtype)
    got = run(backend, {k: getattr(tfc, k) for k in EXACT}, x)
    with np.errstate(all="ignore"):
        want_big = np.sinh(L(big))
    eq = np.testing.assert_array_equal
    s = got["sinh"]
    eq(s[:7], np.array([0.0, -0.0, tiny, -tiny, inf, -inf, nan], dtype))
    eq(np.signbit(s[:2]), [False, True])
    assert np.isfinite(s[7]) and abs(s[7] - want_big) <= 4 * np.spacing(dtype(want_big))
    assert s[8] == -s[7]
    c = got["cosh"]
    eq(c[[0, 1, 2, 4, 5, 6]], np.array([1, 1, 1, inf, inf, nan], dtype))
    assert np.isfinite(c[7]) and c[7] == c[8]
    a = got["asinh"]
    eq(a[:7], np.array([0.0, -0.0, tiny, -tiny, inf, -inf, nan], dtype))
    eq(np.signbit(a[:2]), [False, True])
    h = got["acosh"]
    eq(h[[0, 4, 5, 6, 9, 10, 11, 13]], np.array([nan, inf, nan, nan, 0, nan, nan, nan], dtype))
    t = got["atanh"]
    eq(t[[0, 1, 2, 3, 6, 9, 10, 12, 13]],
       np.array([0.0, -0.0, tiny, -tiny, nan, inf, -inf, nan, nan], dtype))
    eq(np.signbit(t[:2]), [False, True])


CLOSED_FORMS = {
    "sinh": (np.cosh, [0.0, -1e-20, 0.3, -2.0, 19.9, 20.1, -30.0, 80.0, 88.7, 1e-3]),
    "cosh": (np.sinh, [0.0, 0.3, -2.0, 19.9, 20.1, -30.0, 80.0, 88.7, 1e-3]),
    "asinh": (lambda v: 1 / np.sqrt(1 + v * v), [0.0, 1e-20, -0.3, 2.0, 5000.0, -1e10]),
    "acosh": (lambda v: 1 / np.sqrt(v * v - 1), [1.5, 1.01, 3.0, 5000.0, 1e10]),
    "atanh": (lambda v: 1 / (1 - v * v), [0.0, 1e-20, -0.3, 0.9, -0.999]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_gradients_are_the_closed_forms(backend, dtype, name):
    """Through the composition's ops (a where picks a branch; the other branch's input is
    clamped, so its 0 gradient never meets an inf): finite, the derivative at 0 of the odd
    ones is 1, and within 8 ulp of the closed form (each op's rounding compounds)."""
    closed, points = CLOSED_FORMS[name]
    x = np.array(points, dtype)
    with tfc.Graph().as_default():
        ph = tfc.placeholder(tfc.as_dtype(dtype), [x.size])
        (g,) = tfc.gradients(tfc.reduce_sum(getattr(tfc.math, name)(ph)), [ph])
        with tfc.Session(backend=backend) as sess:
            got = sess.run(g, {ph: x})
    want = closed(x.astype(L)).astype(dtype)
    assert np.isfinite(got).all(), (x, got)
    np.testing.assert_allclose(got, want, rtol=8 * np.finfo(dtype).eps, atol=0)


def test_integers_are_refused_at_the_users_line():
    with tfc.Graph().as_default():
        i = tfc.placeholder(tfc.int32, [2])
        for name in EXACT:
            with pytest.raises(TypeMismatch, match=rf"test_math_composites.py:\d+: {name} "
                                                   r"takes float tensors, got i32\[2\]"):
                getattr(tfc.math, name)(i)


def test_top_level_and_math_names_are_one_function():
    for name in EXACT:
        assert getattr(tfc, name) is getattr(tfc.math, name)
    assert tfc.math.mod is tfc.math.floormod is tfc.floormod
    assert tfc.math.rint is tfc.rint and tfc.math.round is tfc.round


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the branches not taken, masked)
@pytest.mark.parametrize("backend", BACKENDS)
def test_derivatives_at_the_domains_ends_are_infinite_as_tensorflows(backend):
    """acosh'(1) = 1/sqrt(x^2 - 1) = inf and atanh'(+-1) = 1/(1 - x^2) = inf, as TF's
    (not NaN: the compositions avoid 0 * inf in their chain rules there)."""
    with tfc.Graph().as_default():
        a, t = tfc.placeholder(tfc.float64, [2]), tfc.placeholder(tfc.float64, [3])
        ga = tfc.gradients(tfc.reduce_sum(tfc.acosh(a)), [a])[0]
        gt = tfc.gradients(tfc.reduce_sum(tfc.atanh(t)), [t])[0]
        with tfc.Session(backend=backend) as sess:
            va, vt = sess.run([ga, gt], {a: np.array([1.0, 2.0]), t: np.array([1.0, -1.0, 0.5])})
    assert va[0] == np.inf
    np.testing.assert_allclose(va[1], 1 / np.sqrt(3.0), rtol=4e-16)
    np.testing.assert_array_equal(vt[:2], [np.inf, np.inf])
    np.testing.assert_allclose(vt[2], 1 / 0.75, rtol=4e-16)
