"""ceil, round, reciprocal, is_nan/is_inf/is_finite, floordiv, floormod,
squared_difference, logical_xor (tfc.ops.math): TensorFlow's values at the cases where
its rules and numpy's differ (floor(x / y) against numpy's floor_divide, fmod's sign of
zero), on the reference and the llvm backend; their types, errors and gradients (finite
differences, rtol = atol = 1e-8 in float64 as tests/ops/test_math_grad.py; TF's None where
TF has no gradient).

The expected values were checked against TensorFlow 2.21 (tools/conformance_tf.py runs the
same comparisons against TF itself)."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.registry import COMMUTATIVE, lookup
from tfc.ir.types import DType, TensorType
from tfc.testing import check_gradients, infer_op1, run_op1

BACKENDS = ["reference", "llvm"]
FLOATS = [np.float32, np.float64]
INTS = [np.int32, np.int64]
NAN, INF = np.nan, np.inf


def run(backend: str, fn, *arrays: np.ndarray) -> np.ndarray:
    """``fn(*placeholders)`` run on ``backend``."""
    with tfc.Graph().as_default():
        phs = [tfc.placeholder(tfc.as_dtype(a.dtype), list(a.shape)) for a in arrays]
        out = fn(*phs)
        with tfc.Session(backend=backend) as sess:
            return sess.run(out, dict(zip(phs, arrays)))


def same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values and dtype, NaN as NaN (of either sign), the sign of zero included."""
    want = np.asarray(want, got.dtype)
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind == "f":
        num = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS + [np.float16])
