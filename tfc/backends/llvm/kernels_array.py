"""Kernels for data movement that is not one element per output element, and pooling.

- ``concat`` / ``stack``: one copy loop per input into its slab of the output;
  ``split``: one copy loop per part; the innermost loop is the contiguous last axis.
- ``scatter_add`` and the variable updates ``var.scatter_add/sub``: check every index,
  then copy the base (not for a variable's update made in place) and add each row of
  updates at its index; rows named twice add twice.
- ``argmax`` / ``argmin``: per output element, a scan along the axis (first index on
  ties; a NaN wins, as numpy's); f16 compares in f32, which is exact.
- ``shape`` / ``rank``: the dims, from the params.
- Pooling: ``max_pool`` / ``avg_pool`` are element rules of the expression emitter (a
  fold over the window per output element, padding never counted), so they fuse like
  element-wise ops; windows of up to ``MAX_UNROLLED_TAPS`` taps are emitted tap by tap,
  which leaves the channel loop innermost for the vectorizer; f16 max is an integer
  max of order keys (``_order_key``). ``max_pool_grad`` / ``avg_pool_grad``: disjoint windows
  scatter (per window position, a vectorized loop over channels stores every tap's
  share); overlapping ones gather in two vectorized passes (per window: the first
  maximum's tap or the avg share, in scratch; per pixel: the sum over the windows that
  hold it), so f16 sums are made in f32 and rounded once, as the reference (which sums
  in f32 or f64, then rounds); large windows take scalar loops (sums in f32 scratch).
  ``max_pool_grad_grad`` is an element rule like ``max_pool``: the same window walk and
  tie rule as ``max_pool_grad``, reading ``g`` at each window's first maximum.

Window geometry (output size, padding before) comes from ``tfc.ops.nn.window_padding``
on the concrete shapes, once per binding, as params.
"""

from __future__ import annotations

from typing import Callable, Sequence

import llvmlite.ir as ir

from tfc.backends.llvm import irutil
from tfc.backends.llvm.context import Kernel, Storage, dim_key
from tfc.backends.llvm.kernels_expr import EXTRA_RULES, Emitter
from tfc.backends.llvm.kernels_loop import combine
from tfc.backends.llvm.kernels_scalar import float_limits
from tfc.backends.binding import Binding
from tfc.errors import Location
from tfc.ir.core import Op, Value
from tfc.ir.registry import normalize_axis
from tfc.ir.types import DType
from tfc.ops.nn import spatial_attr, window_padding
from tfc.ops.scatter import scatter_error

ZERO = irutil.i64(0)


def _offset(b: ir.IRBuilder, idx, dims) -> ir.Value:
    return irutil.linear(b, idx, dims)


def _nest(kernel: Kernel, dims, body, name="i") -> None:
    irutil.loop_nest(kernel.b, [(ZERO, d) for d in dims], body, name=name)


# ---- checks ------------------------------------------------------------------------------

def check_indices(graph_compiler, indices: Value, bound: Callable[[Kernel], ir.Value], message: str,
                  ints: Callable[[Kernel, list[ir.Value]], Sequence[ir.Value]],
                  loc: Location | None) -> None:
    """A kernel (run whole: a scan of the indices, before the kernel that uses them) that
    fails with ``message`` (at ``loc``) when an index is outside ``[0, bound)``, leaving the first such
    (row-major) and ``ints(kernel, its index)`` in ``ERROR_DETAIL``, as the reference
    reports them."""
    kernel = graph_compiler.kernel("check_indices", [indices])
    kernel.whole()
    b = kernel.b
    dims = kernel.dims(indices)
    n = bound(kernel)
    code = graph_compiler.comp.error(message, loc)

    def body(idx: list, _c) -> None:
        k = irutil.to_i64(b, irutil.load(b, kernel.ptr(indices), indices.dtype,
                                         irutil.linear(b, idx, dims)))
        bad = b.or_(b.icmp_signed("<", k, ZERO), b.icmp_signed(">=", k, n))
        kernel.fail_with_detail(bad, code, k, ints(kernel, idx))

    irutil.loop_nest(b, [(ZERO, d) for d in dims], body, name="l")
    kernel.finish()


# ---- scatter -------------------------------------------------------------------------------

def scatter_rows(graph_compiler, base: Value, out: Value, indices: Value, updates: Value, sign: int,
                 op: Op) -> None:
    """``out = base``, then ``out[indices[i]] += sign * updates[i]`` row by row.

    Every index is checked before anything is written: a kernel with a bad index returns
    its error with ``out`` untouched (``Kernel.fails_before_writes``), which is what lets
    a variable's scatter update its own array in place (``GraphCompiler.in_place_updates``:
    ``base`` is then ``out``'s storage and nothing is copied here). Indices an earlier
    scatter of the step checked against the same static row count are not checked again:
    that kernel cannot fail, so the updates before it may be in place too (a sparse
    AdaGrad's accumulator and variable, both scattered at the same indices)."""
    kernel = graph_compiler.kernel("scatter", [base, out, indices, updates])
    kernel.whole()
    b = kernel.b
    dt = out.dtype
    dims = kernel.dims(out)
    row = irutil.product(b, dims[1:])
    total = irutil.product(b, dims)
    n = kernel.size(indices)
    code = graph_compiler.comp.error(scatter_error(op.kind, "{value}", "{int0}"), op.loc)

    def index(i: ir.Value) -> ir.Value:
        return irutil.to_i64(b, irutil.load(b, kernel.ptr(indices), indices.dtype, i))

    rows = out.type.shape[0]
    checked = ("scatter rows", indices, rows) if isinstance(rows, int) else None
    if checked is None or checked not in graph_compiler.comp.checked_indices:
        _check_rows(kernel, indices, dims[0], code)
        if checked is not None:
            graph_compiler.comp.checked_indices.add(checked)
    ok = b.icmp_signed("==", b.load(kernel.err, typ=irutil.I32), ir.Constant(irutil.I32, 0))
    with b.if_then(ok):
        if graph_compiler.comp.storage[base] != graph_compiler.comp.storage[out]:
            def copy(i: ir.Value, _c) -> None:
                irutil.store(b, kernel.ptr(out), dt, i, irutil.load(b, kernel.ptr(base), dt, i))
            irutil.loop(b, ZERO, total, copy, name="c")
        scale = irutil.const(dt, -1 if sign < 0 else 1)

        def per_index(i: ir.Value, _c) -> None:
            dst0, src0 = b.mul(index(i), row), b.mul(i, row)

            def per_elem(r: ir.Value, _c2) -> None:
                u = irutil.load(b, kernel.ptr(updates), dt, b.add(src0, r))
                if sign < 0:
                    u = (b.fmul(u, scale) if dt.is_float else b.mul(u, scale))
                o = irutil.load(b, kernel.ptr(out), dt, b.add(dst0, r))
                irutil.store(b, kernel.ptr(out), dt, b.add(dst0, r), combine(b, "sum", dt, o, u))

            irutil.loop(b, ZERO, row, per_elem, name="r")

        irutil.loop(b, ZERO, n, per_index, name="s")
    kernel.finish()


