"""Reductions along axes (sum mean max min prod) and arg-reductions (argmax argmin)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfc.errors import TypeMismatch
from tfc.ir.registry import (ALL, FLOAT, INT, NUMERIC, PURE, AttrSpec, OpDef,
                             expect_dtype, normalize_axes, normalize_axis, register)
from tfc.ir.types import DType, TensorType

REDUCE_ATTRS = {
    "axes": AttrSpec("ints", None, "axes to reduce; none means all"),
    "keepdims": AttrSpec("bool", False, "keep reduced axes as size 1"),
}


def reduced_shape(shape: Sequence, axes: tuple[int, ...], keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


class Reduce(OpDef):
    """``fn`` over ``axes``; the result keeps the input's dtype."""

    num_inputs = 1
    attrs = REDUCE_ATTRS
    traits = frozenset({PURE})

    def __init__(self, name: str, fn: Callable[..., np.ndarray],
                 dtypes: frozenset[DType], needs_elements: bool = False) -> None:
        self.name, self.fn, self.dtypes, self.needs_elements = name, fn, dtypes, needs_elements

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        expect_dtype(self.name, x, self.dtypes)
        axes = normalize_axes(self.name, attrs["axes"], x.rank)
        if self.needs_elements and any(x.shape[a] == 0 for a in axes):
            raise TypeMismatch(f"{self.name}: cannot reduce an empty axis of {x}")
        return [x.with_shape(reduced_shape(x.shape, axes, attrs["keepdims"]))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        axes = normalize_axes(self.name, attrs["axes"], x.ndim)
        out = self.fn(x, axis=axes, keepdims=attrs["keepdims"])
        return [np.asarray(out, dtype=x.dtype)]

    def cost(self, inputs, outputs, attrs, symbol_size=1):  # type: ignore[override]
        base = super().cost(inputs, outputs, attrs, symbol_size)
        return type(base)(inputs[0].nbytes(symbol_size) / inputs[0].dtype.itemsize, base.bytes)


def _sum(x: np.ndarray, axis: tuple, keepdims: bool) -> np.ndarray:
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _mean(x: np.ndarray, axis: tuple, keepdims: bool) -> np.ndarray:
    # Accumulate half precision in f32, as TensorFlow does, then round once.
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    return np.mean(x, axis=axis, keepdims=keepdims, dtype=acc)


register(Reduce("sum", _sum, NUMERIC))
register(Reduce("mean", _mean, FLOAT))
register(Reduce("prod", lambda x, axis, keepdims: np.prod(x, axis=axis, keepdims=keepdims,
                                                          dtype=x.dtype), NUMERIC))
register(Reduce("max", np.max, ALL, needs_elements=True))
register(Reduce("min", np.min, ALL, needs_elements=True))


class ArgReduce(OpDef):
    """Index of the largest (smallest) element along ``axis``; ties go to the first."""

    num_inputs = 1
    traits = frozenset({PURE})
    attrs = {
        "axis": AttrSpec("int", 0, "the axis to search"),
        "output_type": AttrSpec("dtype", DType.i64, "i32 or i64"),
    }

    def __init__(self, name: str, fn: Callable[..., np.ndarray]) -> None:
        self.name, self.fn = name, fn

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        expect_dtype(self.name, x, NUMERIC)
        if attrs["output_type"] not in INT:
            raise TypeMismatch(f"{self.name}: output_type must be i32 or i64")
        if x.rank == 0:
            raise TypeMismatch(f"{self.name}: input must have rank >= 1, got {x}")
        axis = normalize_axis(self.name, attrs["axis"], x.rank)
        if x.shape[axis] == 0:
            raise TypeMismatch(f"{self.name}: axis {axis} of {x} is empty")
        return [TensorType(attrs["output_type"], reduced_shape(x.shape, (axis,), False))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        axis = normalize_axis(self.name, attrs["axis"], x.ndim)
        return [self.fn(x, axis=axis).astype(attrs["output_type"].np)]


register(ArgReduce("argmax", np.argmax))
register(ArgReduce("argmin", np.argmin))
