"""Gradients of element-wise and reduction ops against central finite differences.

Inputs are float64 at random points away from kinks (|x| > 0.2 for abs/relu, x > 0 for
log/sqrt/pow); tolerance rtol 1e-8, atol 1e-8 for central differences with eps 1e-6
(measured worst case: 7e-9 absolute, 4e-9 relative).
"""

import math

import numpy as np
import pytest

from tfc.ir.types import DType
from tfc.testing import check_gradients

RTOL, ATOL = 1e-8, 1e-8
rng = np.random.default_rng(0)


def away_from_zero(*shape):
    x = rng.uniform(0.2, 2.0, shape)
    return x * rng.choice([-1.0, 1.0], shape)


def positive(*shape):
    return rng.uniform(0.5, 2.0, shape)


def above_minus_one(*shape):
    return rng.uniform(-0.8, 2.0, shape)


def anywhere(*shape):
    return rng.uniform(-3.0, 3.0, shape)


def inside_unit(*shape):
    return rng.uniform(-0.9, 0.9, shape)


def inside_poles(*shape):
    return rng.uniform(-1.3, 1.3, shape)


UNARY = {
    "tan": inside_poles, "atan": anywhere, "asin": inside_unit, "acos": inside_unit,
    "erf": anywhere, "erfc": anywhere,
    "log1p": above_minus_one, "expm1": anywhere, "softplus": anywhere,
    "neg": away_from_zero, "abs": away_from_zero, "exp": away_from_zero, "log": positive,
    "sqrt": positive, "rsqrt": positive, "square": away_from_zero, "tanh": away_from_zero,
    "sigmoid": away_from_zero, "relu": away_from_zero, "sin": away_from_zero,
    "cos": away_from_zero, "identity": away_from_zero,
}


@pytest.mark.parametrize("kind", sorted(UNARY))
@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_unary(kind, order, shape):
    check_gradients(kind, UNARY[kind](*shape), order=order, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div", "pow", "maximum", "minimum"])
@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((1, 3), (2, 1)),
                                    ((), (2,))])
def test_binary_with_broadcasting(kind, order, shapes):
    a, b = positive(*shapes[0]), positive(*shapes[1])
    if kind in ("maximum", "minimum"):
        b = b + 0.05  # no ties: the gradient is not defined there
    check_gradients(kind, a, b, order=order, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((), (2,))])
def test_atan2(order, shapes):
    """d atan2(y, x) = (x dy - y dx) / (x^2 + y^2), in every quadrant (away from 0)."""
    check_gradients("atan2", away_from_zero(*shapes[0]), away_from_zero(*shapes[1]),
                    order=order, rtol=RTOL, atol=ATOL)


