"""CUDA C expressions for every element-wise registry op: one element, as text.

The twin of ``tfc/backends/llvm/elementwise.py`` for the CUDA code generator
(``codegen``): an emitter turns argument expressions (C text, in *compute types*) into the
C expression of one result element, with the semantics of the numpy reference
(``tfc/ops/math.py``) that the LLVM table documents:

- Compute types: ``bool`` is C ``bool`` (stored as one byte), ``f16`` is held in ``float``
  (stored as ``tfc_f16`` bits) and every f16 result is rounded to half
  (``tfc_r16``), so a chain of f16 ops rounds after every op exactly as numpy does.
- ``+ - * /`` and ``sqrt`` are the IEEE, correctly rounded results (NVRTC compiles with
  ``--fmad=false``, so no FMA contraction; ``-prec-div``/``-prec-sqrt`` are its defaults).
  NaN/inf/-0.0 behave as in numpy: C's comparisons are ordered, ``!=`` unordered.
- ``maximum``/``minimum``: NaN propagates; on ties (0.0 vs -0.0) the second operand wins
  for f32/f64, the first for f16 (numpy's loops); ``relu(x) = maximum(x, 0)``.
- ``sign``: -1, 0 (+0.0 for either zero), 1, NaN for NaN.
- Integer ``add``/``sub``/``mul``/``neg``/``abs``/``square`` wrap (computed unsigned: C's
  signed overflow is undefined). ``div`` is floor division, ``INT_MIN // -1`` wraps and
  ``x // 0`` gives 0 here; the reference raises on a zero divisor, and a kernel cannot,
  so ``codegen`` only emits integer ``div`` whose divisor is a nonzero constant (and
  integer ``pow`` whose exponent is a non-negative constant), else ``Unsupported``.
  ``pow`` on integers is square-and-multiply with wrap-around (numpy's).
- ``cast``: float -> int truncates toward zero; NaN and out-of-range values give INT_MIN
  (numpy on x86); int -> float rounds to nearest (i64 -> f16 through f64 in one rounding,
  ``tfc_d2h``); float -> bool is ``x != 0`` (NaN is true); int -> narrower int wraps;
  ``saturate`` clamps finite values beyond the target's range to its largest finite one.
- Math functions are CUDA's accurate ones (never the ``__expf`` intrinsics). Their
  maximum errors (CUDA C Programming Guide, "Mathematical Functions", full range):
  f32 ``expf`` 2, ``logf`` 1, ``log1pf`` 1, ``expm1f`` 1, ``tanhf`` 2, ``sinf``/``cosf``
  2, ``powf`` 4 ulp; f64 ``exp``/``log``/``log1p``/``expm1``/``tanh`` 1, ``sin``/``cos``
  2, ``pow`` 2 ulp;
  ``sqrt``, ``floor``, ``fabs`` exact. ``MAX_ULP`` states them; an f16 result is the f32
  one rounded to half, within 0.5 ulp of f16 plus the f32 error (about 2^-13 f16 ulp).
  ``sigmoid`` is ``e = exp(-|x|)``, ``1/(1+e)`` or ``e/(1+e)`` as the reference
  computes it (f16: each step rounded to half, as numpy does); ``rsqrt`` is ``1/sqrt``;
  ``softplus`` is ``max(x, 0) + log1p(exp(-|x|))`` (f16: computed in f32, rounded once).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfc.ir.types import DType

# The maximum error in ulp of CUDA's accurate math functions (CUDA C Programming Guide,
# appendix "Mathematical Functions"), by op, for (f32, f64); f16 results are these f32
# results rounded once to half.
MAX_ULP: dict[str, tuple[float, float]] = {
    "exp": (2, 1), "log": (1, 1), "tanh": (2, 1), "sin": (2, 2), "cos": (2, 2),
    "pow": (4, 2), "log1p": (1, 1), "expm1": (1, 1),
}

STORAGE = {DType.f16: "tfc_f16", DType.f32: "float", DType.f64: "double",
           DType.i32: "int32_t", DType.i64: "int64_t", DType.bool: "uint8_t"}
COMPUTE = {DType.f16: "float", DType.f32: "float", DType.f64: "double",
           DType.i32: "int32_t", DType.i64: "int64_t", DType.bool: "bool"}
_UNSIGNED = {DType.i32: "uint32_t", DType.i64: "uint64_t"}

# Device helpers the expressions call, guarded so every kernel's text carries them and a
# file of many kernels defines them once.
HELPERS = r"""#ifndef TFC_CEXPR_HELPERS
#define TFC_CEXPR_HELPERS
#define TFC_FN static __device__ __forceinline__
#ifndef __CUDACC__
#define __launch_bounds__(threads)  // the emulator runs any block size
#endif
// N consecutive elements, aligned as a whole: one vector load or store
template <typename T, int N> struct alignas(sizeof(T) * N) tfc_vec { T v[N]; };
TFC_FN float tfc_r16(float x) { return tfc_h2f(tfc_f2h(x)); }
TFC_FN float tfc_d16(double x) { return tfc_h2f(tfc_d2h(x)); }
// numpy.maximum/minimum: NaN in either propagates; ties go to y (f32/f64) or x (_tx: f16)
TFC_FN float tfc_fmax(float x, float y) { return (x > y || x != x) ? x : y; }
TFC_FN double tfc_fmax(double x, double y) { return (x > y || x != x) ? x : y; }
TFC_FN float tfc_fmin(float x, float y) { return (x < y || x != x) ? x : y; }
TFC_FN double tfc_fmin(double x, double y) { return (x < y || x != x) ? x : y; }
TFC_FN float tfc_fmax_tx(float x, float y) { return (x >= y || x != x) ? x : y; }
TFC_FN float tfc_fmin_tx(float x, float y) { return (x <= y || x != x) ? x : y; }
TFC_FN float tfc_fsign(float x) {
  return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x == 0.0f ? 0.0f : x));
}
TFC_FN double tfc_fsign(double x) {
  return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : (x == 0.0 ? 0.0 : x));
}
TFC_FN float tfc_sigmoid(float x) {
  float e = expf(-fabsf(x));
  return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
TFC_FN double tfc_sigmoid(double x) {
  double e = exp(-fabs(x));
  return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}
TFC_FN float tfc_sigmoid16(float x) {
  float e = tfc_r16(expf(-fabsf(x))), d = tfc_r16(1.0f + e);
  return x >= 0.0f ? tfc_r16(1.0f / d) : tfc_r16(e / d);
}
TFC_FN float tfc_softplus(float x) { return tfc_fmax(x, 0.0f) + log1pf(expf(-fabsf(x))); }
TFC_FN double tfc_softplus(double x) { return tfc_fmax(x, 0.0) + log1p(exp(-fabs(x))); }
TFC_FN float tfc_sce(float x, float z) {
  return tfc_fmax(x, 0.0f) - x * z + log1pf(expf(-fabsf(x)));
}
TFC_FN double tfc_sce(double x, double z) {
  return tfc_fmax(x, 0.0) - x * z + log1p(exp(-fabs(x)));
}
// Python's floor division without undefined behaviour: y == 0 gives 0, MIN // -1 wraps
TFC_FN int32_t tfc_floordiv(int32_t x, int32_t y) {
  if (y == 0) return 0;
  if (y == -1) return (int32_t)(0u - (uint32_t)x);
  int32_t q = x / y, r = x % y;
  return (r != 0 && ((r ^ y) < 0)) ? q - 1 : q;
}
TFC_FN int64_t tfc_floordiv(int64_t x, int64_t y) {
  if (y == 0) return 0;
  if (y == -1) return (int64_t)(0ul - (uint64_t)x);
  int64_t q = x / y, r = x % y;
  return (r != 0 && ((r ^ y) < 0)) ? q - 1 : q;
}
// numpy's integer power: square-and-multiply over the exponent's bits, wrapping
TFC_FN int32_t tfc_ipow(int32_t x, int32_t y) {
  uint32_t acc = 1u, base = (uint32_t)x, e = (uint32_t)y;
  while (e != 0u) { if (e & 1u) acc *= base; base *= base; e >>= 1; }
  return (int32_t)acc;
}
TFC_FN int64_t tfc_ipow(int64_t x, int64_t y) {
  uint64_t acc = 1ul, base = (uint64_t)x, e = (uint64_t)y;
  while (e != 0ul) { if (e & 1ul) acc *= base; base *= base; e >>= 1; }
  return (int64_t)acc;
}
// float -> int: truncation; NaN and out-of-range give INT_MIN (numpy on x86)
TFC_FN int32_t tfc_to_i32(double x) {
  return (x > -2147483649.0 && x < 2147483648.0) ? (int32_t)x : (int32_t)(-2147483647 - 1);
}
TFC_FN int64_t tfc_to_i64(double x) {
  return (x >= -9223372036854775808.0 && x < 9223372036854775808.0)
      ? (int64_t)x : (int64_t)(-9223372036854775807L - 1);
}
// finite magnitudes beyond top clamped to it (a saturating cast); inf and NaN unchanged
TFC_FN double tfc_clamp(double x, double top) {
  return (fabs(x) > top && fabs(x) < TFC_INF_D) ? (x < 0.0 ? -top : top) : x;
}
// TensorFlow's FloorMod: fmod (exact), plus y where it is nonzero and its sign differs
TFC_FN float tfc_floormod(float x, float y) {
  float t = fmodf(x, y);
  return (t != 0.0f && ((y < 0.0f) != (t < 0.0f))) ? t + y : t;
}
TFC_FN double tfc_floormod(double x, double y) {
  double t = fmod(x, y);
  return (t != 0.0 && ((y < 0.0) != (t < 0.0))) ? t + y : t;
}
// Python's x % y without undefined behaviour: y == 0 gives 0, MIN % -1 is 0
TFC_FN int32_t tfc_floormod(int32_t x, int32_t y) {
  if (y == 0 || y == -1) return 0;
  int32_t r = x % y;
  return (r != 0 && ((r ^ y) < 0)) ? r + y : r;
}
TFC_FN int64_t tfc_floormod(int64_t x, int64_t y) {
  if (y == 0 || y == -1) return 0;
  int64_t r = x % y;
  return (r != 0 && ((r ^ y) < 0)) ? r + y : r;
}
// C's x / y and x % y without undefined behaviour: y == 0 gives 0, MIN / -1 wraps
TFC_FN int32_t tfc_truncdiv(int32_t x, int32_t y) {
  return y == 0 ? 0 : (y == -1 ? (int32_t)(0u - (uint32_t)x) : x / y);
}
TFC_FN int64_t tfc_truncdiv(int64_t x, int64_t y) {
  return y == 0 ? 0 : (y == -1 ? (int64_t)(0ul - (uint64_t)x) : x / y);
}
TFC_FN int32_t tfc_truncmod(int32_t x, int32_t y) { return (y == 0 || y == -1) ? 0 : x % y; }
TFC_FN int64_t tfc_truncmod(int64_t x, int64_t y) { return (y == 0 || y == -1) ? 0 : x % y; }
// (x - y)^2: f16 rounds the difference to half first, as numpy; integers wrap
TFC_FN float tfc_sqdiff(float x, float y) { float d = x - y; return d * d; }
TFC_FN double tfc_sqdiff(double x, double y) { double d = x - y; return d * d; }
TFC_FN float tfc_sqdiff16(float x, float y) { float d = tfc_r16(x - y); return d * d; }
TFC_FN int32_t tfc_sqdiff(int32_t x, int32_t y) {
  uint32_t d = (uint32_t)x - (uint32_t)y; return (int32_t)(d * d);
}
TFC_FN int64_t tfc_sqdiff(int64_t x, int64_t y) {
  uint64_t d = (uint64_t)x - (uint64_t)y; return (int64_t)(d * d);
}
#endif
"""


def literal(value: Any, dtype: DType) -> str:
    """A C literal of ``value`` in ``dtype``'s compute type, exact (hex floats)."""
    v = np.asarray(value).astype(dtype.np).item()
    if dtype is DType.bool:
        return "true" if v else "false"
    if dtype.is_int:
        bits = 32 if dtype is DType.i32 else 64
        if v == -(1 << (bits - 1)):
            return f"({COMPUTE[dtype]})(-{(1 << (bits - 1)) - 1}L - 1)"
        return f"({COMPUTE[dtype]}){v}L"
    f32 = dtype is not DType.f64
    if np.isnan(v):
        return "TFC_NAN" if f32 else "TFC_NAN_D"
    if np.isinf(v):
        inf = "TFC_INF" if f32 else "TFC_INF_D"
        return inf if v > 0 else f"(-{inf})"
    text = float(v).hex()
    if np.signbit(v) and v == 0:
        text = "-0x0p+0"
    return f"({text}f)" if f32 else f"({text})"


def load(dtype: DType, expr: str) -> str:
    """A stored element (``expr``: an lvalue of the storage type) in its compute type."""
    if dtype is DType.f16:
        return f"tfc_h2f({expr})"
    if dtype is DType.bool:
        return f"({expr} != 0)"
    return expr


def store(dtype: DType, expr: str) -> str:
    """A compute value converted for a store."""
    if dtype is DType.f16:
        return f"tfc_f2h({expr})"
    if dtype is DType.bool:
        return f"(uint8_t)({expr})"
    return expr


def _r16(expr: str, dtype: DType) -> str:
    return f"tfc_r16({expr})" if dtype is DType.f16 else expr


def _wrap(op: str, dtype: DType, *args: str) -> str:
    """Integer arithmetic in the unsigned type, so overflow wraps (as numpy) instead of
    being undefined."""
    u, t = _UNSIGNED[dtype], COMPUTE[dtype]
    us = [f"({u})({a})" for a in args]
    if op == "neg":
        return f"(({t})(({u})0 - {us[0]}))"
    return f"(({t})({us[0]} {op} {us[1]}))"


_FMATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "sin": "sin",
          "cos": "cos", "floor": "floor", "abs": "fabs", "log1p": "log1p", "expm1": "expm1"}


