"""Random ops as one generated CUDA kernel each, bit for bit ``tfc.ops.random``.

``random.uniform``, ``random.uniform_like``, ``random.normal``,
``random.truncated_normal`` and ``random.uniform_int`` draw from Philox4x32-10 with the
counter scheme of ``tfc.ops.random`` (its module docstring is the specification; the
constants are imported from there, not retyped). Each thread computes whole Philox
blocks, grid-stride: block ``b`` holds words ``W[4b..4b+3]``, which are the words of
elements ``E*b .. E*b+E-1`` with ``E`` = 4 where an element takes one word (uniform
floats of up to 24 bits, and the f16/f32 normals, whose pair ``p`` takes words ``2p``
and ``2p+1``) and 2 where it takes two (53-bit uniforms, the f64 normal's pair, 64-bit
integers). So one launch replaces the sampler's dozens of array calls.

The float math is the reference's sequence of f64 ``+ - * /`` and ``sqrt`` (each
correctly rounded on both compilers: NVRTC gets ``--fmad=false``, the emulator's g++
``-ffp-contract=off``), ``frexp`` as bit manipulation (exact for the positive normal
values ``plog`` sees), powers of two as exact multiplications, constants as exact
hexadecimal literals: the same bits as numpy's. The seed and the op's parameters are
literals; the element count and the step are the kernel's two ``long long`` parameters
(``n``, ``step``: the step's 64 bits), after the output pointer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfc.backends.cuda.kernel import Kernel, Launch, Param, Unsupported
from tfc.ir.core import Op
from tfc.ir.types import DType
from tfc.ops.random import (COS_COEFFS, ERF_SQRT2, ERFINV_COEFFS, LN2_HI, LN2_LO,
                            LOG_COEFFS, PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS, PHILOX_W0,
                            PHILOX_W1, PI_2, SIN_COEFFS, SQRT2, SQRT_HALF, _to_dtype)

KINDS = ("random.uniform", "random.uniform_like", "random.normal",
         "random.truncated_normal", "random.uniform_int")
BLOCK = 256
_STORE = {DType.f16: "tfc_f16", DType.f32: "float", DType.f64: "double",
          DType.i32: "int32_t", DType.i64: "int64_t"}
_UNIFORM_BITS = {DType.f16: 11, DType.f32: 24, DType.f64: 53}


def _d(x: float) -> str:
    """An exact C double literal."""
    x = float(x)
    if x != x or x in (float("inf"), float("-inf")):
        raise Unsupported(f"random: parameter {x} is not finite")
    return f"({x.hex()})" if x else "0.0"


def _horner(name: str, coeffs: tuple[float, ...]) -> str:
    steps = "".join(f"  p = {_d(c)} + p * x;\n" for c in coeffs[1:])
    return (f"__device__ __forceinline__ double {name}(double x) {{\n"
            f"  double p = {_d(coeffs[0])};\n{steps}  return p;\n}}\n")


def helpers() -> str:
    """Philox and the reference's libm-free math, defined once per kernel file (a guard:
    every random kernel carries the text, the first one defines it)."""
    return f"""#ifndef TFC_RANDOM_HELPERS