def _check_rows(kernel: Kernel, indices: Value, rows: ir.Value, code: int) -> None:
    """Fail ``kernel`` with ``code`` (and the first bad index) unless every index is in
    ``[0, rows)``; emitted before the kernel writes anything (``fails_before_writes``)."""
    b = kernel.b

    def check(i: ir.Value, _c) -> None:
        k = irutil.to_i64(b, irutil.load(b, kernel.ptr(indices), indices.dtype, i))
        bad = b.or_(b.icmp_signed("<", k, ZERO), b.icmp_signed(">=", k, rows))
        kernel.fail_with_detail(bad, code, k, [rows])

    irutil.loop(b, ZERO, kernel.size(indices), check, name="v")
    kernel.fails_before_writes = True


def check_var_scatters(graph_compiler) -> None:
    """Once per graph, before its first variable scatter: one kernel per variable scatter
    of the graph that checks its indices against the variable's rows (the writes come
    last in the schedule, so every scatter's indices are computed by then). The
    scatters then cannot fail, and each update before them may be in place
    (``GraphCompiler.in_place_updates``): a partitioned table's shards and a sparse
    AdaGrad's slots, whose indices the compiler cannot prove in range."""
    done = "var scatters checked"  # (the compiler is the graph's own)
    checked = graph_compiler.comp.checked_indices
    if done in checked:
        return
    checked.add(done)
    for op in graph_compiler.graph.ops:
        if op.kind not in ("var.scatter_add", "var.scatter_sub"):
            continue
        rows = graph_compiler.module.variables[op.attrs["var"]].type.shape[0]
        indices = op.inputs[0]
        key = ("scatter rows", indices, rows)
        if not isinstance(rows, int) or key in checked:
            continue
        kernel = graph_compiler.kernel("scatter_check", [indices])
        kernel.whole()
        code = graph_compiler.comp.error(scatter_error(op.kind, "{value}", "{int0}"), op.loc)
        _check_rows(kernel, indices, irutil.i64(rows), code)
        kernel.finish()
        checked.add(key)


def lower_scatter_add(graph_compiler, op: Op) -> None:
    dense, indices, updates = op.inputs
    scatter_rows(graph_compiler, dense, op.result, indices, updates, 1, op)


# ---- first occurrences (``first_occurrence``) -------------------------------------------------

_HASH = 0x9E3779B97F4A7C15  # Fibonacci hashing's multiplier (2**64 / golden ratio)


def first_occurrence_slots(n: int) -> int:
    """Slots of ``first_occurrence``'s hash table: the smallest power of two >= 2n, so
    the table is at most half full and a probe ends after a few slots."""
    return 1 << (max(2 * n, 2) - 1).bit_length()


def lower_first_occurrence(graph_compiler, op: Op) -> None:
    """Per position, the first masked-in position of the same index, in O(n): an
    open-addressing hash table in scratch (keys, then first positions, i64 each;
    position -1 marks an empty slot) filled by one pass over the masked-in positions in
    order (the first one of a key stays) and read by a second pass over all."""
    indices, mask = op.inputs
    out = op.result
    graph_compiler.comp.scratch.append(
        lambda binding: 16 * first_occurrence_slots(binding.size(indices)))
    scratch = Storage("scratch", 0)
    kernel = graph_compiler.kernel("first_occurrence", [indices, mask, out], [scratch])
    kernel.whole()
    b = kernel.b
    fn = b.function
    table = kernel.storage_ptr(scratch)
    n = kernel.size(indices)
    i64t = DType.i64
    ctlz = irutil.intrinsic(graph_compiler.comp.module, "llvm.ctlz.i64", irutil.I64,
                            [irutil.I64, irutil.I1])
    wanted = b.select(b.icmp_signed("<", n, irutil.i64(1)), irutil.i64(1), n)
    wanted = b.sub(b.shl(wanted, irutil.i64(1)), irutil.i64(1))  # max(2n, 2) - 1
    slots = b.shl(irutil.i64(1), b.sub(irutil.i64(64),
                                       b.call(ctlz, [wanted, ir.Constant(irutil.I1, 0)])))
    last = b.sub(slots, irutil.i64(1))
    empty = irutil.i64(-1)

    def key_at(i: ir.Value) -> ir.Value:
        return irutil.to_i64(b, irutil.load(b, kernel.ptr(indices), indices.dtype, i))

    def probe(key: ir.Value) -> tuple[ir.Value, ir.Value]:
        """The slot holding ``key`` or the empty slot where it goes, and its position."""
        mixed = b.mul(key, ir.Constant(irutil.I64, _HASH - (1 << 64)))
        start = b.and_(b.xor(mixed, b.lshr(mixed, irutil.i64(32))), last)
        pre = b.block
        head = fn.append_basic_block("probe.head")
        step = fn.append_basic_block("probe.next")
        done = fn.append_basic_block("probe.done")
        b.branch(head)
        b.position_at_end(head)
        slot = b.phi(irutil.I64)
        slot.add_incoming(start, pre)
        pos = irutil.load(b, table, i64t, b.add(slots, slot))
        hit = b.icmp_signed("==", irutil.load(b, table, i64t, slot), key)
        b.cbranch(b.or_(b.icmp_signed("==", pos, empty), hit), done, step)
        b.position_at_end(step)
        slot.add_incoming(b.and_(b.add(slot, irutil.i64(1)), last), step)
        b.branch(head)
        b.position_at_end(done)
        return slot, pos

    def clear(j: ir.Value, _c) -> None:
        irutil.store(b, table, i64t, b.add(slots, j), empty)

    def insert(i: ir.Value, _c) -> None:
        m = irutil.load(b, kernel.ptr(mask), mask.dtype, i)
        kept = (b.fcmp_unordered("!=", m, ir.Constant(m.type, 0.0)) if mask.dtype.is_float
                else b.icmp_unsigned("!=", m, ir.Constant(m.type, 0)))
        with b.if_then(kept):
            key = key_at(i)
            slot, pos = probe(key)
            with b.if_then(b.icmp_signed("==", pos, empty)):
                irutil.store(b, table, i64t, slot, key)
                irutil.store(b, table, i64t, b.add(slots, slot), i)

    def look_up(i: ir.Value, _c) -> None:
        _, pos = probe(key_at(i))
        first = b.select(b.icmp_signed("==", pos, empty), ZERO, pos)
        t = irutil.storage_type(out.dtype)
        irutil.store(b, kernel.ptr(out), out.dtype, i,
                     first if t == irutil.I64 else b.trunc(first, t))

    irutil.loop(b, ZERO, slots, clear, name="t")
    irutil.loop(b, ZERO, n, insert, name="i")
    irutil.loop(b, ZERO, n, look_up, name="l")
    kernel.finish()


# ---- arg-reductions ---------------------------------------------------------------------------