def test_ceil_and_round_half_to_even(backend, dtype):
    """round is TF's (ties to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -2.5 -> -2), not C's
    round (ties away); -0.5 rounds to -0.0 and ceil(-0.5) is -0.0; inf and NaN kept."""
    x = np.array([-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 2.51, -1e-3, 1e4 + 0.5, INF,
                  -INF, NAN], dtype)
    same(run(backend, tfc.round, x),
         [-2, -2, -0.0, -0.0, 0, 0, 2, 2, 3, -0.0, 1e4, INF, -INF, NAN])
    same(run(backend, tfc.math.rint, x), np.rint(x))
    same(run(backend, tfc.ceil, x),
         [-2, -1, -0.0, -0.0, 0, 1, 2, 3, 3, -0.0, 1e4 + 1, INF, -INF, NAN])
    i = np.array([-3, 0, 7], np.int32)
    same(run(backend, tfc.round, i), i)  # integers unchanged, as TF


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_reciprocal_and_the_no_nan_divisions(backend, dtype):
    x = np.array([2.0, -4.0, 0.0, -0.0, INF, NAN, 3.0], dtype)
    same(run(backend, tfc.math.reciprocal, x), [0.5, -0.25, INF, -INF, 0.0, NAN, 1 / dtype(3)])
    same(run(backend, tfc.math.reciprocal_no_nan, x), [0.5, -0.25, 0, 0, 0, NAN, 1 / dtype(3)])
    y = np.array([4.0, 2.0, 0.0, -0.0, 1.0, 0.0, 0.0], dtype)
    same(run(backend, tfc.math.divide_no_nan, x, y), [0.5, -2.0, 0, 0, INF, 0, 0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS + [np.float16])
def test_predicates_are_bool(backend, dtype):
    big = np.finfo(dtype).max
    x = np.array([0.0, -0.0, 1.0, big, -big, INF, -INF, NAN, -NAN], dtype)
    got = run(backend, lambda a: (tfc.is_nan(a), tfc.is_inf(a), tfc.math.is_finite(a)), x)
    assert all(g.dtype == np.bool_ for g in got)
    same(got[0], [0, 0, 0, 0, 0, 0, 0, 1, 1])
    same(got[1], [0, 0, 0, 0, 0, 1, 1, 0, 0])
    same(got[2], [1, 1, 1, 1, 1, 0, 0, 0, 0])


def test_predicates_take_floats_at_the_users_line():
    with tfc.Graph().as_default():
        i = tfc.placeholder(tfc.int32, [3])
        for fn in (tfc.is_nan, tfc.is_inf, tfc.is_finite, tfc.ceil, tfc.reciprocal):
            with pytest.raises(TypeMismatch, match=r"test_math_simple.py:\d+: .*dtype i32"):
                fn(i)
    assert infer_op1("is_nan", TensorType(DType.f16, ("B", 3))) == TensorType(DType.bool,
                                                                                ("B", 3))


# (x, y, x // y, x % y): TF's FloorDiv is floor(x / y) on floats (numpy's floor_divide
# gives 9 for 1 // 0.1, TF 10); FloorMod is fmod(x, y), plus y where the signs differ, so a
# zero keeps x's sign (-4 % 2 is -0.0; numpy's remainder gives +0.0).
FLOAT_CASES = [
    (7.0, 3.0, 2.0, 1.0), (-7.0, 3.0, -3.0, 2.0), (7.0, -3.0, -3.0, -2.0),
    (-7.0, -3.0, 2.0, -1.0), (1.0, 0.1, 10.0, 0.1 - 0.0), (-4.0, 2.0, -2.0, -0.0),
    (4.0, -2.0, -2.0, 0.0), (-0.0, 3.0, -0.0, -0.0), (0.0, -3.0, -0.0, 0.0),
    (5.0, 0.0, INF, NAN), (-5.0, 0.0, -INF, NAN), (0.0, 0.0, NAN, NAN),
    (INF, 2.0, INF, NAN), (7.0, INF, 0.0, 7.0), (-7.0, INF, -0.0, INF),
    (7.0, -INF, -0.0, -INF), (NAN, 2.0, NAN, NAN), (2.0, NAN, NAN, NAN),
    (1e30, 3.0, None, None), (2.5, 0.5, 5.0, 0.0),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_floordiv_and_floormod_on_floats_are_tensorflows(backend, dtype):
    x, y = (np.array([c[i] for c in FLOAT_CASES], dtype) for i in (0, 1))
    with np.errstate(all="ignore"):
        quotient = np.floor(x / y)
        t = np.fmod(x, y)
    want_q = [quotient[k] if c[2] is None else c[2] for k, c in enumerate(FLOAT_CASES)]
    want_m = [t[k] if c[3] is None else c[3] for k, c in enumerate(FLOAT_CASES)]
    want_m[4] = np.fmod(dtype(1.0), dtype(0.1))  # (0.1 is not exact: fmod's exact result)
    got_q, got_m, got_ops = run(backend, lambda a, b: (tfc.floordiv(a, b), tfc.math.floormod(a, b),
                                                       (a // b, a % b)), x, y)
    same(got_q, want_q)
    same(got_m, want_m)
    same(got_ops[0], want_q)
    same(got_ops[1], want_m)
    assert got_q[4] == 10 and np.floor_divide(x[4], y[4]) == 9  # TF, not numpy


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", INTS)
def test_floordiv_and_floormod_on_integers_are_pythons(backend, dtype):
    lo = np.iinfo(dtype).min
    pairs = [(7, 3), (-7, 3), (7, -3), (-7, -3), (0, -5), (6, 3), (-6, 3), (lo, -1),
             (lo, 3), (lo + 1, lo), (5, lo)]
    x, y = (np.array([p[i] for p in pairs], dtype) for i in (0, 1))
    with np.errstate(over="ignore"):
        want_q = [lo if (a, b) == (lo, -1) else int(a) // int(b) for a, b in pairs]
    want_m = [int(a) % int(b) for a, b in pairs]
    q, m, r = run(backend, lambda a, b: (a // b, tfc.mod(a, b), 10 % b), x, y)
    same(q, want_q)
    same(m, want_m)
    same(r, [10 % int(b) for b in y])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_truncatediv_and_truncatemod_round_toward_zero(backend, dtype):
    """C's / and % (TF's TruncateDiv/TruncateMod): the remainder has the dividend's sign;
    floats trunc(x / y) and fmod; MIN / -1 wraps to MIN, MIN % -1 is 0."""
    x = np.array([7, -7, 7, -7, 6, 0], dtype)
    y = np.array([2, 2, -2, -2, -3, -5], dtype)
    q, m = run(backend, lambda a, b: (tfc.truncatediv(a, b), tfc.truncatemod(a, b)), x, y)
    same(q, [3, -3, -3, 3, -2, -0.0])  # (0 / -5 is -0.0 in floats)
    same(m, [1, -1, 1, -1, 0, 0])
    if np.issubdtype(dtype, np.integer):
        lo = np.iinfo(dtype).min
        x, y = np.array([lo, lo, lo + 1], dtype), np.array([-1, 7, lo], dtype)
        q, m = run(backend, lambda a, b: (tfc.truncatediv(a, b), tfc.truncatemod(a, b)), x, y)
        same(q, [lo, -(-int(lo) // 7), 0])
        same(m, [0, -(-int(lo) % 7), lo + 1])
    else:
        x = np.array([-4.0, 1.0, 5.0, np.inf, 7.5], dtype)
        y = np.array([2.0, 0.1, 0.0, 2.0, np.inf], dtype)
        q, m = run(backend, lambda a, b: (tfc.truncatediv(a, b), tfc.truncatemod(a, b)), x, y)
        same(q, [-2.0, 10.0, np.inf, np.inf, 0.0])
        same(m, [-0.0, np.fmod(dtype(1.0), dtype(0.1)), np.nan, np.nan, 7.5])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", [tfc.floordiv, tfc.floormod, tfc.truncatediv, tfc.truncatemod])
def test_integer_zero_divisor_fails_the_run(backend, op):
    """As div on integers (and TF's "Integer division by zero"): an ExecutionError naming
    the op, never a crash or a silent value."""
    x = np.array([1, 2, 3], np.int32)
    with pytest.raises(ExecutionError, match="integer division by zero"):
        run(backend, op, x, np.array([1, 0, 2], np.int32))


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_squared_difference(dtype):
    x = np.array([3, -2, 5, 0], dtype)
    y = np.array([1, 4, 5, -7], dtype)
    for backend in BACKENDS:
        same(run(backend, tfc.squared_difference, x, y), [4, 36, 0, 49])
    if np.issubdtype(dtype, np.floating):
        h = np.array([100.0, 0.1], np.float16)
        g = np.array([-24.0, 0.7], np.float16)  # the difference rounded to half, then squared
        d = (h - g).astype(np.float16)
        same(run("llvm", tfc.squared_difference, h, g), (d * d).astype(np.float16))


def test_logical_xor_and_the_operator():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    for backend in BACKENDS:
        same(np.array(run(backend, lambda x, y: (tfc.logical_xor(x, y), x ^ y, x ^ True), a, b)),
             [[False, True, True, False]] * 2 + [[False, False, True, True]])
    assert lookup("logical_xor").has(COMMUTATIVE)


# ---- gradients ------------------------------------------------------------------------

rng = np.random.default_rng(0)


def away_from_zero(*shape: int) -> np.ndarray:
    return rng.uniform(0.3, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


@pytest.mark.parametrize("order", [1, 2])
def test_reciprocal_gradient(order):
    check_gradients("reciprocal", away_from_zero(2, 3), order=order, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((), (2,))])
def test_squared_difference_and_floormod_gradients(order, shapes):
    """floormod away from its jumps (x / y not near an integer): dx = dz, dy = -floor(x/y)
    dz (TF's); squared_difference 2(x - y), -2(x - y) (TF's)."""
    a, b = away_from_zero(*shapes[0]), away_from_zero(*shapes[1])
    check_gradients("squared_difference", a, b, order=order, rtol=1e-8, atol=1e-8)
    x = np.floor(a * 3) * b + b * 0.5 if shapes[0] == shapes[1] else None
    if x is not None:  # x / y = integer + 0.5: half a step from either jump
        check_gradients("floormod", x, b, order=order, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("backend", BACKENDS)
def test_floormod_gradient_is_tensorflows(backend):
    x = np.array([7.0, -7.0, 7.5, -4.0], np.float64)
    y = np.array([3.0, 3.0, -2.0, 2.0], np.float64)
    with tfc.Graph().as_default():
        a, b = tfc.placeholder(tfc.float64, [4]), tfc.placeholder(tfc.float64, [4])
        gx, gy = tfc.gradients(tfc.reduce_sum(a % b), [a, b])
        with tfc.Session(backend=backend) as sess:
            vx, vy = sess.run([gx, gy], {a: x, b: y})
    same(vx, np.ones(4))
    same(vy, -np.floor(x / y))


def test_piecewise_constant_ops_have_no_gradient_as_in_tensorflow():
    """TF registers None for Ceil, Round and FloorDiv (and so does tfc for floor)."""
    with tfc.Graph().as_default():
        a = tfc.placeholder(tfc.float32, [3])
        for fn in (tfc.ceil, tfc.round, lambda v: tfc.floordiv(v, 2.0)):
            assert tfc.gradients(tfc.reduce_sum(fn(a)), [a]) == [None]
        assert tfc.gradients(tfc.reduce_sum(tfc.ceil(a) + a * 2.0), [a])[0] is not None
    for name in ("ceil", "round", "floordiv", "is_nan", "is_inf", "is_finite", "logical_xor",
                 "truncatediv", "truncatemod"):
        assert not lookup(name).differentiable, name


def test_reference_matches_numpy_where_numpy_is_tensorflow():
    """Integers: floormod is numpy's remainder; floats away from the zero-sign and
    floor_divide cases, numpy's remainder too."""
    rs = np.random.default_rng(3)
    x = rs.integers(-50, 50, 200).astype(np.int64)
    y = rs.integers(1, 9, 200).astype(np.int64) * rs.choice([-1, 1], 200)
    same(run_op1("floormod", x, y), np.remainder(x, y))
    same(run_op1("floordiv", x, y), np.floor_divide(x, y))
    xf, yf = x.astype(np.float64) + 0.25, y.astype(np.float64)
    same(run_op1("floormod", xf, yf), np.remainder(xf, yf))
