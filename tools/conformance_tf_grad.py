"""tfc's gradients against TensorFlow's, op by op and for the ``tfc.gradients`` API.

Finite differences (what tfc's own suite checks gradients with) cannot see the
conventions at kinks (relu'(0), abs'(0), ties of maximum / reduce_max, sqrt at 0, pow
with a zero or negative base, ...) nor the API's semantics (None for an unconnected x,
``grad_ys``, ``stop_gradient``, IndexedSlices from gather, several ys). Users write TF1
code and expect TensorFlow's numbers there, so this tool compares with TensorFlow itself.

For each case: the inputs are fed through placeholders, ``y = f(inputs)``, and the
gradient of ``sum(y * w)`` (``w`` a seeded random upstream gradient, passed as
``grad_ys``) with respect to every float input is taken by ``tfc.gradients`` in a tfc
graph run by ``tfc.Session`` on the llvm and on the reference backend, and by
``tf.compat.v1.gradients`` in a ``tf.Graph`` run by a TF1 session (grappler off, so
TensorFlow computes exactly the gradient graph its rules build).

Agreement: the same None-ness, NaN at the same places, the same infinities, and for the
finite elements ``|tfc - tf| <= k * eps(dtype) * (|tf| + scale)`` with ``scale`` the
largest finite ``|tf|`` of that gradient and ``k`` per op family (``TOL`` below: f32 a
few ulps of the result's scale; f64 ``k * eps`` about 1e-12 where sums are involved).

TensorFlow, JAX and PyTorch are not tfc's dependencies; run this by hand:
``python tools/conformance_tf_grad.py [--quick] [--backend llvm|reference]``. The output
is a table per op and the list of divergences, each marked FIXED (a bug fixed in tfc,
with a regression test in the suite) or EXPECTED (a deliberate difference, with a reason)
from ``KNOWN`` below; an unlisted divergence is NEW and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# Tolerance multiplier k (units of the dtype's eps, relative to the gradient's largest
# element) per op family: f32 / f64. f32: a few ulps where each element is rounded a few
# times, more where sums of several terms can cancel. f64: about 1e-12 (k = 4096) where
# sums are involved (the two frameworks add in different orders), a few ulps elsewhere.
TOL: dict[str, tuple[float, float]] = {
    "elementwise": (4, 8),         # one or two roundings per element
    # tanh, sigmoid: 1 - y^2 and y (1 - y) cancel as y saturates, so y's last-ulp rounding
    # (each framework's own tanh) is amplified ~2 / (1 - y^2) times (16 at x = 1.7)
    "saturating": (32, 64),
    "broadcast": (16, 4096),       # plus a sum over broadcast axes
    "reduce": (16, 4096),
    "shape": (1, 1),               # moves values: exact
    "matmul": (32, 4096),
    "linalg": (512, 4096),         # inverses: error grows with the condition number
    "nn": (32, 4096),
    "composite": (64, 4096),
    # second derivatives of softmax: a sum of O(1) terms that cancel to ~1e-2, so a few ulps
    # of the terms are ~100s of ulps of the result (tfc's f32 is closer to f64 than TF's)
    "cancelling": (1024, 4096),
}


@dataclass
class Case:
    """``fn(m, *inputs)`` builds y with ``m`` = tfc or TensorFlow (``tf_fn`` where the two
    APIs are spelled differently); ``make(dtype, rng)`` gives the inputs."""

    op: str
    label: str
    family: str
    fn: Callable[..., Any]
    make: Callable[[Any, np.random.Generator], list[np.ndarray]]
    tf_fn: Callable[..., Any] | None = None
    dtypes: tuple[str, ...] = ("float32", "float64")
    quick: bool = True
    symbolic: tuple[int, ...] = ()  # inputs whose leading dim is None (tfc: the symbol B)


def _shape(case: Case, i: int, x: np.ndarray) -> list[int | None]:
    return [None if (i in case.symbolic and d == 0) else n for d, n in enumerate(x.shape)]


@dataclass
class Result:
    case: Case
    dtype: str
    backend: str
    status: str  # "ok", "DIVERGES", "ERROR"
    detail: str = ""


@dataclass
class Known:
    verdict: str  # FIXED or EXPECTED
    reason: str


# (op, label) -> verdict: the divergences found (session 18), and what was done about each.
# A FIXED one agrees now; the run lists it with its current status.
KNOWN: dict[tuple[str, str], Known] = {
    **{("sign", label): Known("FIXED", "tfc had no rule (None: unconnected); TF's _SignGrad "
                              "gives zeros")
       for label in ("random [3,4]", "scalar", "kinks [-1.5, -0.0, 0.0, 0.5, 1.0, 2.0]")},
    ("pow", "kinks x=[2.0, 0.0, -1.0] y=[-1.0, -1.0, -2.0]"): Known(
        "FIXED", "d/dy at 0^-1: tfc masked the product to 0; TF masks log x only, so "
        "inf * 0 = NaN"),
    **{("where", f"{k} in the branch not taken (zero upstream gradient)"): Known(
        "FIXED", f"{k}'(x <= 0) times dy = 0 was NaN; TF's {k.capitalize()}Grad kernel "
        "gives 0 where dy == 0") for k in ("sqrt", "rsqrt")},
    ("reduce_prod", "ties/zeros axis=1"): Known(
        "FIXED", "prod / x_i is 0/0 = NaN at a zero; TF gives the product of the others"),
    ("reduce_prod", "two zeros in a row axis=1"): Known(
        "FIXED", "prod / x_i is 0/0 = NaN at a zero; TF gives the product of the others"),
    ("second order: nn.relu", "d/dx of d sum(c f(x))/dx"): Known(
        "EXPECTED", "tfc: None (relu's gradient reaches x only through a comparison); TF: "
        "zeros from its ReluGrad rule. The values agree (0)"),
    **{("nn.softmax_cross_entropy_with_logits", label): Known(
        "EXPECTED", "labels not summing to 1: tfc's d/dlogits is the exact softmax * "
        "sum(labels) - labels; TF's kernel drops sum(labels) (softmax - labels)")
       for label in ("labels not summing to 1",)},
    ("sign", "symbolic batch"): Known("FIXED", "sign's gradient (None -> zeros, as TF)"),
    ("second order: abs", "d/dx of d sum(c f(x))/dx"): Known(
        "FIXED", "abs' = sign: its gradient was None, TF's zeros"),
    ("pow", "symbolic batch [B,2]^[2], zero base"): Known(
        "FIXED", "pow's d/dy at 0^-1 (0 -> NaN, as TF)"),
    ("reduce_prod", "symbolic batch [B,3] axis 0, zeros"): Known(
        "FIXED", "reduce_prod's gradient at zeros (NaN -> the product of the others)"),
    **{("second order: reduce_prod", label): Known(
        "EXPECTED", "at a zero tfc's second derivative is exact (tests/ops/test_math_grad.py "
        "checks it by hand); TF's is 0 there (its cumprod gradient divides by x)")
       for label in ("with a zero", "two zeros")},
    ("where", "symbolic batch, sqrt branch not taken"): Known(
        "FIXED", "sqrt's gradient where dy == 0 (NaN -> 0, as TF's SqrtGrad)"),
    ("nn.relu", "inf/NaN upstream"): Known(
        "EXPECTED", "tfc's relu gradient selects (0 where x <= 0, whatever the upstream "
        "gradient), as TF's own maximum(x, 0) does; TF's ReluGrad multiplies by the mask, so "
        "an inf/NaN upstream gradient gives NaN there. Changing it would change every "
        "relu network's gradient graph: left to the lead"),
    ("while_loop", "x*y^3"): Known(
        "EXPECTED", "tfc does not differentiate while_loop (a clear error, as JAX's "
        "while_loop; docs/language.md): tfc.scan is the differentiable loop"),
    ("api", "gradient of an integer y"): Known(
        "EXPECTED", "tfc raises a clear TypeMismatch ('cast it to a float type first') where "
        "TF returns [None] silently"),
    **{key: Known("EXPECTED", "float64 only: TF 2.21's gelu rounds its constants 1/sqrt(2) "
                  "and 0.044715 to float32 even for float64 (~1e-8 relative); tfc uses them "
                  "in float64, as JAX and PyTorch (tfc.api.nn.gelu); float32 agrees")
       for key in [("nn.gelu", "random [3,4]"), ("nn.gelu", "scalar"),
                   ("nn.gelu", "kinks [-40.0, -5.0, -0.0, 0.0, 1.0, 40.0]"),
                   ("nn.gelu(approximate)", "random [3,4]"),
                   ("second order: nn.gelu", "d/dx of d sum(c f(x))/dx")]},
}


KNOWN[("math.cumprod", "a zero")] = Known(  # array24
    "EXPECTED", "at a zero of x TF's cumprod gradient is 0 for that element (its rule "
    "divides by x, then masks); tfc's is the exact sum of the other factors' products "
    "(tests/ops/test_scan_sort.py checks it against finite differences)")


KNOWN[("nn.normalize_moments", "of sufficient_statistics, shifted")] = Known(  # linalg25
    "EXPECTED", "the variance's derivative by the shift is exactly 0 (-2 mean(x - s) from "
    "the sum of squares, +2 mean(x - s) from the squared mean): TF's gradient graph rounds "
    "both terms alike and cancels to 0, tfc's leaves one rounding of the terms (1.2e-7 in "
    "f32, 2.2e-16 in f64, terms of size ~1); d/dx agrees")


def _r(*shape: int, lo: float = -2.0, hi: float = 2.0) -> Callable[..., np.ndarray]:
    return lambda dt, rng: rng.uniform(lo, hi, shape).astype(dt)


def _c(*vals: Any) -> Callable[..., np.ndarray]:
    return lambda dt, rng: np.array(vals, dtype=dt)


def _inputs(*makers: Callable[..., np.ndarray]) -> Callable[..., list[np.ndarray]]:
    return lambda dt, rng: [m(dt, rng) for m in makers]


def _int(arr: Sequence[Any], dt: str = "int32") -> Callable[..., np.ndarray]:
    return lambda _dt, rng: np.array(arr, dtype=dt)


KINK = np.array([-1.5, -0.0, 0.0, 0.5, 1.0, 2.0])


def _unary_cases(name: str, family: str = "elementwise", points: Any = KINK,
                 lo: float = -2.0, hi: float = 2.0, tf_name: str | None = None) -> list[Case]:
    tfn = (lambda m, x: _attr(m, tf_name)(x)) if tf_name else None
    f = (lambda m, x: _attr(m, name)(x))
    return [
        Case(name, "random [3,4]", family, f, _inputs(_r(3, 4, lo=lo, hi=hi)), tfn),
        Case(name, "scalar", family, f, _inputs(_r(lo=lo, hi=hi)), tfn),
        Case(name, f"kinks {[float(v) for v in points]}", family, f, _inputs(_c(*points)), tfn),
    ]


def _attr(m: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        m = getattr(m, part)
    return m


def _binary_cases(name: str, lo: float = -2.0, hi: float = 2.0,
                  kinks: Sequence[tuple[Sequence[float], Sequence[float]]] = ()) -> list[Case]:
    f = (lambda m, x, y: _attr(m, name)(x, y))
    cases = [
        Case(name, "random [3,4]x[3,4]", "elementwise", f,
             _inputs(_r(3, 4, lo=lo, hi=hi), _r(3, 4, lo=lo, hi=hi))),
        Case(name, "broadcast [3,1,4]x[2,1]", "broadcast", f,
             _inputs(_r(3, 1, 4, lo=lo, hi=hi), _r(2, 1, lo=lo, hi=hi))),
        Case(name, "broadcast []x[2,3]", "broadcast", f,
             _inputs(_r(lo=lo, hi=hi), _r(2, 3, lo=lo, hi=hi))),
    ]
    for xs, ys in kinks:
        cases.append(Case(name, f"kinks x={list(xs)} y={list(ys)}", "elementwise", f,
                          _inputs(_c(*xs), _c(*ys))))
    return cases


def _softmax_ce_tf(m: Any, lab: Any, logit: Any) -> Any:
    # tf.nn.softmax_cross_entropy_with_logits (v2): backpropagates into labels too
    return m.nn.softmax_cross_entropy_with_logits(labels=lab, logits=logit)


def _probs(*shape: int) -> Callable[..., np.ndarray]:
    def make(dt: Any, rng: np.random.Generator) -> np.ndarray:
        p = rng.uniform(0.1, 1.0, shape)
        return (p / p.sum(-1, keepdims=True)).astype(dt)
    return make


def _t(make: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda dt, rng: np.ascontiguousarray(make(dt, rng).T)


def _spd(n: int) -> Callable[..., np.ndarray]:
    def make(dt: Any, rng: np.random.Generator) -> np.ndarray:
        a = rng.uniform(-1, 1, (n, n))
        return (a @ a.T + n * np.eye(n)).astype(dt)
    return make


def _ties(dt: Any, rng: np.random.Generator) -> np.ndarray:
    return np.array([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 2.0, 2.0], [0.0, -0.0, -5.0, 0.0]], dt)


def _pool_case(name: str, what: str, k: int, padding: str, inputs: Any, **kw: Any) -> "Case":
    """The case of ``name`` (``nn.max_pool2d``, ...): ``k``x``k`` windows, stride 2."""
    kind = name.split(".")[1]
    return Case(name, what, "nn", _pool(kind, k, padding, tf=False), inputs,
                tf_fn=_pool(kind, k, padding, tf=True), **kw)


def _pool(kind: str, k: int, padding: str, *, tf: bool) -> Callable[..., Any]:
    """``kind`` pooling, ``k``x``k`` windows with stride 2, spelled for TensorFlow (``tf``:
    NHWC lists) or for tfc (integers)."""
    ksize, strides = ([1, k, k, 1], [1, 2, 2, 1]) if tf else (k, 2)

    def f(m: Any, x: Any) -> Any:
        return getattr(m.nn, kind)(x, ksize=ksize, strides=strides, padding=padding)
    return f


def _sampled_softmax(m: Any, w: Any, b: Any, x: Any, labels: Any) -> Any:
    """Deterministic: the sampled classes are given (3 is also example 1's true class)."""
    sampled = m.constant(np.array([3, 5, 0], np.int64))
    true_q = m.cast(m.constant(np.full((3, 1), 0.25)), w.dtype)
    samp_q = m.cast(m.constant(np.array([0.5, 0.125, 0.75])), w.dtype)
    return m.nn.sampled_softmax_loss(w, b, labels, x, num_sampled=3, num_classes=10,
                                     sampled_values=(sampled, true_q, samp_q))


def _second_order(name: str) -> Callable[..., Any]:
    """d/dx sum(c * f(x)) with fixed weights c (an unweighted sum(softmax) is constant)."""
    def f(m: Any, x: Any) -> Any:
        c = m.cast(m.constant(np.linspace(0.5, 2.0, 12).reshape(3, 4)), x.dtype)
        return m.gradients(m.reduce_sum(c * _attr(m, name)(x)), x)[0]
    return f


def _clip_global(norm: float) -> Callable[..., Any]:
    def f(m: Any, x: Any, y: Any) -> Any:
        cx, cy = m.clip_by_global_norm([x, y], norm)[0]
        return m.concat([m.reshape(cx, [-1]), m.reshape(cy, [-1]) * 2.0], 0)
    return f


def _pool_ties(dt: Any, rng: np.random.Generator) -> np.ndarray:
    x = np.zeros((1, 4, 4, 1), dt)
    x[0, 0, 0, 0] = x[0, 1, 1, 0] = 1.0  # a tie in the first window
    x[0, 2:, 2:, 0] = -2.0               # four equal elements in the last window
    return x


def build_cases() -> list[Case]:
    cases: list[Case] = []
    # -- unary element-wise
    for name in ["abs", "negative", "exp", "square", "sin", "cos", "sign", "floor",
                 "identity"]:
        cases += _unary_cases(name)
    cases += _unary_cases("tanh", "saturating")
    cases += _unary_cases("sigmoid", "saturating")
    cases += _unary_cases("nn.relu", tf_name="nn.relu")
    cases += _unary_cases("log", lo=0.1, hi=3.0, points=[0.0, 1e-3, 1.0, 2.5],
                          tf_name="math.log")
    cases += _unary_cases("sqrt", lo=0.1, hi=3.0, points=[0.0, 1e-3, 1.0, 2.5])
    cases += _unary_cases("rsqrt", lo=0.1, hi=3.0, points=[0.0, 1e-3, 1.0, 2.5],
                          tf_name="math.rsqrt")
    cases += _unary_cases("nn.sigmoid", "saturating", tf_name="nn.sigmoid")
    cases += _unary_cases("nn.tanh", "saturating", tf_name="nn.tanh")
    cases += _unary_cases("math.log1p", lo=-0.9, hi=3.0, points=[-1.0, -0.5, 0.0, 1e-8, 2.5])
    cases += _unary_cases("log1p", lo=-0.9, hi=3.0, tf_name="math.log1p")
    cases += _unary_cases("math.expm1", points=[-30.0, -1e-8, -0.0, 0.0, 5.0])
    cases += _unary_cases("expm1", tf_name="math.expm1")
    # softplus' = sigmoid: 0.5 at +-0, e^x and 1 at large |x| (TF: dy / (1 + e^-x))
    cases += _unary_cases("nn.softplus", "saturating", lo=-5.0, hi=5.0,
                          points=[-90.0, -40.0, -0.0, 0.0, 40.0, 1e4])
    cases += _unary_cases("math.softplus", "saturating", tf_name="math.softplus")
    # TF1's activations built from ops (tfc.api.nn): their gradients at the kinks are TF's
    # (elu at 0 from the left: exp(0) = 1; leaky_relu alpha at 0; relu6 0 at 0 and 6)
    cases += _unary_cases("nn.elu", points=[-30.0, -1.0, -0.0, 0.0, 1.0])
    cases += _unary_cases("nn.selu", points=[-30.0, -1.0, -0.0, 0.0, 1.0])
    cases += _unary_cases("nn.leaky_relu", points=[-1.0, -0.0, 0.0, 1.0])
    cases += _unary_cases("nn.relu6", lo=-2.0, hi=8.0, points=[-1.0, 0.0, 3.0, 6.0, 7.0])
    cases += _unary_cases("nn.softsign", points=[-1e4, -1.0, -0.0, 0.0, 1.0, 1e4])
    cases.append(Case("clip_by_value", "kinks [-1, -0.5, 0, 0.75, 1]", "elementwise",
                      lambda m, x: m.clip_by_value(x, -0.5, 0.75),
                      _inputs(_c(-1.0, -0.5, 0.0, 0.75, 1.0))))
    # tan, the inverse trigonometry, erf/erfc, gelu: the domain ends (asin/acos: +-inf at
    # +-1, NaN beyond), near tan's pole, erf's saturated tails, gelu's exact and tanh forms
    cases += _unary_cases("math.tan", lo=-1.2, hi=1.2, points=[-0.0, 0.0, 1.0, 1.5707963, 3.0])
    cases += _unary_cases("tan", lo=-1.2, hi=1.2, tf_name="math.tan")
    cases += _unary_cases("math.atan", lo=-5.0, hi=5.0, points=[-1e10, -1.0, -0.0, 0.0, 1e10])
    cases += _unary_cases("atan", tf_name="math.atan")
    for n in ("asin", "acos"):
        cases += _unary_cases(f"math.{n}", lo=-0.95, hi=0.95,
                              points=[-1.0, -0.5, -0.0, 0.0, 0.999, 1.0, 2.0])
        cases += _unary_cases(n, lo=-0.95, hi=0.95, tf_name=f"math.{n}")
    cases += _unary_cases("math.erf", points=[-30.0, -1.0, -0.0, 0.0, 5.0, 30.0])
    cases += _unary_cases("erf", tf_name="math.erf")
    cases += _unary_cases("math.erfc", points=[-30.0, -1.0, 0.0, 10.0, 30.0])
    cases += _unary_cases("erfc", tf_name="math.erfc")
    cases += _unary_cases("nn.gelu", lo=-4.0, hi=4.0, points=[-40.0, -5.0, -0.0, 0.0, 1.0, 40.0])
    cases.append(Case("nn.gelu(approximate)", "random [3,4]", "elementwise",
                      lambda m, x: m.nn.gelu(x, approximate=True), _inputs(_r(3, 4, lo=-4.0,
                                                                               hi=4.0))))
    cases += _binary_cases("math.atan2", kinks=[([0.0, 1.0, -1.0, 1e-3], [1.0, 0.0, -0.0, -2.0])])
    # -- binary element-wise
    cases += _binary_cases("add")
    cases += _binary_cases("subtract")
    cases += _binary_cases("multiply", kinks=[([0.0, 1.0], [0.0, -0.0])])
    cases += _binary_cases("divide", lo=0.5, hi=2.0,
                           kinks=[([1.0, 0.0, -1.0, 0.0], [0.0, 0.0, 0.0, 2.0])])
    cases += _binary_cases("maximum", kinks=[([1.0, 2.0, -0.0, 0.0], [1.0, 3.0, 0.0, -0.0])])
    cases += _binary_cases("minimum", kinks=[([1.0, 2.0, -0.0, 0.0], [1.0, 3.0, 0.0, -0.0])])
    cases += _binary_cases("pow", lo=0.5, hi=2.0, kinks=[
        ([0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 2.0, 0.5]),
        ([-2.0, -2.0, -0.5], [2.0, 3.0, 1.0]),
        ([2.0, 0.0, -1.0], [-1.0, -1.0, -2.0]),
    ])
    # -- ceil, round, rint, floordiv: no gradient (None, as TF); reciprocal -dy y^2;
    # floormod dy and -floor(x/y) dy; squared_difference +-2(x-y) dy; divide_no_nan 0 where
    # y = 0; sinh ... atanh composed of registry ops (their derivatives through the
    # composition), at 0, tiny, large, the domains' ends
    for name in ["math.ceil", "round", "math.rint"]:
        cases += _unary_cases(name, points=[-2.5, -0.5, -0.0, 0.0, 0.5, 1.5])
    cases += _unary_cases("reciprocal", lo=0.5, hi=2.0, points=[-2.0, -0.0, 0.0, 0.5, 3.0],
                          tf_name="math.reciprocal")
    cases += _unary_cases("math.reciprocal_no_nan", lo=0.5, hi=2.0,
                          points=[-2.0, -0.0, 0.0, 0.5, 3.0])
    cases += _unary_cases("sinh", points=[-30.0, -1.0, -0.0, 0.0, 1e-3, 30.0],
                          tf_name="math.sinh")
    cases += _unary_cases("cosh", points=[-30.0, -1.0, -0.0, 0.0, 1e-3, 30.0],
                          tf_name="math.cosh")
    cases += _unary_cases("asinh", points=[-1e5, -1.0, -0.0, 0.0, 1e-8, 1e5],
                          tf_name="math.asinh")
    cases += _unary_cases("math.acosh", lo=1.1, hi=3.0, points=[1.0, 1.0001, 1.5, 1e5])
    cases += _unary_cases("math.atanh", lo=-0.9, hi=0.9, points=[-0.99, -0.0, 0.0, 1e-8, 0.5,
                                                                  1.0])
    cases += _binary_cases("math.floordiv", lo=0.5, hi=2.0)
    cases += _binary_cases("math.floormod", lo=0.5, hi=2.0,
                           kinks=[([7.0, -7.0, 7.5, -4.0], [3.0, 3.0, -2.0, 2.0])])
    cases += _binary_cases("math.mod", lo=0.5, hi=2.0)
    cases += _binary_cases("truncatediv", lo=0.5, hi=2.0)
    cases += _binary_cases("math.squared_difference", kinks=[([1.0, -0.0], [1.0, 0.0])])
    cases += _binary_cases("math.divide_no_nan", lo=0.5, hi=2.0,
                           kinks=[([1.0, 0.0, -1.0, 0.0], [0.0, 0.0, -0.0, 2.0])])
    # -- a non-finite upstream gradient (inf, NaN) where the local derivative is 0 or not
    up = _c(np.inf, np.nan, np.inf, np.nan, -np.inf, 1.0)
    at = _c(-1.0, 0.0, 1.0, -2.0, 0.0, 2.0)
    for name, tf_name in [("nn.relu", "nn.relu"), ("abs", "abs"), ("sign", "sign"),
                          ("floor", "floor"), ("square", "square"), ("tanh", "tanh"),
                          ("sigmoid", "sigmoid"), ("exp", "exp"), ("sin", "sin"),
                          ("math.expm1", "math.expm1"), ("nn.softplus", "nn.softplus")]:
        cases.append(Case(name, "inf/NaN upstream", "elementwise",
                          (lambda n: lambda m, x, c: _attr(m, n)(x) * c)(name),
                          _inputs(at, up),
                          (lambda n: lambda m, x, c: _attr(m, n)(x) * c)(tf_name)))
    cases.append(Case("sqrt", "inf/NaN upstream", "elementwise",
                      lambda m, x, c: m.sqrt(m.abs(x)) * c, _inputs(at, up)))
    cases.append(Case("maximum", "inf/NaN upstream", "elementwise",
                      lambda m, x, c: m.maximum(x, 0.0) * c, _inputs(at, up)))
    cases.append(Case("where", "inf/NaN upstream", "elementwise",
                      lambda m, x, c: m.where(m.greater(x, 0.0), x, m.zeros_like(x)) * c,
                      _inputs(at, up)))
    cases.append(Case("reduce_max", "inf/NaN upstream", "reduce",
                      lambda m, x, c: m.reduce_max(x, axis=1) * c,
                      _inputs(_c([1.0, 2.0], [3.0, 3.0], [0.0, -1.0]), _c(np.inf, np.nan, 1.0))))
    # -- where / select, cast, add_n, stop_gradient
    cases.append(Case("where", "random [3,4]", "elementwise",
                      lambda m, x, y: m.where(m.greater(x, y), x, y),
                      _inputs(_r(3, 4), _r(3, 4))))
    cases.append(Case("where", "ties x==y", "elementwise",
                      lambda m, x, y: m.where(m.greater_equal(x, y), x * 2.0, y * 3.0),
                      _inputs(_c(1.0, 2.0, 0.0), _c(1.0, 3.0, 0.0))))
    cases.append(Case("where", "broadcast [3,1]x[4]", "broadcast",
                      lambda m, x, y: m.where(m.greater(x + y, 0.0), x, y),
                      _inputs(_r(3, 1), _r(4)),
                      tf_fn=lambda m, x, y: m.compat.v2.where(m.greater(x + y, 0.0), x, y)))
    for name, tf_name in [("sqrt", "sqrt"), ("rsqrt", "math.rsqrt"), ("log", "math.log")]:
        cases.append(Case(
            "where", f"{name} in the branch not taken (zero upstream gradient)", "elementwise",
            (lambda n: lambda m, x: m.where(m.greater(x, 0.0), _attr(m, n)(x),
                                            m.zeros_like(x)))(name),
            _inputs(_c(-1.0, 0.0, 4.0)),
            (lambda n: lambda m, x: m.where(m.greater(x, 0.0), _attr(m, n)(x),
                                            m.zeros_like(x)))(tf_name)))
    cases.append(Case("cast", "f->f64->f", "elementwise",
                      lambda m, x: m.cast(m.cast(x, m.float64) * 3.0, x.dtype),
                      _inputs(_r(3, 4))))
    cases.append(Case("cast", "f->int32->f", "elementwise",
                      lambda m, x: x + m.cast(m.cast(x, m.int32), x.dtype),
                      _inputs(_r(3, 4))))
    cases.append(Case("maximum", "relu-like max(x, 0) at 0", "elementwise",
                      lambda m, x: m.maximum(x, 0.0), _inputs(_c(-1.0, -0.0, 0.0, 2.0))))
    cases.append(Case("minimum", "nan", "elementwise", lambda m, x, y: m.minimum(x, y),
                      _inputs(_c(np.nan, 1.0, np.nan), _c(1.0, np.nan, np.nan))))
    cases.append(Case("reduce_max", "inf and nan", "reduce",
                      lambda m, x: m.reduce_max(x, axis=1),
                      _inputs(_c([np.inf, 1.0, np.inf], [np.nan, 1.0, 2.0], [-np.inf] * 3))))
    cases.append(Case("abs", "at -0.0/0.0 times x", "elementwise",
                      lambda m, x: m.abs(x) * x, _inputs(_c(-0.0, 0.0, -1.0))))
    cases.append(Case("divide", "int-cast denominator", "elementwise",
                      lambda m, x, i: x / m.cast(i, x.dtype),
                      _inputs(_r(3), _int([1, -2, 4]))))
    cases.append(Case("add_n", "three", "elementwise",
                      lambda m, x, y, z: m.add_n([x, y, x * z]),
                      _inputs(_r(2, 3), _r(2, 3), _r(2, 3))))
    cases.append(Case("stop_gradient", "x*stop(x)", "elementwise",
                      lambda m, x: x * m.stop_gradient(x), _inputs(_r(3, 4))))
    # -- reductions
    for name in ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"]:
        f_all = (lambda n: lambda m, x: getattr(m, n)(x))(name)
        f_ax = (lambda n: lambda m, x: getattr(m, n)(x, axis=1))(name)
        f_kd = (lambda n: lambda m, x: getattr(m, n)(x, axis=[0, 2], keepdims=True))(name)
        cases += [Case(name, "all [3,4]", "reduce", f_all, _inputs(_r(3, 4, lo=0.5, hi=1.5))),
                  Case(name, "axis=1 [3,4]", "reduce", f_ax, _inputs(_r(3, 4))),
                  Case(name, "axes=[0,2] keepdims [2,3,4]", "reduce", f_kd,
                       _inputs(_r(2, 3, 4))),
                  Case(name, "ties/zeros axis=1", "reduce", f_ax, _inputs(_ties)),
                  Case(name, "scalar", "reduce", f_all, _inputs(_r()), quick=False)]
    for name in ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"]:
        cases.append(Case(name, "axis=-1 keepdims, [2,1,3]", "reduce",
                          (lambda n: lambda m, x: getattr(m, n)(x, axis=-1, keepdims=True))(
                              name), _inputs(_r(2, 1, 3)), quick=False))
        cases.append(Case(name, "all, keepdims", "reduce",
                          (lambda n: lambda m, x: getattr(m, n)(x, keepdims=True))(name),
                          _inputs(_r(2, 3, lo=0.5, hi=1.5)), quick=False))
    cases.append(Case("reduce_prod", "two zeros in a row axis=1", "reduce",
                      lambda m, x: m.reduce_prod(x, axis=1),
                      _inputs(_c([0.0, 2.0, 0.0], [3.0, 0.0, 4.0], [1.0, 2.0, 3.0]))))
    # -- matmul and linear algebra
    cases.append(Case("matmul", "[3,4]@[4,5]", "matmul", lambda m, a, b: m.matmul(a, b),
                      _inputs(_r(3, 4), _r(4, 5))))
    cases.append(Case("matmul", "transposes", "matmul",
                      lambda m, a, b: m.matmul(a, b, transpose_a=True, transpose_b=True),
                      _inputs(_r(4, 3), _r(5, 4))))
    cases.append(Case("matmul", "batched [2,3,4]@[2,4,5]", "matmul",
                      lambda m, a, b: m.matmul(a, b), _inputs(_r(2, 3, 4), _r(2, 4, 5))))
    cases.append(Case("matmul", "batch broadcast [2,3,4]@[4,5]", "matmul",
                      lambda m, a, b: m.matmul(a, b), _inputs(_r(2, 3, 4), _r(4, 5))))
    cases.append(Case("matmul", "batch broadcast [2,1,3,4]@[3,4,2]", "matmul",
                      lambda m, a, b: m.matmul(a, b), _inputs(_r(2, 1, 3, 4), _r(3, 4, 2))))
    cases.append(Case("matmul", "batched, transposes", "matmul",
                      lambda m, a, b: m.matmul(a, b, transpose_a=True, transpose_b=True),
                      _inputs(_r(2, 4, 3), _r(2, 5, 4))))
    cases.append(Case("matrix_inverse", "batched [2,3,3]", "linalg",
                      lambda m, a: m.matrix_inverse(a),
                      lambda dt, rng: [np.stack([_spd(3)(dt, rng), _spd(3)(dt, rng)])],
                      tf_fn=lambda m, a: m.linalg.inv(a)))
    cases.append(Case("matrix_inverse", "spd 4x4", "linalg", lambda m, a: m.matrix_inverse(a),
                      _inputs(_spd(4)), tf_fn=lambda m, a: m.linalg.inv(a)))
    cases.append(Case("matrix_determinant", "4x4", "linalg",
                      lambda m, a: m.matrix_determinant(a), _inputs(_r(4, 4)),
                      tf_fn=lambda m, a: m.linalg.det(a)))
    cases.append(Case("matrix_determinant", "batched [2,3,3]", "linalg",
                      lambda m, a: m.matrix_determinant(a), _inputs(_r(2, 3, 3)),
                      tf_fn=lambda m, a: m.linalg.det(a)))
    cases.append(Case("matrix_determinant", "singular 3x3", "linalg",
                      lambda m, a: m.matrix_determinant(a),
                      _inputs(_c([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0])),
                      tf_fn=lambda m, a: m.linalg.det(a)))
    # -- shape ops
    shape_cases: list[tuple[str, str, Callable[..., Any], list[Callable[..., np.ndarray]]]] = [
        ("reshape", "[3,4]->[2,6]", lambda m, x: m.reshape(x, [2, 6]), [_r(3, 4)]),
        ("transpose", "perm [2,0,1]", lambda m, x: m.transpose(x, [2, 0, 1]), [_r(2, 3, 4)]),
        ("broadcast_to", "[3,1]->[2,3,4]", lambda m, x: m.broadcast_to(x, [2, 3, 4]),
         [_r(3, 1)]),
        ("concat", "axis 1", lambda m, x, y: m.concat([x, y, x], axis=1),
         [_r(2, 3), _r(2, 2)]),
        ("stack", "axis 1", lambda m, x, y: m.stack([x, y], axis=1), [_r(2, 3), _r(2, 3)]),
        ("split", "3 ways, two used", lambda m, x: m.split(x, 3, axis=1)[0] * 2.0
         + m.split(x, 3, axis=1)[2], [_r(2, 6)]),
        ("split", "sizes", lambda m, x: m.split(x, [1, 3], axis=0)[1], [_r(4, 2)]),
        ("slice", "[1:3, 0:2]", lambda m, x: m.slice(x, [1, 0], [2, 2]), [_r(4, 3)]),
        ("pad", "constant", lambda m, x: m.pad(x, [[1, 0], [2, 1]]), [_r(2, 3)]),
        ("pad", "reflect", lambda m, x: m.pad(x, [[1, 1], [2, 1]], mode="REFLECT"),
         [_r(3, 4)]),
        ("pad", "symmetric", lambda m, x: m.pad(x, [[1, 1], [2, 1]], mode="SYMMETRIC"),
         [_r(3, 4)]),
        ("tile", "[2,3]", lambda m, x: m.tile(x, [2, 3]), [_r(2, 2)]),
        ("expand_dims", "axis -1", lambda m, x: m.expand_dims(x, -1), [_r(2, 3)]),
        ("squeeze", "axis 1", lambda m, x: m.squeeze(x, [1]), [_r(2, 1, 3)]),
        ("gather", "rows with repeats", lambda m, p, i: m.gather(p, i),
         [_r(5, 3), _int([1, 1, 4, 0])]),
        ("gather", "2-d indices", lambda m, p, i: m.gather(p, i),
         [_r(5, 3), _int([[1, 2], [2, 2]])]),
        ("gather", "axis 1", lambda m, p, i: m.gather(p, i, axis=1),
         [_r(2, 4, 3), _int([3, 0, 3])]),
    ]
    shape_cases += [
        ("reshape", "-1", lambda m, x: m.reshape(x, [-1, 2]), [_r(3, 4)]),
        ("transpose", "default perm", lambda m, x: m.transpose(x), [_r(2, 3, 4)]),
        ("broadcast_to", "scalar -> [2,3]", lambda m, x: m.broadcast_to(x, [2, 3]), [_r()]),
        ("stack", "axis -1, three", lambda m, x, y: m.stack([x, y, x], axis=-1),
         [_r(2, 3), _r(2, 3)]),
        ("split", "axis -1", lambda m, x: m.split(x, 2, axis=-1)[1] * 3.0, [_r(2, 3, 4)]),
        ("slice", "size -1", lambda m, x: m.slice(x, [1, 1], [-1, -1]), [_r(4, 3)]),
        ("pad", "constant_values", lambda m, x: m.pad(x, [[0, 1], [1, 1]],
                                                      constant_values=2.0), [_r(2, 3)]),
        ("tile", "[1,2,1]", lambda m, x: m.tile(x, [1, 2, 1]), [_r(2, 2, 3)]),
        ("expand_dims", "axis 0", lambda m, x: m.expand_dims(x, 0), [_r(2, 3)]),
        ("squeeze", "all size-1 axes", lambda m, x: m.squeeze(x), [_r(1, 3, 1, 2)]),
        ("concat", "axis -1, scalar-like rows", lambda m, x, y: m.concat([x, y], axis=-1),
         [_r(2, 1), _r(2, 3)]),
    ]
    for op, label, fn, makers in shape_cases:
        cases.append(Case(op, label, "shape", fn, _inputs(*makers)))
    # -- nn
    cases += [
        Case("nn.softmax", "[3,5]", "nn", lambda m, x: m.nn.softmax(x), _inputs(_r(3, 5))),
        Case("nn.softmax", "axis 0", "nn", lambda m, x: m.nn.softmax(x, axis=0),
             _inputs(_r(3, 5))),
        Case("nn.log_softmax", "[3,5]", "nn", lambda m, x: m.nn.log_softmax(x),
             _inputs(_r(3, 5))),
        Case("nn.log_softmax", "large logits", "nn", lambda m, x: m.nn.log_softmax(x),
             _inputs(_c([100.0, 0.0, -100.0], [1.0, 1.0, 1.0]))),
        Case("nn.softmax_cross_entropy_with_logits", "[3,5]", "nn",
             lambda m, lab, lo: m.nn.softmax_cross_entropy_with_logits(labels=lab, logits=lo),
             _inputs(_probs(3, 5), _r(3, 5)), tf_fn=_softmax_ce_tf),
        Case("nn.sparse_softmax_cross_entropy_with_logits", "[3,5]", "nn",
             lambda m, lo, lab: m.nn.sparse_softmax_cross_entropy_with_logits(
                 labels=lab, logits=lo), _inputs(_r(3, 5), _int([0, 4, 2]))),
        Case("nn.sigmoid_cross_entropy_with_logits", "[3,4]", "nn",
             lambda m, lab, lo: m.nn.sigmoid_cross_entropy_with_logits(labels=lab, logits=lo),
             _inputs(_r(3, 4, lo=0.0, hi=1.0), _r(3, 4, lo=-5, hi=5))),
        Case("nn.sigmoid_cross_entropy_with_logits", "logits at 0", "nn",
             lambda m, lab, lo: m.nn.sigmoid_cross_entropy_with_logits(labels=lab, logits=lo),
             _inputs(_c(0.0, 1.0, 0.5), _c(0.0, 0.0, -0.0))),
        Case("nn.bias_add", "NHWC", "broadcast", lambda m, x, b: m.nn.bias_add(x, b),
             _inputs(_r(2, 3, 4), _r(4))),
        Case("nn.bias_add", "NCHW", "broadcast",
             lambda m, x, b: m.nn.bias_add(x, b, data_format="NCHW"),
             _inputs(_r(2, 3, 4, 5), _r(3))),
        Case("nn.sigmoid_cross_entropy_with_logits", "extreme logits", "nn",
             lambda m, lab, lo: m.nn.sigmoid_cross_entropy_with_logits(labels=lab, logits=lo),
             _inputs(_c(0.0, 1.0, 0.3, 1.0, 0.0), _c(-100.0, -100.0, 100.0, 100.0, 30.0))),
        Case("nn.softmax_cross_entropy_with_logits", "extreme logits, zero labels", "nn",
             lambda m, lab, lo: m.nn.softmax_cross_entropy_with_logits(labels=lab, logits=lo),
             _inputs(_c([0.0, 1.0, 0.0], [0.5, 0.5, 0.0]),
                     _c([100.0, -100.0, 0.0], [0.0, 0.0, -200.0])),
             tf_fn=_softmax_ce_tf),
        Case("nn.sparse_softmax_cross_entropy_with_logits", "extreme logits", "nn",
             lambda m, lo, lab: m.nn.sparse_softmax_cross_entropy_with_logits(
                 labels=lab, logits=lo),
             _inputs(_c([100.0, -100.0, 0.0], [0.0, 0.0, -200.0]), _int([1, 2]))),
        Case("nn.softmax", "extreme logits", "nn", lambda m, x: m.nn.softmax(x),
             _inputs(_c([100.0, -100.0, 0.0], [0.0, 0.0, -200.0]))),
        Case("nn.conv2d", "VALID s2, last row unused", "nn",
             lambda m, x, w: m.nn.conv2d(x, w, strides=2, padding="VALID"),
             _inputs(_r(1, 6, 6, 2), _r(3, 3, 2, 2)),
             tf_fn=lambda m, x, w: m.nn.conv2d(x, w, strides=[1, 2, 2, 1], padding="VALID")),
        _pool_case("nn.max_pool2d", "SAME with -inf-like padding", 3, "SAME",
                   _inputs(_r(1, 5, 5, 1, lo=-3.0, hi=-1.0))),
        Case("nn.max_pool2d", "overlapping 3x3 s1, ties", "nn",
             lambda m, x: m.nn.max_pool2d(x, ksize=3, strides=1, padding="VALID"),
             _inputs(_pool_ties),
             tf_fn=lambda m, x: m.nn.max_pool2d(x, ksize=[1, 3, 3, 1], strides=[1, 1, 1, 1],
                                                padding="VALID")),
        Case("nn.conv2d", "VALID s1", "nn",
             lambda m, x, w: m.nn.conv2d(x, w, strides=1, padding="VALID"),
             _inputs(_r(2, 5, 5, 3), _r(3, 3, 3, 4)),
             tf_fn=lambda m, x, w: m.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="VALID")),
        Case("nn.conv2d", "SAME s2", "nn",
             lambda m, x, w: m.nn.conv2d(x, w, strides=2, padding="SAME"),
             _inputs(_r(1, 6, 5, 2), _r(3, 2, 2, 3)),
             tf_fn=lambda m, x, w: m.nn.conv2d(x, w, strides=[1, 2, 2, 1], padding="SAME")),
        Case("nn.conv2d", "dilation 2 (TF CPU: f32 only)", "nn",
             lambda m, x, w: m.nn.conv2d(x, w, padding="SAME", dilations=2),
             _inputs(_r(1, 6, 6, 2), _r(2, 2, 2, 3)),
             tf_fn=lambda m, x, w: m.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME",
                                               dilations=[1, 2, 2, 1]), dtypes=("float32",)),
        Case("nn.conv2d", "SAME even kernel (pads bottom/right)", "nn",
             lambda m, x, w: m.nn.conv2d(x, w, strides=1, padding="SAME"),
             _inputs(_r(1, 4, 5, 2), _r(2, 4, 2, 3)),
             tf_fn=lambda m, x, w: m.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")),
        Case("nn.conv2d", "SAME s3 odd total padding", "nn",
             lambda m, x, w: m.nn.conv2d(x, w, strides=3, padding="SAME"),
             _inputs(_r(2, 7, 8, 1), _r(3, 2, 1, 2)),
             tf_fn=lambda m, x, w: m.nn.conv2d(x, w, strides=[1, 3, 3, 1], padding="SAME")),
        Case("nn.avg_pool2d", "overlapping 3x3 s1", "nn",
             lambda m, x: m.nn.avg_pool2d(x, ksize=3, strides=1, padding="VALID"),
             _inputs(_r(1, 5, 4, 2)),
             tf_fn=lambda m, x: m.nn.avg_pool2d(x, ksize=[1, 3, 3, 1], strides=[1, 1, 1, 1],
                                                padding="VALID")),
        Case("nn.avg_pool2d", "2x2 s1 SAME", "nn",
             lambda m, x: m.nn.avg_pool2d(x, ksize=2, strides=1, padding="SAME"),
             _inputs(_r(1, 3, 3, 1)),
             tf_fn=lambda m, x: m.nn.avg_pool2d(x, ksize=[1, 2, 2, 1], strides=[1, 1, 1, 1],
                                                padding="SAME")),
        Case("nn.log_softmax", "axis 0", "nn", lambda m, x: m.nn.log_softmax(x, axis=0),
             _inputs(_r(3, 5))),
        Case("nn.softmax_cross_entropy_with_logits", "axis 0", "nn",
             lambda m, lab, lo: m.nn.softmax_cross_entropy_with_logits(labels=lab, logits=lo,
                                                                         axis=0),
             _inputs(_t(_probs(5, 3)), _r(3, 5))),
        Case("nn.softmax_cross_entropy_with_logits", "labels not summing to 1", "nn",
             lambda m, lab, lo: m.nn.softmax_cross_entropy_with_logits(labels=lab, logits=lo),
             _inputs(_r(3, 5, lo=0.0, hi=1.0), _r(3, 5))),
        _pool_case("nn.max_pool2d", "2x2 s2", 2, "VALID",
                   _inputs(_r(2, 4, 4, 3))),
        _pool_case("nn.max_pool2d", "ties", 2, "VALID",
                   _inputs(_pool_ties)),
        _pool_case("nn.max_pool2d", "3x3 s2 SAME", 3, "SAME",
                   _inputs(_r(1, 5, 5, 2))),
        _pool_case("nn.avg_pool2d", "2x2 s2", 2, "VALID",
                   _inputs(_r(2, 4, 4, 3))),
        _pool_case("nn.avg_pool2d", "3x3 s2 SAME", 3, "SAME",
                   _inputs(_r(1, 5, 5, 2))),
        Case("nn.sampled_softmax_loss", "given sampled_values, an accidental hit", "nn",
             _sampled_softmax, _inputs(_r(10, 4), _r(10), _r(3, 4),
                                       _int([[1], [3], [7]], "int64"))),
        # -- a symbolic batch dim (placeholders [None, ...]): gradients sized at run time
        Case("reduce_mean", "symbolic batch [B,3] all", "reduce",
             lambda m, x: m.reduce_mean(x), _inputs(_r(5, 3)), symbolic=(0,)),
        Case("reduce_mean", "symbolic batch [B,3] axis 0", "reduce",
             lambda m, x: m.reduce_mean(x, axis=0), _inputs(_r(5, 3)), symbolic=(0,)),
        Case("reduce_prod", "symbolic batch [B,3] axis 0, zeros", "reduce",
             lambda m, x: m.reduce_prod(x, axis=0),
             _inputs(_c([0.0, 2.0, 0.0], [3.0, 0.0, 4.0], [1.0, 2.0, 0.0])), symbolic=(0,)),
        Case("where", "symbolic batch, sqrt branch not taken", "elementwise",
             lambda m, x: m.where(m.greater(x, 0.0), m.sqrt(x), m.zeros_like(x)),
             _inputs(_c([-1.0, 0.0], [4.0, 2.0])), symbolic=(0,)),
        Case("pow", "symbolic batch [B,2]^[2], zero base", "broadcast",
             lambda m, x, y: m.pow(x, y),
             _inputs(_c([0.0, 0.0], [2.0, -1.0], [1.5, 0.0]), _c(-1.0, 2.0)), symbolic=(0,)),
        Case("sign", "symbolic batch", "elementwise", lambda m, x: m.sign(x),
             _inputs(_r(3, 2)), symbolic=(0,)),
        Case("reduce_max", "symbolic batch [B,3] axis 0", "reduce",
             lambda m, x: m.reduce_max(x, axis=0), _inputs(_r(5, 3)), symbolic=(0,)),
        Case("add", "symbolic batch [B,3]+[3]", "broadcast", lambda m, x, y: m.add(x, y),
             _inputs(_r(5, 3), _r(3)), symbolic=(0,)),
        Case("multiply", "symbolic batch [B,1]*[B,3]", "broadcast",
             lambda m, x, y: m.multiply(x, y), _inputs(_r(4, 1), _r(4, 3)), symbolic=(0, 1)),
        Case("matmul", "symbolic batch [B,4]@[4,3]", "matmul", lambda m, a, b: m.matmul(a, b),
             _inputs(_r(5, 4), _r(4, 3)), symbolic=(0,)),
        Case("nn.sparse_softmax_cross_entropy_with_logits", "symbolic batch", "nn",
             lambda m, lo, lab: m.reduce_mean(m.nn.sparse_softmax_cross_entropy_with_logits(
                 labels=lab, logits=lo)), _inputs(_r(3, 5), _int([0, 4, 2])),
             symbolic=(0, 1)),
        Case("nn.conv2d", "symbolic batch", "nn",
             lambda m, x, w: m.nn.conv2d(x, w, strides=1, padding="SAME"),
             _inputs(_r(2, 4, 4, 2), _r(3, 3, 2, 2)),
             tf_fn=lambda m, x, w: m.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME"),
             symbolic=(0,)),
        _pool_case("nn.max_pool2d", "symbolic batch", 2, "VALID",
                   _inputs(_r(3, 4, 4, 1)), symbolic=(0,)),
        Case("gather", "symbolic number of ids", "shape", lambda m, p, i: m.gather(p, i),
             _inputs(_r(5, 3), _int([1, 1, 4, 0])), symbolic=(1,)),
        # -- composites: clipping, control flow
        Case("clip_by_global_norm", "norm above clip", "composite", _clip_global(1.0),
             _inputs(_r(2, 3), _r(3))),
        Case("clip_by_global_norm", "norm below clip", "composite", _clip_global(100.0),
             _inputs(_r(2, 3), _r(3))),
        Case("clip_by_global_norm", "norm == clip (a tie)", "composite", _clip_global(13.0),
             _inputs(_c([3.0, 4.0], [0.0, 0.0]), _c(12.0, 0.0))),
        Case("cond", "true branch", "composite",
             lambda m, x, y: m.cond(m.reduce_sum(x) > -100.0, lambda: x * y, lambda: x + y),
             _inputs(_r(2, 3), _r(2, 3))),
        Case("scan", "cumulative product", "composite",
             lambda m, x, a0: m.scan(lambda a, e: a * e + m.sin(e), x, initializer=a0),
             _inputs(_r(4, 3), _r(3))),
        Case("scan", "cond inside the body", "composite",
             lambda m, x, a0: m.scan(lambda a, e: m.cond(m.reduce_sum(e) > 0.0,
                                                          lambda: a * e, lambda: a + e),
                                     x, initializer=a0),
             _inputs(_r(4, 3), _r(3))),
        Case("scan", "no initializer, reverse", "composite",
             lambda m, x: m.scan(lambda a, e: a * m.tanh(e), x, reverse=True),
             _inputs(_r(4, 2))),
        # -- second order: the gradient of a gradient (TF's SqrtGradGrad etc.)
        *[Case(f"second order: {k}", "d/dx of d sum(c f(x))/dx",
               "cancelling" if "softmax" in k else "composite",
               _second_order(k), _inputs(_r(3, 4, lo=lo, hi=2.0)), _second_order(tk))
          for k, tk, lo in [("sqrt", "sqrt", 0.2), ("rsqrt", "math.rsqrt", 0.2),
                            ("tanh", "tanh", -2.0), ("sigmoid", "sigmoid", -2.0),
                            ("exp", "exp", -2.0), ("nn.softmax", "nn.softmax", -2.0),
                            ("nn.log_softmax", "nn.log_softmax", -2.0),
                            ("nn.relu", "nn.relu", -2.0), ("abs", "abs", -2.0),
                            ("math.log1p", "math.log1p", -0.5),
                            ("math.expm1", "math.expm1", -2.0),
                            ("nn.softplus", "nn.softplus", -2.0),
                            ("math.atan", "math.atan", -2.0), ("math.erf", "math.erf", -2.0),
                            ("math.erfc", "math.erfc", -2.0), ("nn.gelu", "nn.gelu", -2.0)]],
        Case("second order: maximum", "ties", "composite",
             lambda m, x, y: m.gradients(m.reduce_sum(m.maximum(x, y) * x), x)[0],
             _inputs(_c(1.0, 2.0, 3.0), _c(1.0, 1.0, 4.0))),
        Case("second order: reduce_max", "ties", "composite",
             lambda m, x: m.gradients(m.reduce_sum(m.square(m.reduce_max(x, axis=1))), x)[0],
             _inputs(_ties)),
        Case("second order: where(sqrt)", "branch not taken", "composite",
             lambda m, x: m.gradients(m.reduce_sum(
                 m.where(m.greater(x, 0.0), m.sqrt(x), m.zeros_like(x))), x)[0],
             _inputs(_c(-1.0, 0.0, 4.0, 2.0))),
        Case("second order: sqrt", "upstream gradient 0 at x = 1", "composite",
             lambda m, x: m.gradients(m.reduce_sum(m.sqrt(x) * (x - 1.0)), x)[0],
             _inputs(_c(1.0, 4.0, 0.25))),
        Case("second order: rsqrt", "upstream gradient 0 at x = 1", "composite",
             lambda m, x: m.gradients(m.reduce_sum(_attr(m, "math.rsqrt" if hasattr(
                 m, "compat") else "rsqrt")(x) * (x - 1.0)), x)[0],
             _inputs(_c(1.0, 4.0, 0.25))),
        Case("second order: reduce_prod", "two zeros", "composite",
             lambda m, x: m.gradients(m.reduce_prod(x), x)[0], _inputs(_c(2.0, 0.0, 0.0, 3.0))),
        Case("second order: pow", "d/dy of d x^y/dx", "composite",
             lambda m, x, y: m.gradients(m.reduce_sum(m.pow(x, y)), x)[0],
             _inputs(_r(3, lo=0.5, hi=2.0), _r(3, lo=0.5, hi=2.0))),
        Case("second order: reduce_prod", "with a zero", "composite",
             lambda m, x: m.gradients(m.reduce_prod(x), x)[0],
             _inputs(_c(2.0, 0.0, 3.0, 0.5))),
        Case("while_loop", "x*y^3", "composite",
             lambda m, x, y: m.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * y),
                                          [m.constant(0), x])[1],
             _inputs(_r(2, 3), _r(2, 3))),
    ]
    cases += array_grad_cases()  # array24
    cases += conv_grad_cases()  # conv25
    cases += segment_grad_cases()  # segment25
    cases += linalg_grad_cases()  # linalg25
    return cases


