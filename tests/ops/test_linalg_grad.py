"""Gradients of the matrix ops against central finite differences (float64).

matmul is checked to second order for every transpose-flag combination and for batch
broadcasting; its gradient graph must use matmul and reductions only (no transpose).
"""

from __future__ import annotations

import numpy as np
import pytest

from tfc.ir.autodiff import gradients
from tfc.ir.builder import Builder
from tfc.ir.core import Graph
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.types import DType, TensorType
from tfc.testing import check_gradients

RNG = np.random.default_rng(7)
FLAGS = [(False, False), (False, True), (True, False), (True, True)]


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def operands(a_shape: tuple, b_shape: tuple, ta: bool, tb: bool) -> tuple:
    """Random a, b for ``op(a) @ op(b)`` where op(a) has a_shape and op(b) has b_shape."""
    a = rand(*a_shape[:-2], a_shape[-1], a_shape[-2]) if ta else rand(*a_shape)
    b = rand(*b_shape[:-2], b_shape[-1], b_shape[-2]) if tb else rand(*b_shape)
    return a, b


@pytest.mark.parametrize("ta,tb", FLAGS)
@pytest.mark.parametrize("order", [1, 2])
def test_matmul_flags(ta: bool, tb: bool, order: int) -> None:
    a, b = operands((3, 4), (4, 2), ta, tb)
    check_gradients("matmul", a, b, order=order, transpose_a=ta, transpose_b=tb)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 3, 4), (2, 4, 2)),        # same batch
    ((2, 1, 3, 4), (3, 4, 2)),     # a's batch 1 broadcast, b lacks a leading dim
    ((3, 4), (2, 4, 2)),           # a unbatched
    ((1, 3, 4), (2, 4, 2)),        # batch dim 1 against 2
])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
def test_matmul_batched_broadcast(a_shape: tuple, b_shape: tuple, ta: bool, tb: bool) -> None:
    a, b = operands(a_shape, b_shape, ta, tb)
    check_gradients("matmul", a, b, transpose_a=ta, transpose_b=tb)


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False)])
def test_matmul_batched_second_order(ta: bool, tb: bool) -> None:
    a, b = operands((2, 1, 2, 3), (2, 3, 2), ta, tb)
    check_gradients("matmul", a, b, order=2, transpose_a=ta, transpose_b=tb)


def grad_graph(kind: str, types: list[TensorType], **attrs) -> tuple[Graph, list]:
    """A graph ``sum(kind(args))`` with the gradients w.r.t. every argument as results."""
    g = Graph("g")
    args = [g.add_arg(t, f"a{i}") for i, t in enumerate(types)]
    b = Builder(g)
    y = b(kind, *args, **attrs)
    loss = b("sum", y)
    grads = gradients(g, [loss], args)
    g.set_results(grads)
    return g, grads


def test_matmul_gradient_uses_only_matmul_and_sums() -> None:
    for ta, tb in FLAGS:
        g, _ = grad_graph("matmul", [TensorType(DType.f32, (2, 3, 3)),
                                     TensorType(DType.f32, (3, 3))],
                          transpose_a=ta, transpose_b=tb)
        kinds = {op.kind for op in g.ops}
        assert kinds <= {"matmul", "sum", "ones_like", "reshape_like", "broadcast_like",
                         "expand_dims"}, kinds
        assert "transpose" not in kinds


def test_matmul_gradient_symbolic_batch() -> None:
    f32 = DType.f32
    g, (da, db) = grad_graph("matmul", [TensorType(f32, ("B", 3, 4)), TensorType(f32, (4, 2))])
    assert da.type == TensorType(f32, ("B", 3, 4))
    assert db.type == TensorType(f32, (4, 2))
    a, b = rand(5, 3, 4).astype(np.float32), rand(4, 2).astype(np.float32)
    got_a, got_b = run_graph(g, [a, b], ExecContext({}, 0))
    np.testing.assert_allclose(got_a, np.broadcast_to(b.sum(-1), (5, 3, 4)), rtol=1e-5)
    np.testing.assert_allclose(got_b, np.broadcast_to(a.sum((0, 1))[:, None], (4, 2)),
                               rtol=1e-5)


def well_conditioned(*batch: int, n: int = 3) -> np.ndarray:
    return rand(*batch, n, n) + 3 * np.eye(n)


@pytest.mark.parametrize("batch", [(), (2,), (2, 1)])
def test_matrix_inverse(batch: tuple) -> None:
    check_gradients("matrix_inverse", well_conditioned(*batch), rtol=1e-7)


def test_matrix_inverse_second_order() -> None:
    check_gradients("matrix_inverse", well_conditioned(2), order=2, rtol=1e-7)


@pytest.mark.parametrize("batch", [(), (2,), (2, 2)])
def test_matrix_determinant(batch: tuple) -> None:
    check_gradients("matrix_determinant", well_conditioned(*batch), rtol=1e-6)


def test_matrix_determinant_second_order() -> None:
    check_gradients("matrix_determinant", well_conditioned(2), order=2)


def test_matrix_determinant_gradient_is_jacobi() -> None:
    """d det(A)/dA = det(A) A^-T, per matrix of a symbolic batch."""
    g, (da,) = grad_graph("matrix_determinant", [TensorType(DType.f64, ("B", 3, 3))])
    assert da.type == TensorType(DType.f64, ("B", 3, 3))
    a = well_conditioned(4)
    (got,) = run_graph(g, [a], ExecContext({}, 0))
    want = np.linalg.det(a)[:, None, None] * np.swapaxes(np.linalg.inv(a), -1, -2)
    np.testing.assert_allclose(got, want, rtol=1e-12)
