"""Declarations of the BLAS and LAPACKE functions kernels call (``scipy-openblas32``).

The functions' addresses are bound for the JIT by ``tfc.backends.llvm.runtime.symbols``,
which also names them (``SGEMM``, ``GETRF``...).
"""

from __future__ import annotations

import llvmlite.ir as ir

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
# Column-major LAPACKE calls on row-major data factor the transpose.
COL_MAJOR = 102


def declare_gemm(module: ir.Module, name: str, ftype: ir.Type) -> ir.Function:
    """``void cblas_?gemm(order, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)``."""
    if name in module.globals:
        return module.globals[name]
    i32, ptr = ir.IntType(32), ir.PointerType()
    fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i32, i32, i32, ftype, ptr, i32,
                                           ptr, i32, ftype, ptr, i32])
    return ir.Function(module, fnty, name)


def declare_getrf(module: ir.Module, name: str) -> ir.Function:
    """``lapack_int LAPACKE_?getrf_work(layout, m, n, a, lda, ipiv)`` (32-bit ints):
    LU with partial pivoting in place; ``info > 0`` when ``U[info-1, info-1]`` is 0."""
    if name in module.globals:
        return module.globals[name]
    i32, ptr = ir.IntType(32), ir.PointerType()
    return ir.Function(module, ir.FunctionType(i32, [i32, i32, i32, ptr, i32, ptr]), name)


def declare_getri(module: ir.Module, name: str) -> ir.Function:
    """``lapack_int LAPACKE_?getri_work(layout, n, a, lda, ipiv, work, lwork)``: the inverse
    from ``getrf``'s factors, in place."""
    if name in module.globals:
        return module.globals[name]
    i32, ptr = ir.IntType(32), ir.PointerType()
    return ir.Function(module, ir.FunctionType(i32, [i32, i32, ptr, i32, ptr, ptr, i32]), name)


def declare_potrf(module: ir.Module, name: str) -> ir.Function:
    """``lapack_int LAPACKE_?potrf_work(layout, uplo, n, a, lda)``: the Cholesky factor in
    place (``uplo`` a char, ``'U'`` or ``'L'``); ``info > 0`` when the leading minor of
    order ``info`` is not positive definite."""
    if name in module.globals:
        return module.globals[name]
    i8, i32, ptr = ir.IntType(8), ir.IntType(32), ir.PointerType()
    return ir.Function(module, ir.FunctionType(i32, [i32, i8, i32, ptr, i32]), name)


LEFT, UPPER, LOWER, NON_UNIT = 141, 121, 122, 131


def declare_trsm(module: ir.Module, name: str, ftype: ir.Type) -> ir.Function:
    """``void cblas_?trsm(order, side, uplo, transa, diag, M, N, alpha, A, lda, B, ldb)``:
    ``B := alpha op(A)^-1 B`` in place (side left), ``A`` triangular."""
    if name in module.globals:
        return module.globals[name]
    i32, ptr = ir.IntType(32), ir.PointerType()
    fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i32, i32, i32, i32, ftype, ptr,
                                           i32, ptr, i32])
    return ir.Function(module, fnty, name)