def conv_grad_cases() -> list[Case]:
    """conv25's convolutions: conv1d, conv2d_transpose (TF's conv2d backprop), depthwise
    and separable; the dilated ones f32 only (TF's CPU kernels refuse f64 there)."""
    return [
        Case("nn.conv1d", "SAME s2", "nn", lambda m, x, w: m.nn.conv1d(x, w, 2, "SAME"),
             _inputs(_r(2, 7, 3), _r(3, 3, 2))),
        Case("nn.conv1d", "VALID dilation 2 (TF CPU: f32 only)", "nn",
             lambda m, x, w: m.nn.conv1d(x, w, 1, "VALID", dilations=2),
             _inputs(_r(1, 8, 2), _r(3, 2, 2)), dtypes=("float32",)),
        Case("nn.conv2d_transpose", "SAME s2", "nn",
             lambda m, x, w: m.nn.conv2d_transpose(x, w, [2, 6, 5, 2], 2, "SAME"),
             _inputs(_r(2, 3, 3, 3), _r(3, 3, 2, 3))),
        Case("nn.conv2d_transpose", "VALID s2, a row no tap reaches", "nn",
             lambda m, x, w: m.nn.conv2d_transpose(x, w, [1, 8, 7, 2], [1, 2, 2, 1], "VALID"),
             _inputs(_r(1, 3, 3, 2), _r(3, 3, 2, 2))),
        Case("nn.conv2d_transpose", "symbolic batch", "nn",
             lambda m, x, w: m.nn.conv2d_transpose(x, w, [m.shape(x)[0], 6, 6, 2], 2, "SAME"),
             _inputs(_r(2, 3, 3, 2), _r(2, 2, 2, 2)), symbolic=(0,)),
        Case("nn.depthwise_conv2d", "SAME s1 m1", "nn",
             lambda m, x, w: m.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"),
             _inputs(_r(2, 5, 4, 3), _r(3, 3, 3, 1))),
        Case("nn.depthwise_conv2d", "VALID s2 m2", "nn",
             lambda m, x, w: m.nn.depthwise_conv2d(x, w, [1, 2, 2, 1], "VALID"),
             _inputs(_r(1, 6, 5, 2), _r(2, 3, 2, 2))),
        Case("nn.depthwise_conv2d", "SAME dilation 2 (TF CPU: f32 only)", "nn",
             lambda m, x, w: m.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME",
                                                   dilations=[2, 2]),
             _inputs(_r(1, 5, 5, 2), _r(2, 2, 2, 2)), dtypes=("float32",)),
        Case("nn.separable_conv2d", "SAME s2 m2", "nn",
             lambda m, x, d, q: m.nn.separable_conv2d(x, d, q, [1, 2, 2, 1], "SAME"),
             _inputs(_r(1, 5, 4, 2), _r(3, 3, 2, 2), _r(1, 1, 4, 3))),
    ]


