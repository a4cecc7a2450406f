"""Vectorizable math functions written as LLVM IR (exp, log, tanh, sin, pow ...).

A call to libm's ``expf`` inside a loop keeps LLVM's loop vectorizer from vectorizing it
(it knows no vector variant), so the kernels would run one element at a time. Here each
function is emitted once per module and float type as a small ``internal alwaysinline``
LLVM function of plain arithmetic: after inlining, the loop body is straight-line code
(every special case is a ``select``, never a branch) and vectorizes to AVX-512/AVX2.

Methods (constants from Cephes, fdlibm and SLEEF, all public domain or permissive):

- exp: ``n = rint(x log2 e)``, ``r = x - n ln2`` with a Cody-Waite hi/lo split of ln2,
  a minimax polynomial (f32, Cephes ``expf``) or fdlibm's rational form (f64), then
  ``* 2^(n/2) * 2^(n - n/2)``: two exact power-of-two factors built by integer adds into
  the exponent bits, so gradual underflow rounds once and overflow gives inf.
- log: exponent and mantissa by bitcasts (subnormals scaled by 2^23 / 2^54 first),
  mantissa in [sqrt(1/2), sqrt(2)), Cephes ``logf`` polynomial (f32) / fdlibm (f64).
- log1p: ``log(u) * x / (u - 1)`` with ``u = 1 + x`` (Goldberg's trick), ``x`` when u == 1.
- expm1: fdlibm's ``expm1`` (f64) and ``expm1f`` (f32): ``x = k ln2 + r`` (hi/lo split of
  ln2, the rounding error ``c`` of ``r`` carried), a rational approximation of
  ``expm1(r)`` on ``|r| <= ln2/2`` (``Q1..Q5``), and fdlibm's reconstructions of
  ``2^k (1 + expm1(r)) - 1`` by k (0, -1, 1, the mid range, large), all computed and
  one ``select``-ed; ``x`` itself below 2^-54 (2^-25 f32), -1 below -56 ln2 (-27 ln2).
- tanh: odd minimax polynomial (f32) / rational (f64) for |x| < 0.625, stable near 0;
  ``1 - 2 / (exp(2|x|) + 1)`` above, with the sign copied back. The f32 version is tuned
  for speed (``_tanh_f32``: fused multiply-adds, Estrin's scheme, its own e^(2a) with no
  float-to-int conversion): it sits in the element-wise chains (gelu) that must run at
  memory speed, and a clamp + rational (Eigen/XLA's way, cheaper still) is up to 5.4 ulp
  off in f32, past numpy's 2.
- softplus: the reference's formula ``max(x, 0) + log1p(exp(-|x|))``.
- sigmoid: the reference's formula: ``e = exp(-|x|)``, ``1/(1+e)`` or ``e/(1+e)`` (one
  division, its numerator selected).

f32 exp and tanh use ``llvm.fma`` (every AVX2 CPU has FMA; elsewhere LLVM calls libm's
``fmaf``, which ``runtime.symbols`` makes known: the same result, slower).
- sin, cos: Payne-Hanek-style reduction valid over the whole float range, branch-free: the
  24-bit chunks of 2/pi that matter for x's exponent are read from a constant table
  (a gather), each exact product ``x * chunk`` is reduced mod 4 exactly and the pieces are
  summed as a double-double; then fdlibm's kernels on [-pi/4, pi/4] and a quadrant
  select. f32 reduces and evaluates in f64.
- pow: ``exp(y log|x|)``; f32 in f64 arithmetic; f64 with a double-double log (SLEEF's
  ``logk``) and an exp that takes the low part of its argument, then C99's special cases
  (pow(x, 0) = 1, pow(1, y) = 1, negative x with odd/even/non-integer y, zeros, infs).
- tan: sin/cos's reduction, then fdlibm's ``__kernel_tan`` (``pi/4 - |y|`` above 0.6744,
  ``-1/tan`` in odd quadrants with a split divisor), its cases selected.
- atan: fdlibm's five ranges (``atan(c) + atan((x - c) / (1 + x c))``, c = 0.5, 1, 1.5,
  inf), one division with its operands selected; atan2: ``atan(min / max)`` of |y|, |x|,
  then ``hi + (lo +- r)`` for the quadrant's multiple of pi/2 (C's signed zeros, infs).
- asin, acos: fdlibm's (a rational in x^2 below 0.5, ``sqrt((1 - |x|) / 2)`` split in
  two halves above), one rational evaluation with its argument selected.
- erf, erfc: fdlibm's rational approximations on [0, 0.84375], [0.84375, 1.25], [1.25,
  2.857], [2.857, 28], every one computed and selected; the tail's ``e^(-x^2 - 0.5625 +
  R/S)`` as one exp of a double-double argument (``_exp_core``), so erfc stays accurate
  down to its underflow (x = 27.3); erfc on [1/4, 0.84375) in double-double.
- f32 tan, atan, asin, acos, atan2, erf, erfc: the f64 function, rounded once (``_via_f64``).
- sqrt, floor: the ``llvm.sqrt`` / ``llvm.floor`` intrinsics (correctly rounded, vectorize);
  rsqrt: ``1 / sqrt(x)`` (two roundings, bit-exact with the reference).

Accuracy: the max error in ulp against the exact value (``MAX_ULP`` below, which
tests/backends/llvm/test_vmath.py enforces over 100k+ samples per function over its
interesting range, random bit patterns over the whole range and special values; f16 on
all 65536 values). f16 is computed in f32 and rounded once: within 0.5 ulp plus the f32
error scaled down by 2^-13, so a result can be the double rounding of a value a hair's
breadth from a tie (0.50005 ulp), never more. The code is the same arithmetic on every
x86-64 CPU (no fast-math flags, ``llvm.fma`` rather than contraction): the results are
bit for bit those of an SSE4.2-only, an AVX2 and an AVX-512 build (tested). numpy is no
oracle here: its SIMD loops (AVX2 or AVX-512, per host) are themselves 1-4 ulp off in
f32 and round f16 differently from host to host.

    ======== ======== ====== ======
    function   f16     f32    f64
    ======== ======== ====== ======
    exp      0.5001   1.0    0.88
    log      0.5001   0.81   0.81
    log1p    0.5001   2.38   2.1
    expm1    0.5001   0.8    0.83
    softplus 0.5001   2.76   2.62
    tanh     0.5001   1.49   1.3
    sigmoid  0.5001   2.27   2.09
    sin      0.5001   0.51   0.78
    cos      0.5001   0.51   0.77
    pow      0.5001   0.5001 0.87
    tan      0.5001   0.51   0.83
    atan     0.5001   0.51   0.8
    asin     0.5001   0.51   0.9
    acos     0.5001   0.51   0.89
    atan2    0.5001   0.51   1.58
    erf      0.5001   0.51   0.91
    erfc     0.5001   0.51   2.3
    ======== ======== ====== ======

sqrt, rsqrt and floor are bit-exact (IEEE operations; rsqrt is ``1 / sqrt(x)``, two
roundings, as the reference computes it). (sigmoid f16 in ``elementwise``: the reference
rounds each step to f16; ``elementwise`` does the same, with this exp.)

Special values match numpy: nan in -> nan out; exp(+-inf) = inf/0, overflow -> inf,
underflow -> subnormals then +0; log(0) = log(-0.0) = -inf, log(x<0) = nan, log(inf) = inf;
tanh(+-inf) = +-1; sin/cos(+-inf) = nan; odd functions keep -0.0 (sin, tanh, log1p, expm1);
expm1(inf) = inf, expm1(-inf) = -1, overflow -> inf;
pow follows C99 Annex F (as numpy's pow does); tan, atan, asin, erf keep -0.0 too;
tan(+-inf) = nan; atan(+-inf) = +-pi/2; asin/acos beyond |x| = 1 = nan; erf(+-inf) = +-1,
erfc(inf) = 0, erfc(-inf) = 2; atan2 as C's (atan2(+-0, -0) = +-pi, atan2(+-inf, -inf) =
+-3pi/4 ...).

Argument reduction of sin/cos: about 2^-100 absolute error (double-double), so an f64
argument extremely close to a multiple of pi/2 could lose relative accuracy; the hardest
known case (6381956970095103 * 2^797, ~2^-61 from one) still comes out within 1 ulp.
"""

from __future__ import annotations

from typing import Callable, Sequence

import llvmlite.ir as ir

F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)

