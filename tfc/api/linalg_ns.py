"""``tfc.linalg`` (``tf.linalg``'s names), the norms (``tfc.norm``, ``tfc.clip_by_norm``)
and the moment reductions of ``tfc.math`` (``reduce_variance``, ``reduce_std``,
``reduce_euclidean_norm``).

Only ``matmul``, ``matrix_inverse`` and ``matrix_determinant`` are registry ops
(``tfc.ops.linalg``, LAPACK on llvm); everything here is composed of registry ops, exact
where TensorFlow's kernel is: a diagonal is a ``gather`` of the flattened matrices (so
-0.0, inf and NaN move bit for bit), a diagonal matrix a ``gather`` from the vector with
the padding value appended, a band a ``where`` on a static index mask, ``trace`` the sum
of the diagonal (TF's own composition). The norms follow ``tf.norm``'s and
``tf.clip_by_norm``'s Python source step for step, so their values and gradients agree
with TensorFlow's. Matrix sizes are static (batch dims may be symbolic, where a reshape
can carry one as -1); what would need a size known only at run time, or a kernel tfc has
not got (an SVD: the matrix 2-norm), is an error at the user's line.
"""

from __future__ import annotations

import builtins
from typing import Any, Sequence

import numpy as np

from tfc.api import ops
from tfc.api.array_ops import einsum, eye, tensordot
from tfc.api.gradients import IndexedSlices
from tfc.api.graph import Tensor, Variable, user_location
from tfc.api.nn import l2_normalize
from tfc.api.tensor import TensorLike, apply, constant, convert_to_tensor
from tfc.errors import TypeMismatch

__all__ = ["matmul", "matvec", "inv", "det", "cholesky", "triangular_solve", "cholesky_solve",
           "logdet", "slogdet", "eye", "diag", "diag_part", "trace", "band_part", "matrix_transpose",
           "adjoint", "tensordot", "einsum", "norm", "normalize", "l2_normalize"]


def _error(msg: str) -> TypeMismatch:
    return TypeMismatch(msg, user_location())


def _matrices(op: str, x: TensorLike) -> tuple[Tensor, int, int]:
    """``x`` as a tensor of rank >= 2 with static matrix sizes (rows, cols)."""
    t = convert_to_tensor(x)
    if t.type.rank < 2:
        raise _error(f"{op}: input {t.type} must have rank >= 2 (a batch of matrices)")
    m, n = t.type.shape[-2:]
    if not isinstance(m, int) or not isinstance(n, int):
        raise _error(f"{op}: the matrix sizes of {t.type} must be static")
    return t, m, n


def _batch_target(op: str, batch: Sequence[Any], *tail: int) -> list[int]:
    """A reshape target ``[*batch, *tail]``: one symbolic batch dim as -1."""
    syms = [d for d in batch if not isinstance(d, int)]
    if len(syms) > 1:
        raise _error(f"{op}: cannot reshape through more than one symbolic dim ({syms})")
    return [d if isinstance(d, int) else -1 for d in batch] + list(tail)


def _single_k(op: str, k: Any) -> int:
    if isinstance(k, (list, tuple)):
        if len(k) == 2 and k[0] == k[1]:
            k = k[0]
        else:
            raise _error(f"{op}: a band of diagonals (k={list(k)}) is not supported; give "
                         "one diagonal, an int k")
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise _error(f"{op}: k must be a Python int (static), got {k!r}")
    return int(k)


# ---- products, inverses, transposes -----------------------------------------------------

def matrix_transpose(a: TensorLike, name: str | None = None,
                     conjugate: bool = False) -> Tensor:
    """The last two axes swapped (``tf.linalg.matrix_transpose``; tfc has no complex
    dtypes, so ``conjugate`` changes nothing)."""
    t = convert_to_tensor(a)
    r = t.type.rank
    if r < 2:
        raise _error(f"matrix_transpose: input {t.type} must have rank >= 2")
    return ops.transpose(t, [*builtins.range(r - 2), r - 1, r - 2], name=name)


def adjoint(matrix: TensorLike, name: str | None = None) -> Tensor:
    """The conjugate transpose of the last two axes: the transpose, for real dtypes."""
    return matrix_transpose(matrix, name=name)


