"""Loop kernels: point-wise loops over an output, and reductions with their consumers.

**Point-wise** (``pointwise``): one loop nest per distinct output shape; the innermost
loop runs over the last axis with unit stride (broadcast inputs read index 0 along their
size-1 axes), so the loop vectorizer turns it into SIMD code. When every input is the
output's shape or a single element, the nest collapses to one flat loop.

**Reductions** (``reduction``): the ``fusion`` kinds *reduce* and *row* (and a lone
``sum``/``mean``/``max``/``min``/``prod``, and the decomposed softmax family). All
reductions of one kernel reduce the same axes R of same-shaped inputs; the other axes K
are kept. Two loop orders:

- *row order* (R holds the last axis, or consumers need the reduced values): loops over K
  outside; inside, one phase per reduction, in order, accumulating over R in registers
  (the accumulation vectorizes: adds are marked reassociable); later phases reuse earlier
  reduced values (softmax: max, then sum of exp(x - max), then the outputs);
  element-wise values are recomputed, never stored. Full-shaped outputs get a last phase
  over R; reduced outputs are stored once per K index.
- *accumulate order* (only reduced outputs, the last axis is kept, and no reduction
  reads another's result, e.g. a bias gradient ``sum(dy, axes=[0])``; a chain such as
  ``sum(log_softmax(x, 1), 1)`` needs the row order's phases): outputs start at the
  identity and every input element is folded into its output element, in memory order,
  so the inner loop is unit-stride on input and output alike.
- *column order* (the last axis is kept, consumers of the reduced values only at the
  reduced shape, no reduction reading another's; e.g. a bias gradient followed by an
  optimizer's update): one pass in memory order writes the full outputs and folds
  elements into accumulators in scratch, then a pass over the kept axes computes the
  reduced outputs. When the first axis is reduced with others (``split_rows``), each of
  its indices gets its own row of accumulators, so the pass splits across threads, and
  a second kernel folds the rows.

The outermost loop of a kernel takes its range from the kernel's ``lo``/``hi`` so the
thread pool can split it (row order over K; point-wise over the first axis or the flat
index; split column order over the first axis); accumulate-order and column-order
kernels otherwise run whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import llvmlite.ir as ir

from tfc.backends.llvm import irutil
from tfc.backends.llvm.context import Kernel, dim_key, size_of
from tfc.backends.llvm.kernels_expr import (FLAT_RULES, Emitter, Flat, is_elementwise,
                                            is_reduction, is_view, kind_has, small_constant)
from tfc.backends.llvm.kernels_scalar import Unsupported
from tfc.ir.core import Op, Value
from tfc.ir.registry import GENERATOR, normalize_axes
from tfc.ir.types import DType
from tfc.ops.fusion import core_shape

Pair = tuple[Value, Value]  # (value computed in the kernel, value whose storage gets it)


def flat_ok(emitter: Emitter, v: Value) -> bool:
    """Whether ``v`` can be computed at a flat index of its own shape: every value it is
    computed from in the kernel can (walked with a stack, each value once, so a long
    element-wise chain neither recurses nor is walked twice through a shared input)."""
    stack, seen = [v], set()
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if u in emitter.leaves or small_constant(u) is not None:
            continue
        op = u.op
        if op is None:
            return False
        if is_view(op.kind):
            stack.append(op.inputs[0])
            continue
        if kind_has(op.kind, GENERATOR) or op.kind in FLAT_RULES:  # functions of the index
            continue
        if op.kind in ("broadcast_like", "broadcast_to", "bias_add", "one_hot", "gather",
                       "pad", "slice", "transpose", "tile"):
            return False
        if not is_elementwise(op.kind):
            return False
        for x in op.inputs:
            if x.type.shape == u.type.shape:
                stack.append(x)
            elif not all(d == 1 for d in x.type.shape):
                return False
    return True


def pointwise(kernel: Kernel, emitter: Emitter, outputs: Sequence[Pair]) -> None:
    """Store each output's elements (grouped by shape, one loop nest per group)."""
    groups: dict[tuple, list[Pair]] = {}
    for inner, outer in outputs:
        groups.setdefault(inner.type.shape, []).append((inner, outer))
    b = kernel.b
    for shape, pairs in groups.items():
        outer0 = pairs[0][1]
        if all(flat_ok(emitter, inner) for inner, _ in pairs):
            n = kernel.size(outer0)
            lo, hi = kernel.extent_of([n], ("size", id(outer0)), size_of(outer0), outer0)

            def flat_body(i: ir.Value, _c: list) -> None:
                emitter.push()
                for inner, outer in pairs:
                    irutil.store(b, kernel.ptr(outer), outer.dtype, i,
                                 emitter.value(inner, Flat(i)))
                emitter.pop()

            irutil.loop(b, lo, hi, flat_body, name="f", trip=n)
            continue
        dims = kernel.dims(outer0)
        if dims:
            key, fn = dim_key(outer0, 0)
            lo, hi = kernel.extent_of(dims, key, fn, outer0)
            bounds = [(lo, hi)] + [(irutil.i64(0), d) for d in dims[1:]]
        else:
            kernel.extent_of([], "one", lambda binding: 1)
            bounds = []

        def body(idx: list[ir.Value], _c: list) -> None:
            emitter.push()
            off = irutil.linear(b, idx, dims)
            for inner, outer in pairs:
                irutil.store(b, kernel.ptr(outer), outer.dtype, off,
                             emitter.value(inner, tuple(idx)))
            emitter.pop()

        irutil.loop_nest(b, bounds, body)


