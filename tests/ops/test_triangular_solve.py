"""The ``triangular_solve`` op (tfc.ops.linalg.TriangularSolve; BLAS's trsm on llvm,
kernels_lapack.lower_triangular_solve): against numpy's solve of the masked matrix on
both backends for each ``lower``/``adjoint``, one matrix for a batch of right-hand sides,
the other triangle not read, f32/f16, empty shapes, a zero pivot, TF's gradient against
finite differences (orders 1 and 2), and its type errors."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch
from tfc.testing import check_gradients, infer_op1, type_of

BACKENDS = ["reference", "llvm"]
RNG = np.random.default_rng(3)
A = RNG.normal(size=(2, 4, 4)) + 4 * np.eye(4)
B = RNG.normal(size=(2, 4, 3))
FLAGS = [(True, False), (True, True), (False, False), (False, True)]


def np_solve(a: np.ndarray, b: np.ndarray, lower: bool, adjoint: bool) -> np.ndarray:
    m = np.tril(a) if lower else np.triu(a)
    if adjoint:
        m = np.swapaxes(m, -1, -2)
    return np.linalg.solve(np.broadcast_to(m, (*b.shape[:-2], *m.shape[-2:])), b)


def run(backend: str, cases: dict, a: np.ndarray, b: np.ndarray) -> dict:
    with tfc.Graph().as_default():
        dt = tfc.as_dtype(a.dtype.name)
        pa = tfc.placeholder(dt, [None, *a.shape[1:]] if a.ndim == 3 else list(a.shape))
        pb = tfc.placeholder(dt, [None, *b.shape[1:]])
        outs = {k: tfc.linalg.triangular_solve(pa, pb, lower=lo, adjoint=adj)
                for k, (lo, adj) in cases.items()}
        with tfc.Session(backend=backend) as sess:
            return sess.run(outs, {pa: a, pb: b})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("one_matrix", [False, True])
def test_matches_numpy_for_each_triangle_and_transpose(backend, one_matrix):
    """f64 within 8 eps of numpy's LU solve (relative to the largest |X|); the triangle
    not named (here 100x garbage) is not read."""
    a = A[0] if one_matrix else A
    garbage = RNG.normal(size=a.shape) * 100
    ones = np.ones((4, 4))
    for f in FLAGS:  # (one graph per flag pair: garbage in its unread triangle)
        unread = (np.triu(ones, 1) if f[0] else np.tril(ones, -1)).astype(bool)
        got = run(backend, {f: f}, np.where(unread, garbage, a), B)[f]
        want = np_solve(a, B, *f)
        np.testing.assert_allclose(got, want, rtol=0, atol=8 * np.finfo(np.float64).eps
                                   * np.abs(want).max(), err_msg=str(f))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, tol", [(np.float32, 2e-6), (np.float16, 2e-3)])
def test_narrow_floats(backend, dtype, tol):
    got = run(backend, {f: f for f in FLAGS}, A.astype(dtype), B.astype(dtype))
    for f in FLAGS:
        assert got[f].dtype == dtype
        want = np_solve(A.astype(dtype).astype(np.float64), B.astype(dtype).astype(np.float64),
                        *f)
        np.testing.assert_allclose(got[f].astype(np.float64), want, rtol=0,
                                   atol=tol * np.abs(want).max(), err_msg=str(f))


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_pivot_and_empty_shapes(backend):
    """A zero on the diagonal divides by zero on both backends (inf/NaN, no error: TF's
    and BLAS's behaviour); empty right-hand sides give empty solutions."""
    a = np.eye(3)
    a[1, 1] = 0.0
    got = run(backend, {(True, False): (True, False)}, a, np.ones((1, 3, 2)))[(True, False)]
    assert np.isfinite(got[0, 0]).all() and not np.isfinite(got[0, 1:]).any()
    for b_shape in [(2, 4, 0), (0, 4, 3)]:
        out = run(backend, {(True, False): (True, False)}, A[0], np.zeros(b_shape))
        assert out[(True, False)].shape == b_shape


@pytest.mark.parametrize("lower, adjoint", FLAGS)
def test_gradient_matches_finite_differences(lower, adjoint):
    """TF's rule: d/dB solves with the other ``adjoint``; d/dA is ``-dB X^T`` on A's
    triangle (0 on the other, which finite differences see unread)."""
    check_gradients("triangular_solve", A, B, lower=lower, adjoint=adjoint)
    check_gradients("triangular_solve", A[0], B, lower=lower, adjoint=adjoint)


def test_second_order_gradient():
    check_gradients("triangular_solve", A[:, :3, :3], B[:, :3, :2], order=2, lower=False,
                    adjoint=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_api_gradient_on_both_backends(backend):
    """tfc.gradients through tfc.linalg.triangular_solve: d/dB against finite differences
    of numpy's solve (f64, rtol 1e-6)."""
    w = RNG.uniform(0.5, 1.5, B.shape)
    with tfc.Graph().as_default():
        pa = tfc.placeholder(tfc.float64, [4, 4])
        pb = tfc.placeholder(tfc.float64, [None, 4, 3])
        y = tfc.linalg.triangular_solve(pa, pb, lower=False)
        gb = tfc.gradients(tfc.reduce_sum(y * w), pb)[0]
        with tfc.Session(backend=backend) as sess:
            got = sess.run(gb, {pa: A[0], pb: B})
    want = np.zeros_like(B)
    for i in np.ndindex(B.shape):
        hi, lo = B.copy(), B.copy()
        hi[i] += 1e-6
        lo[i] -= 1e-6
        want[i] = ((np_solve(A[0], hi, False, False) - np_solve(A[0], lo, False, False))
                   * w).sum() / 2e-6
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("a_shape, b_shape, message", [
    ((4, 3), (4, 2), "not square"),
    ((4, 4), (3, 2), "B has 3 rows"),
    ((4, 4), (4,), "rank >= 2"),
    ((2, 4, 4), (3, 4, 2), "batch dims"),
    ((2, 4, 4), (4, 2), "batch dims"),
])
def test_type_errors(a_shape, b_shape, message):
    with pytest.raises(TypeMismatch, match=message):
        infer_op1("triangular_solve", type_of(np.zeros(a_shape)), type_of(np.zeros(b_shape)),
                  lower=True, adjoint=False)
    with pytest.raises(TypeMismatch, match="dtype i32"):
        infer_op1("triangular_solve", type_of(np.zeros((2, 2), np.int32)),
                  type_of(np.zeros((2, 1), np.int32)), lower=True, adjoint=False)