def lower_argreduce(graph_compiler, op: Op) -> None:
    x = op.inputs[0]
    out = op.result
    kernel = graph_compiler.kernel(op.kind, [x, out])
    b = kernel.b
    rank = x.type.rank
    axis = normalize_axis(op.kind, op.attrs["axis"], rank)
    xd = kernel.dims(x)
    od = kernel.dims(out)
    stride = irutil.product(b, xd[axis + 1:])
    n = xd[axis]
    better = ">" if op.kind == "argmax" else "<"
    if od:
        key, fn = dim_key(out, 0)
        lo, hi = kernel.extent_of([od[0]], key, fn, x)
        bounds = [(lo, hi)] + [(ZERO, d) for d in od[1:]]
    else:
        kernel.extent_of([], "one", lambda binding: 1)
        bounds = []

    def body(idx, _c) -> None:
        full = list(idx[:axis]) + [ZERO] + list(idx[axis:])
        base = _offset(b, full, xd)
        first = irutil.load(b, kernel.ptr(x), x.dtype, base)

        def scan(j, acc):
            best, at = acc
            v = irutil.load(b, kernel.ptr(x), x.dtype, b.add(base, b.mul(j, stride)))
            if x.dtype.is_float:
                wins = b.or_(b.fcmp_ordered(better, v, best),
                             b.and_(b.fcmp_unordered("uno", v, v),
                                    b.fcmp_ordered("ord", best, best)))
            elif x.dtype is DType.bool:
                wins = b.icmp_unsigned(better, v, best)
            else:
                wins = b.icmp_signed(better, v, best)
            return [b.select(wins, v, best), b.select(wins, j, at)]

        _, at = irutil.loop(b, irutil.i64(1), n, scan, [first, ZERO], name="j")
        irutil.store(b, kernel.ptr(out), out.dtype, _offset(b, idx, od),
                     irutil.to_i64(b, at) if out.dtype is DType.i64 else b.trunc(at, irutil.I32))

    irutil.loop_nest(b, bounds, body)
    kernel.finish()


# ---- joining and splitting --------------------------------------------------------------------

def lower_concat(graph_compiler, op: Op) -> None:
    out = op.result
    stack = op.kind == "stack"
    rank = out.type.rank
    axis = (op.attrs["axis"] % rank) if rank else 0
    kernel = graph_compiler.kernel(op.kind, [*op.inputs, out])
    kernel.whole()
    b = kernel.b
    od = kernel.dims(out)
    start: ir.Value = ZERO
    for j, x in enumerate(op.inputs):
        xd = kernel.dims(x)

        def body(idx, _c, x=x, start=start, j=j) -> None:
            if stack:
                oidx = list(idx[:axis]) + [irutil.i64(j)] + list(idx[axis:])
            else:
                oidx = list(idx)
                oidx[axis] = b.add(idx[axis], start)
            v = irutil.load(b, kernel.ptr(x), x.dtype, _offset(b, idx, xd))
            irutil.store(b, kernel.ptr(out), out.dtype, _offset(b, oidx, od), v)

        _nest(kernel, xd, body, name=f"c{j}_")
        if not stack:
            start = b.add(start, xd[axis])
    kernel.finish()


def lower_split(graph_compiler, op: Op) -> None:
    x = op.inputs[0]
    axis = normalize_axis(op.kind, op.attrs["axis"], x.type.rank)
    kernel = graph_compiler.kernel(op.kind, [x, *op.results])
    kernel.whole()
    b = kernel.b
    xd = kernel.dims(x)
    start: ir.Value = ZERO
    for j, r in enumerate(op.results):
        rd = kernel.dims(r)

        def body(idx, _c, r=r, start=start) -> None:
            iidx = list(idx)
            iidx[axis] = b.add(idx[axis], start)
            v = irutil.load(b, kernel.ptr(x), x.dtype, _offset(b, iidx, xd))
            irutil.store(b, kernel.ptr(r), r.dtype, _offset(b, idx, rd), v)

        _nest(kernel, rd, body, name=f"s{j}_")
        start = b.add(start, rd[axis])
    kernel.finish()


# ---- shapes ------------------------------------------------------------------------------------

def lower_shape(graph_compiler, op: Op) -> None:
    x, out = op.inputs[0], op.result
    kernel = graph_compiler.kernel(op.kind, [out])
    kernel.whole()
    b = kernel.b
    if op.kind == "rank":
        irutil.store(b, kernel.ptr(out), out.dtype, ZERO, ir.Constant(irutil.I32, x.type.rank))
    else:
        for a in range(x.type.rank):
            d = kernel.dim(x, a)
            irutil.store(b, kernel.ptr(out), out.dtype, irutil.i64(a),
                         d if out.dtype is DType.i64 else b.trunc(d, irutil.I32))
    kernel.finish()


# ---- pooling -------------------------------------------------------------------------------------

# Windows of at most this many taps are emitted tap by tap (straight-line code): the O3
# pipeline here does not unroll loops, and a window loop left inside the channel loop
# keeps the vectorizer off it. Larger windows keep an LLVM loop.
MAX_UNROLLED_TAPS = 64


def _window(op: Op) -> tuple[tuple[int, int], tuple[int, int]]:
    k = spatial_attr(op.kind, "ksize", op.attrs["ksize"])
    s = k if op.attrs["strides"] is None else spatial_attr(op.kind, "strides",
                                                           op.attrs["strides"])
    return k, s


def pad_before(kernel: Kernel, op: Op, image: Value, axis: int, k: int, s: int,
               dilation: int = 1) -> ir.Value:
    """Padding before ``image``'s spatial ``axis`` (1 or 2) for this window op."""
    padding = op.attrs["padding"]
    d = image.type.shape[axis]
    if isinstance(d, int):
        return irutil.i64(window_padding(op.kind, d, k, s, dilation, padding)[1])

    def fn(binding: Binding, image=image, axis=axis) -> int:
        return window_padding(op.kind, binding.shapes[image][axis], k, s, dilation, padding)[1]
    return kernel.param(("pad", id(image), axis, k, s, dilation, padding), fn)


def _pads(kernel: Kernel, op: Op, image: Value) -> tuple[ir.Value, ir.Value]:
    """Padding before ``image``'s rows and columns for pooling op ``op``."""
    (kh, kw), (sh, sw) = _window(op)
    return pad_before(kernel, op, image, 1, kh, sh), pad_before(kernel, op, image, 2, kw, sw)


def _origin(b: ir.IRBuilder, op: Op, ho: ir.Value, wo: ir.Value,
            pads: tuple[ir.Value, ir.Value]) -> tuple[ir.Value, ir.Value]:
    """The first input pixel (row, column) of output (``ho``, ``wo``)'s window; it may
    lie in the padding."""
    _, (sh, sw) = _window(op)
    return b.sub(b.mul(ho, irutil.i64(sh)), pads[0]), b.sub(b.mul(wo, irutil.i64(sw)), pads[1])


def fold_window(b: ir.IRBuilder, kh: int, kw: int, fn, init: list[ir.Value],
                name: str = "w") -> list[ir.Value]:
    """``fn(i, j, acc) -> acc`` over the taps of a ``kh x kw`` window in row-major order
    (``i``, ``j`` are i64 values): unrolled for small windows, else a loop nest."""
    if kh * kw <= MAX_UNROLLED_TAPS:
        acc = list(init)
        for i in range(kh):
            for j in range(kw):
                acc = list(fn(irutil.i64(i), irutil.i64(j), acc))
        return acc
    return irutil.loop_nest(b, [(ZERO, irutil.i64(kh)), (ZERO, irutil.i64(kw))],
                            lambda ij, acc: fn(ij[0], ij[1], acc), init, name=name)


def inside(b: ir.IRBuilder, hi: ir.Value, wi: ir.Value, xd) -> ir.Value:
    """Whether (``hi``, ``wi``) is a pixel of an image with dims ``xd`` (NHWC)."""
    return b.and_(b.and_(b.icmp_signed(">=", hi, ZERO), b.icmp_signed("<", hi, xd[1])),
                  b.and_(b.icmp_signed(">=", wi, ZERO), b.icmp_signed("<", wi, xd[2])))


