"""The ``log_matrix_determinant`` op (``tfc.linalg.slogdet``; LU through LAPACK's getrf on
llvm, kernels_lapack.lower_log_matrix_determinant): against numpy on both backends, a
singular matrix (sign 0, -inf), a determinant past the float range with a finite log, and
TF's gradient (A^-T for the log, none for the sign) against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.testing import check_graph_gradients

BACKENDS = ["reference", "llvm"]
RNG = np.random.default_rng(5)
A = RNG.normal(size=(3, 5, 5))
A[2] = np.outer(np.arange(1.0, 6.0), np.ones(5))        # rank 1: singular


def run(backend: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with tfc.Graph().as_default():
        p = tfc.placeholder(tfc.as_dtype(x.dtype.name), [None, *x.shape[1:]])
        sign, logdet = tfc.linalg.slogdet(p)
        with tfc.Session(backend=backend) as sess:
            return sess.run([sign, logdet], {p: x})


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_numpy_and_a_singular_matrix_is_zero_and_minus_inf(backend):
    sign, logdet = run(backend, A)
    want_sign, want_log = np.linalg.slogdet(A[:2])
    np.testing.assert_array_equal(sign[:2], want_sign)
    np.testing.assert_allclose(logdet[:2], want_log, rtol=1e-13)
    assert sign[2] == 0 and logdet[2] == -np.inf


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-6), (np.float16, 2e-3)])
def test_narrow_floats_and_no_overflow(backend, dtype, rtol):
    """f32/f16: LU in f32, the logs summed in f64, rounded once. 40 * I of size 30 has a
    determinant of 1.2e48 (past f32's range: ``det`` gives inf) and log 110.67."""
    big = (40 * np.eye(30) + RNG.normal(size=(30, 30)) * 0.01)[None]
    for x in (A[:2], big):
        sign, logdet = run(backend, x.astype(dtype))
        want_sign, want_log = np.linalg.slogdet(x.astype(dtype).astype(np.float64))
        assert sign.dtype == dtype and logdet.dtype == dtype
        np.testing.assert_array_equal(sign, want_sign)
        np.testing.assert_allclose(logdet, want_log, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("order", [1, 2])
def test_gradient_matches_finite_differences(order):
    check_graph_gradients(lambda b, x: b.op("log_matrix_determinant", x).results, A[:2],
                          order=order, what="log_matrix_determinant")


@pytest.mark.parametrize("backend", BACKENDS)
def test_api_gradient_is_the_inverse_transpose(backend):
    with tfc.Graph().as_default():
        p = tfc.placeholder(tfc.float64, [None, 5, 5])
        sign, logdet = tfc.linalg.slogdet(p)
        g = tfc.gradients(tfc.reduce_sum(logdet), p)[0]
        assert tfc.gradients(tfc.reduce_sum(sign), p)[0] is None
        with tfc.Session(backend=backend) as sess:
            got = sess.run(g, {p: A[:2]})
    np.testing.assert_allclose(got, np.swapaxes(np.linalg.inv(A[:2]), 1, 2), rtol=1e-12)
