"""Random ops: counter-based, deterministic, and reproducible bit-exactly by every backend.

Every random op is a pure function of ``(seed, step, element index)``: there is no hidden
generator state, so the reference interpreter, the LLVM backend and the CUDA backend all
draw the same numbers, each element can be computed independently (in parallel), and a
training step that is re-run (after a restore, on a backup worker) draws the same numbers
again. Two ops with the same ``seed`` draw the same numbers; frontends give each random op
its own seed (TensorFlow's op-level seed). Shapes are static (ints) for now.

The algorithm, exactly (backends import the constants below rather than retyping them):

1. **Philox4x32-10** (Salmon et al., SC'11; Random123). State: counter ``(c0, c1, c2, c3)``
   and key ``(k0, k1)``, 32-bit words. One round, with ``mulhilo(a, b)`` the high and low
   32-bit halves of the 64-bit product::

       hi0, lo0 = mulhilo(0xD2511F53, c0);  hi1, lo1 = mulhilo(0xCD9E8D57, c2)
       (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)

   Ten rounds; between rounds the key is bumped: ``k0 += 0x9E3779B9``, ``k1 += 0xBB67AE85``
   (mod 2^32). The output block is the final counter ``(x0, x1, x2, x3)``.

2. **Key and counter.** ``seed`` and ``step`` are taken mod 2^64.
   ``key = (seed & 0xFFFFFFFF, seed >> 32)``. Block ``b`` (a 64-bit block index) has
   ``counter = (b & 0xFFFFFFFF, b >> 32, step & 0xFFFFFFFF, step >> 32)``. The op's word
   stream is ``W[n] = philox(counter(n // 4), key)[n % 4]``: word ``n`` lives in lane
   ``n % 4`` of block ``n // 4``, so any word is computable on its own.

3. **Uniform integers** ``m`` with ``B`` bits, uniform index ``k``:
   ``B <= 32``: one word, ``m = W[k] >> (32 - B)``;
   ``B = 53``: two words, ``m = ((W[2k+1] << 32) | W[2k]) >> 11`` (low word first).
   A **64-bit word** for index ``k`` is ``(W[2k+1] << 32) | W[2k]``.

4. **Portable math.** All float arithmetic below is IEEE-754 binary64, round to nearest
   even, each ``+ - * /`` and ``sqrt`` rounded separately: **no FMA contraction, no
   fast-math** (CUDA: ``__dadd_rn``/``__dmul_rn`` or ``-fmad=false``; LLVM: no ``contract``
   flag). Transcendentals are not taken from a libm (they differ between libms, numpy's
   SIMD loops and CUDA): ``horner(x, c)`` is ``p = c[0]; p = c[i] + p * x`` for the rest.

   - ``plog(x)`` for positive normal ``x``: ``x = m * 2^e`` exactly with ``m`` in
     ``[0.5, 1)`` (frexp); if ``m < SQRT_HALF``: ``m = 2m, e = e - 1``.
     ``s = (m - 1) / (m + 1); z = s*s; t = s + s;
     log_m = t + t * (z * horner(z, LOG_COEFFS, xp))``;
     ``plog = e*LN2_HI + (e*LN2_LO + log_m)`` (``e`` as f64).
   - ``psincos(a)`` for ``|a| <= pi/4``: ``z = a*a``;
     ``sin = a + a * (z * horner(z, SIN_COEFFS))``; ``cos = 1 + z * horner(z, COS_COEFFS)``.
   - ``perfinv(v)`` for ``|v| <= ERF_SQRT2``: the central branch of Giles' double-precision
     erfinv ("Approximating the erfinv function", GPU Computing Gems 2, 2010):
     ``w = -plog((1 - v) * (1 + v)) - 3.125; erfinv = horner(w, ERFINV_COEFFS) * v``.
     (For these ``v``, ``-plog(...) < 2.43 < 6.25``: Giles' other branches never apply.)

5. **Ops.** Element ``j`` of the output (row-major order):

   - ``random.uniform``: ``B`` = 11, 24, 53 for f16, f32, f64; ``u = m_j * 2^-B`` (exact, in
     ``[0, 1)``); ``x = u * (maxval - minval) + minval`` in f64; then ``y = round(x)`` to the
     dtype (f16 via f32: ``f64 -> f32 -> f16``); ``y = min(y, HI)`` where ``HI`` is the
     largest dtype value below ``round(maxval)``, so ``y`` is in ``[minval, maxval)``.
     With the defaults (0, 1) the result is exactly ``m_j * 2^-B``.
   - ``random.normal`` (Box-Muller): ``B`` = 24 for f16/f32, 53 for f64. Pair
     ``p = j // 2`` uses uniform indices ``2p`` (``m1``) and ``2p + 1`` (``m2``).
     ``u1 = (m1 + 1) * 2^-B`` in ``(0, 1]``; ``r = sqrt(-2 * plog(u1))``. The angle
     ``2 pi m2 / 2^B`` is reduced exactly in integers: ``k = (m2 + 2^(B-3)) >> (B-2)``,
     ``i = m2 - (k << (B-2))`` (signed, in ``[-2^(B-3), 2^(B-3))``),
     ``a = (i * 2^(2-B)) * PI_2``; ``(S, C) = psincos(a)``; by quadrant ``k & 3``:
     ``(cos, sin) = (C, S), (-S, C), (-C, -S), (S, -C)``. Element ``2p`` is ``r * cos``,
     element ``2p + 1`` is ``r * sin``; ``y = z * stddev + mean`` in f64, rounded to the
     dtype as above.
   - ``random.truncated_normal`` (inverse CDF; TensorFlow's distribution: a normal limited
     to two standard deviations): ``B`` as for normal; uniform index ``j``;
     ``n = 2 m + 1 - 2^B`` (an odd integer, exact), ``v = (n * 2^-B) * ERF_SQRT2``,
     ``z = (perfinv(v) * SQRT2)`` clamped to ``[-2, 2]``; ``y = z * stddev + mean``.
     Since ``P(|N| < 2) = erf(sqrt 2)``, ``z`` is the normal quantile of a uniform on
     ``[Phi(-2), Phi(2)]``: no rejection, so one uniform per element.
   - ``random.uniform_int``: ``n = maxval - minval`` (1 <= n < 2^64); ``w`` the 64-bit word
     of index ``j``; ``y = minval + ((w * n) >> 64)`` (Lemire's multiply-shift, without the
     rejection step so every element uses a fixed two words; the bias is below
     ``n / 2^64``, at most 2^-32 for i32 ranges).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfc.errors import TypeMismatch
from tfc.ir.registry import FLOAT, INT, RANDOM, AttrSpec, OpDef, register
from tfc.ir.types import DType, TensorType, format_shape

# ---- Philox4x32-10 ------------------------------------------------------------------

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10
_MASK32 = np.uint64(0xFFFFFFFF)
_U64 = np.uint64
_2_64 = 1 << 64


def philox4x32_10(counter: Sequence[Any], key: Sequence[int], xp: Any = np
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four output words (uint32 arrays) of Philox4x32-10 for each counter.

    ``counter`` is four broadcastable arrays (or ints) of 32-bit words, ``key`` two ints.
    Arithmetic is in uint64 so that the 32x32 -> 64-bit products are exact. ``xp`` is the
    array module (numpy; cupy for the CUDA backend, which draws the same numbers on the
    device: integer and correctly rounded IEEE operations only, one per array call).
    """
    c = [xp.asarray(x, dtype=np.uint64) & _MASK32 for x in counter]
    c = list(xp.broadcast_arrays(*c))
    k0, k1 = (int(x) & 0xFFFFFFFF for x in key)
    m0, m1 = _U64(PHILOX_M0), _U64(PHILOX_M1)
    for r in range(PHILOX_ROUNDS):
        if r:
            k0, k1 = (k0 + PHILOX_W0) & 0xFFFFFFFF, (k1 + PHILOX_W1) & 0xFFFFFFFF
        p0 = c[0] * m0  # (array first: a cupy array decides the result type)
        p1 = c[2] * m1
        c = [(p1 >> _U64(32)) ^ c[1] ^ _U64(k0), p1 & _MASK32,
             (p0 >> _U64(32)) ^ c[3] ^ _U64(k1), p0 & _MASK32]
    return tuple(x.astype(np.uint32) for x in c)