def _float_unary(kind: str, x: str, dt: DType) -> str:
    f = "f" if dt is not DType.f64 else ""
    if kind == "neg":
        return f"(-{x})"
    if kind == "square":
        return f"({x} * {x})"
    if kind == "relu":
        zero = literal(0, dt)
        return f"tfc_fmax_tx({x}, {zero})" if dt is DType.f16 else f"tfc_fmax({x}, {zero})"
    if kind == "sign":
        return f"tfc_fsign({x})"
    if kind == "sigmoid":
        return f"tfc_sigmoid16({x})" if dt is DType.f16 else f"tfc_sigmoid({x})"
    if kind == "softplus":
        return f"tfc_softplus({x})"
    if kind == "rsqrt":
        one = literal(1, dt)
        if dt is DType.f16:
            return f"({one} / tfc_r16(sqrt{f}({x})))"
        return f"({one} / sqrt{f}({x}))"
    return f"{_FMATH[kind]}{f}({x})"


def _int_unary(kind: str, x: str, dt: DType) -> str:
    t = COMPUTE[dt]
    if kind == "neg":
        return _wrap("neg", dt, x)
    if kind == "abs":
        return f"({x} < 0 ? {_wrap('neg', dt, x)} : {x})"
    if kind == "square":
        return _wrap("*", dt, x, x)
    if kind == "relu":
        return f"({x} > 0 ? {x} : ({t})0)"
    if kind == "sign":
        return f"(({t})({x} > 0) - ({t})({x} < 0))"
    raise KeyError(f"cuda: no integer lowering for '{kind}'")