#define TFC_RANDOM_HELPERS
__device__ __forceinline__ void tfc_philox(unsigned long long block, unsigned long long step,
                                           unsigned int k0, unsigned int k1,
                                           unsigned int w[4]) {{
  unsigned int c0 = (unsigned int)block, c1 = (unsigned int)(block >> 32);
  unsigned int c2 = (unsigned int)step, c3 = (unsigned int)(step >> 32);
  for (int r = 0; r < {PHILOX_ROUNDS}; ++r) {{
    if (r) {{ k0 += {PHILOX_W0:#x}u; k1 += {PHILOX_W1:#x}u; }}
    unsigned long long p0 = (unsigned long long)c0 * {PHILOX_M0:#x}ull;
    unsigned long long p1 = (unsigned long long)c2 * {PHILOX_M1:#x}ull;
    unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;
    unsigned int n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0; c1 = (unsigned int)p1; c2 = n2; c3 = (unsigned int)p0;
  }}
  w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}}
__device__ __forceinline__ unsigned long long tfc_word64(unsigned int lo, unsigned int hi) {{
  return ((unsigned long long)hi << 32) | lo;
}}
{_horner("tfc_horner_log", LOG_COEFFS)}{_horner("tfc_horner_sin", SIN_COEFFS)}\
{_horner("tfc_horner_cos", COS_COEFFS)}{_horner("tfc_horner_erfinv", ERFINV_COEFFS)}
__device__ __forceinline__ double tfc_plog(double x) {{
  long long bits = __double_as_longlong(x);
  long long e = ((bits >> 52) & 0x7ff) - 1022;
  double m = __longlong_as_double((bits & 0x800fffffffffffffLL) | 0x3fe0000000000000LL);
  if (m < {_d(SQRT_HALF)}) {{ m = m * 2.0; e = e - 1; }}
  double ef = (double)e;
  double s = (m - 1.0) / (m + 1.0);
  double z = s * s;
  double t = s + s;
  double log_m = t + t * (z * tfc_horner_log(z));
  return ef * {_d(LN2_HI)} + (ef * {_d(LN2_LO)} + log_m);
}}
__device__ __forceinline__ double tfc_perfinv(double v) {{
  double w = -tfc_plog((1.0 - v) * (1.0 + v)) - 3.125;
  return tfc_horner_erfinv(w) * v;
}}
#endif
"""


def _to_store(dtype: DType, x: str) -> str:
    """C for the f64 value ``x`` rounded to ``dtype``'s storage (f16 through f32)."""
    if dtype == DType.f16:
        return f"tfc_f2h((float)({x}))"
    if dtype == DType.f32:
        return f"(float)({x})"
    return f"({x})"


def _uniform_m(bits: int, word: str) -> str:
    """The ``bits``-bit uniform integer (as unsigned long long) from one word or a
    64-bit word."""
    if bits <= 32:
        return f"((unsigned long long)({word}) >> {32 - bits})"
    return f"(({word}) >> {64 - bits})"


def _uniform(dtype: DType, attrs: Any) -> tuple[int, str]:
    """Elements per Philox block and the body writing element ``j`` from words."""
    bits = _UNIFORM_BITS[dtype]
    lo, hi = float(attrs.get("minval", 0.0)), float(attrs.get("maxval", 1.0))
    top = _to_dtype(np.array([hi], np.float64), dtype)
    top = np.nextafter(top, np.array([-np.inf], dtype=top.dtype))[0]
    per = 4 if bits <= 32 else 2
    word = "w[e]" if per == 4 else "tfc_word64(w[2 * e], w[2 * e + 1])"
    x = f"(double){_uniform_m(bits, word)} * {_d(2.0 ** -bits)} * {_d(hi - lo)} + {_d(lo)}"
    if dtype == DType.f16:
        top_bits = int(np.array(top, np.float16).view(np.uint16))
        clamp = (f"tfc_f16 y = {_to_store(dtype, x)};\n"
                 f"      if (tfc_h2f(y) > tfc_h2f((tfc_f16){top_bits})) y = (tfc_f16){top_bits};")
    else:
        c = _store_type(dtype)
        lit = f"(float){_d(float(top))}" if dtype == DType.f32 else _d(float(top))
        clamp = f"{c} y = {_to_store(dtype, x)};\n      if (y > {lit}) y = {lit};"
    return per, f"{clamp}\n      out[j] = y;"


def _store_type(dtype: DType) -> str:
    return _STORE[dtype]


def _normal(dtype: DType, attrs: Any) -> tuple[int, str]:
    bits = 53 if dtype == DType.f64 else 24
    mean, std = float(attrs.get("mean", 0.0)), float(attrs.get("stddev", 1.0))
    if bits == 53:  # one pair per block: uniforms (words 0,1) and (2,3)
        per, pairs = 2, [("tfc_word64(w[0], w[1])", "tfc_word64(w[2], w[3])")]
    else:  # two pairs per block: words (0, 1) and (2, 3)
        per, pairs = 4, [("w[0]", "w[1]"), ("w[2]", "w[3]")]
    body = []
    for q, (w1, w2) in enumerate(pairs):
        m1, m2 = _uniform_m(bits, w1), _uniform_m(bits, w2)
        body.append(f"""{{
      long long j0 = base + {2 * q};
      double u1 = (double)({m1} + 1ull) * {_d(2.0 ** -bits)};
      double r = sqrt(-2.0 * tfc_plog(u1));
      long long m2 = (long long){m2};
      long long k = (m2 + {1 << (bits - 3)}LL) >> {bits - 2};
      double a = (double)(m2 - (k << {bits - 2})) * {_d(2.0 ** (2 - bits))} * {_d(PI_2)};
      double z = a * a;
      double S = a + a * (z * tfc_horner_sin(z));
      double C = 1.0 + z * tfc_horner_cos(z);
      long long q = k & 3;
      double cs = q == 0 ? C : q == 1 ? -S : q == 2 ? -C : S;
      double sn = q == 0 ? S : q == 1 ? C : q == 2 ? -S : -C;
      if (j0 < n) out[j0] = {_to_store(dtype, f"r * cs * {_d(std)} + {_d(mean)}")};
      if (j0 + 1 < n) out[j0 + 1] = {_to_store(dtype, f"r * sn * {_d(std)} + {_d(mean)}")};
    }}""")
    return per, "\n    ".join(body)


def _truncated(dtype: DType, attrs: Any) -> tuple[int, str]:
    bits = 53 if dtype == DType.f64 else 24
    mean, std = float(attrs.get("mean", 0.0)), float(attrs.get("stddev", 1.0))
    per = 2 if bits == 53 else 4
    word = "w[e]" if per == 4 else "tfc_word64(w[2 * e], w[2 * e + 1])"
    return per, f"""long long m = (long long){_uniform_m(bits, word)};
      double v = (double)(2 * m + 1 - {1 << bits}LL) * {_d(2.0 ** -bits)} * {_d(ERF_SQRT2)};
      double z = tfc_perfinv(v) * {_d(SQRT2)};
      z = z < -2.0 ? -2.0 : z > 2.0 ? 2.0 : z;
      out[j] = {_to_store(dtype, f"z * {_d(std)} + {_d(mean)}")};"""


def _uniform_int(dtype: DType, attrs: Any) -> tuple[int, str]:
    lo, hi = int(attrs["minval"]), int(attrs["maxval"])
    span, base = (hi - lo) % (1 << 64), lo % (1 << 64)
    return 2, f"""unsigned long long wd = tfc_word64(w[2 * e], w[2 * e + 1]);
      unsigned long long y = __umul64hi(wd, {span}ull) + {base}ull;
      out[j] = ({_STORE[dtype]})(long long)y;"""


def random_kernel(op: Op, name: str) -> Kernel:
    """The kernel drawing random op ``op``'s values, named ``name``: parameters
    ``(T* out, long long n, long long step)``; ``Unsupported`` for other ops."""
    if op.kind not in KINDS:
        raise Unsupported(f"'{op.kind}' is not a random op with a kernel")
    attrs = op.attrs
    dtype: DType = attrs["dtype"]
    if dtype not in _STORE:
        raise Unsupported(f"{op.kind}: dtype {dtype.value}")
    if op.kind in ("random.uniform", "random.uniform_like"):
        per, body = _uniform(dtype, attrs)
    elif op.kind == "random.normal":
        per, body = _normal(dtype, attrs)
    elif op.kind == "random.truncated_normal":
        per, body = _truncated(dtype, attrs)
    else:
        per, body = _uniform_int(dtype, attrs)
    seed = int(attrs["seed"]) % (1 << 64)
    if op.kind == "random.normal":
        loop = f"long long base = (long long)b * {per};\n    {body}"
    else:
        loop = (f"for (int e = 0; e < {per}; ++e) {{\n      long long j = (long long)b * {per}"
                f" + e;\n      if (j >= n) break;\n      {body}\n    }}")
    source = f"""{helpers()}
extern "C" __global__ void {name}({_STORE[dtype]}* __restrict__ out, long long n,
                                  long long step) {{
  long long blocks = (n + {per - 1}) / {per};
  for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < blocks;
       b += (long long)gridDim.x * blockDim.x) {{
    unsigned int w[4];
    tfc_philox((unsigned long long)b, (unsigned long long)step, {seed & 0xFFFFFFFF}u,
               {seed >> 32}u, w);
    {loop}
  }}
}}"""
    params = (Param("out", f"{_STORE[dtype]}*"), Param("n", "long long"),
              Param("step", "long long"))
    # one thread per Philox block: ``per`` elements (the grid is what the binding's
    # element count needs; the runtime computes it from ``n``)
    return Kernel(name, source, params, Launch(("n",), BLOCK, BLOCK * per))


def launch_args(out: Any, n: int, step: int) -> tuple[Any, np.int64, np.int64]:
    """The arguments of a random kernel for ``n`` elements at ``step`` (its 64 bits as
    a ``long long``)."""
    s = int(step) % (1 << 64)
    return out, np.int64(n), np.int64(s - (1 << 64) if s >= 1 << 63 else s)


__all__ = ["KINDS", "launch_args", "random_kernel"]
