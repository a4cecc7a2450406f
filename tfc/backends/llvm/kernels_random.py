"""Random numbers in native code, bit for bit those of ``tfc.ops.random``.

``random.uniform`` and ``random.uniform_like`` are element rules of the expression
emitter: element ``j`` (row-major) is a pure function of ``(seed, step, j)`` (Philox4x32-10,
see the algorithm in ``tfc.ops.random``), so it vectorizes and fuses like any element-wise
op, and every thread can compute its own range. The step is a run-time param that the
executable writes before each call. Arithmetic follows the spec exactly: the uniform
integer is scaled by a power of two (exact), ``u * (maxval - minval) + minval`` is two
separately rounded f64 operations (no ``contract`` flag, so no FMA), then one rounding to
the dtype (f16 through f32) and the clamp below ``maxval``.

``random.normal`` (Box-Muller), ``random.truncated_normal`` (inverse CDF) and
``random.uniform_int`` (Lemire's multiply-shift) are element rules of the same kind. The
libm-free ``plog``/``psincos``/``perfinv`` of the reference are emitted as the same
sequence of f64 ``+ - * / sqrt`` operations, with no fast-math flag (so no contraction
into FMAs, no reassociation) and the reference's own constants; ``frexp`` is bit
manipulation (exact for the positive normal values these functions see). Element ``j`` of
a normal draw recomputes its whole pair ``j // 2`` and picks the cosine or the sine half:
twice the work of sharing it, but every element stays a pure function of its index.

``shuffle`` is a kernel of its own (``lower_shuffle``): the splitmix64 keys of
``tfc.ops.array.shuffle_permutation`` computed natively into scratch, a bottom-up merge
sort of ``(key, row)`` pairs (a total order, so the result is the stable argsort), then
one row copy per output row.
"""

from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from tfc.backends.llvm import irutil
from tfc.backends.llvm.context import Storage
from tfc.backends.llvm.kernels_expr import EXTRA_RULES, FLAT_RULES, Emitter, Flat
from tfc.backends.llvm.kernels_scalar import Unsupported
from tfc.ir.core import Op, Value
from tfc.ir.types import DType
from tfc.ops.array import splitmix64
from tfc.ops.random import (COS_COEFFS, ERF_SQRT2, ERFINV_COEFFS, LN2_HI, LN2_LO, LOG_COEFFS,
                            PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS, PHILOX_W0, PHILOX_W1, PI_2,
                            SIN_COEFFS, SQRT2, SQRT_HALF)

_M64 = (1 << 64) - 1
BITS = {DType.f16: 11, DType.f32: 24, DType.f64: 53}


def _c32(v: int) -> ir.Constant:
    v &= 0xFFFFFFFF
    return ir.Constant(irutil.I32, v - (1 << 32) if v >= 1 << 31 else v)


def philox(b: ir.IRBuilder, block: ir.Value, step: ir.Value, seed: int) -> list[ir.Value]:
    """The four 32-bit words of Philox4x32-10 for block ``block`` (i64) at ``step``."""
    i32 = irutil.I32

    def split(v: ir.Value) -> tuple[ir.Value, ir.Value]:
        return b.trunc(v, i32), b.trunc(b.lshr(v, irutil.i64(32)), i32)

    c0, c1 = split(block)
    c2, c3 = split(step)
    seed %= 1 << 64
    k0, k1 = seed & 0xFFFFFFFF, seed >> 32

    def mulhilo(m: int, x: ir.Value) -> tuple[ir.Value, ir.Value]:
        p = b.mul(ir.Constant(irutil.I64, m), b.zext(x, irutil.I64))
        return b.trunc(b.lshr(p, irutil.i64(32)), i32), b.trunc(p, i32)

    for r in range(PHILOX_ROUNDS):
        if r:
            k0, k1 = (k0 + PHILOX_W0) & 0xFFFFFFFF, (k1 + PHILOX_W1) & 0xFFFFFFFF
        hi0, lo0 = mulhilo(PHILOX_M0, c0)
        hi1, lo1 = mulhilo(PHILOX_M1, c2)
        c0, c1, c2, c3 = (b.xor(b.xor(hi1, c1), _c32(k0)), lo1,
                          b.xor(b.xor(hi0, c3), _c32(k1)), lo0)
    return [c0, c1, c2, c3]


def _lane(b: ir.IRBuilder, words: list[ir.Value], lane: ir.Value) -> ir.Value:
    out = words[3]
    for k in (2, 1, 0):
        out = b.select(b.icmp_unsigned("==", lane, irutil.i64(k)), words[k], out)
    return out


