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