# An f16 window max is a signed i16 max of order keys. The key of the bits x (as an i16)
# is ``(x ^ ((x >> 15) & 0x7fff)) - 0x3ff``, wrapping: the xor orders the non-NaN values
# as the floats (-0 just below +0, -inf 0x3ff above INT16_MIN), and the subtraction wraps
# the 0x3ff keys below -inf's, the NaNs with the sign bit set, to the top, beside the
# other NaNs, above +inf. The map is a bijection, so a window's max key is one of its
# values, bit for bit: the float maximum, a NaN winning and +0 beating -0 (the rule of
# llvm.maximum). Four integer ops and a max per tap, 16 lanes to a ymm register. The f16
# compares and selects in f32 that this replaces took two registers per 16 lanes and ~12
# ops per tap (a 3x3 stride 1 f16 max_pool ran 3x the f32 one), and llvm.maximum.f16
# stays scalar on AVX2 (InstCombine narrows ``maximum.f32(fpext, fpext)`` back to it).
# f32 keys (i32, 8 lanes) measured no faster than llvm.maximum.f32 (maxps and blends,
# also 8 lanes), so f32 and f64 keep the intrinsic.
_I16 = ir.IntType(16)
_KEY_LOWEST = ir.Constant(_I16, -(1 << 15))  # the key of -inf: what padding contributes
_NAN_SHIFT = ir.Constant(_I16, 0x3FF)


