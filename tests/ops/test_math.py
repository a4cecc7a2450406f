"""Element-wise ops (tfc.ops.math) against numpy: values, dtypes, broadcasting, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.registry import COMMUTATIVE, ELEMENTWISE, PURE, Cost, lookup
from tfc.ir.types import DType, TensorType
from tfc.testing import exact_math, infer_op as infer, run_op1, ulp_errors

FLOATS = [np.float32, np.float64]
INTS = [np.int32, np.int64]
RTOL = {np.float32: 1e-6, np.float64: 1e-12}



def T(*shape, dtype: DType = DType.f32) -> TensorType:
    return TensorType(dtype, shape)


def sample(shape: tuple, dtype, lo: float = -3.0, hi: float = 3.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def check(out: np.ndarray, want: np.ndarray, dtype) -> None:
    want = np.asarray(want)
    assert out.dtype == want.dtype and out.shape == want.shape
    if np.issubdtype(out.dtype, np.floating):
        np.testing.assert_allclose(out, want, rtol=RTOL[dtype], atol=0)
    else:
        np.testing.assert_array_equal(out, want)


SHAPES = [(), (0,), (5,), (3, 4), (2, 1, 3)]


def _scalar_f64(fn, x: np.ndarray) -> np.ndarray:
    """Python's ``math`` function element by element in float64, rounded to x's dtype."""
    return np.array([fn(v) for v in x.astype(np.float64).ravel()],
                    np.float64).reshape(x.shape).astype(x.dtype)

# (op, numpy function, input range): numpy in the input's dtype is the expected value.
UNARY_FLOAT = [
    ("neg", np.negative, (-3, 3)), ("abs", np.abs, (-3, 3)), ("exp", np.exp, (-3, 3)),
    ("log", np.log, (0.1, 5)), ("sqrt", np.sqrt, (0, 5)),
    ("rsqrt", lambda x: x.dtype.type(1) / np.sqrt(x), (0.1, 5)), ("square", np.square, (-3, 3)),
    ("tanh", np.tanh, (-3, 3)), ("relu", lambda x: np.maximum(x, 0), (-3, 3)),
    ("sin", np.sin, (-3, 3)), ("cos", np.cos, (-3, 3)), ("floor", np.floor, (-3, 3)),
    ("sign", np.sign, (-3, 3)), ("identity", lambda x: x, (-3, 3)),
    ("log1p", np.log1p, (-0.99, 5)), ("expm1", np.expm1, (-3, 3)),
    ("softplus", lambda x: np.logaddexp(x.dtype.type(0), x), (-20, 20)),
    ("tan", np.tan, (-1.5, 1.5)), ("atan", np.arctan, (-5, 5)),
    ("asin", np.arcsin, (-1, 1)), ("acos", np.arccos, (-1, 1)),
    ("erf", lambda x: _scalar_f64(math.erf, x), (-4, 4)),
    ("erfc", lambda x: _scalar_f64(math.erfc, x), (-3, 9)),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name,fn,rng", UNARY_FLOAT, ids=[u[0] for u in UNARY_FLOAT])
def test_unary_float_matches_numpy(name, fn, rng, shape, dtype):
    x = sample(shape, dtype, *rng)
    check(run_op1(name, x), fn(x), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sigmoid_matches_logistic(dtype):
    x = np.linspace(-30, 30, 121).astype(dtype)
    want = 1 / (1 + np.exp(-x.astype(np.float64)))
    out = run_op1("sigmoid", x)
    assert out.dtype == dtype
    eps = float(np.finfo(dtype).eps)
    np.testing.assert_allclose(out, want, rtol=0, atol=eps)
    mid = x > -5
    np.testing.assert_allclose(out[mid], want[mid], rtol=10 * eps, atol=0)


def test_sigmoid_lower_tail_keeps_relative_precision():
    x = np.array([-10, -20, -30], np.float32)
    want = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(run_op1("sigmoid", x), want, rtol=1e-6)


def test_sigmoid_tails_do_not_overflow():
    with np.errstate(all="raise"):
        out = run_op1("sigmoid", np.array([-1000, 1000], np.float32))
    np.testing.assert_array_equal(out, [0, 1])


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("name,fn", [("neg", np.negative), ("abs", np.abs),
                                     ("square", np.square), ("sign", np.sign),
                                     ("relu", lambda x: np.maximum(x, 0))])
def test_unary_int_matches_numpy(name, fn, dtype):
    x = sample((4, 3), dtype)
    check(run_op1(name, x), fn(x), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_log1p_expm1_keep_tiny_values(dtype):
    """log1p(x) = expm1(x) = x below half an ulp of 1 (where log(1 + x) and exp(x) - 1
    give 0), -0.0 and subnormals included; log1p(-1) = -inf, below -1 NaN;
    expm1(-inf) = -1, expm1(inf) = inf."""
    fi = np.finfo(dtype)
    x = np.array([1e-30, -1e-30, fi.smallest_subnormal, -0.0, 0.0], dtype)
    for name in ("log1p", "expm1"):
        out = run_op1(name, x)
        assert np.array_equal(out, x) and np.array_equal(np.signbit(out), np.signbit(x))
    x = np.array([1e-5, -1e-5, 2e-6], dtype)  # the series to x^4: 1e-20 relative error
    np.testing.assert_allclose(run_op1("log1p", x), x - x**2 / 2 + x**3 / 3 - x**4 / 4,
                               rtol=2 * fi.eps)
    np.testing.assert_allclose(run_op1("expm1", x), x + x**2 / 2 + x**3 / 6 + x**4 / 24,
                               rtol=2 * fi.eps)
    with np.errstate(all="ignore"):
        out = run_op1("log1p", np.array([-1, -2, np.inf, np.nan], dtype))
        assert np.isneginf(out[0]) and np.isnan(out[1]) and np.isposinf(out[2])
        assert np.isnan(out[3])
        out = run_op1("expm1", np.array([-np.inf, np.inf, -100, 1000, np.nan], dtype))
    assert list(out[:4]) == [-1, np.inf, -1, np.inf] and np.isnan(out[4])


@pytest.mark.parametrize("dtype", FLOATS + [np.float16])
def test_softplus_is_exact_at_large_magnitudes_and_never_overflows(dtype):
    """softplus(x) = x above ~17 (f32) and e^x below: max(x, 0) + log1p(e^-|x|), where the
    naive log(1 + e^x) overflows to inf and underflows to 0. f16 is computed in f32 and
    rounded once."""
    fi = np.finfo(dtype)
    x = np.array([fi.max, 1000 if dtype is not np.float16 else 60000, 30, -30, -80, -np.inf,
                  np.inf, np.nan], dtype)
    with np.errstate(over="raise", invalid="raise"):
        out = run_op1("softplus", x[:-1])
    assert out.dtype == dtype
    want = np.logaddexp(0, x[:-1].astype(np.float64))
    np.testing.assert_allclose(out, want.astype(dtype), rtol=fi.eps, atol=0)
    assert out[0] == fi.max and out[-2] == 0 and out[-1] == np.inf
    assert np.isnan(run_op1("softplus", x[-1:]))[0]
    if dtype is np.float16:  # rounded once from f32 (not step by step): within 0.5001 ulp
        from tfc.testing import exact_math, ulp_errors
        h = np.arange(65536, dtype=np.uint16).view(np.float16)
        assert ulp_errors(run_op1("softplus", h), exact_math("softplus", h)).max() <= 0.5001


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "tanh", "sigmoid", "floor", "log1p",
                                  "expm1", "softplus"])
def test_float_only_unary_rejects_ints(name):
    with pytest.raises(TypeMismatch, match=f"{name}: input has dtype i32"):
        infer(name, T(3, dtype=DType.i32))


def test_unary_types_keep_symbols():
    assert infer("exp", T("B", 3)) == [T("B", 3)]
    assert infer("logical_not", T("B", dtype=DType.bool)) == [T("B", dtype=DType.bool)]
    with pytest.raises(TypeMismatch, match="neg: input has dtype bool"):
        infer("neg", T(2, dtype=DType.bool))


BINARY = [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
          ("maximum", np.maximum), ("minimum", np.minimum)]
BROADCASTS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)), ((0, 3), (3,)),
              ((2, 1, 3), (4, 1))]


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("sa,sb", BROADCASTS)
@pytest.mark.parametrize("name,fn", BINARY, ids=[b[0] for b in BINARY])
def test_binary_matches_numpy(name, fn, sa, sb, dtype):
    a, b = sample(sa, dtype, seed=1), sample(sb, dtype, seed=2)
    check(run_op1(name, a, b), fn(a, b), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("sa,sb", BROADCASTS)
def test_float_div_and_pow_match_numpy(sa, sb, dtype):
    a, b = sample(sa, dtype, 0.5, 3, seed=1), sample(sb, dtype, -2, 2, seed=2)
    b[np.abs(b) < 0.1] = 1
    check(run_op1("div", a, b), np.true_divide(a, b), dtype)
    check(run_op1("pow", a, b), np.power(a, b), dtype)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_float_division_by_zero_is_ieee():
    out = run_op1("div", np.array([1, -1, 0], np.float32), np.zeros(3, np.float32))
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2])


@pytest.mark.parametrize("dtype", INTS)
def test_integer_division_floors(dtype):
    a = np.array([7, -7, 7, -7, 0, 6], dtype)
    b = np.array([2, 2, -2, -2, 3, 3], dtype)
    check(run_op1("div", a, b), np.array([3, -4, -4, 3, 0, 2], dtype), dtype)
    check(run_op1("div", a, b), a // b, dtype)


def test_integer_division_by_zero_is_an_execution_error():
    with pytest.raises(ExecutionError, match="div failed: integer division by zero"):
        run_op1("div", np.array([1, 2], np.int32), np.array([1, 0], np.int32))


@pytest.mark.parametrize("dtype", INTS)
def test_integer_pow(dtype):
    a, b = np.array([2, -3, 5], dtype), np.array([3, 2, 0], dtype)
    check(run_op1("pow", a, b), np.array([8, 9, 1], dtype), dtype)
    with pytest.raises(ExecutionError, match="negative exponent"):
        run_op1("pow", a, np.array([1, -1, 0], dtype))


COMPARE = [("greater", np.greater), ("less", np.less), ("greater_equal", np.greater_equal),
           ("less_equal", np.less_equal), ("equal", np.equal), ("not_equal", np.not_equal)]


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("name,fn", COMPARE, ids=[c[0] for c in COMPARE])
def test_comparisons_give_bool(name, fn, dtype):
    a, b = sample((3, 4), dtype, seed=3), sample((4,), dtype, seed=4)
    a[0, :] = b   # some ties
    out = run_op1(name, a, b)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, fn(a, b))
    assert infer(name, T("B", 4, dtype=DType.from_numpy(dtype)),
                 T(4, dtype=DType.from_numpy(dtype))) == [T("B", 4, dtype=DType.bool)]


def test_comparisons_and_logic_on_bool():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    np.testing.assert_array_equal(run_op1("equal", a, b), a == b)
    np.testing.assert_array_equal(run_op1("logical_and", a, b), a & b)
    np.testing.assert_array_equal(run_op1("logical_or", a, b), a | b)
    np.testing.assert_array_equal(run_op1("logical_not", a), ~a)
    with pytest.raises(TypeMismatch, match="logical_and: input has dtype f32"):
        infer("logical_and", T(2), T(2))


@pytest.mark.parametrize("a,b,want", [
    (("B", 3), (3,), ("B", 3)),
    (("B", 1), (1, "C"), ("B", "C")),
    (("B",), ("B",), ("B",)),
    (("B",), ("C",), ("?",)),
    (("B",), (5,), (5,)),
    (("B", 1), (4,), ("B", 4)),
    (("?", 3), ("B", 1), ("B", 3)),
    ((), ("B", 2), ("B", 2)),
])
def test_broadcasting_with_symbols(a, b, want):
    assert infer("add", T(*a), T(*b)) == [T(*want)]
    assert infer("add", T(*b), T(*a)) == [T(*want)]


def test_binary_shape_error_names_both_shapes():
    with pytest.raises(TypeMismatch, match=r"add: shapes f32\[B,3\] and f32\[4\] do not broadcast"):
        infer("add", T("B", 3), T(4))
    with pytest.raises(TypeMismatch, match=r"mul: shapes f32\[2,3\] and f32\[3,2\]"):
        infer("mul", T(2, 3), T(3, 2))


def test_binary_needs_equal_dtypes():
    with pytest.raises(TypeMismatch, match=r"add: inputs have different dtypes: f32\[3\] and "
                                           r"f64\[3\]"):
        infer("add", T(3), T(3, dtype=DType.f64))
    with pytest.raises(TypeMismatch, match="sub: input has dtype bool"):
        infer("sub", T(3, dtype=DType.bool), T(3, dtype=DType.bool))


def test_binary_arity():
    with pytest.raises(TypeMismatch, match="add takes 2 inputs, got 1"):
        infer("add", T(3))


def test_traits_and_costs():
    assert lookup("add").has(COMMUTATIVE) and lookup("mul").has(COMMUTATIVE)
    assert not lookup("sub").has(COMMUTATIVE) and not lookup("div").has(COMMUTATIVE)
    for name in ("add", "exp", "where", "cast", "greater"):
        assert lookup(name).has(PURE) and lookup(name).has(ELEMENTWISE)
    c = lookup("exp").cost([T(10)], [T(10)], {})
    assert c == Cost(100, 80)
    assert lookup("add").cost([T("B", 4), T(4)], [T("B", 4)], {}, symbol_size=8) == \
        Cost(32, 128 + 16 + 128)
    assert lookup("identity").cost([T(10)], [T(10)], {}).flops == 0


@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_])
def test_where(dtype):
    c = np.array([[True, False, True]])
    x = np.ones((2, 3), dtype)
    y = np.zeros((1,), dtype)
    out = run_op1("where", c, x, y)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, np.where(c, x, y))
    assert infer("where", T("B", 1, dtype=DType.bool), T(3), T("B", 3)) == [T("B", 3)]


def test_where_errors():
    with pytest.raises(TypeMismatch, match="where: condition has dtype f32"):
        infer("where", T(3), T(3), T(3))
    with pytest.raises(TypeMismatch, match=r"f32\[2\] and f32\[3\] do not broadcast"):
        infer("where", T(2, dtype=DType.bool), T(2), T(3))


@pytest.mark.parametrize("src,dst,vals,want", [
    (np.float32, DType.i32, [-2.7, 2.7, 0.5, -0.5], [-2, 2, 0, 0]),
    (np.float64, DType.i64, [1e10, -3.9], [10000000000, -3]),
    (np.int32, DType.f32, [1, -5], [1.0, -5.0]),
    (np.float32, DType.bool, [0.0, 2.0, -0.1], [False, True, True]),
    (np.bool_, DType.f32, [True, False], [1.0, 0.0]),
    (np.float64, DType.f16, [1.5, 65504.0], [1.5, 65504.0]),
    (np.int64, DType.i32, [7, -7], [7, -7]),
])
def test_cast(src, dst, vals, want):
    out = run_op1("cast", np.array(vals, src), dtype=dst)
    assert out.dtype == dst.np
    np.testing.assert_array_equal(out, np.array(want, dst.np))
    assert infer("cast", T("B", dtype=DType.from_numpy(src)), dtype=dst) == [T("B", dtype=dst)]


def test_identity_copies():
    x = np.arange(3, dtype=np.float32)
    out = run_op1("identity", x)
    out[0] = 5
    assert x[0] == 0


# ---- tan, atan, asin, acos, atan2, erf, erfc (tfc/ops/math_special.py) ------------------

@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_erf_erfc_reference_within_an_ulp(dtype):
    """The reference's erf/erfc (the C library's, in float64, rounded once) close to the
    exact value (``tfc.testing.exact_math``, x87 extended precision) from tiny arguments
    to erfc's underflow (f64: 26.5, subnormal results; f32: 10): f16/f32 correctly
    rounded but for the f64 error (0.5001 ulp); f64 within 2.5 ulp (glibc's erfc is 2.22
    ulp off at 1.3262633103921, measured; its erf within 1); -0.0 kept,
    erf(+-inf) = +-1, erfc(inf) = 0, erfc(-inf) = 2, NaN in, NaN out."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-6, 6, 4000), rng.uniform(0, 27.5, 4000),
                        np.exp(rng.uniform(-40, 2, 2000)) * rng.choice([-1, 1], 2000),
                        [0.0, -0.0, 1e-310, np.inf, -np.inf, np.nan]]).astype(dtype)
    for name in ("erf", "erfc"):
        got = run_op1(name, x)
        assert got.dtype == dtype
        err = ulp_errors(got, exact_math(name, x))
        k = int(np.argmax(err))
        bound = 2.5 if (name, dtype) == ("erfc", np.float64) else \
            1.0 if dtype == np.float64 else 0.5001
        assert err[k] <= bound, (name, x[k], got[k], err[k])
    erf = run_op1("erf", x[-6:])
    assert np.signbit(erf[1]) and not np.signbit(erf[0])
    np.testing.assert_array_equal(erf[3:], [1, -1, np.nan])
    np.testing.assert_array_equal(run_op1("erfc", x[-3:]), [0, 2, np.nan])


def test_atan2_c_special_values():
    """atan2(y, x) as C's (numpy's): the sign of a zero y kept, x = -0.0 counts as
    negative (atan2(+-0, -0) = +-pi), infinities give the multiples of pi/4."""
    inf, pi = np.inf, np.pi
    y = np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, inf, inf, -inf, 1.0, 1.0, np.nan])
    x = np.array([0.0, 0.0, -0.0, -0.0, inf, -inf, inf, -inf, 1.0, 0.0, -0.0, 1.0])
    want = [0.0, -0.0, pi, -pi, 0.0, -pi, pi / 4, 3 * pi / 4, -pi / 2, pi / 2, pi / 2, np.nan]
    got = run_op1("atan2", y, x)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got[:4]), [False, True, False, True])
    with pytest.raises(TypeMismatch):
        infer("atan2", T(3), T(3, dtype=DType.i32))
    with pytest.raises(TypeMismatch):
        infer("atan", T(3, dtype=DType.i32))


def test_atan2_broadcasts():
    y, x = sample((2, 3), np.float32, seed=1), sample((3,), np.float32, seed=2)
    check(run_op1("atan2", y, x), np.arctan2(y, x), np.float32)