def random_words(seed: int, step: int, count: int, start: int = 0, xp: Any = np
                 ) -> np.ndarray:
    """Words ``W[start:start+count]`` of the stream of ``(seed, step)`` (uint32).

    Only the blocks holding those words are computed, as a backend tile would.
    """
    seed, step = int(seed) % _2_64, int(step) % _2_64
    first, last = start // 4, -(-(start + count) // 4)
    blocks = xp.arange(last - first, dtype=np.uint64) + _U64(first)
    counter = (blocks & _MASK32, blocks >> _U64(32),
               step & 0xFFFFFFFF, step >> 32)
    lanes = philox4x32_10(counter, (seed & 0xFFFFFFFF, seed >> 32), xp)
    skip = start - 4 * first
    return xp.stack(lanes, axis=-1).reshape(-1)[skip:skip + count]


def uniform_bits(seed: int, step: int, count: int, bits: int, xp: Any = np) -> np.ndarray:
    """``count`` uniform integers of ``bits`` bits (uint64): one word each up to 32 bits,
    two words (low first) for more."""
    if bits <= 32:
        return random_words(seed, step, count, xp=xp).astype(np.uint64) >> _U64(32 - bits)
    return words64(seed, step, count, xp) >> _U64(64 - bits)


def words64(seed: int, step: int, count: int, xp: Any = np) -> np.ndarray:
    """``count`` 64-bit words ``W[2k+1] << 32 | W[2k]`` (uint64)."""
    w = random_words(seed, step, 2 * count, xp=xp).astype(np.uint64).reshape(count, 2)
    return (w[:, 1] << _U64(32)) | w[:, 0]


