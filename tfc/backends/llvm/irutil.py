"""Small helpers over llvmlite's IR builder: element types, loads and stores, loops.

Values in kernels are held in *compute types*: ``bool`` is ``i1`` (stored as one byte,
as numpy does), ``f16`` is computed in ``float`` (stored as ``half``), the rest are
themselves. Loops are emitted in the simplest canonical form (header with a phi and an
exit test); LLVM's loop passes rotate, unroll and vectorize them.
"""

from __future__ import annotations

from typing import Callable, Sequence

import llvmlite.ir as ir

from tfc.ir.types import DType

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()
# Float adds and multiplies may be reassociated (what lets reductions vectorize) and
# contracted into FMAs; no flag that changes NaN/inf/zero-sign semantics.
FAST = ("reassoc", "contract")

_STORAGE = {DType.f16: F16, DType.f32: F32, DType.f64: F64, DType.i32: I32, DType.i64: I64,
            DType.bool: I8}
_COMPUTE = {DType.f16: F32, DType.f32: F32, DType.f64: F64, DType.i32: I32, DType.i64: I64,
            DType.bool: I1}


def storage_type(dtype: DType) -> ir.Type:
    return _STORAGE[dtype]


def compute_type(dtype: DType) -> ir.Type:
    return _COMPUTE[dtype]


_I64: dict[int, ir.Constant] = {}


def i64(v: int) -> ir.Constant:
    """An i64 constant; one object per value (constants belong to no function and are
    never changed), which spares lowering thousands of allocations and their printing."""
    v = int(v)
    c = _I64.get(v)
    if c is None:
        c = ir.Constant(I64, v)
        if len(_I64) < 65536:
            _I64[v] = c
    return c


def const(dtype: DType, value: float | int | bool) -> ir.Constant:
    """A constant of ``dtype``'s compute type (floats rounded as numpy rounds them)."""
    t = compute_type(dtype)
    if dtype is DType.bool:
        return ir.Constant(I1, int(bool(value)))
    if dtype.is_int:
        return ir.Constant(t, int(value))
    import numpy as np
    return ir.Constant(t, float(np.asarray(value).astype(dtype.np)))


def elem_ptr(b: ir.IRBuilder, ptr: ir.Value, dtype: DType, offset: ir.Value) -> ir.Value:
    return b.gep(ptr, [offset], inbounds=True, source_etype=storage_type(dtype))


def load(b: ir.IRBuilder, ptr: ir.Value, dtype: DType, offset: ir.Value) -> ir.Value:
    """Element ``offset`` of the array at ``ptr``, in the compute type."""
    v = b.load(elem_ptr(b, ptr, dtype, offset), typ=storage_type(dtype))
    if dtype is DType.bool:
        return b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
    if dtype is DType.f16:
        return b.fpext(v, F32)
    return v


def store(b: ir.IRBuilder, ptr: ir.Value, dtype: DType, offset: ir.Value, v: ir.Value) -> None:
    if dtype is DType.bool:
        v = b.zext(v, I8)
    elif dtype is DType.f16:
        v = b.fptrunc(v, F16)
    b.store(v, elem_ptr(b, ptr, dtype, offset))


# A straight-line loop body at least this long (instructions, inlined vmath functions
# counted at their size) gets ``llvm.loop.interleave.count`` = INTERLEAVE. The vectorizer's
# cost model picks 1 for such bodies (register pressure), and the loop then runs at the
# speed of one long dependency chain (a gelu with tanh: ~75 cycles from load to store)
# because the out-of-order window holds only two or three iterations of ~50 vector ops.
# Four independent vectors per iteration measured 1.2x faster on a 16M-element gelu chain
# (AVX2 znver3, one and two threads); a cheap body is left to the cost model.
HEAVY_BODY = 40
INTERLEAVE = 4
# ...unless the loop is known to be short. An interleaved loop of a heavy body leaves up to
# VF * INTERLEAVE - 1 elements to the scalar remainder, and one scalar iteration costs
# about one whole vector iteration (a tanh is ~37 instructions either way). Below about
# a thousand elements that remainder costs more than the interleaving wins, so a short
# constant trip count gets the count that leaves no remainder (``_interleave_count``):
# the 100-op chain on 16 floats ran entirely in the scalar remainder (1.7 us a call),
# 0.84 us as one iteration of two interleaved 8-wide vectors.
INTERLEAVE_MIN_TRIP = 1024


def _inline_size(fn: ir.Function, memo: dict[str, int]) -> int:
    """Instructions of a (vmath) function once inlined, its own calls included."""
    if fn.name not in memo:
        memo[fn.name] = 0  # recursion guard
        memo[fn.name] = sum(_size(ins, memo) for blk in fn.blocks for ins in blk.instructions)
    return memo[fn.name]


def _size(ins: ir.Instruction, memo: dict[str, int]) -> int:
    callee = getattr(ins, "callee", None)
    if isinstance(ins, ir.CallInstr) and isinstance(callee, ir.Function) and callee.blocks:
        return _inline_size(callee, memo)
    return 1


def body_size(block: ir.Block) -> int:
    """How many instructions ``block`` becomes after inlining the functions it calls."""
    memo: dict[str, int] = {}
    return sum(_size(ins, memo) for ins in block.instructions)