def _binary(kind: str, x: str, y: str, dt: DType) -> str:
    if dt.is_float:
        f = "f" if dt is not DType.f64 else ""
        if kind in ("maximum", "minimum"):
            fn = "tfc_fmax" if kind == "maximum" else "tfc_fmin"
            return f"{fn}_tx({x}, {y})" if dt is DType.f16 else f"{fn}({x}, {y})"
        if kind == "pow":
            return f"pow{f}({x}, {y})"
        return f"({x} {_OPS[kind]} {y})"
    if kind in ("add", "sub", "mul"):
        return _wrap(_OPS[kind], dt, x, y)
    if kind == "div":
        return f"tfc_floordiv({x}, {y})"
    if kind == "pow":
        return f"tfc_ipow({x}, {y})"
    if kind == "maximum":
        return f"({x} > {y} ? {x} : {y})"
    if kind == "minimum":
        return f"({x} < {y} ? {x} : {y})"
    raise KeyError(f"cuda: no lowering for '{kind}' on {dt.value}")


_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"greater": ">", "less": "<", "greater_equal": ">=", "less_equal": "<=",
            "equal": "==", "not_equal": "!="}

UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "square", "tanh", "sigmoid", "relu",
         "sin", "cos", "floor", "sign", "log1p", "expm1", "softplus")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")