def test_where_and_cast():
    c = rng.uniform(size=(2, 3)) > 0.5
    check_gradients("where", c, positive(2, 3), positive(3), rtol=RTOL, atol=ATOL)
    check_gradients("cast", positive(2, 3), dtype=DType.f64,
                    rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kind", ["sum", "mean", "prod", "max", "min"])
@pytest.mark.parametrize("axes,keepdims", [(None, False), ([1], False), ([0], True),
                                           ([-1, 0], False)])
def test_reductions(kind, axes, keepdims):
    x = positive(2, 3)
    check_gradients(kind, x, axes=axes, keepdims=keepdims, rtol=RTOL, atol=ATOL)
    check_gradients(kind, x, axes=axes, keepdims=keepdims, order=2, rtol=RTOL, atol=ATOL)


def test_max_ties_share_the_gradient():
    from tfc.ir.autodiff import gradients
    from tfc.ir.builder import Builder
    from tfc.ir.core import Graph
    from tfc.ir.interpret import ExecContext, run_graph
    from tfc.testing import type_of
    x = np.array([1.0, 3.0, 3.0])
    g = Graph("g")
    a = g.add_arg(type_of(x))
    y = Builder(g)("max", a)
    (dx,) = gradients(g, [y], [a])
    g.set_results([dx])
    np.testing.assert_array_equal(run_graph(g, [x], ExecContext({}))[0], [0.0, 0.5, 0.5])


# ---- TensorFlow's conventions where finite differences see nothing -------------------
# (tools/conformance_tf_grad.py compares every op with TensorFlow; the expected values
# below are written from TensorFlow's gradient rules, so these run without it.)

BACKENDS = ["llvm", "reference"]
FLOATS = [np.float32, np.float64]


def _grads(backend, build, *inputs):
    """Run ``build(*placeholders) -> (y, xs)``'s gradients of sum(y) on ``backend``."""
    import tfc
    with tfc.Graph().as_default():
        phs = [tfc.placeholder(tfc.as_dtype(a.dtype), list(a.shape)) for a in inputs]
        y, xs = build(*phs)
        grads = tfc.gradients(y, xs)
        assert all(g is not None for g in grads)
        with tfc.Session(backend=backend) as sess:
            return sess.run(grads, dict(zip(phs, inputs)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_sign_has_a_zero_gradient_not_none(backend, dtype):
    """TF's _SignGrad returns zeros: x * 2 + sign(x) gets 2, and sign(x) alone gets 0
    (not None, which would make optimizer.minimize call x unconnected)."""
    import tfc
    x = np.array([-1.5, -0.0, 0.0, 2.0], dtype)
    (g,) = _grads(backend, lambda p: (tfc.sign(p), [p]), x)
    assert g.dtype == dtype
    np.testing.assert_array_equal(g, np.zeros(4, dtype))
    (g,) = _grads(backend, lambda p: (p * 2.0 + tfc.sign(p), [p]), x)
    np.testing.assert_array_equal(g, np.full(4, 2.0, dtype))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["sqrt", "rsqrt"])
@pytest.mark.filterwarnings("ignore:.*encountered:RuntimeWarning")  # numpy: sqrt(-1)
def test_sqrt_and_rsqrt_give_zero_where_the_upstream_gradient_is_zero(backend, dtype, kind):
    """TF's SqrtGrad / RsqrtGrad kernels return 0 where dy == 0, so a sqrt in the branch
    where() does not take (x <= 0: y is 0 or NaN, 0 / y is NaN) passes 0, not NaN; with
    dy != 0 the gradient at 0 stays inf (0.5 / 0) as in TF."""
    import tfc
    fn = getattr(tfc, kind)
    x = np.array([-1.0, 0.0, 4.0], dtype)
    (g,) = _grads(backend, lambda p: (tfc.where(tfc.greater(p, 0.0), fn(p), tfc.zeros_like(p)),
                                      [p]), x)
    want = 0.25 if kind == "sqrt" else -0.5 * 4.0 ** -1.5  # exact in binary
    np.testing.assert_array_equal(g, np.array([0.0, 0.0, want], dtype))
    (g,) = _grads(backend, lambda p: (fn(p), [p]), np.array([0.0], dtype))
    np.testing.assert_array_equal(g, [np.inf if kind == "sqrt" else -np.inf])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.filterwarnings("ignore:.*encountered:RuntimeWarning")  # numpy at 0^-1
def test_pow_exponent_gradient_at_a_zero_or_negative_base(backend, dtype):
    """d(x^y)/dy = x^y * log_x with log_x := 0 for x <= 0 (TF's _PowGrad): 0 where x^y is
    finite (0^2, (-2)^2), NaN where it is inf or NaN (0^-1, (-2)^0.5), as in TF."""
    import tfc
    x = np.array([0.0, 0.0, -2.0, -2.0, 2.0], dtype)
    y = np.array([2.0, -1.0, 2.0, 0.5, -1.0], dtype)
    gx, gy = _grads(backend, lambda a, b: (tfc.pow(a, b), [a, b]), x, y)
    want_gy = np.array([0.0, np.nan, 0.0, np.nan, 0.5 * np.log(2.0)], dtype)
    np.testing.assert_allclose(gy, want_gy, rtol=2 * np.finfo(dtype).eps, atol=0)
    # d/dx = y x^(y-1): 0*2=0, -1*0^-2=-inf, 2*-2=-4, NaN, -1*2^-2
    np.testing.assert_array_equal(gx, np.array([0.0, -np.inf, -4.0, np.nan, -0.25], dtype))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_prod_gradient_with_zeros_is_the_product_of_the_others(backend, dtype):
    """d prod / dx_i = the product of the other elements (TF's cumprod-based _ProdGrad):
    one zero -> the nonzero product at it, 0 elsewhere; two zeros -> 0; none -> prod/x_i.
    prod / x_i alone gave 0/0 = NaN at every zero."""
    import tfc
    x = np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 4.0], [1.0, 2.0, 3.0], [-0.0, 5.0, -2.0]], dtype)
    (g,) = _grads(backend, lambda p: (tfc.reduce_prod(p, axis=1), [p]), x)
    np.testing.assert_array_equal(g, np.array(
        [[0, 0, 0], [0, 12, 0], [6, 3, 2], [-10, 0, 0]], dtype))
    (g,) = _grads(backend, lambda p: (tfc.reduce_prod(p, axis=0, keepdims=True), [p]),
                  x[1:3])
    np.testing.assert_array_equal(g, np.array([[1, 2, 3], [3, 0, 4]], dtype))
    (g,) = _grads(backend, lambda p: (tfc.reduce_prod(p), [p]), np.array([2.0, 0.0, 3.0], dtype))
    np.testing.assert_array_equal(g, np.array([0, 6, 0], dtype))