def array_grad_cases() -> list[Case]:
    """array24's ops: scans (cumprod at zeros, where TF divides), reverse, gather_nd
    (repeated index tuples add up), unstack, top_k and sort (ties), reduce_logsumexp (an
    all -inf row), einsum and tensordot."""
    idx = _int([[1, 2], [0, 0], [1, 2]])
    return [
        *[Case("cumsum", f"exclusive={e} reverse={r}", "reduce",
               lambda m, x, _e=e, _r=r: m.cumsum(x, axis=1, exclusive=_e, reverse=_r),
               _inputs(_r(3, 5)), symbolic=(0,))
          for e in (False, True) for r in (False, True)],
        *[Case("math.cumprod", f"exclusive={e} reverse={r}", "composite",
               lambda m, x, _e=e, _r=r: m.math.cumprod(x, axis=1, exclusive=_e, reverse=_r),
               _inputs(_r(3, 5, lo=0.5, hi=1.5)), symbolic=(0,))
          for e in (False, True) for r in (False, True)],
        Case("math.cumprod", "a zero", "composite",
             lambda m, x: m.math.cumprod(x, axis=0), _inputs(_c(2.0, 0.0, 3.0, 0.5))),
        Case("math.cumprod", "second order", "composite",
             lambda m, x: m.gradients(m.reduce_sum(m.math.cumprod(x, axis=1) * x), x)[0],
             _inputs(_r(2, 4, lo=0.5, hi=1.5))),
        Case("reverse", "axes [0, 2]", "shape", lambda m, x: m.reverse(x, [0, 2]),
             _inputs(_r(2, 3, 4)), symbolic=(0,)),
        Case("gather_nd", "repeated tuples", "shape", lambda m, p, i: m.gather_nd(p, i),
             _inputs(_r(2, 3, 4), idx)),
        Case("unstack", "axis 1", "shape",
             lambda m, x: m.unstack(x, axis=1)[0] * 2.0 + m.unstack(x, axis=1)[2],
             _inputs(_r(4, 3)), symbolic=(0,)),
        Case("math.top_k", "k=2 with ties", "shape", lambda m, x: m.math.top_k(x, 2).values,
             _inputs(_c([1.0, 3.0, 3.0, 0.5], [2.0, -1.0, 2.0, 2.0]))),
        Case("sort", "descending axis 0", "shape",
             lambda m, x: m.sort(x, axis=0, direction="DESCENDING"), _inputs(_r(4, 3))),
        Case("reduce_logsumexp", "axis 1", "nn", lambda m, x: m.reduce_logsumexp(x, axis=1),
             _inputs(_r(3, 5)), symbolic=(0,)),
        Case("reduce_logsumexp", "an all -inf row", "nn",
             lambda m, x: m.reduce_logsumexp(x, axis=1),
             _inputs(_c([-np.inf, -np.inf], [0.0, 1.0]))),
        Case("einsum", "bij,bjk->bik", "matmul",
             lambda m, a, b: m.einsum("bij,bjk->bik", a, b), _inputs(_r(2, 3, 4), _r(2, 4, 5))),
        Case("einsum", "ij,kj with a summed axis: abc,cd->a", "matmul",
             lambda m, a, b: m.einsum("abc,cd->a", a, b), _inputs(_r(2, 3, 4), _r(4, 2))),
        Case("tensordot", "axes ([1, 2], [1, 0])", "matmul",
             lambda m, a, b: m.tensordot(a, b, axes=([1, 2], [1, 0])),
             _inputs(_r(2, 3, 4), _r(4, 3, 5))),
    ]