# ---- portable math: only correctly rounded IEEE operations --------------------------

SQRT_HALF = float.fromhex("0x1.6a09e667f3bcdp-1")  # f64 nearest sqrt(1/2)
SQRT2 = float.fromhex("0x1.6a09e667f3bcdp+0")      # f64 nearest sqrt(2)
LN2_HI = float.fromhex("0x1.62e42fee00000p-1")     # ln 2 = LN2_HI + LN2_LO (fdlibm split)
LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
PI_2 = float.fromhex("0x1.921fb54442d18p+0")       # f64 nearest pi/2
ERF_SQRT2 = float.fromhex("0x1.e8b4307d3627ap-1")  # f64 nearest erf(sqrt 2) = P(|N| < 2)

# Highest degree first (for horner). Each is the f64 nearest the stated rational
# (Python's int / int division is correctly rounded).
LOG_COEFFS = tuple(1 / (2 * k + 1) for k in range(11, 0, -1))             # 1/23 .. 1/3
SIN_COEFFS = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(8, 0, -1))
COS_COEFFS = tuple((-1) ** k / math.factorial(2 * k) for k in range(9, 0, -1))
ERFINV_COEFFS = (  # Giles (2010), double precision, branch w < 6.25 (w shifted by 3.125)
    -3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
    1.115787767802518096e-17, -1.333171662854620906e-16, 2.0972767875968561637e-17,
    6.6376381343583238325e-15, -4.0545662729752068639e-14, -8.1519341976054721522e-14,
    2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
    1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08,
    4.2347877827932403518e-07, -1.3654692000834678645e-06, -1.3882523362786468719e-05,
    0.0001867342080340571352, -0.00074070253416626697512, -0.0060336708714301490533,
    0.24015818242558961693, 1.6536545626831027356,
)


def horner(x: np.ndarray, coeffs: Sequence[float], xp: Any = np) -> np.ndarray:
    """``coeffs[0] * x^(n-1) + ... + coeffs[-1]``, one rounding per multiply and add."""
    p = xp.full_like(x, coeffs[0])
    for c in coeffs[1:]:
        p = c + p * x
    return p


def plog(x: np.ndarray, xp: Any = np) -> np.ndarray:
    """Natural log of positive normal f64 values, from IEEE operations only (~1 ulp)."""
    m, e = xp.frexp(x)
    small = m < SQRT_HALF
    m = xp.where(small, m * 2.0, m)
    ef = (e - small).astype(np.float64)
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    t = s + s
    log_m = t + t * (z * horner(z, LOG_COEFFS, xp))
    return ef * LN2_HI + (ef * LN2_LO + log_m)


def psincos(a: np.ndarray, xp: Any = np) -> tuple[np.ndarray, np.ndarray]:
    """``(sin a, cos a)`` for ``|a| <= pi/4`` by Taylor polynomials (~1 ulp)."""
    z = a * a
    return a + a * (z * horner(z, SIN_COEFFS, xp)), 1.0 + z * horner(z, COS_COEFFS, xp)


def perfinv(v: np.ndarray, xp: Any = np) -> np.ndarray:
    """Inverse error function for ``|v| <= erf(sqrt 2)`` (Giles' central branch)."""
    w = -plog((1.0 - v) * (1.0 + v), xp) - 3.125
    return horner(w, ERFINV_COEFFS, xp) * v