def set_interleave(module: ir.Module, branch: ir.Instruction, count: int) -> None:
    """Attach a fresh loop ID asking for ``count`` interleaved vector iterations to the
    latch ``branch`` (a loop ID is a node whose first operand is itself, unique per loop)."""
    prop = module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"),
                                ir.Constant(I32, int(count))])
    loop_id = ir.values.MDValue(module, [prop], name=str(len(module.metadata)))
    loop_id.operands = (loop_id, prop)
    branch.set_metadata("llvm.loop", loop_id)


def _interleave_count(trip: ir.Value) -> int:
    """``INTERLEAVE`` for a long or unknown trip count; for a short constant one, the
    largest count whose vector iterations (of 8 lanes, AVX2 f32) cover it exactly, so
    that nothing is left to the scalar remainder (1 when none does)."""
    if not isinstance(trip, ir.Constant) or int(trip.constant) >= INTERLEAVE_MIN_TRIP:
        return INTERLEAVE
    n = int(trip.constant)
    count = INTERLEAVE
    while count > 1 and (n < 8 * count or n % (8 * count)):
        count //= 2
    return count


def loop(b: ir.IRBuilder, lo: ir.Value, hi: ir.Value,
         body: Callable[[ir.Value, list[ir.Value]], list[ir.Value] | None],
         carried: Sequence[ir.Value] = (), name: str = "i",
         trip: ir.Value | None = None) -> list[ir.Value]:
    """``for i in [lo, hi)``, with loop-carried values (accumulators).

    ``body(i, carried)`` emits the body at the builder's position and returns the next
    carried values; the result is their values after the loop (``carried`` if it never
    runs). An innermost loop with a long straight-line body (no carried values) is
    marked for interleaving (see ``HEAVY_BODY``), by a count that suits its trip count
    (``trip`` when ``[lo, hi)`` is a thread's chunk of a longer range, else ``hi``).
    """
    pre = b.block
    fn = pre.function
    header = fn.append_basic_block(f"{name}.head")
    inner = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.end")
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(I64, name=name)
    i.add_incoming(lo, pre)
    phis = []
    for c in carried:
        p = b.phi(c.type)
        p.add_incoming(c, pre)
        phis.append(p)
    b.cbranch(b.icmp_signed("<", i, hi), inner, done)
    b.position_at_end(inner)
    nxt = body(i, list(phis)) or []
    latch = b.block
    i.add_incoming(b.add(i, i64(1), flags=("nsw",)), latch)
    for p, v in zip(phis, nxt):
        p.add_incoming(v, latch)
    back = b.branch(header)
    if latch is inner and not phis and body_size(inner) >= HEAVY_BODY:
        count = _interleave_count(hi if trip is None else trip)
        if count > 1:
            set_interleave(b.module, back, count)
    b.position_at_end(done)
    return list(phis)


def loop_nest(b: ir.IRBuilder, bounds: Sequence[tuple[ir.Value, ir.Value]],
              body: Callable[[list[ir.Value], list[ir.Value]], list[ir.Value] | None],
              carried: Sequence[ir.Value] = (), name: str = "i") -> list[ir.Value]:
    """Nested loops over ``bounds`` (outermost first); ``body(indices, carried)``."""
    if not bounds:
        return list(body([], list(carried)) or carried)

    def level(k: int, idx: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
        lo, hi = bounds[k]

        def inner(i: ir.Value, c: list[ir.Value]) -> list[ir.Value]:
            if k + 1 == len(bounds):
                return list(body(idx + [i], c) or [])
            return level(k + 1, idx + [i], c)

        return loop(b, lo, hi, inner, acc, name=f"{name}{k}")

    return level(0, [], list(carried))


def _c(v: ir.Value) -> int | None:
    return v.constant if isinstance(v, ir.Constant) and isinstance(v.constant, int) else None


def mul(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """``x * y`` on i64, folded when constant (llvmlite does not fold)."""
    cx, cy = _c(x), _c(y)
    if cx is not None and cy is not None:
        return i64(cx * cy)
    if cx == 1:
        return y
    if cy == 1:
        return x
    if cx == 0 or cy == 0:
        return i64(0)
    return b.mul(x, y)


def add(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    cx, cy = _c(x), _c(y)
    if cx is not None and cy is not None:
        return i64(cx + cy)
    if cx == 0:
        return y
    if cy == 0:
        return x
    return b.add(x, y)


def product(b: ir.IRBuilder, values: Sequence[ir.Value]) -> ir.Value:
    out: ir.Value = i64(1)
    for v in values:
        out = mul(b, out, v)
    return out


def linear(b: ir.IRBuilder, idx: Sequence[ir.Value], dims: Sequence[ir.Value]) -> ir.Value:
    """Row-major offset of ``idx`` in an array of shape ``dims``."""
    off: ir.Value = i64(0)
    for i, d in zip(idx, dims):
        off = add(b, mul(b, off, d), i)
    return off


def _is_zero(v: ir.Value) -> bool:
    return isinstance(v, ir.Constant) and v.constant == 0


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    """Declare (once) an LLVM intrinsic or external function."""
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(ret, list(args)), name)


def to_i64(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    if v.type == I64:
        return v
    return b.sext(v, I64)