def segment_grad_cases() -> list[Case]:
    """segment25's ops: every segment reduction (dropped negative ids, an empty segment,
    max/min ties shared as TF does, prod with one and two zeros in a segment), the means,
    scatter_nd and tensor_scatter_nd_* (duplicates add; update's tuples distinct: TF's
    order among duplicates is unspecified)."""
    ids = _int([2, 0, -1, 2, 0, 2])
    sids = _int([0, 0, 2, 2, 2, 3])
    ties = _c([3.0, 1.0], [3.0, 2.0], [5.0, 5.0], [3.0, 2.0], [0.5, 1.0], [-1.0, 2.0])
    zeros = _c([0.0, 1.5], [2.0, 0.0], [5.0, 1.0], [0.0, 2.0], [1.5, 0.0], [-1.0, 0.0])
    idx = _int([[1, 3], [0, 0], [1, 3], [2, 1]])
    uidx = _int([[1, 3], [0, 0], [2, 1]])
    cases = []
    for kind in ("sum", "max", "min", "prod"):
        fam = "reduce" if kind == "sum" else "composite"
        for label, data in (("rand", _r(6, 2, lo=0.5, hi=2.0)), ("ties", ties),
                            ("zeros", zeros)):
            if kind in ("max", "min") and label == "zeros" or \
                    kind in ("sum", "prod") and label == "ties":
                continue
            cases.append(Case(f"math.unsorted_segment_{kind}", label, fam,
                              lambda m, x, i, _k=kind: getattr(m.math,
                                                               f"unsorted_segment_{_k}")(x, i, 4),
                              _inputs(data, ids), symbolic=(0, 1) if label == "rand" else ()))
            cases.append(Case(f"math.segment_{kind}", label, fam,
                              lambda m, x, i, _k=kind: getattr(m.math, f"segment_{_k}")(
                                  x, i, num_segments=4),
                              _inputs(data, sids),
                              tf_fn=lambda m, x, i, _k=kind: getattr(m.math,
                                                                     f"segment_{_k}")(x, i)))
    for fn in ("unsorted_segment_mean", "unsorted_segment_sqrt_n"):
        cases.append(Case(f"math.{fn}", "rand", "reduce",
                          lambda m, x, i, _f=fn: getattr(m.math, _f)(x, i, 4),
                          _inputs(_r(6, 2), ids)))
    cases.append(Case("math.segment_mean", "rand", "reduce",
                      lambda m, x, i: m.math.segment_mean(x, i, num_segments=4),
                      _inputs(_r(6, 2), sids),
                      tf_fn=lambda m, x, i: m.math.segment_mean(x, i)))
    cases.append(Case("scatter_nd", "duplicates", "shape",
                      lambda m, i, u: m.scatter_nd(i, u, [3, 4, 2]), _inputs(idx, _r(4, 2))))
    for fn in ("add", "sub", "max", "min"):
        cases.append(Case(f"tensor_scatter_nd_{fn}", "duplicates", "shape",
                          lambda m, t, i, u, _f=fn: getattr(m, f"tensor_scatter_nd_{_f}")(
                              t, i, u), _inputs(_r(3, 4, 2), idx, _r(4, 2))))
    cases.append(Case("tensor_scatter_nd_update", "distinct", "shape",
                      lambda m, t, i, u: m.tensor_scatter_nd_update(t, i, u),
                      _inputs(_r(3, 4, 2), uidx, _r(3, 2))))
    return cases