Emitter = Callable[[Sequence[str], Sequence[DType], DType], str]


def _unary_emitter(kind: str) -> Emitter:
    def emit(a: Sequence[str], ins: Sequence[DType], out: DType) -> str:
        dt = ins[0]
        if dt.is_float:
            if dt is DType.f16 and kind == "sigmoid":
                return _float_unary(kind, a[0], dt)  # rounded step by step already
            return _r16(_float_unary(kind, a[0], dt), out)
        return _int_unary(kind, a[0], dt)
    return emit


def _binary_emitter(kind: str) -> Emitter:
    def emit(a: Sequence[str], ins: Sequence[DType], out: DType) -> str:
        return _r16(_binary(kind, a[0], a[1], ins[0]), out)
    return emit


def _compare_emitter(kind: str) -> Emitter:
    def emit(a: Sequence[str], ins: Sequence[DType], out: DType) -> str:
        return f"({a[0]} {_COMPARE[kind]} {a[1]})"  # bool: false < true, as numpy
    return emit


# ---- ceil, round, reciprocal, is_nan/is_inf/is_finite, floordiv, floormod,
# squared_difference, logical_xor (the LLVM table's rules) ------------------------------

def _simple_unary(kind: str) -> Emitter:
    """ceil, round (``rint``: ties to even in the default rounding mode), reciprocal
    (``1 / x``) and the predicates (exact on f16's values held in float)."""
    def emit(a: Sequence[str], ins: Sequence[DType], out: DType) -> str:
        dt, x = ins[0], a[0]
        f = "f" if dt is not DType.f64 else ""
        if kind == "ceil":
            return f"ceil{f}({x})"
        if kind == "round":
            return f"rint{f}({x})"
        if kind == "reciprocal":
            return _r16(f"({literal(1, dt)} / {x})", out)
        if kind == "is_nan":
            return f"tfc_isnan({x})"
        if kind == "is_inf":
            return f"tfc_isinf({x})"
        inf = "TFC_INF" if f else "TFC_INF_D"
        return f"(fabs{f}({x}) < {inf})"  # is_finite (false for NaN)
    return emit