def _key_flip(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """``bits ^ ((bits >> 15) & 0x7fff)``: its own inverse."""
    sign = b.ashr(bits, ir.Constant(_I16, 15))
    return b.xor(bits, b.and_(sign, ir.Constant(_I16, 0x7FFF)))


def _order_key(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The order key of the f16 value ``x``, held in f32 (exactly, so the fptrunc folds
    away against the load's fpext)."""
    return b.sub(_key_flip(b, b.bitcast(b.fptrunc(x, irutil.F16), _I16)), _NAN_SHIFT)


def _of_order_key(b: ir.IRBuilder, key: ir.Value) -> ir.Value:
    """The f16 value (held in f32) whose order key is ``key``."""
    return b.fpext(b.bitcast(_key_flip(b, b.add(key, _NAN_SHIFT)), irutil.F16), irutil.F32)


def _pool_rule(emitter: Emitter, op: Op, v: Value, idx) -> ir.Value:
    """One output element of max_pool / avg_pool: a fold over its window."""
    x = op.inputs[0]
    kernel, b = emitter.kernel, emitter.b
    (kh, kw), _ = _window(op)
    n, ho, wo, c = idx
    xd = kernel.dims(x)
    h0, w0 = _origin(b, op, ho, wo, _pads(kernel, op, x))
    dt = x.dtype
    is_max = op.kind == "max_pool"
    keyed = is_max and dt is DType.f16
    if keyed:
        init = _KEY_LOWEST
        smax = irutil.intrinsic(b.module, "llvm.smax.i16", _I16, [_I16, _I16])
    elif is_max:
        init = (float_limits(irutil.compute_type(dt))[0] if dt.is_float
                else ir.Constant(irutil.compute_type(dt),
                                 -(1 << (irutil.compute_type(dt).width - 1))))
    else:
        init = ir.Constant(irutil.compute_type(dt), 0.0)

    def win(i, j, acc):
        hi, wi = b.add(h0, i), b.add(w0, j)
        ok = inside(b, hi, wi, xd)
        hc = b.select(ok, hi, ZERO)
        wc = b.select(ok, wi, ZERO)
        emitter.push()
        val = emitter.value(x, (n, hc, wc, c))
        emitter.pop()
        if keyed:
            key = b.select(ok, _order_key(b, val), init)
            return [b.call(smax, [acc[0], key]), acc[1]]
        if is_max:
            return [b.select(ok, combine(b, "max", dt, acc[0], val), acc[0]), acc[1]]
        return [b.select(ok, b.fadd(acc[0], val, flags=irutil.FAST), acc[0]),
                b.add(acc[1], b.zext(ok, irutil.I64))]

    acc, count = fold_window(b, kh, kw, win, [init, ZERO])
    if keyed:
        return _of_order_key(b, acc)
    if is_max:
        return acc
    return b.fdiv(acc, b.sitofp(count, acc.type))


EXTRA_RULES["max_pool"] = _pool_rule
EXTRA_RULES["avg_pool"] = _pool_rule


def _pool_grad_grad_rule(emitter: Emitter, op: Op, v: Value, idx) -> ir.Value:
    """One element of ``max_pool_grad_grad(x, y, g)``: ``g`` at the first maximum of
    this window of ``x`` — ``max_pool_grad``'s walk and tie rule (row-major taps, a NaN
    wins, padding is -inf and takes part; ``g`` is 0 there, as the reference's zero-padded
    ``g``). Only loads and selects, so f16 is exact."""
    x, _y, g = op.inputs
    kernel, b = emitter.kernel, emitter.b
    (kh, kw), _ = _window(op)
    n, ho, wo, c = idx
    xd = kernel.dims(x)
    h0, w0 = _origin(b, op, ho, wo, _pads(kernel, op, x))
    ct = irutil.compute_type(x.dtype)
    lowest, zero = float_limits(ct)[0], ir.Constant(ct, 0.0)

    def win(i, j, acc):
        best, picked, first = acc
        hi, wi = b.add(h0, i), b.add(w0, j)
        ok = inside(b, hi, wi, xd)
        at = (n, b.select(ok, hi, ZERO), b.select(ok, wi, ZERO), c)
        emitter.push()
        xv, gv = emitter.value(x, at), emitter.value(g, at)
        emitter.pop()
        xv, gv = b.select(ok, xv, lowest), b.select(ok, gv, zero)
        wins = b.and_(b.fcmp_unordered(">", xv, best), b.fcmp_ordered("ord", best, best))
        take = b.or_(first, wins)
        return [b.select(take, xv, best), b.select(take, gv, picked), ir.Constant(irutil.I1, 0)]

    _, picked, _ = fold_window(b, kh, kw, win, [lowest, zero, ir.Constant(irutil.I1, 1)])
    return picked


EXTRA_RULES["max_pool_grad_grad"] = _pool_grad_grad_rule


def _window_taps(b: ir.IRBuilder, n: ir.Value, origin: tuple[ir.Value, ir.Value],
                 taps: list[tuple[int, int]], xd) -> tuple[list[ir.Value], list[ir.Value]]:
    """Per tap of the window at ``origin`` of image ``n``: whether it is a pixel, and the
    flat offset of its channel 0 (of pixel (0, 0) where it is padding)."""
    h0, w0 = origin
    oks, offs = [], []
    for i, j in taps:
        hi, wi = b.add(h0, irutil.i64(i)), b.add(w0, irutil.i64(j))
        ok = inside(b, hi, wi, xd)
        oks.append(ok)
        offs.append(irutil.linear(b, [n, b.select(ok, hi, ZERO), b.select(ok, wi, ZERO), ZERO], xd))
    return oks, offs


def lower_pool_grad(graph_compiler, op: Op) -> None:
    """``max_pool_grad(x, y, dy)`` / ``avg_pool_grad(dy, like)``.

    Split over images. Overlapping windows (stride < window on an axis) gather per pixel
    (``_pool_grad_gather``); windows of more than ``MAX_UNROLLED_TAPS`` taps take loops
    (``_pool_grad_loops``). Windows that do not overlap scatter: per window position,
    the taps' offsets and whether each is a real pixel are computed once; then a loop
    over the channels (unit stride, vectorized) computes every tap's share of the
    gradient — for max, the first maximum of the window takes ``dy``, as
    ``max_positions`` of the reference (padding is -inf and can win) — and *stores* it,
    zeros included, so when the windows also tile the image exactly nothing else is
    written (else the image is zeroed first). Windows wholly inside the image take a
    branch with no per-tap checks. f16 shares are computed in f32 and each is the only
    one its pixel gets, so it is rounded once."""
    is_max = op.kind == "max_pool_grad"
    if is_max:
        x, _y, dy = op.inputs
        image = x
        values = [x, dy, op.result]
    else:
        dy, image = op.inputs
        x = None
        values = [dy, op.result]
    out = op.result
    (kh, kw), (sh, sw) = _window(op)
    if kh * kw > MAX_UNROLLED_TAPS:
        _pool_grad_loops(graph_compiler, op, image, x, dy, values)
        return
    if sh < kh or sw < kw:
        _pool_grad_gather(graph_compiler, op, image, x, dy)
        return
    acc = _Accumulator(graph_compiler, out, wide=False)
    kernel = graph_compiler.kernel(op.kind, values, acc.extra)
    acc.bind(kernel)
    b = kernel.b
    xd = kernel.dims(image)
    dd = kernel.dims(dy)
    dt = out.dtype
    ct = irutil.compute_type(dt)
    zero = ir.Constant(ct, 0.0)
    h, w = image.type.shape[1], image.type.shape[2]
    tiled = ((sh, sw) == (kh, kw) and isinstance(h, int) and isinstance(w, int)
             and h % kh == 0 and w % kw == 0)
    key, fn = dim_key(image, 0)
    lo, hi = kernel.extent_of([xd[0]], key, fn, out)
    pads = _pads(kernel, op, image)
    plane = irutil.product(b, xd[1:])
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    lowest = float_limits(ct)[0]

    def per_image(n, _c) -> None:
        base = irutil.mul(b, n, plane)
        if not tiled:
            acc.zero(base, plane)

        def per_window(idx, _c2) -> None:
            ho, wo = idx
            oks, offs = _window_taps(b, n, _origin(b, op, ho, wo, pads), taps, xd)
            all_ok = oks[0]
            for ok in oks[1:]:
                all_ok = b.and_(all_ok, ok)
            dbase = irutil.linear(b, [n, ho, wo, ZERO], dd)
            inv = None
            if not is_max:
                cnt = ZERO
                for ok in oks:
                    cnt = b.add(cnt, b.zext(ok, irutil.I64))
                cnt = b.select(b.icmp_signed("==", cnt, ZERO), irutil.i64(1), cnt)
                inv = b.sitofp(cnt, ct)

            def channels(checked: bool) -> None:
                def chan(c, _c3) -> None:
                    g = irutil.load(b, kernel.ptr(dy), dt, b.add(dbase, c))
                    if is_max:
                        vals = [irutil.load(b, kernel.ptr(x), dt, b.add(off, c)) for off in offs]
                        if checked:
                            vals = [b.select(ok, v, lowest) for ok, v in zip(oks, vals)]
                        arg = _first_max(b, vals)
                        shares = [b.select(b.icmp_signed("==", arg, ir.Constant(irutil.I32, p)),
                                           g, zero) for p in range(len(taps))]
                    else:
                        s = b.fdiv(g, inv)
                        shares = [s] * len(taps)
                    for ok, off, s in zip(oks, offs, shares):
                        at = b.add(off, c)
                        if checked:
                            with b.if_then(ok):
                                acc.store(at, s)
                        else:
                            acc.store(at, s)

                irutil.loop(b, ZERO, xd[3], chan, name="c")

            with b.if_else(all_ok) as (fast, slow):
                with fast:
                    channels(False)
                with slow:
                    channels(True)

        irutil.loop_nest(b, [(ZERO, dd[1]), (ZERO, dd[2])], per_window, name="o")
        acc.narrow(base, plane)

    irutil.loop(b, lo, hi, per_image, name="n")
    kernel.finish()


def _first_max(b: ir.IRBuilder, values: list[ir.Value]) -> ir.Value:
    """The position (i32) of the first maximum of ``values`` in their order: a later value
    wins when it is greater or a NaN, and nothing beats a NaN (the reference's tie rule)."""
    best, arg = values[0], ir.Constant(irutil.I32, 0)
    for p, v in enumerate(values[1:], 1):
        take = b.and_(b.fcmp_unordered(">", v, best), b.fcmp_ordered("ord", best, best))
        best = b.select(take, v, best)
        arg = b.select(take, ir.Constant(irutil.I32, p), arg)
    return arg


def _candidates(b: ir.IRBuilder, pos: ir.Value, pad: ir.Value, k: int, s: int,
                count: ir.Value) -> list[tuple[ir.Value, ir.Value, ir.Value]]:
    """Along one spatial axis, the windows that can hold pixel ``pos``, first window
    first: ``(window, tap, real)``, where ``tap`` is the pixel's place in that window and
    ``real`` whether the window exists (``0 <= window < count``) and holds the pixel
    (``tap < k``). There are ``ceil(k / s)`` of them; ``window`` is clamped to 0 where
    not ``real``, so loads through it stay in bounds."""
    t = -(-k // s)
    pp = b.add(pos, pad)  # >= 0: padding before is never negative
    q = b.udiv(pp, irutil.i64(s))
    r = b.sub(pp, b.mul(q, irutil.i64(s)))
    out = []
    for back in range(t - 1, -1, -1):
        win = b.sub(q, irutil.i64(back))
        tap = b.add(r, irutil.i64(back * s))
        real = b.and_(b.and_(b.icmp_signed(">=", win, ZERO), b.icmp_signed("<", win, count)),
                      b.icmp_signed("<", tap, irutil.i64(k)))
        out.append((b.select(real, win, ZERO), tap, real))
    return out


def _pool_grad_gather(graph_compiler, op: Op, image: Value, x: Value | None, dy: Value) -> None:
    """Pool gradients of overlapping windows, in two passes per image, neither of which
    writes where another tap reads (so both vectorize over channels with no run-time
    overlap checks, and nothing is read back from memory it just wrote):

    1. per window and channel, what the window hands out, in scratch: for max, the tap
       of its first maximum (an i8; padding is -inf and takes part, as in the
       reference); for avg, its share ``dy / count`` in the compute type;
    2. per pixel and channel, the sum over the windows that hold the pixel (at most
       ``ceil(k/s)`` per axis, found arithmetically) of what each hands the pixel, in
       window order, made in the compute type (f32 for f16) and rounded once when
       stored, as the reference.

    Scattering per window instead (read-modify-write of the result at every tap) left
    LLVM run-time overlap checks between the taps' rows that always failed, so the whole
    channel loop ran scalar, with a branch per tap (max: ~10x avg_pool_grad)."""
    is_max = x is not None
    out = op.result
    (kh, kw), (sh, sw) = _window(op)
    dt = out.dtype
    ct = irutil.compute_type(dt)
    # what pass 1 leaves per window and channel: max, the winning tap; avg, the share
    sdt = DType.i32 if is_max else (DType.f64 if dt is DType.f64 else DType.f32)
    width = sdt.itemsize
    graph_compiler.comp.scratch.append(lambda binding: width * binding.size(dy))
    scratch = Storage("scratch", 0)
    kernel = graph_compiler.kernel(op.kind, [v for v in (x, dy, out) if v is not None], [scratch])
    sp = kernel.storage_ptr(scratch)
    b = kernel.b
    xd, dd = kernel.dims(image), kernel.dims(dy)
    zero = ir.Constant(ct, 0.0)
    lowest = float_limits(ct)[0]
    key, fn = dim_key(image, 0)
    lo, hi = kernel.extent_of([xd[0]], key, fn, out)
    ph, pw = pads = _pads(kernel, op, image)
    taps = [(i, j) for i in range(kh) for j in range(kw)]

    def per_image(n, _c) -> None:
        def per_window(idx, _c2) -> None:
            ho, wo = idx
            oks, offs = _window_taps(b, n, _origin(b, op, ho, wo, pads), taps, xd)
            dbase = irutil.linear(b, [n, ho, wo, ZERO], dd)
            if not is_max:
                cnt = ZERO
                for ok in oks:
                    cnt = b.add(cnt, b.zext(ok, irutil.I64))
                cnt = b.sitofp(b.select(b.icmp_signed("==", cnt, ZERO), irutil.i64(1), cnt), ct)

            def chan(c, _c3) -> None:
                at = b.add(dbase, c)
                if is_max:
                    vals = [b.select(ok, irutil.load(b, kernel.ptr(x), dt, b.add(off, c)), lowest)
                            for ok, off in zip(oks, offs)]
                    irutil.store(b, sp, DType.i32, at, _first_max(b, vals))
                else:
                    irutil.store(b, sp, sdt, at,
                                 b.fdiv(irutil.load(b, kernel.ptr(dy), dt, at), cnt))

            irutil.loop(b, ZERO, xd[3], chan, name="c")

        irutil.loop_nest(b, [(ZERO, dd[1]), (ZERO, dd[2])], per_window, name="o")

        def per_pixel(idx, _c2) -> None:
            h, w = idx
            rows = _candidates(b, h, ph, kh, sh, dd[1])
            cols = _candidates(b, w, pw, kw, sw, dd[2])
            cands, any_real = [], ir.Constant(irutil.I1, 0)
            for ho, i, real_h in rows:
                for wo, j, real_w in cols:
                    real = b.and_(real_h, real_w)
                    any_real = b.or_(any_real, real)
                    # a window that does not hold the pixel names a tap no window has
                    tap = b.select(real, b.trunc(b.add(b.mul(i, irutil.i64(kw)), j), irutil.I32),
                                   ir.Constant(irutil.I32, -1))
                    cands.append((real, tap, irutil.linear(b, [n, ho, wo, ZERO], dd)))
            obase = irutil.linear(b, [n, h, w, ZERO], xd)

            def gather(c, _c3) -> None:
                s = zero
                for real, tap, off in cands:
                    at = b.add(off, c)
                    if is_max:
                        a = irutil.load(b, sp, DType.i32, at)
                        share = irutil.load(b, kernel.ptr(dy), dt, at)
                        real = b.icmp_unsigned("==", a, tap)
                    else:
                        share = irutil.load(b, sp, sdt, at)
                    s = b.fadd(s, b.select(real, share, zero))
                irutil.store(b, kernel.ptr(out), dt, b.add(obase, c), s)

            def clear(c, _c3) -> None:
                irutil.store(b, kernel.ptr(out), dt, b.add(obase, c), zero)

            # a pixel that no window holds (VALID's last rows, gaps) is 0; the branch
            # also keeps the loads away from an empty dy
            with b.if_else(any_real) as (then, other):
                with then:
                    irutil.loop(b, ZERO, xd[3], gather, name="c")
                with other:
                    irutil.loop(b, ZERO, xd[3], clear, name="z")

        irutil.loop_nest(b, [(ZERO, xd[1]), (ZERO, xd[2])], per_pixel, name="p")

    irutil.loop(b, lo, hi, per_image, name="n")
    kernel.finish()


class _Accumulator:
    """Where a pool gradient's sums are made: the result itself, or (f16 result and
    ``wide``: several shares add up per pixel) f32 scratch shaped like the result, whose
    sums ``narrow`` rounds to f16 once, as the reference rounds its f32/f64 sums."""

    def __init__(self, graph_compiler, out: Value, wide: bool) -> None:
        self.out = out
        self.wide = wide and out.dtype is DType.f16
        self.extra: list[Storage] = []
        if self.wide:
            graph_compiler.comp.scratch.append(lambda binding, out=out: 4 * binding.size(out))
            self.extra = [Storage("scratch", 0)]
        self.dt = DType.f32 if self.wide else out.dtype

    def bind(self, kernel: Kernel) -> None:
        self.kernel, self.b = kernel, kernel.b
        self.ptr = kernel.storage_ptr(self.extra[0]) if self.wide else kernel.ptr(self.out)

    def zero(self, base: ir.Value, count: ir.Value) -> None:
        """Zero ``count`` sums from ``base`` on."""
        b, zero = self.b, ir.Constant(irutil.compute_type(self.dt), 0.0)
        irutil.loop(b, ZERO, count,
                    lambda i, _c: irutil.store(b, self.ptr, self.dt, b.add(base, i), zero),
                    name="z")

    def store(self, at: ir.Value, v: ir.Value) -> None:
        irutil.store(self.b, self.ptr, self.dt, at, v)

    def add(self, at: ir.Value, v: ir.Value) -> None:
        b = self.b
        irutil.store(b, self.ptr, self.dt, at, b.fadd(irutil.load(b, self.ptr, self.dt, at), v))

    def narrow(self, base: ir.Value, count: ir.Value) -> None:
        """Round ``count`` sums from ``base`` on into the result (f16 only)."""
        if not self.wide:
            return
        b, f32 = self.b, DType.f32

        def body(i: ir.Value, _c) -> None:
            at = b.add(base, i)
            irutil.store(b, self.kernel.ptr(self.out), self.out.dtype, at,
                         irutil.load(b, self.ptr, f32, at))
        irutil.loop(b, ZERO, count, body, name="nw")


def _pool_grad_loops(graph_compiler, op: Op, image: Value, x: Value | None, dy: Value,
                     values: list[Value]) -> None:
    """Pool gradients of large windows: zero the result, then per window and channel a
    loop over the taps (max: find the first maximum, add ``dy`` there; avg: add the
    share to every real tap)."""
    is_max = x is not None
    out = op.result
    acc = _Accumulator(graph_compiler, out, wide=True)
    kernel = graph_compiler.kernel(op.kind, values, acc.extra)
    acc.bind(kernel)
    kernel.whole()
    b = kernel.b
    (kh, kw), _ = _window(op)
    xd = kernel.dims(image)
    dd = kernel.dims(dy)
    dt = out.dtype
    acc.zero(ZERO, kernel.size(out))
    pads = _pads(kernel, op, image)
    bounds = [(ZERO, irutil.i64(kh)), (ZERO, irutil.i64(kw))]

    def per_out(idx, _c) -> None:
        n, ho, wo, c = idx
        g = irutil.load(b, kernel.ptr(dy), dt, _offset(b, idx, dd))
        h0, w0 = _origin(b, op, ho, wo, pads)

        def inside_at(i, j):
            hi_, wi_ = b.add(h0, i), b.add(w0, j)
            ok = inside(b, hi_, wi_, xd)
            off = _offset(b, [n, b.select(ok, hi_, ZERO), b.select(ok, wi_, ZERO), c], xd)
            return ok, off

        if is_max:
            lowest = float_limits(irutil.compute_type(dt))[0]

            def scan(ij, acc):  # padding is -inf and takes part, as in the reference
                ok, off = inside_at(*ij)
                v = b.select(ok, irutil.load(b, kernel.ptr(x), dt, off), lowest)
                first = b.icmp_signed("<", acc[1], ZERO)
                wins = b.and_(b.fcmp_unordered(">", v, acc[0]),
                              b.fcmp_ordered("ord", acc[0], acc[0]))
                take = b.or_(first, wins)
                return [b.select(take, v, acc[0]), b.select(take, off, acc[1]),
                        b.select(take, ok, acc[2])]

            _, at, real = irutil.loop_nest(b, bounds, scan, [lowest, irutil.i64(-1),
                                                       ir.Constant(irutil.I1, 0)], name="w")
            at = b.select(real, at, ZERO)
            with b.if_then(real):
                acc.add(at, g)
            return

        def count(ij, acc):
            ok, _ = inside_at(*ij)
            return [b.add(acc[0], b.zext(ok, irutil.I64))]

        (cnt,) = irutil.loop_nest(b, bounds, count, [ZERO], name="n")
        share = b.fdiv(g, b.sitofp(b.select(b.icmp_signed("==", cnt, ZERO), irutil.i64(1), cnt),
                                   g.type))

        def spread(ij, _acc):
            ok, off = inside_at(*ij)
            with b.if_then(ok):
                acc.add(off, share)

        irutil.loop_nest(b, bounds, spread, name="a")

    _nest(kernel, dd, per_out, name="o")
    acc.narrow(ZERO, kernel.size(out))
    kernel.finish()


# ---- scans and sorts (tfc.ops.scan_sort) ----------------------------------------------------

def _rows(kernel: Kernel, x: Value, axis: int) -> list[tuple[ir.Value, ir.Value]]:
    """Loop bounds over every axis of ``x`` but ``axis`` (the first split across threads)."""
    xd = kernel.dims(x)
    outer = [a for a in range(x.type.rank) if a != axis]
    if not outer:
        kernel.extent_of([], "one", lambda binding: 1)
        return []
    key, fn = dim_key(x, outer[0])
    lo, hi = kernel.extent_of([xd[outer[0]]], key, fn, x)
    return [(lo, hi)] + [(ZERO, xd[a]) for a in outer[1:]]


def lower_scan(graph_compiler, op: Op) -> None:
    """``cumsum`` / ``cumprod``: per row, one pass along the axis in order (from its end
    for ``reverse``), the running value stored before (``exclusive``) or after the element
    is taken in; f16 runs in f32 and rounds each result, as the reference."""
    x, out = op.inputs[0], op.result
    kernel = graph_compiler.kernel(op.kind, [x, out])
    b = kernel.b
    axis = normalize_axis(op.kind, op.attrs["axis"], x.type.rank)
    exclusive, reverse = op.attrs["exclusive"], op.attrs["reverse"]
    xd = kernel.dims(x)
    stride = irutil.product(b, xd[axis + 1:])
    n = xd[axis]
    dt = x.dtype
    prod = op.kind == "cumprod"
    if dt.is_float:
        step = b.fmul if prod else b.fadd
    else:
        step = b.mul if prod else b.add

    def row(idx, _c) -> None:
        base = _offset(b, list(idx[:axis]) + [ZERO] + list(idx[axis:]), xd)

        def along(j, acc):
            (run,) = acc
            pos = b.sub(b.sub(n, irutil.i64(1)), j) if reverse else j
            off = b.add(base, b.mul(pos, stride))
            nxt = step(run, irutil.load(b, kernel.ptr(x), dt, off))
            irutil.store(b, kernel.ptr(out), dt, off, run if exclusive else nxt)
            return [nxt]

        irutil.loop(b, ZERO, n, along, [irutil.const(dt, 1 if prod else 0)], name="j")

    irutil.loop_nest(b, _rows(kernel, x, axis), row)
    kernel.finish()


def _sort_before(b: ir.IRBuilder, dt: DType, a: ir.Value, c: ir.Value) -> tuple[ir.Value,
                                                                                   ir.Value]:
    """(a < c, a == c) in numpy's sort order: NaN above every number, NaNs equal."""
    if not dt.is_float:
        return b.icmp_signed("<", a, c), b.icmp_signed("==", a, c)
    a_nan, c_nan = b.fcmp_unordered("uno", a, a), b.fcmp_unordered("uno", c, c)
    lt = b.or_(b.fcmp_ordered("<", a, c), b.and_(b.not_(a_nan), c_nan))
    eq = b.or_(b.fcmp_ordered("==", a, c), b.and_(a_nan, c_nan))
    return lt, eq


# What one selection pass over a row costs in merge passes (``sort_selects``). Measured
# on f32 rows, one thread (top_k of k = 1..32, each path forced): equal at n = 1e3 and
# 1e4 (~7 ns an element either way), 1.0-1.6 at 1e5, ~1.8 at 1e6 (12 ms a selection pass,
# 6.9 ms a merge pass). The crossing k was ~10-16 everywhere; 1.5 keeps the wrong path
# within 1.5x of the right one from 1e3 to 1e6.
SELECT_PASS_COST = 1.5


def _min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def sort_passes(n: int) -> int:
    """Merge passes of a row of ``n``: widths 1, 2, 4 ... below ``n`` (ceil(log2 n))."""
    return (max(n, 1) - 1).bit_length()


def sort_selects(k: int, n: int) -> bool:
    """Whether ``sort`` keeping the first ``k`` (-1: all) of a row of ``n`` takes ``k``
    selection passes (``k * n`` comparisons, no scratch) rather than the merge sort
    (``n * ceil(log2 n)`` merge steps, then the first ``k``): only while ``k`` passes
    cost no more than the merge passes."""
    return k != -1 and k * SELECT_PASS_COST <= sort_passes(n)


def sort_scratch_bytes(x: Value, axis: int, k: int) -> Callable[[Binding], int]:
    """The merge sort's scratch per binding: per row, two buffers of indices (i32) and two
    of values (``x``'s dtype), each as long as the row; none where selection runs."""
    per = 2 * (4 + x.dtype.itemsize)

    def nbytes(binding: Binding) -> int:
        n = binding.shape(x)[axis]
        return 0 if sort_selects(k, n) else per * binding.size(x)

    return nbytes


def lower_sort(graph_compiler, op: Op) -> None:
    """``sort``, stable, per row (every axis of ``x`` but ``axis``, split across threads):

    - merge sort: the row's values and indices copied into the row's slab of scratch, then
      ``ceil(log2 n)`` bottom-up merge passes of runs of 1, 2, 4 ... between the slab's two
      halves; a merge takes the right run's element only when it comes strictly before the
      left one's (``_sort_before``; larger first when ``descending``), and every index of a
      left run is below those of the right one, so equal elements keep index order either
      way (NaN sorts last, or first descending, as numpy's). Then the first ``k`` (or all)
      of the row are copied out. ``n log n``;
    - the first ``k`` (``top_k``) while ``k`` is small (``sort_selects``): ``k`` selection
      passes, each taking the first element in that order that comes after the one the
      pass before took, so ``k * n`` comparisons and no scratch.

    For a symbolic axis the choice is a param of the binding."""
    x = op.inputs[0]
    vals, idxs = op.results
    axis = normalize_axis(op.kind, op.attrs["axis"], x.type.rank)
    k_attr = op.attrs["k"]
    n_static = x.type.shape[axis]
    if isinstance(n_static, int):
        paths = ["select" if sort_selects(k_attr, n_static) else "merge"]
    else:
        paths = ["merge"] if k_attr == -1 else ["select", "merge"]
    scratch: list[Storage] = []
    if "merge" in paths:
        graph_compiler.comp.scratch.append(sort_scratch_bytes(x, axis, k_attr))
        scratch = [Storage("scratch", 0)]
    kernel = graph_compiler.kernel(op.kind, [x, vals, idxs], scratch)
    b = kernel.b
    descending = op.attrs["descending"]
    xd, od = kernel.dims(x), kernel.dims(vals)
    xs = irutil.product(b, xd[axis + 1:])
    os_ = irutil.product(b, od[axis + 1:])
    n, k = xd[axis], od[axis]
    dt = x.dtype
    ptr = kernel.ptr(x)
    one = irutil.i64(1)

    def first(a: ir.Value, ia: ir.Value, c: ir.Value, ic: ir.Value) -> ir.Value:
        """Whether element (a at ia) comes before (c at ic) in the sorted order."""
        lt, eq = _sort_before(b, dt, c, a) if descending else _sort_before(b, dt, a, c)
        return b.or_(lt, b.and_(eq, b.icmp_signed("<", ia, ic)))

    def bases(idx) -> tuple[ir.Value, ir.Value]:
        full = list(idx[:axis]) + [ZERO] + list(idx[axis:])
        return _offset(b, full, xd), _offset(b, full, od)

    def select_row(idx, _c) -> None:
        xbase, obase = bases(idx)

        def one_pass(r, acc):
            prev_v, prev_i, have_prev = acc

            def scan(j, best):
                best_v, best_i, found = best
                xj = irutil.load(b, ptr, dt, b.add(xbase, b.mul(j, xs)))
                after = b.or_(b.not_(have_prev), first(prev_v, prev_i, xj, j))
                better = b.or_(b.not_(found), first(xj, j, best_v, best_i))
                take = b.and_(after, better)
                return [b.select(take, xj, best_v), b.select(take, j, best_i),
                        b.or_(found, take)]

            best_v, best_i, _ = irutil.loop(b, ZERO, n, scan, [prev_v, prev_i, irutil.const(
                DType.bool, False)], name="j")
            off = b.add(obase, b.mul(r, os_))
            irutil.store(b, kernel.ptr(vals), dt, off, best_v)
            irutil.store(b, kernel.ptr(idxs), DType.i32, off, b.trunc(best_i, irutil.I32))
            return [best_v, best_i, irutil.const(DType.bool, True)]

        irutil.loop(b, ZERO, k, one_pass, [irutil.const(dt, 0), ZERO,
                                            irutil.const(DType.bool, False)], name="r")

    def merge_row(idx, _c) -> None:
        xbase, obase = bases(idx)
        sp = kernel.storage_ptr(scratch[0])
        outer = [xd[a] for a in range(x.type.rank) if a != axis]
        # the row's slab: indices at [2rn, 2rn + 2n) of the i32 part, values at the same
        # elements of the value part (after 2 * size(x) i32s: aligned for every dtype)
        slab = b.mul(irutil.linear(b, idx, outer) if outer else ZERO, b.add(n, n))
        vbuf = b.gep(sp, [b.mul(kernel.size(x), irutil.i64(8))], inbounds=True,
                     source_etype=irutil.I8)

        def fill(j, _c2) -> None:
            at = b.add(slab, j)
            irutil.store(b, vbuf, dt, at, irutil.load(b, ptr, dt, b.add(xbase, b.mul(j, xs))))
            irutil.store(b, sp, DType.i32, at, b.trunc(j, irutil.I32))

        irutil.loop(b, ZERO, n, fill, name="j")
        ctlz = b.ctlz(b.sub(n, one), ir.Constant(irutil.I1, 0))
        passes = b.select(b.icmp_signed("<", n, irutil.i64(2)), ZERO,
                          b.sub(irutil.i64(64), ctlz))

        def one_pass(p, acc):
            src, dst = acc
            width = b.shl(one, p)
            span = b.shl(width, one)
            runs = b.udiv(b.add(n, b.sub(span, one)), span)

            def merge(t, _c2) -> None:
                lo = b.mul(t, span)
                mid = _min(b, b.add(lo, width), n)
                hi = _min(b, b.add(lo, span), n)
                last = b.sub(hi, one)

                def step(o, c):
                    i, j = c
                    has_i, has_j = b.icmp_signed("<", i, mid), b.icmp_signed("<", j, hi)
                    ai = b.add(src, _min(b, i, last))
                    aj = b.add(src, _min(b, j, last))
                    vi, vj = irutil.load(b, vbuf, dt, ai), irutil.load(b, vbuf, dt, aj)
                    lt, _ = _sort_before(b, dt, vi, vj) if descending else \
                        _sort_before(b, dt, vj, vi)
                    right = b.and_(has_j, b.or_(b.not_(has_i), lt))
                    at = b.add(dst, o)
                    irutil.store(b, vbuf, dt, at, b.select(right, vj, vi))
                    ii, ij = irutil.load(b, sp, DType.i32, ai), irutil.load(b, sp, DType.i32, aj)
                    irutil.store(b, sp, DType.i32, at, b.select(right, ij, ii))
                    step_i = b.zext(b.not_(right), irutil.I64)
                    return [b.add(i, step_i), b.add(j, b.zext(right, irutil.I64))]

                irutil.loop(b, lo, hi, step, [lo, mid], name="m")

            irutil.loop(b, ZERO, runs, merge, name="run")
            return [dst, src]

        src, _ = irutil.loop(b, ZERO, passes, one_pass, [slab, b.add(slab, n)], name="pass")

        def out(o, _c2) -> None:
            at, off = b.add(src, o), b.add(obase, b.mul(o, os_))
            irutil.store(b, kernel.ptr(vals), dt, off, irutil.load(b, vbuf, dt, at))
            irutil.store(b, kernel.ptr(idxs), DType.i32, off, irutil.load(b, sp, DType.i32, at))

        irutil.loop(b, ZERO, k, out, name="o")

    rows = _rows(kernel, x, axis)
    if len(paths) == 1:
        irutil.loop_nest(b, rows, select_row if paths == ["select"] else merge_row)
    else:
        key, fn = dim_key(x, axis)
        selects = kernel.param(("sort_selects", k_attr, key),
                               lambda binding, fn=fn: int(sort_selects(k_attr, fn(binding))))
        with b.if_else(b.icmp_signed("!=", selects, ZERO)) as (then, other):
            with then:
                irutil.loop_nest(b, rows, select_row)
            with other:
                irutil.loop_nest(b, rows, merge_row)
    kernel.finish()


LOWERINGS: dict[str, Callable] = {
    "scatter_add": lower_scatter_add,
    "first_occurrence": lower_first_occurrence,
    "argmax": lower_argreduce,
    "argmin": lower_argreduce,
    "concat": lower_concat,
    "stack": lower_concat,
    "split": lower_split,
    "shape": lower_shape,
    "rank": lower_shape,
    "max_pool_grad": lower_pool_grad,
    "avg_pool_grad": lower_pool_grad,
    "cumsum": lower_scan,
    "cumprod": lower_scan,
    "sort": lower_sort,
}
