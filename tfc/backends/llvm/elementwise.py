"""The LLVM lowering of every element-wise op: one emitter per registry op name.

An emitter computes one element: ``(builder, args, in_dtypes, out_dtype) -> ir.Value``.
Arguments and result are in *compute types* (``tfc.backends.llvm.irutil``): ``bool`` is
``i1`` (stored as one byte), ``f16`` is held in ``float`` and each f16 result is rounded to
half precision (``fptrunc`` + ``fpext``), so a chain of f16 ops rounds after every op exactly
as numpy (the reference) does. Everything is straight-line code (``select``, no branches),
so the kernel loops that call it vectorize; transcendental functions come from ``vmath``.

Semantics follow ``tfc/ops/math.py`` (the numpy reference), bit for bit where numpy's
result is exactly rounded:

- No fast-math flags at all: no reassociation and no FMA contraction (LLVM only fuses
  ``a*b+c`` when the IR says ``contract``), so add/sub/mul/div/sqrt are the correctly
  rounded IEEE results numpy computes, and NaN/inf/-0.0 behave as in numpy.
- ``maximum``/``minimum``: NaN propagates; on ties (0.0 vs -0.0) the second operand wins
  for f32/f64, as numpy's SIMD loops do (x86 ``maxps``), the first for f16 (numpy's scalar
  half loop). ``relu(x) = maximum(x, 0)``: relu(-0.0) is +0.0 (f32/f64), -0.0 (f16).
- ``sign``: -1, 0 (+0.0 for either zero), 1, NaN for NaN.
- ``div`` on integers is floor division (Python/numpy). Division by zero is checked by the
  backend's kernel generator (the reference raises); here it yields 0, and
  ``INT_MIN // -1`` wraps to ``INT_MIN`` as numpy does — never LLVM's undefined behaviour.
- ``pow`` on integers is square-and-multiply with wrap-around (numpy's), a loop over the
  exponent's bits (the one rule that branches; integer pow is rare); a negative exponent
  (an error in the reference, checked by the backend) runs over all its bits as unsigned.
- ``cast``: float -> int truncates toward zero; NaN and out-of-range values give INT_MIN
  (what numpy gives on x86) instead of LLVM's poison; int -> float rounds to nearest
  (i64 -> f16 via f64, which is exact below f16's overflow); float -> bool is ``x != 0``
  (NaN is true); int -> narrower int wraps.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import llvmlite.ir as ir
import numpy as np

from tfc.backends.llvm import vmath
from tfc.backends.llvm.irutil import compute_type, storage_type
from tfc.ir.types import DType

F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)

Emitter = Callable[[ir.IRBuilder, list, Sequence[DType], DType], ir.Value]


def dtype_to_llvm(dtype: DType) -> ir.Type:
    """The register (compute) type of ``dtype``: i1 for bool, float for f16."""
    return compute_type(dtype)


def dtype_to_llvm_storage(dtype: DType) -> ir.Type:
    """The in-memory type of ``dtype``: i8 for bool, half for f16."""
    return storage_type(dtype)


def to_register(b: ir.IRBuilder, stored: ir.Value, dtype: DType) -> ir.Value:
    """A loaded storage value in its compute type."""
    if dtype is DType.bool:
        return b.icmp_unsigned("!=", stored, ir.Constant(stored.type, 0))
    if dtype is DType.f16:
        return b.fpext(stored, F32)
    return stored


def to_storage(b: ir.IRBuilder, value: ir.Value, dtype: DType) -> ir.Value:
    """A compute value converted for a store."""
    if dtype is DType.bool:
        return b.zext(value, I8)
    if dtype is DType.f16:
        return b.fptrunc(value, F16)
    return value


def _c(t: ir.Type, v: float | int) -> ir.Constant:
    return ir.Constant(t, float(v) if isinstance(t, (ir.FloatType, ir.DoubleType)) else int(v))


def _round_f16(b: ir.IRBuilder, v: ir.Value, dtype: DType) -> ir.Value:
    return b.fpext(b.fptrunc(v, F16), F32) if dtype is DType.f16 else v


def f64_to_f16(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """double -> half, correctly rounded, as a float holding the half value.

    LLVM lowers ``fptrunc double to half`` on x86 to a call of compiler-rt's
    ``__truncdfhf2``, which a JIT process does not have. Instead: round to float *to odd*
    (truncate, then set the last bit when inexact), then float -> half (F16C); rounding to
    odd with 13 spare bits makes the double rounding exact.
    """
    t = b.fptrunc(x, F32)
    back = b.fpext(t, F64)
    inexact = b.fcmp_unordered("!=", back, x)
    too_big = b.fcmp_ordered(">", vmath.fabs(b, back), vmath.fabs(b, x))
    bits = b.bitcast(t, I32)
    bits = b.select(too_big, b.sub(bits, ir.Constant(I32, 1)), bits)
    bits = b.select(inexact, b.or_(bits, ir.Constant(I32, 1)), bits)
    return _round_f16(b, b.bitcast(bits, F32), DType.f16)


# ---- floats -----------------------------------------------------------------------------

def _fmax(b: ir.IRBuilder, x: ir.Value, y: ir.Value, ties_x: bool = False) -> ir.Value:
    """numpy.maximum: x if x > y or x is NaN, else y (NaN in y propagates).

    On ties (0.0 vs -0.0) numpy's f32/f64 loops return y (x86 ``maxps``), its f16 loop x.
    """
    take_x = b.or_(b.fcmp_ordered(">=" if ties_x else ">", x, y), b.fcmp_unordered("uno", x, x))
    return b.select(take_x, x, y)


def _fmin(b: ir.IRBuilder, x: ir.Value, y: ir.Value, ties_x: bool = False) -> ir.Value:
    take_x = b.or_(b.fcmp_ordered("<=" if ties_x else "<", x, y), b.fcmp_unordered("uno", x, x))
    return b.select(take_x, x, y)


def _fsign(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    t = x.type
    out = b.select(b.fcmp_ordered("==", x, _c(t, 0)), _c(t, 0), x)  # NaN stays NaN
    out = b.select(b.fcmp_ordered("<", x, _c(t, 0)), _c(t, -1), out)
    return b.select(b.fcmp_ordered(">", x, _c(t, 0)), _c(t, 1), out)


def _float_unary(kind: str, x: ir.Value, b: ir.IRBuilder, f16: bool = False) -> ir.Value:
    t = x.type
    if kind == "neg":
        return b.fneg(x)
    if kind == "abs":
        return vmath.fabs(b, x)
    if kind == "square":
        return b.fmul(x, x)
    if kind == "relu":
        return _fmax(b, x, _c(t, 0), ties_x=f16)
    if kind == "sign":
        return _fsign(b, x)
    return vmath.emit_math(b, kind, [x])


_FLOAT_BINARY: dict[str, Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]] = {
    "add": lambda b, x, y: b.fadd(x, y),
    "sub": lambda b, x, y: b.fsub(x, y),
    "mul": lambda b, x, y: b.fmul(x, y),
    "div": lambda b, x, y: b.fdiv(x, y),
    "pow": lambda b, x, y: vmath.emit_math(b, "pow", [x, y]),
    "maximum": _fmax,
    "minimum": _fmin,
}

# numpy comparisons: ordered (false with NaN) except !=, which is true with NaN.
_FCMP = {"greater": (True, ">"), "less": (True, "<"), "greater_equal": (True, ">="),
         "less_equal": (True, "<="), "equal": (True, "=="), "not_equal": (False, "!=")}
_ICMP = {"greater": ">", "less": "<", "greater_equal": ">=", "less_equal": "<=",
         "equal": "==", "not_equal": "!="}


# ---- integers ---------------------------------------------------------------------------

def _int_unary(kind: str, x: ir.Value, b: ir.IRBuilder) -> ir.Value:
    t = x.type
    zero = _c(t, 0)
    if kind == "neg":
        return b.sub(zero, x)
    if kind == "abs":
        return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
    if kind == "square":
        return b.mul(x, x)
    if kind == "relu":
        return b.select(b.icmp_signed(">", x, zero), x, zero)
    if kind == "sign":
        return b.sub(b.zext(b.icmp_signed(">", x, zero), t), b.zext(b.icmp_signed("<", x, zero), t))
    raise NotImplementedError(f"{kind} on integers")


def _safe_divisor(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(y == 0, the divisor to divide by): 1 where y is 0 or where x / y overflows (MIN by
    -1), so that sdiv and srem are defined everywhere (LLVM's are undefined there)."""
    t = x.type
    y_zero = b.icmp_signed("==", y, _c(t, 0))
    overflow = b.and_(b.icmp_signed("==", x, _c(t, -(1 << (t.width - 1)))),
                      b.icmp_signed("==", y, _c(t, -1)))
    return y_zero, b.select(b.or_(y_zero, overflow), _c(t, 1), y)