def matmul(a: TensorLike, b: TensorLike, transpose_a: bool = False,
           transpose_b: bool = False, adjoint_a: bool = False, adjoint_b: bool = False,
           a_is_sparse: bool = False, b_is_sparse: bool = False, output_type: Any = None,
           name: str | None = None) -> Tensor:
    """``tf.linalg.matmul``: ``adjoint_*`` is ``transpose_*`` for real dtypes (giving
    both for one input is an error, as TF); the sparsity hints are ignored."""
    if (transpose_a and adjoint_a) or (transpose_b and adjoint_b):
        raise _error("matmul: give transpose_x or adjoint_x for an input, not both")
    if output_type is not None:
        raise _error("matmul: output_type (TF's int8 products) is not supported")
    return ops.matmul(a, b, transpose_a=transpose_a or adjoint_a,
                      transpose_b=transpose_b or adjoint_b, name=name)


def matvec(a: TensorLike, b: TensorLike, transpose_a: bool = False, adjoint_a: bool = False,
           a_is_sparse: bool = False, b_is_sparse: bool = False,
           name: str | None = None) -> Tensor:
    """``a @ b`` of matrices ``[..., M, N]`` and vectors ``[..., N]`` (``tf.linalg.matvec``:
    TF's own composition, a matmul with the vector as a column)."""
    col = ops.expand_dims(b, -1)
    return ops.squeeze(matmul(a, col, transpose_a=transpose_a, adjoint_a=adjoint_a), [-1])


def inv(input: TensorLike, adjoint: bool = False,  # noqa: A002 (TF's name)
        name: str | None = None) -> Tensor:
    """The inverse of each matrix (``tf.linalg.inv``; ``adjoint``: of its transpose)."""
    x = matrix_transpose(input) if adjoint else input
    return ops.matrix_inverse(x, name=name)


def cholesky(input: TensorLike, name: str | None = None) -> Tensor:  # noqa: A002
    """The lower-triangular Cholesky factor of each symmetric positive-definite matrix
    (``tf.linalg.cholesky``: registry op ``cholesky``, LAPACK's ``potrf`` on llvm; only the
    lower triangle is read; not positive definite is a run-time error)."""
    return apply("cholesky", input, name=name)


def triangular_solve(matrix: TensorLike, rhs: TensorLike, lower: bool = True,
                     adjoint: bool = False, name: str | None = None) -> Tensor:
    """``X`` with ``matrix @ X = rhs`` (``matrix^T @ X`` with ``adjoint``) for triangular
    matrices ``[..., N, N]`` and right-hand sides ``[..., N, K]``
    (``tf.linalg.triangular_solve``; registry op ``triangular_solve``, BLAS's trsm on
    llvm). Only the ``lower`` (else upper) triangle is read; the batch dims must be equal
    or the matrix one ``[N, N]`` (TF broadcasts them more generally)."""
    return apply("triangular_solve", matrix, rhs, lower=bool(lower), adjoint=bool(adjoint),
                 name=name)


def slogdet(input: TensorLike, name: str | None = None  # noqa: A002
            ) -> tuple[Tensor, Tensor]:
    """``(sign, log|det|)`` of each matrix (``tf.linalg.slogdet``: registry op
    ``log_matrix_determinant``, LU based; a singular matrix gives 0 and -inf)."""
    sign, logdet = apply("log_matrix_determinant", input, name=name)
    return sign, logdet


def cholesky_solve(chol: TensorLike, rhs: TensorLike, name: str | None = None) -> Tensor:
    """``X`` with ``A X = rhs`` given ``chol``, A's Cholesky factor
    (``tf.linalg.cholesky_solve``, TF's composition: two triangular solves, with ``L``
    then with ``L^T``)."""
    y = triangular_solve(chol, rhs, lower=True, adjoint=False)
    return triangular_solve(chol, y, lower=True, adjoint=True, name=name)


def logdet(matrix: TensorLike, name: str | None = None) -> Tensor:
    """``log(det(A))`` of symmetric positive-definite matrices (``tf.linalg.logdet``,
    TF's formula: ``2 * sum(log(diag(cholesky(A))))``, no overflow where ``det`` would)."""
    chol = cholesky(matrix)
    out = ops.reduce_sum(ops.log(diag_part(chol)), -1) * 2.0
    return out if name is None else ops.identity(out, name=name)