def linalg_grad_cases() -> list[Case]:
    """linalg25: tf.linalg's composites (diagonals, bands, trace, matvec, inv(adjoint)),
    the norms (at a zero vector, where TF's clip_by_norm avoids sqrt's NaN), moments and
    the tf.nn additions (swish with a tensor beta, log_poisson_loss's Stirling term,
    weighted_cross_entropy, lrn for each of its three power forms, sufficient statistics
    then normalize_moments)."""
    def lrn(r: int, bias: float, alpha: float, beta: float) -> Callable[..., Any]:
        return lambda m, x: m.nn.local_response_normalization(x, r, bias, alpha, beta)
    return [
        *[Case("linalg.diag_part", f"k={k}", "shape",
               lambda m, x, _k=k: m.linalg.diag_part(x, k=_k), _inputs(_r(2, 3, 4)),
               symbolic=(0,)) for k in (0, 1, -2)],
        *[Case("linalg.diag", f"k={k}", "shape", lambda m, x, _k=k: m.linalg.diag(x, k=_k),
               _inputs(_r(2, 3)), symbolic=(0,)) for k in (0, -1)],
        Case("linalg.trace", "[2,3,3]", "reduce", lambda m, x: m.linalg.trace(x),
             _inputs(_r(2, 3, 3))),
        Case("linalg.band_part", "(1, 0)", "shape", lambda m, x: m.linalg.band_part(x, 1, 0),
             _inputs(_r(3, 4))),
        Case("linalg.matvec", "[2,3,4]x[2,4]", "matmul", lambda m, a, b: m.linalg.matvec(a, b),
             _inputs(_r(2, 3, 4), _r(2, 4))),
        Case("linalg.inv", "adjoint", "linalg", lambda m, a: m.linalg.inv(a, adjoint=True),
             _inputs(_spd(3))),
        Case("linalg.cholesky", "spd 4x4 (symmetrized)", "linalg",
             lambda m, a: m.linalg.cholesky((a + m.linalg.matrix_transpose(a)) * 0.5),
             _inputs(_spd(4))),
        *[Case("linalg.triangular_solve", f"lower={lo} adjoint={adj}", "linalg",
               lambda m, a, b, _l=lo, _a=adj: m.linalg.triangular_solve(a, b, _l, _a),
               _inputs(_spd(3), _r(3, 2))) for lo in (True, False) for adj in (False, True)],
        Case("linalg.triangular_solve", "batched", "linalg",
             lambda m, a, b: m.linalg.triangular_solve(a, b),
             lambda dt, rng: [np.stack([_spd(3)(dt, rng), _spd(3)(dt, rng)]),
                              rng.uniform(-2, 2, (2, 3, 2)).astype(dt)]),
        Case("linalg.cholesky_solve", "spd 3x3 (symmetrized)", "linalg",
             lambda m, a, b: m.linalg.cholesky_solve(m.linalg.cholesky(
                 (a + m.linalg.matrix_transpose(a)) * 0.5), b), _inputs(_spd(3), _r(3, 2))),
        Case("linalg.slogdet", "log|det| of [2,4,4]", "linalg",
             lambda m, a: m.linalg.slogdet(a)[1], _inputs(_r(2, 4, 4))),
        Case("linalg.logdet", "spd 3x3 (symmetrized)", "linalg",
             lambda m, a: m.linalg.logdet((a + m.linalg.matrix_transpose(a)) * 0.5),
             _inputs(_spd(3))),
        Case("linalg.cholesky", "batched [2,3,3] (lower triangle only)", "linalg",
             lambda m, a: m.linalg.cholesky(a),
             lambda dt, rng: [np.stack([_spd(3)(dt, rng), _spd(3)(dt, rng)])]),
        *[Case("norm", f"ord={o} axis={a}", "reduce",
               lambda m, x, _o=o, _a=a: m.norm(x, ord=_o, axis=_a), _inputs(_r(3, 4)))
          for o, a in [("euclidean", None), (1, 1), (np.inf, 0), (3, 1), ("fro", [0, 1]),
                       (1, [0, 1]), (np.inf, [0, 1])]],
        Case("norm", "a zero vector", "reduce", lambda m, x: m.norm(x, axis=1),
             _inputs(_c([0.0, 0.0], [3.0, 4.0]))),
        *[Case("clip_by_norm", f"clip {c} axes {a}", "composite",
               lambda m, x, _c=c, _a=a: m.clip_by_norm(x, _c, axes=_a), _inputs(_r(3, 4)))
          for c, a in [(1.0, None), (1.0, [1]), (100.0, [1])]],
        Case("clip_by_norm", "a zero row", "composite",
             lambda m, x: m.clip_by_norm(x, 1.0, axes=[1]),
             _inputs(_c([0.0, 0.0], [3.0, 4.0]))),
        *[Case(f"math.{fn}", "axis 1", "reduce",
               lambda m, x, _f=fn: getattr(m.math, _f)(x, axis=1), _inputs(_r(3, 4)),
               symbolic=(0,)) for fn in ("reduce_variance", "reduce_std",
                                         "reduce_euclidean_norm")],
        Case("nn.swish", "random", "composite", lambda m, x: m.nn.swish(x), _inputs(_r(3, 4))),
        Case("nn.silu", "a tensor beta", "composite", lambda m, x, b: m.nn.silu(x, b),
             _inputs(_r(3, 4), lambda dt, rng: np.array(1.7, dt))),
        Case("nn.log_poisson_loss", "full", "composite",
             lambda m, z, c: m.nn.log_poisson_loss(z, c, compute_full_loss=True),
             _inputs(_c(0.0, 0.5, 2.0, 7.0), _r(4))),
        Case("nn.weighted_cross_entropy_with_logits", "pos_weight 1.5", "nn",
             lambda m, z, x: m.nn.weighted_cross_entropy_with_logits(z, x, 1.5),
             _inputs(_r(3, 4, lo=0.0, hi=1.0), _r(3, 4, lo=-5.0, hi=5.0))),
        *[Case("nn.local_response_normalization", f"r={p[0]} beta={p[3]}", "nn", lrn(*p),
               _inputs(_r(2, 2, 2, 5)), dtypes=("float32",))
          for p in [(2, 1.0, 1.0, 0.5), (1, 2.0, 0.5, 1.0), (3, 1.0, 0.1, 0.75)]],
        Case("nn.normalize_moments", "of sufficient_statistics, shifted", "composite",
             lambda m, x, s: m.nn.normalize_moments(*m.nn.sufficient_statistics(
                 x, [0], s))[1], _inputs(_r(4, 3), _c(0.25))),
    ]