# ---- reductions ---------------------------------------------------------------------------

def _identity(kind: str, dtype: DType) -> ir.Constant:
    t = irutil.compute_type(dtype)
    if kind in ("sum", "mean"):
        return ir.Constant(t, 0.0 if dtype.is_float else 0)
    if kind == "prod":
        return ir.Constant(t, 1.0 if dtype.is_float else 1)
    if dtype is DType.bool:
        return ir.Constant(irutil.I1, 0 if kind == "max" else 1)
    if dtype.is_float:
        return ir.Constant(t, float("-inf") if kind == "max" else float("inf"))
    bits = t.width
    return ir.Constant(t, -(1 << (bits - 1)) if kind == "max" else (1 << (bits - 1)) - 1)


def combine(b: ir.IRBuilder, kind: str, dtype: DType, acc: ir.Value, x: ir.Value) -> ir.Value:
    if dtype.is_float:
        if kind in ("sum", "mean"):
            return b.fadd(acc, x, flags=irutil.FAST)
        if kind == "prod":
            return b.fmul(acc, x, flags=irutil.FAST)
        name = "maximum" if kind == "max" else "minimum"
        fn = irutil.intrinsic(b.module, f"llvm.{name}.{'f32' if acc.type == irutil.F32 else 'f64'}",
                              acc.type, [acc.type, acc.type])
        return b.call(fn, [acc, x])
    if dtype is DType.bool:
        return b.or_(acc, x) if kind == "max" else b.and_(acc, x)
    if kind in ("sum", "mean"):
        return b.add(acc, x)
    if kind == "prod":
        return b.mul(acc, x)
    op = ">" if kind == "max" else "<"
    return b.select(b.icmp_signed(op, x, acc), x, acc)


def _finalize(kernel: Kernel, op: Op, acc: ir.Value, rdims: Sequence[ir.Value]) -> ir.Value:
    if op.kind != "mean":
        return acc
    b = kernel.b
    count = irutil.product(b, rdims)
    if op.result.dtype.is_float:
        return b.fdiv(acc, b.sitofp(count, acc.type))
    # integer mean keeps the dtype: numpy divides and truncates toward zero
    count = b.select(b.icmp_signed("==", count, irutil.i64(0)), irutil.i64(1), count)
    if acc.type != irutil.I64:
        count = b.trunc(count, acc.type)
    return b.sdiv(acc, count)


def _axes(op: Op) -> tuple[int, ...]:
    return normalize_axes(op.kind, op.attrs["axes"], op.inputs[0].type.rank)


def core_index(idx: Sequence[ir.Value], src: Sequence, dst: Sequence) -> tuple[ir.Value, ...]:
    """An index over shape ``src`` as an index over ``dst`` (same core)."""
    it = iter([i for i, d in zip(idx, src) if d != 1])
    return tuple(irutil.i64(0) if d == 1 else next(it) for d in dst)


