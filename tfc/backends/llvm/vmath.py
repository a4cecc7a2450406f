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
    ======== ======== ====== ======

sqrt, rsqrt and floor are bit-exact (IEEE operations; rsqrt is ``1 / sqrt(x)``, two
roundings, as the reference computes it). (sigmoid f16 in ``elementwise``: the reference
rounds each step to f16; ``elementwise`` does the same, with this exp.)

Special values match numpy: nan in -> nan out; exp(+-inf) = inf/0, overflow -> inf,
underflow -> subnormals then +0; log(0) = log(-0.0) = -inf, log(x<0) = nan, log(inf) = inf;
tanh(+-inf) = +-1; sin/cos(+-inf) = nan; odd functions keep -0.0 (sin, tanh, log1p, expm1);
expm1(inf) = inf, expm1(-inf) = -1, overflow -> inf;
pow follows C99 Annex F (as numpy's pow does).

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
#: f32/f64: the measured max plus 0.01-0.03, room for another glibc's long double
#: functions in the oracle; log1p, expm1 and softplus f32: the max over sweeps of every
#: 127th and 509th f32 bit pattern, whose worst inputs the test samples). The tests hold
#: every function to it, and to its being tight.
MAX_ULP: dict[str, tuple[float, float, float]] = {
    "exp": (0.5001, 1.0, 0.88), "log": (0.5001, 0.81, 0.81), "log1p": (0.5001, 2.38, 2.1),
    "tanh": (0.5001, 1.49, 1.3), "sigmoid": (0.5001, 2.27, 2.09), "sin": (0.5001, 0.51, 0.78),
    "cos": (0.5001, 0.51, 0.77), "pow": (0.5001, 0.5001, 0.87),
    "expm1": (0.5001, 0.8, 0.83), "softplus": (0.5001, 2.76, 2.62),
}

#: name -> number of arguments, for the functions ``emit_math`` knows.
FUNCTIONS: dict[str, int] = {
    "exp": 1, "log": 1, "log1p": 1, "expm1": 1, "softplus": 1, "tanh": 1, "sigmoid": 1,
    "sin": 1, "cos": 1, "sqrt": 1, "rsqrt": 1, "floor": 1, "pow": 2,
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
    # fdlibm __kernel_sin(x, y, 1) and __kernel_cos(x, y)
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
    out = _quadrant(m, q, ksin, kcos, want_sin)
    # Tiny |x|: sin x = x, cos x = 1 (correctly rounded; keeps -0.0 and subnormals exact).
    tiny = m.cmp("<", m.fabs(x), 2.0 ** -27)
    out = m.sel(tiny, x if want_sin else m.c(1.0), out)
    return m.sel(finite, out, float("nan"))


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
}
