"""matmul, matrix_inverse and matrix_determinant against numpy, plus their type rules."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.registry import lookup
from tfc.ir.types import DType, TensorType
from tfc.testing import infer_op1 as infer1, run_op1

RNG = np.random.default_rng(0)


def t(shape, dtype=DType.f32) -> TensorType:
    return TensorType(dtype, tuple(shape))



def rand(*shape, dtype=np.float64) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# ---- matmul ---------------------------------------------------------------------------

@pytest.mark.parametrize("sa,sb", [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 5)),        # batched
    ((2, 3, 4), (4, 5)),           # rank-2 b broadcast over a's batch
    ((1, 3, 4), (6, 4, 5)),        # batch dim 1 broadcasts
    ((2, 1, 3, 4), (5, 4, 2)),     # different batch ranks
    ((0, 3, 4), (4, 5)),           # empty batch
    ((3, 0), (0, 5)),              # empty inner dim: zeros
])
def test_matmul_matches_numpy(sa, sb):
    a, b = rand(*sa), rand(*sb)
    out = run_op1("matmul", a, b)
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_transpose_flags(ta, tb):
    a0, b0 = rand(2, 3, 4), rand(2, 4, 5)
    a = np.swapaxes(a0, -1, -2).copy() if ta else a0
    b = np.swapaxes(b0, -1, -2).copy() if tb else b0
    out = run_op1("matmul", a, b, transpose_a=ta, transpose_b=tb)
    assert out.shape == (2, 3, 5)
    np.testing.assert_allclose(out, np.matmul(a0, b0), rtol=1e-12, atol=1e-12)


def test_matmul_dtypes():
    a, b = rand(5, 7, dtype=np.float32), rand(7, 3, dtype=np.float32)
    out = run_op1("matmul", a, b)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    h = run_op1("matmul", a.astype(np.float16), b.astype(np.float16))
    assert h.dtype == np.float16
    exact = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(h, exact, rtol=2e-3, atol=2e-3)
    ia = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    ib = RNG.integers(-5, 5, (4, 2)).astype(np.int32)
    np.testing.assert_array_equal(run_op1("matmul", ia, ib), ia @ ib)
    assert run_op1("matmul", ia, ib).dtype == np.int32


def test_matmul_symbolic_shapes():
    assert str(infer1("matmul", t(("B", 784)), t((784, 10)))) == "f32[B,10]"
    assert str(infer1("matmul", t(("B", 3, "K")), t(("K", 5)))) == "f32[B,3,5]"
    assert str(infer1("matmul", t((10, "B")), t((10, 5)), transpose_a=True)) == "f32[B,5]"
    assert str(infer1("matmul", t(("B", 1, 3, 4)), t((7, 4, 2)))) == "f32[B,7,3,2]"
    # A symbolic inner dim is checked at run time.
    assert str(infer1("matmul", t((3, "K")), t((4, 5)))) == "f32[3,5]"


def test_matmul_errors():
    with pytest.raises(TypeMismatch, match=r"matmul: f32\[3,4\] and f32\[5,6\]: "
                                           r"inner dims 4 and 5 differ$"):
        infer1("matmul", t((3, 4)), t((5, 6)))
    with pytest.raises(TypeMismatch, match=r"inner dims 3 and 4 differ \(with transpose_a\)"):
        infer1("matmul", t((3, 4)), t((4, 6)), transpose_a=True)
    with pytest.raises(TypeMismatch, match=r"a f32\[4\] must have rank >= 2"):
        infer1("matmul", t((4,)), t((4, 6)))
    with pytest.raises(TypeMismatch, match=r"batch dims of f32\[2,3,4\] and f32\[5,4,6\] "
                                           r"do not broadcast"):
        infer1("matmul", t((2, 3, 4)), t((5, 4, 6)))
    with pytest.raises(TypeMismatch, match="different dtypes"):
        infer1("matmul", t((3, 4)), t((4, 6), DType.f64))
    with pytest.raises(TypeMismatch, match="dtype bool"):
        infer1("matmul", t((3, 4), DType.bool), t((4, 6), DType.bool))


def test_matmul_cost():
    md = lookup("matmul")
    ins = [t((2, 3, 4)), t((4, 5))]
    outs = [infer1("matmul", *ins)]
    c = md.cost(ins, outs, {"transpose_a": False, "transpose_b": False})
    assert c.flops == 2 * 2 * 3 * 5 * 4
    assert c.bytes == 4 * (24 + 20 + 30)
    sym = [t(("B", 8)), t((8, 3))]
    c = md.cost(sym, [infer1("matmul", *sym)], {"transpose_a": False, "transpose_b": False},
                symbol_size=10)
    assert c.flops == 2 * 10 * 3 * 8


# ---- inverse and determinant ----------------------------------------------------------

@pytest.mark.parametrize("shape", [(4, 4), (3, 5, 5), (2, 2, 3, 3), (1, 1)])
def test_inverse_and_determinant_match_numpy(shape):
    x = rand(*shape) + 3 * np.eye(shape[-1])
    inv = run_op1("matrix_inverse", x)
    np.testing.assert_allclose(inv, np.linalg.inv(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x @ inv, np.broadcast_to(np.eye(shape[-1]), shape), atol=1e-12)
    det = run_op1("matrix_determinant", x)
    assert det.shape == shape[:-2]
    np.testing.assert_allclose(det, np.linalg.det(x), rtol=1e-12)


def test_inverse_and_determinant_f32():
    x = (rand(3, 4, 4) + 4 * np.eye(4)).astype(np.float32)
    inv = run_op1("matrix_inverse", x)
    assert inv.dtype == np.float32
    np.testing.assert_allclose(inv, np.linalg.inv(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    det = run_op1("matrix_determinant", x)
    assert det.dtype == np.float32
    np.testing.assert_allclose(det, np.linalg.det(x.astype(np.float64)), rtol=1e-5)
    h = run_op1("matrix_determinant", np.eye(3, dtype=np.float16) * 2)
    assert h.dtype == np.float16 and h == 8


def test_singular_matrix_is_an_execution_error():
    with pytest.raises(ExecutionError, match=r"matrix_inverse: input is not invertible: the "
                       r"2x2 matrix is singular to working precision"):
        run_op1("matrix_inverse", np.array([[1.0, 2.0], [2.0, 4.0]]))
    batch = np.stack([np.eye(3), np.zeros((3, 3))])
    with pytest.raises(ExecutionError, match=r"a matrix of the batch is singular"):
        run_op1("matrix_inverse", batch)
    # A singular matrix has determinant 0, not an error.
    assert run_op1("matrix_determinant", np.zeros((2, 2))) == 0


SINGULAR = {
    # numpy's LU meets no zero pivot in these: it returned an "inverse" of 1e7..1e16
    "rank2_5x5": np.random.RandomState(0).randn(5, 2) @ np.random.RandomState(1).randn(2, 5),
    "arange_3x3": np.arange(1.0, 10.0).reshape(3, 3) + np.float64(1e-17),
    "rank1_4x4": np.outer([1.0, 2, 3, 4], [0.3, 0.7, 1.1, 1.3]),
}


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(SINGULAR))
def test_numerically_singular_matrix_is_an_error(name, dtype):
    """Singular to working precision (reciprocal condition number below eps), not only
    an exactly zero pivot: the reference returned garbage where llvm's LU (of A^T) met a
    zero pivot or gave NaN."""
    x = SINGULAR[name].astype(dtype)
    with pytest.raises(ExecutionError, match="input is not invertible"):
        run_op1("matrix_inverse", x)


def test_ill_conditioned_but_invertible_matrix_is_inverted():
    """The threshold is working precision: Hilbert(6) (condition number ~3e7) inverts in
    f64 (to ~1e-9) and is singular in f32 (eps 1.2e-7)."""
    h = 1.0 / (np.arange(6)[:, None] + np.arange(6)[None] + 1)
    got = run_op1("matrix_inverse", h)
    np.testing.assert_allclose(got @ h, np.eye(6), atol=1e-8)
    with pytest.raises(ExecutionError, match="input is not invertible"):
        run_op1("matrix_inverse", h.astype(np.float32))
    nan = run_op1("matrix_inverse", np.full((2, 2), np.nan))  # NaN propagates, no error
    assert np.isnan(nan).all()


def test_square_matrix_types():
    assert str(infer1("matrix_inverse", t(("B", 3, 3)))) == "f32[B,3,3]"
    assert str(infer1("matrix_inverse", t(("N", 3)))) == "f32[3,3]"
    assert str(infer1("matrix_determinant", t(("B", 4, 4)))) == "f32[B]"
    assert str(infer1("matrix_determinant", t((4, 4)))) == "f32[]"
    with pytest.raises(TypeMismatch, match=r"matrix_inverse: input f32\[2,3,4\] is not square: "
                                           r"its matrices are 3 x 4"):
        infer1("matrix_inverse", t((2, 3, 4)))
    with pytest.raises(TypeMismatch, match=r"matrix_determinant: input f32\[3\] must have "
                                           r"rank >= 2"):
        infer1("matrix_determinant", t((3,)))
    with pytest.raises(TypeMismatch, match="dtype i32"):
        infer1("matrix_inverse", t((3, 3), DType.i32))


def test_square_matrix_costs():
    ins = [t((5, 4, 4))]
    inv = lookup("matrix_inverse").cost(ins, [ins[0]], {})
    assert inv.flops == 2 * 5 * 64
    det = lookup("matrix_determinant").cost(ins, [t((5,))], {})
    assert det.flops == pytest.approx(2 / 3 * 5 * 64)