# 2/pi to 1280 bits (53 chunks of 24 bits), for the sin/cos argument reduction.
_TWO_OVER_PI_HEX = (
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a424dd2e0"
    "06492eea09d1921cfe1deb1cb129a73ee88235f52ebb4484e99c7026b45f7e413991d639835339f4"
    "9c845f8bbdf9283b1ff897ffde05980fef2f118b5a0a6d1f6d367ecf27cb09b74f463f669e5fea2d"
    "7527bac7ebe5f17b3d0739f78a5292ea6bfb5fb11f8d5d0856033046fc7b6babf0cfbc209af4361d")
PIO2_CHUNKS = 53
TWO_OVER_PI_CHUNKS: tuple[int, ...] = tuple(
    int(_TWO_OVER_PI_HEX[6 * k: 6 * k + 6], 16) for k in range(PIO2_CHUNKS))

#: Max error in ulp against the exact value, per (f16, f32, f64): the max measured by
#: tests/backends/llvm/test_vmath.py plus a small margin (f16: exhaustive, 0.50005 at most;
#: tan ... erfc f64: the max over 12M-sample sweeps, whose worst inputs the test samples;
#: f32/f64: the measured max plus 0.01-0.03, room for another glibc's long double
#: functions in the oracle; log1p, expm1 and softplus f32: the max over sweeps of every
#: 127th and 509th f32 bit pattern, whose worst inputs the test samples). The tests hold
#: every function to it, and to its being tight.
MAX_ULP: dict[str, tuple[float, float, float]] = {
    "exp": (0.5001, 1.0, 0.88), "log": (0.5001, 0.81, 0.81), "log1p": (0.5001, 2.38, 2.1),
    "tanh": (0.5001, 1.49, 1.3), "sigmoid": (0.5001, 2.27, 2.09), "sin": (0.5001, 0.51, 0.78),
    "cos": (0.5001, 0.51, 0.77), "pow": (0.5001, 0.5001, 0.87),
    "expm1": (0.5001, 0.8, 0.83), "softplus": (0.5001, 2.76, 2.62),
    "tan": (0.5001, 0.51, 0.83), "atan": (0.5001, 0.51, 0.8), "asin": (0.5001, 0.51, 0.9),
    "acos": (0.5001, 0.51, 0.89), "atan2": (0.5001, 0.51, 1.58), "erf": (0.5001, 0.51, 0.91),
    "erfc": (0.5001, 0.51, 2.3),
}

#: name -> number of arguments, for the functions ``emit_math`` knows.
FUNCTIONS: dict[str, int] = {
    "exp": 1, "log": 1, "log1p": 1, "expm1": 1, "softplus": 1, "tanh": 1, "sigmoid": 1,
    "sin": 1, "cos": 1, "sqrt": 1, "rsqrt": 1, "floor": 1, "pow": 2,
    "tan": 1, "atan": 1, "asin": 1, "acos": 1, "atan2": 2, "erf": 1, "erfc": 1,
}


def emit_math(builder: ir.IRBuilder, name: str, args: Sequence[ir.Value]) -> ir.Value:
    """Emit ``name(*args)`` for float/double (half: computed in float and rounded back).

    The function body is emitted into ``builder``'s module once per (name, type), as an
    ``internal alwaysinline`` function, and called here; LLVM inlines it.
    """
    if name not in FUNCTIONS:
        raise KeyError(f"vmath has no function '{name}' (known: {', '.join(FUNCTIONS)})")
    if len(args) != FUNCTIONS[name]:
        raise TypeError(f"vmath.{name} takes {FUNCTIONS[name]} argument(s), got {len(args)}")
    ty = args[0].type
    if ty == F16:
        wide = [builder.fpext(a, F32) for a in args]
        return builder.fptrunc(emit_math(builder, name, wide), F16)
    if ty not in (F32, F64):
        raise TypeError(f"vmath.{name}: unsupported type {ty}")
    return builder.call(get_function(builder.module, name, ty), list(args))


