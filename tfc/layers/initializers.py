"""Keras's initializers that are not a single random op: ``Orthogonal``.

An initializer is a callable ``(shape, dtype) -> tensor-like`` (``base.get_initializer``
takes one by name or as such a callable). ``Orthogonal`` draws its normal matrix with
numpy when the variable is made, from a seed the graph hands out
(``Graph.next_seed``: ``tfc.set_random_seed`` fixes it), so a model built twice in
fresh graphs starts from the same weights; the matrix is a constant of the variable's
initializer. Keras draws from its own generator: the values differ, the distribution
(Haar-uniform orthogonal, scaled by ``gain``) is the same.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from tfc.api.graph import get_default_graph, user_location
from tfc.api.tensor import constant
from tfc.errors import TypeMismatch
from tfc.ir.types import DType

__all__ = ["Orthogonal", "OrthogonalInitializer"]


class Orthogonal:
    """Keras's ``Orthogonal(gain=1.0, seed=None)``: for a shape ``[..., n]`` flattened to
    ``rows = prod(shape[:-1])`` by ``n``, the ``Q`` of the QR factorization of a standard
    normal ``max(rows, n) x min(rows, n)`` matrix, its columns' signs fixed by ``R``'s
    diagonal (so ``Q`` is uniform over the orthogonal matrices), transposed when
    ``rows < n`` and times ``gain``: orthonormal rows or columns, whichever are fewer.
    Computed in float64, then rounded to the variable's dtype."""

    def __init__(self, gain: float = 1.0, seed: int | None = None) -> None:
        self.gain = float(gain)
        self.seed = seed

    def __call__(self, shape: Sequence[int], dtype: DType = DType.f32) -> Any:
        shape = tuple(int(d) for d in shape)
        if len(shape) < 2:
            raise TypeMismatch(f"the orthogonal initializer needs a shape of rank >= 2, got "
                               f"{list(shape)}", user_location())
        if not dtype.is_float:
            raise TypeMismatch(f"the orthogonal initializer makes float values, not "
                               f"{dtype.value}", user_location())
        rows, cols = math.prod(shape[:-1]), shape[-1]
        rng = np.random.default_rng(get_default_graph().next_seed(self.seed))
        a = rng.standard_normal((max(rows, cols), min(rows, cols)))
        q, r = np.linalg.qr(a)
        q = q * np.sign(np.diag(r))  # (a zero diagonal has probability 0)
        if rows < cols:
            q = q.T
        return constant((self.gain * q).reshape(shape).astype(dtype.np))

    def __repr__(self) -> str:
        return f"Orthogonal(gain={self.gain}, seed={self.seed})"


OrthogonalInitializer = Orthogonal  # Keras's other name
