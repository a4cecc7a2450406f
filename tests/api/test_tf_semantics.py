"""Regression tests for divergences from TensorFlow found by tools/conformance_tf.py.

Each expected value is written from TensorFlow's documented semantics (checked against
TensorFlow 2.21 when the tool found the divergence) and checked on both backends, so the
suite needs no TensorFlow.
"""

import numpy as np
import pytest

import tfc

BACKENDS = ["llvm", "reference"]


def run(backend: str, fetches, feed=None):
    with tfc.Session(backend=backend) as sess:
        return sess.run(fetches, feed or {})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [tfc.int32, tfc.int64])
def test_divide_of_integers_is_float64_true_division(backend, dtype):
    # tf.divide and `/` on int32/int64 cast both operands to float64 (TF's truediv):
    # 7 / 2 is 3.5, -7 / 2 is -3.5, 1 / 0 is inf, 0 / 0 is nan; `//` stays floor division.
    npdt = np.int32 if dtype is tfc.int32 else np.int64
    x = tfc.placeholder(dtype, [6])
    y = tfc.placeholder(dtype, [6])
    xs = np.array([7, -7, 1, -1, 0, np.iinfo(npdt).max], npdt)
    ys = np.array([2, 2, 0, 0, 0, 3], npdt)
    fetches = [tfc.divide(x, y), x / y, 1 / y, x / 4]
    for f in fetches:
        assert f.dtype is tfc.float64
    quot, slash, rdiv, by4 = run(backend, fetches, {x: xs, y: ys})
    with np.errstate(divide="ignore", invalid="ignore"):
        want = xs.astype(np.float64) / ys.astype(np.float64)
        want_r = 1.0 / ys.astype(np.float64)
    np.testing.assert_array_equal(quot, want)  # bitwise: one correctly rounded division
    np.testing.assert_array_equal(slash, want)
    np.testing.assert_array_equal(rdiv, want_r)
    np.testing.assert_array_equal(by4, xs.astype(np.float64) / 4)
    assert quot[0] == 3.5 and quot[1] == -3.5 and np.isposinf(quot[2]) and np.isnan(quot[4])
    floor = run(backend, x // np.array(2, npdt), {x: xs})
    np.testing.assert_array_equal(floor, xs // 2)
    assert floor.dtype == npdt


@pytest.mark.parametrize("backend", BACKENDS)
def test_divide_of_floats_keeps_their_dtype(backend):
    x = tfc.placeholder(tfc.float32, [3])
    q = tfc.divide(x, 2.0)
    assert q.dtype is tfc.float32
    np.testing.assert_array_equal(run(backend, q, {x: np.array([1, -3, 5], np.float32)}),
                                  np.array([0.5, -1.5, 2.5], np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [tfc.int32, tfc.int64])
def test_reduce_mean_of_integers_truncates_like_tensorflow(backend, dtype):
    # tf.reduce_mean of integers: the sum over the count, truncated toward zero, in the
    # input's dtype (an int32 sum past 2**31 does not wrap); 0 for an empty mean. tfc raised
    # TypeMismatch ("mean: input has dtype i32, expected one of f16, f32, f64").
    npdt = np.int32 if dtype is tfc.int32 else np.int64
    x = tfc.placeholder(dtype, ["B", 3])  # (a symbolic dim: the count comes at run time)
    e = tfc.placeholder(dtype, [2, 0])
    big = 2**30
    xs = np.array([[-3, 0, big], [0, big, big]], npdt)
    fetches = [tfc.reduce_mean(x), tfc.reduce_mean(x, 0), tfc.reduce_mean(x, 1, keepdims=True),
               tfc.reduce_mean(x, -1), tfc.reduce_mean(e, 1), tfc.reduce_mean(e)]
    got = run(backend, fetches, {x: xs, e: np.zeros((2, 0), npdt)})
    want = [np.array(536870911),                      # (3 * 2**30 - 3) / 6 = ...911.5
            np.array([-1, big // 2, big]),            # -3 / 2 = -1.5 -> -1, not floor's -2
            np.array([[357913940], [715827882]]),     # (2**30 - 3) / 3, (2**31) / 3
            np.array([357913940, 715827882]),
            np.array([0, 0]), np.array(0)]
    for g, w in zip(got, want):
        assert g.dtype == npdt
        np.testing.assert_array_equal(g, w.astype(npdt))