def _simple_binary(kind: str) -> Emitter:
    """floordiv (floats: floor of the quotient rounded to the dtype; integers as ``div``),
    floormod (``tfc_floormod``), squared_difference (``tfc_sqdiff``), truncatediv
    (``trunc`` of the rounded quotient; ``tfc_truncdiv``), truncatemod (``fmod``, exact;
    ``tfc_truncmod``)."""
    def emit(a: Sequence[str], ins: Sequence[DType], out: DType) -> str:
        dt, (x, y) = ins[0], a
        if kind == "floordiv":
            if not dt.is_float:
                return f"tfc_floordiv({x}, {y})"
            f = "f" if dt is not DType.f64 else ""
            return f"floor{f}({_r16(f'({x} / {y})', dt)})"
        if kind == "floormod":
            return _r16(f"tfc_floormod({x}, {y})", out)
        if kind in ("truncatediv", "truncatemod"):
            if not dt.is_float:
                return f"tfc_trunc{kind[8:]}({x}, {y})"
            f = "f" if dt is not DType.f64 else ""
            if kind == "truncatemod":
                return f"fmod{f}({x}, {y})"  # exact
            return f"trunc{f}({_r16(f'({x} / {y})', dt)})"
        if dt is DType.f16:
            return f"tfc_r16(tfc_sqdiff16({x}, {y}))"
        return f"tfc_sqdiff({x}, {y})"
    return emit


SIMPLE: dict[str, Emitter] = {
    **{k: _simple_unary(k) for k in ("ceil", "round", "reciprocal", "is_nan", "is_inf",
                                      "is_finite")},
    **{k: _simple_binary(k) for k in ("floordiv", "floormod", "squared_difference",
                                       "truncatediv", "truncatemod")},
    "logical_xor": lambda a, i, o: f"({a[0]} != {a[1]})",
}