def _uniform_rule(emitter: Emitter, op: Op, v: Value, idx) -> ir.Value:
    b, kernel = emitter.b, emitter.kernel
    dt = v.dtype
    if dt not in BITS:
        raise Unsupported(f"{op.kind} of {dt.value}")
    j = idx.i if isinstance(idx, Flat) else irutil.linear(b, idx, kernel.dims(v))
    step = kernel.param(("step",), lambda binding: 0)
    seed = int(op.attrs["seed"])
    bits = BITS[dt]
    if bits <= 32:
        words = philox(b, b.lshr(j, irutil.i64(2)), step, seed)
        w = _lane(b, words, b.and_(j, irutil.i64(3)))
        m = b.lshr(b.zext(w, irutil.I64), irutil.i64(32 - bits))
    else:  # two words 2j (low) and 2j+1 (high), lanes 2(j%2) and 2(j%2)+1 of block j//2
        words = philox(b, b.lshr(j, irutil.i64(1)), step, seed)
        odd = b.icmp_unsigned("==", b.and_(j, irutil.i64(1)), irutil.i64(1))
        lo = b.select(odd, words[2], words[0])
        hi = b.select(odd, words[3], words[1])
        m = b.or_(b.shl(b.zext(hi, irutil.I64), irutil.i64(32)), b.zext(lo, irutil.I64))
        m = b.lshr(m, irutil.i64(64 - bits))
    u = b.fmul(b.uitofp(m, irutil.F64), ir.Constant(irutil.F64, 2.0 ** -bits))
    lo_v, hi_v = float(op.attrs["minval"]), float(op.attrs["maxval"])
    x = b.fadd(b.fmul(u, ir.Constant(irutil.F64, hi_v - lo_v)), ir.Constant(irutil.F64, lo_v))
    top = np.array([hi_v], dtype=np.float64)
    if dt is DType.f16:
        y = b.fptrunc(x, irutil.F32)
        y = b.fpext(b.fptrunc(y, irutil.F16), irutil.F32)  # compute type of f16 is float
        top = top.astype(np.float32).astype(np.float16)
        limit = float(np.nextafter(top, np.array([-np.inf], np.float16))[0])
        cap = ir.Constant(irutil.F32, limit)
    elif dt is DType.f32:
        y = b.fptrunc(x, irutil.F32)
        top = top.astype(np.float32)
        cap = ir.Constant(irutil.F32, float(np.nextafter(top, np.array([-np.inf], np.float32))[0]))
    else:
        y = x
        cap = ir.Constant(irutil.F64, float(np.nextafter(top, np.array([-np.inf]))[0]))
    return b.select(b.fcmp_ordered("<", cap, y), cap, y)


# ---- normal, truncated normal, uniform integers --------------------------------------------

NORMAL_BITS = {DType.f16: 24, DType.f32: 24, DType.f64: 53}


def _f64(x: float) -> ir.Constant:
    return ir.Constant(irutil.F64, float(x))


def _word64(b: ir.IRBuilder, lo: ir.Value, hi: ir.Value) -> ir.Value:
    return b.or_(b.shl(b.zext(hi, irutil.I64), irutil.i64(32)), b.zext(lo, irutil.I64))


def _index(emitter: Emitter, v: Value, idx) -> ir.Value:
    return idx.i if isinstance(idx, Flat) else irutil.linear(emitter.b, idx, emitter.kernel.dims(v))


def _step(kernel) -> ir.Value:
    """The step number: a run-time param the executable writes before each call."""
    return kernel.param(("step",), lambda binding: 0)


def _uniform_bits(b: ir.IRBuilder, step: ir.Value, seed: int, u: ir.Value, bits: int
                  ) -> ir.Value:
    """Uniform integer ``u`` of ``bits`` bits (i64), as ``tfc.ops.random.uniform_bits``."""
    if bits <= 32:
        words = philox(b, b.lshr(u, irutil.i64(2)), step, seed)
        w = _lane(b, words, b.and_(u, irutil.i64(3)))
        return b.lshr(b.zext(w, irutil.I64), irutil.i64(32 - bits))
    return b.lshr(_words64(b, step, seed, u), irutil.i64(64 - bits))


def _words64(b: ir.IRBuilder, step: ir.Value, seed: int, u: ir.Value) -> ir.Value:
    """64-bit word ``u``: words ``2u`` (low) and ``2u + 1`` of the stream."""
    words = philox(b, b.lshr(u, irutil.i64(1)), step, seed)
    odd = b.icmp_unsigned("==", b.and_(u, irutil.i64(1)), irutil.i64(1))
    return _word64(b, b.select(odd, words[2], words[0]), b.select(odd, words[3], words[1]))


