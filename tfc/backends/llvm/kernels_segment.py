"""``segment_reduce`` (``tfc.ops.segment``): a check kernel, then the reduction.

- The check runs whole (one thread, before anything is written): the first id outside
  ``[0, num_segments)`` (a negative one only for ``sorted``) or, for ``sorted``, the first
  id smaller than the one before fails with the reference's message and position.
- The reduction is split across threads by blocks of ``COLUMN_BLOCK`` columns of a row
  (the elements of a segment's row are independent), so no two threads write one element
  and no atomics are needed: each thread fills its columns of every segment with the
  empty value, then walks
  the rows in order and combines each into its segment's row (a contiguous inner loop
  over its columns). Rows reach a segment in order, as the reference's ``ufunc.at``.
  ``sorted`` stores a segment's first row instead of combining it (empty segments keep 0,
  1 for ``prod``;
  a row is a segment's first when its id differs from the previous row's: the ids were
  checked to be non-decreasing).
"""

from __future__ import annotations

from typing import Callable

import llvmlite.ir as ir
import numpy as np

from tfc.backends.llvm import irutil
from tfc.backends.llvm.kernels_loop import combine
from tfc.ir.core import Op
from tfc.ops.segment import empty_value, order_error, range_error

ZERO = irutil.i64(0)
# Columns per unit of the split: each thread's chunk walks all the rows again, so a chunk
# must hold enough columns to pay for that walk and read long runs of each row (rows of
# up to 2048 columns are one unit: one thread, as ``scatter_add``; 5000 columns are 3)
COLUMN_BLOCK = 2048


def lower_segment_reduce(graph_compiler, op: Op) -> None:
    data, ids = op.inputs
    out = op.result
    kind, n, sorted_ = op.attrs["reduction"], op.attrs["num_segments"], op.attrs["sorted"]
    segs = irutil.i64(n)

    # ---- the check (whole) ----
    check = graph_compiler.kernel("segment_check", [ids])
    check.whole()
    b = check.b
    count = check.size(ids)
    bad_range = graph_compiler.comp.error(
        range_error(kind, "{int0}", "{value}", n, op.attrs["what"]), op.loc)
    bad_order = graph_compiler.comp.error(order_error(kind, "{int0}", "{value}"), op.loc)

    def id_at(kernel, i: ir.Value) -> ir.Value:
        return irutil.to_i64(kernel.b, irutil.load(kernel.b, kernel.ptr(ids), ids.dtype, i))

    def check_one(i: ir.Value, prev: list[ir.Value]) -> list[ir.Value]:
        k = id_at(check, i)
        bad = b.icmp_signed(">=", k, segs)
        if sorted_:
            bad = b.or_(bad, b.icmp_signed("<", k, ZERO))
        check.fail_with_detail(bad, bad_range, k, [i])
        if sorted_:
            check.fail_with_detail(b.icmp_signed("<", k, prev[0]), bad_order, k, [i])
        return [k]

    # (data's leading dims against the ids': each binding's types are inferred again, so
    # a symbolic dim of another size than the ids' fails there, before any kernel runs)
    irutil.loop(b, ZERO, count, check_one, [irutil.i64(-(1 << 62))], name="v")
    check.finish()

    # ---- the reduction (split by columns) ----
    kernel = graph_compiler.kernel("segment_" + kind, [data, ids, out])
    b = kernel.b
    dt = out.dtype
    od = kernel.dims(out)
    cols = irutil.product(b, od[1:])
    rows = kernel.size(ids)
    block = irutil.i64(COLUMN_BLOCK)
    blocks = b.sdiv(b.add(cols, irutil.i64(COLUMN_BLOCK - 1)), block)

    def blocks_of(binding) -> int:
        n = int(np.prod(binding.shapes[out][1:], dtype=np.int64))
        return -(-n // COLUMN_BLOCK)

    first_block, last_block = kernel.extent_of([blocks], ("segment blocks", id(out)),
                                               blocks_of, out)
    lo = b.mul(first_block, block)
    hi = b.mul(last_block, block)
    hi = b.select(b.icmp_signed("<", hi, cols), hi, cols)
    empty = empty_value(kind, np.dtype(dt.np), sorted_)
    init = irutil.const(dt, empty.item() if hasattr(empty, "item") else empty)

    def fill(s: ir.Value, _c) -> None:
        base = b.mul(s, cols)

        def one(c: ir.Value, _c2) -> None:
            irutil.store(b, kernel.ptr(out), dt, b.add(base, c), init)

        irutil.loop(b, lo, hi, one, name="f")

    irutil.loop(b, ZERO, segs, fill, name="s")

    def row(i: ir.Value, prev: list[ir.Value]) -> list[ir.Value]:
        k = id_at(kernel, i)
        ok = b.and_(b.icmp_signed(">=", k, ZERO), b.icmp_signed("<", k, segs))
        first = b.icmp_signed("!=", k, prev[0]) if sorted_ else None
        with b.if_then(ok):
            dst, src = b.mul(k, cols), b.mul(i, cols)

            def one(c: ir.Value, _c2) -> None:
                x = irutil.load(b, kernel.ptr(data), dt, b.add(src, c))
                at = b.add(dst, c)
                new = combine(b, kind, dt, irutil.load(b, kernel.ptr(out), dt, at), x)
                if first is not None:
                    new = b.select(first, x, new)
                irutil.store(b, kernel.ptr(out), dt, at, new)

            irutil.loop(b, lo, hi, one, name="c")
        return [k]

    irutil.loop(b, ZERO, rows, row, [irutil.i64(-1)], name="r")
    kernel.finish()


LOWERINGS: dict[str, Callable] = {"segment_reduce": lower_segment_reduce}