def fabs(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """|x| through the ``llvm.fabs`` intrinsic (clears the sign bit, NaN included)."""
    return _Math(builder, x.type).fabs(x)


def get_function(module: ir.Module, name: str, ty: ir.Type) -> ir.Function:
    """The module's ``tfc.vmath.<name>.<f32|f64>`` function, emitted on first use."""
    fname = f"tfc.vmath.{name}.{'f64' if ty == F64 else 'f32'}"
    if fname in module.globals:
        return module.globals[fname]
    arity = FUNCTIONS[name]
    fn = ir.Function(module, ir.FunctionType(ty, [ty] * arity), fname)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    m = _Math(ir.IRBuilder(fn.append_basic_block("entry")), ty)
    m.b.ret(_BODIES[name](m, *fn.args))
    return fn


class _Math:
    """Arithmetic helpers over one float type (constants coerced from Python numbers)."""

    def __init__(self, b: ir.IRBuilder, ty: ir.Type) -> None:
        self.b, self.t = b, ty
        self.f64 = ty == F64
        self.it = I64 if self.f64 else I32
        self.mant = 52 if self.f64 else 23
        self.bias = 1023 if self.f64 else 127

    # ---- values ------------------------------------------------------------------------
    def c(self, v: float | ir.Value, t: ir.Type | None = None) -> ir.Value:
        return v if isinstance(v, ir.Value) else ir.Constant(t or self.t, float(v))

    def ci(self, v: int | ir.Value, t: ir.Type | None = None) -> ir.Value:
        return v if isinstance(v, ir.Value) else ir.Constant(t or self.it, int(v))

    def _t(self, *vs: float | ir.Value) -> ir.Type:
        for v in vs:
            if isinstance(v, ir.Value):
                return v.type
        return self.t

    def add(self, a, b):
        t = self._t(a, b)
        return self.b.fadd(self.c(a, t), self.c(b, t))

    def sub(self, a, b):
        t = self._t(a, b)
        return self.b.fsub(self.c(a, t), self.c(b, t))

    def mul(self, a, b):
        t = self._t(a, b)
        return self.b.fmul(self.c(a, t), self.c(b, t))

    def div(self, a, b):
        t = self._t(a, b)
        return self.b.fdiv(self.c(a, t), self.c(b, t))

    def neg(self, a: ir.Value) -> ir.Value:
        return self.b.fneg(a)

    def cmp(self, op: str, a, b) -> ir.Value:
        """Ordered comparison (false when either side is NaN)."""
        t = self._t(a, b)
        return self.b.fcmp_ordered(op, self.c(a, t), self.c(b, t))

    def isnan(self, a: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", a, a)

    def isfinite(self, a: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered("<", self.fabs(a), self.c(float("inf"), a.type))

    def sel(self, cond: ir.Value, a, b):
        t = self._t(a, b)
        return self.b.select(cond, self.c(a, t), self.c(b, t))

    def horner(self, x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
        """coeffs[0] * x^(n-1) + ... + coeffs[-1]."""
        acc = self.c(coeffs[0], x.type)
        for k in coeffs[1:]:
            acc = self.add(self.mul(acc, x), k)
        return acc

    def horner_fma(self, x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
        """Like ``horner`` (highest coefficient first), one fused multiply-add per step."""
        acc = self.c(coeffs[0], x.type)
        for k in coeffs[1:]:
            acc = self.fma(acc, x, self.c(k, x.type))
        return acc

    def estrin(self, x: ir.Value, coeffs: Sequence[float], x2: ir.Value | None = None
               ) -> ir.Value:
        """coeffs[0] + coeffs[1] x + ... (lowest coefficient first), Estrin's scheme.

        Same operation count as Horner's rule with FMAs (plus the powers x^2, x^4 ...),
        but a dependency chain of about log2(n) steps instead of n: the kernels that
        inline these functions are bound by their longest chain (the out-of-order window
        fills up), not by the number of operations.
        """
        c = [self.c(v, x.type) for v in coeffs]
        terms = [self.fma(c[k + 1], x, c[k]) if k + 1 < len(c) else c[k]
                 for k in range(0, len(c), 2)]
        p = x2 if x2 is not None else self.mul(x, x)
        while len(terms) > 1:
            terms = [self.fma(terms[k + 1], p, terms[k]) if k + 1 < len(terms) else terms[k]
                     for k in range(0, len(terms), 2)]
            if len(terms) > 1:
                p = self.mul(p, p)
        return terms[0]

    # ---- intrinsics --------------------------------------------------------------------
    def _intr(self, name: str, args: Sequence[ir.Value]) -> ir.Value:
        t = args[0].type
        full = f"{name}.{t.intrinsic_name}"
        mod = self.b.module
        fn = mod.globals.get(full) or ir.Function(
            mod, ir.FunctionType(t, [t] * len(args)), full)
        return self.b.call(fn, list(args))

    def rint(self, a: ir.Value) -> ir.Value:
        return self._intr("llvm.rint", [a])

    def fabs(self, a: ir.Value) -> ir.Value:
        return self._intr("llvm.fabs", [a])

    def sqrt(self, a: ir.Value) -> ir.Value:
        return self._intr("llvm.sqrt", [a])

    def floor(self, a: ir.Value) -> ir.Value:
        return self._intr("llvm.floor", [a])

    def copysign(self, mag: ir.Value, sign: ir.Value) -> ir.Value:
        return self._intr("llvm.copysign", [mag, sign])

    def fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        """Exact a*b+c with one rounding (the intrinsic, not contraction)."""
        return self._intr("llvm.fma", [a, b, c])

    # ---- bits --------------------------------------------------------------------------
    def bits(self, a: ir.Value) -> ir.Value:
        return self.b.bitcast(a, I64 if a.type == F64 else I32)

    def from_bits(self, i: ir.Value) -> ir.Value:
        return self.b.bitcast(i, F64 if i.type == I64 else F32)

    def exponent(self, a: ir.Value) -> ir.Value:
        """The unbiased exponent field of a (as the float's int type)."""
        f64 = a.type == F64
        it, mant, bias, mask = (I64, 52, 1023, 0x7FF) if f64 else (I32, 23, 127, 0xFF)
        e = self.b.and_(self.b.lshr(self.bits(a), ir.Constant(it, mant)), ir.Constant(it, mask))
        return self.b.sub(e, ir.Constant(it, bias))

    def pow2(self, k: ir.Value) -> ir.Value:
        """2^k for an integer k of the float's int type, k in the normal exponent range."""
        it = k.type
        mant, bias = (52, 1023) if it == I64 else (23, 127)
        return self.from_bits(self.b.shl(self.b.add(k, ir.Constant(it, bias)),
                                         ir.Constant(it, mant)))

    def ldexp_split(self, y: ir.Value, n: ir.Value) -> ir.Value:
        """y * 2^n as two exact power-of-two factors (one rounding, even into subnormals)."""
        k1 = self.b.ashr(n, ir.Constant(n.type, 1))
        k2 = self.b.sub(n, k1)
        return self.mul(self.mul(y, self.pow2(k1)), self.pow2(k2))

    # ---- double-double (error-free transforms) -----------------------------------------
    def two_sum(self, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
        s = self.add(a, b)
        bb = self.sub(s, a)
        return s, self.add(self.sub(a, self.sub(s, bb)), self.sub(b, bb))

    def fast_two_sum(self, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
        s = self.add(a, b)
        return s, self.sub(b, self.sub(s, a))

    def two_prod(self, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
        p = self.mul(a, b)
        return p, self.fma(a, b, self.neg(p))

    def dd_add(self, a: tuple, b: tuple) -> tuple:
        s, e = self.two_sum(a[0], b[0])
        return self.fast_two_sum(s, self.add(e, self.add(a[1], b[1])))

    def dd_mul(self, a: tuple, b: tuple) -> tuple:
        p, e = self.two_prod(a[0], b[0])
        e = self.add(e, self.add(self.mul(a[0], b[1]), self.mul(a[1], b[0])))
        return self.fast_two_sum(p, e)

    def dd_mul_d(self, a: tuple, b: ir.Value) -> tuple:
        p, e = self.two_prod(a[0], b)
        return self.fast_two_sum(p, self.add(e, self.mul(a[1], b)))

    def dd_div(self, n: tuple, d: tuple) -> tuple:
        q = self.div(n[0], d[0])
        r = self.fma(self.neg(q), d[0], n[0])  # the exact remainder
        r = self.sub(self.add(r, n[1]), self.mul(q, d[1]))
        return self.fast_two_sum(q, self.div(r, d[0]))


Body = Callable[..., ir.Value]

# ---- exp --------------------------------------------------------------------------------

_EXPF_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
           1.6666665459e-1, 5.0000001201e-1)
_EXP_P = (4.13813679705723846039e-08, -1.65339022054652515390e-06, 6.61375632143793436117e-05,
          -2.77777777770155933842e-03, 1.66666666666666019037e-01)
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_LOG2E = 1.44269504088896338700e+00


def _exp_core(m: _Math, x: ir.Value, xlo: ir.Value | None = None) -> ir.Value:
    """e^(x + xlo); xlo (f64 only) is a tiny low part of the argument (double-double)."""
    lo_lim, hi_lim = (-746.0, 710.0) if m.f64 else (-104.0, 89.0)
    xs = m.sel(m.cmp(">=", x, lo_lim), x, lo_lim)  # NaN -> lo_lim, fixed at the end
    xs = m.sel(m.cmp(">", xs, hi_lim), hi_lim, xs)
    n = m.rint(m.mul(xs, _LOG2E))
    if m.f64:
        hi = m.sub(xs, m.mul(n, _LN2_HI))  # n * LN2_HI is exact (32 + 11 bits)
        lo = m.mul(n, _LN2_LO)
        if xlo is not None:  # dropped when x was clamped (the result is 0 or inf anyway)
            lo = m.sub(lo, m.sel(m.cmp("==", xs, x), xlo, 0.0))
        r = m.sub(hi, lo)
        t = m.mul(r, r)
        c = m.sub(r, m.mul(t, m.horner(t, _EXP_P)))
        y = m.sub(1.0, m.sub(m.sub(lo, m.div(m.mul(r, c), m.sub(2.0, c))), hi))
    else:
        # Cody-Waite reduction and Cephes' polynomial, with fused multiply-adds
        r = m.fma(n, m.c(2.12194440e-4), m.fma(n, m.c(-0.693359375), xs))
        p = m.horner_fma(r, _EXPF_P)
        y = m.add(m.fma(p, m.mul(r, r), r), 1.0)
    out = m.ldexp_split(y, m.b.fptosi(n, m.it))
    return m.sel(m.isnan(x), x, out)


def _exp(m: _Math, x: ir.Value) -> ir.Value:
    return _exp_core(m, x)


# ---- expm1 ------------------------------------------------------------------------------

# fdlibm s_expm1.c (f64) and s_expm1f.c (f32): Q1..Q5 of the rational approximation of
# expm1(r) on |r| <= ln2/2; ln2 split hi/lo (hi with trailing zeros: k * hi is exact).
_EXPM1_Q = (-3.33333333333331316428e-02, 1.58730158725481460165e-03,
            -7.93650757867487942473e-05, 4.00821782732936239552e-06,
            -2.01099218183624371326e-07)
_EXPM1F_Q = (-3.3333335072e-02, 1.5873016091e-03, -7.9365076090e-05, 4.0082177293e-06,
             -2.0109921195e-07)
_LN2F_HI, _LN2F_LO, _LOG2EF = 6.9313812256e-01, 9.0580006145e-06, 1.4426950216e+00


def _expm1(m: _Math, x: ir.Value) -> ir.Value:
    """e^x - 1, fdlibm's algorithm with every branch computed and selected (see above)."""
    if m.f64:
        q, ln2_hi, ln2_lo, log2e = _EXPM1_Q, _LN2_HI, _LN2_LO, _LOG2E
        lo_lim, hi_lim, tiny, mid = -56 * 0.6931471805599453, 710.0, 2.0 ** -54, 20
    else:
        q, ln2_hi, ln2_lo, log2e = _EXPM1F_Q, _LN2F_HI, _LN2F_LO, _LOG2EF
        lo_lim, hi_lim, tiny, mid = -27 * 0.6931471805599453, 89.0, 2.0 ** -25, 23
    # clamp (NaN -> lo_lim, fixed at the end): beyond, the result is -1 or inf
    xs = m.sel(m.cmp(">=", x, lo_lim), x, lo_lim)
    xs = m.sel(m.cmp(">", xs, hi_lim), hi_lim, xs)
    k = m.rint(m.mul(xs, log2e))
    hi = m.sub(xs, m.mul(k, ln2_hi))  # exact
    lo = m.mul(k, ln2_lo)
    r = m.sub(hi, lo)
    c = m.sub(m.sub(hi, r), lo)  # r's rounding error
    # expm1(r) = r + r^2/2 + r^3/2 * (r1 - t) / (6 - r t)  (fdlibm's e, hxs)
    hfx = m.mul(r, 0.5)
    hxs = m.mul(r, hfx)
    r1 = m.add(1.0, m.mul(hxs, m.horner(hxs, q[::-1])))
    t = m.sub(3.0, m.mul(r1, hfx))
    e = m.mul(hxs, m.div(m.sub(r1, t), m.sub(6.0, m.mul(r, t))))
    e = m.sub(m.sub(m.mul(r, m.sub(e, c)), c), hxs)
    # the reconstructions of 2^k (1 + expm1(r)) - 1 for each range of k
    ki = m.b.fptosi(k, m.it)
    k0 = m.sub(r, e)
    km1 = m.sub(m.mul(m.sub(r, e), 0.5), 0.5)
    kp1 = m.sel(m.cmp("<", r, -0.25), m.mul(m.sub(e, m.add(r, 0.5)), -2.0),
                m.add(1.0, m.mul(m.sub(r, e), 2.0)))
    two_mk = m.pow2(m.b.sub(m.ci(0), m.b.select(m.cmp(">", k, 60.0), m.ci(60), ki)))
    y_low = m.sub(m.sub(1.0, two_mk), m.sub(e, r))  # 2 <= k < mid: (1 - 2^-k) - (e - r)
    y_high = m.add(m.sub(r, m.add(e, two_mk)), 1.0)  # mid <= k <= 56
    y_far = m.sub(1.0, m.sub(e, r))  # k <= -2 or k > 56: 2^k y - 1
    far = m.b.or_(m.cmp("<=", k, -2.0), m.cmp(">", k, 56.0))
    y = m.sel(far, y_far, m.sel(m.cmp("<", k, float(mid)), y_low, y_high))
    scaled = m.ldexp_split(y, ki)
    scaled = m.sel(far, m.sub(scaled, 1.0), scaled)
    res = m.sel(m.cmp("==", k, 0.0), k0, m.sel(m.cmp("==", k, -1.0), km1,
                m.sel(m.cmp("==", k, 1.0), kp1, scaled)))
    res = m.sel(m.cmp("<", x, lo_lim), -1.0, res)
    res = m.sel(m.cmp("<", m.fabs(x), tiny), x, res)  # keeps -0.0 and subnormals
    return m.sel(m.isnan(x), x, res)


# ---- log --------------------------------------------------------------------------------

_LOGF_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
           1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
           3.3333331174e-1)
_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
       2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
       1.479819860511658591e-01)


def _decompose(m: _Math, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """x = 2^e * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)); subnormals handled. (e as float)"""
    tiny, scale_bits = (2.0 ** -1022, 54) if m.f64 else (2.0 ** -126, 23)
    sub = m.cmp("<", x, tiny)
    xn = m.sel(sub, m.mul(x, 2.0 ** scale_bits), x)
    e = m.b.add(m.exponent(xn), m.b.select(sub, m.ci(-scale_bits), m.ci(0)))
    mant_mask = (1 << m.mant) - 1
    mbits = m.b.or_(m.b.and_(m.bits(xn), m.ci(mant_mask)), m.ci(m.bias << m.mant))
    mant = m.from_bits(mbits)  # in [1, 2)
    big = m.cmp(">", mant, 1.4142135623730951)
    mant = m.sel(big, m.mul(mant, 0.5), mant)
    e = m.b.add(e, m.b.zext(big, m.it))
    return m.b.sitofp(e, m.t), m.sub(mant, 1.0)


def _log_specials(m: _Math, x: ir.Value, res: ir.Value) -> ir.Value:
    inf = float("inf")
    res = m.sel(m.cmp("==", x, inf), inf, res)
    res = m.sel(m.b.fcmp_unordered("<", x, m.c(0.0)), float("nan"), res)  # x < 0 or NaN
    return m.sel(m.cmp("==", x, 0.0), -inf, res)


def _log(m: _Math, x: ir.Value) -> ir.Value:
    e, f = _decompose(m, x)
    if m.f64:
        hfsq = m.mul(m.mul(f, f), 0.5)
        s = m.div(f, m.add(f, 2.0))
        z = m.mul(s, s)
        w = m.mul(z, z)
        t1 = m.mul(w, m.horner(w, (_LG[5], _LG[3], _LG[1])))
        t2 = m.mul(z, m.horner(w, (_LG[6], _LG[4], _LG[2], _LG[0])))
        r = m.add(t2, t1)
        inner = m.sub(hfsq, m.add(m.mul(s, m.add(hfsq, r)), m.mul(e, _LN2_LO)))
        res = m.sub(m.mul(e, _LN2_HI), m.sub(inner, f))
    else:
        z = m.mul(f, f)
        y = m.mul(m.mul(m.horner(f, _LOGF_P), f), z)
        y = m.add(y, m.mul(e, -2.12194440e-4))
        y = m.add(y, m.mul(z, -0.5))
        res = m.add(m.add(f, y), m.mul(e, 0.693359375))
    return _log_specials(m, x, res)


def _log1p(m: _Math, x: ir.Value) -> ir.Value:
    u = m.add(x, 1.0)
    lu = m.b.call(get_function(m.b.module, "log", m.t), [u])
    res = m.mul(lu, m.div(x, m.sub(u, 1.0)))
    res = m.sel(m.cmp("==", u, 1.0), x, res)  # |x| below half an ulp of 1 (and -0.0)
    return m.sel(m.cmp("==", x, float("inf")), x, res)


# ---- tanh, sigmoid ----------------------------------------------------------------------

_TANHF_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
            -3.33332819422e-1)
_TANH_P = (-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3)
_TANH_Q = (1.0, 1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3)


def _tanh(m: _Math, x: ir.Value) -> ir.Value:
    if not m.f64:
        return _tanh_f32(m, x)
    a = m.fabs(x)
    z = m.mul(x, x)
    small = m.add(x, m.mul(m.mul(x, z), m.div(m.horner(z, _TANH_P), m.horner(z, _TANH_Q))))
    s = m.b.call(get_function(m.b.module, "exp", m.t), [m.add(a, a)])
    large = m.sub(1.0, m.div(2.0, m.add(s, 1.0)))
    # NaN takes `large` (NaN); copysign keeps tanh(-0.0) = -0.0
    return m.copysign(m.sel(m.cmp("<", a, 0.625), small, large), x)


# e^(2r) on |r| <= ln2/4 (degree 6, lowest first): minimax for relative error, fitted with
# f32 coefficients; approximation error 0.04 ulp of f32.
_EXP2R_F32 = (1.0, 2.0, 1.999999761581421, 1.3333137035369873, 0.6666889190673828,
              0.2679988741874695, 0.08859335631132126)
_ROUND_MAGIC_F32 = 12582912.0  # 1.5 * 2^23: adding it rounds a float below 2^22 to an integer
_HALF_LN2_F32 = 0.3465735912322998  # ln2 / 2 rounded to f32


def _tanh_f32(m: _Math, x: ir.Value) -> ir.Value:
    """tanh for f32, the cheap way (about 30 vector operations, no branch, no libm).

    |x| < 0.625: Cephes' odd polynomial ``a + a^3 P(a^2)``. Otherwise
    ``1 - 2 / (e^(2a) + 1)``, where only e^(2a)'s relative error matters and it is damped
    by ``2 / (e^(2a) + 1) <= 0.45``: ``e^(2a) = 2^n e^(2r)`` with ``n = rint(2a / ln2)``
    (the 1.5 * 2^23 trick: no float-to-int conversion, so NaN stays a defined value),
    ``r = a - n ln2/2`` with one FMA (the rounding of ln2/2 to f32 costs ``n * 1e-9``
    in r, which only matters where the result's own ulp already dwarfs it), a degree-6
    polynomial evaluated by Estrin's scheme and ``2^n`` built in the exponent bits.
    |x| is clamped to 44 (e^88 is still finite; tanh rounds to 1 long before), and the
    sign of x is or-ed back in (tanh(-0.0) = -0.0; NaN stays NaN).

    Accuracy (all f32 in [0, 10.5] and their negatives): at most 1.49 ulp from the exact
    result, at most 2 ulp from numpy's own f32 tanh (itself up to 1 ulp off); f16
    (computed here and rounded) matches numpy on all 65536 values.
    """
    b = m.b
    a = m.fabs(x)
    # small: a + a z P(z), z = a^2
    z = m.mul(a, a)
    small = m.fma(m.mul(a, z), m.horner_fma(z, _TANHF_P), a)
    # large: 1 - 2 / (e^(2a) + 1)
    ac = m.sel(m.cmp(">", a, 44.0), 44.0, a)  # NaN passes through
    big_n = m.fma(ac, m.c(2.0 / 0.6931471805599453), m.c(_ROUND_MAGIC_F32))
    n = m.sub(big_n, _ROUND_MAGIC_F32)
    r = m.fma(n, m.c(-_HALF_LN2_F32), ac)
    p = m.estrin(r, _EXP2R_F32)
    # 2^n: n sits in the low mantissa bits of big_n (0 <= n <= 127)
    scale = m.from_bits(b.add(b.shl(m.bits(big_n), ir.Constant(I32, 23)),
                              ir.Constant(I32, 127 << 23)))
    e2a = m.mul(p, scale)
    large = m.sub(1.0, m.div(2.0, m.add(e2a, 1.0)))
    res = m.sel(m.cmp("<", a, 0.625), small, large)  # NaN takes `large` (NaN)
    sign = b.and_(m.bits(x), ir.Constant(I32, -(1 << 31)))
    return m.from_bits(b.or_(m.bits(res), sign))


def _softplus(m: _Math, x: ir.Value) -> ir.Value:
    """``max(x, 0) + log1p(exp(-|x|))``, the reference's formula (NaN stays NaN)."""
    relu = m.sel(m.cmp(">", x, 0.0), x, 0.0)
    e = m.b.call(get_function(m.b.module, "exp", m.t), [m.neg(m.fabs(x))])
    return m.add(relu, m.b.call(get_function(m.b.module, "log1p", m.t), [e]))


def _sigmoid(m: _Math, x: ir.Value) -> ir.Value:
    e = m.b.call(get_function(m.b.module, "exp", m.t), [m.neg(m.fabs(x))])
    d = m.add(e, 1.0)
    # one division with the numerator selected (1 or e), not two divisions selected
    return m.div(m.sel(m.cmp(">=", x, 0.0), 1.0, e), d)


# ---- sin, cos ---------------------------------------------------------------------------

_SINDF = (2.7183114939898219064e-06, -1.98393348360966317347e-04, 8.3333293858894631756e-03,
          -1.66666666416265235595e-01)
_COSDF = (2.43904487962774090654e-05, -1.38867637746099294692e-03, 4.16666233237390631894e-02,
          -4.99999997251031003120e-01)
_S = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
      2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_C = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
      -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
_PIO2_HI, _PIO2_LO = 1.5707963267948966, 6.123233995736766e-17


def _chunk_table(module: ir.Module) -> ir.GlobalVariable:
    name = "tfc.vmath.two_over_pi_chunks"
    if name in module.globals:
        return module.globals[name]
    ty = ir.ArrayType(F64, PIO2_CHUNKS)
    g = ir.GlobalVariable(module, ty, name)
    g.initializer = ir.Constant(ty, [ir.Constant(F64, float(c)) for c in TWO_OVER_PI_CHUNKS])
    g.global_constant = True
    g.linkage = "internal"
    return g


def _reduce_pio2(m: _Math, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """x = (q + r) * pi/2 with q an integer (as f64) and r = rhi + rlo (double-double).

    x (finite) is split into parts of at most 29 bits; with 24-bit chunks c_k of 2/pi every
    product part * c_k is exact in f64, and its value mod 4 is exact too. Chunks whose
    products are multiples of 4 for x's exponent are skipped (the table is read from index
    i0), and enough later chunks are kept for ~120 bits below the first kept product.
    """
    b, f64t = m.b, F64
    if m.f64:
        g, nchunks = 52, 9
        xb = m.bits(x)
        hi = m.from_bits(b.and_(xb, ir.Constant(I64, -(1 << 24))))
        parts = [hi, m.sub(x, hi)]
    else:
        g, nchunks = 23, 5
        parts = [b.fpext(x, f64t)]
    e = b.sext(m.exponent(x), I64) if not m.f64 else m.exponent(x)
    # i0 = max(0, floor((e - g - 2) / 24)): chunks below i0 contribute multiples of 4.
    ep = b.sub(e, ir.Constant(I64, g + 2))
    ep = b.select(b.icmp_signed("<", ep, ir.Constant(I64, 0)), ir.Constant(I64, 0), ep)
    i0 = b.sdiv(ep, ir.Constant(I64, 24))
    # Scale x's parts by 2^-(24 (i0 + 1)) so chunk values stay normal doubles.
    scale = m.pow2(b.mul(b.add(i0, ir.Constant(I64, 1)), ir.Constant(I64, -24)))
    parts = [m.mul(p, scale) for p in parts]
    table = _chunk_table(b.module)
    s, err, q = m.c(0.0, f64t), m.c(0.0, f64t), m.c(0.0, f64t)
    for k in range(nchunks):
        idx = b.add(i0, ir.Constant(I64, k))
        ptr = b.gep(table, [ir.Constant(I64, 0), idx], inbounds=True,
                    source_etype=table.value_type)
        chunk = m.mul(b.load(ptr, typ=F64), 2.0 ** (-24 * k))
        for p in parts:
            t = m.mul(p, chunk)  # exact
            u = m.sub(t, m.mul(m.rint(m.mul(t, 0.25)), 4.0))  # t mod 4 in [-2, 2], exact
            s, e_ = m.two_sum(s, u)
            n = m.rint(s)
            s = m.sub(s, n)  # exact: keeps s in [-1/2, 1/2]
            q = m.add(q, n)
            err = m.add(err, e_)
    rhi, rlo = m.fast_two_sum(s, err)
    return q, rhi, rlo


def _sincos_f64(m: _Math, x: ir.Value, want_sin: bool) -> ir.Value:
    finite = m.isfinite(x)
    xs = m.sel(finite, x, 0.0)
    q, rhi, rlo = _reduce_pio2(m, xs)
    yhi, ylo = m.dd_mul((rhi, rlo), (m.c(_PIO2_HI), m.c(_PIO2_LO)))
    ksin, kcos = _kernels_f64(m, yhi, ylo)
    out = _quadrant(m, q, ksin, kcos, want_sin)
    # Tiny |x|: sin x = x, cos x = 1 (correctly rounded; keeps -0.0 and subnormals exact).
    tiny = m.cmp("<", m.fabs(x), 2.0 ** -27)
    out = m.sel(tiny, x if want_sin else m.c(1.0), out)
    return m.sel(finite, out, float("nan"))


def _kernels_f64(m: _Math, yhi: ir.Value, ylo: ir.Value) -> tuple[ir.Value, ir.Value]:
    """fdlibm's __kernel_sin(y, 1) and __kernel_cos(y) of y = yhi + ylo in [-pi/4, pi/4]."""
    z = m.mul(yhi, yhi)
    v = m.mul(z, yhi)
    r = m.horner(z, _S[:0:-1])
    ksin = m.sub(yhi, m.sub(m.sub(m.mul(z, m.sub(m.mul(ylo, 0.5), m.mul(v, r))), ylo),
                            m.mul(v, _S[0])))
    w = m.mul(z, z)
    rc = m.add(m.mul(z, m.horner(z, _C[2::-1])), m.mul(m.mul(w, w), m.horner(z, _C[:2:-1])))
    hz = m.mul(z, 0.5)
    w1 = m.sub(1.0, hz)
    kcos = m.add(w1, m.add(m.sub(m.sub(1.0, w1), hz), m.sub(m.mul(z, rc), m.mul(yhi, ylo))))
    return ksin, kcos


def _sincos_f32(m: _Math, x: ir.Value, want_sin: bool) -> ir.Value:
    finite = m.isfinite(x)
    xs = m.sel(finite, x, 0.0)
    q, rhi, rlo = _reduce_pio2(m, xs)
    y = m.mul(m.add(rhi, rlo), _PIO2_HI)
    z = m.mul(y, y)
    w = m.mul(z, z)
    s = m.mul(z, y)
    ksin = m.add(m.add(y, m.mul(s, m.horner(z, _SINDF[2:]))),
                 m.mul(m.mul(s, w), m.horner(z, _SINDF[:2])))
    kcos = m.add(m.add(m.add(m.mul(z, _COSDF[3]), 1.0), m.mul(w, _COSDF[2])),
                 m.mul(m.mul(w, z), m.horner(z, _COSDF[:2])))
    out = m.b.fptrunc(_quadrant(m, q, ksin, kcos, want_sin), F32)
    if want_sin:
        out = m.sel(m.cmp("==", x, 0.0), x, out)  # keep -0.0
    return m.sel(finite, out, float("nan"))


def _quadrant(m: _Math, q: ir.Value, ksin: ir.Value, kcos: ir.Value, want_sin: bool
              ) -> ir.Value:
    b = m.b
    qi = b.and_(b.fptosi(q, I64), ir.Constant(I64, 3))
    if not want_sin:
        qi = b.and_(b.add(qi, ir.Constant(I64, 1)), ir.Constant(I64, 3))  # cos x = sin(x+pi/2)
    odd = b.trunc(qi, I1)
    negative = b.icmp_unsigned(">=", qi, ir.Constant(I64, 2))
    v = b.select(odd, kcos, ksin)
    return b.select(negative, m.neg(v), v)


def _sin(m: _Math, x: ir.Value) -> ir.Value:
    return _sincos_f64(m, x, True) if m.f64 else _sincos_f32(m, x, True)


def _cos(m: _Math, x: ir.Value) -> ir.Value:
    return _sincos_f64(m, x, False) if m.f64 else _sincos_f32(m, x, False)


# ---- pow --------------------------------------------------------------------------------

_LOGK = (0.116255524079935043668677, 0.103239680901072952701192, 0.117754809412463995466069,
         0.13332981086846273921509, 0.153846227114512262845736, 0.181818180850050775676507,
         0.222222222230083560345903, 0.285714285714249172087875, 0.400000000000000077715612)
_LN2_DD = (0.693147180559945286226764, 2.319046813846299558417771e-17)
_TWO_THIRDS_DD = (0.666666666666666629659233, 3.80554962542412056336616e-17)


def _log_dd(m: _Math, a: ir.Value) -> tuple[ir.Value, ir.Value]:
    """log(a) as a double-double for finite a > 0 (SLEEF's logk)."""
    b = m.b
    sub = m.cmp("<", a, 2.0 ** -1022)
    an = m.sel(sub, m.mul(a, 2.0 ** 64), a)
    e = m.exponent(m.mul(an, 1.0 / 0.75))
    mant = m.from_bits(b.sub(m.bits(an), b.shl(e, ir.Constant(I64, 52))))  # in [0.75, 1.5)
    e = b.add(e, b.select(sub, ir.Constant(I64, -64), ir.Constant(I64, 0)))
    ef = b.sitofp(e, F64)
    x = m.dd_div((m.sub(mant, 1.0), m.c(0.0)), m.two_sum(m.c(1.0), mant))
    x2 = m.dd_mul(x, x)
    t = m.horner(x2[0], _LOGK)
    s = m.dd_mul_d((m.c(_LN2_DD[0]), m.c(_LN2_DD[1])), ef)
    s = m.dd_add(s, (m.mul(x[0], 2.0), m.mul(x[1], 2.0)))
    tail = m.dd_add(m.dd_mul_d(x2, t), (m.c(_TWO_THIRDS_DD[0]), m.c(_TWO_THIRDS_DD[1])))
    return m.dd_add(s, m.dd_mul(m.dd_mul(x2, x), tail))


def _is_int(m: _Math, y: ir.Value) -> ir.Value:
    return m.cmp("==", m.rint(y), y)


def _pow(m: _Math, x: ir.Value, y: ir.Value) -> ir.Value:
    a = m.fabs(x)
    if m.f64:
        normal = m.b.and_(m.isfinite(a), m.cmp(">", a, 0.0))
        lhi, llo = _log_dd(m, m.sel(normal, a, 1.0))
        thi, tlo = m.two_prod(y, lhi)
        tlo = m.add(tlo, m.mul(y, llo))
        spec = m.mul(y, m.sel(m.cmp("==", a, 0.0), float("-inf"), a))  # a in {0, inf, nan}
        thi = m.sel(normal, thi, spec)
        tlo = m.sel(m.b.and_(normal, m.isfinite(thi)), tlo, 0.0)
        mag = _exp_core(m, thi, tlo)
        return _pow_specials(m, x, y, mag)
    # f32: y log|x| and its exp in f64 carry enough bits for a correctly rounded-ish result.
    xd, yd = m.b.fpext(x, F64), m.b.fpext(y, F64)
    md = _Math(m.b, F64)
    lg = m.b.call(get_function(m.b.module, "log", F64), [md.fabs(xd)])
    mag = m.b.call(get_function(m.b.module, "exp", F64), [md.mul(yd, lg)])
    return m.b.fptrunc(_pow_specials(md, xd, yd, mag), F32)


def _pow_specials(m: _Math, x: ir.Value, y: ir.Value, mag: ir.Value) -> ir.Value:
    """C99 Annex F pow from mag = exp(y log|x|) (already right for |x| in {0, inf}, |y| inf)."""
    b = m.b
    y_int = _is_int(m, y)
    half = m.mul(y, 0.5)
    y_odd = b.and_(y_int, b.not_(_is_int(m, half)))
    x_neg = b.icmp_signed("<", m.bits(x), ir.Constant(m.bits(x).type, 0))  # sign bit
    res = m.sel(b.and_(x_neg, y_odd), m.neg(mag), mag)
    # negative finite x to a finite non-integer power: NaN
    bad = b.and_(b.and_(m.cmp("<", x, 0.0), m.isfinite(x)),
                 b.and_(b.not_(y_int), m.isfinite(y)))
    res = m.sel(bad, float("nan"), res)
    res = m.sel(b.and_(m.cmp("==", x, -1.0), m.cmp("==", m.fabs(y), float("inf"))), 1.0, res)
    one = b.or_(m.cmp("==", y, 0.0), m.cmp("==", x, 1.0))
    return m.sel(one, 1.0, res)


# ---- tan --------------------------------------------------------------------------------

# fdlibm k_tan.c: tan(y) = y + y^3 (T0 + y^2 T1 + ...) on [-0.6744, 0.6744] (odd and even
# coefficients in two chains); pi/4 split hi/lo.
_T = (3.33333333333334091986e-01, 1.33333333333201242699e-01, 5.39682539762260521377e-02,
      2.18694882948595424599e-02, 8.86323982359930005737e-03, 3.59207910759131235356e-03,
      1.45620945432529025516e-03, 5.88041240820264096874e-04, 2.46463134818469906812e-04,
      7.81794442939557092300e-05, 7.14072491382608190305e-05, -1.85586374855275456654e-05,
      2.59073051863633712884e-05)
_PIO4_LO = 3.06161699786838301793e-17


def _tan(m: _Math, x: ir.Value) -> ir.Value:
    """sin/cos's reduction (f64), then fdlibm's ``__kernel_tan(y, odd)`` with its cases
    selected: above |y| = 0.6744 the argument is ``pi/4 - |y|`` and ``tan(y) = 1 - 2
    (t - t^2 / (1 + t))`` (``-1/tan`` in odd quadrants, with -1); below, ``t = y + r``,
    or in odd quadrants ``-1 / t`` computed with a split divisor (one extra Newton step
    in double-double)."""
    if not m.f64:
        return _via_f64(m, "tan", x)
    b = m.b
    finite = m.isfinite(x)
    xs = m.sel(finite, x, 0.0)
    q, rhi, rlo = _reduce_pio2(m, xs)
    y, yl = m.dd_mul((rhi, rlo), (m.c(_PIO2_HI), m.c(_PIO2_LO)))
    odd = b.trunc(b.fptosi(q, I64), I1)
    big = m.cmp(">=", m.fabs(y), 0.6744)
    neg = m.cmp("<", y, 0.0)
    ya, yla = m.sel(neg, m.neg(y), y), m.sel(neg, m.neg(yl), yl)
    y = m.sel(big, m.add(m.sub(_PIO4_HI, ya), m.sub(_PIO4_LO, yla)), y)
    yl = m.sel(big, 0.0, yl)
    z = m.mul(y, y)
    w = m.mul(z, z)
    r = m.horner(w, _T[11:0:-2])
    v = m.mul(z, m.horner(w, _T[12:1:-2]))
    s3 = m.mul(z, y)
    r = m.add(m.add(yl, m.mul(z, m.add(m.mul(s3, m.add(r, v)), yl))), m.mul(s3, _T[0]))
    t = m.add(y, r)
    # |y| >= 0.6744: (sign y) (v - 2 (y - (t^2 / (t + v) - r))), v = 1 or -1 (odd)
    vv = m.sel(odd, -1.0, 1.0)
    res_big = m.sub(vv, m.mul(m.sub(y, m.sub(m.div(m.mul(t, t), m.add(t, vv)), r)), 2.0))
    res_big = m.sel(neg, m.neg(res_big), res_big)
    # odd quadrant, small |y|: -1 / t, t = y + r, with t's high half split off
    th = m.from_bits(b.and_(m.bits(t), ir.Constant(I64, -(1 << 32))))
    tv = m.sub(r, m.sub(th, y))
    a = m.div(-1.0, t)
    ah = m.from_bits(b.and_(m.bits(a), ir.Constant(I64, -(1 << 32))))
    sq = m.add(1.0, m.mul(ah, th))
    res_cot = m.add(ah, m.mul(a, m.add(sq, m.mul(ah, tv))))
    out = m.sel(big, res_big, b.select(odd, res_cot, t))
    out = m.sel(m.cmp("<", m.fabs(x), 2.0 ** -27), x, out)  # tan x = x (keeps -0.0)
    return m.sel(finite, out, float("nan"))


def _via_f64(m: _Math, name: str, *xs: ir.Value) -> ir.Value:
    """An f32 function as the f64 one rounded once: within 0.5 ulp of f32 plus the f64
    error scaled by 2^-29 (the vector loops run half as wide; these are not hot paths)."""
    wide = [m.b.fpext(x, F64) for x in xs]
    return m.b.fptrunc(m.b.call(get_function(m.b.module, name, F64), wide), F32)


# ---- atan, atan2, asin, acos ----------------------------------------------------------

# fdlibm s_atan.c: atan(c) hi/lo for c = 0.5, 1, 1.5, inf, and the odd polynomial aT.
_ATAN_HI = (4.63647609000806093515e-01, 7.85398163397448278999e-01,
            9.82793723247329054082e-01, 1.57079632679489655800e+00)
_ATAN_LO = (2.26987774529616870924e-17, 3.06161699786838301793e-17,
            1.39033110312309984516e-17, 6.12323399573676603587e-17)
_AT = (3.33333333333329318027e-01, -1.99999999998764832476e-01, 1.42857142725034663711e-01,
       -1.11111104054623557880e-01, 9.09088713343650656196e-02, -7.69187620504482999495e-02,
       6.66107313738753120669e-02, -5.83357013379057348645e-02, 4.97687799461593236017e-02,
       -3.65315727442169155270e-02, 1.62858201153657823623e-02)
_PI_HI, _PI_LO = 3.14159265358979311600e+00, 1.2246467991473531772e-16


def _atan_abs(m: _Math, a: ir.Value) -> ir.Value:
    """atan(a) for a >= 0 (or NaN), f64: fdlibm's ``atan`` with its five ranges selected.

    ``atan(a) = atan(c) + atan(t)``, ``t = (a - c) / (1 + a c)`` for c = 0.5, 1, 1.5, inf
    (``t = -1/a``), or t = a below 7/16: one division with its operands selected; an odd
    polynomial in t; atan(c)'s low part added with the small terms, before the high part.
    """
    b = m.b
    r0, r1, r2, r3 = (m.cmp(">=", a, v) for v in (0.4375, 0.6875, 1.1875, 2.4375))
    num = m.sel(r3, -1.0, m.sel(r2, m.sub(a, 1.5), m.sel(r1, m.sub(a, 1.0),
                m.sel(r0, m.sub(m.add(a, a), 1.0), a))))
    den = m.sel(r3, a, m.sel(r2, m.add(m.mul(a, 1.5), 1.0), m.sel(r1, m.add(a, 1.0),
                m.sel(r0, m.add(a, 2.0), 1.0))))
    t = m.div(num, den)
    hi = m.sel(r3, _ATAN_HI[3], m.sel(r2, _ATAN_HI[2], m.sel(r1, _ATAN_HI[1], _ATAN_HI[0])))
    lo = m.sel(r3, _ATAN_LO[3], m.sel(r2, _ATAN_LO[2], m.sel(r1, _ATAN_LO[1], _ATAN_LO[0])))
    z = m.mul(t, t)
    w = m.mul(z, z)
    s1 = m.mul(z, m.horner(w, _AT[10::-2]))
    s2 = m.mul(w, m.horner(w, _AT[9::-2]))
    ts = m.mul(t, m.add(s1, s2))
    small = m.sub(t, ts)
    large = m.sub(hi, m.sub(m.sub(ts, lo), t))
    return b.select(r0, large, small)  # NaN: `small`, NaN


def _atan(m: _Math, x: ir.Value) -> ir.Value:
    if not m.f64:
        return _via_f64(m, "atan", x)
    return m.copysign(_atan_abs(m, m.fabs(x)), x)  # atan(-0.0) = -0.0


def _atan2_f64(m: _Math, y: ir.Value, x: ir.Value) -> ir.Value:
    """C's atan2: ``t = min(|y|, |x|) / max(|y|, |x|)`` (0 for two zeros, 1 for two
    infinities), ``r = atan(t)``, then ``pi/2 - r`` where |y| > |x|, ``pi - r`` where x's
    sign bit is set (x = -0.0 included), ``pi/2 + r`` where both, each as ``hi + (lo +-
    r)`` (the constant's low part added first), the sign of y copied (signed zeros kept).
    """
    b = m.b
    ay, ax = m.fabs(y), m.fabs(x)
    swap = m.cmp(">", ay, ax)
    num, den = m.sel(swap, ax, ay), m.sel(swap, ay, ax)
    t = m.div(num, den)
    t = m.sel(m.cmp("==", den, 0.0), 0.0, t)
    inf = float("inf")
    t = m.sel(b.and_(m.cmp("==", num, inf), m.cmp("==", den, inf)), 1.0, t)
    r = _atan_abs(m, t)
    # hi + (lo +- r): 0 + r; pi - r (x < 0); pi/2 - r (swapped); pi/2 + r (both)
    x_neg = b.icmp_signed("<", m.bits(x), ir.Constant(I64, 0))
    hi = m.sel(swap, _PIO2_HI, m.sel(x_neg, _PI_HI, 0.0))
    lo = m.sel(swap, _PIO2_LO, m.sel(x_neg, _PI_LO, 0.0))
    r = m.add(hi, m.add(lo, m.sel(b.xor(swap, x_neg), m.neg(r), r)))
    r = m.copysign(r, y)
    return m.sel(b.or_(m.isnan(x), m.isnan(y)), m.add(x, y), r)


def _atan2(m: _Math, y: ir.Value, x: ir.Value) -> ir.Value:
    return _atan2_f64(m, y, x) if m.f64 else _via_f64(m, "atan2", y, x)


# fdlibm e_asin.c / e_acos.c: asin(x) = x + x^3 R(x^2) on [0, 0.5], R = pS/qS.
_PS = (1.66666666666666657415e-01, -3.25565818622400915405e-01, 2.01212532134862925881e-01,
       -4.00555345006794114027e-02, 7.91534994289814532176e-04, 3.47933107596021167570e-05)
_QS = (1.0, -2.40339491173441421878e+00, 2.02094576023350569471e+00,
       -6.88283971605453293030e-01, 7.70381505559019352791e-02)
_PIO4_HI = 7.85398163397448278999e-01


def _asin_parts(m: _Math, x: ir.Value) -> tuple[ir.Value, ...]:
    """What fdlibm's asin and acos share (f64): a = |x|; ``z = x^2`` below 0.5, else
    ``z = (1 - a) / 2`` (exact), ``r = z R(z)`` (one rational, its argument selected),
    ``s = sqrt(z)``, ``f`` = s with its low 32 bits cleared and ``c = (z - f^2) / (s +
    f)``, so that ``f + c = sqrt(z)`` to twice the precision (0 where z = 0)."""
    b = m.b
    a = m.fabs(x)
    small = m.cmp("<", a, 0.5)
    z = m.sel(small, m.mul(x, x), m.mul(m.sub(1.0, a), 0.5))
    r = m.div(m.mul(z, m.horner(z, _PS[::-1])), m.horner(z, _QS[::-1]))
    s = m.sqrt(z)
    f = m.from_bits(b.and_(m.bits(s), ir.Constant(I64, -(1 << 32))))
    d = m.add(s, f)
    c = m.sel(m.cmp("==", d, 0.0), 0.0, m.div(m.sub(z, m.mul(f, f)), d))
    return a, small, r, s, f, c


def _asin(m: _Math, x: ir.Value) -> ir.Value:
    """fdlibm's asin, its ranges selected: ``x + x r`` below 0.5 (one FMA);
    ``pi/2 - 2 (s + s r)`` above 0.975; between, ``pi/4 - ((2 s r - (pio2_lo - 2 c)) -
    (pi/4 - 2 f))``; the sign copied (asin(-0.0) = -0.0); NaN beyond |x| = 1 (sqrt)."""
    if not m.f64:
        return _via_f64(m, "asin", x)
    a, small, r, s, f, c = _asin_parts(m, x)
    near1 = m.sub(_PIO2_HI, m.sub(m.mul(m.add(s, m.mul(s, r)), 2.0), _PIO2_LO))
    p = m.sub(m.mul(m.mul(s, 2.0), r), m.sub(_PIO2_LO, m.mul(c, 2.0)))
    q = m.sub(_PIO4_HI, m.mul(f, 2.0))
    mid = m.sub(_PIO4_HI, m.sub(p, q))
    big = m.copysign(m.sel(m.cmp(">=", a, 0.975), near1, mid), x)
    return m.sel(small, m.fma(x, r, x), big)  # NaN, |x| > 1: `big`, NaN


def _acos(m: _Math, x: ir.Value) -> ir.Value:
    """fdlibm's acos, its ranges selected: ``pi/2 - (x - (pio2_lo - x r))`` below 0.5,
    ``pi - 2 (s + (r s - pio2_lo))`` below -0.5, ``2 (f + (r s + c))`` above 0.5; 0 at 1,
    pi at -1, NaN beyond |x| = 1 (sqrt) and for NaN."""
    if not m.f64:
        return _via_f64(m, "acos", x)
    a, small, r, s, f, c = _asin_parts(m, x)
    res_small = m.sub(_PIO2_HI, m.sub(x, m.sub(_PIO2_LO, m.mul(x, r))))
    rs = m.mul(r, s)
    res_neg = m.sub(_PI_HI, m.mul(m.add(s, m.sub(rs, _PIO2_LO)), 2.0))
    res_pos = m.mul(m.add(f, m.add(rs, c)), 2.0)
    big = m.sel(m.cmp("<", x, 0.0), res_neg, res_pos)
    return m.sel(small, res_small, big)


# ---- erf, erfc --------------------------------------------------------------------------

# fdlibm s_erf.c: rational approximations on [0, 0.84375] (pp/qq), [0.84375, 1.25]
# (pa/qa, around erx), [1.25, 1/0.35] (ra/sa) and [1/0.35, 28] (rb/sb, in 1/x^2).
_ERX = 8.45062911510467529297e-01
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02,
       5.08130628187576562776e-03, 1.32494738004321644526e-04, -3.96022827877536812320e-06)
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01,
       7.18286544141962662868e-02, 1.26171219808761642112e-01, 1.36370839120290507362e-02,
       1.19844998467991074170e-02)
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02,
       4.34565877475229228821e+02, 6.45387271733267880336e+02, 4.29008140027567833386e+02,
       1.08635005541779435134e+02, 6.57024977031928170135e+00, -6.04244152148580987438e-02)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02,
       1.53672958608443695994e+03, 3.19985821950859553908e+03, 2.55305040643316442583e+03,
       4.74528541206955367215e+02, -2.24409524465858183362e+01)


def _erf_parts(m: _Math, x: ir.Value) -> tuple[ir.Value, ...]:
    """The pieces erf and erfc share (f64): a = |x|, y = R/S on [0, 0.84375], P/Q on
    [0.84375, 1.25], and the tail ``r = x erfc(x)`` for a >= 1.25, its exponential
    ``e^(-z^2 - 0.5625) e^((z - a)(z + a) + R/S)`` taken as one exp of a double-double
    argument (z is a with its low 32 bits cleared, so -z^2 - 0.5625 is exact)."""
    b = m.b
    a = m.fabs(x)
    z = m.mul(x, x)
    y = m.div(m.horner(z, _PP[::-1]), m.horner(z, _QQ[::-1]))
    s = m.sub(a, 1.0)
    pq = m.div(m.horner(s, _PA[::-1]), m.horner(s, _QA[::-1]))
    ac = m.sel(m.cmp("<", a, 28.0), a, 28.0)  # (NaN, inf: 28; fixed by the callers)
    ac = m.sel(m.cmp(">", ac, 1.0), ac, 1.0)
    s2 = m.div(1.0, m.mul(ac, ac))
    near = m.cmp("<", ac, 1.0 / 0.35)
    rs = m.sel(near, m.div(m.horner(s2, _RA[::-1]), m.horner(s2, _SA[::-1])),
               m.div(m.horner(s2, _RB[::-1]), m.horner(s2, _SB[::-1])))
    zz = m.from_bits(b.and_(m.bits(ac), ir.Constant(I64, -(1 << 32))))
    e_hi = m.sub(m.neg(m.mul(zz, zz)), 0.5625)  # exact
    e_lo = m.add(m.mul(m.sub(zz, ac), m.add(zz, ac)), rs)
    hi, lo = m.two_sum(e_hi, e_lo)
    tail = m.div(_exp_core(m, hi, lo), ac)
    return a, y, pq, tail


def _erf(m: _Math, x: ir.Value) -> ir.Value:
    """fdlibm's erf, every range computed and one selected: ``x + x y`` below 0.84375
    (one FMA: tiny and subnormal x round once), ``erx + P/Q`` to 1.25, ``1 - tail``
    above, 1 from 6 on; the sign copied from x (erf(-0.0) = -0.0)."""
    if not m.f64:
        return _via_f64(m, "erf", x)
    a, y, pq, tail = _erf_parts(m, x)
    res = m.sel(m.cmp("<", a, 1.25), m.add(_ERX, pq), m.sub(1.0, tail))
    res = m.sel(m.cmp(">=", a, 6.0), 1.0, res)
    res = m.copysign(res, x)
    res = m.sel(m.cmp("<", a, 0.84375), m.fma(x, y, x), res)
    return m.sel(m.isnan(x), x, res)


def _erfc(m: _Math, x: ir.Value) -> ir.Value:
    """fdlibm's erfc, branch-free: ``1 - (x + x y)`` below 1/4, ``(1 - x) - x y`` (in
    double-double) to 0.84375, ``(1 - erx) - P/Q`` or ``1 + (erx + P/Q)`` to 1.25, ``tail / a``
    (x > 0) or ``2 - tail / a`` beyond: accurate in the tail down to the underflow
    (0 from x = 27.3 on; 2 below -6)."""
    if not m.f64:
        return _via_f64(m, "erfc", x)
    a, y, pq, tail = _erf_parts(m, x)
    # [1/4, 0.84375): (1 - x) - x y summed as a double-double (the result is 0.24 .. 0.72
    # of 1 - x: fdlibm's 0.5 - (x y + (x - 0.5)) loses up to 1.3 ulp there)
    h, hl = m.two_sum(m.c(1.0), m.neg(x))
    p, pe = m.two_prod(x, y)
    sh, sl = m.two_sum(h, m.neg(p))
    mid_small = m.add(sh, m.sub(m.add(sl, hl), pe))
    small = m.sel(m.cmp("<", x, 0.25), m.sub(1.0, m.fma(x, y, x)), mid_small)
    pos = m.cmp(">", x, 0.0)
    mid = m.sel(pos, m.sub(1.0 - _ERX, pq), m.add(1.0, m.add(_ERX, pq)))
    far = m.sel(pos, tail, m.sub(2.0, tail))
    far = m.sel(m.cmp(">=", a, 28.0), m.sel(pos, 0.0, 2.0), far)
    far = m.sel(m.b.and_(m.b.not_(pos), m.cmp(">=", a, 6.0)), 2.0, far)
    res = m.sel(m.cmp("<", a, 0.84375), small, m.sel(m.cmp("<", a, 1.25), mid, far))
    return m.sel(m.isnan(x), x, res)


# ---- intrinsic-backed ------------------------------------------------------------------

def _sqrt(m: _Math, x: ir.Value) -> ir.Value:
    return m.sqrt(x)


def _rsqrt(m: _Math, x: ir.Value) -> ir.Value:
    return m.div(1.0, m.sqrt(x))


def _floor(m: _Math, x: ir.Value) -> ir.Value:
    return m.floor(x)


_BODIES: dict[str, Body] = {
    "exp": _exp, "log": _log, "log1p": _log1p, "expm1": _expm1, "softplus": _softplus,
    "tanh": _tanh, "sigmoid": _sigmoid,
    "sin": _sin, "cos": _cos, "sqrt": _sqrt, "rsqrt": _rsqrt, "floor": _floor, "pow": _pow,
    "tan": _tan, "atan": _atan, "asin": _asin, "acos": _acos, "atan2": _atan2, "erf": _erf,
    "erfc": _erfc,
}
