"""``matrix_inverse`` / ``matrix_determinant`` through LAPACK against the reference backend
(rtol 1e-5 for f32, 1e-12 for f64), and the singular-matrix error."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.errors import ExecutionError
from tfc.ir.types import DType

F32, F64 = DType.f32, DType.f64
RNG = np.random.default_rng(3)


def _matrices(shape: tuple, dtype) -> np.ndarray:
    """Well-conditioned matrices: random plus a dominant diagonal."""
    n = shape[-1]
    x = RNG.standard_normal(shape) + 3 * np.eye(n)
    return x.astype(dtype)


@pytest.mark.parametrize("dtype,rtol", [(F32, 1e-5), (F64, 1e-12)])
def test_inverse_and_determinant(h, dtype, rtol):
    def body(b, a):
        x, y = a
        return [b("matrix_inverse", x), b("matrix_determinant", x),
                b("matrix_inverse", y), b("matrix_determinant", y),
                b("matrix_inverse", b("add", x, x))]

    m = h.make_module([("x", dtype, ("B", 4, 4)), ("y", dtype, (5, 5))], body)
    exe = h.compile_llvm(m)
    for n in (1, 3, 8):
        feeds = [_matrices((n, 4, 4), dtype.np), _matrices((5, 5), dtype.np)]
        h.assert_same(*h.run_both(m, feeds, exe=exe), rtol=rtol, atol=rtol)


def test_symbolic_order_and_empty(h):
    m = h.make_module([("x", F64, ("N", "N"))],
                      lambda b, a: [b("matrix_inverse", a[0]), b("matrix_determinant", a[0])])
    exe = h.compile_llvm(m)
    for n in (0, 1, 2, 7, 40):
        h.assert_same(*h.run_both(m, [_matrices((n, n), np.float64)], exe=exe),
                      rtol=1e-12, atol=1e-12)


def test_singular_matrices(h):
    m = h.make_module([("x", F64, (3, 3))], lambda b, a: [b("matrix_inverse", a[0])])
    exe = h.compile_llvm(m)
    x = np.array([[1.0, 2, 3], [2, 4, 6], [0, 1, 1]])
    with pytest.raises(ExecutionError, match="the 3x3 matrix is singular") as got:
        exe([x], {}, 0)
    from tfc.backends.reference import ReferenceBackend
    with pytest.raises(ExecutionError) as want:
        ReferenceBackend().compile(m, "f")([x], {}, 0)
    assert str(got.value) == str(want.value)
    m = h.make_module([("x", F32, ("B", 2, 2))],
                      lambda b, a: [b("matrix_determinant", a[0]), b("matrix_inverse", a[0])])
    exe = h.compile_llvm(m)
    xs = np.array([[[1.0, 2], [3, 4]], [[1, 2], [2, 4]]], np.float32)
    with pytest.raises(ExecutionError, match="a matrix of the batch is singular"):
        exe([xs], {}, 0)
    m = h.make_module([("x", F32, ("B", 2, 2))], lambda b, a: [b("matrix_determinant", a[0])])
    h.assert_same(*h.run_both(m, [xs]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape", [(5, 5), ("N", "N"), ("B", 5, 5)])
def test_numerically_singular_matrices_fail_alike(h, dtype, shape):
    """A singular matrix whose LU meets no exactly zero pivot: the reference returned an
    "inverse" of 1e16 while llvm (LU of A^T) said singular, or the other way round; both
    now raise the same error, located at the op."""
    from tfc.backends.reference import ReferenceBackend
    from tfc.errors import Location
    from tfc.ir.builder import Builder
    loc = Location("model.py", 7)

    def body(b, a):
        return [Builder(b.graph, loc=loc)("matrix_inverse", a[0])]

    m = h.make_module([("x", dtype, shape)], body)
    exe = h.compile_llvm(m)
    rng = np.random.default_rng(11)  # (not RNG: later tests' inputs stay as they were)
    x = (rng.standard_normal((5, 2)) @ rng.standard_normal((2, 5))).astype(dtype.np)
    ok = (rng.standard_normal((5, 5)) + 3 * np.eye(5)).astype(dtype.np)
    if len(shape) == 3:
        x, ok = np.stack([ok, x]), np.stack([ok, ok])
    tol = 1e-5 if dtype == F32 else 1e-12
    h.assert_same(*h.run_both(m, [ok], exe=exe), rtol=tol, atol=tol)
    with pytest.raises(ExecutionError) as got:
        exe([x], {}, 0)
    with pytest.raises(ExecutionError) as want:
        ReferenceBackend().compile(m, "f")([x], {}, 0)
    assert str(got.value) == str(want.value)
    assert str(got.value).startswith("model.py:7: matrix_inverse: input is not invertible")


F16 = DType.f16


def _close_f16(got, want) -> None:
    """f16 results: the same dtype and shape, within two f16 ulps (or 1e-3 near zero)."""
    for a, b in zip(got.fetches, want.fetches):
        assert a.dtype == b.dtype == np.float16 and a.shape == b.shape
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64),
                                   rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_f16_matmul(h, ta, tb):
    def body(b, a):
        x, w, y = a
        return [b("matmul", x, w, transpose_a=ta, transpose_b=tb), b("matmul", y, y)]

    xs = (7, "B") if ta else ("B", 7)
    ws = (5, 7) if tb else (7, 5)
    m = h.make_module([("x", F16, xs), ("w", F16, ws), ("y", F16, (3, 4, 4))], body)
    exe = h.compile_llvm(m)
    for n in (1, 6):
        feeds = [RNG.uniform(-1, 1, (n, 7) if not ta else (7, n)).astype(np.float16),
                 RNG.uniform(-1, 1, ws).astype(np.float16),
                 RNG.uniform(-1, 1, (3, 4, 4)).astype(np.float16)]
        _close_f16(*h.run_both(m, feeds, exe=exe))


def test_f16_reductions_and_softmax(h):
    def body(b, a):
        (x,) = a
        return [b("sum", x, axes=[1]), b("sum", x, axes=[0]), b("mean", x), b("max", x, axes=[1]),
                b("min", x, axes=[0]), b("mean", x, axes=[1], keepdims=True), b("softmax", x),
                b("log_softmax", x), b("exp", b("sub", x, b("max", x, axes=[1], keepdims=True)))]

    m = h.make_module([("x", F16, ("B", 9))], body)
    exe = h.compile_llvm(m)
    for n in (1, 4, 16):
        _close_f16(*h.run_both(m, [RNG.uniform(-2, 2, (n, 9)).astype(np.float16)], exe=exe))


def test_f16_inverse_and_determinant(h):
    m = h.make_module([("x", F16, ("B", 3, 3))],
                      lambda b, a: [b("matrix_inverse", a[0]), b("matrix_determinant", a[0])])
    exe = h.compile_llvm(m)
    for n in (1, 5):
        _close_f16(*h.run_both(m, [_matrices((n, 3, 3), np.float16)], exe=exe))
    with pytest.raises(ExecutionError, match="singular"):
        exe([np.ones((2, 3, 3), np.float16)], {}, 0)