@dataclass(frozen=True)
class ReductionLayout:
    """The reductions of one kernel and where their values go: every reduction reduces
    ``reduced_axes`` of an input shaped like ``source`` (the first one's input, whose dims
    the loops run over) and keeps ``kept_axes``; ``full_outputs`` are shaped like the
    inputs (up to size-1 dims), ``reduced_outputs`` like the kept axes."""

    reduces: tuple[Op, ...]
    full_outputs: tuple[Pair, ...]
    reduced_outputs: tuple[Pair, ...]
    source: Value
    reduced_axes: tuple[int, ...]
    kept_axes: tuple[int, ...]

    def dims(self, kernel: Kernel) -> tuple[list[ir.Value], list[ir.Value], list[ir.Value]]:
        """The source's dims in ``kernel`` (a whole-tensor kernel), then those of the kept
        axes and those of the reduced axes."""
        dims = kernel.dims(self.source)
        return dims, [dims[a] for a in self.kept_axes], [dims[a] for a in self.reduced_axes]


def reduction(kernel: Kernel, emitter: Emitter, ops: Sequence[Op], outputs: Sequence[Pair],
              scratch: ir.Value | None = None,
              then: "Callable[[], tuple[Kernel, Emitter, ir.Value]] | None" = None) -> None:
    """A kernel whose ops include reductions (see the module docstring). ``scratch``
    (8 bytes per kept element per reduction; times the first axis's size when
    ``split_rows`` says so) enables the column order; ``then`` makes a second kernel
    (its emitter and scratch pointer) for the split column order's last pass."""
    reduces = [op for op in ops if is_reduction(op.kind)]
    x0 = reduces[0].inputs[0]
    full = x0.type.shape
    red = _axes(reduces[0])
    for r in reduces:
        if r.inputs[0].type.shape != full or _axes(r) != red:
            raise Unsupported("reductions over different shapes or axes in one kernel")
    rank = len(full)
    keep = [a for a in range(rank) if a not in red]
    full_out, red_out = [], []
    keep_shape = tuple(d for a, d in enumerate(full) if a not in red)
    for inner, outer in outputs:
        if core_shape(inner.type.shape) == core_shape(full):  # (the reduced core: |R| = 1)
            full_out.append((inner, outer))
        elif core_shape(inner.type.shape) == core_shape(keep_shape):
            red_out.append((inner, outer))
        else:
            raise Unsupported(f"output {inner.type} of a reduction over axes {list(red)} "
                              f"of {x0.type}")
    layout = ReductionLayout(tuple(reduces), tuple(full_out), tuple(red_out), x0, red,
                             tuple(keep))
    last_kept = bool(keep) and keep[-1] == rank - 1
    results = {r.result for r in reduces}
    # The accumulate and column orders fold every reduction in one pass over the input:
    # none may read another's result (log_softmax then a sum over the same axis: the
    # row order's phases).
    chained = any(_depends(r.inputs[0], results) for r in reduces)
    # accumulating in the outputs rounds every partial sum to f16: f16 outputs take the
    # column order (f32 accumulators in scratch) or the row order (f32 registers)
    if last_kept and not chained and not full_out and all(
            inner in results and outer.dtype is not DType.f16 for inner, outer in red_out):
        _accumulate_order(kernel, emitter, layout)
    elif last_kept and scratch is not None and not chained and not any(
            _depends(v, results) for v, _ in full_out):
        if then is not None and split_rows(red):
            _column_split(kernel, emitter, layout, scratch, then)
        else:
            _column_order(kernel, emitter, layout, scratch)
    else:
        _row_order(kernel, emitter, layout)


def _depends(v: Value, on: set[Value]) -> bool:
    """Whether ``v`` is computed from a value of ``on`` (within the kernel's ops)."""
    seen: set[Value] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        if x in on:
            return True
        if x in seen or x.op is None:
            continue
        seen.add(x)
        stack.extend(x.op.inputs)
    return False


