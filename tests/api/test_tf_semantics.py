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


@pytest.mark.parametrize("backend", BACKENDS)
def test_fill_takes_the_dtype_of_its_value(backend):
    # tf.fill([2], 7) is int32 (tfc gave float32), 7.0 float32, True bool; an int64 value
    # past 2**53 is exact (tfc rounded it through the op's float attr)
    big = 2**62 + 1
    fetches = [tfc.fill([2], 7), tfc.fill([2], 7.5), tfc.fill([1], True),
               tfc.fill([2], np.int64(3)), tfc.fill([2], big, tfc.int64),
               tfc.fill([2, 2], 2**40), tfc.fill([2], 7, tfc.float64)]
    want = [np.array([7, 7], np.int32), np.array([7.5, 7.5], np.float32), np.array([True]),
            np.array([3, 3], np.int64), np.array([big, big], np.int64),
            np.full((2, 2), 2**40, np.int64), np.array([7, 7], np.float64)]
    for got, w in zip(run(backend, fetches), want):
        assert got.dtype == w.dtype
        np.testing.assert_array_equal(got, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_hot_takes_the_dtype_of_its_values(backend):
    # tf.one_hot(i, 3, on_value=2, off_value=0) is int32 (tfc gave float32); without
    # values, or with float ones, float32; an explicit dtype wins
    i = tfc.placeholder(tfc.int32, [3])
    fetches = [tfc.one_hot(i, 3, on_value=2, off_value=0), tfc.one_hot(i, 3, off_value=-1),
               tfc.one_hot(i, 3), tfc.one_hot(i, 3, on_value=5.0, off_value=-1.0),
               tfc.one_hot(i, 3, dtype=tfc.int64)]
    got = run(backend, fetches, {i: np.array([0, 2, 5], np.int32)})
    eye = np.array([[1, 0, 0], [0, 0, 1], [0, 0, 0]])
    want = [(2 * eye).astype(np.int32), np.where(eye == 1, 1, -1).astype(np.int32),
            eye.astype(np.float32), np.where(eye == 1, 5.0, -1.0).astype(np.float32),
            eye.astype(np.int64)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_clip_by_global_norm_of_an_infinite_norm_is_nan(backend):
    # tf.clip_by_global_norm documents that an infinite global norm makes every entry NaN
    # (to signal the overflow); tfc scaled by 1/inf = 0: [nan, 0.0] and [0.0], silently
    # zeroing the finite gradients. A finite norm still clips as before.
    a = tfc.placeholder(tfc.float32, [2])
    b = tfc.placeholder(tfc.float32, [1])
    (ca, cb), norm = tfc.clip_by_global_norm([a, b], 1.0)
    got = run(backend, [ca, cb, norm], {a: np.array([np.inf, 1], np.float32),
                                        b: np.array([1], np.float32)})
    assert np.isnan(got[0]).all() and np.isnan(got[1]).all() and np.isposinf(got[2])
    got = run(backend, [ca, cb, norm], {a: np.array([3, 0], np.float32),
                                        b: np.array([4], np.float32)})
    np.testing.assert_allclose(got[0], [0.6, 0], rtol=1e-6)
    np.testing.assert_allclose(got[1], [0.8], rtol=1e-6)
    assert got[2] == 5


@pytest.mark.parametrize("begin, size", [([1], [5]), ([4], [-1]), ([-1], [1]), ([0], [-2]),
                                         ([0, 0], [1, 1])])
def test_slice_outside_the_axis_is_an_error(begin, size):
    # tf.slice(x, [1], [5]) of 3 elements raises; tfc clamped it to 2 elements, silently
    x = tfc.placeholder(tfc.float32, [3])
    with pytest.raises(tfc.TfcError, match="slice"):
        tfc.slice(x, begin, size)


@pytest.mark.parametrize("backend", BACKENDS)
def test_slice_inside_the_axis(backend):
    x = tfc.placeholder(tfc.float32, [3, "N"])
    xs = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = run(backend, [tfc.slice(x, [1, 1], [2, 2]), tfc.slice(x, [3, 0], [0, -1]),
                        tfc.slice(x, [0, 2], [-1, -1])], {x: xs})
    for g, w in zip(got, [xs[1:3, 1:3], xs[3:, :], xs[:, 2:]]):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zeros_like_and_ones_like_take_a_dtype(backend):
    # tf.zeros_like(x, dtype=tf.int32); tfc had no dtype argument (a TypeError)
    x = tfc.placeholder(tfc.float32, [2])
    y = tfc.placeholder(tfc.float32, ["B", 2])  # (symbolic: the where-based path)
    fetches = [tfc.zeros_like(x, dtype=tfc.int32), tfc.ones_like(x, dtype=tfc.bool),
               tfc.ones_like(y, dtype=tfc.int64), tfc.zeros_like(y), tfc.ones_like(x)]
    got = run(backend, fetches, {x: np.array([np.nan, 1], np.float32),
                                 y: np.full((3, 2), np.nan, np.float32)})
    want = [np.zeros(2, np.int32), np.ones(2, bool), np.ones((3, 2), np.int64),
            np.zeros((3, 2), np.float32), np.ones(2, np.float32)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_division_and_pow_of_an_empty_broadcast_raise_nothing(backend):
    # a zero divisor (or negative exponent) broadcast against an empty operand divides
    # nothing: TF gives the empty result; tfc's reference raised "division by zero"
    x = tfc.placeholder(tfc.int32, [0, 3])
    y = tfc.placeholder(tfc.int32, [1, 3])
    got = run(backend, [x // y, tfc.pow(x, y)], {x: np.zeros((0, 3), np.int32),
                                                 y: np.array([[0, -1, 2]], np.int32)})
    assert [g.shape for g in got] == [(0, 3), (0, 3)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_pow_with_a_negative_exponent_says_so(backend):
    # (TF: "Integers to negative integer powers are not allowed"); tfc's llvm backend said
    # "integer division by zero"
    x = tfc.placeholder(tfc.int32, [3])
    with pytest.raises(tfc.errors.ExecutionError, match="negative exponent"):
        run(backend, tfc.pow(x, np.array([1, -1, 2], np.int32)),
            {x: np.array([2, 2, 2], np.int32)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_takes_tf1_keep_prob(backend):
    # TF1 code says tf.nn.dropout(x, keep_prob=0.75): keep 75% (tfc had no keep_prob: a
    # TypeError); the same mask as rate=0.25 with the same seed
    x = tfc.placeholder(tfc.float32, [4000])
    kept, dropped = tfc.nn.dropout(x, keep_prob=0.75, seed=3), tfc.nn.dropout(x, 0.25, seed=3)
    a, b = run(backend, [kept, dropped], {x: np.ones(4000, np.float32)})
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((a == 0).mean() - 0.25) < 0.03  # 4000 draws: sd 0.007
    assert tfc.nn.dropout(x, keep_prob=1.0) is x
    for bad in [dict(), dict(rate=0.5, keep_prob=0.5), dict(keep_prob=0.0)]:
        with pytest.raises(tfc.TfcError, match="dropout"):
            tfc.nn.dropout(x, **bad)