# ----------------------------------------------------------------------------- runners


def _tf() -> Any:
    import tensorflow as tf
    tf.get_logger().setLevel("ERROR")  # (TF1 optimizers' deprecation notes)
    return tf


def run_tf(case: Case, xs: list[np.ndarray], w_seed: int) -> tuple[list[Any], np.ndarray]:
    """TensorFlow's gradients (TF1 graph mode, grappler off) and the upstream ``w``."""
    tf = _tf()
    fn = case.tf_fn or case.fn
    g = tf.Graph()
    with g.as_default():
        phs = [tf.compat.v1.placeholder(tf.as_dtype(x.dtype), _shape(case, i, x))
               for i, x in enumerate(xs)]
        y = fn(tf, *phs)
        y = tf.convert_to_tensor(y)
        rng = np.random.default_rng(w_seed)
        cfg = tf.compat.v1.ConfigProto()
        cfg.graph_options.rewrite_options.disable_meta_optimizer = True
        with tf.compat.v1.Session(graph=g, config=cfg) as s:
            y_shape = s.run(tf.shape(y), dict(zip(phs, xs)))  # (symbolic dims)
        w = rng.uniform(0.5, 1.5, y_shape).astype(y.dtype.as_numpy_dtype)
        wph = tf.compat.v1.placeholder(y.dtype, y.shape)
        floats = [p for p, x in zip(phs, xs) if x.dtype.kind == "f"]
        grads = tf.compat.v1.gradients(y, floats, grad_ys=[wph])
        dense = [None if gr is None else tf.convert_to_tensor(gr) for gr in grads]
        with tf.compat.v1.Session(graph=g, config=cfg) as s:
            feed = {p: x for p, x in zip(phs, xs)}
            feed[wph] = w
            fetch = [d for d in dense if d is not None]
            vals = iter(s.run(fetch, feed) if fetch else [])
            return [None if d is None else next(vals) for d in dense], w