def _column_order(kernel: Kernel, emitter: Emitter, layout: ReductionLayout,
                  scratch: ir.Value) -> None:
    """Reductions over leading axes with the last axis kept: one pass in memory order
    writes the full outputs and folds each element into a row of accumulators (scratch,
    one per reduction, 8 bytes per kept element), then a pass over the kept axes
    finishes the reductions and computes the reduced outputs."""
    reduces, x0, keep = layout.reduces, layout.source, layout.kept_axes
    red_out = layout.reduced_outputs
    b = kernel.b
    kernel.whole()
    dims, kdims, rdims = layout.dims(kernel)
    ksize = irutil.product(b, kdims)
    accs = []
    for j, r in enumerate(reduces):
        dt = r.inputs[0].dtype
        acc_dt = DType.f32 if dt is DType.f16 else dt  # f16 accumulates in f32
        base = b.gep(scratch, [irutil.mul(b, irutil.i64(8 * j), ksize)], inbounds=True,
                     source_etype=irutil.I8)
        accs.append((r, acc_dt, base))

    def init(kidx: list[ir.Value], _c: list) -> None:
        off = irutil.linear(b, kidx, kdims)
        for r, dt, base in accs:
            irutil.store(b, base, dt, off, _identity(r.kind, r.inputs[0].dtype))

    irutil.loop_nest(b, [(irutil.i64(0), d) for d in kdims], init, name="z")

    def body(idx: list[ir.Value], _c: list) -> None:
        emitter.push()
        off = irutil.linear(b, idx, dims)
        koff = irutil.linear(b, [idx[a] for a in keep], kdims)
        _accumulate(kernel, emitter, layout, accs, idx, off, koff)
        emitter.pop()

    irutil.loop_nest(b, [(irutil.i64(0), d) for d in dims], body, name="a")
    keep_shape = [x0.type.shape[a] for a in keep]

    def fin(kidx: list[ir.Value], _c: list) -> None:
        emitter.push()
        koff = irutil.linear(b, kidx, kdims)
        for r, dt, base in accs:
            emitter.known[r.result] = _finalize(kernel, r, irutil.load(b, base, dt, koff), rdims)
        _store_reduced(kernel, emitter, red_out, reduces, kidx, keep_shape)
        emitter.pop()

    irutil.loop_nest(b, [(irutil.i64(0), d) for d in kdims], fin, name="m")


def _accumulate(kernel: Kernel, emitter: Emitter, layout: ReductionLayout, accs: list,
                idx: list[ir.Value], off: ir.Value, koff: ir.Value) -> None:
    """One element of a column-order reduction: store the full-shape outputs at ``off``
    and fold the element into each accumulator (``accs``: reduce op, dtype, base) at
    ``koff``."""
    b = kernel.b
    for inner, outer in layout.full_outputs:
        oidx = core_index(idx, layout.source.type.shape, inner.type.shape)
        irutil.store(b, kernel.ptr(outer), outer.dtype, off, emitter.value(inner, oidx))
    for r, dt, base in accs:
        x = emitter.value(r.inputs[0], tuple(idx))
        acc = irutil.load(b, base, dt, koff)
        irutil.store(b, base, dt, koff, combine(b, r.kind, r.inputs[0].dtype, acc, x))


def _store_reduced(kernel: Kernel, emitter: Emitter, red_out: Sequence[Pair], reduces: Sequence[Op],
                   kidx: list[ir.Value], keep_shape: list) -> None:
    """At kept index ``kidx`` (the reductions' finals known to ``emitter``), store each output
    computed from them, then forget the finals (they hold for this index only)."""
    b = kernel.b
    for inner, outer in red_out:
        ridx = core_index(kidx, keep_shape, inner.type.shape)
        irutil.store(b, kernel.ptr(outer), outer.dtype, irutil.linear(b, ridx, kernel.dims(outer)),
                     emitter.value(inner, ridx))
    for r in reduces:
        emitter.known.pop(r.result, None)


def split_rows(red: Sequence[int]) -> bool:
    """Whether a column-order reduction over axes ``red`` keeps one row of partial
    accumulators per index of the first axis (the split column order): when the first
    axis is reduced along with others, so each row's partials fold several elements."""
    return 0 in red and len(red) >= 2