def _horner(b: ir.IRBuilder, x: ir.Value, coeffs) -> ir.Value:
    p = _f64(coeffs[0])
    for c in coeffs[1:]:
        p = b.fadd(_f64(c), b.fmul(p, x))
    return p


def _plog(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """``tfc.ops.random.plog`` for a positive normal f64 ``x``."""
    bits = b.bitcast(x, irutil.I64)
    e = b.sub(b.and_(b.lshr(bits, irutil.i64(52)), irutil.i64(0x7FF)), irutil.i64(1022))
    m = b.bitcast(b.or_(b.and_(bits, irutil.i64(~(0x7FF << 52))), irutil.i64(1022 << 52)),
                  irutil.F64)
    small = b.fcmp_ordered("<", m, _f64(SQRT_HALF))
    m = b.select(small, b.fmul(m, _f64(2.0)), m)
    ef = b.sitofp(b.sub(e, b.zext(small, irutil.I64)), irutil.F64)
    s = b.fdiv(b.fsub(m, _f64(1.0)), b.fadd(m, _f64(1.0)))
    z = b.fmul(s, s)
    t = b.fadd(s, s)
    log_m = b.fadd(t, b.fmul(t, b.fmul(z, _horner(b, z, LOG_COEFFS))))
    return b.fadd(b.fmul(ef, _f64(LN2_HI)), b.fadd(b.fmul(ef, _f64(LN2_LO)), log_m))


def _to_dtype(b: ir.IRBuilder, x: ir.Value, dt: DType) -> ir.Value:
    """Round an f64 to ``dt``'s compute type, f16 through f32 (as the reference)."""
    if dt is DType.f64:
        return x
    y = b.fptrunc(x, irutil.F32)
    if dt is DType.f16:
        y = b.fpext(b.fptrunc(y, irutil.F16), irutil.F32)
    return y


def _scale(b: ir.IRBuilder, op: Op, z: ir.Value, dt: DType) -> ir.Value:
    y = b.fadd(b.fmul(z, _f64(op.attrs["stddev"])), _f64(op.attrs["mean"]))
    return _to_dtype(b, y, dt)


def _normal_rule(emitter: Emitter, op: Op, v: Value, idx) -> ir.Value:
    b, dt = emitter.b, v.dtype
    if dt not in NORMAL_BITS:
        raise Unsupported(f"{op.kind} of {dt.value}")
    bits, seed, step = NORMAL_BITS[dt], int(op.attrs["seed"]), _step(emitter.kernel)
    j = _index(emitter, v, idx)
    p = b.lshr(j, irutil.i64(1))
    if bits <= 32:  # uniforms 2p, 2p+1 are words 2p, 2p+1: lanes 2(p%2), 2(p%2)+1
        words = philox(b, b.lshr(p, irutil.i64(1)), step, seed)
        odd = b.icmp_unsigned("==", b.and_(p, irutil.i64(1)), irutil.i64(1))
        w1, w2 = b.select(odd, words[2], words[0]), b.select(odd, words[3], words[1])
        m1 = b.lshr(b.zext(w1, irutil.I64), irutil.i64(32 - bits))
        m2 = b.lshr(b.zext(w2, irutil.I64), irutil.i64(32 - bits))
    else:  # uniforms 2p, 2p+1 are 64-bit words 2p, 2p+1: the four words of block p
        words = philox(b, p, step, seed)
        m1 = b.lshr(_word64(b, words[0], words[1]), irutil.i64(64 - bits))
        m2 = b.lshr(_word64(b, words[2], words[3]), irutil.i64(64 - bits))
    u1 = b.fmul(b.uitofp(b.add(m1, irutil.i64(1)), irutil.F64), _f64(2.0 ** -bits))
    r = b.call(emitter.b.module.declare_intrinsic("llvm.sqrt", [irutil.F64]),
               [b.fmul(_f64(-2.0), _plog(b, u1))])
    k = b.ashr(b.add(m2, irutil.i64(1 << (bits - 3))), irutil.i64(bits - 2))
    i = b.sub(m2, b.shl(k, irutil.i64(bits - 2)))
    a = b.fmul(b.fmul(b.sitofp(i, irutil.F64), _f64(2.0 ** (2 - bits))), _f64(PI_2))
    z = b.fmul(a, a)
    sn = b.fadd(a, b.fmul(a, b.fmul(z, _horner(b, z, SIN_COEFFS))))
    cs = b.fadd(_f64(1.0), b.fmul(z, _horner(b, z, COS_COEFFS)))
    q = b.and_(k, irutil.i64(3))

    def pick(vals: list[ir.Value]) -> ir.Value:
        out = vals[3]
        for n in (2, 1, 0):
            out = b.select(b.icmp_unsigned("==", q, irutil.i64(n)), vals[n], out)
        return out

    cos = pick([cs, b.fneg(sn), b.fneg(cs), sn])
    sin = pick([sn, cs, b.fneg(sn), b.fneg(cs)])
    second = b.icmp_unsigned("==", b.and_(j, irutil.i64(1)), irutil.i64(1))
    return _scale(b, op, b.fmul(r, b.select(second, sin, cos)), dt)


def _truncated_normal_rule(emitter: Emitter, op: Op, v: Value, idx) -> ir.Value:
    b, dt = emitter.b, v.dtype
    if dt not in NORMAL_BITS:
        raise Unsupported(f"{op.kind} of {dt.value}")
    bits = NORMAL_BITS[dt]
    m = _uniform_bits(b, _step(emitter.kernel), int(op.attrs["seed"]), _index(emitter, v, idx),
                      bits)
    n = b.sub(b.add(b.shl(m, irutil.i64(1)), irutil.i64(1)), irutil.i64(1 << bits))
    x = b.fmul(b.fmul(b.sitofp(n, irutil.F64), _f64(2.0 ** -bits)), _f64(ERF_SQRT2))
    w = b.fsub(b.fneg(_plog(b, b.fmul(b.fsub(_f64(1.0), x), b.fadd(_f64(1.0), x)))),
               _f64(3.125))
    z = b.fmul(b.fmul(_horner(b, w, ERFINV_COEFFS), x), _f64(SQRT2))
    z = b.select(b.fcmp_ordered("<", z, _f64(-2.0)), _f64(-2.0), z)
    z = b.select(b.fcmp_ordered(">", z, _f64(2.0)), _f64(2.0), z)
    return _scale(b, op, z, dt)


def _uniform_int_rule(emitter: Emitter, op: Op, v: Value, idx) -> ir.Value:
    b, dt = emitter.b, v.dtype
    if dt not in (DType.i32, DType.i64):
        raise Unsupported(f"{op.kind} of {dt.value}")
    lo, hi = int(op.attrs["minval"]), int(op.attrs["maxval"])
    w = _words64(b, _step(emitter.kernel), int(op.attrs["seed"]), _index(emitter, v, idx))
    i128 = ir.IntType(128)
    prod = b.mul(b.zext(w, i128), ir.Constant(i128, (hi - lo) % (1 << 64)))
    y = b.add(b.trunc(b.lshr(prod, ir.Constant(i128, 64)), irutil.I64),
              ir.Constant(irutil.I64, lo))
    return y if dt is DType.i64 else b.trunc(y, irutil.I32)


EXTRA_RULES["random.uniform"] = _uniform_rule
EXTRA_RULES["random.uniform_like"] = _uniform_rule
EXTRA_RULES["random.normal"] = _normal_rule
EXTRA_RULES["random.truncated_normal"] = _truncated_normal_rule
EXTRA_RULES["random.uniform_int"] = _uniform_int_rule
FLAT_RULES.update({"random.uniform", "random.uniform_like", "random.normal",
                   "random.truncated_normal", "random.uniform_int"})


# ---- shuffle -------------------------------------------------------------------------------

_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _i64c(v: int) -> ir.Constant:
    v &= _M64
    return ir.Constant(irutil.I64, v - (1 << 64) if v >= 1 << 63 else v)


def _mix(b: ir.IRBuilder, z: ir.Value) -> ir.Value:
    """The splitmix64 finalizer on i64, wrapping (``tfc.ops.array.splitmix64``)."""
    z = b.add(z, _i64c(_GOLDEN))
    z = b.mul(b.xor(z, b.lshr(z, irutil.i64(30))), _i64c(_MIX1))
    z = b.mul(b.xor(z, b.lshr(z, irutil.i64(27))), _i64c(_MIX2))
    return b.xor(z, b.lshr(z, irutil.i64(31)))


def _min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def lower_shuffle(graph_compiler, op: Op) -> None:
    """Rows of the input in the order of ``shuffle_permutation(seed, step, n)``."""
    x, out = op.inputs[0], op.result
    if graph_compiler.comp.storage.get(x) == graph_compiler.comp.storage.get(out):
        raise Unsupported("shuffle in place")
    graph_compiler.comp.scratch.append(lambda binding, x=x: 32 * max(1, binding.shape(x)[0]))
    scratch = Storage("scratch", 0)
    kernel = graph_compiler.kernel("shuffle", [x, out], [scratch])
    kernel.whole()
    b = kernel.b
    dims = kernel.dims(x)
    n, row = dims[0], irutil.product(b, dims[1:])
    buf = kernel.storage_ptr(scratch)

    def part(k: int) -> ir.Value:  # four i64 arrays of n: keys, rows, and their copies
        return b.gep(buf, [b.mul(n, irutil.i64(k))], inbounds=True, source_etype=irutil.I64)

    keys, rows, keys2, rows2 = part(0), part(1), part(2), part(3)
    seed_mix = int(splitmix64(np.array([int(op.attrs["seed"]) & _M64], np.uint64))[0])
    base = _mix(b, b.xor(_i64c(seed_mix), _step(kernel)))

    def at(p: ir.Value, i: ir.Value) -> ir.Value:
        return b.gep(p, [i], inbounds=True, source_etype=irutil.I64)

    def init(i: ir.Value, _c) -> None:
        b.store(_mix(b, b.xor(base, i)), at(keys, i))
        b.store(i, at(rows, i))

    irutil.loop(b, irutil.i64(0), n, init, name="key")
    # passes of widths 1, 2, 4 ... below n: ceil(log2 n) of them, alternating buffers
    passes = b.sub(irutil.i64(64), b.ctlz(b.sub(n, irutil.i64(1)), ir.Constant(irutil.I1, 0)))
    passes = b.select(b.icmp_signed("<", n, irutil.i64(2)), irutil.i64(0), passes)

    def one_pass(p: ir.Value, _c) -> None:
        even = b.icmp_unsigned("==", b.and_(p, irutil.i64(1)), irutil.i64(0))
        sk, si = b.select(even, keys, keys2), b.select(even, rows, rows2)
        dk, di = b.select(even, keys2, keys), b.select(even, rows2, rows)
        width = b.shl(irutil.i64(1), p)
        runs = b.udiv(b.add(n, b.sub(b.shl(width, irutil.i64(1)), irutil.i64(1))),
                      b.shl(width, irutil.i64(1)))

        def merge(t: ir.Value, _c2) -> None:
            lo = b.mul(t, b.shl(width, irutil.i64(1)))
            mid = _min(b, b.add(lo, width), n)
            hi = _min(b, b.add(lo, b.shl(width, irutil.i64(1))), n)

            def step(k: ir.Value, c: list[ir.Value]) -> list[ir.Value]:
                i, j = c
                has_i, has_j = b.icmp_signed("<", i, mid), b.icmp_signed("<", j, hi)
                ic, jc = b.select(has_i, i, lo), b.select(has_j, j, lo)
                ki, kj = b.load(at(sk, ic), typ=irutil.I64), b.load(at(sk, jc), typ=irutil.I64)
                ri, rj = b.load(at(si, ic), typ=irutil.I64), b.load(at(si, jc), typ=irutil.I64)
                le = b.or_(b.icmp_unsigned("<", ki, kj),
                           b.and_(b.icmp_unsigned("==", ki, kj), b.icmp_signed("<", ri, rj)))
                left = b.and_(has_i, b.or_(b.not_(has_j), le))
                b.store(b.select(left, ki, kj), at(dk, k))
                b.store(b.select(left, ri, rj), at(di, k))
                one = irutil.i64(1)
                return [b.select(left, b.add(i, one), i), b.select(left, j, b.add(j, one))]

            irutil.loop(b, lo, hi, step, [lo, mid], name="m")

        irutil.loop(b, irutil.i64(0), runs, merge, name="run")

    irutil.loop(b, irutil.i64(0), passes, one_pass, name="pass")
    perm = b.select(b.icmp_unsigned("==", b.and_(passes, irutil.i64(1)), irutil.i64(0)), rows,
                    rows2)
    st = irutil.storage_type(x.dtype)

    def gather(r: ir.Value, _c) -> None:
        src0, dst0 = b.mul(b.load(at(perm, r), typ=irutil.I64), row), b.mul(r, row)

        def elem(e: ir.Value, _c2) -> None:
            v = b.load(irutil.elem_ptr(b, kernel.ptr(x), x.dtype, b.add(src0, e)), typ=st)
            b.store(v, irutil.elem_ptr(b, kernel.ptr(out), out.dtype, b.add(dst0, e)))

        irutil.loop(b, irutil.i64(0), row, elem, name="e")

    irutil.loop(b, irutil.i64(0), n, gather, name="row")
    kernel.finish()


LOWERINGS = {"shuffle": lower_shuffle}
