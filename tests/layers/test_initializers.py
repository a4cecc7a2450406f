"""The orthogonal initializer (Keras's ``Orthogonal``): its properties, not Keras's values
(Keras draws from another generator). ``tools/conformance_keras.py`` compares the
statistics of fresh weights with Keras's."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
import tfc.keras
from tfc.errors import TypeMismatch
from tfc.layers.initializers import Orthogonal


def fresh(shape: tuple[int, ...], init: object = "orthogonal", dtype: object = tfc.float32,
          seed: int | None = None) -> np.ndarray:
    """The value a variable initialized by ``init`` starts from, in a fresh graph."""
    with tfc.Graph().as_default():
        if seed is not None:
            tfc.set_random_seed(seed)
        v = tfc.layers.Dense(1).add_weight("w", shape, init, dtype=dtype)
        with tfc.Session() as s:
            return s.run(v)


@pytest.mark.parametrize("shape", [(6, 6), (9, 4), (4, 9), (3, 3, 2, 5), (2, 3, 4, 30)])
def test_orthonormal_columns_or_rows_in_f32(shape: tuple[int, ...]) -> None:
    """Flattened to prod(shape[:-1]) x n, the fewer of rows and columns are orthonormal to
    1e-6 in float32 (Q of a QR factorization; rows of Q^T when rows < n)."""
    w = fresh(shape)
    assert w.shape == shape and w.dtype == np.float32
    m = w.reshape(-1, shape[-1]).astype(np.float64)
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, np.eye(len(gram)), rtol=0, atol=1e-6)


def test_gain_scales_and_float64() -> None:
    w = fresh((5, 8), Orthogonal(gain=3.0), tfc.float64)
    assert w.dtype == np.float64
    np.testing.assert_allclose(w @ w.T, 9.0 * np.eye(5), rtol=0, atol=1e-12)


def test_seeded_by_the_graph_and_the_initializer() -> None:
    """The same graph seed gives the same matrix in a new graph; another seed another."""
    a, b = fresh((6, 6), seed=1), fresh((6, 6), seed=1)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, fresh((6, 6), seed=2))
    np.testing.assert_array_equal(fresh((6, 6), Orthogonal(seed=5)),
                                  fresh((6, 6), Orthogonal(seed=5), seed=9))


def test_uniform_signs() -> None:
    """The sign fix (Q times sign(diag R)) leaves no bias toward a positive diagonal: over
    many draws about half the diagonal entries are negative."""
    with tfc.Graph().as_default():
        tfc.set_random_seed(0)
        draws = [Orthogonal()((4, 4), tfc.float64) for _ in range(50)]
        with tfc.Session() as s:
            diag = [np.diag(d) for d in s.run(draws)]
    neg = np.mean(np.asarray(diag) < 0)
    assert 0.35 < neg < 0.65


def test_rank_below_two_and_integer_dtype_are_errors() -> None:
    with pytest.raises(TypeMismatch, match="rank >= 2"):
        fresh((5,))
    with pytest.raises(TypeMismatch, match="float"):
        fresh((3, 3), dtype=tfc.int32)


@pytest.mark.parametrize("layer", ["LSTM", "GRU"])
def test_recurrent_kernels_start_orthogonal(layer: str) -> None:
    """Keras's default: every gate's block of the recurrent kernel [u, k*u] starts with
    orthonormal rows (the whole [u, k*u] matrix has; its columns do not)."""
    with tfc.Graph().as_default():
        rnn = getattr(tfc.keras.layers, layer)(5)
        rnn(tfc.placeholder(tfc.float32, [None, 3, 4]))
        with tfc.Session() as s:
            r = s.run(rnn.recurrent_kernel).astype(np.float64)
    np.testing.assert_allclose(r @ r.T, np.eye(5), rtol=0, atol=1e-6)
    assert tfc.keras.initializers.Orthogonal is Orthogonal