# ---- samplers (what the ops compute; usable directly by runtimes and tests) ---------

_UNIFORM_BITS = {DType.f16: 11, DType.f32: 24, DType.f64: 53}


def _normal_bits(dtype: DType) -> int:
    return 53 if dtype == DType.f64 else 24


def _to_dtype(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Round f64 values to ``dtype``; f16 goes through f32 (two documented roundings)."""
    if dtype == DType.f16:
        return x.astype(np.float32).astype(np.float16)
    return x.astype(dtype.np)


def _count(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def sample_uniform(shape: Sequence[int], dtype: DType, seed: int, step: int,
                   minval: float = 0.0, maxval: float = 1.0, xp: Any = np) -> np.ndarray:
    """Uniform floats in ``[minval, maxval)``, element j from uniform index j."""
    bits = _UNIFORM_BITS[dtype]
    u = xp.ldexp(uniform_bits(seed, step, _count(shape), bits, xp).astype(np.float64), -bits)
    y = _to_dtype(u * (float(maxval) - float(minval)) + float(minval), dtype)
    hi = _to_dtype(np.array([maxval], dtype=np.float64), dtype)
    hi = np.nextafter(hi, np.array([-np.inf], dtype=hi.dtype))
    return xp.minimum(y, hi[0]).reshape(shape)


def sample_normal(shape: Sequence[int], dtype: DType, seed: int, step: int,
                  mean: float = 0.0, stddev: float = 1.0, xp: Any = np) -> np.ndarray:
    """Normal floats by Box-Muller; elements 2p and 2p+1 share one pair of uniforms."""
    n = _count(shape)
    bits = _normal_bits(dtype)
    pairs = -(-n // 2)
    m = uniform_bits(seed, step, 2 * pairs, bits, xp).reshape(pairs, 2)
    m1, m2 = m[:, 0], m[:, 1].astype(np.int64)
    u1 = xp.ldexp((m1 + _U64(1)).astype(np.float64), -bits)
    r = xp.sqrt(-2.0 * plog(u1, xp))
    k = (m2 + (1 << (bits - 3))) >> (bits - 2)
    a = xp.ldexp((m2 - (k << (bits - 2))).astype(np.float64), 2 - bits) * PI_2
    s, c = psincos(a, xp)
    q = k & 3
    # nested where, not select: cupy's select takes only a scalar default
    cos = xp.where(q == 0, c, xp.where(q == 1, -s, xp.where(q == 2, -c, s)))
    sin = xp.where(q == 0, s, xp.where(q == 1, c, xp.where(q == 2, -s, -c)))
    z = xp.stack([r * cos, r * sin], axis=-1).reshape(-1)[:n]
    return _to_dtype(z * float(stddev) + float(mean), dtype).reshape(shape)


def sample_truncated_normal(shape: Sequence[int], dtype: DType, seed: int, step: int,
                            mean: float = 0.0, stddev: float = 1.0, xp: Any = np
                            ) -> np.ndarray:
    """Normal floats limited to ``mean +- 2 stddev`` by the inverse CDF (no rejection)."""
    bits = _normal_bits(dtype)
    m = uniform_bits(seed, step, _count(shape), bits, xp).astype(np.int64)
    n = 2 * m + 1 - (1 << bits)
    v = xp.ldexp(n.astype(np.float64), -bits) * ERF_SQRT2
    z = xp.clip(perfinv(v, xp) * SQRT2, -2.0, 2.0)
    return _to_dtype(z * float(stddev) + float(mean), dtype).reshape(shape)


def _mulhi64(a: np.ndarray, b: int) -> np.ndarray:
    """High 64 bits of the 128-bit product of uint64 ``a`` and an int ``b < 2^64``."""
    a_lo, a_hi = a & _MASK32, a >> _U64(32)
    b_lo, b_hi = _U64(b & 0xFFFFFFFF), _U64(b >> 32)
    lo_lo, hi_lo, lo_hi = a_lo * b_lo, a_hi * b_lo, a_lo * b_hi
    cross = (lo_lo >> _U64(32)) + (hi_lo & _MASK32) + lo_hi
    return a_hi * b_hi + (hi_lo >> _U64(32)) + (cross >> _U64(32))


def sample_uniform_int(shape: Sequence[int], dtype: DType, seed: int, step: int,
                       minval: int, maxval: int, xp: Any = np) -> np.ndarray:
    """Integers in ``[minval, maxval)`` by Lemire's multiply-shift on 64-bit words."""
    hi = _mulhi64(words64(seed, step, _count(shape), xp), maxval - minval)
    y = (hi + _U64(minval % _2_64)).view(np.int64)  # wraps mod 2^64, as intended
    return y.astype(dtype.np).reshape(shape)


# ---- op definitions -----------------------------------------------------------------

SEED = AttrSpec("int", doc="the op's seed (64-bit); equal seeds draw equal numbers")
SHAPE = AttrSpec("shape", doc="the output shape; static (ints) for now")


class RandomOp(OpDef):
    """A random op: no inputs, a static shape, a seed; reads only ``ctx.step``.

    RANDOM (not PURE): never merged by CSE, folded, or moved across other random ops.
    """

    num_inputs = 0
    traits = frozenset({RANDOM})
    differentiable = False  # no inputs

    def __init__(self, name: str, sampler: Callable[..., np.ndarray],
                 attrs: Mapping[str, AttrSpec], dtypes: frozenset[DType], flops: float,
                 summary: str) -> None:
        self.name, self.sampler, self.attrs, self.dtypes = name, sampler, dict(attrs), dtypes
        self.flops_per_element, self.summary = flops, summary

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        shape, dtype = tuple(attrs["shape"]), attrs["dtype"]
        if not all(isinstance(d, int) for d in shape):
            raise TypeMismatch(f"{self.name}: shape {format_shape(shape)} must be static (ints); "
                               "symbolic shapes are not supported yet")
        if dtype not in self.dtypes:
            names = ", ".join(sorted(d.value for d in self.dtypes))
            raise TypeMismatch(f"{self.name}: dtype {dtype.value} is not one of {names}")
        self.check_params(attrs)
        return [TensorType(dtype, shape)]

    def check_params(self, attrs: Mapping[str, Any]) -> None:
        if "minval" in attrs:
            lo, hi = attrs["minval"], attrs["maxval"]
            if not lo < hi:
                raise TypeMismatch(f"{self.name}: minval {lo} must be less than maxval {hi}")
            if self.dtypes == INT:
                info = np.iinfo(attrs["dtype"].np)
                if lo < info.min or hi > info.max:
                    raise TypeMismatch(f"{self.name}: [{lo}, {hi}) does not fit "
                                       f"{attrs['dtype'].value} ({info.min}..{info.max})")
            elif not math.isfinite(hi - lo):
                raise TypeMismatch(f"{self.name}: range [{lo}, {hi}) is not finite")
        if "stddev" in attrs and not (math.isfinite(attrs["stddev"])
                                      and math.isfinite(attrs["mean"])):
            raise TypeMismatch(f"{self.name}: mean and stddev must be finite")

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        params = {k: v for k, v in attrs.items() if k not in ("shape", "dtype", "seed")}
        return [self.sampler(attrs["shape"], attrs["dtype"], attrs["seed"], ctx.step, **params)]


def _float_attrs(**params: AttrSpec) -> dict[str, AttrSpec]:
    return {"shape": SHAPE, "dtype": AttrSpec("dtype", DType.f32, "f16, f32 or f64"),
            "seed": SEED, **params}


register(RandomOp("random.uniform", sample_uniform, _float_attrs(
    minval=AttrSpec("float", 0.0, "inclusive lower bound"),
    maxval=AttrSpec("float", 1.0, "exclusive upper bound")), FLOAT, 30,
    "uniform floats in [minval, maxval)"))
register(RandomOp("random.normal", sample_normal, _float_attrs(
    mean=AttrSpec("float", 0.0, "the distribution's mean"),
    stddev=AttrSpec("float", 1.0, "the distribution's standard deviation")), FLOAT, 120,
    "normal floats (Box-Muller)"))
register(RandomOp("random.truncated_normal", sample_truncated_normal, _float_attrs(
    mean=AttrSpec("float", 0.0, "the mean before truncation"),
    stddev=AttrSpec("float", 1.0, "the standard deviation before truncation")), FLOAT, 150,
    "normal floats within two standard deviations of the mean (TensorFlow's)"))
register(RandomOp("random.uniform_int", sample_uniform_int, {
    "shape": SHAPE, "dtype": AttrSpec("dtype", DType.i32, "i32 or i64"), "seed": SEED,
    "minval": AttrSpec("int", 0, "inclusive lower bound"),
    "maxval": AttrSpec("int", doc="exclusive upper bound")}, INT, 40,
    "uniform integers in [minval, maxval)"))
