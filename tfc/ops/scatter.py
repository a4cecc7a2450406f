"""Scatter: adding rows into a tensor at integer indices (sparse gradients land here)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.registry import INT, NUMERIC, PURE, Cost, OpDef, expect_dtype, register, same_dtype
from tfc.ir.types import TensorType, shapes_compatible


def check_rows(op: str, dense: TensorType, indices: TensorType, updates: TensorType) -> None:
    """``updates`` must be ``indices.shape + dense.shape[1:]``."""
    expect_dtype(op, indices, INT, "indices")
    if dense.rank == 0:
        raise TypeMismatch(f"{op}: the target must have rank >= 1, got {dense}")
    want = (*indices.shape, *dense.shape[1:])
    if not shapes_compatible(updates.shape, want):
        raise TypeMismatch(f"{op}: updates {updates} do not match indices {indices} and rows "
                           f"of {dense} (expected shape [{','.join(map(str, want))}])")


def scatter_error(op: str, index: object, n: object) -> str:
    """The message for a row index outside ``[0, n)``: one text for every backend."""
    return f"{op}: index {index} is out of range [0, {n})"


def scatter_rows(out: np.ndarray, indices: np.ndarray, updates: np.ndarray, op: str,
                 sign: int = 1) -> np.ndarray:
    """``out[indices[i]] += sign * updates[i]`` in place; repeated indices accumulate."""
    n = out.shape[0]
    bad = (indices < 0) | (indices >= n)
    if bad.any():
        raise ExecutionError(scatter_error(op, indices[bad].flat[0], n))
    rows = updates.reshape((indices.size, *out.shape[1:]))
    np.add.at(out, indices.reshape(-1), rows if sign > 0 else -rows)
    return out


@register
class ScatterAdd(OpDef):
    """``dense`` with ``updates`` added at rows ``indices`` (rows named twice add twice)."""

    name = "scatter_add"
    num_inputs = 3
    traits = frozenset({PURE})

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        dense, indices, updates = inputs
        same_dtype(self.name, [dense, updates])
        expect_dtype(self.name, dense, NUMERIC)
        check_rows(self.name, dense, indices, updates)
        return [dense]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        dense, indices, updates = inputs
        return [scatter_rows(dense.copy(), indices, updates, self.name)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """``dense`` passes the gradient through; each update gets its row's gradient."""
        (dy,) = grads
        return [dy, None, b("gather", dy, op.inputs[1])]

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        upd = inputs[2].nbytes(symbol_size)
        return Cost(upd / inputs[2].dtype.itemsize,
                    sum(t.nbytes(symbol_size) for t in (*inputs, *outputs)))


def first_occurrences(indices: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per position ``i``: the first position ``j`` with ``indices[j] == indices[i]`` and
    ``mask[j] != 0``, or 0 where there is none. O(n log n): a sort of the masked
    positions' indices (``np.unique`` keeps each value's first position) and a binary
    search per position."""
    idx = indices.reshape(-1)
    kept = np.flatnonzero(mask.reshape(-1) != 0)
    keys, first = np.unique(idx[kept], return_index=True)
    if keys.size == 0:
        return np.zeros(idx.shape, indices.dtype)
    k = np.minimum(np.searchsorted(keys, idx), keys.size - 1)
    return np.where(keys[k] == idx, kept[first[k]], 0).astype(indices.dtype)


@register
class FirstOccurrence(OpDef):
    """``first_occurrence(indices, mask)``: per position, the first position of the same
    index among those whose ``mask`` is nonzero (0 where none is). How a sparse update
    sums the rows of repeated ids (``tfc.train.optimizers.unique_rows``) in O(n): TF's
    ``unique`` with a static shape, each position naming its row's first position
    instead of a slot of a shorter list."""

    name = "first_occurrence"
    num_inputs = 2
    traits = frozenset({PURE})
    differentiable = False  # integer positions

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        indices, mask = inputs
        expect_dtype(self.name, indices, INT, "indices")
        expect_dtype(self.name, mask, NUMERIC, "mask")
        if indices.rank != 1 or not shapes_compatible(mask.shape, indices.shape):
            raise TypeMismatch(f"{self.name}: indices {indices} must be a vector and mask "
                               f"{mask} of its shape")
        return [indices]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        indices, mask = inputs
        return [first_occurrences(indices, mask)]

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        """A hash-table insert and lookup per position (the llvm kernel)."""
        n = inputs[0].nbytes(symbol_size) / inputs[0].dtype.itemsize
        return Cost(4 * n, sum(t.nbytes(symbol_size) for t in (*inputs, *outputs)) + 32 * n)