def _floor_div(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Python's x // y without undefined behaviour: y == 0 gives 0, MIN // -1 wraps."""
    t = x.type
    zero = _c(t, 0)
    y_zero, ys = _safe_divisor(b, x, y)
    q = b.sdiv(x, ys)
    r = b.srem(x, ys)
    # round toward -inf: a nonzero remainder whose sign differs from the divisor's
    adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, ys), zero))
    q = b.sub(q, b.zext(adjust, t))
    return b.select(y_zero, zero, q)


def _int_pow(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x ** y by square-and-multiply over y's bits, with wrap-around (numpy's result).

    The one element rule with a loop (over the exponent's bits): unrolled and vectorized it
    cost ~1 s of compile time per kernel for an op that is rare on integers. The builder is
    left in the loop's exit block.
    """
    t = x.type
    fn = b.block.function
    pre = b.block
    head, body, done = (fn.append_basic_block(f"ipow.{s}") for s in ("head", "body", "done"))
    b.branch(head)
    b.position_at_end(head)
    acc, base, e = b.phi(t), b.phi(t), b.phi(t)
    acc.add_incoming(_c(t, 1), pre)
    base.add_incoming(x, pre)
    e.add_incoming(y, pre)
    b.cbranch(b.icmp_unsigned("!=", e, _c(t, 0)), body, done)
    b.position_at_end(body)
    acc.add_incoming(b.select(b.trunc(e, I1), b.mul(acc, base), acc), body)
    base.add_incoming(b.mul(base, base), body)
    e.add_incoming(b.lshr(e, _c(t, 1)), body)
    b.branch(head)
    b.position_at_end(done)
    return acc


_INT_BINARY: dict[str, Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]] = {
    "add": lambda b, x, y: b.add(x, y),
    "sub": lambda b, x, y: b.sub(x, y),
    "mul": lambda b, x, y: b.mul(x, y),
    "div": _floor_div,
    "pow": _int_pow,
    "maximum": lambda b, x, y: b.select(b.icmp_signed(">", x, y), x, y),
    "minimum": lambda b, x, y: b.select(b.icmp_signed("<", x, y), x, y),
}


# ---- cast -------------------------------------------------------------------------------

def _saturate(b: ir.IRBuilder, x: ir.Value, dst: DType) -> ir.Value:
    """``x`` with finite magnitudes beyond ``dst``'s largest finite value clamped to it
    (keeping the sign); inf and NaN unchanged. Rounding to nearest even then never
    overflows, since every value it rounds up to inf lies beyond that bound."""
    top = float(np.finfo(dst.np).max)
    ax = vmath.fabs(b, x)
    over = b.and_(b.fcmp_ordered(">", ax, _c(x.type, top)),
                  b.fcmp_ordered("<", ax, _c(x.type, float("inf"))))
    signed = b.select(b.fcmp_ordered("<", x, _c(x.type, 0)), _c(x.type, -top), _c(x.type, top))
    return b.select(over, signed, x)


def emit_cast(b: ir.IRBuilder, x: ir.Value, src: DType, dst: DType,
              saturate: bool = False) -> ir.Value:
    """``cast`` between compute types, with numpy's results where LLVM would give poison;
    ``saturate`` (float to narrower float) clamps finite values that would overflow."""
    dt = compute_type(dst)
    if src is dst:
        return x
    if saturate and src.is_float and dst.is_float and dst.itemsize < src.itemsize:
        x = _saturate(b, x, dst)
    if dst is DType.bool:
        if src.is_float:
            return b.fcmp_unordered("!=", x, _c(x.type, 0))
        return b.icmp_signed("!=", x, _c(x.type, 0))
    if src is DType.bool:
        return b.uitofp(x, dt) if dst.is_float else b.zext(x, dt)
    if src.is_float and dst.is_float:
        if dst is DType.f16:
            return f64_to_f16(b, x) if x.type == F64 else _round_f16(b, x, dst)
        return x if x.type == dt else (b.fpext(x, dt) if dt == F64 else b.fptrunc(x, dt))
    if src.is_float:
        # in range iff trunc(x) fits: MIN - 1 < x < -MIN (false for NaN)
        lo = -float(2 ** (dt.width - 1))
        lo_minus = float(np.asarray(lo - 1.0, dtype=np.float64 if x.type == F64 else np.float32))
        lo_ok = (b.fcmp_ordered(">", x, _c(x.type, lo_minus)) if lo_minus != lo
                 else b.fcmp_ordered(">=", x, _c(x.type, lo)))
        ok = b.and_(lo_ok, b.fcmp_ordered("<", x, _c(x.type, -lo)))
        safe = b.select(ok, x, _c(x.type, 0))
        return b.select(ok, b.fptosi(safe, dt), _c(dt, -(1 << (dt.width - 1))))
    if dst.is_float:
        if dst is DType.f16:
            # via f64: exact for every i32, and for i64 below f16's overflow; then one rounding
            return f64_to_f16(b, b.sitofp(x, F64))
        return b.sitofp(x, dt)
    return b.sext(x, dt) if dt.width > x.type.width else b.trunc(x, dt)


# ---- the table --------------------------------------------------------------------------

def _f16_stepwise(kind: str, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """rsqrt and sigmoid on f16 round every step to half, as the numpy reference does."""
    def r16(v: ir.Value) -> ir.Value:
        return _round_f16(b, v, DType.f16)
    one = _c(F32, 1)
    if kind == "rsqrt":
        return r16(b.fdiv(one, r16(vmath.emit_math(b, "sqrt", [x]))))
    e = r16(vmath.emit_math(b, "exp", [b.fneg(vmath.fabs(b, x))]))
    d = r16(b.fadd(one, e))
    return b.select(b.fcmp_ordered(">=", x, _c(F32, 0)), r16(b.fdiv(one, d)), r16(b.fdiv(e, d)))


def _unary(kind: str) -> Emitter:
    def emit(b: ir.IRBuilder, args: list, in_dtypes: Sequence[DType], out: DType) -> ir.Value:
        (x,) = args
        if in_dtypes[0] is DType.f16 and kind in ("rsqrt", "sigmoid"):
            return _f16_stepwise(kind, b, x)
        if in_dtypes[0].is_float:
            return _round_f16(b, _float_unary(kind, x, b, in_dtypes[0] is DType.f16), out)
        return _int_unary(kind, x, b)
    return emit


def _binary(kind: str) -> Emitter:
    def emit(b: ir.IRBuilder, args: list, in_dtypes: Sequence[DType], out: DType) -> ir.Value:
        x, y = args
        if in_dtypes[0] is DType.f16 and kind in ("maximum", "minimum"):
            return (_fmax if kind == "maximum" else _fmin)(b, x, y, ties_x=True)
        if in_dtypes[0].is_float:
            return _round_f16(b, _FLOAT_BINARY[kind](b, x, y), out)
        return _INT_BINARY[kind](b, x, y)
    return emit


def _compare(kind: str) -> Emitter:
    def emit(b: ir.IRBuilder, args: list, in_dtypes: Sequence[DType], out: DType) -> ir.Value:
        x, y = args
        dt = in_dtypes[0]
        if dt.is_float:
            ordered, op = _FCMP[kind]
            return (b.fcmp_ordered if ordered else b.fcmp_unordered)(op, x, y)
        if dt is DType.bool:
            return b.icmp_unsigned(_ICMP[kind], x, y)  # False < True
        return b.icmp_signed(_ICMP[kind], x, y)
    return emit


def _sigmoid_cross_entropy(b: ir.IRBuilder, args: list, in_dtypes: Sequence[DType],
                           out: DType) -> ir.Value:
    """max(x, 0) - x z + log1p(exp(-|x|)), as the reference (f16 computed in f32)."""
    x, z = args
    t = x.type
    relu = _fmax(b, x, _c(t, 0))
    tail = vmath.emit_math(b, "log1p", [vmath.emit_math(b, "exp", [b.fneg(vmath.fabs(b, x))])])
    return _round_f16(b, b.fadd(b.fsub(relu, b.fmul(x, z)), tail), out)


# ---- ceil, round, reciprocal, is_nan/is_inf/is_finite, floordiv, floormod,
# squared_difference, logical_xor (the reference's rules: tfc/ops/math.py) --------------

def _intrinsic(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    """``llvm.<name>`` on x's type: one instruction on SSE4.1 (roundps), vectorizable."""
    t = x.type
    full = f"llvm.{name}.{t.intrinsic_name}"
    fn = b.module.globals.get(full) or ir.Function(b.module, ir.FunctionType(t, [t]), full)
    return b.call(fn, [x])


def _simple_unary(kind: str) -> Emitter:
    """ceil, round (ties to even: ``llvm.roundeven``), reciprocal (``1 / x``, rounded to
    half for f16) and the predicates (exact on f16's values held in float)."""
    def emit(b: ir.IRBuilder, args: list, in_dtypes: Sequence[DType], out: DType) -> ir.Value:
        (x,) = args
        t = x.type
        if kind == "ceil":
            return _intrinsic(b, "ceil", x)
        if kind == "round":
            return _intrinsic(b, "roundeven", x)
        if kind == "reciprocal":
            return _round_f16(b, b.fdiv(_c(t, 1), x), out)
        if kind == "is_nan":
            return b.fcmp_unordered("uno", x, x)
        inf = _c(t, float("inf"))
        if kind == "is_inf":
            return b.fcmp_ordered("==", vmath.fabs(b, x), inf)
        return b.fcmp_ordered("<", vmath.fabs(b, x), inf)  # is_finite (false for NaN)
    return emit


def _int_floor_mod(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Python's x % y (the divisor's sign) without undefined behaviour: y == 0 gives 0 (the
    kernel generator reports it first), MIN % -1 is 0."""
    zero = _c(x.type, 0)
    _, ys = _safe_divisor(b, x, y)
    r = b.srem(x, ys)
    adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, ys), zero))
    return b.select(adjust, b.add(r, ys), r)


def _int_trunc(kind: str, b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """C's x / y or x % y without undefined behaviour: y == 0 gives 0 (the kernel
    generator reports it first), MIN / -1 wraps to MIN and MIN % -1 is 0."""
    y_zero, ys = _safe_divisor(b, x, y)
    out = b.sdiv(x, ys) if kind == "truncatediv" else b.srem(x, ys)
    return b.select(y_zero, _c(x.type, 0), out)


def _simple_binary(kind: str) -> Emitter:
    """floordiv (floats: floor of the quotient rounded to the dtype, TensorFlow's
    ``floor(x / y)``), floormod (``fmod`` via ``frem``, exact, plus y where its sign
    differs from y's), squared_difference (the difference rounded, then squared),
    truncatediv (``trunc`` of the rounded quotient) and truncatemod (``frem``)."""
    def emit(b: ir.IRBuilder, args: list, in_dtypes: Sequence[DType], out: DType) -> ir.Value:
        x, y = args
        dt = in_dtypes[0]
        if not dt.is_float:
            if kind in ("truncatediv", "truncatemod"):
                return _int_trunc(kind, b, x, y)
            if kind == "floordiv":
                return _floor_div(b, x, y)
            if kind == "floormod":
                return _int_floor_mod(b, x, y)
            d = b.sub(x, y)
            return b.mul(d, d)
        if kind == "floordiv":
            return vmath.emit_math(b, "floor", [_round_f16(b, b.fdiv(x, y), out)])
        if kind == "truncatediv":
            return _intrinsic(b, "trunc", _round_f16(b, b.fdiv(x, y), out))
        if kind == "truncatemod":
            return b.frem(x, y)  # exact
        if kind == "floormod":
            t = b.frem(x, y)  # C's fmod: exact (f16's in float is f16's)
            zero = _c(x.type, 0)
            fix = b.and_(b.fcmp_ordered("!=", t, zero),
                         b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", t, zero)))
            return b.select(fix, _round_f16(b, b.fadd(t, y), out), t)
        d = _round_f16(b, b.fsub(x, y), out)
        return _round_f16(b, b.fmul(d, d), out)
    return emit


SIMPLE: dict[str, Emitter] = {
    **{k: _simple_unary(k) for k in ("ceil", "round", "reciprocal", "is_nan", "is_inf",
                                      "is_finite")},
    **{k: _simple_binary(k) for k in ("floordiv", "floormod", "squared_difference",
                                       "truncatediv", "truncatemod")},
    "logical_xor": lambda b, a, i, o: b.xor(a[0], a[1]),
}


UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "square", "tanh", "sigmoid", "relu",
         "sin", "cos", "floor", "sign", "log1p", "expm1", "softplus")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")

ELEMENTWISE: dict[str, Emitter] = {
    **{k: _unary(k) for k in UNARY},
    **{k: _binary(k) for k in BINARY},
    **{k: _compare(k) for k in _FCMP},
    "logical_and": lambda b, a, i, o: b.and_(a[0], a[1]),
    "logical_or": lambda b, a, i, o: b.or_(a[0], a[1]),
    "logical_not": lambda b, a, i, o: b.xor(a[0], ir.Constant(I1, 1)),
    "identity": lambda b, a, i, o: a[0],
    "stop_gradient": lambda b, a, i, o: a[0],
    "where": lambda b, a, i, o: b.select(a[0], a[1], a[2]),
    "sigmoid_cross_entropy": _sigmoid_cross_entropy,
    **SIMPLE,
}

# tan, atan, asin, acos, erf, erfc, atan2 (tfc/ops/math_special.py): vmath's functions.
ELEMENTWISE.update({k: _unary(k) for k in ("tan", "atan", "asin", "acos", "erf", "erfc")})
_FLOAT_BINARY["atan2"] = lambda b, x, y: vmath.emit_math(b, "atan2", [x, y])
ELEMENTWISE["atan2"] = _binary("atan2")

#: The op names this table lowers (every ELEMENTWISE op of the registry).
SUPPORTED = frozenset(ELEMENTWISE) | {"cast"}


def emit_elementwise(builder: ir.IRBuilder, kind: str, args: Sequence[ir.Value],
                     in_dtypes: Sequence[DType], out_dtype: DType,
                     attrs: Mapping[str, Any] | None = None) -> ir.Value:
    """One element of op ``kind`` on ``args`` (compute types in, compute type out).

    ``cast`` reads its target from ``out_dtype`` and ``saturate`` from ``attrs``. Raises
    ``KeyError`` for a kind this table does not lower.
    """
    if kind == "cast":
        return emit_cast(builder, args[0], in_dtypes[0], out_dtype,
                         bool((attrs or {}).get("saturate", False)))
    try:
        emitter = ELEMENTWISE[kind]
    except KeyError:
        raise KeyError(f"llvm: no element-wise lowering for '{kind}'") from None
    return emitter(builder, list(args), list(in_dtypes), out_dtype)
