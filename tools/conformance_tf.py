"""tfc's ops against TensorFlow's: forward values, op by op.

For every public op-building function of ``tfc`` (top level and ``tfc.nn``) this runs the
same computation in TensorFlow (eager, CPU) and in tfc on the llvm and the reference
backends, over seeded random inputs, special values (NaN, +-inf, +-0, subnormals, huge,
ties, negative operands, integer extremes) and shapes with broadcasting, scalars and 0-size
dims, then compares:

- bitwise where TensorFlow is exact (integer ops, comparisons, max/min, abs, neg, floor,
  selection, data movement): NaN matches any NaN, but +0 and -0 differ;
- in ulps of the result dtype for floating element-wise math (a bound per op family);
- for reductions and contractions, relative to ``sum|terms| * eps * n``.

TensorFlow's CPU kernels run with subnormals flushed to zero (FTZ/DAZ) in float32 and
float64; tfc keeps IEEE gradual underflow. So a tfc result that is subnormal where
TensorFlow's is zero counts as agreeing, the float32/float64 special values hold no
subnormal, and a separate "subnormal" case per element-wise op shows the difference
(EXPECTED).

A case where both raise agrees; where only one raises it is a divergence. Each divergence
is listed FIXED (a tfc bug this tool found, now fixed: the fix has a regression test in the
tfc suite that does not need TensorFlow), EXPECTED (a documented difference) or NEW.

It is a tool, not a test (CI has no TensorFlow). Usage::

    python tools/conformance_tf.py [--quick] [--ops NAME,...] [--backends llvm,reference]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tfc  # noqa: E402

FLOATS = (np.float16, np.float32, np.float64)
INTS = (np.int32, np.int64)
NUMERIC = FLOATS + INTS
SIGNED = NUMERIC

Inputs = list[np.ndarray]


# ---- comparison ---------------------------------------------------------------------------

@dataclass
class Verdict:
    ok: bool
    err: float = 0.0          # ulps, or bound-relative error, or 0 for exact
    detail: str = ""


def _ordered(a: np.ndarray) -> np.ndarray:
    """Float bits as integers ordered like the floats (+0 and -0 both 0)."""
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    i = a.view(bits).astype(np.int64)
    mag = i & ((1 << (8 * a.dtype.itemsize - 1)) - 1)
    return np.where(i < 0, -mag, mag)


def _first_bad(mask: np.ndarray, got: np.ndarray, want: np.ndarray) -> str:
    idx = tuple(int(i[0]) for i in np.nonzero(np.atleast_1d(mask)))
    g, w = np.atleast_1d(got), np.atleast_1d(want)
    return f"at {idx}: tfc {g[idx]!r} tf {w[idx]!r}"


def compare(got: np.ndarray, want: np.ndarray, mode: str, ulps: float,
            bound: np.ndarray | None) -> Verdict:
    if got.shape != want.shape:
        return Verdict(False, float("inf"), f"shape {got.shape} != tf {want.shape}")
    if got.dtype != want.dtype:
        return Verdict(False, float("inf"), f"dtype {got.dtype} != tf {want.dtype}")
    if got.size == 0:
        return Verdict(True)
    if got.dtype in (np.float32, np.float64):  # TF flushed a subnormal result to zero
        flushed = (want == 0) & (got != 0) & (np.abs(got) < np.finfo(got.dtype).tiny)
        got = np.where(flushed, want, got)
    if not np.issubdtype(got.dtype, np.floating):
        bad = got != want
        return Verdict(not bad.any(), float(bad.any()), _first_bad(bad, got, want)
                       if bad.any() else "")
    gn, wn = np.isnan(got), np.isnan(want)
    if (gn != wn).any():
        return Verdict(False, float("inf"), "NaN " + _first_bad(gn != wn, got, want))
    if mode == "exact":
        bad = ~gn & ((got != want) | (np.signbit(got) != np.signbit(want)))
        return Verdict(not bad.any(), float(bad.any()), _first_bad(bad, got, want)
                       if bad.any() else "")
    gi, wi = np.isinf(got), np.isinf(want)
    infbad = (gi | wi) & (got != want)
    if infbad.any():
        return Verdict(False, float("inf"), "inf " + _first_bad(infbad, got, want))
    fin = ~gn & ~gi & ~wi
    if mode == "ulp":
        d = np.abs(_ordered(got) - _ordered(want))
        d = np.where(fin, d, 0)
        worst = float(d.max())
        bad = d > ulps
        return Verdict(worst <= ulps, worst, _first_bad(bad, got, want) if bad.any() else "")
    assert bound is not None
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    b = np.broadcast_to(np.asarray(bound, np.float64), err.shape)
    rel = np.where(fin, err / np.maximum(b, np.finfo(np.float64).tiny), 0)
    worst = float(rel.max())
    bad = rel > 1.0
    return Verdict(worst <= 1.0, worst, _first_bad(bad, got, want) if bad.any() else "")


# ---- op specifications ----------------------------------------------------------------------

@dataclass
class Spec:
    """One public function: how tfc and TensorFlow compute it, and the inputs to try.

    ``tfc_fn`` and ``tf_fn`` take the input arrays' tensors (placeholders for tfc);
    ``cases(rng, quick)`` yields (label, inputs); ``mode`` is exact / ulp / bound, with
    ``ulps`` per dtype or ``bound(inputs, want)`` the allowed absolute error."""

    name: str
    tfc_fn: Callable[..., Any]
    tf_fn: Callable[..., Any]
    cases: Callable[[np.random.Generator, bool], Iterator[tuple[str, Inputs]]]
    mode: str = "exact"
    ulps: dict[Any, float] = field(default_factory=dict)
    bound: Callable[[Inputs, np.ndarray], np.ndarray] | None = None
    feed: bool = True   # inputs are placeholders (else the functions take no tensors)


def _specials(dt: Any, subnormal: bool = False) -> np.ndarray:
    """Special values of ``dt``; float32/float64 subnormals only where ``subnormal``
    (TensorFlow flushes them to zero)."""
    dt = np.dtype(dt)
    if dt == np.bool_:
        return np.array([True, False])
    if np.issubdtype(dt, np.integer):
        ii = np.iinfo(dt)
        return np.array([0, 1, -1, 2, -2, 3, -3, 7, -7, ii.max, ii.min, ii.max - 1,
                         ii.min + 1], dt)
    fi = np.finfo(dt)
    sub = fi.smallest_subnormal if subnormal or dt == np.float16 else fi.tiny * 2
    return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, sub, -sub, fi.tiny, fi.max,
                     -fi.max, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.0, -7.0, 1e4,
                     -1e4, fi.eps, 100.0, -100.0], dt)


def _rand(rng: np.random.Generator, dt: Any, shape: Sequence[int], lo: float = -3,
          hi: float = 3) -> np.ndarray:
    dt = np.dtype(dt)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dt, np.integer):
        return rng.integers(int(lo) * 3, int(hi) * 3 + 1, size=shape).astype(dt)
    return rng.uniform(lo, hi, size=shape).astype(dt)


BIN_SHAPES = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (2, 3)), ((2, 3), ()), ((0, 3), (1, 3)),
              ((2, 1, 3), (4, 1))]


def unary_cases(dtypes: Sequence[Any], lo: float = -3, hi: float = 3) -> Callable:
    def gen(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in dtypes:
            name = np.dtype(dt).name
            yield f"{name} special", [_specials(dt)]
            if dt in (np.float32, np.float64):
                yield f"{name} subnormal", [_specials(dt, True)]
            for shape in ([(2, 3), (), (0, 2)] if quick else [(5, 7), (), (0, 2), (1000,)]):
                yield f"{name} rand{shape}", [_rand(rng, dt, shape, lo, hi)]
    return gen


def binary_cases(dtypes: Sequence[Any], lo: float = -3, hi: float = 3,
                 specials: bool = True) -> Callable:
    """Each special value against each, then random operands of broadcasting shapes."""
    def gen(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in dtypes:
            name = np.dtype(dt).name
            if specials:
                s = _specials(dt)
                x, y = np.meshgrid(s, s, indexing="ij")
                yield f"{name} special x special", [x.ravel().copy(), y.ravel().copy()]
                if dt in (np.float32, np.float64):
                    s = _specials(dt, True)
                    x, y = np.meshgrid(s, s, indexing="ij")
                    yield f"{name} subnormal", [x.ravel().copy(), y.ravel().copy()]
            for sa, sb in (BIN_SHAPES[:3] if quick else BIN_SHAPES):
                yield f"{name} rand{sa}{sb}", [_rand(rng, dt, sa, lo, hi),
                                               _rand(rng, dt, sb, lo, hi)]
    return gen


def fixed(*cases: tuple[str, Inputs]) -> Callable:
    def gen(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        yield from cases
    return gen


def gen_fn(fn: Callable[[np.random.Generator], Iterator[tuple[str, Inputs]]]) -> Callable:
    def gen(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        yield from fn(rng)
    return gen


def _eps(a: np.ndarray) -> float:
    return float(np.finfo(a.dtype).eps) if np.issubdtype(a.dtype, np.floating) else 0.0


def reduce_bound(axis: Any, keepdims: bool = False, mean: bool = False) -> Callable:
    """|err| <= 2 * n * eps * sum|x| over the reduced elements (/n for mean)."""
    def bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
        x = inputs[0]
        ax = axis if axis is None or isinstance(axis, tuple) else (axis,)
        n = x.size if ax is None else int(np.prod([x.shape[a] for a in ax]))
        s = np.sum(np.abs(x.astype(np.float64)), axis=ax, keepdims=keepdims)
        if mean:
            s = s / max(n, 1)
        return 2 * max(n, 1) * _eps(x) * s + np.abs(want.astype(np.float64)) * _eps(x)
    return bound


def ulp_table(f16: float, f32: float, f64: float) -> dict[Any, float]:
    return {np.float16: f16, np.float32: f32, np.float64: f64}


TRANSCENDENTAL = ulp_table(1, 2, 2)
ROUNDED = ulp_table(0, 0, 0)       # correctly rounded in IEEE: +-*/ sqrt


def build_specs(tf: Any) -> list[Spec]:
    S: list[Spec] = []

    def binary(name: str, tfc_fn: Callable, tf_fn: Callable, dtypes: Sequence[Any],
               mode: str = "exact", ulps: dict | None = None, **kw: Any) -> None:
        S.append(Spec(name, tfc_fn, tf_fn, binary_cases(dtypes, **kw), mode, ulps or {}))

    def unary(name: str, tfc_fn: Callable, tf_fn: Callable, dtypes: Sequence[Any],
              mode: str = "exact", ulps: dict | None = None, **kw: Any) -> None:
        S.append(Spec(name, tfc_fn, tf_fn, unary_cases(dtypes, **kw), mode, ulps or {}))

    # -- element-wise binary
    binary("add", tfc.add, tf.add, NUMERIC, "ulp", ROUNDED)
    binary("subtract", tfc.subtract, tf.subtract, NUMERIC, "ulp", ROUNDED)
    binary("multiply", tfc.multiply, tf.multiply, NUMERIC, "ulp", ROUNDED)
    binary("divide", tfc.divide, tf.compat.v1.divide, NUMERIC, "ulp", ROUNDED)
    binary("truediv(/)", lambda x, y: x / y, lambda x, y: x / y, NUMERIC, "ulp", ROUNDED)
    binary("truediv", tfc.truediv, tf.truediv, NUMERIC, "ulp", ROUNDED, specials=False)
    binary("floordiv(//)", lambda x, y: x // y, lambda x, y: x // y, NUMERIC, "ulp",
           ulp_table(0, 0, 0))
    binary("pow", tfc.pow, tf.pow, NUMERIC, "ulp", ulp_table(1, 2, 2), lo=0, hi=3)
    binary("pow(neg base)", tfc.pow, tf.pow, FLOATS, "ulp", ulp_table(1, 2, 2), lo=-3, hi=3,
           specials=False)
    binary("maximum", tfc.maximum, tf.maximum, NUMERIC)
    binary("minimum", tfc.minimum, tf.minimum, NUMERIC)
    for n in ("greater", "greater_equal", "less", "less_equal", "equal", "not_equal"):
        binary(n, getattr(tfc, n), getattr(tf.math, n), NUMERIC + (np.bool_,))
    binary("logical_and", tfc.logical_and, tf.logical_and, (np.bool_,))
    binary("logical_or", tfc.logical_or, tf.logical_or, (np.bool_,))
    binary("and(&)", lambda x, y: x & y, lambda x, y: x & y, (np.bool_,))
    binary("or(|)", lambda x, y: x | y, lambda x, y: x | y, (np.bool_,))

    # -- element-wise unary
    unary("negative", tfc.negative, tf.negative, SIGNED)
    unary("neg(-x)", lambda x: -x, lambda x: -x, SIGNED)
    unary("abs", tfc.abs, tf.abs, SIGNED)
    unary("exp", tfc.exp, tf.exp, FLOATS, "ulp", TRANSCENDENTAL)
    # float32 log: numpy's (tfc's reference) and TF's are each up to 2.2 ulps off (mpmath)
    unary("log", tfc.log, tf.math.log, FLOATS, "ulp", ulp_table(1, 4, 2), lo=0, hi=10)
    unary("sqrt", tfc.sqrt, tf.sqrt, FLOATS, "ulp", ROUNDED, lo=0, hi=10)
    unary("rsqrt", tfc.rsqrt, tf.math.rsqrt, FLOATS, "ulp", ulp_table(1, 2, 2), lo=0, hi=10)
    unary("square", tfc.square, tf.square, SIGNED, "ulp", ROUNDED)
    # The ulp bounds of tanh and sigmoid are TF's own error plus tfc's, both measured against
    # mpmath on 3000 points in [-3, 3] (TF 2.21: tanh f32 3.0 / f64 4.0 ulps, sigmoid f32
    # 4.6 / f64 3.0; tfc llvm: tanh 1.1 / 1.0, sigmoid 1.9 / 3.0, f16 sigmoid 1.6 both).
    unary("tanh", tfc.tanh, tf.tanh, FLOATS, "ulp", ulp_table(1, 4, 5))
    unary("sigmoid", tfc.sigmoid, tf.sigmoid, FLOATS, "ulp", ulp_table(3, 7, 6))
    unary("nn.sigmoid", tfc.nn.sigmoid, tf.nn.sigmoid, FLOATS, "ulp", ulp_table(3, 7, 6))
    unary("nn.tanh", tfc.nn.tanh, tf.nn.tanh if hasattr(tf.nn, "tanh") else tf.tanh, FLOATS,
          "ulp", ulp_table(1, 4, 5))
    unary("log1p", tfc.log1p, tf.math.log1p, FLOATS, "ulp", ulp_table(1, 4, 4), lo=-0.999,
          hi=10)
    unary("log1p(tiny)", tfc.log1p, tf.math.log1p, FLOATS, "ulp", ulp_table(1, 4, 4),
          lo=-1e-6, hi=1e-6)
    unary("math.log1p", tfc.math.log1p, tf.math.log1p, FLOATS, "ulp", ulp_table(1, 4, 4),
          lo=-0.999, hi=10)
    unary("expm1", tfc.expm1, tf.math.expm1, FLOATS, "ulp", ulp_table(1, 4, 4), lo=-20, hi=20)
    unary("expm1(tiny)", tfc.expm1, tf.math.expm1, FLOATS, "ulp", ulp_table(1, 4, 4),
          lo=-1e-6, hi=1e-6)
    unary("math.expm1", tfc.math.expm1, tf.math.expm1, FLOATS, "ulp", ulp_table(1, 4, 4))
    # softplus: TF returns e^x below log(eps) + 2 (-13.9 in f32, -34 in f64), dropping
    # log1p's -e^2x/2: up to ~7 ulps off there (f32 x = -14.011976: TF 8.216295e-07 =
    # e^x, exact 8.2162919e-07, tfc 8.2162916e-07). The bound is TF's error plus tfc's
    # (vmath: 2.8 ulps f32, 2.6 f64).
    unary("nn.softplus", tfc.nn.softplus, tf.nn.softplus, FLOATS, "ulp", ulp_table(1, 10, 10),
          lo=-40, hi=40)
    unary("math.softplus", tfc.math.softplus, tf.math.softplus, FLOATS, "ulp",
          ulp_table(1, 10, 10))
    # TF1's activations built from the ops above (tfc.api.nn): elu and selu as TF computes
    # them (exp(x) - 1, not expm1), leaky_relu with its float32 alpha, relu6, softsign
    unary("nn.elu", tfc.nn.elu, tf.nn.elu, FLOATS, "ulp", TRANSCENDENTAL, lo=-20, hi=5)
    unary("nn.selu", tfc.nn.selu, tf.nn.selu, FLOATS, "ulp", ulp_table(2, 3, 3), lo=-20, hi=5)
    unary("nn.leaky_relu", tfc.nn.leaky_relu, tf.nn.leaky_relu, FLOATS, "ulp", ROUNDED)
    unary("nn.leaky_relu(alpha=0.3)", lambda x: tfc.nn.leaky_relu(x, alpha=0.3),
          lambda x: tf.nn.leaky_relu(x, alpha=0.3), FLOATS, "ulp", ROUNDED)
    unary("nn.relu6", tfc.nn.relu6, tf.nn.relu6, FLOATS, lo=-10, hi=10)
    unary("nn.softsign", tfc.nn.softsign, tf.nn.softsign, FLOATS, "ulp", ulp_table(1, 1, 1))
    unary("clip_by_value", lambda x: tfc.clip_by_value(x, -0.5, 0.75),
          lambda x: tf.clip_by_value(x, -0.5, 0.75), FLOATS)
    unary("sin", tfc.sin, tf.sin, FLOATS, "ulp", TRANSCENDENTAL)
    unary("cos", tfc.cos, tf.cos, FLOATS, "ulp", TRANSCENDENTAL)
    unary("floor", tfc.floor, tf.floor, FLOATS)
    unary("sign", tfc.sign, tf.sign, SIGNED)
    unary("nn.relu", tfc.nn.relu, tf.nn.relu, SIGNED)
    unary("logical_not", tfc.logical_not, tf.logical_not, (np.bool_,))
    unary("invert(~)", lambda x: ~x, lambda x: ~x, (np.bool_,))
    unary("identity", tfc.identity, tf.identity, NUMERIC + (np.bool_,))
    unary("stop_gradient", tfc.stop_gradient, tf.stop_gradient, NUMERIC)
    unary("zeros_like", tfc.zeros_like, tf.zeros_like, NUMERIC + (np.bool_,))
    unary("ones_like", tfc.ones_like, tf.ones_like, NUMERIC + (np.bool_,))
    unary("shape", tfc.shape, tf.shape, (np.float32,))
    unary("rank", tfc.rank, tf.rank, (np.float32,))
    # tan, inverse trigonometry, the error function. Bounds: TF's own error plus tfc's,
    # each measured against the exact value (tfc.testing.exact_math) on 50000 points:
    # TF 2.21 f32/f64 tan 0.83/0.53, atan 3.5/3.3, asin 4.1/0.51, acos 4.1/0.52, atan2
    # 3.5/3.4, erf 5.3/2.6, erfc (x < 4) 7.2/7.8 ulps; tfc 0.5 (f32), f64 vmath.MAX_ULP.
    unary("tan", tfc.tan, tf.math.tan, FLOATS, "ulp", ulp_table(1, 2, 2), lo=-1.5, hi=1.5)
    unary("math.tan", tfc.math.tan, tf.math.tan, FLOATS, "ulp", ulp_table(1, 2, 2), lo=-10,
          hi=10)
    unary("math.atan", tfc.math.atan, tf.math.atan, FLOATS, "ulp", ulp_table(1, 4, 5), lo=-10,
          hi=10)
    unary("atan", tfc.atan, tf.math.atan, FLOATS, "ulp", ulp_table(1, 4, 5))
    for n in ("asin", "acos"):
        unary(n, getattr(tfc, n), getattr(tf.math, n), FLOATS, "ulp", ulp_table(1, 5, 2),
              lo=-1, hi=1)
        unary(f"math.{n}", getattr(tfc.math, n), getattr(tf.math, n), FLOATS, "ulp",
              ulp_table(1, 5, 2), lo=-1, hi=1)
    binary("math.atan2", tfc.math.atan2, tf.math.atan2, FLOATS, "ulp", ulp_table(1, 5, 6))
    binary("atan2", tfc.atan2, tf.math.atan2, FLOATS, "ulp", ulp_table(1, 5, 6), lo=-1e3,
           hi=1e3, specials=False)
    unary("math.erf", tfc.math.erf, tf.math.erf, FLOATS, "ulp", ulp_table(1, 6, 4), lo=-5,
          hi=5)
    unary("erf", tfc.erf, tf.math.erf, FLOATS, "ulp", ulp_table(1, 6, 4), lo=-1, hi=1)
    unary("math.erfc", tfc.math.erfc, tf.math.erfc, FLOATS, "ulp", ulp_table(1, 8, 11),
          lo=-3, hi=4)
    unary("erfc", tfc.erfc, tf.math.erfc, FLOATS, "ulp", ulp_table(1, 8, 11), lo=-1, hi=4)
    unary("erfc(tail)", tfc.erfc, tf.math.erfc, FLOATS, "ulp", ulp_table(1, 8, 11), lo=4,
          hi=27)

    # gelu: the tanh form's 1 + tanh(...) cancels for negative x, where each side's tanh
    # rounding (TF's float32 tanh is Eigen's, a few ulps) is magnified: compared
    # absolutely, at the function's scale |x|: within 4 eps (|x| + |gelu(x)|).
    def gelu_bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
        x = np.abs(inputs[0].astype(np.float64))
        return 4 * _eps(inputs[0]) * (x + np.abs(want.astype(np.float64)))
    S.append(Spec("nn.gelu", tfc.nn.gelu, tf.nn.gelu, unary_cases(FLOATS, lo=-6, hi=6),
                  "bound", bound=gelu_bound))
    S.append(Spec("nn.gelu(approximate)", lambda x: tfc.nn.gelu(x, approximate=True),
                  lambda x: tf.nn.gelu(x, approximate=True), unary_cases(FLOATS, lo=-6, hi=6),
                  "bound", bound=gelu_bound))

    # -- ceil, round, reciprocal, is_nan/is_inf/is_finite, floordiv/floormod,
    # squared_difference, logical_xor, the no-NaN divisions: exact (TF's formulas: floor of
    # the rounded quotient, fmod plus y where the signs differ, the difference rounded then
    # squared); integer divisors without 0, and without MIN // -1 (TF's int division traps)
    def int_div_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in INTS:
            s = _specials(dt)
            x, y = np.meshgrid(s, s[s != 0], indexing="ij")
            ok = ~((x == np.iinfo(dt).min) & (y == -1))
            yield f"{np.dtype(dt).name} special x nonzero", [x[ok].copy(), y[ok].copy()]
            y = _rand(rng, dt, (3, 4))
            yield f"{np.dtype(dt).name} rand", [_rand(rng, dt, (3, 4)),
                                                np.where(y == 0, 5, y).astype(dt)]
            yield f"{np.dtype(dt).name} by zero", [np.array([3, 4], dt), np.array([1, 0], dt)]

    for name, tfc_fn, tf_fn in [("floordiv", tfc.floordiv, tf.math.floordiv),
                                ("floormod", tfc.floormod, tf.math.floormod),
                                ("math.mod", tfc.math.mod, tf.math.mod),
                                ("mod(%)", lambda x, y: x % y, lambda x, y: x % y),
                                ("math.floordiv", tfc.math.floordiv, tf.math.floordiv),
                                ("truncatediv", tfc.truncatediv, tf.truncatediv),
                                ("truncatemod", tfc.truncatemod, tf.truncatemod)]:
        # (TF has no float16 TruncateMod kernel)
        binary(name, tfc_fn, tf_fn, FLOATS[1:] if name == "truncatemod" else FLOATS)
        S.append(Spec(name + "(int)", tfc_fn, tf_fn, int_div_cases))
    binary("squared_difference", tfc.squared_difference, tf.math.squared_difference, NUMERIC,
           "ulp", ROUNDED)
    binary("logical_xor", tfc.logical_xor, tf.math.logical_xor, (np.bool_,))
    binary("xor(^)", lambda x, y: x ^ y, lambda x, y: x ^ y, (np.bool_,))
    binary("divide_no_nan", tfc.math.divide_no_nan, tf.math.divide_no_nan, FLOATS, "ulp",
           ROUNDED)
    unary("reciprocal_no_nan", tfc.math.reciprocal_no_nan, tf.math.reciprocal_no_nan,
          FLOATS, "ulp", ROUNDED)
    unary("ceil", tfc.ceil, tf.math.ceil, FLOATS)
    unary("round", tfc.round, tf.round, NUMERIC)
    unary("rint", tfc.math.rint, tf.math.rint, (np.float32, np.float64))  # (TF: no f16)
    # TF's float32 reciprocal is Eigen's (rcpps refined by Newton's method), within 1 ulp:
    # 1 / 2^-125 is 2^125 exactly (tfc), TF's one ulp below
    unary("reciprocal", tfc.reciprocal, tf.math.reciprocal, FLOATS, "ulp", ulp_table(0, 1, 0))
    for n in ("is_nan", "is_inf", "is_finite"):
        unary(n, getattr(tfc, n), getattr(tf.math, n), FLOATS)
    # sinh ... atanh: tfc composes them of registry ops (tests/api/test_math_composites.py
    # bounds tfc's error from the exact value: <= 4 ulp f32, <= 3 f64); the bound adds 1 for
    # TF's own (std:: functions, glibc's: <= 1 ulp). Measured against TF: <= 2 ulp.
    hyper = ulp_table(2, 5, 4)
    unary("sinh", tfc.sinh, tf.math.sinh, FLOATS, "ulp", hyper, lo=-20, hi=20)
    unary("math.sinh(wide)", tfc.math.sinh, tf.math.sinh, FLOATS, "ulp", hyper, lo=-89, hi=89)
    unary("sinh(tiny)", tfc.sinh, tf.math.sinh, FLOATS, "ulp", hyper, lo=-1e-3, hi=1e-3)
    unary("cosh", tfc.cosh, tf.math.cosh, FLOATS, "ulp", hyper, lo=-20, hi=20)
    unary("math.cosh(wide)", tfc.math.cosh, tf.math.cosh, FLOATS, "ulp", hyper, lo=-89, hi=89)
    unary("asinh", tfc.asinh, tf.math.asinh, FLOATS, "ulp", hyper, lo=-1e4, hi=1e4)
    unary("math.asinh(small)", tfc.math.asinh, tf.math.asinh, FLOATS, "ulp", hyper, lo=-2, hi=2)
    unary("acosh", tfc.acosh, tf.math.acosh, FLOATS, "ulp", hyper, lo=1, hi=1e4)
    unary("math.acosh(near 1)", tfc.math.acosh, tf.math.acosh, FLOATS, "ulp", hyper, lo=1,
          hi=1.1)
    unary("atanh", tfc.atanh, tf.math.atanh, FLOATS, "ulp", hyper, lo=-1, hi=1)
    unary("math.atanh(small)", tfc.math.atanh, tf.math.atanh, FLOATS, "ulp", hyper, lo=-0.01,
          hi=0.01)

    def where_cases(rng: np.random.Generator) -> Iterator[tuple[str, Inputs]]:
        for dt in NUMERIC + (np.bool_,):
            s = _specials(dt)
            yield f"{np.dtype(dt).name} special", [rng.random(s.shape) < 0.5, s, s[::-1].copy()]
            yield f"{np.dtype(dt).name} bcast", [rng.random((3, 1)) < 0.5,
                                                 _rand(rng, dt, (1, 4)), _rand(rng, dt, (3, 4))]
    S.append(Spec("where", tfc.where, tf.where, gen_fn(where_cases)))

    # -- casts
    cast_from = FLOATS + INTS + (np.bool_,)
    for to in FLOATS + INTS + (np.bool_,):
        def cast_cases(rng: np.random.Generator, quick: bool, _to: Any = to
                       ) -> Iterator[tuple[str, Inputs]]:
            for dt in cast_from:
                s = _specials(dt)
                if np.issubdtype(dt, np.floating) and np.issubdtype(_to, np.integer):
                    # TF's float->int cast of NaN/inf/out-of-range is not defined (UB in C++)
                    it = np.iinfo(_to)
                    s = s[np.isfinite(s) & (s > it.min) & (s < it.max)]
                    s = np.concatenate([s, np.array([2.5, -2.5, 0.99, -0.99, 1e3], dt)])
                yield f"{np.dtype(dt).name} special", [s]
        S.append(Spec(f"cast->{np.dtype(to).name}",
                      lambda x, _to=to: tfc.cast(x, tfc.as_dtype(np.dtype(_to).name)),
                      lambda x, _to=to: tf.cast(x, tf.as_dtype(np.dtype(_to).name)),
                      cast_cases))

    # -- reductions
    for name, tfn, tff, mean, exact in [
            ("reduce_sum", tfc.reduce_sum, tf.reduce_sum, False, False),
            ("reduce_mean", tfc.reduce_mean, tf.reduce_mean, True, False),
            ("reduce_prod", tfc.reduce_prod, tf.reduce_prod, False, False),
            ("reduce_max", tfc.reduce_max, tf.reduce_max, False, True),
            ("reduce_min", tfc.reduce_min, tf.reduce_min, False, True)]:
        for axis, keep in [(None, False), (0, False), (1, True), ((0, 1), False), (-1, False)]:
            def red_cases(rng: np.random.Generator, quick: bool, _ax: Any = axis,
                          _exact: bool = exact, _prod: bool = name == "reduce_prod"
                          ) -> Iterator[tuple[str, Inputs]]:
                for dt in NUMERIC:
                    lo, hi = (0.5, 1.5) if _prod else (-3, 3)
                    if np.issubdtype(dt, np.integer) and _prod:
                        lo, hi = -1, 1
                    yield f"{np.dtype(dt).name} rand", [_rand(rng, dt, (4, 6), lo, hi)]
                    yield f"{np.dtype(dt).name} 0-size", [_rand(rng, dt, (0, 3))]
                    if _ax not in (0, (0, 1)) or True:
                        yield f"{np.dtype(dt).name} 0-size-inner", [_rand(rng, dt, (3, 0))]
                    if np.issubdtype(dt, np.floating):
                        s = _specials(dt)[:8]
                        yield f"{np.dtype(dt).name} special", [np.stack([s, s[::-1]])]
                        x = _rand(rng, dt, (2, 5))
                        x[0, 2] = np.nan
                        yield f"{np.dtype(dt).name} nan", [x]
                        yield (f"{np.dtype(dt).name} +-0", [np.array(
                            [[0.0, -0.0], [-0.0, -0.0]], dt)])
                    if not quick and not _prod:
                        yield f"{np.dtype(dt).name} big", [_rand(rng, dt, (3, 2000))]

            def prod_bound(inputs: Inputs, want: np.ndarray, _ax: Any = axis) -> np.ndarray:
                x = inputs[0]
                ax = _ax if _ax is None or isinstance(_ax, tuple) else (_ax,)
                n = x.size if ax is None else int(np.prod([x.shape[a] for a in ax]))
                return 2 * max(n, 1) * _eps(x) * np.abs(want.astype(np.float64))
            bound = (None if exact else prod_bound if name == "reduce_prod"
                     else reduce_bound(axis, keep, mean))
            S.append(Spec(f"{name}(axis={axis},keepdims={keep})",
                          lambda x, _f=tfn, _a=axis, _k=keep: _f(x, axis=_a, keepdims=_k),
                          lambda x, _f=tff, _a=axis, _k=keep: _f(x, axis=_a, keepdims=_k),
                          red_cases, "exact" if exact else "bound", bound=bound))

    for name, tfn, tff in [("argmax", tfc.argmax, tf.math.argmax),
                           ("argmin", tfc.argmin, tf.math.argmin)]:
        for axis in (0, 1, -1):
            def arg_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
                for dt in NUMERIC:
                    yield f"{np.dtype(dt).name} rand", [_rand(rng, dt, (4, 6))]
                    yield f"{np.dtype(dt).name} ties", [np.array([[1, 3, 3], [2, 2, 1],
                                                                   [0, 0, 0]], dt)]
                    if np.issubdtype(dt, np.floating):
                        yield f"{np.dtype(dt).name} nan", [np.array(
                            [[1, np.nan, 3], [np.nan, 2, 1], [np.inf, -np.inf, 0]], dt)]
                        yield f"{np.dtype(dt).name} +-0", [np.array([[0.0, -0.0, 0.0],
                                                                      [-0.0, 0.0, -1]], dt)]
            S.append(Spec(f"{name}(axis={axis})", lambda x, _f=tfn, _a=axis: _f(x, axis=_a),
                          lambda x, _f=tff, _a=axis: _f(x, axis=_a), arg_cases))
    S.append(Spec("argmax(int32 out)", lambda x: tfc.argmax(x, 1, output_type=tfc.int32),
                  lambda x: tf.math.argmax(x, 1, output_type=tf.int32),
                  fixed(("f32", [np.array([[1, 2, 2], [3, 0, 1]], np.float32)]))))

    # -- matrices
    def mm_cases(ta: bool, tb: bool) -> Callable:
        def gen(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
            for dt in NUMERIC:
                for m, k, n in [(3, 4, 5), (1, 7, 1), (0, 3, 2), (3, 0, 2), (8, 33, 9)]:
                    a = _rand(rng, dt, (k, m) if ta else (m, k))
                    b = _rand(rng, dt, (n, k) if tb else (k, n))
                    yield f"{np.dtype(dt).name} {m}x{k}x{n}", [a, b]
                yield f"{np.dtype(dt).name} batched", [_rand(rng, dt, (2, 3, 4)),
                                                       _rand(rng, dt, (2, 4, 5))] \
                    if not (ta or tb) else [_rand(rng, dt, (2, 4, 3) if ta else (2, 3, 4)),
                                            _rand(rng, dt, (2, 5, 4) if tb else (2, 4, 5))]
        return gen

    def mm_bound(ta: bool, tb: bool) -> Callable:
        def bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
            a, b = (np.abs(x.astype(np.float64)) for x in inputs)
            a = np.swapaxes(a, -1, -2) if ta else a
            b = np.swapaxes(b, -1, -2) if tb else b
            k = a.shape[-1]
            return 2 * max(k, 1) * _eps(inputs[0]) * (a @ b)
        return bound
    for ta, tb in [(False, False), (True, False), (False, True), (True, True)]:
        S.append(Spec(f"matmul(ta={ta},tb={tb})",
                      lambda a, b, _ta=ta, _tb=tb: tfc.matmul(a, b, transpose_a=_ta,
                                                              transpose_b=_tb),
                      lambda a, b, _ta=ta, _tb=tb: tf.linalg.matmul(a, b, transpose_a=_ta,
                                                                    transpose_b=_tb),
                      mm_cases(ta, tb), "bound", bound=mm_bound(ta, tb)))
    S.append(Spec("matmul(@)", lambda a, b: a @ b, lambda a, b: a @ b, mm_cases(False, False),
                  "bound", bound=mm_bound(False, False)))

    def lin_cases(rng: np.random.Generator) -> Iterator[tuple[str, Inputs]]:
        for dt in (np.float32, np.float64):
            for n in (1, 3, 6):
                a = rng.normal(size=(n, n)) + n * np.eye(n)
                yield f"{np.dtype(dt).name} {n}x{n}", [a.astype(dt)]
            yield f"{np.dtype(dt).name} batch", [(rng.normal(size=(2, 3, 3))
                                                  + 3 * np.eye(3)).astype(dt)]

    def cond_bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
        a = inputs[0].astype(np.float64)
        c = np.linalg.cond(a).reshape(a.shape[:-2] + (1,) * (want.ndim - a.ndim + 2))
        return 4 * a.shape[-1] * _eps(inputs[0]) * c * np.max(np.abs(want)) + 0 * want
    S.append(Spec("matrix_inverse", tfc.matrix_inverse, tf.linalg.inv, gen_fn(lin_cases),
                  "bound", bound=cond_bound))
    S.append(Spec("matrix_determinant", tfc.matrix_determinant, tf.linalg.det,
                  gen_fn(lin_cases), "bound", bound=cond_bound))

    # -- data movement (exact)
    def mv(name: str, tfc_fn: Callable, tf_fn: Callable, shape: Sequence[int],
           dtypes: Sequence[Any] = NUMERIC + (np.bool_,)) -> None:
        def gen(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
            for dt in dtypes:
                yield np.dtype(dt).name, [_rand(rng, dt, shape)]
        S.append(Spec(name, tfc_fn, tf_fn, gen))

    mv("reshape", lambda x: tfc.reshape(x, [4, -1]), lambda x: tf.reshape(x, [4, -1]), (2, 3, 4))
    mv("reshape(0-size)", lambda x: tfc.reshape(x, [3, 0]), lambda x: tf.reshape(x, [3, 0]),
       (0, 3))
    mv("transpose", tfc.transpose, tf.transpose, (2, 3, 4))
    mv("transpose(perm)", lambda x: tfc.transpose(x, [1, 2, 0]),
       lambda x: tf.transpose(x, [1, 2, 0]), (2, 3, 4))
    mv("broadcast_to", lambda x: tfc.broadcast_to(x, [2, 3, 4]),
       lambda x: tf.broadcast_to(x, [2, 3, 4]), (3, 1))
    mv("expand_dims", lambda x: tfc.expand_dims(x, -1), lambda x: tf.expand_dims(x, -1), (2, 3))
    mv("expand_dims(0)", lambda x: tfc.expand_dims(x, 0), lambda x: tf.expand_dims(x, 0), (2, 3))
    mv("squeeze", tfc.squeeze, tf.squeeze, (1, 3, 1, 2))
    mv("squeeze(axis)", lambda x: tfc.squeeze(x, [2]), lambda x: tf.squeeze(x, [2]),
       (1, 3, 1, 2))
    mv("tile", lambda x: tfc.tile(x, [2, 3]), lambda x: tf.tile(x, [2, 3]), (2, 3))
    mv("slice", lambda x: tfc.slice(x, [1, 0], [2, -1]), lambda x: tf.slice(x, [1, 0], [2, -1]),
       (4, 5))
    mv("getitem", lambda x: x[1:3, ::2], lambda x: x[1:3, ::2], (4, 5))
    mv("getitem(neg,None)", lambda x: x[-1, None, ::-1], lambda x: x[-1, None, ::-1], (4, 5))
    mv("getitem(int,...)", lambda x: x[..., 1], lambda x: x[..., 1], (2, 3, 4))
    mv("pad", lambda x: tfc.pad(x, [[1, 0], [2, 1]]), lambda x: tf.pad(x, [[1, 0], [2, 1]]),
       (2, 3), NUMERIC)
    for mode in ("REFLECT", "SYMMETRIC"):
        mv(f"pad({mode})", lambda x, _m=mode: tfc.pad(x, [[1, 1], [2, 1]], mode=_m),
           lambda x, _m=mode: tf.pad(x, [[1, 1], [2, 1]], mode=_m), (3, 4), NUMERIC)
    mv("split(3)", lambda x: tfc.split(x, 3, axis=1), lambda x: tf.split(x, 3, axis=1), (2, 6))
    mv("split(sizes)", lambda x: tfc.split(x, [1, 2, 3], axis=1),
       lambda x: tf.split(x, [1, 2, 3], axis=1), (2, 6))
    mv("split(-1 size)", lambda x: tfc.split(x, [1, -1], axis=0),
       lambda x: tf.split(x, [1, -1], axis=0), (3, 2))

    def two(shape_a: Sequence[int], shape_b: Sequence[int]) -> Callable:
        def gen(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
            for dt in NUMERIC + (np.bool_,):
                yield np.dtype(dt).name, [_rand(rng, dt, shape_a), _rand(rng, dt, shape_b)]
        return gen
    S.append(Spec("concat", lambda a, b: tfc.concat([a, b], 1), lambda a, b: tf.concat([a, b], 1),
                  two((2, 3), (2, 1))))
    S.append(Spec("concat(-1,0-size)", lambda a, b: tfc.concat([a, b], -1),
                  lambda a, b: tf.concat([a, b], -1), two((2, 0), (2, 2))))
    S.append(Spec("stack", lambda a, b: tfc.stack([a, b], 1), lambda a, b: tf.stack([a, b], 1),
                  two((2, 3), (2, 3))))
    S.append(Spec("stack(-1)", lambda a, b: tfc.stack([a, b], -1),
                  lambda a, b: tf.stack([a, b], -1), two((2, 3), (2, 3))))
    S.append(Spec("add_n", lambda a, b: tfc.add_n([a, b, a]), lambda a, b: tf.add_n([a, b, a]),
                  two((2, 3), (2, 3)) if False else binary_cases(NUMERIC, specials=False)
                  if False else fixed(*[(np.dtype(dt).name, [np.arange(6, dtype=dt).reshape(2, 3),
                                                             np.ones((2, 3), dt)])
                                        for dt in NUMERIC]), "ulp", ROUNDED))

    def gather_cases(axis: int) -> Callable:
        def gen(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
            for dt in NUMERIC:
                for it in INTS:
                    yield (f"{np.dtype(dt).name}[{np.dtype(it).name}]",
                           [_rand(rng, dt, (4, 3)), np.array([[0, 2], [1, 1]], it) % 3])
                yield f"{np.dtype(dt).name} scalar idx", [_rand(rng, dt, (4, 3)),
                                                          np.array(1, np.int32)]
        return gen
    for axis in (0, 1):
        S.append(Spec(f"gather(axis={axis})", lambda p, i, _a=axis: tfc.gather(p, i, axis=_a),
                      lambda p, i, _a=axis: tf.gather(p, i, axis=_a), gather_cases(axis)))

    def gather_oob(rng: np.random.Generator) -> Iterator[tuple[str, Inputs]]:
        # TF's CPU gather rejects an index outside [0, n); tfc must say so too (not read
        # past the array)
        for it in INTS:
            yield f"{np.dtype(it).name} idx 4 of 4", [rng.normal(size=(4, 3)).astype(np.float32),
                                                     np.array([0, 4], it)]
            yield f"{np.dtype(it).name} idx -1", [rng.normal(size=(4, 3)).astype(np.float32),
                                                  np.array([-1, 2], it)]
    S.append(Spec("gather(out of range)", lambda p, i: tfc.gather(p, i),
                  lambda p, i: tf.gather(p, i), gen_fn(gather_oob)))

    def sxent_oob(rng: np.random.Generator) -> Iterator[tuple[str, Inputs]]:
        for lab in ([0, 5], [-1, 0]):
            yield f"label {lab[0] if lab[0] < 0 else lab[1]} of 5", [
                np.array(lab, np.int32), rng.normal(size=(2, 5)).astype(np.float32)]
    S.append(Spec("nn.sparse_softmax_cross_entropy_with_logits(out of range)",
                  lambda l, x: tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=l,
                                                                               logits=x),
                  lambda l, x: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=l,
                                                                              logits=x),
                  gen_fn(sxent_oob)))

    def int_div_cases(rng: np.random.Generator) -> Iterator[tuple[str, Inputs]]:
        for it in INTS:
            ii = np.iinfo(it)
            yield f"{np.dtype(it).name} by zero", [np.array([1, 2], it), np.array([1, 0], it)]
            yield f"{np.dtype(it).name} min // -1", [np.array([ii.min], it), np.array([-1], it)]
            yield f"{np.dtype(it).name} signs", [np.array([7, -7, 7, -7, 0], it),
                                                 np.array([2, 2, -2, -2, -3], it)]
            yield f"{np.dtype(it).name} empty by zero", [np.zeros((0, 3), it),
                                                         np.array([[0, 1, 2]], it)]
    S.append(Spec("floordiv(int edge)", lambda x, y: x // y, lambda x, y: x // y,
                  gen_fn(int_div_cases)))

    def oh_cases(rng: np.random.Generator) -> Iterator[tuple[str, Inputs]]:
        for it in INTS:
            yield np.dtype(it).name, [np.array([0, 2, -1, 3, 1, 7], it)]
            yield np.dtype(it).name + " 2d", [np.array([[0, 2], [1, 3]], it)]
    S.append(Spec("one_hot", lambda i: tfc.one_hot(i, 4), lambda i: tf.one_hot(i, 4),
                  gen_fn(oh_cases)))
    S.append(Spec("one_hot(on/off,axis)",
                  lambda i: tfc.one_hot(i, 3, on_value=5.0, off_value=-1.0, axis=0),
                  lambda i: tf.one_hot(i, 3, on_value=5.0, off_value=-1.0, axis=0),
                  gen_fn(oh_cases)))

    # -- constructors (no inputs)
    def const(name: str, tfc_fn: Callable, tf_fn: Callable) -> None:
        S.append(Spec(name, tfc_fn, tf_fn, fixed(("", [])), feed=False))
    const("zeros", lambda: tfc.zeros([2, 3]), lambda: tf.zeros([2, 3]))
    const("ones(int32)", lambda: tfc.ones([2, 0], tfc.int32), lambda: tf.ones([2, 0], tf.int32))
    const("fill", lambda: tfc.fill([2, 2], 3.5), lambda: tf.fill([2, 2], 3.5))
    const("fill(int)", lambda: tfc.fill([3], 7, tfc.int32), lambda: tf.fill([3], 7))
    const("range(5)", lambda: tfc.range(5), lambda: tf.range(5))
    const("range(1,10,3)", lambda: tfc.range(1, 10, 3), lambda: tf.range(1, 10, 3))
    const("range(0,1,0.1)", lambda: tfc.range(0.0, 1.0, 0.1), lambda: tf.range(0.0, 1.0, 0.1))
    const("range(10,1,-2)", lambda: tfc.range(10, 1, -2), lambda: tf.range(10, 1, -2))
    const("range(empty)", lambda: tfc.range(5, 1), lambda: tf.range(5, 1))
    const("constant(f64)", lambda: tfc.constant(np.array([1.5, 2.0])),
          lambda: tf.constant(np.array([1.5, 2.0])))
    const("constant(py float)", lambda: tfc.constant(1.5), lambda: tf.constant(1.5))
    const("constant(py int)", lambda: tfc.constant([1, 2]), lambda: tf.constant([1, 2]))
    const("constant(bool)", lambda: tfc.constant(True), lambda: tf.constant(True))

    # -- nn
    def logits_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            yield f"{np.dtype(dt).name} rand", [_rand(rng, dt, (4, 7), -5, 5)]
            yield f"{np.dtype(dt).name} big", [np.array([[1e4, -1e4, 0], [80, 90, 100]], dt)]
            yield f"{np.dtype(dt).name} inf", [np.array([[np.inf, 0, 1], [-np.inf, 0, 1]], dt)]
            yield f"{np.dtype(dt).name} all -inf", [np.array([[-np.inf] * 3, [-np.inf, 0, -np.inf]],
                                                             dt)]
            yield f"{np.dtype(dt).name} nan", [np.array([[np.nan, 0, 1], [0, 1, 2]], dt)]
            yield f"{np.dtype(dt).name} 1-d", [_rand(rng, dt, (5,))]
            yield f"{np.dtype(dt).name} 0-size", [_rand(rng, dt, (0, 3))]
    soft = ulp_table(2, 4, 4)
    S.append(Spec("nn.softmax", tfc.nn.softmax, tf.nn.softmax, logits_cases, "ulp", soft))
    S.append(Spec("nn.softmax(axis=0)", lambda x: tfc.nn.softmax(x, axis=0),
                  lambda x: tf.nn.softmax(x, axis=0), logits_cases, "ulp", soft))
    S.append(Spec("nn.log_softmax", tfc.nn.log_softmax, tf.nn.log_softmax, logits_cases,
                  "bound", bound=lambda i, w: 4 * _eps(i[0]) * (np.abs(w) + np.log(
                      max(i[0].shape[-1], 1)) + 1)))

    def xent_bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
        x = inputs[-1] if inputs[-1].dtype.kind == "f" else inputs[0]
        return 8 * _eps(x) * (np.abs(want) + np.max(np.abs(x), axis=-1) + 1)

    def xent_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            lab = rng.random((4, 5)).astype(dt)
            lab /= lab.sum(-1, keepdims=True)
            yield f"{np.dtype(dt).name} rand", [lab, _rand(rng, dt, (4, 5), -5, 5)]
            yield f"{np.dtype(dt).name} onehot big", [np.eye(3, dtype=dt),
                                                      np.array([[1e4, 0, -1e4]] * 3, dt)]
    S.append(Spec("nn.softmax_cross_entropy_with_logits",
                  lambda l, x: tfc.nn.softmax_cross_entropy_with_logits(labels=l, logits=x),
                  lambda l, x: tf.nn.softmax_cross_entropy_with_logits(labels=l, logits=x),
                  xent_cases, "bound", bound=xent_bound))

    def sxent_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            for it in INTS:
                yield (f"{np.dtype(dt).name}/{np.dtype(it).name}",
                       [np.array([0, 4, 2, 1], it), _rand(rng, dt, (4, 5), -5, 5)])
            yield f"{np.dtype(dt).name} big", [np.array([0, 1, 2], np.int32),
                                               np.array([[1e4, 0, -1e4]] * 3, dt)]
    S.append(Spec("nn.sparse_softmax_cross_entropy_with_logits",
                  lambda l, x: tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=l,
                                                                               logits=x),
                  lambda l, x: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=l,
                                                                              logits=x),
                  sxent_cases, "bound", bound=xent_bound))

    def sig_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            yield f"{np.dtype(dt).name} rand", [rng.random((3, 4)).astype(dt),
                                                _rand(rng, dt, (3, 4), -10, 10)]
            yield f"{np.dtype(dt).name} big", [np.array([0, 1, 0, 1, 0.5], dt),
                                               np.array([1e4, -1e4, -1e4, 1e4, 0], dt)]
    S.append(Spec("nn.sigmoid_cross_entropy_with_logits",
                  lambda l, x: tfc.nn.sigmoid_cross_entropy_with_logits(labels=l, logits=x),
                  lambda l, x: tf.nn.sigmoid_cross_entropy_with_logits(labels=l, logits=x),
                  sig_cases, "bound",
                  bound=lambda i, w: 4 * _eps(i[0]) * (np.abs(w) + np.abs(i[1]) + 1)))

    def bias_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in NUMERIC:
            yield np.dtype(dt).name, [_rand(rng, dt, (2, 3, 4)), _rand(rng, dt, (4,))]
    S.append(Spec("nn.bias_add", tfc.nn.bias_add, tf.nn.bias_add, bias_cases, "ulp", ROUNDED))

    def conv_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in (np.float32, np.float64):
            yield np.dtype(dt).name, [_rand(rng, dt, (2, 7, 6, 3)), _rand(rng, dt, (3, 2, 3, 4))]

    def conv_bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
        x, w = inputs
        n = int(np.prod(w.shape[:3]))
        return 2 * n * _eps(x) * np.max(np.abs(x)) * np.max(np.abs(w)) * n + 0 * want
    for strides, padding in [(1, "VALID"), (1, "SAME"), (2, "SAME"), (2, "VALID")]:
        S.append(Spec(f"nn.conv2d(s={strides},{padding})",
                      lambda x, w, _s=strides, _p=padding: tfc.nn.conv2d(x, w, _s, _p),
                      lambda x, w, _s=strides, _p=padding: tf.nn.conv2d(x, w, _s, _p),
                      conv_cases, "bound", bound=conv_bound))

    def pool_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            yield np.dtype(dt).name, [_rand(rng, dt, (2, 7, 6, 3))]
            x = _rand(rng, dt, (1, 4, 4, 1))
            x[0, 1, 1, 0] = np.nan
            yield np.dtype(dt).name + " nan", [x]
            yield np.dtype(dt).name + " -inf", [np.full((1, 3, 3, 1), -np.inf, dt)]
    def pool_bound(k: int) -> Callable:
        """A window mean: 2 * k*k * eps * max|x| (the sum of k*k terms, then one division)."""
        def bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
            x = inputs[0]
            big = np.max(np.abs(x[np.isfinite(x)])) if np.isfinite(x).any() else 0.0
            return 2 * k * k * _eps(x) * float(big) + _eps(x) * np.abs(want)
        return bound

    for k, s, p in [(2, 2, "VALID"), (3, 2, "SAME"), (3, 1, "SAME"), (2, 1, "VALID")]:
        S.append(Spec(f"nn.max_pool2d(k={k},s={s},{p})",
                      lambda x, _k=k, _s=s, _p=p: tfc.nn.max_pool2d(x, _k, _s, _p),
                      lambda x, _k=k, _s=s, _p=p: tf.nn.max_pool2d(x, _k, _s, _p),
                      pool_cases))
        S.append(Spec(f"nn.avg_pool2d(k={k},s={s},{p})",
                      lambda x, _k=k, _s=s, _p=p: tfc.nn.avg_pool2d(x, _k, _s, _p),
                      lambda x, _k=k, _s=s, _p=p: tf.nn.avg_pool2d(x, _k, _s, _p),
                      pool_cases, "bound", bound=pool_bound(k)))
    S.append(Spec("nn.max_pool", lambda x: tfc.nn.max_pool(x, 2, 2, "VALID"),
                  lambda x: tf.compat.v1.nn.max_pool(x, 2, 2, "VALID"), pool_cases))
    S.append(Spec("nn.avg_pool", lambda x: tfc.nn.avg_pool(x, 2, 2, "VALID"),
                  lambda x: tf.compat.v1.nn.avg_pool(x, 2, 2, "VALID"), pool_cases, "bound",
                  bound=pool_bound(2)))

    # -- conv25: conv1d, conv2d_transpose, depthwise_conv2d, separable_conv2d
    def conv_more_cases(shapes: Sequence[tuple[int, ...]]) -> Callable:
        def cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
            for dt in (np.float32, np.float64):
                yield np.dtype(dt).name, [_rand(rng, dt, sh) for sh in shapes]
        return cases

    def sum_bound(terms: int) -> Callable:
        """A sum of ``terms`` products (each stage's): 2 * terms * eps * (max|a| max|b|
        ... over the inputs) * terms, as conv_bound."""
        def bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
            mag = float(np.prod([np.max(np.abs(a)) for a in inputs]))
            return 2 * terms * _eps(inputs[0]) * mag * terms + 0 * want
        return bound
    for st, p in [(1, "VALID"), (2, "SAME")]:
        S.append(Spec(f"nn.conv1d(s={st},{p})",
                      lambda x, w, _s=st, _p=p: tfc.nn.conv1d(x, w, _s, _p),
                      lambda x, w, _s=st, _p=p: tf.nn.conv1d(x, w, _s, _p),
                      conv_more_cases([(2, 9, 3), (3, 3, 4)]), "bound", bound=sum_bound(9)))
    for out, st, p, ws in [((2, 8, 6, 2), 2, "SAME", (3, 3, 2, 3)),
                           ((2, 7, 8, 2), 2, "VALID", (3, 2, 2, 3)),
                           ((2, 4, 3, 2), 1, "SAME", (2, 2, 2, 3))]:
        S.append(Spec(f"nn.conv2d_transpose(s={st},{p},k={ws[0]}x{ws[1]})",
                      lambda x, w, _o=out, _s=st, _p=p: tfc.nn.conv2d_transpose(x, w, _o, _s,
                                                                                _p),
                      lambda x, w, _o=out, _s=st, _p=p: tf.nn.conv2d_transpose(x, w, _o, _s,
                                                                               _p),
                      conv_more_cases([(2, out[1] // st if p == "SAME" else 3,
                                        -(-out[2] // st) if p == "SAME" else 4, 3), ws]),
                      "bound", bound=sum_bound(27)))
    for st, p, dil, ws in [(1, "SAME", 1, (3, 3, 3, 1)), (2, "VALID", 1, (3, 2, 3, 2)),
                           (1, "SAME", 2, (3, 3, 3, 2))]:
        S.append(Spec(f"nn.depthwise_conv2d(s={st},{p},d={dil},m={ws[3]})",
                      lambda x, w, _s=st, _p=p, _d=dil: tfc.nn.depthwise_conv2d(
                          x, w, [1, _s, _s, 1], _p, dilations=[_d, _d]),
                      lambda x, w, _s=st, _p=p, _d=dil: tf.nn.depthwise_conv2d(
                          x, w, [1, _s, _s, 1], _p, dilations=[_d, _d]),
                      conv_more_cases([(2, 7, 6, 3), ws]), "bound", bound=sum_bound(9)))
    S.append(Spec("nn.separable_conv2d(s=2,SAME,m=2)",
                  lambda x, d, q: tfc.nn.separable_conv2d(x, d, q, [1, 2, 2, 1], "SAME"),
                  lambda x, d, q: tf.nn.separable_conv2d(x, d, q, [1, 2, 2, 1], "SAME"),
                  conv_more_cases([(2, 7, 6, 3), (3, 3, 3, 2), (1, 1, 6, 4)]), "bound",
                  bound=sum_bound(9 * 6)))

    def gnorm_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in (np.float32, np.float64):
            yield np.dtype(dt).name, [_rand(rng, dt, (3, 4)), _rand(rng, dt, (5,))]
            yield np.dtype(dt).name + " small", [_rand(rng, dt, (3, 4), -0.01, 0.01),
                                                 _rand(rng, dt, (5,), -0.01, 0.01)]
    S.append(Spec("clip_by_global_norm",
                  lambda a, b: _flat(tfc.clip_by_global_norm([a, b], 1.0)),
                  lambda a, b: _flat(tf.clip_by_global_norm([a, b], 1.0)),
                  gnorm_cases, "ulp", ulp_table(4, 8, 8)))
    # -- TF1 call forms, dtype inference and edge cases: one function of the module (tfc or
    # tf: their names agree), the same inputs
    def same(name: str, fn: Callable[..., Any], inputs: Inputs, mode: str = "exact",
             ulps: float = 0, bound: Callable | None = None) -> None:
        S.append(Spec(name, lambda *a, _f=fn: _f(tfc, *a), lambda *a, _f=fn: _f(tf, *a),
                      fixed(("", inputs)), mode, {np.float16: ulps, np.float32: ulps,
                                                  np.float64: ulps}, bound, feed=bool(inputs)))
    rng = np.random.default_rng(7)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    w = rng.normal(size=(3, 3, 4, 2)).astype(np.float32)
    img = rng.normal(size=(1, 7, 7, 4)).astype(np.float32)
    f32 = np.float32
    same("reduce_sum(axis=[])", lambda m, a: m.reduce_sum(a, axis=[]), [x])
    same("reduce_max(axis=[])", lambda m, a: m.reduce_max(a, axis=[]), [x])
    same("reduce_sum(axis=[-1,0])", lambda m, a: m.reduce_sum(a, axis=[-1, 0]), [x])
    same("fill(int value)", lambda m: m.fill([2], 7), [])
    same("fill(float value)", lambda m: m.fill([2], 7.5), [])
    same("fill(bool value)", lambda m: m.fill([2], True), [])
    same("fill(i64 2**62+1)", lambda m: m.fill([2], np.int64(2**62 + 1)), [])
    same("range(1,10,0.5)", lambda m: m.range(1, 10, 0.5), [])
    same("range(i64 2**40)", lambda m: m.range(2**40, 2**40 + 3, dtype=m.int64), [])
    same("nn.conv2d(strides [1,2,2,1])", lambda m, a, b: m.nn.conv2d(a, b, [1, 2, 2, 1],
                                                                      "SAME"), [img, w],
         "bound", bound=conv_bound)
    same("nn.conv2d(dilations 2)", lambda m, a, b: m.nn.conv2d(a, b, 1, "SAME", dilations=2),
         [img, w], "bound", bound=conv_bound)
    same("nn.conv2d(dilations [1,2,2,1])",
         lambda m, a, b: m.nn.conv2d(a, b, 1, "VALID", dilations=[1, 2, 2, 1]), [img, w],
         "bound", bound=conv_bound)
    same("nn.bias_add(NCHW)", lambda m, a, b: m.nn.bias_add(a, b, data_format="NCHW"),
         [rng.normal(size=(2, 3, 4, 5)).astype(f32), np.arange(3, dtype=f32)])
    same("nn.max_pool2d(ksize [1,2,2,1])",
         lambda m, a: m.nn.max_pool2d(a, [1, 2, 2, 1], [1, 2, 2, 1], "VALID"), [img])
    same("nn.softmax(3-d, axis=1)", lambda m, a: m.nn.softmax(a, axis=1), [x / 8], "ulp", 4)
    same("nn.log_softmax(-inf mask)", lambda m, a: m.nn.log_softmax(a),
         [np.array([[-np.inf, 0, 1]], f32)], "ulp", 4)
    same("nn.sparse_softmax_cross_entropy_with_logits(3-d)",
         lambda m, lab, a: m.nn.sparse_softmax_cross_entropy_with_logits(labels=lab, logits=a),
         [np.array([[0, 3, 1], [2, 2, 0]], np.int32), x / 8], "ulp", 8)
    same("nn.softmax_cross_entropy_with_logits(axis=0)",
         lambda m, lab, a: m.nn.softmax_cross_entropy_with_logits(labels=lab, logits=a, axis=0),
         [np.full((3, 2), 1 / 3, f32), np.arange(6, dtype=f32).reshape(3, 2)], "ulp", 8)
    same("getitem(x[1:100, -100:2])", lambda m, a: a[1:100, -100:2], [x[0]])
    same("getitem(x[::-2])", lambda m, a: a[::-2], [np.arange(5, dtype=f32)])
    same("tile(0)", lambda m, a: m.tile(a, [0, 2]), [x[0]])
    same("transpose(1-d)", lambda m, a: m.transpose(a), [np.arange(3, dtype=f32)])
    same("squeeze(-1)", lambda m, a: m.squeeze(a, -1), [np.ones((2, 1), f32)])
    same("split(axis=-1)", lambda m, a: m.split(a, 2, axis=-1), [x])
    same("gather(axis=-1)", lambda m, a, i: m.gather(a, i, axis=-1),
         [x, np.array([3, 0], np.int32)])
    same("gather(bool params)", lambda m, a, i: m.gather(a, i),
         [np.array([True, False]), np.array([1, 1, 0], np.int32)])
    same("one_hot(int values)", lambda m, i: m.one_hot(i, 3, on_value=2, off_value=0),
         [np.array([0, 2, 5], np.int32)])
    same("one_hot(off_value only)", lambda m, i: m.one_hot(i, 3, off_value=-1),
         [np.array([0, 2], np.int32)])
    same("one_hot(dtype)", lambda m, i: m.one_hot(i, 3, dtype=m.int64),
         [np.array([0, 2], np.int32)])
    same("stack(scalars)", lambda m, a, b: m.stack([a, b]), [f32(1), f32(2)])
    same("expand_dims(-3)", lambda m, a: m.expand_dims(a, -3), [np.ones((2, 3), f32)])
    same("reshape(scalar, [-1])", lambda m, a: m.reshape(a, [-1]), [f32(3)])
    same("reduce_prod(int overflow)", lambda m, a: m.reduce_prod(a),
         [np.array([2**20, 2**20], np.int32)])
    same("reduce_sum(int overflow)", lambda m, a: m.reduce_sum(a),
         [np.array([2**31 - 1, 1], np.int32)])
    same("reduce_mean(f16, sum past 65504)", lambda m, a: m.reduce_mean(a),
         [np.full((3000,), 30, np.float16)], "ulp", 1)
    same("cast(f32 -> f16 overflow)", lambda m, a: m.cast(a, m.float16),
         [np.array([1e10, -1e10, 65519, 65520], f32)])
    same("cast(i64 -> i32 wraps)", lambda m, a: m.cast(a, m.int32),
         [np.array([2**40 + 5, -2**33 - 1], np.int64)])
    same("cast(i64 -> f32 rounds)", lambda m, a: m.cast(a, m.float32),
         [np.array([2**24 + 1, 2**53 + 1], np.int64)])
    same("cast(i32 -> f16 overflow)", lambda m, a: m.cast(a, m.float16),
         [np.array([70000, 2049], np.int32)])
    same("cast(f64 -> f32 ties, overflow)", lambda m, a: m.cast(a, m.float32),
         [np.array([1 + 2**-24, 1 + 3 * 2**-24, 3.5e38], np.float64)])
    same("pow(int)", lambda m, a, b: m.pow(a, b), [np.array([2, -3, 0, 7], np.int32),
                                                  np.array([10, 3, 0, 12], np.int32)])
    same("pow(int, negative exponent)", lambda m, a, b: m.pow(a, b),
         [np.array([2], np.int32), np.array([-1], np.int32)])
    same("pow(empty int, negative exponent)", lambda m, a, b: m.pow(a, b),
         [np.zeros((0, 2), np.int32), np.array([-1, 2], np.int32)])
    same("square(int overflow)", lambda m, a: m.square(a), [np.array([2**16, 46341], np.int32)])
    same("abs(int min)", lambda m, a: m.abs(a), [np.array([-2**31], np.int32)])
    same("clip_by_global_norm(inf norm)",
         lambda m, a, b: _flat(m.clip_by_global_norm([a, b], 1.0)),
         [np.array([np.inf, 1], f32), np.array([1.0], f32)])
    same("clip_by_global_norm(zero norm)",
         lambda m, a, b: _flat(m.clip_by_global_norm([a, b], 1.0)),
         [np.zeros(2, f32), np.zeros(1, f32)])
    same("matrix_inverse(singular)", lambda m, a: m.linalg.inv(a) if m is tf
         else m.matrix_inverse(a), [np.ones((2, 2), f32)])
    same("matrix_determinant(0x0)", lambda m, a: m.linalg.det(a) if m is tf
         else m.matrix_determinant(a), [np.ones((0, 0), f32)])
    same("add_n(int)", lambda m, a, b: m.add_n([a, b]), [np.array([1, 2], np.int32),
                                                        np.array([3, 4], np.int32)])
    xi = np.array([3, 4], np.int32)
    same("int * 0.5", lambda m, a: a * 0.5, [xi])
    same("convert_to_tensor", lambda m, a: a + m.convert_to_tensor([1.5, 2.5]),
         [np.array([1.0, 2.0], f32)])
    same("int + 2.0", lambda m, a: a + 2.0, [xi])
    same("int + 2**40", lambda m, a: a + 2**40, [xi])
    same("f16 + 1e6", lambda m, a: a + 1e6, [np.array([1.5], np.float16)])
    same("constant(2**40, int32)", lambda m: m.constant(2**40, dtype=m.int32), [])
    same("constant(1e40, float32)", lambda m: m.constant(1e40, dtype=m.float32), [])
    same("constant([1.5], int32)", lambda m: m.constant([1.5], dtype=m.int32), [])
    same("zeros_like(dtype)", lambda m, a: m.zeros_like(a, dtype=m.int32),
         [np.array([1.5, np.nan], f32)])
    same("ones_like(dtype)", lambda m, a: m.ones_like(a, dtype=m.bool), [np.array([1.5], f32)])
    same("slice(past the end)", lambda m, a: m.slice(a, [1], [5]), [np.ones(3, f32)])
    same("slice(size -1)", lambda m, a: m.slice(a, [1, 0], [-1, 2]), [x[0]])
    same("argmax(bool)", lambda m, a: m.argmax(a), [np.array([False, True, True])])
    same("reduce_max(bool)", lambda m, a: m.reduce_max(a), [np.array([False, True])])
    same("nn.log_softmax(f16)", lambda m, a: m.nn.log_softmax(a),
         [np.array([[0, 10, -10]], np.float16)], "ulp", 1)
    same("nn.conv2d(int32)", lambda m, a, b: m.nn.conv2d(a, b, 1, "VALID"),
         [np.ones((1, 3, 3, 1), np.int32), np.ones((2, 2, 1, 1), np.int32)])
    same("nn.max_pool2d(int32)", lambda m, a: m.nn.max_pool2d(a, 2, 2, "VALID"),
         [np.arange(16, dtype=np.int32).reshape(1, 4, 4, 1)])
    same("nn.avg_pool2d(SAME edges)", lambda m, a: m.nn.avg_pool2d(a, 3, 2, "SAME"),
         [np.arange(16, dtype=f32).reshape(1, 4, 4, 1)], "ulp", 2)
    same("matmul(broadcast batch)", lambda m, a, b: m.matmul(a, b),
         [np.ones((2, 1, 3, 4), f32), np.ones((5, 4, 2), f32)])
    # control flow: values through cond, while_loop and scan
    v2 = np.array([1.0, -3.0], f32)
    same("cond(false)", lambda m, a: m.cond(m.reduce_sum(a) > 0, lambda: a * 2, lambda: a - 1),
         [v2])
    same("cond(true)", lambda m, a: m.cond(m.reduce_sum(a) < 0, lambda: a * 2, lambda: a - 1),
         [v2])
    same("while_loop", lambda m, a: m.while_loop(lambda i, s: i < 5,
                                                 lambda i, s: (i + 1, s * 2.0),
                                                 [m.constant(0), a]), [v2])
    grid = np.arange(1, 7, dtype=f32).reshape(3, 2)
    same("scan", lambda m, a: m.scan(lambda acc, e: acc + e, a), [grid])
    same("scan(initializer)", lambda m, a: m.scan(lambda acc, e: acc * e, a,
                                                  initializer=m.constant([1.0, 1.0])), [grid])
    same("scan(reverse)", lambda m, a: m.scan(lambda acc, e: acc + e, a, reverse=True), [grid])
    same("pad(constant_values)", lambda m, a: m.pad(a, [[1, 1]], constant_values=5),
         [np.array([1.5, 2.5], f32)])
    S.extend(array_specs(tf))  # array24
    S.extend(segment_specs(tf))  # segment25
    S.extend(linalg_specs(tf))  # linalg25
    return S


# ---- array24: scans, sorts, gather_nd, einsum ... ------------------------------------------

def array_specs(tf: Any) -> list[Spec]:
    """cumsum/cumprod, reverse, gather_nd, unstack, eye, linspace, top_k, sort, argsort,
    sequence_mask, reduce_logsumexp, einsum, tensordot."""
    S: list[Spec] = []
    f32 = np.float32

    def scan_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in NUMERIC:
            name = np.dtype(dt).name
            yield f"{name} rand", [_rand(rng, dt, (3, 5), -2, 2)]
            if dt in FLOATS:
                yield f"{name} special", [_specials(dt).reshape(5, 5)]
        yield "float32 long", [_rand(rng, np.float32, (2, 300), 0, 1)]
    for fn in ("cumsum", "cumprod"):
        for axis, ex, rev in [(0, False, False), (1, False, False), (1, True, False),
                              (1, False, True), (0, True, True), (-1, True, True)]:
            tfc_f = tfc.cumsum if fn == "cumsum" else tfc.math.cumprod
            tf_f = tf.cumsum if fn == "cumsum" else tf.math.cumprod
            S.append(Spec(f"{fn}(axis={axis},exclusive={ex},reverse={rev})",
                          lambda x, _f=tfc_f, _a=axis, _e=ex, _r=rev: _f(x, _a, _e, _r),
                          lambda x, _f=tf_f, _a=axis, _e=ex, _r=rev: _f(x, _a, _e, _r),
                          scan_cases))

    def any_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in NUMERIC + (np.bool_,):
            yield np.dtype(dt).name, [_rand(rng, dt, (2, 3, 4))]
    for axes in ([0], [2], [0, 2], [-1, 1], []):
        S.append(Spec(f"reverse({axes})", lambda x, _a=axes: tfc.reverse(x, _a),
                      lambda x, _a=axes: tf.reverse(x, _a), any_cases))
    for axis in (0, 1, -1):
        S.append(Spec(f"unstack(axis={axis})", lambda x, _a=axis: tfc.unstack(x, axis=_a),
                      lambda x, _a=axis: tf.unstack(x, axis=_a), any_cases))

    def gnd_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in NUMERIC:
            for it in INTS:
                yield (f"{np.dtype(dt).name}[{np.dtype(it).name}] k=2",
                       [_rand(rng, dt, (3, 4, 2)), np.array([[2, 3], [0, 0], [1, 2]], it)])
                yield (f"{np.dtype(dt).name}[{np.dtype(it).name}] k=3 2d",
                       [_rand(rng, dt, (3, 4, 2)), np.array([[[2, 3, 1]], [[0, 1, 0]]], it)])
                yield (f"{np.dtype(dt).name}[{np.dtype(it).name}] k=1",
                       [_rand(rng, dt, (3, 4, 2)), np.array([[2], [0]], it)])
    S.append(Spec("gather_nd", tfc.gather_nd, tf.gather_nd, gnd_cases))

    def gnd_oob(rng: np.random.Generator) -> Iterator[tuple[str, Inputs]]:
        for idx in ([[0, 4]], [[-1, 0]], [[3, 0]]):  # [0, 4] would be row 4: a valid row
            yield f"index {idx[0]}", [rng.normal(size=(3, 4)).astype(f32),
                                      np.array(idx, np.int32)]
    S.append(Spec("gather_nd(out of range)", tfc.gather_nd, tf.gather_nd, gen_fn(gnd_oob)))

    def sort_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in NUMERIC:
            name = np.dtype(dt).name
            yield f"{name} ties", [rng.integers(-2, 3, size=(4, 9)).astype(dt)]
            yield f"{name} rand", [_rand(rng, dt, (3, 7))]
            if dt in FLOATS:
                sp = _specials(dt)
                yield f"{name} special no nan", [sp[~np.isnan(sp)].reshape(4, 6)]
                yield f"{name} nan", [sp.reshape(5, 5)]
    for k in (1, 3):
        S.append(Spec(f"math.top_k(k={k})", lambda x, _k=k: tuple(tfc.math.top_k(x, _k)),
                      lambda x, _k=k: tuple(tf.math.top_k(x, _k)), sort_cases))
    S.append(Spec("nn.top_k", lambda x: tuple(tfc.nn.top_k(x, 2)),
                  lambda x: tuple(tf.nn.top_k(x, 2)), sort_cases))
    for d in ("ASCENDING", "DESCENDING"):
        for axis in (-1, 0):
            S.append(Spec(f"sort({d},axis={axis})",
                          lambda x, _d=d, _a=axis: tfc.sort(x, _a, _d),
                          lambda x, _d=d, _a=axis: tf.sort(x, _a, _d), sort_cases))
            S.append(Spec(f"argsort({d},axis={axis},stable)",
                          lambda x, _d=d, _a=axis: tfc.argsort(x, _a, _d, stable=True),
                          lambda x, _d=d, _a=axis: tf.argsort(x, _a, _d, stable=True),
                          sort_cases))
    S.append(Spec("math.top_k(k > n)", lambda x: tuple(tfc.math.top_k(x, 5)),
                  lambda x: tuple(tf.math.top_k(x, 5)),
                  fixed(("k=5 of 3", [np.zeros((2, 3), f32)]))))

    def lse_bound(axis: Any, keep: bool = False) -> Callable:
        def bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
            x = inputs[0]
            n = x.size if axis is None else x.shape[axis]
            return 4 * (n + 2) * _eps(x) * (1 + np.abs(want.astype(np.float64)))
        return bound

    def lse_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            name = np.dtype(dt).name
            yield f"{name} rand", [_rand(rng, dt, (3, 6), -5, 5)]
            yield f"{name} big", [(_rand(rng, dt, (3, 6), -5, 5) + 60).astype(dt)]
            yield f"{name} -inf rows and inf", [np.array(
                [[-np.inf] * 4, [1, -np.inf, 2, 0], [np.inf, 1, 2, 3]], dt)]
    for axis, keep in ((1, False), (0, True), (None, False)):
        S.append(Spec(f"reduce_logsumexp(axis={axis},keepdims={keep})",
                      lambda x, _a=axis, _k=keep: tfc.reduce_logsumexp(x, _a, _k),
                      lambda x, _a=axis, _k=keep: tf.reduce_logsumexp(x, _a, _k),
                      lse_cases, "bound", bound=lse_bound(axis, keep)))

    def ein_bound(eq: str) -> Callable:
        def bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
            ab = [np.abs(x.astype(np.float64)) for x in inputs]
            terms = np.einsum(eq, *ab)
            n = max(1, int(np.prod(inputs[0].shape)))
            return 2 * n * _eps(inputs[0]) * terms
        return bound

    for eq, shapes in [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
                       ("bij,jk->bki", [(2, 3, 4), (4, 5)]), ("ij,ij->i", [(3, 4), (3, 4)]),
                       ("i,j->ij", [(3,), (4,)]), ("ij,kj", [(2, 3), (4, 3)]),
                       ("abc,cd->", [(2, 3, 4), (4, 2)]), ("ij->ji", [(2, 3)]),
                       ("ijk->j", [(2, 3, 4)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)])]:
        def ein_cases(rng: np.random.Generator, quick: bool, _s=shapes
                      ) -> Iterator[tuple[str, Inputs]]:
            for dt in NUMERIC:
                yield np.dtype(dt).name, [_rand(rng, dt, s) for s in _s]
        S.append(Spec(f"einsum({eq})", lambda *a, _e=eq: tfc.einsum(_e, *a),
                      lambda *a, _e=eq: tf.einsum(_e, *a), ein_cases, "bound",
                      bound=ein_bound(eq)))
    S.append(Spec("einsum(rank mismatch)", lambda a, b: tfc.einsum("ijk,jk->i", a, b),
                  lambda a, b: tf.einsum("ijk,jk->i", a, b),
                  fixed(("f32", [np.ones((2, 3), f32), np.ones((2, 3), f32)]))))

    def td_bound(axes: Any) -> Callable:
        def bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
            a, b = (np.abs(x.astype(np.float64)) for x in inputs)
            return 2 * max(1, a.size) * _eps(inputs[0]) * np.tensordot(a, b, axes)
        return bound
    for axes, sa, sb in [(1, (3, 4), (4, 5)), (2, (2, 3, 4), (3, 4, 2)),
                         (([1, 2], [1, 0]), (2, 3, 4), (4, 3, 5)), (0, (2, 3), (4,))]:
        def td_cases(rng: np.random.Generator, quick: bool, _a=sa, _b=sb
                     ) -> Iterator[tuple[str, Inputs]]:
            for dt in NUMERIC:
                yield np.dtype(dt).name, [_rand(rng, dt, _a), _rand(rng, dt, _b)]
        S.append(Spec(f"tensordot(axes={axes})",
                      lambda a, b, _x=axes: tfc.tensordot(a, b, _x),
                      lambda a, b, _x=axes: tf.tensordot(a, b, _x), td_cases, "bound",
                      bound=td_bound(axes)))

    def sm_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for it in INTS:
            yield np.dtype(it).name, [np.array([0, 2, 5, 1], it)]
            yield np.dtype(it).name + " 2d", [np.array([[0, 3], [4, 1]], it)]
    S.append(Spec("sequence_mask(maxlen=4)", lambda n: tfc.sequence_mask(n, 4),
                  lambda n: tf.sequence_mask(n, 4), sm_cases))
    S.append(Spec("sequence_mask(f32)", lambda n: tfc.sequence_mask(n, 3, tfc.float32),
                  lambda n: tf.sequence_mask(n, 3, tf.float32), sm_cases))

    def const(name: str, tfc_fn: Callable, tf_fn: Callable) -> None:
        S.append(Spec(name, tfc_fn, tf_fn, fixed(("", [])), feed=False))
    const("sequence_mask(list)", lambda: tfc.sequence_mask([1, 3, 0]),
          lambda: tf.sequence_mask([1, 3, 0]))
    const("lin_space(TF1 name)", lambda: tfc.lin_space(0.0, 1.0, 3),
          lambda: tf.linspace(0.0, 1.0, 3))
    const("eye(3)", lambda: tfc.eye(3), lambda: tf.eye(3))
    const("eye(2,4,batch,int32)", lambda: tfc.eye(2, 4, [3], tfc.int32),
          lambda: tf.eye(2, 4, [3], tf.int32))
    for a, b, n in [(0.0, 1.0, 5), (0.1, 1.7, 7), (-3.3, 2.9, 100), (2.0, 3.0, 1),
                    (2.0, 3.0, 0), (1.0, -1.0, 33)]:
        const(f"linspace({a},{b},{n})", lambda _a=a, _b=b, _n=n: tfc.linspace(_a, _b, _n),
              lambda _a=a, _b=b, _n=n: tf.linspace(_a, _b, _n))
        const(f"linspace(f64 tensors,{a},{b},{n})",
              lambda _a=a, _b=b, _n=n: tfc.linspace(tfc.constant(np.float64(_a)),
                                                    tfc.constant(np.float64(_b)), _n),
              lambda _a=a, _b=b, _n=n: tf.linspace(tf.constant(np.float64(_a)),
                                                   tf.constant(np.float64(_b)), _n))
    return S


# ---- segment25: segment reductions and N-d scatters ---------------------------------------

def segment_specs(tf: Any) -> list[Spec]:
    """unsorted_segment_* and segment_* (every kind), scatter_nd, tensor_scatter_nd_*,
    with dropped negative ids, empty segments, special values and bad ids."""
    S: list[Spec] = []
    m = tfc.math
    unsorted_ids = np.array([3, 0, -1, 3, 4, 0, 3, -2], np.int32)  # 1, 2 empty (of 6)
    sorted_ids = np.array([0, 0, 1, 3, 3, 3, 4, 4], np.int32)  # 2 a gap; 5 segments

    def seg_bound(ids: np.ndarray, mean: bool = False) -> Callable:
        """|err| <= 2 * k * eps * sum|x| over a segment's k rows (/k for means)."""
        def bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
            x = np.abs(inputs[0].astype(np.float64))
            out = np.zeros(want.shape)
            for sgm in range(want.shape[0]):
                k = int((ids == sgm).sum())
                t = x[ids == sgm].sum(0) if k else 0.0
                out[sgm] = 2 * max(k, 1) * _eps(inputs[0]) * t / (max(k, 1) if mean else 1)
            return out + np.abs(want.astype(np.float64)) * _eps(inputs[0]) * 4
        return bound

    def seg_cases(ids: np.ndarray, dtypes: Sequence[Any]) -> Callable:
        def gen(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
            for dt in dtypes:
                name = np.dtype(dt).name
                yield f"{name} rand", [_rand(rng, dt, (8, 3), -3, 3), ids]
                yield f"{name} vector", [_rand(rng, dt, (8,), -3, 3), ids.astype(np.int64)]
                if dt in FLOATS:
                    sp = _specials(dt)
                    yield f"{name} special", [sp[~np.isnan(sp)][:24].reshape(8, 3), ids]
                    yield f"{name} nan", [np.where(np.arange(24).reshape(8, 3) % 7 == 0,
                                                   np.nan, _rand(rng, dt, (8, 3))).astype(dt),
                                          ids]
        return gen

    for kind in ("sum", "max", "min", "prod"):
        exact = kind in ("max", "min")
        tfc_u, tf_u = getattr(m, f"unsorted_segment_{kind}"), \
            getattr(tf.math, f"unsorted_segment_{kind}")
        tfc_s, tf_s = getattr(m, f"segment_{kind}"), getattr(tf.math, f"segment_{kind}")
        S.append(Spec(f"unsorted_segment_{kind}",
                      lambda d, i, _f=tfc_u: _f(d, i, 6), lambda d, i, _f=tf_u: _f(d, i, 6),
                      seg_cases(unsorted_ids, NUMERIC), "exact" if exact else "bound",
                      bound=None if exact else seg_bound(unsorted_ids)))
        S.append(Spec(f"segment_{kind}",
                      lambda d, i, _f=tfc_s: _f(d, i, num_segments=5),
                      lambda d, i, _f=tf_s: _f(d, i), seg_cases(sorted_ids, NUMERIC),
                      "exact" if exact else "bound",
                      bound=None if exact else seg_bound(sorted_ids)))
    for fn, sqrt in (("unsorted_segment_mean", False), ("unsorted_segment_sqrt_n", True)):
        S.append(Spec(f"{fn}", lambda d, i, _f=getattr(m, fn): _f(d, i, 6),
                      lambda d, i, _f=getattr(tf.math, fn): _f(d, i, 6),
                      seg_cases(unsorted_ids, FLOATS + (np.int32,)), "bound",
                      bound=seg_bound(unsorted_ids, mean=True)))
    S.append(Spec("segment_mean", lambda d, i: m.segment_mean(d, i, num_segments=5),
                  tf.math.segment_mean, seg_cases(sorted_ids, FLOATS), "bound",
                  bound=seg_bound(sorted_ids, mean=True)))

    def bad_ids(rng: np.random.Generator) -> Iterator[tuple[str, Inputs]]:
        for ids in ([0, 1, 6, 2], [0, 9, -1, 1]):
            yield f"ids {ids}", [np.ones(4, np.float32), np.array(ids, np.int32)]
    S.append(Spec("unsorted_segment_max(out of range)",
                  lambda d, i: m.unsorted_segment_max(d, i, 6),
                  lambda d, i: tf.math.unsorted_segment_max(d, i, 6), gen_fn(bad_ids)))

    def bad_sorted(rng: np.random.Generator) -> Iterator[tuple[str, Inputs]]:
        for ids in ([0, 2, 1, 2], [-1, 0, 1, 2], [0, 0, 1, 1]):  # (the last one is good)
            yield f"ids {ids}", [np.ones(4, np.float32), np.array(ids, np.int32)]
    S.append(Spec("segment_sum(bad ids)", lambda d, i: m.segment_sum(d, i,
                                                                         num_segments=2),
                  tf.math.segment_sum, gen_fn(bad_sorted)))

    idx = np.array([[1, 3], [0, 0], [1, 3], [2, 1]], np.int32)  # a duplicate tuple

    def snd_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in NUMERIC:
            for it in INTS:
                name = f"{np.dtype(dt).name}[{np.dtype(it).name}]"
                yield f"{name} rows", [idx.astype(it), _rand(rng, dt, (4, 2), -3, 3)]
        yield "float32 elements", [np.array([[1, 3, 0], [2, 0, 1]], np.int32),
                                   _rand(rng, np.float32, (2,), -3, 3)]
    S.append(Spec("scatter_nd", lambda i, u: tfc.scatter_nd(i, u, [3, 4, 2]),
                  lambda i, u: tf.scatter_nd(i, u, [3, 4, 2]), snd_cases))

    def tsnd_cases(dup: bool) -> Callable:
        def gen(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
            ii = idx if dup else idx[1:]
            for dt in NUMERIC:
                name = np.dtype(dt).name
                yield f"{name} rows", [_rand(rng, dt, (3, 4, 2), -3, 3), ii,
                                       _rand(rng, dt, (len(ii), 2), -3, 3)]
                if dt in FLOATS:
                    sp = _specials(dt)
                    sp = sp[~np.isnan(sp)]
                    yield f"{name} special", [sp[:24].reshape(3, 4, 2), ii,
                                              sp[-2 * len(ii):].reshape(len(ii), 2)]
        return gen
    for fn in ("add", "sub", "max", "min"):
        S.append(Spec(f"tensor_scatter_nd_{fn}", getattr(tfc, f"tensor_scatter_nd_{fn}"),
                      getattr(tf, f"tensor_scatter_nd_{fn}"), tsnd_cases(True)))
    # duplicates: TF's update order is unspecified; without them the result is defined
    S.append(Spec("tensor_scatter_nd_update", tfc.tensor_scatter_nd_update,
                  tf.tensor_scatter_nd_update, tsnd_cases(False)))

    def snd_oob(rng: np.random.Generator) -> Iterator[tuple[str, Inputs]]:
        for bad in ([[0, 4]], [[-1, 0]], [[3, 0]]):  # [0, 4] would be row 4: a valid row
            yield f"index {bad[0]}", [np.zeros((3, 4), np.float32), np.array(bad, np.int32),
                                      np.ones(1, np.float32)]
    for fn in ("add", "update", "max"):
        S.append(Spec(f"tensor_scatter_nd_{fn}(out of range)",
                      getattr(tfc, f"tensor_scatter_nd_{fn}"),
                      getattr(tf, f"tensor_scatter_nd_{fn}"), gen_fn(snd_oob)))

    def bin_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for it in INTS:
            name = np.dtype(it).name
            yield f"{name} full", [np.array([0, 1, 1, 5, 3, 5, 5, 2], it)]  # max 5: 6 bins
            yield f"{name} 2d", [np.array([[5, 0, 1, 2], [2, 2, 4, 0]], it)]
        yield "negative", [np.array([1, -1, 2], np.int32)]
        yield "too large", [np.array([1, 7, 2], np.int32)]
    S.append(Spec("bincount(minlength=6)", lambda a: tfc.math.bincount(a, minlength=6),
                  lambda a: tf.math.bincount(a, minlength=6), bin_cases))
    S.append(Spec("bincount(maxlength=3)",
                  lambda a: tfc.math.bincount(a, minlength=3, maxlength=3),
                  lambda a: tf.math.bincount(a, minlength=3, maxlength=3), bin_cases))
    S.append(Spec("bincount(weights)",
                  lambda a: tfc.math.bincount(a, weights=tfc.cast(a, tfc.float32) * 0.5,
                                              minlength=6),
                  lambda a: tf.math.bincount(a, weights=tf.cast(a, tf.float32) * 0.5,
                                             minlength=6), bin_cases))
    S.append(Spec("bincount(binary_output)",
                  lambda a: tfc.math.bincount(a, minlength=6, binary_output=True),
                  lambda a: tf.math.bincount(a, minlength=6, binary_output=True), bin_cases))

    def cm_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for it in INTS:
            yield np.dtype(it).name, [rng.integers(0, 4, 12).astype(it),
                                      rng.integers(0, 4, 12).astype(it)]
        yield "label out of range", [np.array([0, 4, 1], np.int32), np.array([0, 1, 1],
                                                                             np.int32)]
        yield "negative prediction", [np.array([0, 2, 1], np.int32),
                                      np.array([0, -1, 1], np.int32)]
    S.append(Spec("confusion_matrix", lambda a, b: tfc.math.confusion_matrix(a, b, 4),
                  lambda a, b: tf.math.confusion_matrix(a, b, 4), cm_cases))
    S.append(Spec("confusion_matrix(weights, float32)",
                  lambda a, b: tfc.math.confusion_matrix(
                      a, b, 4, weights=tfc.cast(a, tfc.float32) + 0.5, dtype=tfc.float32),
                  lambda a, b: tf.math.confusion_matrix(
                      a, b, 4, weights=tf.cast(a, tf.float32) + 0.5, dtype=tf.float32),
                  cm_cases))
    return S


# ---- linalg25: tf.linalg, norms, moments, and the tf.nn additions ---------------------------

def linalg_specs(tf: Any) -> list[Spec]:
    """tfc.linalg (diagonals, bands, transposes, matvec, inv/det, norm), tfc.norm,
    clip_by_norm, tfc.math's moments, and nn swish/silu, in_top_k, log_poisson_loss,
    weighted_cross_entropy_with_logits, lrn, sufficient_statistics, normalize_moments."""
    S: list[Spec] = []
    L, TL = tfc.linalg, tf.linalg

    def mats(shape: Sequence[int], dtypes: Sequence[Any] = NUMERIC) -> Callable:
        def gen(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
            for dt in dtypes:
                yield np.dtype(dt).name, [_rand(rng, dt, shape)]
                if dt in FLOATS:
                    yield f"{np.dtype(dt).name} special", [np.resize(_specials(dt), shape)]
        return gen

    for k in (0, 1, -1, 2):
        S.append(Spec(f"linalg.diag_part(k={k})", lambda x, _k=k: L.diag_part(x, k=_k),
                      lambda x, _k=k: TL.diag_part(x, k=_k), mats((2, 3, 4))))
        S.append(Spec(f"linalg.diag(k={k})", lambda x, _k=k: L.diag(x, k=_k),
                      lambda x, _k=k: TL.diag(x, k=_k), mats((2, 3))))
    S.append(Spec("linalg.diag(num_rows,padding)",
                  lambda x: L.diag(x, k=1, num_rows=5, padding_value=7),
                  lambda x: TL.diag(x, k=1, num_rows=5, padding_value=7), mats((3,))))
    S.append(Spec("linalg.trace", L.trace, TL.trace, mats((2, 4, 4), FLOATS), "bound",
                  bound=reduce_bound(None)))
    for lo, up in ((0, 0), (1, 0), (0, -1), (-1, 1), (2, 2)):
        S.append(Spec(f"linalg.band_part({lo},{up})",
                      lambda x, _l=lo, _u=up: L.band_part(x, _l, _u),
                      lambda x, _l=lo, _u=up: TL.band_part(x, _l, _u), mats((2, 3, 4))))
    S.append(Spec("linalg.matrix_transpose", L.matrix_transpose, TL.matrix_transpose,
                  mats((2, 3, 4))))
    S.append(Spec("linalg.adjoint", L.adjoint, TL.adjoint, mats((3, 4), FLOATS)))

    def mm2(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in (np.float32, np.float64):
            yield np.dtype(dt).name, [_rand(rng, dt, (2, 3, 4)), _rand(rng, dt, (2, 3, 5))]

    def dot_bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
        return 8 * 4 * _eps(inputs[0]) * (np.abs(want) + 9 * 3)
    S.append(Spec("linalg.matmul(adjoint_a)", lambda a, b: L.matmul(a, b, adjoint_a=True),
                  lambda a, b: TL.matmul(a, b, adjoint_a=True), mm2, "bound", bound=dot_bound))

    def mv_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in (np.float32, np.float64):
            yield np.dtype(dt).name, [_rand(rng, dt, (2, 3, 4)), _rand(rng, dt, (2, 4))]
    S.append(Spec("linalg.matvec", L.matvec, TL.matvec, mv_cases, "bound", bound=dot_bound))

    def lin_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in (np.float32, np.float64):
            a = rng.normal(size=(2, 4, 4)) + 4 * np.eye(4)
            yield np.dtype(dt).name, [a.astype(dt)]

    def cond_bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
        a = inputs[0].astype(np.float64)
        c = np.linalg.cond(a).reshape(a.shape[:-2] + (1,) * (want.ndim - a.ndim + 2))
        return 4 * a.shape[-1] * _eps(inputs[0]) * c * np.max(np.abs(want)) + 0 * want
    S.append(Spec("linalg.inv(adjoint)", lambda x: L.inv(x, adjoint=True),
                  lambda x: TL.inv(x, adjoint=True), lin_cases, "bound", bound=cond_bound))
    S.append(Spec("linalg.det", L.det, TL.det, lin_cases, "bound", bound=cond_bound))

    def spd_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            m = rng.normal(size=(2, 4, 4))
            a = m @ np.swapaxes(m, 1, 2) + 4 * np.eye(4) + np.triu(rng.normal(size=(4, 4)), 1)
            yield np.dtype(dt).name, [a.astype(dt)]
        yield "not positive definite", [np.array([[1.0, 2.0], [2.0, 1.0]])]
    S.append(Spec("linalg.cholesky", L.cholesky, TL.cholesky, spd_cases, "bound",
                  bound=cond_bound))

    def tri_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in (np.float32, np.float64):
            a = rng.normal(size=(2, 4, 4)) + 4 * np.eye(4)
            yield np.dtype(dt).name, [a.astype(dt), rng.normal(size=(2, 4, 3)).astype(dt)]
        yield "one matrix", [rng.normal(size=(4, 4)) + 4 * np.eye(4),
                             rng.normal(size=(2, 4, 3))]
        yield "zero pivot", [np.diag([1.0, 0.0, 2.0]), np.ones((3, 2))]

    def tri_bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
        return 16 * _eps(inputs[0]) * np.max(np.abs(want[np.isfinite(want)]), initial=1.0)
    for lower, adj in [(True, False), (True, True), (False, False), (False, True)]:
        S.append(Spec(f"linalg.triangular_solve(lower={lower},adjoint={adj})",
                      lambda a, b, _l=lower, _a=adj: L.triangular_solve(a, b, _l, _a),
                      lambda a, b, _l=lower, _a=adj: TL.triangular_solve(a, b, _l, _a),
                      tri_cases, "bound", bound=tri_bound))

    def chol_solve_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in (np.float32, np.float64):
            m = rng.normal(size=(2, 4, 4))
            a = m @ np.swapaxes(m, 1, 2) + 4 * np.eye(4)
            yield np.dtype(dt).name, [a.astype(dt), rng.normal(size=(2, 4, 2)).astype(dt)]
    S.append(Spec("linalg.cholesky_solve", lambda a, b: L.cholesky_solve(L.cholesky(a), b),
                  lambda a, b: TL.cholesky_solve(TL.cholesky(a), b), chol_solve_cases,
                  "bound", bound=lambda i, w: cond_bound(i, w) * 4))
    def slog_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            yield np.dtype(dt).name, [rng.normal(size=(3, 4, 4)).astype(dt)]
        yield "singular", [np.outer(np.arange(1.0, 4.0), np.ones(3))]
        yield "past the float32 range", [(40 * np.eye(30)).astype(np.float32)]
    S.append(Spec("linalg.slogdet", L.slogdet, TL.slogdet, slog_cases, "bound",
                  bound=lambda i, w: 64 * _eps(i[0]) * (np.abs(w) + 1)))
    S.append(Spec("linalg.logdet", L.logdet, TL.logdet, spd_cases, "bound",
                  bound=lambda i, w: 16 * 4 * _eps(i[0]) * (np.abs(w) + 4)))

    # norms: a sum of n squares (or |x|), then sqrt/pow: bounded as a reduction
    def norm_bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
        x = inputs[0]
        return 4 * x.size * _eps(x) * (np.abs(want.astype(np.float64)) + 1e-30)
    vec = mats((3, 4, 5), FLOATS)
    for ordv, axis in [("euclidean", None), (1, None), (np.inf, None), (2, 1), (1, -1),
                       (np.inf, 0), (3, 2), (0.5, 1), ("euclidean", [1, 2]),
                       ("fro", (0, 2)), (1, [1, 2]), (np.inf, [-1, -2]), (1, (2, 0))]:
        S.append(Spec(f"norm(ord={ordv},axis={axis})",
                      lambda x, _o=ordv, _a=axis: tfc.norm(x, ord=_o, axis=_a),
                      lambda x, _o=ordv, _a=axis: tf.norm(x, ord=_o, axis=_a), vec, "bound",
                      bound=norm_bound))
    S.append(Spec("norm(keepdims)", lambda x: tfc.norm(x, axis=[0, 1], keepdims=True),
                  lambda x: tf.norm(x, axis=[0, 1], keepdims=True), vec, "bound",
                  bound=norm_bound))
    S.append(Spec("norm(matrix 2-norm)", lambda x: tfc.norm(x, ord=2, axis=[1, 2]),
                  lambda x: tf.norm(x, ord=2, axis=[1, 2]), mats((2, 3, 3), (np.float32,)),
                  "bound", bound=norm_bound))
    S.append(Spec("linalg.norm", lambda x: L.norm(x, axis=1), lambda x: TL.norm(x, axis=1),
                  vec, "bound", bound=norm_bound))
    S.append(Spec("linalg.normalize", lambda x: L.normalize(x, axis=1),
                  lambda x: TL.normalize(x, axis=1), vec, "bound", bound=norm_bound))
    S.append(Spec("linalg.l2_normalize", lambda x: L.l2_normalize(x, axis=1),
                  lambda x: TL.l2_normalize(x, axis=1), vec, "bound", bound=norm_bound))
    for axes in (None, [1], [0, 2]):
        for clip in (1.0, 0.0, -1.0, 1e3):
            S.append(Spec(f"clip_by_norm({clip},axes={axes})",
                          lambda x, _c=clip, _a=axes: tfc.clip_by_norm(x, _c, axes=_a),
                          lambda x, _c=clip, _a=axes: tf.clip_by_norm(x, _c, axes=_a), vec,
                          "bound", bound=norm_bound))

    def clip_t(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            yield np.dtype(dt).name, [_rand(rng, dt, (3, 4)), np.asarray(2.0, dt)]
        yield "zeros", [np.zeros((2, 3), np.float32), np.asarray(1.0, np.float32)]
    S.append(Spec("clip_by_norm(tensor clip)", lambda x, c: tfc.clip_by_norm(x, c, axes=[1]),
                  lambda x, c: tf.clip_by_norm(x, c, axes=[1]), clip_t, "bound",
                  bound=norm_bound))

    for axis in (None, 0, [1, 2], -1):
        for fn in ("reduce_variance", "reduce_std", "reduce_euclidean_norm"):
            for keep in (False, True):
                S.append(Spec(f"math.{fn}(axis={axis},keepdims={keep})",
                              lambda x, _f=fn, _a=axis, _k=keep: getattr(tfc.math, _f)(
                                  x, _a, _k),
                              lambda x, _f=fn, _a=axis, _k=keep: getattr(tf.math, _f)(
                                  x, _a, _k), vec, "bound", bound=norm_bound))

    # -- nn
    act = mats((4, 5), FLOATS)
    S.append(Spec("nn.swish", tfc.nn.swish, tf.nn.swish, act, "ulp", ulp_table(2, 4, 4)))
    S.append(Spec("nn.silu(beta=1.5)", lambda x: tfc.nn.silu(x, 1.5),
                  lambda x: tf.nn.silu(x, 1.5), act, "ulp", ulp_table(2, 4, 4)))
    S.append(Spec("nn.softmax(axis=None)", lambda x: tfc.nn.softmax(x, axis=None),
                  lambda x: tf.nn.softmax(x, axis=None),  # (specials: nn.softmax's)
                  lambda rng, quick: ((np.dtype(dt).name, [_rand(rng, dt, (4, 5), -5, 5)])
                                      for dt in FLOATS), "ulp", ulp_table(2, 4, 4)))
    S.append(Spec("nn.log_softmax(dim=0)", lambda x: tfc.nn.log_softmax(x, dim=0),
                  lambda x: tf.compat.v1.nn.log_softmax(x, dim=0), mats((3, 4), (np.float32,)),
                  "bound", bound=lambda i, w: 4 * _eps(i[0]) * (np.abs(w) + 3)))

    def topk_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        p = np.array([[1.2, -0.3, 2.8, 5.2], [0.1, 0.0, 0.0, 0.0], [0.0, 0.5, 0.3, 0.3],
                      [np.nan, 1, 2, 3], [1, np.inf, 2, 3], [1, 2, 3, -np.inf],
                      [1, 1, 1, 1], [-np.inf, 1, 2, 3], [np.inf, 1, 0, 0]], np.float32)
        for it in INTS:
            yield f"ties {np.dtype(it).name}", [p, np.array([0, 1, 3, 1, 1, 3, 2, 1, 1], it)]
            yield f"nonfinite target {np.dtype(it).name}", [
                p, np.array([2, 0, 1, 0, 1, 3, 0, 0, 0], it)]
        yield "out of range", [p, np.array([4, -1, 0, 1, 2, 3, 9, 5, -2], np.int32)]
        yield "rand", [_rand(rng, np.float32, (6, 9)), rng.integers(0, 9, 6).astype(np.int32)]
    for k in (0, 1, 2, 3, 4, 5):
        S.append(Spec(f"nn.in_top_k(k={k})", lambda p, t, _k=k: tfc.nn.in_top_k(p, t, _k),
                      lambda p, t, _k=k: tf.compat.v1.nn.in_top_k(p, t, _k), topk_cases))
    S.append(Spec("math.in_top_k(TF2 order)", lambda p, t: tfc.math.in_top_k(t, p, 2),
                  lambda p, t: tf.math.in_top_k(t, p, 2), topk_cases))

    def pair_bound(inputs: Inputs, want: np.ndarray) -> np.ndarray:
        x, z = (np.abs(a.astype(np.float64)) for a in inputs[:2])
        return 8 * _eps(inputs[0]) * (np.abs(want) + np.exp(np.minimum(z, 80)) + x * z + 2 * x
                                      + 1)

    def poisson_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in (np.float32, np.float64):
            z = np.array([0, 0.5, 1, 1.5, 2, 7, 30, 0.25], dt)
            yield np.dtype(dt).name, [z, _rand(rng, dt, (8,), -3, 3)]
    for full in (False, True):
        S.append(Spec(f"nn.log_poisson_loss(full={full})",
                      lambda z, c, _f=full: tfc.nn.log_poisson_loss(z, c, _f),
                      lambda z, c, _f=full: tf.nn.log_poisson_loss(z, c, _f), poisson_cases,
                      "bound", bound=lambda i, w: pair_bound([i[1], i[0]], w) + 8 * _eps(
                          i[0]) * np.abs(i[0]) * (np.abs(np.log(np.maximum(i[0], 1))) + 2)))

    def wx_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            yield np.dtype(dt).name, [rng.random((3, 4)).astype(dt),
                                      _rand(rng, dt, (3, 4), -10, 10)]
            yield f"{np.dtype(dt).name} big", [np.array([0, 1, 0, 1, 0.5], dt),
                                               np.array([1e4, -1e4, -1e4, 1e4, 0], dt)]
    for q in (1.5, 0.5):
        S.append(Spec(f"nn.weighted_cross_entropy_with_logits(pos_weight={q})",
                      lambda z, x, _q=q: tfc.nn.weighted_cross_entropy_with_logits(
                          labels=z, logits=x, pos_weight=_q),
                      lambda z, x, _q=q: tf.nn.weighted_cross_entropy_with_logits(
                          labels=z, logits=x, pos_weight=_q), wx_cases, "bound",
                      bound=lambda i, w: 8 * _eps(i[0]) * (np.abs(w) + 2 * np.abs(i[1]) + 2)))

    def lrn_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in (np.float16, np.float32):
            yield np.dtype(dt).name, [_rand(rng, dt, (2, 3, 2, 7))]
    for r, bias, alpha, beta in [(5, 1.0, 1.0, 0.5), (2, 2.0, 1e-4, 0.75), (1, 0.5, 0.3, 1.0),
                                 (0, 1.0, 1.0, 0.5), (10, 1.0, 0.1, 0.3)]:
        S.append(Spec(f"nn.local_response_normalization({r},{bias},{alpha},{beta})",
                      lambda x, _p=(r, bias, alpha, beta): tfc.nn.lrn(x, *_p),
                      lambda x, _p=(r, bias, alpha, beta): tf.nn.lrn(x, *_p), lrn_cases,
                      "bound", bound=lambda i, w: 16 * _eps(i[0]) * (np.abs(w) + 1e-3)))
    S.append(Spec("nn.lrn(defaults)", tfc.nn.lrn, tf.nn.lrn, lrn_cases, "bound",
                  bound=lambda i, w: 16 * _eps(i[0]) * (np.abs(w) + 1e-3)))

    def ss_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            yield np.dtype(dt).name, [_rand(rng, dt, (3, 4, 5)), np.asarray(0.5, dt)]
    for axes in ([0], [1, 2], [-1]):
        for keep in (False, True):
            S.append(Spec(f"nn.sufficient_statistics({axes},keepdims={keep})",
                          lambda x, s, _a=axes, _k=keep: tfc.nn.sufficient_statistics(
                              x, _a, s, _k)[:3],
                          lambda x, s, _a=axes, _k=keep: tf.nn.sufficient_statistics(
                              x, _a, s, _k)[:3], ss_cases, "bound",
                          bound=lambda i, w: 8 * 60 * _eps(i[0]) * (np.abs(w) + 4)))
        S.append(Spec(f"nn.sufficient_statistics({axes},no shift)",
                      lambda x, s, _a=axes: tfc.nn.sufficient_statistics(x, _a)[:3],
                      lambda x, s, _a=axes: tf.nn.sufficient_statistics(x, _a)[:3], ss_cases,
                      "bound", bound=lambda i, w: 8 * 60 * _eps(i[0]) * (np.abs(w) + 4)))

    def nm_cases(rng: np.random.Generator, quick: bool) -> Iterator[tuple[str, Inputs]]:
        for dt in FLOATS:
            yield np.dtype(dt).name, [np.asarray(5, dt), _rand(rng, dt, (4,), -10, 10),
                                      _rand(rng, dt, (4,), 20, 30), np.asarray(0.5, dt)]
    S.append(Spec("nn.normalize_moments", tfc.nn.normalize_moments, tf.nn.normalize_moments,
                  nm_cases, "bound", bound=lambda i, w: 8 * _eps(i[0]) * (np.abs(w) + 10)))
    S.append(Spec("nn.normalize_moments(no shift)",
                  lambda c, m, v, s: tfc.nn.normalize_moments(c, m, v, None),
                  lambda c, m, v, s: tf.nn.normalize_moments(c, m, v, None),
                  nm_cases, "bound", bound=lambda i, w: 8 * _eps(i[0]) * (np.abs(w) + 10)))
    return S


def _flat(x: Any) -> list[Any]:
    out: list[Any] = []
    for v in (x if isinstance(x, (list, tuple)) else [x]):
        out.extend(_flat(v) if isinstance(v, (list, tuple)) else [v])
    return out


# Functions of ``dir(tfc)`` / ``dir(tfc.nn)`` this tool does not compare, and why.
NOT_COMPARED = {
    "nn.dropout": "random: tfc's generator is not TensorFlow's (same distribution, other bits)",
    "nn.sampled_softmax_loss": "random candidates (tfc's generator is not TensorFlow's)",
    "random.*": "random: tfc's generator is not TensorFlow's; distributions are tested in tfc",
    "gradients, train.*": "gradients: tools/conformance_tf_grad.py",
    "Variable, placeholder, Session, group, device, ...": "graph structure, not values",
    "layers.*, keras.*": "built from the functions above, with their own initializers",
}

# Public functions that build no op or whose values do not depend on the op (the coverage
# check below skips them).
NOT_OPS = {"apply", "as_dtype", "device", "entry", "fixed_size_partitioner", "function",
           "get_default_graph", "global_variables_initializer", "gradients", "group",
           "min_max_variable_partitioner", "name_scope", "placeholder", "reset_default_graph",
           "set_random_seed", "user_location", "variable_partitioner", "variables_initializer",
           "nn.apply", "nn.convert_to_tensor", "nn.dropout", "nn.sampled_softmax_loss"}


def uncovered(specs: Sequence[Spec]) -> list[str]:
    """Public functions of ``tfc`` and ``tfc.nn`` that no spec names (nor NOT_OPS)."""
    import inspect
    import re
    covered = {re.match(r"[A-Za-z0-9_.]*", s.name).group(0)  # type: ignore[union-attr]
               for s in specs}
    out = []
    for mod, prefix in [(tfc, ""), (tfc.nn, "nn.")]:
        for n in dir(mod):
            if n.startswith("_") or not inspect.isfunction(getattr(mod, n)):
                continue
            if prefix + n not in covered and prefix + n not in NOT_OPS:
                out.append(prefix + n)
    return out


# Divergences this tool found, with what became of them.  Keyed by (spec name prefix,
# case label substring).  FIXED: a tfc bug fixed in session 18, each with a regression test
# in the tfc suite; EXPECTED: a documented difference.
FTZ = "TensorFlow's CPU kernels flush float32/float64 subnormals to zero; tfc keeps them"
MAXPOOL = ("TF's max pool skips NaN and starts from the lowest finite value (an all -inf "
           "window gives -max); tfc's is the window's max, NaN propagating, as reduce_max")
F16 = ("TF computes this float16 op with float16 accumulation (up to ~7 ulps off); tfc "
       "accumulates in float32 and rounds once (<= 1 ulp from the exact value)")
EMPTY = ("tfc rejects max/min over an empty axis (a TypeMismatch when building, an "
         "ExecutionError for a symbolic dim that is 0 at run time); TF returns -inf/+inf "
         "(the dtype's lowest/highest for integers)")
KNOWN: dict[tuple[str, str], tuple[str, str]] = {
    ("", "subnormal"): ("EXPECTED", FTZ),
    ("divide", "int"): ("FIXED", "was floor division in the operand's dtype; now float64 "
                        "true division (tests/api/test_tf_semantics.py)"),
    ("truediv(/)", "int"): ("FIXED", "as divide (tests/api/test_tf_semantics.py)"),
    ("greater", "bool"): ("EXPECTED", "TF has no ordering kernels for bool; tfc orders "
                          "False < True, as numpy"),
    ("less", "bool"): ("EXPECTED", "TF has no ordering kernels for bool; tfc orders "
                       "False < True, as numpy"),
    ("reduce_max", "+-0"): ("EXPECTED", "the sign of max(+0, -0) is unspecified (IEEE); the "
                            "reduction orders differ"),
    ("reduce_min", "+-0"): ("EXPECTED", "the sign of min(+0, -0) is unspecified (IEEE); the "
                            "reduction orders differ"),
    ("nn.relu6", "float16 special"): ("EXPECTED", "relu6(-0.0): tfc +0 (the clamp's zero), "
                                     "TF's float16 kernel -0 (its float32 one +0)"),
    ("reduce_max", "special"): ("EXPECTED", "max of +0 and -0 (sign unspecified, IEEE)"),
    ("reduce_min", "special"): ("EXPECTED", "min of +0 and -0 (sign unspecified, IEEE)"),
    ("argmax", "nan"): ("EXPECTED", "tfc: NaN is the largest (numpy's argmax, the first "
                        "NaN); TF's kernel skips NaN unless it comes first (undocumented)"),
    ("argmin", "nan"): ("EXPECTED", "tfc: NaN is the smallest (numpy's argmin, the first "
                        "NaN); TF's kernel skips NaN unless it comes first (undocumented)"),
    ("range(0,1,0.1)", ""): ("EXPECTED", "tfc computes start + i * delta per element; TF "
                             "accumulates val += delta (error growing with i)"),
    ("range(empty)", ""): ("EXPECTED", "tfc gives an empty range, as numpy and Python; TF "
                           "raises when start > limit with delta > 0"),
    ("nn.softmax", "inf"): ("EXPECTED", "a +inf logit: TF gives NaN there and 0 elsewhere, "
                            "tfc NaN for the whole row (both undefined; -inf masking agrees)"),
    ("nn.softmax", "float16"): ("EXPECTED", F16),
    ("nn.softmax", "nan"): ("EXPECTED", "a NaN logit: TF gives NaN there and 0 elsewhere in the "
                            "row; tfc NaN for the whole row (its sum is NaN)"),
    ("nn.avg_pool", "float16"): ("EXPECTED", F16),
    ("nn.max_pool", "nan"): ("EXPECTED", MAXPOOL),
    ("nn.max_pool", "-inf"): ("EXPECTED", MAXPOOL),
    ("reduce_max", "0-size"): ("EXPECTED", EMPTY),
    ("reduce_min", "0-size"): ("EXPECTED", EMPTY),
    ("reduce_mean(f16, sum past 65504)", ""): ("EXPECTED", "TF's float16 mean sums in "
                                                "float16 and overflows to inf; tfc "
                                                "accumulates in float32: 30, the exact mean"),
    ("fill(int value)", ""): ("FIXED", "was float32 (dtype default); now the value's dtype, "
                              "int32 (tests/api/test_tf_semantics.py)"),
    ("fill(bool value)", ""): ("FIXED", "was float32; now bool"),
    ("fill(i64 2**62+1)", ""): ("FIXED", "the value went through a float attr: 2**62; now "
                                "exact (tests/api/test_tf_semantics.py)"),
    ("one_hot(int values)", ""): ("FIXED", "was float32; now the values' dtype, int32 "
                                  "(tests/api/test_tf_semantics.py)"),
    ("one_hot(off_value only)", ""): ("FIXED", "was float32; now int32"),
    ("clip_by_global_norm(inf norm)", ""): ("FIXED", "gave [nan, 0], [0] (a silent zero "
                                            "update); now NaN everywhere, as TF documents "
                                            "(tests/api/test_tf_semantics.py)"),
    ("int + 2.0", ""): ("EXPECTED", "a Python float with an integral value converts to the "
                        "integer operand's dtype (TF raises); a fraction is an error in both"),
    ("int + 2**40", ""): ("EXPECTED", "TF wraps the Python int to int32 (silently adds 0); "
                          "tfc says the value does not fit i32"),
    ("f16 + 1e6", ""): ("EXPECTED", "TF rounds the Python float to f16 inf; tfc says it is "
                        "out of range for f16"),
    ("constant(2**40, int32)", ""): ("EXPECTED", "TF wraps to 0; tfc: does not fit i32"),
    ("constant(1e40, float32)", ""): ("EXPECTED", "TF gives inf; tfc: out of range for f32"),
    ("floordiv(int edge)", "empty by zero"): ("FIXED", "the reference raised division by "
                                              "zero (tests/api/test_tf_semantics.py)"),
    ("pow(empty int, negative exponent)", ""): ("FIXED", "the reference raised"),
    ("zeros_like(dtype)", ""): ("FIXED", "had no dtype argument (TypeError); now TF's "
                                "(tests/api/test_tf_semantics.py)"),
    ("ones_like(dtype)", ""): ("FIXED", "as zeros_like"),
    ("slice(past the end)", ""): ("FIXED", "was clamped to the axis (2 of 5 elements, "
                                  "silently); now an error, as TF "
                                  "(tests/api/test_tf_semantics.py)"),
    ("argmax(bool)", ""): ("EXPECTED", "tfc's argmax takes numbers only (a clear "
                           "TypeMismatch; cast to int32)"),
    ("reduce_max(bool)", ""): ("EXPECTED", "tfc reduces bools with max/min (any/all); TF has "
                               "no such kernels"),
    ("nn.log_softmax(f16)", ""): ("EXPECTED", F16 + "; exact: -4.54e-05, TF 0.0"),
    ("nn.conv2d(int32)", ""): ("EXPECTED", "tfc convolves floats only (a clear TypeMismatch)"),
    ("reduce_mean", "int"): ("FIXED", "raised TypeMismatch (float only); now TF's truncated "
                             "integer mean (tests/api/test_tf_semantics.py)"),
}


# (spec name prefix, case label substring, detail substring): the detail narrows an entry
# to one value where the rest of the case must still agree.
KNOWN_AT: dict[tuple[str, str, str], tuple[str, str]] = {
    ("floordiv", "special x special", "tfc np.float32(-1.0) tf np.float32(-0.0)"): (
        "EXPECTED", "1 // -max as floordiv(//): TF flushes the subnormal quotient to -0 "
        "before floor"),
    ("floordiv", "special x special", "tfc np.float64(-1.0) tf np.float64(-0.0)"): (
        "EXPECTED", "as float32: TF flushes the subnormal quotient before floor"),
    ("math.floordiv", "special x special", "tf np.float32(-0.0)"): (
        "EXPECTED", "as floordiv: TF flushes the subnormal quotient before floor"),
    ("math.floordiv", "special x special", "tf np.float64(-0.0)"): (
        "EXPECTED", "as floordiv: TF flushes the subnormal quotient before floor"),
    ("floordiv(//)", "special x special", "tfc np.float32(-1.0) tf np.float32(-0.0)"): (
        "EXPECTED", "1 // -max: the quotient is subnormal, flushed to -0 by TF before floor "
        "(-0); tfc floors it (-1, as numpy)"),
    ("floordiv(//)", "special x special", "tfc np.float64(-1.0) tf np.float64(-0.0)"): (
        "EXPECTED", "as float32: TF flushes the subnormal quotient before floor"),
    ("erf", "float64 special", "tfc np.float64(1.0) tf np.float64(nan)"): (
        "EXPECTED", "TF 2.21's float64 erf(+-inf) is NaN; tfc gives C's erf(+-inf) = +-1 "
        "(as TF's float32 erf, and erf(30) = 1 in both)"),
    ("math.erf", "float64 special", "tfc np.float64(1.0) tf np.float64(nan)"): (
        "EXPECTED", "as erf: TF's float64 erf(+-inf) is NaN, tfc's +-1"),
    ("erfc(tail)", "rand", ""): (
        "EXPECTED", "TF 2.21's erfc loses relative accuracy in the tail (f32 1e-6 relative "
        "at x = 8.9, hundreds of ulps) and flushes subnormal results to 0 (f32 from x = "
        "9.2, f64 from 26.5); tfc's is within 0.5 ulp (f32) / 2.3 ulp (f64) of the exact "
        "value down to the underflow (tests/backends/llvm/test_vmath.py)"),
    ("nn.gelu", "float64", ""): (
        "EXPECTED", "TF 2.21's gelu rounds its constants 1/sqrt(2) and 0.044715 to float32 "
        "even for float64 (about 1e-8 relative); tfc uses them in float64, as JAX and "
        "PyTorch (tfc.api.nn.gelu)"),
}


# array24's ops
SCAN16 = ("TF's float16 cumsum/cumprod accumulate in float16 (an error growing along the "
          "axis); tfc accumulates in float32 and rounds each result once")
NAN_ORDER = ("tfc sorts NaN as numpy does: the largest value (last ascending, first "
             "descending and in top_k); TF's kernels leave NaN's place unspecified")
KNOWN.update({
    ("cumsum", "float16"): ("EXPECTED", SCAN16),
    ("cumprod", "float16"): ("EXPECTED", SCAN16),
    ("sort", "nan"): ("EXPECTED", NAN_ORDER),
    ("argsort", "nan"): ("EXPECTED", NAN_ORDER),
    ("math.top_k", "nan"): ("EXPECTED", NAN_ORDER),
    ("nn.top_k", "nan"): ("EXPECTED", NAN_ORDER),
})

KNOWN.update({  # linalg25
    ("norm(matrix 2-norm)", ""): ("EXPECTED", "the matrix 2-norm needs an SVD, which tfc has "
                                  "not got: a clear error (README differences)"),
    ("linalg.cholesky", "float16"): ("EXPECTED", "TF has no CPU float16 Cholesky kernel; "
                                     "tfc computes it in float32 and rounds once"),
    ("linalg.cholesky", "not positive definite"): (
        "EXPECTED", "tfc raises (as its matrix_inverse of a singular matrix, and PyTorch); "
        "TF 2.21 and JAX return NaN (TF's upper triangle then uninitialized memory)"),
    ("linalg.slogdet", "float16"): ("EXPECTED", "TF has no CPU float16 LogMatrixDeterminant "
                                    "kernel; tfc computes it in float32"),
    ("linalg.logdet", "float16"): ("EXPECTED", "as linalg.cholesky (TF: no CPU float16 "
                                   "kernel)"),
    ("linalg.logdet", "not positive definite"): ("EXPECTED", "as linalg.cholesky: tfc raises, "
                                                 "TF gives NaN"),
    ("norm(ord=0.5", "special"): ("EXPECTED", "sum(|x|^0.5)^2 of float64 max lands within an "
                                  "ulp of overflow: numpy's pow rounds to max, TF's to inf"),
})


# segment25's ops
SEG_NAN = ("a NaN in a segment: tfc's max/min is NaN (NaN propagates, as reduce_max); TF's "
           "CPU kernel keeps a NaN only when no later row of the segment replaces it")
KNOWN.update({
    ("unsorted_segment_max", "nan"): ("EXPECTED", SEG_NAN),
    ("unsorted_segment_min", "nan"): ("EXPECTED", SEG_NAN),
    ("segment_max", "nan"): ("EXPECTED", SEG_NAN),
    ("segment_min", "nan"): ("EXPECTED", SEG_NAN),
    ("bincount", "too large"): ("EXPECTED", "tfc's bincount has a static length: "
                                     "a value from minlength on is a run-time error where "
                                     "TF lengthens its output (give maxlength to drop them)"),
    ("unsorted_segment_mean", "int32"): ("EXPECTED", "tfc refuses integer segment "
                                              "means (a TypeMismatch); TF's dtype rules "
                                              "for them differ between its ops"),
})


def classify(name: str, label: str, detail: str = "") -> tuple[str, str]:
    for (n, lab, det), v in KNOWN_AT.items():
        if name.startswith(n) and lab in label and det in detail:
            return v
    for (n, lab), v in KNOWN.items():
        if name.startswith(n) and lab in label:
            return v
    return ("NEW", "")


# ---- running ------------------------------------------------------------------------------

def _tfc_dtype(dt: np.dtype) -> Any:
    return tfc.as_dtype(np.dtype(dt).name)


def run_tfc(spec: Spec, inputs: Inputs, backend: str) -> list[np.ndarray]:
    tfc.reset_default_graph()
    if spec.feed:
        phs = [tfc.placeholder(_tfc_dtype(x.dtype), list(x.shape)) for x in inputs]
        outs = _flat(spec.tfc_fn(*phs))
        feed = dict(zip(phs, inputs))
    else:
        outs, feed = _flat(spec.tfc_fn()), {}
    with tfc.Session(backend=backend) as sess:
        got = sess.run(outs, feed)
    return [np.asarray(g) for g in got]


def run_tf(tf: Any, spec: Spec, inputs: Inputs) -> list[np.ndarray]:
    with tf.device("/CPU:0"):
        if spec.feed:
            outs = _flat(spec.tf_fn(*[tf.constant(x) for x in inputs]))
        else:
            outs = _flat(spec.tf_fn())
    return [np.asarray(o.numpy()) for o in outs]


@dataclass
class Row:
    cases: int = 0
    mismatches: int = 0
    worst: float = 0.0


@dataclass
class Divergence:
    op: str
    label: str
    backend: str
    detail: str


def _short(e: BaseException) -> str:
    s = f"{type(e).__name__}: {e}".replace("\n", " ")
    return s[:160]


def check_case(tf: Any, spec: Spec, label: str, inputs: Inputs, backends: Sequence[str],
               row: Row, divs: list[Divergence]) -> None:
    try:
        want: list[np.ndarray] | None = run_tf(tf, spec, inputs)
        tf_err = ""
    except Exception as e:  # noqa: BLE001 (TF's errors: a case TF rejects)
        want, tf_err = None, _short(e)
    for be in backends:
        row.cases += 1
        try:
            got: list[np.ndarray] | None = run_tfc(spec, inputs, be)
            err = ""
        except tfc.TfcError as e:
            got, err = None, _short(e)
        except Exception as e:  # noqa: BLE001 (an unclear error is itself a finding)
            got, err = None, "UNCLEAR " + _short(e)
        if want is None or got is None:
            if want is None and got is None and not err.startswith("UNCLEAR"):
                continue
            row.mismatches += 1
            row.worst = float("inf")
            detail = (f"tf raises ({tf_err}); tfc gives a value" if got is not None else
                      f"tfc raises ({err})" + ("" if want is None else "; tf gives a value"))
            divs.append(Divergence(spec.name, label, be, detail))
            continue
        if len(got) != len(want):
            row.mismatches += 1
            divs.append(Divergence(spec.name, label, be, f"{len(got)} results, tf {len(want)}"))
            continue
        for g, w in zip(got, want):
            ulps = spec.ulps.get(w.dtype.type, 0) if spec.mode == "ulp" else 0
            bound = spec.bound(inputs, w) if spec.mode == "bound" and spec.bound else None
            mode = spec.mode if np.issubdtype(w.dtype, np.floating) else "exact"
            v = compare(g, w, mode, ulps, bound)
            row.worst = max(row.worst, v.err)
            if not v.ok:
                row.mismatches += 1
                divs.append(Divergence(spec.name, label, be, v.detail))
                break


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer random shapes (minutes)")
    ap.add_argument("--ops", default="", help="comma-separated spec name prefixes")
    ap.add_argument("--backends", default="llvm,reference")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import tensorflow as tf
    tf.config.set_visible_devices([], "GPU")
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"# tfc {tfc.version.__version__ if hasattr(tfc.version, '__version__') else ''}"
          f" vs TensorFlow {tf.__version__} (eager, CPU) on {cpu}; numpy {np.__version__};"
          f" python {platform.python_version()}")
    backends = [b for b in args.backends.split(",") if b]
    prefixes = [p for p in args.ops.split(",") if p]
    specs = [s for s in build_specs(tf) if not prefixes or any(s.name.startswith(p)
                                                                for p in prefixes)]
    rng = np.random.default_rng(args.seed)
    divs: list[Divergence] = []
    t0 = time.time()
    print(f"{'op':58} {'cases':>5} {'mism':>5} {'worst':>9}  mode")
    for spec in specs:
        row = Row()
        for label, inputs in spec.cases(rng, args.quick):
            check_case(tf, spec, label, inputs, backends, row, divs)
        mode = spec.mode + (f"<={spec.ulps.get(np.float32, 0):g}ulp(f32)" if spec.mode == "ulp"
                            else "")
        print(f"{spec.name:58} {row.cases:5d} {row.mismatches:5d} {row.worst:9.3g}  {mode}",
              flush=True)
    print(f"\n# {len(specs)} specs in {time.time() - t0:.0f} s; {len(divs)} divergent "
          f"(case, backend) pairs, grouped by op and reason:")
    groups: dict[tuple[str, str, str], list[Divergence]] = {}
    for d in divs:
        status, why = classify(d.op, d.label, d.detail)
        groups.setdefault((status, d.op, why), []).append(d)
    order = {"NEW": 0, "FIXED": 1, "EXPECTED": 2}
    for (status, op, why), ds in sorted(groups.items(), key=lambda kv: (order[kv[0][0]],
                                                                         kv[0][1])):
        labels = sorted({f"{d.label} ({d.backend})" if status == "NEW" else d.label
                         for d in ds})
        shown = ", ".join(labels[:4]) + (f", +{len(labels) - 4}" if len(labels) > 4 else "")
        print(f"{status:8} {op}: {len(ds)} [{shown}] e.g. {ds[0].detail}"
              + (f"\n         -- {why}" if why else ""))
    print("\n# fixed (these diverged before session 18's fixes; a fixed one that diverges "
          "again shows above as FIXED):")
    for (n, lab), (status, why) in KNOWN.items():
        if status == "FIXED":
            print(f"  {n} [{lab}]: {why}")
    if not prefixes:
        missing = uncovered(specs)
        print(f"\n# public functions with no spec: {', '.join(missing) or 'none'}")
    print("\n# not compared:")
    for k, v in NOT_COMPARED.items():
        print(f"  {k}: {v}")
    return 1 if any(classify(d.op, d.label, d.detail)[0] == "NEW" for d in divs) else 0


if __name__ == "__main__":
    sys.exit(main())
