"""``matrix_inverse`` and ``matrix_determinant`` through LAPACK (``scipy-openblas32``).

Both are one kernel that walks the batch and calls LAPACKE's ``?getrf_work`` (LU with
partial pivoting) per matrix; the inverse then calls ``?getri_work`` in place in the
output. The data are row-major and the calls column-major: LAPACK then factors ``A^T``,
whose inverse is ``(A^-1)^T`` — read back row-major, exactly ``A^-1`` — and whose
determinant is ``det A``; no transposed copies. The determinant is the product of the
diagonal of ``U`` (in f64 for f32 input, rounded once), negated once per row swap.

A matrix singular to working precision (``info > 0``: a zero pivot; or, from the inverse,
``||A||_inf ||A^-1||_inf eps >= 1``: ``tfc.ops.linalg.ill_conditioned``'s rule) makes
``matrix_inverse`` return an error code, which the executable raises as the reference's
``ExecutionError`` (same text, located at the op); ``matrix_determinant`` returns 0 (or
a tiny value) for it, as numpy does. Scratch holds
the pivots, ``getri``'s workspace (64 columns per row, its blocked size) and, for the
determinant, a copy of the matrix. f16 matrices are widened to f32 in scratch and the
results rounded once (the reference's ``compute_dtype`` rule).

f16 ``matmul`` lives here too, as the other LAPACK/BLAS-through-a-workspace kernel: both
inputs widened to f32 in scratch, one ``sgemm`` per matrix of the batch (the batch
broadcast as ``kernels_linalg.lower_matmul``), the f32 products rounded once to f16 — the
reference's ``compute_dtype`` rule. f32, f64, i32 and i64 products go to ``kernels_linalg``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import llvmlite.ir as ir

from tfc.backends.llvm import irutil
from tfc.backends.llvm.blas import (COL_MAJOR, LEFT, LOWER, NO_TRANS, NON_UNIT, ROW_MAJOR,
                                    TRANS, UPPER, declare_getrf, declare_getri,
                                    declare_potrf, declare_trsm)
from tfc.backends.llvm import kernels_linalg, vmath
from tfc.backends.llvm.context import Kernel, Storage
from tfc.backends.llvm.kernels_scalar import Unsupported
from tfc.backends.binding import Binding
from tfc.backends.llvm.runtime.symbols import GETRF, GETRI, POTRF, TRSM
from tfc.ir.core import Op, Value
from tfc.ir.types import DType
from tfc.ops.linalg import inverse_epsilon, not_positive_definite, singular_message

ZERO = irutil.i64(0)
WORK_COLS = 64  # getri's workspace: n * WORK_COLS elements (its optimal blocked size)


def _dtype(op: Op) -> DType:
    """The LAPACK dtype: f16 is computed in f32."""
    dt = op.inputs[0].dtype
    if dt not in (DType.f16, DType.f32, DType.f64):
        raise Unsupported(f"{op.kind} of {dt.value}")
    return DType.f32 if dt is DType.f16 else dt


def _order(x: Value) -> Callable[[Binding], int]:
    return lambda binding: binding.shape(x)[-1]


def _square_check(graph_compiler, kernel, op: Op, x: Value) -> ir.Value:
    """Run-time check that the last two dims agree (needed only when one is not static);
    returns whether they do (i1)."""
    d1, d2 = x.type.shape[-2], x.type.shape[-1]
    if isinstance(d1, int) and isinstance(d2, int):
        return ir.Constant(irutil.I1, 1)
    code = graph_compiler.comp.error(f"{op.kind}: matrices of shape {x.type} are not square",
                                     op.loc)
    bad = kernel.b.icmp_signed("!=", kernel.dim(x, x.type.rank - 2), kernel.dim(x, x.type.rank - 1))
    kernel.fail_if(bad, code)
    return kernel.b.not_(bad)


def _inf_norm(b: ir.IRBuilder, ptr: ir.Value, dt: DType, n: ir.Value) -> ir.Value:
    """``max_i sum_j |m[i,j]|`` (f64) of the row-major ``n x n`` matrix at ``ptr``; NaN
    if a row sum is NaN (as numpy's ``max``)."""
    zero = ir.Constant(irutil.F64, 0.0)

    def row(i: ir.Value, c: list[ir.Value]) -> list[ir.Value]:
        def col(j: ir.Value, c2: list[ir.Value]) -> list[ir.Value]:
            v = irutil.load(b, ptr, dt, b.add(b.mul(i, n), j))
            if dt is not DType.f64:
                v = b.fpext(v, irutil.F64)
            return [b.fadd(c2[0], b.select(b.fcmp_ordered("<", v, zero), b.fneg(v), v))]

        (s,) = irutil.loop(b, ZERO, n, col, [zero], name="nc")
        m = c[0]
        take = b.and_(b.fcmp_ordered("ord", m, m),  # a NaN maximum stays
                      b.or_(b.fcmp_unordered("uno", s, s), b.fcmp_ordered(">", s, m)))
        return [b.select(take, s, m)]

    (m,) = irutil.loop(b, ZERO, n, row, [zero], name="nr")
    return m


class _LapackKernel(NamedTuple):
    """What both LAPACK kernels start with: the kernel over ``x`` (input 0) and the
    result, its builder, the squareness check (i1), ``x``'s dims, the order ``n``,
    ``n*n``, ``n`` as i32, and the scratch: pivots first (8 bytes per row)."""

    kernel: Kernel
    b: ir.IRBuilder
    square: ir.Value
    dims: list[ir.Value]
    n: ir.Value
    size: ir.Value
    n32: ir.Value
    ipiv: ir.Value

    @property
    def after_pivots(self) -> ir.Value:
        """The scratch past the pivots (workspace or matrix copy)."""
        return self.b.gep(self.ipiv, [self.b.mul(self.n, irutil.i64(8))], inbounds=True,
                          source_etype=irutil.I8)


def _lapack_kernel(graph_compiler, op: Op, scratch_bytes: Callable[[int], int]) -> _LapackKernel:
    """A whole (unsplit) kernel for ``op`` with ``scratch_bytes(n)`` of scratch."""
    x = op.inputs[0]
    graph_compiler.comp.scratch.append(lambda binding, f=_order(x): scratch_bytes(f(binding)))
    scratch = Storage("scratch", 0)
    kernel = graph_compiler.kernel(op.kind, [x, *op.results], [scratch])
    kernel.whole()
    b = kernel.b
    square = _square_check(graph_compiler, kernel, op, x)
    dims = kernel.dims(x)
    n = dims[-1]
    return _LapackKernel(kernel, b, square, dims, n, b.mul(n, n), b.trunc(n, irutil.I32),
                         kernel.storage_ptr(scratch))


def lower_matrix_inverse(graph_compiler, op: Op) -> None:
    x, out = op.inputs[0], op.result
    dt, xdt = _dtype(op), x.dtype
    item, wide = dt.itemsize, xdt is DType.f16  # wide: invert an f32 copy in scratch
    lp = _lapack_kernel(graph_compiler, op, lambda n: 8 * n + item * (
        WORK_COLS * max(1, n) + (n ** 2 if wide else 0)))
    kernel, b, square, dims, n, size, n32, ipiv = lp
    work = lp.after_pivots
    lwork = b.trunc(b.mul(n, irutil.i64(WORK_COLS)), irutil.I32)
    copy_ptr = irutil.elem_ptr(b, work, dt, b.mul(n, irutil.i64(WORK_COLS)))
    getrf = declare_getrf(kernel.comp.module, GETRF[dt.value])
    getri = declare_getri(kernel.comp.module, GETRI[dt.value])
    code = graph_compiler.comp.error(singular_message(op.kind, x.type), op.loc)
    eps = ir.Constant(irutil.F64, inverse_epsilon(xdt.np))
    same = graph_compiler.comp.storage[x] == graph_compiler.comp.storage[out]
    layout = ir.Constant(irutil.I32, COL_MAJOR)

    def per_matrix(t: ir.Value, _c) -> None:
        base = b.mul(t, size)
        a = copy_ptr if wide else irutil.elem_ptr(b, kernel.ptr(out), dt, base)
        if wide or not same:
            def copy(i: ir.Value, _c2) -> None:
                irutil.store(b, a, dt, i, irutil.load(b, kernel.ptr(x), xdt, b.add(base, i)))
            irutil.loop(b, ZERO, size, copy, name="c")
        a_norm = _inf_norm(b, a, dt, n)  # before getrf overwrites A
        info = b.call(getrf, [layout, n32, n32, a, n32, ipiv])
        singular = b.icmp_signed(">", info, ir.Constant(irutil.I32, 0))
        kernel.fail_if(singular, code)
        with b.if_then(b.not_(singular)):
            b.call(getri, [layout, n32, a, n32, ipiv, work, lwork])
            cond = b.fmul(a_norm, _inf_norm(b, a, dt, n))
            kernel.fail_if(b.fcmp_ordered(">=", b.fmul(cond, eps), ir.Constant(irutil.F64, 1.0)),
                           code)
        if wide:
            def narrow(i: ir.Value, _c2) -> None:
                irutil.store(b, kernel.ptr(out), xdt, b.add(base, i), irutil.load(b, a, dt, i))
            irutil.loop(b, ZERO, size, narrow, name="n")

    with b.if_then(b.and_(square, b.icmp_signed(">", n, ZERO))):
        irutil.loop(b, ZERO, irutil.product(b, dims[:-2]), per_matrix, name="bt")
    kernel.finish()


def _lu_diagonal_kernel(graph_compiler, op: Op, init: Sequence[float],
                        step: Callable[[ir.IRBuilder, ir.Value, ir.Value, list[ir.Value]],
                                       list[ir.Value]],
                        store: Callable[[ir.IRBuilder, Kernel, ir.Value, list[ir.Value]],
                                        None]) -> None:
    """The kernel of a determinant-like op: each matrix copied to scratch and LU-factored
    (getrf), then one loop over its diagonal carrying f64 values from ``init``:
    ``step(b, u_ii, swapped, carried)`` with ``u_ii`` in f64 and ``swapped`` whether row
    i was exchanged; ``store(b, kernel, t, carried)`` writes matrix ``t``'s results."""
    x = op.inputs[0]
    dt = _dtype(op)
    lp = _lapack_kernel(graph_compiler, op, lambda n: 8 * n + dt.itemsize * max(1, n ** 2))
    kernel, b, square, dims, n, size, n32, ipiv = lp
    lu = lp.after_pivots
    getrf = declare_getrf(kernel.comp.module, GETRF[dt.value])
    layout = ir.Constant(irutil.I32, COL_MAJOR)

    def per_matrix(t: ir.Value, _c) -> None:
        base = b.mul(t, size)

        def copy(i: ir.Value, _c2) -> None:
            irutil.store(b, lu, dt, i, irutil.load(b, kernel.ptr(x), x.dtype, b.add(base, i)))
        irutil.loop(b, ZERO, size, copy, name="c")
        with b.if_then(b.icmp_signed(">", n, ZERO)):
            b.call(getrf, [layout, n32, n32, lu, n32, ipiv])

        def diag(i: ir.Value, c: list[ir.Value]) -> list[ir.Value]:
            u = irutil.load(b, lu, dt, b.add(b.mul(i, n), i))
            if dt is DType.f32:
                u = b.fpext(u, irutil.F64)
            p = b.load(b.gep(ipiv, [i], inbounds=True, source_etype=irutil.I32), typ=irutil.I32)
            swapped = b.icmp_signed("!=", b.sext(p, irutil.I64), b.add(i, irutil.i64(1)))
            return step(b, u, swapped, c)

        carried = irutil.loop(b, ZERO, n, diag, [ir.Constant(irutil.F64, v) for v in init],
                              name="d")
        if dt is DType.f32:  # (then to f16 by the store, for f16)
            carried = [b.fptrunc(v, irutil.F32) for v in carried]
        store(b, kernel, t, carried)

    with b.if_then(square):
        irutil.loop(b, ZERO, irutil.product(b, dims[:-2]), per_matrix, name="bt")
    kernel.finish()


def lower_matrix_determinant(graph_compiler, op: Op) -> None:
    """The product of U's diagonal, negated per row swap."""
    out = op.result

    def step(b: ir.IRBuilder, u: ir.Value, swapped: ir.Value, c: list[ir.Value]
             ) -> list[ir.Value]:
        prod = b.fmul(c[0], u)
        return [b.select(swapped, b.fneg(prod), prod)]

    def store(b: ir.IRBuilder, kernel: Kernel, t: ir.Value, c: list[ir.Value]) -> None:
        irutil.store(b, kernel.ptr(out), out.dtype, t, c[0])
    _lu_diagonal_kernel(graph_compiler, op, [1.0], step, store)


def lower_log_matrix_determinant(graph_compiler, op: Op) -> None:
    """As ``matrix_determinant``'s kernel, with ``log|u_ii|`` summed (``vmath.log``, f64)
    instead of the product, and the sign the product of the pivots' signs, negated per
    row swap (0 for a zero pivot, whose log is -inf)."""
    sign_out, log_out = op.results

    def step(b: ir.IRBuilder, u: ir.Value, swapped: ir.Value, c: list[ir.Value]
             ) -> list[ir.Value]:
        zero = ir.Constant(irutil.F64, 0.0)
        flip = b.xor(swapped, b.fcmp_ordered("<", u, zero))
        s = b.select(b.fcmp_ordered("==", u, zero), zero, b.select(flip, b.fneg(c[0]), c[0]))
        return [s, b.fadd(c[1], vmath.emit_math(b, "log", [vmath.fabs(b, u)]))]

    def store(b: ir.IRBuilder, kernel: Kernel, t: ir.Value, c: list[ir.Value]) -> None:
        irutil.store(b, kernel.ptr(sign_out), sign_out.dtype, t, c[0])
        irutil.store(b, kernel.ptr(log_out), log_out.dtype, t, c[1])
    _lu_diagonal_kernel(graph_compiler, op, [1.0, 0.0], step, store)


def lower_matmul(graph_compiler, op: Op) -> None:
    """f16 through f32 BLAS (below); every other dtype as ``kernels_linalg``."""
    if op.inputs[0].dtype is DType.f16 and op.inputs[1].dtype is DType.f16:
        _matmul_f16(graph_compiler, op)
    else:
        kernels_linalg.LOWERINGS["matmul"](graph_compiler, op)


def _matmul_f16(graph_compiler, op: Op) -> None:
    a, bm = op.inputs
    out = op.result
    graph_compiler.comp.scratch.append(
        lambda binding: 4 * (binding.size(a) + binding.size(bm) + binding.size(out)))
    scratch = Storage("scratch", 0)
    kernel = graph_compiler.kernel("matmul_f16", [a, bm, out], [scratch])
    kernel.whole()
    b = kernel.b
    f32 = DType.f32
    ad, bd, od = kernel.dims(a), kernel.dims(bm), kernel.dims(out)
    na, nb, no = irutil.product(b, ad), irutil.product(b, bd), irutil.product(b, od)
    a32 = kernel.storage_ptr(scratch)
    b32 = irutil.elem_ptr(b, a32, f32, na)
    c32 = irutil.elem_ptr(b, b32, f32, nb)

    def widen(src: Value, dst: ir.Value, count: ir.Value) -> None:
        def body(i: ir.Value, _c) -> None:
            irutil.store(b, dst, f32, i, irutil.load(b, kernel.ptr(src), DType.f16, i))
        irutil.loop(b, ZERO, count, body, name="w")

    widen(a, a32, na)
    widen(bm, b32, nb)
    kernels_linalg.batched_gemm(kernel, op, f32, a32, b32, c32)

    def narrow(i: ir.Value, _c) -> None:
        irutil.store(b, kernel.ptr(out), DType.f16, i, irutil.load(b, c32, f32, i))

    irutil.loop(b, ZERO, no, narrow, name="n")
    kernel.finish()


def lower_cholesky(graph_compiler, op: Op) -> None:
    """``?potrf`` per matrix, in the output (or an f32 copy in scratch for f16): called
    column-major with ``'U'`` on row-major data it reads the row-major lower triangle and
    leaves ``L`` there (the factor of ``A^T = A``, transposed by the layout), the strict
    upper triangle is then zeroed. ``info > 0`` (not positive definite) is the reference's
    error; a NaN in the lower triangle fills the matrix with NaN without calling LAPACK
    (``tfc.ops.linalg.Cholesky``'s rule)."""
    x, out = op.inputs[0], op.result
    dt, xdt = _dtype(op), x.dtype
    wide = xdt is DType.f16
    lp = _lapack_kernel(graph_compiler, op, lambda n: 8 * n + dt.itemsize * (
        n ** 2 if wide else 0))
    kernel, b, square, dims, n, size, n32, _ = lp
    scratch = lp.after_pivots
    potrf = declare_potrf(kernel.comp.module, POTRF[dt.value])
    code = graph_compiler.comp.error(not_positive_definite(op.kind, x.type), op.loc)
    layout = ir.Constant(irutil.I32, COL_MAJOR)
    upper = ir.Constant(irutil.I8, ord("U"))
    fty = irutil.F32 if dt is DType.f32 else irutil.F64
    zero, nan = ir.Constant(fty, 0.0), ir.Constant(fty, float("nan"))

    def per_matrix(t: ir.Value, _c) -> None:
        base = b.mul(t, size)
        a = scratch if wide else irutil.elem_ptr(b, kernel.ptr(out), dt, base)

        def copy(i: ir.Value, c: list[ir.Value]) -> list[ir.Value]:
            v = irutil.load(b, kernel.ptr(x), xdt, b.add(base, i))
            if wide:
                v = b.fpext(v, fty)
            irutil.store(b, a, dt, i, v)
            lower = b.icmp_signed("<=", b.srem(i, n), b.sdiv(i, n))
            return [b.or_(c[0], b.and_(lower, b.fcmp_unordered("uno", v, v)))]
        (has_nan,) = irutil.loop(b, ZERO, size, copy, [ir.Constant(irutil.I1, 0)], name="c")
        with b.if_else(has_nan) as (then, otherwise):
            with then:
                irutil.loop(b, ZERO, size, lambda i, _c2: irutil.store(b, a, dt, i, nan),
                            name="nan")
            with otherwise:
                info = b.call(potrf, [layout, upper, n32, a, n32])
                kernel.fail_if(b.icmp_signed(">", info, ir.Constant(irutil.I32, 0)), code)

                def clear(i: ir.Value, _c2) -> None:
                    above = b.icmp_signed(">", b.srem(i, n), b.sdiv(i, n))
                    with b.if_then(above):
                        irutil.store(b, a, dt, i, zero)
                irutil.loop(b, ZERO, size, clear, name="u")
        if wide:
            def narrow(i: ir.Value, _c2) -> None:
                irutil.store(b, kernel.ptr(out), xdt, b.add(base, i), irutil.load(b, a, dt, i))
            irutil.loop(b, ZERO, size, narrow, name="n")

    with b.if_then(b.and_(square, b.icmp_signed(">", n, ZERO))):
        irutil.loop(b, ZERO, irutil.product(b, dims[:-2]), per_matrix, name="bt")
    kernel.finish()


def lower_triangular_solve(graph_compiler, op: Op) -> None:
    """``cblas_?trsm`` (row-major, side left) per right-hand-side matrix, in place in the
    output: ``B`` is copied there first, ``A``'s matrix into scratch (the output may share
    A's buffer). f16 is widened into scratch and the solution rounded once."""
    a, rhs = op.inputs
    out = op.result
    dt, xdt = _dtype(op), a.dtype
    wide = xdt is DType.f16
    item = dt.itemsize
    graph_compiler.comp.scratch.append(
        lambda binding: item * (binding.shape(a)[-1] ** 2 + (
            binding.shape(a)[-1] * binding.shape(out)[-1] if wide else 0)) + 8)
    scratch = Storage("scratch", 0)
    kernel = graph_compiler.kernel(op.kind, [a, rhs, out], [scratch])
    kernel.whole()
    b = kernel.b
    square = _square_check(graph_compiler, kernel, op, a)
    od = kernel.dims(out)
    n, k = kernel.dim(a, a.type.rank - 1), od[-1]
    nn, nk = b.mul(n, n), b.mul(n, k)
    a_copy = kernel.storage_ptr(scratch)
    b_work = irutil.elem_ptr(b, a_copy, dt, nn)
    fty = irutil.F32 if dt is DType.f32 else irutil.F64
    trsm = declare_trsm(kernel.comp.module, TRSM[dt.value], fty)
    i32 = irutil.I32
    flags = [ir.Constant(i32, v) for v in (
        ROW_MAJOR, LEFT, LOWER if op.attrs["lower"] else UPPER,
        TRANS if op.attrs["adjoint"] else NO_TRANS, NON_UNIT)]
    n32, k32 = b.trunc(n, i32), b.trunc(k, i32)
    same = graph_compiler.comp.storage[rhs] == graph_compiler.comp.storage[out]

    def per_matrix(t: ir.Value, _c) -> None:
        a_base = ZERO if a.type.rank == 2 else b.mul(t, nn)
        b_base = b.mul(t, nk)

        def copy_a(i: ir.Value, _c2) -> None:
            irutil.store(b, a_copy, dt, i, irutil.load(b, kernel.ptr(a), xdt, b.add(a_base, i)))
        irutil.loop(b, ZERO, nn, copy_a, name="ca")
        work = b_work if wide else irutil.elem_ptr(b, kernel.ptr(out), dt, b_base)
        if wide or not same:
            def copy_b(i: ir.Value, _c2) -> None:
                irutil.store(b, work, dt, i,
                             irutil.load(b, kernel.ptr(rhs), xdt, b.add(b_base, i)))
            irutil.loop(b, ZERO, nk, copy_b, name="cb")
        b.call(trsm, [*flags, n32, k32, ir.Constant(fty, 1.0), a_copy, n32, work, k32])
        if wide:
            def narrow(i: ir.Value, _c2) -> None:
                irutil.store(b, kernel.ptr(out), xdt, b.add(b_base, i),
                             irutil.load(b, work, dt, i))
            irutil.loop(b, ZERO, nk, narrow, name="n")

    nonempty = b.and_(b.icmp_signed(">", n, ZERO), b.icmp_signed(">", k, ZERO))
    with b.if_then(b.and_(square, nonempty)):
        irutil.loop(b, ZERO, irutil.product(b, od[:-2]), per_matrix, name="bt")
    kernel.finish()


LOWERINGS: dict[str, Callable] = {
    "matmul": lower_matmul,
    "matrix_inverse": lower_matrix_inverse,
    "matrix_determinant": lower_matrix_determinant,
    "cholesky": lower_cholesky,  # linalg25
    "triangular_solve": lower_triangular_solve,  # linalg25
    "log_matrix_determinant": lower_log_matrix_determinant,  # linalg25
}
