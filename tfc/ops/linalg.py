"""Matrix ops: batched matrix products, inverses and determinants.

Every op works on the last two axes and treats the leading ones as a batch, as
numpy and TensorFlow do. ``matmul`` broadcasts its batch dims (numpy semantics);
the reference multiplies through ``np.matmul``, so BLAS does the work. Half
precision is computed in f32 and rounded once, as GPUs do with f32 accumulators.

Gradients (reverse mode) are built from ``matmul`` itself (with its transpose flags, so
no ``transpose`` op appears), ``sum`` and the inverse: the gradient of a matmul is again
a product of matrices, so it can be differentiated any number of times.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.registry import (FLOAT, NUMERIC, PURE, AttrSpec, Cost, OpDef, expect_dtype,
                             register, same_dtype, tensor_type)
from tfc.ir.types import DType, Dim, TensorType, broadcast_shapes, dims_compatible

PURE_ONLY = frozenset({PURE})


def dim_size(d: Dim, symbol_size: int) -> int:
    """A dim's size for cost estimates: symbols and ``?`` count as ``symbol_size``."""
    return d if isinstance(d, int) else symbol_size


def merge_dims(a: Dim, b: Dim) -> Dim:
    """The more precise of two compatible dims (a static size beats a symbol)."""
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return a if a == b or b == "?" else (b if a == "?" else a)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to compute in: f16 is widened to f32 (and rounded back once)."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


@register
class MatMul(OpDef):
    """``a @ b`` over the last two axes, batch dims broadcast; optional transposes.

    ``transpose_a`` / ``transpose_b`` swap the last two axes of an input before the
    product, so ``matmul(x, W, transpose_b=True)`` needs no separate transpose op.
    """

    name = "matmul"
    num_inputs = 2
    traits = PURE_ONLY
    attrs = {
        "transpose_a": AttrSpec("bool", False, "use the transpose of a's last two axes"),
        "transpose_b": AttrSpec("bool", False, "use the transpose of b's last two axes"),
    }

    def _mnk(self, inputs: Sequence[TensorType],
             attrs: Mapping[str, Any]) -> tuple[tuple, Dim, Dim, Dim, Dim]:
        """(batch shape, M, N, K of a, K of b), with the inputs checked."""
        a, b = inputs
        for t, which in ((a, "a"), (b, "b")):
            if t.rank < 2:
                raise TypeMismatch(f"{self.name}: {which} {t} must have rank >= 2")
        m, ka = (a.shape[-1], a.shape[-2]) if attrs["transpose_a"] else a.shape[-2:]
        kb, n = (b.shape[-1], b.shape[-2]) if attrs["transpose_b"] else b.shape[-2:]
        if not dims_compatible(ka, kb):
            flags = [f for f in ("transpose_a", "transpose_b") if attrs[f]]
            note = f" (with {', '.join(flags)})" if flags else ""
            raise TypeMismatch(
                f"{self.name}: {a} and {b}: inner dims {ka} and {kb} differ{note}")
        if len(a.shape) == 2 and len(b.shape) == 2:
            return (), m, n, ka, kb  # (no batch dims: what broadcasting gives)
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        if batch is None:
            raise TypeMismatch(f"{self.name}: batch dims of {a} and {b} do not broadcast")
        return batch, m, n, ka, kb

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        dtype = same_dtype(self.name, inputs)
        expect_dtype(self.name, inputs[0], NUMERIC)
        batch, m, n, _, _ = self._mnk(inputs, attrs)
        return [tensor_type(dtype, (*batch, m, n))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        a, b = inputs
        if attrs["transpose_a"]:
            a = np.swapaxes(a, -1, -2)
        if attrs["transpose_b"]:
            b = np.swapaxes(b, -1, -2)
        if a.shape[-1] != b.shape[-2]:
            raise ExecutionError(f"{self.name}: inner dims {a.shape[-1]} and {b.shape[-2]} "
                                 f"differ at run time")
        acc = compute_dtype(a.dtype)
        out = np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))
        return [np.asarray(out, dtype=inputs[0].dtype)]

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        batch, m, n, ka, kb = self._mnk(inputs, attrs)
        k = merge_dims(ka, kb)
        count = 1
        for d in (*batch, m, n, k):
            count *= dim_size(d, symbol_size)
        moved = sum(t.nbytes(symbol_size) for t in (*inputs, *outputs))
        return Cost(2.0 * count, moved)

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """``C = op(A) @ op(B)``: each input's gradient is one more matmul whose flags
        absorb the transposes (TensorFlow's four cases), summed over the batch dims that
        were broadcast (``b.sum_to``)."""
        a, bb = op.inputs
        (dc,) = grads
        ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
        if not ta and not tb:
            da = b("matmul", dc, bb, transpose_b=True)    # dC B^T
            db = b("matmul", a, dc, transpose_a=True)     # A^T dC
        elif not ta and tb:
            da = b("matmul", dc, bb)                      # dC B
            db = b("matmul", dc, a, transpose_a=True)     # dC^T A
        elif ta and not tb:
            da = b("matmul", bb, dc, transpose_b=True)    # B dC^T
            db = b("matmul", a, dc)                       # A dC
        else:
            da = b("matmul", bb, dc, transpose_a=True, transpose_b=True)  # B^T dC^T
            db = b("matmul", dc, a, transpose_a=True, transpose_b=True)   # dC^T A^T
        return [b.sum_to(da, a), b.sum_to(db, bb)]


