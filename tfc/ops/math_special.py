"""Trigonometric inverses, tan, atan2 and the error function (TF's ``tf.math.tan``,
``atan``, ``asin``, ``acos``, ``atan2``, ``erf``, ``erfc``).

The numpy reference: numpy's ufuncs for the trigonometry; erf and erfc are Python's
``math.erf``/``math.erfc`` (the C library's, within 1 ulp) element by element on float64,
rounded once to the input's dtype: numpy has no erf, and a per-element Python call costs
about 0.1 us, which no reference run here notices (the reference backend's speed is not
tested; the llvm and CUDA kernels are the fast paths). Gradients are TensorFlow's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tfc.ir.registry import FLOAT, register
from tfc.ops.math import Binary, Unary

_ERF = np.frompyfunc(math.erf, 1, 1)
_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _via_f64(fn: Any) -> Any:
    def apply(x: np.ndarray) -> np.ndarray:
        return np.asarray(fn(x.astype(np.float64)), np.float64).astype(x.dtype)
    return apply


def _quiet(fn: Any) -> Any:
    """numpy's ufunc without its warnings (NaN outside the domain is the answer, as TF's)."""
    def apply(x: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return fn(x)
    return apply


def _one_minus_square_rsqrt(b: Any, x: Any) -> Any:
    """1 / sqrt(1 - x^2): inf at +-1, NaN beyond (as TensorFlow's)."""
    return b("rsqrt", b("sub", b.constant(1, x), b("square", x)))


def _erf_slope(b: Any, x: Any) -> Any:
    """d erf / dx = 2/sqrt(pi) e^(-x^2)."""
    return b("mul", b.constant(2 / math.sqrt(math.pi), x), b("exp", b("neg", b("square", x))))


def _atan2_grad(b: Any, y: Any, x: Any, z: Any, dz: Any) -> tuple[Any, Any]:
    """d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)."""
    r = b("div", dz, b("add", b("square", x), b("square", y)))
    return b("mul", r, x), b("neg", b("mul", r, y))


register(Unary("tan", _quiet(np.tan), FLOAT, 40, summary="tangent",
               grad=lambda b, x, y, dy: b("mul", dy, b("add", b.constant(1, y),
                                                        b("square", y)))))
register(Unary("atan", np.arctan, FLOAT, 25, summary="inverse tangent, in [-pi/2, pi/2]",
               grad=lambda b, x, y, dy: b("div", dy, b("add", b.constant(1, x),
                                                        b("square", x)))))
register(Unary("asin", _quiet(np.arcsin), FLOAT, 30, summary="inverse sine (NaN beyond |x| = 1)",
               grad=lambda b, x, y, dy: b("mul", dy, _one_minus_square_rsqrt(b, x))))
register(Unary("acos", _quiet(np.arccos), FLOAT, 30, summary="inverse cosine (NaN beyond |x| = 1)",
               grad=lambda b, x, y, dy: b("neg", b("mul", dy, _one_minus_square_rsqrt(b, x)))))
register(Binary("atan2", np.arctan2, FLOAT, flops=30, grad=_atan2_grad,
                summary="atan2(y, x): the angle of the point (x, y), C's signed zeros"))
register(Unary("erf", _via_f64(_ERF), FLOAT, 30, summary="the error function",
               grad=lambda b, x, y, dy: b("mul", dy, _erf_slope(b, x))))
register(Unary("erfc", _via_f64(_ERFC), FLOAT, 30, summary="1 - erf(x), accurate in the tail",
               grad=lambda b, x, y, dy: b("neg", b("mul", dy, _erf_slope(b, x)))))