def _column_split(kernel: Kernel, emitter: Emitter, layout: ReductionLayout, scratch: ir.Value,
                  then: "Callable[[], tuple[Kernel, Emitter, ir.Value]]") -> None:
    """The column order split over the first (reduced) axis: each index ``i0`` of it
    folds its elements into its own row of accumulators in scratch (8 bytes per kept
    element per reduction, per ``i0``), so the pass over the input splits across threads;
    a second kernel folds the rows in ``i0`` order and computes the reduced outputs.
    (A bias gradient of an NHWC activation: each image's sums, then their sum.)"""
    reduces, x0, red, keep = (layout.reduces, layout.source, layout.reduced_axes,
                              layout.kept_axes)
    red_out = layout.reduced_outputs
    b = kernel.b
    dims = kernel.dims(x0)
    kdims = [dims[a] for a in keep]
    ksize = irutil.product(b, kdims)
    d0 = dims[0]
    key, fn = dim_key(x0, 0)
    lo, hi = kernel.extent_of([d0], key, fn, x0)

    def slots(b: ir.IRBuilder, base: ir.Value, d0: ir.Value, ksize: ir.Value) -> list:
        out = []
        for j, r in enumerate(reduces):
            dt = r.inputs[0].dtype
            acc_dt = DType.f32 if dt is DType.f16 else dt  # f16 accumulates in f32
            at = b.gep(base, [irutil.mul(b, irutil.i64(8 * j), irutil.mul(b, d0, ksize))],
                       inbounds=True, source_etype=irutil.I8)
            out.append((r, acc_dt, at))
        return out

    accs = slots(b, scratch, d0, ksize)

    def row(i0: ir.Value, _c: list) -> None:
        pbase = b.mul(i0, ksize)

        def init(k: ir.Value, _c2: list) -> None:
            for r, dt, base in accs:
                irutil.store(b, base, dt, b.add(pbase, k), _identity(r.kind, r.inputs[0].dtype))

        irutil.loop(b, irutil.i64(0), ksize, init, name="z")

        def body(rest: list[ir.Value], _c2: list) -> None:
            idx = [i0, *rest]
            emitter.push()
            off = irutil.linear(b, idx, dims)
            koff = b.add(pbase, irutil.linear(b, [idx[a] for a in keep], kdims))
            _accumulate(kernel, emitter, layout, accs, idx, off, koff)
            emitter.pop()

        irutil.loop_nest(b, [(irutil.i64(0), d) for d in dims[1:]], body, name="a")

    irutil.loop(b, lo, hi, row, name="r")

    kernel2, emitter2, scratch2 = then()
    kernel2.whole()
    b2 = kernel2.b
    dims2 = kernel2.dims(x0)
    kdims2 = [dims2[a] for a in keep]
    ksize2 = irutil.product(b2, kdims2)
    accs2 = slots(b2, scratch2, dims2[0], ksize2)
    keep_shape = [x0.type.shape[a] for a in keep]

    def fin(kidx: list[ir.Value], _c: list) -> None:
        emitter2.push()
        koff = irutil.linear(b2, kidx, kdims2)
        for r, dt, base in accs2:
            def fold(i0: ir.Value, acc: list, r=r, dt=dt, base=base) -> list:
                v = irutil.load(b2, base, dt, b2.add(b2.mul(i0, ksize2), koff))
                return [combine(b2, r.kind, r.inputs[0].dtype, acc[0], v)]

            (acc,) = irutil.loop(b2, irutil.i64(0), dims2[0], fold,
                                 [_identity(r.kind, r.inputs[0].dtype)], name="f")
            emitter2.known[r.result] = _finalize(kernel2, r, acc, [dims2[a] for a in red])
        _store_reduced(kernel2, emitter2, red_out, reduces, kidx, keep_shape)
        emitter2.pop()

    irutil.loop_nest(b2, [(irutil.i64(0), d) for d in kdims2], fin, name="m")
    kernel2.finish()