def det(input: TensorLike, name: str | None = None) -> Tensor:  # noqa: A002
    """The determinant of each matrix (``tf.linalg.det``)."""
    return ops.matrix_determinant(input, name=name)


# ---- diagonals and bands -----------------------------------------------------------------

def diag_part(input: TensorLike, name: str | None = None, k: Any = 0,  # noqa: A002
              padding_value: float = 0, align: str = "RIGHT_LEFT") -> Tensor:
    """Diagonal ``k`` of each matrix ``[..., M, N]`` (``tf.linalg.diag_part``: 0 the main
    one, > 0 above it, < 0 below): the elements gathered from the flattened matrices, so
    they move bit for bit. One diagonal (``padding_value`` and ``align`` matter only for
    TF's bands of several, which are not supported)."""
    t, m, n = _matrices("diag_part", input)
    k = _single_k("diag_part", k)
    if not -m < k < n:
        raise _error(f"diag_part: diagonal k={k} is outside the {m}x{n} matrices of "
                     f"{t.type}")
    length = min(m + min(k, 0), n - max(k, 0))
    idx = np.array([(i - min(k, 0)) * n + i + max(k, 0) for i in builtins.range(length)],
                   np.int32)
    batch = t.type.shape[:-2]
    flat = ops.reshape(t, _batch_target("diag_part", batch, m * n))
    return ops.gather(flat, idx, axis=len(batch))


def diag(diagonal: TensorLike, name: str | None = None, k: Any = 0, num_rows: int = -1,
         num_cols: int = -1, padding_value: float = 0, align: str = "RIGHT_LEFT") -> Tensor:
    """Matrices with ``diagonal`` ``[..., N]`` on their diagonal ``k`` and
    ``padding_value`` elsewhere (``tf.linalg.diag``): a ``gather`` from the vectors with
    the padding appended, so values (and -0.0, inf, NaN) move exactly. Without
    ``num_rows``/``num_cols`` the matrices are square, ``N + |k|``; one given, the other
    is the least that holds the diagonal (TF's rule)."""
    v = convert_to_tensor(diagonal)
    if v.type.rank < 1 or not isinstance(v.type.shape[-1], int):
        raise _error(f"diag: the diagonal {v.type} must have rank >= 1 and a static last dim")
    k = _single_k("diag", k)
    n = v.type.shape[-1]
    min_rows, min_cols = n - min(k, 0), n + max(k, 0)
    rows, cols = int(num_rows), int(num_cols)
    if rows == -1 and cols == -1:
        rows = cols = max(min_rows, min_cols)
    rows = min_rows if rows == -1 else rows
    cols = min_cols if cols == -1 else cols
    if rows < min_rows or cols < min_cols or (rows != min_rows and cols != min_cols):
        raise _error(f"diag: a diagonal of {n} at k={k} needs num_rows={min_rows} (or more, "
                     f"with num_cols={min_cols}), got num_rows={rows}, num_cols={cols}")
    idx = np.full((rows, cols), n, np.int32)
    for i in builtins.range(n):
        r, c = i - min(k, 0), i + max(k, 0)
        idx[r, c] = i
    pad = ops.zeros_like(v[..., :1]) + constant(np.asarray(padding_value, v.dtype.np))
    ext = ops.concat([v, pad], axis=-1)
    batch = v.type.shape[:-1]
    out = ops.gather(ext, idx.reshape(-1), axis=len(batch))
    return ops.reshape(out, _batch_target("diag", batch, rows, cols))


def trace(x: TensorLike, name: str | None = None) -> Tensor:
    """The sum of each matrix's diagonal (``tf.linalg.trace``, TF's composition:
    ``reduce_sum(diag_part(x), -1)``)."""
    return ops.reduce_sum(diag_part(x), -1, name=name)