def square_shape(op: str, t: TensorType) -> tuple[Dim, ...]:
    """The shape of a batch of square matrices ``[..., N, N]`` (N merged), or an error."""
    if t.rank < 2:
        raise TypeMismatch(f"{op}: input {t} must have rank >= 2 (a batch of square matrices)")
    r, c = t.shape[-2:]
    if not dims_compatible(r, c):
        raise TypeMismatch(f"{op}: input {t} is not square: its matrices are {r} x {c}")
    n = merge_dims(r, c)
    return (*t.shape[:-2], n, n)


def check_square(op: str, x: np.ndarray) -> None:
    if x.shape[-1] != x.shape[-2]:
        raise ExecutionError(f"{op}: matrices of shape {list(x.shape)} are not square")


class SquareMatrixOp(OpDef):
    """Shared checks and cost of ops on batches of square float matrices."""

    num_inputs = 1
    traits = PURE_ONLY
    flops_per_matrix = 1.0  # times N^3

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        shape = square_shape(self.name, inputs[0])
        count = 1
        for d in shape[:-2]:
            count *= dim_size(d, symbol_size)
        n = dim_size(shape[-1], symbol_size)
        moved = sum(t.nbytes(symbol_size) for t in (*inputs, *outputs))
        return Cost(self.flops_per_matrix * count * n ** 3, moved)