def _row_order(kernel: Kernel, emitter: Emitter, layout: ReductionLayout) -> None:
    reduces, x0, red, keep = (layout.reduces, layout.source, layout.reduced_axes,
                              layout.kept_axes)
    full_out, red_out = layout.full_outputs, layout.reduced_outputs
    b = kernel.b
    dims = kernel.dims(x0)
    rank = len(dims)
    kdims = [dims[a] for a in keep]
    rdims = [dims[a] for a in red]
    if keep:
        key, fn = dim_key(x0, keep[0])
        lo, hi = kernel.extent_of([kdims[0]], key, fn, x0)
        kbounds = [(lo, hi)] + [(irutil.i64(0), d) for d in kdims[1:]]
    else:
        kernel.extent_of([], "one", lambda binding: 1)
        kbounds = []
    rbounds = [(irutil.i64(0), d) for d in rdims]

    def full_index(kidx: Sequence[ir.Value], ridx: Sequence[ir.Value]) -> list[ir.Value]:
        out: list[ir.Value] = [irutil.i64(0)] * rank
        for a, i in zip(keep, kidx):
            out[a] = i
        for a, i in zip(red, ridx):
            out[a] = i
        return out

    def kbody(kidx: list[ir.Value], _c: list) -> None:
        emitter.push()
        for r in reduces:
            dt = r.inputs[0].dtype

            def rbody(ridx: list[ir.Value], acc: list[ir.Value], r=r, dt=dt) -> list[ir.Value]:
                emitter.push()
                x = emitter.value(r.inputs[0], tuple(full_index(kidx, ridx)))
                emitter.pop()
                return [combine(b, r.kind, dt, acc[0], x)]

            (acc,) = irutil.loop_nest(b, rbounds, rbody, [_identity(r.kind, dt)], name="r")
            emitter.known[r.result] = _finalize(kernel, r, acc, rdims)
        keep_shape = [x0.type.shape[a] for a in keep]
        for inner, outer in red_out:
            ridx = core_index(kidx, keep_shape, inner.type.shape)
            off = irutil.linear(b, ridx, kernel.dims(outer))
            irutil.store(b, kernel.ptr(outer), outer.dtype, off, emitter.value(inner, ridx))
        if full_out:
            def fbody(ridx: list[ir.Value], _c: list) -> None:
                emitter.push()
                idx = full_index(kidx, ridx)
                off = irutil.linear(b, idx, dims)
                for inner, outer in full_out:
                    oidx = core_index(idx, x0.type.shape, inner.type.shape)
                    irutil.store(b, kernel.ptr(outer), outer.dtype, off, emitter.value(inner, oidx))
                emitter.pop()

            irutil.loop_nest(b, rbounds, fbody, name="o")
        for r in reduces:
            emitter.known.pop(r.result, None)
        emitter.pop()

    irutil.loop_nest(b, kbounds, kbody, name="k")


def _accumulate_order(kernel: Kernel, emitter: Emitter, layout: ReductionLayout) -> None:
    reduces, keep, red_out = layout.reduces, layout.kept_axes, layout.reduced_outputs
    b = kernel.b
    kernel.whole()
    dims, kdims, rdims = layout.dims(kernel)
    by_result = {r.result: r for r in reduces}

    def init(kidx: list[ir.Value], _c: list) -> None:
        off = irutil.linear(b, kidx, kdims)
        for inner, outer in red_out:
            r = by_result[inner]
            irutil.store(b, kernel.ptr(outer), outer.dtype, off,
                         _identity(r.kind, r.inputs[0].dtype))

    irutil.loop_nest(b, [(irutil.i64(0), d) for d in kdims], init, name="z")

    def body(idx: list[ir.Value], _c: list) -> None:
        emitter.push()
        off = irutil.linear(b, [idx[a] for a in keep], kdims)
        for inner, outer in red_out:
            r = by_result[inner]
            x = emitter.value(r.inputs[0], tuple(idx))
            acc = irutil.load(b, kernel.ptr(outer), outer.dtype, off)
            irutil.store(b, kernel.ptr(outer), outer.dtype, off,
                         combine(b, r.kind, r.inputs[0].dtype, acc, x))
        emitter.pop()

    irutil.loop_nest(b, [(irutil.i64(0), d) for d in dims], body, name="a")
    means = [(inner, outer) for inner, outer in red_out if by_result[inner].kind == "mean"]
    if means:
        def fin(kidx: list[ir.Value], _c: list) -> None:
            off = irutil.linear(b, kidx, kdims)
            for inner, outer in means:
                acc = irutil.load(b, kernel.ptr(outer), outer.dtype, off)
                irutil.store(b, kernel.ptr(outer), outer.dtype, off,
                             _finalize(kernel, by_result[inner], acc, rdims))

        irutil.loop_nest(b, [(irutil.i64(0), d) for d in kdims], fin, name="m")