def _tfc_result_shape(case: Case, xs: list[np.ndarray]) -> tuple[int, ...]:
    import tfc
    with tfc.Graph().as_default():
        phs = [tfc.placeholder(tfc.as_dtype(x.dtype), list(x.shape)) for x in xs]
        return tuple(tfc.convert_to_tensor(case.fn(tfc, *phs)).shape)


def run_tfc(case: Case, xs: list[np.ndarray], w: np.ndarray, backend: str) -> list[Any]:
    import tfc
    g = tfc.Graph()
    with g.as_default():
        phs = [tfc.placeholder(tfc.as_dtype(x.dtype), _shape(case, i, x))
               for i, x in enumerate(xs)]
        y = tfc.convert_to_tensor(case.fn(tfc, *phs))
        wph = tfc.placeholder(y.dtype, list(y.shape))
        floats = [p for p, x in zip(phs, xs) if x.dtype.kind == "f"]
        grads = tfc.gradients(y, floats, grad_ys=[wph])
        dense = [None if gr is None else (gr.to_dense() if isinstance(gr, tfc.IndexedSlices)
                                          else gr) for gr in grads]
        with tfc.Session(backend=backend) as s:
            feed = {p: x for p, x in zip(phs, xs)}
            feed[wph] = w
            fetch = [d for d in dense if d is not None]
            vals = iter(s.run(fetch, feed) if fetch else [])
            return [None if d is None else np.asarray(next(vals)) for d in dense]


def compare(a: Any, b: Any, k: float) -> str:
    """'' when tfc's ``a`` agrees with TF's ``b``, else what differs."""
    if a is None or b is None:
        if a is None and b is None:
            return ""
        def kind(v: Any) -> str:
            return "None" if v is None else "a tensor"
        return f"tfc {kind(a)}, TF {kind(b)}"
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return f"shape {a.shape} vs TF {b.shape}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs TF {b.dtype}"
    an, bn = np.isnan(a), np.isnan(b)
    if (an != bn).any():
        i = np.argwhere(an != bn)[0]
        return f"NaN differs at {tuple(i)}: tfc {a[tuple(i)]} TF {b[tuple(i)]}"
    ai, bi = np.isinf(a), np.isinf(b)
    if (ai != bi).any() or (a[ai] != b[bi]).any():
        i = np.argwhere((ai != bi) | (ai & (a != b)))[0]
        return f"inf differs at {tuple(i)}: tfc {a[tuple(i)]} TF {b[tuple(i)]}"
    fin = np.isfinite(b)
    if not fin.any():
        return ""
    scale = float(np.abs(b[fin]).max())
    eps = float(np.finfo(a.dtype).eps)
    err = np.abs(a[fin].astype(np.float64) - b[fin].astype(np.float64))
    bound = k * eps * (np.abs(b[fin]).astype(np.float64) + scale)
    if (err > bound).any():
        j = int(np.argmax(err - bound))
        return (f"max |diff| {err.max():.3g} (bound {bound[j]:.3g}, scale {scale:.3g}); "
                f"e.g. tfc {a[fin][j]!r} TF {b[fin][j]!r}")
    return ""


def run_case(case: Case, dtype: str, backends: Sequence[str], seed: int) -> list[Result]:
    rng = np.random.default_rng(seed)
    xs = case.make(np.dtype(dtype), rng)
    try:
        want, w = run_tf(case, xs, seed + 1)
    except Exception as e:  # noqa: BLE001 (a case TF cannot build is reported, not fatal)
        tf_err = f"TF: {type(e).__name__}: {str(e).splitlines()[0]}"[:200]
        w = np.ones(1)  # (unused: tfc is only asked whether it raises too)
        out = []
        for be in backends:
            try:
                run_tfc(case, xs, np.ones(_tfc_result_shape(case, xs)), be)
            except Exception as e2:  # noqa: BLE001
                # both raise: agreement (tfc's error is a clear one, not a crash)
                out.append(Result(case, dtype, be, "ok", f"both raise; tfc: {e2}"[:200]))
                continue
            out.append(Result(case, dtype, be, "ERROR", tf_err + "; tfc returned values"))
        return out
    k32, k64 = TOL[case.family]
    k = k32 if dtype == "float32" else k64
    out = []
    for be in backends:
        try:
            got = run_tfc(case, xs, w, be)
        except Exception as e:  # noqa: BLE001
            out.append(Result(case, dtype, be, "ERROR", f"tfc: {type(e).__name__}: {e}"[:300]))
            continue
        diffs = [f"d/dx{i}: {d}" for i, (a, b) in enumerate(zip(got, want))
                 if (d := compare(a, b, k))]
        out.append(Result(case, dtype, be, "DIVERGES" if diffs else "ok", "; ".join(diffs)))
    return out


# ----------------------------------------------------------------------------- API cases


@dataclass
class ApiCase:
    name: str
    check: Callable[[str], str]  # backend -> '' or what differs
    results: list[str] = field(default_factory=list)


def _api_unconnected(backend: str) -> str:
    import tfc
    tf = _tf()
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.float32, [2])
        z = tfc.placeholder(tfc.float32, [2])
        i = tfc.placeholder(tfc.int32, [2])
        y = x * 2.0 + tfc.cast(i, tfc.float32)
        got = tfc.gradients(y, [x, z, i])
    with tf.Graph().as_default():
        tx = tf.compat.v1.placeholder(tf.float32, [2])
        tz = tf.compat.v1.placeholder(tf.float32, [2])
        ti = tf.compat.v1.placeholder(tf.int32, [2])
        ty = tx * 2.0 + tf.cast(ti, tf.float32)
        want = tf.compat.v1.gradients(ty, [tx, tz, ti])
    g_none = [g is None for g in got]
    w_none = [g is None for g in want]
    return "" if g_none == w_none else f"None pattern tfc {g_none} TF {w_none}"


def _run_both(backend: str, build_tfc: Callable[[Any], tuple[list[Any], dict]],
              build_tf: Callable[[Any], tuple[list[Any], dict]], k: float = 4) -> str:
    import tfc
    tf = _tf()
    with tfc.Graph().as_default():
        fetch, feed = build_tfc(tfc)
        fetch = [f.to_dense() if isinstance(f, tfc.IndexedSlices) else f for f in fetch]
        with tfc.Session(backend=backend) as s:
            got = s.run(fetch, feed)
    with tf.Graph().as_default():
        fetch, feed = build_tf(tf)
        fetch = [tf.convert_to_tensor(f) for f in fetch]
        with tf.compat.v1.Session() as s:
            want = s.run(fetch, feed)
    return "; ".join(d for a, b in zip(got, want) if (d := compare(a, b, k)))


def _api_several_ys(backend: str) -> str:
    x0 = np.array([0.5, -1.0, 2.0], np.float32)

    def build(m: Any) -> tuple[list[Any], dict]:
        ph = (m.compat.v1.placeholder if hasattr(m, "compat") else m.placeholder)
        x = ph(m.float32, [3])
        y1, y2 = x * x, m.reduce_sum(m.sin(x))
        gy = m.constant(np.array([1.0, 2.0, 3.0], np.float32))
        return [m.gradients([y1, y2], [x])[0],
                m.gradients([y1, y2], [x], grad_ys=[gy, None])[0],
                m.gradients(y1, x, grad_ys=gy)[0]], {x: x0}
    return _run_both(backend, build, build)


def _api_stop_gradient(backend: str) -> str:
    x0 = np.array([0.5, -1.0, 2.0], np.float64)

    def build(m: Any) -> tuple[list[Any], dict]:
        ph = (m.compat.v1.placeholder if hasattr(m, "compat") else m.placeholder)
        x = ph(m.float64, [3])
        y = m.reduce_sum(x * m.stop_gradient(x * x) + m.stop_gradient(x))
        return [m.gradients(y, x)[0]], {x: x0}
    return _run_both(backend, build, build)


def _api_gather_slices(backend: str) -> str:
    """gather's gradient is IndexedSlices in both, and adds up with a dense one."""
    import tfc
    tf = _tf()
    with tfc.Graph().as_default():
        p = tfc.placeholder(tfc.float32, [4, 2])
        g = tfc.gradients(tfc.gather(p, [1, 1, 3]), p)[0]
        g2 = tfc.gradients(tfc.gather(p, [1, 1, 3]) * 2.0, p)[0]
        g3 = tfc.gradients(tfc.reduce_sum(tfc.gather(p, [2])) + tfc.reduce_sum(p * p), p)[0]
        g4 = tfc.gradients(tfc.gather(p, [1, 0], axis=1), p)[0]
        g5 = tfc.gradients(tfc.gather(p, [[1, 2], [3, 3]]), p)[0]
        g6 = tfc.gradients(tfc.gather(tfc.gather(p, [3, 1, 1]), [0, 2]), p)[0]
        kinds = [type(v).__name__ for v in (g, g2, g3, g4, g5, g6)]
    with tf.Graph().as_default():
        tp = tf.compat.v1.placeholder(tf.float32, [4, 2])
        t = tf.compat.v1.gradients(tf.gather(tp, [1, 1, 3]), tp)[0]
        t2 = tf.compat.v1.gradients(tf.gather(tp, [1, 1, 3]) * 2.0, tp)[0]
        t3 = tf.compat.v1.gradients(tf.reduce_sum(tf.gather(tp, [2]))
                                    + tf.reduce_sum(tp * tp), tp)[0]
        t4 = tf.compat.v1.gradients(tf.gather(tp, [1, 0], axis=1), tp)[0]
        t5 = tf.compat.v1.gradients(tf.gather(tp, [[1, 2], [3, 3]]), tp)[0]
        t6 = tf.compat.v1.gradients(tf.gather(tf.gather(tp, [3, 1, 1]), [0, 2]), tp)[0]
        tkinds = ["IndexedSlices" if isinstance(v, tf.IndexedSlices) else "Tensor"
                  for v in (t, t2, t3, t4, t5, t6)]
    if kinds != tkinds:
        return f"kinds tfc {kinds} TF {tkinds}"
    p0 = np.arange(8, dtype=np.float32).reshape(4, 2)

    def build(m: Any) -> tuple[list[Any], dict]:
        ph = (m.compat.v1.placeholder if hasattr(m, "compat") else m.placeholder)
        p = ph(m.float32, [4, 2])
        y = m.reduce_sum(m.gather(p, [2])) + m.reduce_sum(p * p) + m.reduce_sum(
            m.gather(p, [0, 0]) * 3.0)
        return [m.gradients(y, p)[0]], {p: p0}
    return _run_both(backend, build, build)


def _api_int_y(backend: str) -> str:
    import tfc
    tf = _tf()
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.float32, [2])
        try:
            got = repr(tfc.gradients(tfc.cast(x, tfc.int32), x))
        except Exception as e:  # noqa: BLE001
            got = type(e).__name__
    with tf.Graph().as_default():
        tx = tf.compat.v1.placeholder(tf.float32, [2])
        try:
            want = repr(tf.compat.v1.gradients(tf.cast(tx, tf.int32), tx))
        except Exception as e:  # noqa: BLE001
            want = type(e).__name__
    return "" if (got == "[None]") == (want == "[None]") else f"tfc {got}, TF {want}"