class _SquareToSquare(SquareMatrixOp):
    """An op from each square float matrix to one of its shape (inverse, Cholesky factor):
    ``compute(x, type)`` is its reference, with errors naming the matrix by ``type`` (the
    op's input type under ``reference_op``, which is all the native backend has, so both
    backends word them alike)."""

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        expect_dtype(self.name, inputs[0], FLOAT)
        return [inputs[0].with_shape(square_shape(self.name, inputs[0]))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [self.compute(x, TensorType(DType.from_numpy(x.dtype), x.shape))]

    def reference_op(self, ctx: Any, op: Any, inputs: Sequence[np.ndarray]
                     ) -> list[np.ndarray]:
        return [self.compute(inputs[0], op.inputs[0].type)]

    def compute(self, x: np.ndarray, t: TensorType) -> np.ndarray:
        raise NotImplementedError


@register
class MatrixInverse(_SquareToSquare):
    """The inverse of each ``[N, N]`` matrix. A matrix that is singular to working
    precision is a run-time error, "input is not invertible" as TensorFlow says, on every
    backend alike (``ill_conditioned``)."""

    name = "matrix_inverse"
    flops_per_matrix = 2.0  # LU factorization (2/3 N^3) + solving for N columns (4/3 N^3)

    def compute(self, x: np.ndarray, t: TensorType) -> np.ndarray:
        """The inverses of the matrices of ``x`` (of type ``t``), or the singular error."""
        check_square(self.name, x)
        xc = x.astype(compute_dtype(x.dtype), copy=False)
        try:
            out = np.linalg.inv(xc)
        except np.linalg.LinAlgError:
            raise ExecutionError(singular_message(self.name, t)) from None
        if ill_conditioned(xc, out).any():
            raise ExecutionError(singular_message(self.name, t))
        return out.astype(x.dtype, copy=False)

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """``Y = A^-1``: ``dA = -Y^T dY Y^T`` (from ``d(A^-1) = -A^-1 dA A^-1``), reusing
        the forward result; matmul flags do the transposes."""
        y, (dy,) = op.result, grads
        return [b("neg", b("matmul", y, b("matmul", dy, y, transpose_b=True),
                           transpose_a=True))]


# When is a matrix not invertible? An LU factorization with partial pivoting (numpy's,
# LAPACK's getrf in the native backend) meets an exactly zero pivot only by luck of the
# rounding: most singular matrices leave a pivot of rounding size and an "inverse" of
# garbage (1e16), and two factorizations (numpy's of A, LAPACK's of A^T) disagree on
# which. So, as LAPACK's expert drivers (?gesvx: "singular to working precision"), a
# matrix is singular when its reciprocal condition number is below the machine epsilon
# of the dtype it is computed in: ||A||_inf * ||A^-1||_inf * eps >= 1. Both backends
# compute that from the inverse they got (an O(N^2) check), so they agree except for
# matrices within rounding of the threshold. NaN in the input propagates (no error).

def inverse_epsilon(dtype: np.dtype) -> float:
    """The machine epsilon of the dtype a matrix of ``dtype`` is inverted in."""
    return float(np.finfo(compute_dtype(np.dtype(dtype))).eps)


def ill_conditioned(x: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """Per matrix of the batch: whether ``inv``, the computed inverse of ``x``, shows
    ``x`` to be singular to working precision (false where either holds NaN)."""
    def norm(m: np.ndarray) -> np.ndarray:  # max row sum of |m|, in f64
        return np.abs(m.astype(np.float64)).sum(axis=-1).max(axis=-1, initial=0.0)

    with np.errstate(over="ignore", invalid="ignore"):
        cond = norm(x) * norm(inv)
        return cond * inverse_epsilon(x.dtype) >= 1.0


def singular_message(op: str, t: TensorType) -> str:
    """The error for a singular input of type ``t`` (the same text on every backend, so
    it names the matrix by the static type only)."""
    n = t.shape[-1]
    what = (f"the {n}x{n} matrix" if t.rank == 2 and isinstance(n, int)
            else "a matrix" if t.rank == 2 else "a matrix of the batch")
    return f"{op}: input is not invertible: {what} is singular to working precision"


@register
class MatrixDeterminant(SquareMatrixOp):
    """The determinant of each ``[N, N]`` matrix: ``[..., N, N] -> [...]`` (LU based)."""

    name = "matrix_determinant"
    flops_per_matrix = 2.0 / 3.0

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        expect_dtype(self.name, inputs[0], FLOAT)
        return [inputs[0].with_shape(square_shape(self.name, inputs[0])[:-2])]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        check_square(self.name, x)
        out = np.linalg.det(x.astype(compute_dtype(x.dtype), copy=False))
        return [np.asarray(out, dtype=x.dtype)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Jacobi's formula: ``d det(A) / dA = det(A) A^-T``, so ``dA = dy det A^-T`` per
        matrix of the batch (as TensorFlow; undefined for a singular A, whose inverse
        fails at run time)."""
        a, (dy,) = op.inputs[0], grads
        scale = b("mul", dy, op.result)                     # [...]
        scale = b("expand_dims", b("expand_dims", scale, axis=-1), axis=-1)
        rank = a.type.rank
        perm = (*range(rank - 2), rank - 1, rank - 2)
        inv_t = b("transpose", b("matrix_inverse", a), perm=perm)
        return [b("mul", scale, inv_t)]


@register
class Cholesky(_SquareToSquare):
    """The lower-triangular ``L`` with ``L L^T = A`` of each symmetric positive-definite
    ``[N, N]`` matrix (``tf.linalg.cholesky``; only ``A``'s lower triangle is read, as
    TensorFlow's, numpy's and LAPACK's). A matrix that is not positive definite is a
    run-time error on every backend alike; a NaN in the lower triangle gives a matrix of
    NaN (LAPACKs disagree there: some stop, some run on). f16 is computed in f32."""

    name = "cholesky"
    flops_per_matrix = 1.0 / 3.0

    def compute(self, x: np.ndarray, t: TensorType) -> np.ndarray:
        check_square(self.name, x)
        xc = np.tril(x.astype(compute_dtype(x.dtype), copy=False))
        n = x.shape[-1]
        nan = np.isnan(xc).any(axis=(-2, -1)) if n else np.zeros(x.shape[:-2], bool)
        safe = np.where(nan[..., None, None], np.eye(n, dtype=xc.dtype), xc)
        try:
            out = np.linalg.cholesky(safe + np.swapaxes(np.tril(safe, -1), -1, -2))
        except np.linalg.LinAlgError:
            raise ExecutionError(not_positive_definite(self.name, t)) from None
        out = np.where(nan[..., None, None], np.nan, out)
        return out.astype(x.dtype, copy=False)

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """TensorFlow's ``_CholeskyGrad`` (Murray 2016): with ``M = tril(L^T dL)``, its
        diagonal halved, ``dA = sym(L^-T M L^-1)`` (``sym(X) = (X + X^T) / 2``). ``L^-1``
        is ``matrix_inverse`` of ``L``; the triangle is a constant mask, so the matrix
        size must be static."""
        lo, (dl,) = op.result, grads
        n = lo.type.shape[-1]
        if not isinstance(n, int):
            raise TypeMismatch(f"{self.name}: the gradient needs a static matrix size, got "
                               f"{lo.type}")
        mask = np.tril(np.ones((n, n))) - 0.5 * np.eye(n)
        mask_c = b("constant", value=mask.astype(lo.dtype.np))
        middle = b("mul", b("matmul", lo, dl, transpose_a=True), mask_c)
        inv = b("matrix_inverse", lo)
        g = b("matmul", b("matmul", inv, middle, transpose_a=True), inv)
        rank = lo.type.rank
        perm = (*range(rank - 2), rank - 1, rank - 2)
        g = b("add", g, b("transpose", g, perm=perm))
        return [b("mul", g, b("constant", value=np.asarray(0.5, lo.dtype.np)))]


def not_positive_definite(op: str, t: TensorType) -> str:
    """The error for an input of type ``t`` that is not positive definite (one text on
    every backend: the static type only)."""
    n = t.shape[-1]
    what = (f"the {n}x{n} matrix" if t.rank == 2 and isinstance(n, int)
            else "a matrix" if t.rank == 2 else "a matrix of the batch")
    return f"{op}: input is not positive definite: {what}"


@register
class TriangularSolve(OpDef):
    """``X`` with ``op(A) X = B`` for triangular ``A`` ``[..., N, N]`` and right-hand sides
    ``B`` ``[..., N, K]`` (``tf.linalg.triangular_solve``): ``lower`` says which triangle
    of ``A`` is read (the other is ignored, as TensorFlow), ``adjoint`` solves with
    ``A^T``. A's batch dims equal B's, or ``A`` is one matrix for all of B's. A zero on
    the diagonal divides by zero (inf/NaN, no error: as TF's and BLAS's trsm)."""

    name = "triangular_solve"
    num_inputs = 2
    traits = PURE_ONLY
    attrs = {
        "lower": AttrSpec("bool", True, "A is lower triangular (else upper)"),
        "adjoint": AttrSpec("bool", False, "solve with A's transpose"),
    }

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        a, rhs = inputs
        dtype = same_dtype(self.name, inputs)
        expect_dtype(self.name, a, FLOAT)
        shape = square_shape(self.name, a)
        if rhs.rank < 2:
            raise TypeMismatch(f"{self.name}: the right-hand sides {rhs} must have rank >= 2")
        if not dims_compatible(shape[-1], rhs.shape[-2]):
            raise TypeMismatch(f"{self.name}: {a} and {rhs}: A is {shape[-1]} x {shape[-1]} "
                               f"but B has {rhs.shape[-2]} rows")
        if a.rank != 2 and (a.rank != rhs.rank or any(
                not dims_compatible(x, y) for x, y in zip(a.shape[:-2], rhs.shape[:-2]))):
            raise TypeMismatch(f"{self.name}: the batch dims of {a} and {rhs} must be equal "
                               "(or A one matrix)")
        return [tensor_type(dtype, (*rhs.shape[:-2], merge_dims(shape[-1], rhs.shape[-2]),
                                    rhs.shape[-1]))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        a, rhs = inputs
        check_square(self.name, a)
        if a.shape[-1] != rhs.shape[-2] or (a.ndim != 2 and a.shape[:-2] != rhs.shape[:-2]):
            raise ExecutionError(f"{self.name}: A {list(a.shape)} and B {list(rhs.shape)} do "
                                 "not fit at run time")
        acc = compute_dtype(a.dtype)
        m = np.tril(a) if attrs["lower"] else np.triu(a)
        m = np.broadcast_to(m.astype(acc), (*rhs.shape[:-2], *a.shape[-2:]))
        if attrs["adjoint"]:
            m = np.swapaxes(m, -1, -2)
        forward = attrs["lower"] != attrs["adjoint"]
        x = np.zeros(rhs.shape, acc)
        bb = rhs.astype(acc)
        n = a.shape[-1]
        with np.errstate(divide="ignore", invalid="ignore"):
            for i in (range(n) if forward else range(n - 1, -1, -1)):
                done = slice(0, i) if forward else slice(i + 1, n)
                s = bb[..., i, :] - np.einsum("...j,...jk->...k", m[..., i, done], x[..., done, :])
                x[..., i, :] = s / m[..., i, i][..., None]
        return [x.astype(rhs.dtype, copy=False)]

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        count = 1
        for d in outputs[0].shape:
            count *= dim_size(d, symbol_size)
        n = dim_size(inputs[0].shape[-1], symbol_size)
        moved = sum(t.nbytes(symbol_size) for t in (*inputs, *outputs))
        return Cost(float(count * n), moved)

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """TensorFlow's ``_MatrixTriangularSolveGrad``: ``dB`` solves with the other
        ``adjoint``; ``dA = -dB X^T`` (``-X dB^T`` with ``adjoint``) kept on A's triangle
        (a constant mask: N must be static), summed over B's batch when A is one
        matrix."""
        a, _ = op.inputs
        x, (dx,) = op.result, grads
        lower, adjoint = op.attrs["lower"], op.attrs["adjoint"]
        n = a.type.shape[-1]
        if not isinstance(n, int):
            raise TypeMismatch(f"{self.name}: the gradient needs a static matrix size, got "
                               f"{a.type}")
        db = b("triangular_solve", a, dx, lower=lower, adjoint=not adjoint)
        da = (b("matmul", x, db, transpose_b=True) if adjoint
              else b("matmul", db, x, transpose_b=True))
        tri = np.tril(np.ones((n, n))) if lower else np.triu(np.ones((n, n)))
        da = b("mul", b("neg", da), b("constant", value=tri.astype(a.dtype.np)))
        return [b.sum_to(da, a), db]


@register
class LogMatrixDeterminant(SquareMatrixOp):
    """``(sign, log|det|)`` of each ``[N, N]`` matrix: ``[..., N, N] -> [...], [...]``
    (``tf.linalg.slogdet``; LU based, the logs summed: no overflow where ``det`` would).
    A singular matrix gives sign 0 and ``-inf``, as numpy and TensorFlow."""

    name = "log_matrix_determinant"
    flops_per_matrix = 2.0 / 3.0

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        expect_dtype(self.name, inputs[0], FLOAT)
        t = inputs[0].with_shape(square_shape(self.name, inputs[0])[:-2])
        return [t, t]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        check_square(self.name, x)
        wide = np.float64 if x.dtype == np.float32 else compute_dtype(x.dtype)
        sign, logdet = np.linalg.slogdet(x.astype(wide, copy=False))
        return [np.asarray(sign, dtype=x.dtype), np.asarray(logdet, dtype=x.dtype)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """``d log|det A| / dA = A^-T`` (TensorFlow's ``_LogMatrixDeterminantGrad``); the
        sign has no gradient."""
        dlog = grads[1]
        if dlog is None:
            return [None]
        a = op.inputs[0]
        scale = b("expand_dims", b("expand_dims", dlog, axis=-1), axis=-1)
        rank = a.type.rank
        perm = (*range(rank - 2), rank - 1, rank - 2)
        return [b("mul", scale, b("transpose", b("matrix_inverse", a), perm=perm))]