@pytest.mark.parametrize("backend", BACKENDS)
def test_second_derivatives_through_sign_and_prod_at_a_zero(backend):
    """abs' = sign, so abs'' is sign's gradient: zeros (TF), not None. prod's gradient
    differentiated again at a zero: d/dx_j sum_i prod_{k != i} x_k = sum_{i != j}
    prod_{k != i, j} x_k, here [3, 2 + 3, 2] for x = [2, 0, 3]."""
    import tfc
    x = np.array([2.0, 0.0, 3.0])

    def second(f):
        return lambda p: (tfc.gradients(tfc.reduce_sum(f(p)), p)[0], [p])
    (g,) = _grads(backend, second(lambda p: tfc.abs(p) * 3.0), x)
    np.testing.assert_array_equal(g, np.zeros(3))
    (g,) = _grads(backend, second(tfc.reduce_prod), x)
    np.testing.assert_array_equal(g, [3.0, 5.0, 2.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_prod_higher_derivatives_with_two_and_three_zeros(backend):
    """With e_k the elementary symmetric polynomials, sum_i d prod / dx_i = e_3 for 4
    elements, d/dx_j e_3 = e_2(the others) and sum_j of that = 2 e_2, d/dx_m = 2 e_1(the
    others). At [2, 0, 0, 3]: second [0, 6, 6, 0] (only the zeros see 2 * 3), third
    [6, 10, 10, 4]. Three zeros: second 0 everywhere. (TF's cumprod rule gives 0 at the
    zeros.)"""
    import tfc

    def second(p):
        return tfc.gradients(tfc.reduce_prod(p), p)[0], [p]

    def third(p):
        return tfc.gradients(tfc.reduce_sum(second(p)[0]), p)[0], [p]
    (g,) = _grads(backend, second, np.array([2.0, 0.0, 0.0, 3.0]))
    np.testing.assert_array_equal(g, [0.0, 6.0, 6.0, 0.0])
    (g,) = _grads(backend, third, np.array([2.0, 0.0, 0.0, 3.0]))
    np.testing.assert_array_equal(g, [6.0, 10.0, 10.0, 4.0])
    (g,) = _grads(backend, second, np.array([0.0, 0.0, 0.0, 3.0]))
    np.testing.assert_array_equal(g, np.zeros(4))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_sqrt_second_derivative_through_a_zero_upstream_gradient(backend, dtype):
    """f = sum(sqrt(x) (x - 1)): sqrt's upstream gradient x - 1 is 0 at x = 1, yet
    f''(1) = 0.75 x^-0.5 + 0.25 x^-1.5 = 1 needs d(sqrt's gradient)/d(dy) there (TF's
    SqrtGradGrad); 0.40625 at x = 4. Zeroing the gradient where dy == 0 with a plain
    where() would lose it (0.5 at x = 1)."""
    import tfc

    def first(p):
        return tfc.gradients(tfc.reduce_sum(tfc.sqrt(p) * (p - 1.0)), p)[0], [p]
    (g,) = _grads(backend, first, np.array([1.0, 4.0], dtype))
    np.testing.assert_allclose(g, [1.0, 0.40625], rtol=4 * np.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_softplus_gradient_is_sigmoid_everywhere(backend, dtype):
    """d softplus / dx = sigmoid(x): 0.5 at 0 (where max(x, 0) + log1p(e^-|x|) written out
    would give 1 or 0: the kinks of max and |x| do not cancel in a composed gradient), 1
    and e^x (not 0 or NaN) at large |x|; and expm1's is e^x, not y + 1 (0 at x = -30 in
    f32, where y rounds to -1)."""
    import tfc
    x = np.array([0.0, -0.0, 1e-8, 40.0, 1e4, -40.0, -80.0, -1e4], dtype)
    with np.errstate(over="ignore"):
        exact = 1 / (1 + np.exp(-x.astype(np.float64)))
    (g,) = _grads(backend, lambda a: (tfc.nn.softplus(a), [a]), x)
    assert g.dtype == dtype
    np.testing.assert_allclose(g, exact.astype(dtype), rtol=4 * np.finfo(dtype).eps, atol=0)
    assert g[0] == g[1] == 0.5 and g[4] == 1 and 0 < g[5]
    x = np.array([-30.0, -1e-9, 0.0, 5.0], dtype)
    (g,) = _grads(backend, lambda a: (tfc.math.expm1(a), [a]), x)
    np.testing.assert_allclose(g, np.exp(x.astype(np.float64)).astype(dtype),
                               rtol=2 * np.finfo(dtype).eps, atol=0)
    (g,) = _grads(backend, lambda a: (tfc.math.log1p(a), [a]), x[1:])
    np.testing.assert_allclose(g, (1 / (1 + x[1:].astype(np.float64))).astype(dtype),
                               rtol=2 * np.finfo(dtype).eps, atol=0)


def _run(backend, build, *inputs):
    """``build(*placeholders)``'s value on ``backend``."""
    import tfc
    with tfc.Graph().as_default():
        phs = [tfc.placeholder(tfc.as_dtype(a.dtype), list(a.shape)) for a in inputs]
        with tfc.Session(backend=backend) as sess:
            return sess.run(build(*phs), dict(zip(phs, inputs)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_trig_and_erf_gradients_at_the_domain_ends(backend, dtype):
    """TF's rules through the API names: asin/acos' +-inf at +-1 and NaN beyond, tan's
    1 + tan^2, atan's 1 / (1 + x^2) (0 at +-1e30, no overflow to NaN), erf's and erfc's
    +-2/sqrt(pi) e^(-x^2) (0 in the tails), atan2's (x, -y) / (x^2 + y^2)."""
    import tfc
    eps = np.finfo(dtype).eps
    x = np.array([-1.0, -0.5, 0.0, 0.5, 1.0, 2.0], dtype)
    (g,) = _grads(backend, lambda a: (tfc.math.asin(a), [a]), x)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = 1 / np.sqrt(1 - x.astype(np.float64) ** 2)
    np.testing.assert_allclose(g, want.astype(dtype), rtol=4 * eps)
    assert np.isposinf(g[0]) and np.isposinf(g[4]) and np.isnan(g[5])
    (g,) = _grads(backend, lambda a: (tfc.acos(a), [a]), x)
    np.testing.assert_allclose(g, -want.astype(dtype), rtol=4 * eps)
    t = np.array([-1.2, 0.0, 0.7, 1.5], dtype)
    (g,) = _grads(backend, lambda a: (tfc.tan(a), [a]), t)
    np.testing.assert_allclose(g, 1 / np.cos(t.astype(np.float64)) ** 2, rtol=8 * eps)
    a = np.array([-1e30, -1.0, 0.0, 3.0, 1e30], dtype)
    (g,) = _grads(backend, lambda v: (tfc.atan(v), [v]), a)
    want_a = 1 / (1 + a.astype(np.float64) ** 2)
    np.testing.assert_allclose(g, want_a.astype(dtype), rtol=4 * eps)
    e = np.array([-30.0, -1.0, -0.0, 0.5, 3.0, 30.0], dtype)
    slope = 2 / np.sqrt(np.pi) * np.exp(-e.astype(np.float64) ** 2)
    (g,) = _grads(backend, lambda v: (tfc.math.erf(v), [v]), e)
    np.testing.assert_allclose(g, slope.astype(dtype), rtol=8 * eps, atol=0)
    (g,) = _grads(backend, lambda v: (tfc.math.erfc(v), [v]), e)
    np.testing.assert_allclose(g, -slope.astype(dtype), rtol=8 * eps, atol=0)
    y, xx = np.array([1.0, -2.0, 0.5], dtype), np.array([-1.0, 3.0, 0.0], dtype)
    gy, gx = _grads(backend, lambda p, q: (tfc.math.atan2(p, q), [p, q]), y, xx)
    r2 = xx.astype(np.float64) ** 2 + y.astype(np.float64) ** 2
    np.testing.assert_allclose(gy, xx / r2, rtol=4 * eps)
    np.testing.assert_allclose(gx, -y / r2, rtol=4 * eps)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_values_and_gradients(backend, dtype):
    """tfc.nn.gelu: ``x Phi(x) = 0.5 x erfc(-x / sqrt(2))`` (Python's math.erfc in
    float64: accurate for negative x too, where 1 + erf cancels) and its derivative
    ``Phi(x) + x phi(x)``; the tanh form and its derivative, written out; -0.0 kept."""
    import tfc
    x = np.array([-30.0, -5.0, -1.0, -0.0, 0.0, 0.3, 1.0, 4.0, 30.0], dtype)
    xd = x.astype(np.float64)
    cdf = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in xd])
    pdf = np.exp(-xd ** 2 / 2) / math.sqrt(2 * math.pi)
    eps = np.finfo(dtype).eps
    # the condition number of x Phi(x) is about 1 + x^2 for negative x (erfc's argument
    # -x / sqrt(2), rounded, moves the result by x^2 of its relative error)
    cond = 1 + xd ** 2
    def close(got: np.ndarray, want: np.ndarray, atol: float = 0.0) -> None:
        want = want.astype(dtype).astype(np.float64)  # (f32: x = -30 underflows to -0)
        err = np.abs(got.astype(np.float64) - want)
        assert np.all(err <= 8 * eps * cond * np.abs(want) + atol), (got, want)

    got = _run(backend, lambda a: tfc.nn.gelu(a), x)
    close(got, xd * cdf)
    assert np.signbit(got[3]) and not np.signbit(got[4])
    (g,) = _grads(backend, lambda a: (tfc.nn.gelu(a), [a]), x)
    close(g, cdf + xd * pdf, eps)
    c, k = 0.7978845608028654, 0.044715
    th = np.tanh(c * (xd + k * xd ** 3))
    got = _run(backend, lambda a: tfc.nn.gelu(a, approximate=True), x)
    # (1 + tanh cancels for negative x: within 4 eps |x| absolutely there)
    err = np.abs(got.astype(np.float64) - 0.5 * xd * (1 + th))
    assert np.all(err <= 8 * eps * np.abs(0.5 * xd * (1 + th)) + 4 * eps * np.abs(xd)), err
    (g,) = _grads(backend, lambda a: (tfc.nn.gelu(a, approximate=True), [a]), x)
    want = 0.5 * (1 + th) + 0.5 * xd * (1 - th ** 2) * c * (1 + 3 * k * xd ** 2)
    np.testing.assert_allclose(g, want.astype(dtype), rtol=8 * eps, atol=8 * eps)
