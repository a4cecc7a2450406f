"""Element-wise math, comparisons and logic (the TensorFlow paper's first op category).

Binary ops broadcast as numpy does and need equal dtypes: tfc never promotes
implicitly, as TensorFlow does not (the Python API converts Python scalars to the other
operand's dtype). ``div`` is true division on floats and floor division on integers.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np

from tfc.errors import TypeMismatch
from tfc.ir.registry import (ALL, COMMUTATIVE, ELEMENTWISE, FLOAT, INT, NUMERIC, PURE, VIEW,
                             AttrSpec, OpDef, Trait, expect_dtype, register, same_dtype,
                             tensor_type)
from tfc.ir.types import DType, TensorType, broadcast_shapes

Fn = Callable[..., np.ndarray]
# Gradient rules get the builder, the inputs, the result and the result's gradient.
UnaryGrad = Callable[[Any, Any, Any, Any], Any]
BinaryGrad = Callable[[Any, Any, Any, Any, Any], tuple[Any, Any]]
ELEMENTWISE_PURE = frozenset({PURE, ELEMENTWISE})


class Unary(OpDef):
    """``y = fn(x)`` element by element, same type in and out."""

    num_inputs = 1

    def __init__(self, name: str, fn: Fn, dtypes: frozenset[DType] = FLOAT,
                 flops: float = 1.0, summary: str = "", grad: UnaryGrad | None = None,
                 traits: frozenset[Trait] = frozenset()) -> None:
        self.name, self.fn, self.dtypes = name, fn, dtypes
        self.flops_per_element, self.summary = flops, summary
        self.traits = ELEMENTWISE_PURE | traits
        self.grad = grad
        self.differentiable = grad is not None

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        (dy,) = grads
        return [self.grad(b, op.inputs[0], op.result, dy)]  # type: ignore[misc]

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        expect_dtype(self.name, inputs[0], self.dtypes)
        return [inputs[0]]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.asarray(self.fn(x), dtype=x.dtype)]


def broadcast_binary(name: str, a: TensorType, b: TensorType) -> tuple:
    shape = broadcast_shapes(a.shape, b.shape)
    if shape is None:
        raise TypeMismatch(f"{name}: shapes {a} and {b} do not broadcast")
    return shape


class Binary(OpDef):
    """``z = fn(x, y)`` with numpy broadcasting; ``result`` fixes the output dtype (bool)."""

    num_inputs = 2

    def __init__(self, name: str, fn: Fn, dtypes: frozenset[DType] = NUMERIC,
                 result: DType | None = None, commutative: bool = False,
                 flops: float = 1.0, summary: str = "", grad: BinaryGrad | None = None) -> None:
        self.name, self.fn, self.dtypes, self.result_dtype = name, fn, dtypes, result
        self.flops_per_element, self.summary = flops, summary
        self.traits = ELEMENTWISE_PURE | ({COMMUTATIVE} if commutative else set())
        self.grad = grad
        self.differentiable = grad is not None

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        x, y = op.inputs
        gx, gy = self.grad(b, x, y, op.result, grads[0])  # type: ignore[misc]
        return [None if gx is None else b.sum_to(gx, x), None if gy is None else b.sum_to(gy, y)]

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        a, b = inputs
        dtype = same_dtype(self.name, inputs)
        expect_dtype(self.name, a, self.dtypes)
        sa, sb = a.shape, b.shape
        if len(sb) <= len(sa) and sa[len(sa) - len(sb):] == sb:
            # what broadcasting gives: b's dims are a's last ones (or b is a scalar)
            if self.result_dtype is None or self.result_dtype is dtype:
                return [a]
            return [tensor_type(self.result_dtype, sa)]
        if len(sa) < len(sb) and sb[len(sb) - len(sa):] == sa:  # (and the other way round)
            if self.result_dtype is None or self.result_dtype is dtype:
                return [b]
            return [tensor_type(self.result_dtype, sb)]
        shape = broadcast_binary(self.name, a, b)
        return [tensor_type(self.result_dtype or dtype, shape)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x, y = inputs
        out = self.fn(x, y)
        return [np.asarray(out, dtype=self.result_dtype.np if self.result_dtype else x.dtype)]


def _div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # (a zero divisor broadcast against an empty x divides nothing: no error, as TF)
    if np.issubdtype(x.dtype, np.integer):
        if np.any(y == 0) and np.broadcast(x, y).size:
            raise ZeroDivisionError("integer division by zero")
        return np.floor_divide(x, y)
    return np.true_divide(x, y)


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if np.issubdtype(x.dtype, np.integer) and np.any(y < 0) and np.broadcast(x, y).size:
        raise ValueError("integer pow with a negative exponent")
    return np.power(x, y)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp of -|x| never overflows, and the lower tail e/(1+e) keeps its relative precision
    # (0.5 + 0.5 tanh(x/2) cancels to 0 there).
    with np.errstate(under="ignore"):
        e = np.exp(-np.abs(x))
    one = x.dtype.type(1)
    return np.where(x >= 0, one / (one + e), e / (one + e)).astype(x.dtype, copy=False)


def _softplus(x: np.ndarray) -> np.ndarray:
    """``log(1 + e^x)`` as ``max(x, 0) + log1p(e^-|x|)``: exact for large |x| (x itself, or
    e^x), never overflows. f16 is computed in f32 and rounded once (as the llvm and CUDA
    kernels do), not step by step."""
    w = x.astype(np.float32) if x.dtype == np.float16 else x
    with np.errstate(under="ignore", invalid="ignore"):  # underflow to 0 is right; NaN in
        return (np.maximum(w, w.dtype.type(0)) + np.log1p(np.exp(-np.abs(w)))).astype(x.dtype)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))


def _zero_where_not(b: Any, cond: Any, g: Any) -> Any:
    """``g`` where ``cond`` holds, else 0."""
    return b("where", cond, g, b("zeros_like", g))


def _zero_where_dy_zero(b: Any, dy: Any, g: Any, r: Any) -> Any:
    """``g = dy * r`` (``r`` the local derivative), but 0 where ``dy`` is 0, as TensorFlow's
    SqrtGrad and RsqrtGrad kernels: at x <= 0 sqrt's ``r = 1 / 2y`` is inf or NaN, and
    0 * that would turn ``where(x > 0, sqrt(x), 0)`` into a NaN gradient where the branch
    is not taken. There the result is ``dy * r`` with r's inf and NaN replaced by 0, so its
    derivative with respect to dy is still r (a second derivative through a zero ``dy``
    that depends on x, as TensorFlow's SqrtGradGrad)."""
    finite = b("less", b("abs", r), b.constant(np.inf, r))
    r_safe = b("where", finite, r, b("zeros_like", r))
    return b("where", b("equal", dy, b.constant(0, dy)), b("mul", dy, r_safe), g)


def _sqrt_grad(b: Any, x: Any, y: Any, dy: Any) -> Any:
    return _zero_where_dy_zero(b, dy, b("div", dy, b("mul", b.constant(2, y), y)),
                               b("div", b.constant(0.5, y), y))


def _rsqrt_grad(b: Any, x: Any, y: Any, dy: Any) -> Any:
    r = b("mul", b.constant(-0.5, y), b("mul", y, b("square", y)))
    return _zero_where_dy_zero(b, dy, b("mul", dy, r), r)


SIGNED = FLOAT | INT
for _name, _fn, _dt, _flops, _grad in [
    ("neg", np.negative, SIGNED, 1, lambda b, x, y, dy: b("neg", dy)),
    ("abs", np.abs, SIGNED, 1, lambda b, x, y, dy: b("mul", dy, b("sign", x))),
    ("exp", np.exp, FLOAT, 10, lambda b, x, y, dy: b("mul", dy, y)),
    ("log", np.log, FLOAT, 10, lambda b, x, y, dy: b("div", dy, x)),
    ("sqrt", np.sqrt, FLOAT, 4, _sqrt_grad),
    ("rsqrt", lambda x: x.dtype.type(1) / np.sqrt(x), FLOAT, 5, _rsqrt_grad),
    ("square", np.square, SIGNED, 1,
     lambda b, x, y, dy: b("mul", dy, b("mul", b.constant(2, x), x))),
    ("tanh", np.tanh, FLOAT, 20,
     lambda b, x, y, dy: b("mul", dy, b("sub", b.constant(1, y), b("square", y)))),
    ("sigmoid", _sigmoid, FLOAT, 22,
     lambda b, x, y, dy: b("mul", dy, b("mul", y, b("sub", b.constant(1, y), y)))),
    ("relu", _relu, SIGNED, 1,
     lambda b, x, y, dy: _zero_where_not(b, b("greater", x, b.constant(0, x)), dy)),
    ("sin", np.sin, FLOAT, 15, lambda b, x, y, dy: b("mul", dy, b("cos", x))),
    ("cos", np.cos, FLOAT, 15, lambda b, x, y, dy: b("neg", b("mul", dy, b("sin", x)))),
    ("floor", np.floor, FLOAT, 1, None),  # piecewise constant: no gradient, as in TF
    # zero, not None: TensorFlow's rule, so a gradient through sign is 0 (not unconnected)
    ("sign", np.sign, SIGNED, 1, lambda b, x, y, dy: b("zeros_like", x)),
]:
    register(Unary(_name, cast(Fn, _fn), _dt, _flops, grad=_grad))  # a ufunc or a function

# log(1 + x), e^x - 1 and softplus: accurate where the compositions of log/exp lose digits
# (x near 0; softplus at large |x|). TensorFlow's gradients: 1 / (1 + x), e^x (not y + 1,
# which cancels: 0 below x = -17.3 in f32) and sigmoid(x).
register(Unary("log1p", np.log1p, FLOAT, 12, summary="log(1 + x), accurate near 0",
               grad=lambda b, x, y, dy: b("div", dy, b("add", x, b.constant(1, x)))))
register(Unary("expm1", np.expm1, FLOAT, 20, summary="e^x - 1, accurate near 0",
               grad=lambda b, x, y, dy: b("mul", dy, b("exp", x))))
register(Unary("softplus", _softplus, FLOAT, 24,
               summary="log(1 + e^x) = max(x, 0) + log1p(e^-|x|), no overflow",
               grad=lambda b, x, y, dy: b("mul", dy, b("sigmoid", x))))


def _pow_grad(b: Any, x: Any, y: Any, z: Any, dz: Any) -> tuple[Any, Any]:
    gx = b("mul", dz, b("mul", y, b("pow", x, b("sub", y, b.constant(1, y)))))
    # d/dy x^y = x^y log x with log x taken as 0 where x <= 0, as TensorFlow does: the
    # product stays NaN where x^y is inf or NaN there (0^-1, (-2)^0.5), as in TensorFlow.
    positive = b("greater", x, b.constant(0, x))
    safe_x = b("where", positive, x, b("ones_like", x))
    log_x = _zero_where_not(b, positive, b("log", safe_x))
    gy = b("mul", dz, b("mul", z, log_x))
    return gx, gy


def _div_grad(b: Any, x: Any, y: Any, z: Any, dz: Any) -> tuple[Any, Any]:
    gx = b("div", dz, y)
    return gx, b("neg", b("mul", gx, z))


def _select_grad(pick_x: str) -> BinaryGrad:
    """maximum / minimum: the gradient goes to the chosen input (to x on ties)."""
    def grad(b: Any, x: Any, y: Any, z: Any, dz: Any) -> tuple[Any, Any]:
        takes_x = b(pick_x, x, y)
        return (_zero_where_not(b, takes_x, dz),
                _zero_where_not(b, b("logical_not", takes_x), dz))
    return grad


for _name, _fn, _dt, _comm, _flops, _bgrad in [
    ("add", np.add, NUMERIC, True, 1, lambda b, x, y, z, dz: (dz, dz)),
    ("sub", np.subtract, NUMERIC, False, 1, lambda b, x, y, z, dz: (dz, b("neg", dz))),
    ("mul", np.multiply, NUMERIC, True, 1,
     lambda b, x, y, z, dz: (b("mul", dz, y), b("mul", dz, x))),
    ("div", _div, NUMERIC, False, 4, _div_grad),
    ("pow", _pow, NUMERIC, False, 20, _pow_grad),
    ("maximum", np.maximum, NUMERIC, True, 1, _select_grad("greater_equal")),
    ("minimum", np.minimum, NUMERIC, True, 1, _select_grad("less_equal")),
]:
    register(Binary(_name, cast(Fn, _fn), _dt, commutative=_comm, flops=_flops, grad=_bgrad))

for _name, _fn, _comm in [
    ("greater", np.greater, False),
    ("less", np.less, False),
    ("greater_equal", np.greater_equal, False),
    ("less_equal", np.less_equal, False),
    ("equal", np.equal, True),
    ("not_equal", np.not_equal, True),
]:
    register(Binary(_name, _fn, ALL, result=DType.bool, commutative=_comm))

_BOOL = frozenset({DType.bool})
register(Binary("logical_and", np.logical_and, _BOOL, commutative=True))
register(Binary("logical_or", np.logical_or, _BOOL, commutative=True))
register(Unary("logical_not", np.logical_not, _BOOL))
register(Unary("identity", lambda x: x.copy(), ALL, flops=0,
               summary="the input, unchanged (names a value; a fetch point)",
               grad=lambda b, x, y, dy: dy, traits=frozenset({VIEW})))
register(Unary("stop_gradient", lambda x: x.copy(), ALL, flops=0,
               summary="the input, unchanged, but no gradient flows through it",
               traits=frozenset({VIEW})))


@register
class Where(OpDef):
    """``where(c, x, y)``: x where c is true, else y; all three broadcast."""

    name = "where"
    num_inputs = 3
    traits = ELEMENTWISE_PURE

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        c, x, y = inputs
        expect_dtype(self.name, c, _BOOL, "condition")
        dtype = same_dtype(self.name, [x, y])
        if c.shape == x.shape == y.shape:  # (what broadcasting gives them)
            return [x]
        shape = broadcast_shapes(c.shape, x.shape, y.shape)
        if shape is None:
            raise TypeMismatch(f"{self.name}: shapes {c}, {x} and {y} do not broadcast")
        return [tensor_type(dtype, shape)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        c, x, y = inputs
        return [np.where(c, x, y).astype(x.dtype, copy=False)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        c, x, y = op.inputs
        (dz,) = grads
        zero = b("zeros_like", dz)
        return [None, b.sum_to(b("where", c, dz, zero), x), b.sum_to(b("where", c, zero, dz), y)]


def saturating_cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x`` rounded to nearest even in float ``dtype``, finite values beyond its range
    clamped to its largest finite value of their sign (inf and NaN kept)."""
    with np.errstate(over="ignore"):
        y = x.astype(dtype)
    overflow = np.isinf(y) & np.isfinite(x)
    if overflow.any():
        y = np.where(overflow, np.copysign(np.finfo(dtype).max, x).astype(dtype), y)
    return y


@register
class Cast(OpDef):
    """Convert to ``dtype``; floats to integers truncate toward zero, as in TensorFlow.

    Float to narrower float rounds to nearest even; a finite value beyond the target's
    range becomes inf, as in TensorFlow, unless ``saturate``: then it becomes the largest
    finite value of its sign (what fp16 transfers use, so one large activation does not
    turn a step into inf and NaN). inf and NaN stay what they are either way.
    """

    name = "cast"
    num_inputs = 1
    traits = ELEMENTWISE_PURE
    attrs = {"dtype": AttrSpec("dtype", doc="the element type to convert to"),
             "saturate": AttrSpec("bool", False, "float to narrower float: clamp finite "
                                  "values to the target's largest finite value, not inf")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        dt: DType = attrs["dtype"]
        if attrs.get("saturate", False) and not (inputs[0].dtype.is_float and dt.is_float):
            raise TypeMismatch(f"cast: saturate applies to float-to-float casts, not "
                               f"{inputs[0].dtype.value} to {dt.value}")
        return [inputs[0].with_dtype(dt)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        dt: DType = attrs["dtype"]
        if dt.is_int and np.issubdtype(x.dtype, np.floating):
            x = np.trunc(x)
        if attrs.get("saturate", False):
            return [saturating_cast(x, dt.np)]
        return [x.astype(dt.np)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        x = op.inputs[0]
        if not (x.dtype.is_float and op.result.dtype.is_float):
            return [None]
        return [b("cast", grads[0], dtype=x.dtype)]


# ---- the simple element-wise ops TensorFlow users reach for (ceil, round, reciprocal,
# is_nan/is_inf/is_finite, floordiv/floormod, squared_difference, logical_xor) ----------

class Predicate(Unary):
    """``y = fn(x)`` element by element with a bool result (``is_nan`` ...): not
    differentiable, as in TensorFlow."""

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        expect_dtype(self.name, inputs[0], self.dtypes)
        return [inputs[0].with_dtype(DType.bool)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [np.asarray(self.fn(inputs[0]), dtype=np.bool_)]


def _check_int_divisor(x: np.ndarray, y: np.ndarray) -> None:
    """An integer zero divisor is an error (the run fails with ``ExecutionError``, as
    ``div`` on integers and as TensorFlow's "Integer division by zero"), unless it divides
    nothing (an empty broadcast)."""
    if np.issubdtype(x.dtype, np.integer) and np.any(y == 0) and np.broadcast(x, y).size:
        raise ZeroDivisionError("integer division by zero")


def _floordiv(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """TensorFlow's FloorDiv: ``floor(x / y)`` on floats (numpy's ``floor_divide`` is
    ``(x - fmod(x, y)) / y`` rounded, which differs: 1 // 0.1 is 9 there, 10 here), and
    Python's ``//`` on integers (``MIN // -1`` wraps, as numpy)."""
    _check_int_divisor(x, y)
    if np.issubdtype(x.dtype, np.integer):
        with np.errstate(over="ignore"):
            return np.floor_divide(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.floor(np.true_divide(x, y))


def _floormod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """TensorFlow's FloorMod: ``t = fmod(x, y)`` (exact), plus ``y`` where ``t`` is nonzero
    and its sign differs from ``y``'s: the result has the divisor's sign, as Python's ``%``
    (a zero result keeps fmod's sign: -4.0 % 2.0 is -0.0, where numpy's ``remainder`` gives
    +0.0); ``x % 0.0`` and ``inf % y`` are NaN."""
    _check_int_divisor(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.fmod(x, y)
        zero = x.dtype.type(0)
        fix = (t != zero) & ((y < zero) != (t < zero))
        return np.where(fix, t + y, t).astype(x.dtype, copy=False)


def _squared_difference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    d = np.subtract(x, y)  # (f16: rounded to half, then squared and rounded again)
    return np.multiply(d, d)


def _squared_difference_grad(b: Any, x: Any, y: Any, z: Any, dz: Any) -> tuple[Any, Any]:
    # TensorFlow's: 2 (x - y) dy for x and its negation for y
    g = b("mul", dz, b("mul", b.constant(2, x), b("sub", x, y)))
    return g, b("neg", g)


def _floormod_grad(b: Any, x: Any, y: Any, z: Any, dz: Any) -> tuple[Any, Any]:
    # TensorFlow's: dz for x, -floor(x / y) dz for y (x % y = x - floor(x / y) y)
    return dz, b("mul", dz, b("neg", b("floordiv", x, y)))


def _round_half_even(x: np.ndarray) -> np.ndarray:
    return np.rint(x)  # ties to even, as TensorFlow's Round (Python's round(2.5) is 2)


# ceil and round are piecewise constant: no gradient, as TensorFlow's (None).
register(Unary("ceil", np.ceil, FLOAT, 1, summary="the least integer >= x"))
register(Unary("round", _round_half_even, FLOAT, 1,
               summary="the nearest integer, ties to even (TensorFlow's Round, np.rint)"))
# TensorFlow's ReciprocalGrad: -dy y^2
def _reciprocal(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):  # 1 / ±0 is ±inf, as the kernels give
        return np.divide(x.dtype.type(1), x)


register(Unary("reciprocal", _reciprocal, FLOAT, 4,
               summary="1 / x",
               grad=lambda b, x, y, dy: b("neg", b("mul", dy, b("mul", y, y)))))
register(Predicate("is_nan", np.isnan, FLOAT, 1, summary="x is NaN"))
register(Predicate("is_inf", np.isinf, FLOAT, 1, summary="x is +inf or -inf"))
register(Predicate("is_finite", np.isfinite, FLOAT, 1, summary="x is neither inf nor NaN"))
# floordiv has no gradient in TensorFlow (None for both inputs)
register(Binary("floordiv", cast(Fn, _floordiv), NUMERIC, flops=5,
                summary="floor(x / y) (floats), Python's // (integers; a zero divisor "
                        "is an error)"))
register(Binary("floormod", cast(Fn, _floormod), NUMERIC, flops=8,
                summary="x - floor(x / y) y with the divisor's sign, as Python's % (via "
                        "fmod, exact; an integer zero divisor is an error)",
                grad=_floormod_grad))
register(Binary("squared_difference", cast(Fn, _squared_difference), NUMERIC, commutative=True,
                flops=2, summary="(x - y)^2", grad=_squared_difference_grad))
register(Binary("logical_xor", np.logical_xor, _BOOL, commutative=True,
                summary="x != y on bools"))


def _truncatediv(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """TensorFlow's TruncateDiv: the quotient rounded toward zero (C's ``/`` on integers,
    ``MIN / -1`` wrapping to MIN; ``trunc(x / y)`` on floats)."""
    _check_int_divisor(x, y)
    if np.issubdtype(x.dtype, np.integer):
        with np.errstate(over="ignore"):
            q = np.floor_divide(x, y)
            up = (np.remainder(x, y) != 0) & ((x < 0) != (y < 0))
            return (q + up.astype(x.dtype)).astype(x.dtype, copy=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.trunc(np.true_divide(x, y))


def _truncatemod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """TensorFlow's TruncateMod: C's ``%`` / ``fmod``, the dividend's sign (exact)."""
    _check_int_divisor(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(x, y)


# No gradients, as TensorFlow (none registered for TruncateDiv/TruncateMod)
register(Binary("truncatediv", cast(Fn, _truncatediv), NUMERIC, flops=5,
                summary="x / y rounded toward zero (an integer zero divisor is an error)"))
register(Binary("truncatemod", cast(Fn, _truncatemod), NUMERIC, flops=5,
                summary="C's x % y / fmod: the dividend's sign (an integer zero divisor is "
                        "an error)"))
