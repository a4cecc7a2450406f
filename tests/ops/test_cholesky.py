"""The ``cholesky`` op (tfc.ops.linalg.Cholesky; LAPACK's potrf on llvm,
kernels_lapack.lower_cholesky): against numpy on both backends, only the lower triangle
read, the not-positive-definite error (one text on both backends), NaN input, f16,
empty matrices, and TF's gradient against finite differences of the symmetrized input
(orders 1 and 2)."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError
from tfc.testing import check_graph_gradients, run_op1

BACKENDS = ["reference", "llvm"]
RNG = np.random.default_rng(11)


def spd(*batch: int, n: int = 4) -> np.ndarray:
    m = RNG.normal(size=(*batch, n, n))
    return m @ np.swapaxes(m, -1, -2) + n * np.eye(n)


A = spd(2, 3)                                          # [2, 3, 4, 4]
GARBAGE_ABOVE = A + np.triu(RNG.normal(size=A.shape) * 100, 1)


def lower_symmetric(x: np.ndarray) -> np.ndarray:
    return np.tril(x) + np.swapaxes(np.tril(x, -1), -1, -2)


def run(backend: str, x: np.ndarray, symbolic: bool = False) -> np.ndarray:
    with tfc.Graph().as_default():
        shape = [None, *x.shape[1:]] if symbolic else list(x.shape)
        p = tfc.placeholder(tfc.as_dtype(x.dtype.name), shape)
        y = tfc.linalg.cholesky(p)
        with tfc.Session(backend=backend) as sess:
            return sess.run(y, {p: x})


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_numpy_and_reads_only_the_lower_triangle(backend):
    """f64 within 4 ulps of numpy's factor (the same LAPACK algorithm, another build);
    the strict upper triangle of the input (here 100x garbage) is not read and that of
    the result is exactly 0."""
    want = np.linalg.cholesky(A)
    got = run(backend, GARBAGE_ABOVE, symbolic=True)
    np.testing.assert_allclose(got, want, rtol=4 * np.finfo(np.float64).eps, atol=1e-15)
    assert (np.triu(got, 1) == 0).all()
    np.testing.assert_allclose(got @ np.swapaxes(got, -1, -2), A, rtol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, rtol", [(np.float32, 4e-6), (np.float16, 4e-3)])
def test_narrow_floats(backend, dtype, rtol):
    """f32 in f32; f16 computed in f32 and rounded once (within an f16 ulp or two of the
    exact factor)."""
    got = run(backend, A[0].astype(dtype))
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), np.linalg.cholesky(A[0]), rtol=rtol,
                               atol=rtol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_not_positive_definite_is_the_same_error_on_both_backends(backend):
    bad = np.stack([A[0, 0], np.array([[1.0, 2, 0, 0], [2, 1, 0, 0], [0, 0, 1, 0],
                                       [0, 0, 0, 1]])])
    with pytest.raises(ExecutionError, match=r"test_cholesky.py:\d+: cholesky: input is not "
                       r"positive definite: a matrix of the batch$"):
        run(backend, bad)
    with pytest.raises(ExecutionError, match="not positive definite: the 2x2 matrix"):
        run(backend, np.array([[-1.0, 0.0], [0.0, 1.0]]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_in_the_lower_triangle_gives_nan_and_empty_matrices(backend):
    x = np.stack([A[0, 0], A[0, 1]])
    x[1, 2, 0] = np.nan
    x[0, 0, 3] = np.nan                      # above the diagonal: not read
    got = run(backend, x)
    np.testing.assert_allclose(got[0], np.linalg.cholesky(A[0, 0]), rtol=1e-14, atol=1e-15)
    assert np.isnan(got[1]).all()
    for shape in [(0, 0), (2, 0, 0), (0, 3, 3)]:
        assert run(backend, np.zeros(shape)).shape == shape


def _symmetrized(b, x):
    """``cholesky((x + x^T) / 2)``: finite differences then see TF's (symmetric) gradient
    convention, where a perturbation of A_ij is one of A_ji too."""
    rank = x.type.rank
    perm = (*range(rank - 2), rank - 1, rank - 2)
    half = b("constant", value=np.asarray(0.5))
    return b.op("cholesky", b("mul", b("add", x, b("transpose", x, perm=perm)), half)).results


@pytest.mark.parametrize("order", [1, 2])
def test_gradient_matches_finite_differences(order):
    check_graph_gradients(_symmetrized, spd(2, n=3), order=order, rtol=1e-6,
                          what="cholesky")


def test_reference_rejects_a_non_square_matrix():
    with pytest.raises(tfc.errors.TypeMismatch, match="not square"):
        run_op1("cholesky", np.ones((2, 3)))


def test_llvm_gradient_matches_the_reference():
    """The API's gradient on llvm (its matrix_inverse and matmuls) equals the reference's
    (f64, 1e-13)."""
    outs = []
    w = RNG.uniform(0.5, 1.5, (3, 4, 4))
    for backend in BACKENDS:
        with tfc.Graph().as_default():
            p = tfc.placeholder(tfc.float64, [None, 4, 4])
            y = tfc.linalg.cholesky(p)
            g = tfc.gradients(tfc.reduce_sum(y * w), p)[0]
            with tfc.Session(backend=backend) as sess:
                outs.append(sess.run(g, {p: A[0]}))
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-13, atol=1e-14)
