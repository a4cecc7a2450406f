"""Matrix products as one prepared cuBLAS call: ``GemmPlan`` and its emulation.

cuBLAS is column-major; tfc's arrays are row-major. A row-major ``(r, c)`` array is the
column-major ``(c, r)`` matrix with leading dimension ``c``, so the row-major product
``C = op_a(a) @ op_b(b)`` is the column-major ``C^T = op_b(b)^T @ op_a(a)^T``: one
``gemm`` whose *first* operand is ``b`` and second ``a``, with no copy and the
transposes as flags. ``gemm_plan`` computes that call's arguments once per binding;
``emulate_gemm`` carries them out with numpy views that follow BLAS's definition
(element ``(i, j)`` of a column-major operand at ``i + j * ld``), so every CI run checks
the arguments the GPU is given, not a separate code path.

Batches (``(..., m, k) @ (..., k, n)``) are one strided-batched call: an operand with the
output's batch dims steps by its matrix size, one without batch dims (or a batch of one)
by 0. Other broadcasts, empty dims and operands that are not C-contiguous have no plan
(the caller uses the array module's ``matmul``).

Precision (``compute``): f16 operands are multiplied with f32 accumulation
(``CUBLAS_COMPUTE_32F``, tensor cores) into an f32 result that is then rounded to f16
once: the reference's contract (``compute_dtype``: f16 widened to f32, one rounding).
Under the emulator that is numpy's widen-then-round, exactly the reference's code. On
an H200 (512x4096 @ 4096x512, normal inputs) 99.0% of the products are the correctly
rounded exact value (f32 SGEMM of the widened operands: 99.8%), every one within half
an f16 ulp of the largest value, and within the f32 accumulation bound
``k 2^-23 |A||B|`` plus half an ulp of its own; where sums cancel, the worst error is
289 ulps of the (tiny) exact value against SGEMM's 69: cuBLAS's f16 kernels sum in
another order (``CUBLAS_COMPUTE_32F_PEDANTIC`` gives the same bits at 14x the time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

OP_N, OP_T = 0, 1  # cublasOperation_t


@dataclass(frozen=True)
class GemmPlan:
    """The arguments of one (strided batched) column-major ``gemm``, in BLAS's names:
    ``C[i] (m x n, ld ldc) = op(A[i]) (m x k) @ op(B[i]) (k x n)`` for ``i < batch``,
    operand ``X[i]`` at element offset ``i * stride_x``. BLAS's ``A`` is tfc's ``b``
    and BLAS's ``B`` tfc's ``a`` (module docstring)."""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    stride_a: int
    stride_b: int
    stride_c: int
    batch: int
    out_shape: tuple[int, ...]


def gemm_plan(a_shape: Sequence[int], b_shape: Sequence[int], transpose_a: bool,
              transpose_b: bool) -> GemmPlan | None:
    """The call computing row-major ``op_a(a) @ op_b(b)`` for C-contiguous ``a`` and
    ``b`` of these shapes, or None when one call cannot (broadcast batch dims other than
    a missing batch, an empty dim, inner dims that differ: the caller's general path
    reports or handles those)."""
    if len(a_shape) < 2 or len(b_shape) < 2:
        return None
    ra, ca = a_shape[-2:]
    rb, cb = b_shape[-2:]
    rows, inner = (ca, ra) if transpose_a else (ra, ca)  # op_a(a) is rows x inner
    inner_b, cols = (cb, rb) if transpose_b else (rb, cb)
    if inner != inner_b or 0 in (rows, cols, inner):
        return None
    a_batch, b_batch = tuple(a_shape[:-2]), tuple(b_shape[:-2])
    try:
        out_batch = tuple(np.broadcast_shapes(a_batch, b_batch))
    except ValueError:
        return None
    strides = []
    for batch, size in ((b_batch, rb * cb), (a_batch, ra * ca)):
        if batch == out_batch:
            strides.append(size if batch else 0)
        elif math.prod(batch) == 1:
            strides.append(0)
        else:
            return None
    count = math.prod(out_batch)
    if count == 0:
        return None
    return GemmPlan(transa=OP_T if transpose_b else OP_N, transb=OP_T if transpose_a else OP_N,
                    m=cols, n=rows, k=inner, lda=cb, ldb=ca, ldc=cols,
                    stride_a=strides[0], stride_b=strides[1], stride_c=rows * cols,
                    batch=count, out_shape=(*out_batch, rows, cols))


def _operand(flat: np.ndarray, offset: int, trans: int, rows: int, cols: int, ld: int
             ) -> np.ndarray:
    """``op(X)`` (``rows x cols``) of the column-major matrix at ``flat[offset:]`` with
    leading dimension ``ld``: BLAS's definition, as a numpy view."""
    stored = (rows, cols) if trans == OP_N else (cols, rows)
    item = flat.itemsize
    view = np.lib.stride_tricks.as_strided(flat[offset:], shape=stored,
                                           strides=(item, ld * item), writeable=False)
    return view if trans == OP_N else view.T


def emulate_gemm(plan: GemmPlan, a: np.ndarray, b: np.ndarray, out: np.ndarray,
                 compute: Any) -> None:
    """``plan`` carried out on the CPU for tfc operands ``a``, ``b`` into ``out``
    (row-major, ``plan.out_shape``): each product in dtype ``compute`` (f32 for f16
    operands), rounded once into ``out``. The operands are read through BLAS views of
    the flat storage built from the plan's arguments alone, and multiplied as the
    reference multiplies (``op_a(a) @ op_b(b)``, which is ``(op(A) @ op(B))^T``)."""
    fa, fb = a.reshape(-1), b.reshape(-1)  # BLAS's B and A
    fc = out.reshape(-1)
    p = plan
    for i in range(p.batch):
        blas_a = _operand(fb, i * p.stride_a, p.transa, p.m, p.k, p.lda)
        blas_b = _operand(fa, i * p.stride_b, p.transb, p.k, p.n, p.ldb)
        c = np.lib.stride_tricks.as_strided(fc[i * p.stride_c:], shape=(p.m, p.n),
                                            strides=(fc.itemsize, p.ldc * fc.itemsize))
        prod = np.matmul(blas_b.T.astype(compute, copy=False),
                         blas_a.T.astype(compute, copy=False))
        c.T[...] = prod


__all__ = ["GemmPlan", "OP_N", "OP_T", "emulate_gemm", "gemm_plan"]