def _optimizer_steps(make: Callable[[Any], Any], sparse: bool = False
                     ) -> Callable[[str], str]:
    """Three minimize steps of ``make(train)`` on a small loss (through a gather when
    ``sparse``: IndexedSlices gradients with a repeated row), tfc against TF1's optimizer."""
    w0 = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], np.float32)
    x0 = np.array([[1.0, -2.0], [0.5, 0.5]], np.float32)

    def check(backend: str) -> str:
        import tfc
        tf = _tf()
        out = []
        for m, is_tf in ((tfc, False), (tf, True)):
            v1 = m.compat.v1 if is_tf else m
            g = (tf.Graph() if is_tf else tfc.Graph())
            with g.as_default():
                w = v1.Variable(w0, name="w")
                x = v1.placeholder(m.float32, [2, 2])
                rows = m.gather(w, [2, 0, 2]) if sparse else w
                loss = m.reduce_sum(m.square(m.matmul(x, rows[:2] if sparse else rows[:2])
                                             - 1.0)) + m.reduce_sum(m.sin(rows))
                train = v1.train if is_tf else tfc.train
                op = make(train).minimize(loss)
                init = v1.global_variables_initializer()
                sess = (v1.Session(graph=g) if is_tf else tfc.Session(backend=backend))
                with sess:
                    sess.run(init)
                    for _ in range(3):
                        sess.run(op, {x: x0})
                    out.append(sess.run(w))
        return compare(out[0], out[1], 64)
    return check


def _ph(m: Any) -> Any:
    return m.compat.v1.placeholder if hasattr(m, "compat") else m.placeholder


def _api_intermediate_xs(backend: str) -> str:
    """xs that are op results (also used elsewhere), repeated xs and ys, y among xs."""
    x0 = np.array([0.5, -1.0, 2.0], np.float64)

    def build(m: Any) -> tuple[list[Any], dict]:
        x = _ph(m)(m.float64, [3])
        h = m.sin(x) * x
        y = m.reduce_sum(h * h) + m.reduce_sum(h)
        g = m.gradients([y, y, h], [h, x, x, h, y])
        return g, {x: x0}
    return _run_both(backend, build, build, k=8)


def _api_cond_untaken(backend: str) -> str:
    """An input used only by the branch not taken gets zeros (TF's cond_v2), not None."""
    x0 = np.array([0.5, -1.0], np.float32)
    y0 = np.array([2.0, 3.0], np.float32)

    def build(m: Any) -> tuple[list[Any], dict]:
        x = _ph(m)(m.float32, [2])
        y = _ph(m)(m.float32, [2])
        p = _ph(m)(m.bool, [])
        z = m.cond(p, lambda: x * 2.0, lambda: y * 3.0)
        return m.gradients(z, [x, y]), {x: x0, y: y0, p: True}
    return _run_both(backend, build, build)


def _api_nondifferentiable_paths(backend: str) -> str:
    """x reaching y only through ops without a gradient: None in both."""
    import tfc
    tf = _tf()
    pats = []
    for m, is_tf in ((tfc, False), (tf, True)):
        g = tf.Graph() if is_tf else tfc.Graph()
        with g.as_default():
            x = _ph(m)(m.float32, [2, 3])
            ys = [m.zeros_like(x), m.ones_like(x), m.cast(m.argmax(x, axis=1), m.float32),
                  m.cast(m.shape(x), m.float32), m.cast(m.greater(x, 0.0), m.float32),
                  m.one_hot(m.argmin(x, axis=1), 3), m.floor(x),
                  m.stop_gradient(x) * 2.0]
            gr = m.gradients if not is_tf else tf.compat.v1.gradients
            pats.append([gr(y, x)[0] is None for y in ys])
    return "" if pats[0] == pats[1] else f"None pattern tfc {pats[0]} TF {pats[1]}"


def _api_cond_false(backend: str) -> str:
    x0 = np.array([0.5, -1.0], np.float64)

    def build(m: Any) -> tuple[list[Any], dict]:
        x = _ph(m)(m.float64, [2])
        p = _ph(m)(m.bool, [])
        z = m.cond(p, lambda: m.sin(x), lambda: m.cond(m.reduce_sum(x) < 0.0,
                                                       lambda: x * x * x, lambda: x))
        return m.gradients(z, [x]), {x: x0, p: False}
    return _run_both(backend, build, build)


def _api_optimizer_none(backend: str) -> str:
    """compute_gradients: (None, v) for a variable the loss does not use; minimize of a
    loss with no gradient at all is an error in both."""
    import tfc
    tf = _tf()
    got = []
    for m, is_tf in ((tfc, False), (tf, True)):
        v1 = m.compat.v1 if is_tf else m
        g = tf.Graph() if is_tf else tfc.Graph()
        with g.as_default():
            a = v1.Variable(np.ones(2, np.float32), name="a")
            b = v1.Variable(np.ones(2, np.float32), name="b")
            opt = v1.train.GradientDescentOptimizer(0.1)
            pattern = [gr is None for gr, _ in opt.compute_gradients(m.reduce_sum(a * a),
                                                                     var_list=[a, b])]
            try:
                opt.minimize(m.cast(m.argmax(a, 0), m.float32), var_list=[a, b])
                raised = False
            except (ValueError, tfc.TfcError):
                raised = True
            got.append((pattern, raised))
    return "" if got[0] == got[1] else f"tfc {got[0]} TF {got[1]}"


def _api_variable_xs(backend: str) -> str:
    """The gradient with respect to a Variable itself (TF1: its read)."""
    import tfc
    tf = _tf()
    w0 = np.array([[0.1, 0.2], [0.3, -0.4]], np.float32)
    out = []
    for m, is_tf in ((tfc, False), (tf, True)):
        v1 = m.compat.v1 if is_tf else m
        g = tf.Graph() if is_tf else tfc.Graph()
        with g.as_default():
            w = v1.Variable(w0, name="w")
            loss = m.reduce_sum(m.tanh(m.matmul(w, w)))
            grad = v1.gradients(loss, [w])[0]
            sess = v1.Session(graph=g) if is_tf else tfc.Session(backend=backend)
            with sess:
                sess.run(v1.global_variables_initializer())
                out.append(sess.run(grad))
    return compare(out[0], out[1], 16)


API_CASES = [
    ApiCase("xs that are intermediates, repeated xs and ys, y among xs", _api_intermediate_xs),
    ApiCase("cond: input of the branch not taken", _api_cond_untaken),
    ApiCase("gradient with respect to a Variable", _api_variable_xs),
    ApiCase("paths through non-differentiable ops -> None", _api_nondifferentiable_paths),
    ApiCase("compute_gradients None pairs; minimize without gradients", _api_optimizer_none),
    ApiCase("cond: false branch, nested cond", _api_cond_false),
    ApiCase("GradientDescentOptimizer 3 steps",
            _optimizer_steps(lambda t: t.GradientDescentOptimizer(0.1))),
    ApiCase("MomentumOptimizer 3 steps",
            _optimizer_steps(lambda t: t.MomentumOptimizer(0.1, 0.9))),
    ApiCase("MomentumOptimizer nesterov 3 steps, sparse",
            _optimizer_steps(lambda t: t.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
                             sparse=True)),
    ApiCase("AdagradOptimizer 3 steps", _optimizer_steps(lambda t: t.AdagradOptimizer(0.1))),
    ApiCase("AdagradOptimizer 3 steps, sparse",
            _optimizer_steps(lambda t: t.AdagradOptimizer(0.1), sparse=True)),
    ApiCase("RMSPropOptimizer 3 steps",
            _optimizer_steps(lambda t: t.RMSPropOptimizer(0.01, momentum=0.5))),
    ApiCase("RMSPropOptimizer centered 3 steps, sparse",
            _optimizer_steps(lambda t: t.RMSPropOptimizer(0.01, momentum=0.5, centered=True),
                             sparse=True)),
    ApiCase("AdamOptimizer 3 steps", _optimizer_steps(lambda t: t.AdamOptimizer(0.1))),
    ApiCase("AdamOptimizer 3 steps, sparse",
            _optimizer_steps(lambda t: t.AdamOptimizer(0.1), sparse=True)),
    ApiCase("unconnected x and integer x -> None", _api_unconnected),
    ApiCase("several ys, grad_ys with None", _api_several_ys),
    ApiCase("stop_gradient", _api_stop_gradient),
    ApiCase("gather -> IndexedSlices; sparse + dense", _api_gather_slices),
    ApiCase("gradient of an integer y", _api_int_y),
]


# ----------------------------------------------------------------------------- main


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer cases (a few minutes)")
    ap.add_argument("--backend", choices=["llvm", "reference"], action="append",
                    help="tfc backend(s) to check (default: both)")
    ap.add_argument("--only", help="only ops whose name contains this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--points", type=int, default=None,
                    help="random points per case (default 3; 1 with --quick)")
    args = ap.parse_args(argv)
    # the reference backend computes the kinks' inf and NaN on purpose
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    backends = args.backend or ["llvm", "reference"]
    points = args.points or (1 if args.quick else 3)
    tf = _tf()
    from tfc.version import __version__ as tfc_version
    print(f"TensorFlow {tf.__version__} (CPU), tfc {tfc_version}, numpy {np.__version__}; "
          f"CPU: {_cpu()}; backends: {', '.join(backends)}")
    results: list[Result] = []
    for n, case in enumerate(build_cases()):
        if args.quick and not case.quick:
            continue
        if args.only and args.only not in case.op:
            continue
        dtypes = case.dtypes if not args.quick else case.dtypes[-1:] if case.family in (
            "shape",) else case.dtypes
        for dt in dtypes:
            seen: list[list[np.ndarray]] = []
            for p in range(points):
                seed = args.seed * 100_000 + p * 1000 + n
                xs = case.make(np.dtype(dt), np.random.default_rng(seed))
                if any(all(np.array_equal(a, b, equal_nan=True) for a, b in zip(xs, o))
                       for o in seen):
                    continue  # fixed inputs (kinks): once
                seen.append(xs)
                results += run_case(case, dt, backends, seed)
    # table per op
    by_op: dict[str, list[Result]] = {}
    for r in results:
        by_op.setdefault(r.case.op, []).append(r)
    print(f"\n{'op':46s} {'cases':>5s} {'ok':>4s} {'diverge':>7s} {'error':>5s}  tol k(f32/f64)")
    for op, rs in by_op.items():
        k = TOL[rs[0].case.family]
        print(f"{op:46s} {len(rs):5d} {sum(r.status == 'ok' for r in rs):4d} "
              f"{sum(r.status == 'DIVERGES' for r in rs):7d} "
              f"{sum(r.status == 'ERROR' for r in rs):5d}  {k[0]:g}/{k[1]:g}")
    api_bad = 0
    print("\nAPI semantics (tfc.gradients vs tf.compat.v1.gradients):")
    for ac in API_CASES:
        if args.only:
            break
        for be in backends:
            try:
                d = ac.check(be)
            except Exception as e:  # noqa: BLE001
                d = f"ERROR {type(e).__name__}: {e}"[:300]
            key = ("api", ac.name)
            verdict = KNOWN[key].verdict if d and key in KNOWN else ("NEW" if d else "ok")
            api_bad += verdict == "NEW"
            print(f"  [{be}] {ac.name}: {verdict}{' - ' + d if d else ''}"
                  f"{' (' + KNOWN[key].reason + ')' if d and key in KNOWN else ''}")
    print("\nDivergences:")
    new = api_bad
    for r in results:
        if r.status == "ok":
            continue
        known = KNOWN.get((r.case.op, r.case.label))
        verdict = known.verdict if known else "NEW"
        new += verdict == "NEW"
        print(f"  {verdict:8s} {r.case.op} [{r.case.label}] {r.dtype} {r.backend}: "
              f"{r.status} {r.detail}" + (f"\n           reason: {known.reason}" if known else ""))
    fixed = [(key, kn) for key, kn in KNOWN.items() if kn.verdict == "FIXED"]
    if fixed and not args.only:
        print("\nFixed this session (each has a regression test in tests/ops/*_grad.py):")
        for (op, label), kn in fixed:
            now = [r.status for r in results if (r.case.op, r.case.label) == (op, label)]
            bad = sum(st != "ok" for st in now)
            state = ("agrees now" if now and not bad else
                     f"still differs in {bad} of {len(now)} checks" if now else "not run")
            print(f"  FIXED    {op} [{label}]: {kn.reason} ({state})")
    print(f"\n{len(results)} op checks, {sum(r.status == 'ok' for r in results)} agree; "
          f"{new} new divergence(s)")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