def band_part(input: TensorLike, num_lower: int, num_upper: int,  # noqa: A002
              name: str | None = None) -> Tensor:
    """Each matrix with the elements outside its band set to 0 (``tf.linalg.band_part``):
    kept where ``num_lower < 0 or i - j <= num_lower`` and ``num_upper < 0 or j - i <=
    num_upper`` (a negative count keeps that whole triangle). The counts are Python ints:
    the mask is a constant."""
    t, m, n = _matrices("band_part", input)
    for what, v in (("num_lower", num_lower), ("num_upper", num_upper)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise _error(f"band_part: {what} must be a Python int (static), got {v!r}")
    i, j = np.ogrid[:m, :n]
    keep = ((num_lower < 0) | (i - j <= num_lower)) & ((num_upper < 0) | (j - i <= num_upper))
    return ops.where(keep, t, ops.zeros_like(t))


# ---- norms --------------------------------------------------------------------------------

def _float(op: str, x: TensorLike) -> Tensor:
    t = convert_to_tensor(x)
    if not t.dtype.is_float:
        raise _error(f"{op} takes float tensors, got {t.type}")
    return t


def _norm_axis(axis: Any, rank: int) -> tuple[int, ...] | None:
    """``axis`` checked: None, an int, or 2 distinct ints (a matrix norm)."""
    if axis is None:
        return None
    ax = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    if (len(ax) not in (1, 2) or any(not isinstance(a, (int, np.integer))
                                     or isinstance(a, bool) for a in ax)):
        raise _error(f"norm: axis must be None, an int or a pair of distinct ints, got "
                     f"{axis!r}")
    for a in ax:
        if not -rank <= a < rank:
            raise _error(f"norm: axis {a} is out of range for rank {rank}")
    if len(ax) == 2 and ax[0] % rank == ax[1] % rank:
        raise _error(f"norm: the axes of a matrix norm must differ, got {axis!r}")
    return tuple(int(a) for a in ax)


def norm(tensor: TensorLike, ord: Any = "euclidean",  # noqa: A002 (TF's name)
         axis: Any = None, keepdims: bool | None = None, name: str | None = None,
         keep_dims: bool | None = None) -> Tensor:
    """``tf.norm`` (``tf.linalg.norm``), TF's formulas: ``axis`` None is the norm of all
    elements as one vector, an int a batch of vectors, a pair a batch of matrices.

    Vectors: 'euclidean' / 2 ``sqrt(sum(x * x))``, 1 ``sum|x|``, ``np.inf`` ``max|x|``,
    any other p > 0 ``sum(|x|^p)^(1/p)``. Matrices: 'euclidean' / 'fro' the Frobenius
    norm, 1 the largest column sum of ``|x|``, ``np.inf`` the largest row sum. The matrix
    2-norm needs an SVD, which tfc has not got: an error. So are 'fro' of vectors and
    ``ord <= 0``, as in TensorFlow."""
    keep = bool(keepdims if keep_dims is None else keep_dims)
    t = _float("norm", tensor)
    ax = _norm_axis(axis, t.type.rank)
    matrix = ax is not None and len(ax) == 2
    if matrix:
        if ord not in ("euclidean", "fro", 1, 2, np.inf):
            raise _error(f"norm: ord must be a matrix norm ('euclidean', 'fro', 1, 2, inf), "
                         f"got {ord!r}")
        if ord == 2:
            raise _error("norm: the matrix 2-norm (ord=2 with a pair of axes) needs an SVD, "
                         "which tfc has not got; 'fro', 1 and inf are supported")
    elif (ord not in ("euclidean", 1, 2, np.inf) and (
            isinstance(ord, str) or not np.isreal(ord) or not ord > 0)):
        raise _error(f"norm: ord must be a vector norm ('euclidean', 1, 2, inf or a p > 0), "
                     f"got {ord!r}" + (" ('fro' is a matrix norm: give a pair of axes)"
                                       if ord == "fro" else ""))
    if ord in ("fro", "euclidean", 2):
        result = ops.sqrt(ops.reduce_sum(t * t, ax, keepdims=True))
    else:
        result = ops.abs(t)
        if ord == 1:
            result = ops.reduce_sum(result, None if ax is None else ax[0], keepdims=True)
            if matrix:
                assert ax is not None
                result = ops.reduce_max(result, ax[-1], keepdims=True)
        elif ord == np.inf:
            if matrix:
                assert ax is not None
                result = ops.reduce_sum(result, ax[1], keepdims=True)
            result = ops.reduce_max(result, None if ax is None else ax[0], keepdims=True)
        else:
            p = float(ord)
            result = ops.pow(ops.reduce_sum(ops.pow(result, p), ax, keepdims=True), 1.0 / p)
    if not keep:
        result = ops.squeeze(result, ax)
    return result if name is None else ops.identity(result, name=name)


def normalize(tensor: TensorLike, ord: Any = "euclidean",  # noqa: A002
              axis: Any = None, name: str | None = None) -> tuple[Tensor, Tensor]:
    """``(tensor / norm, norm)`` with the norm kept along ``axis``
    (``tf.linalg.normalize``)."""
    n = norm(tensor, ord=ord, axis=axis, keepdims=True)
    return ops.divide(tensor, n), n


def clip_by_norm(t: TensorLike | IndexedSlices, clip_norm: TensorLike,
                 axes: int | Sequence[int] | None = None,
                 name: str | None = None) -> Tensor | IndexedSlices:
    """``t * clip_norm / max(l2norm(t, axes), clip_norm)`` (``tf.clip_by_norm``, TF's
    code): the L2 norm over ``axes`` (all when None) is taken as ``where(l2sum > 0,
    sqrt(l2sum), l2sum)`` with the square root of a safe 1 where the sum is 0 (no NaN
    gradient at 0); a negative ``clip_norm`` counts as 0. Of an ``IndexedSlices``, its
    values are clipped and its indices kept."""
    values = t.values if isinstance(t, IndexedSlices) else _float("clip_by_norm", t)
    if not values.dtype.is_float:
        raise _error(f"clip_by_norm takes float tensors, got {values.type}")
    if isinstance(clip_norm, (Tensor, Variable)):
        c = convert_to_tensor(clip_norm)
        if c.type.rank != 0:
            raise _error(f"clip_by_norm: clip_norm must be a scalar, got {c.type}")
        c = ops.maximum(c, ops.zeros_like(c))
        clip: TensorLike = c if c.dtype == values.dtype else ops.cast(c, values.dtype)
    else:
        if np.ndim(clip_norm) != 0:
            raise _error(f"clip_by_norm: clip_norm must be a scalar, got {clip_norm!r}")
        clip = constant(np.asarray(builtins.max(float(clip_norm), 0.0), values.dtype.np))
    l2sum = ops.reduce_sum(values * values, axes, keepdims=True)
    pred = l2sum > 0.0
    l2sum_safe = ops.where(pred, l2sum, ops.ones_like(l2sum))
    l2norm = ops.where(pred, ops.sqrt(l2sum_safe), l2sum)
    clipped = values * clip / ops.maximum(l2norm, clip)
    if name is not None:
        clipped = ops.identity(clipped, name=name)
    if isinstance(t, IndexedSlices):
        return IndexedSlices(t.indices, clipped, t.dense)
    return clipped


# ---- moments (tfc.math) --------------------------------------------------------------------

def reduce_variance(input_tensor: TensorLike, axis: int | Sequence[int] | None = None,
                    keepdims: bool = False, name: str | None = None) -> Tensor:
    """The (biased) variance over ``axis`` (``tf.math.reduce_variance``, TF's formula:
    ``mean(square(x - mean(x)))``, the mean kept for the subtraction; integers are an
    error, as in TensorFlow)."""
    x = _float("reduce_variance", input_tensor)
    means = ops.reduce_mean(x, axis, keepdims=True)
    return ops.reduce_mean(ops.square(x - means), axis, keepdims=keepdims, name=name)


def reduce_std(input_tensor: TensorLike, axis: int | Sequence[int] | None = None,
               keepdims: bool = False, name: str | None = None) -> Tensor:
    """``sqrt(reduce_variance(x))`` (``tf.math.reduce_std``)."""
    x = _float("reduce_std", input_tensor)
    return ops.sqrt(reduce_variance(x, axis, keepdims), name=name)


def reduce_euclidean_norm(input_tensor: TensorLike, axis: int | Sequence[int] | None = None,
                          keepdims: bool = False, name: str | None = None) -> Tensor:
    """``sqrt(sum(x * x))`` over ``axis`` (``tf.math.reduce_euclidean_norm``, which TF's
    kernel computes so). Float tensors only: TensorFlow's integer version (a truncated
    square root) is not supported (README differences)."""
    x = _float("reduce_euclidean_norm", input_tensor)
    return ops.sqrt(ops.reduce_sum(x * x, axis, keepdims=keepdims), name=name)