ELEMENTWISE: dict[str, Emitter] = {
    **{k: _unary_emitter(k) for k in UNARY},
    **{k: _binary_emitter(k) for k in BINARY},
    **{k: _compare_emitter(k) for k in _COMPARE},
    "logical_and": lambda a, i, o: f"({a[0]} && {a[1]})",
    "logical_or": lambda a, i, o: f"({a[0]} || {a[1]})",
    "logical_not": lambda a, i, o: f"(!{a[0]})",
    "identity": lambda a, i, o: a[0],
    "stop_gradient": lambda a, i, o: a[0],
    "where": lambda a, i, o: f"({a[0]} ? {a[1]} : {a[2]})",
    "sigmoid_cross_entropy": lambda a, i, o: _r16(f"tfc_sce({a[0]}, {a[1]})", o),
    **SIMPLE,
}

# tan, atan, asin, acos, erf, erfc, atan2 (tfc/ops/math_special.py): CUDA's functions of
# those names; maximum errors (f32, f64) from the Programming Guide in MAX_ULP.
_SPECIAL_UNARY = ("tan", "atan", "asin", "acos", "erf", "erfc")
_FMATH.update({k: k for k in _SPECIAL_UNARY})
ELEMENTWISE.update({k: _unary_emitter(k) for k in _SPECIAL_UNARY})
MAX_ULP.update({"tan": (4, 2), "atan": (2, 2), "asin": (2, 2), "acos": (2, 2),
                "atan2": (3, 2), "erf": (2, 2), "erfc": (4, 5)})


def _atan2_emitter(a: Sequence[str], ins: Sequence[DType], out: DType) -> str:
    f = "f" if ins[0] is not DType.f64 else ""
    return _r16(f"atan2{f}({a[0]}, {a[1]})", out)


ELEMENTWISE["atan2"] = _atan2_emitter

#: The op names this table lowers (every ELEMENTWISE op of the registry, and ``cast``).
SUPPORTED = frozenset(ELEMENTWISE) | {"cast"}


def cast(x: str, src: DType, dst: DType, saturate: bool = False) -> str:
    """``cast`` between compute types, with numpy's results where C leaves them undefined."""
    if src is dst:
        return x
    if saturate and src.is_float and dst.is_float and dst.itemsize < src.itemsize:
        top = float(np.finfo(dst.np).max)
        x = f"tfc_clamp((double)({x}), {top.hex()})"
        if src is DType.f32:
            x = f"(float){x}"  # exact: the clamped value is a float
    if dst is DType.bool:
        return f"({x} != 0)"
    t = COMPUTE[dst]
    if src is DType.bool:
        return f"(({t})({x} ? 1 : 0))"
    if src.is_float and dst.is_float:
        if dst is DType.f16:
            return f"tfc_d16({x})" if src is DType.f64 else f"tfc_r16({x})"
        return f"(({t})({x}))"
    if src.is_float:
        return f"tfc_to_{dst.value}({x})"
    if dst is DType.f16:
        return f"tfc_d16((double)({x}))"  # one rounding: exact below f16's overflow
    if dst.is_float:
        return f"(({t})({x}))"  # round to nearest
    return f"(({t})({x}))"  # i32 <-> i64: widen, or wrap (C++20 modular conversion)


def emit(kind: str, args: Sequence[str], in_dtypes: Sequence[DType], out_dtype: DType,
         attrs: Mapping[str, Any] | None = None) -> str:
    """The C expression of one element of op ``kind`` on ``args`` (compute types in,
    compute type out). ``cast`` reads its target from ``out_dtype`` and ``saturate``
    from ``attrs``. Raises ``KeyError`` for a kind this table does not lower."""
    if kind == "cast":
        return cast(args[0], in_dtypes[0], out_dtype, bool((attrs or {}).get("saturate")))
    try:
        emitter = ELEMENTWISE[kind]
    except KeyError:
        raise KeyError(f"cuda: no element-wise lowering for '{kind}'") from None
    return emitter(list(args), list(in_dtypes), out_dtype)


__all__ = ["COMPUTE", "HELPERS", "MAX_ULP", "STORAGE", "SUPPORTED", "cast", "emit", "literal",
           "load", "store"]
