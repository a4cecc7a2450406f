"""Reductions along axes (sum mean max min prod) and arg-reductions (argmax argmin)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfc.errors import TypeMismatch
from tfc.ir.registry import (ALL, FLOAT, INT, NUMERIC, PURE, REDUCTION, AttrSpec, OpDef,
                             expect_dtype, normalize_axes, normalize_axis, register,
                             tensor_type)
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
    traits = frozenset({PURE, REDUCTION})

    def __init__(self, name: str, fn: Callable[..., np.ndarray],
                 dtypes: frozenset[DType], needs_elements: bool = False,
                 grad: Callable[..., Any] | None = None) -> None:
        self.name, self.fn, self.dtypes, self.needs_elements = name, fn, dtypes, needs_elements
        self.grad = grad

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """The result's gradient broadcast back over the reduced axes, then ``grad``."""
        x = op.inputs[0]
        axes = normalize_axes(self.name, op.attrs["axes"], x.type.rank)
        dy, y = grads[0], op.result
        if not op.attrs["keepdims"]:
            for a in axes:  # increasing, so each axis lands where it was
                dy = b("expand_dims", dy, axis=a)
                y = b("expand_dims", y, axis=a)
        if self.grad is None:
            raise NotImplementedError(f"{self.name} has no gradient rule")
        return [self.grad(b, x, y, b("broadcast_like", dy, x), axes)]

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        expect_dtype(self.name, x, self.dtypes)
        axes = normalize_axes(self.name, attrs["axes"], x.rank)
        if self.needs_elements and any(x.shape[a] == 0 for a in axes):
            raise TypeMismatch(f"{self.name}: cannot reduce an empty axis of {x}")
        return [tensor_type(x.dtype, reduced_shape(x.shape, axes, attrs["keepdims"]))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        axes = normalize_axes(self.name, attrs["axes"], x.ndim)
        out = self.fn(x, axis=axes, keepdims=attrs["keepdims"])
        return [np.asarray(out, dtype=x.dtype)]

    def cost(self, inputs, outputs, attrs, symbol_size=1):
        base = super().cost(inputs, outputs, attrs, symbol_size)
        return type(base)(inputs[0].nbytes(symbol_size) / inputs[0].dtype.itemsize, base.bytes)


def _sum(x: np.ndarray, axis: tuple, keepdims: bool) -> np.ndarray:
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _mean(x: np.ndarray, axis: tuple, keepdims: bool) -> np.ndarray:
    # Accumulate half precision in f32, as TensorFlow does, then round once.
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    return np.asarray(np.mean(x, axis=axis, keepdims=keepdims, dtype=acc))


def _count(b: Any, x: Any, axes: tuple[int, ...]) -> Any:
    """The number of elements reduced, as a scalar of x's dtype (symbolic dims included)."""
    dims = [x.type.shape[a] for a in axes]
    if all(isinstance(d, int) for d in dims):
        return b.constant(float(np.prod(dims)), x)
    sizes = b("gather", b("shape", x), b("constant", value=np.array(axes, np.int32)))
    return b("cast", b("prod", sizes), dtype=x.dtype)


def _extremum_grad(b: Any, x: Any, y: Any, dy: Any, axes: tuple[int, ...]) -> Any:
    """max / min: the gradient is shared equally by the elements that attain it."""
    hit = b("cast", b("equal", x, b("broadcast_like", y, x)), dtype=x.dtype)
    ties = b("broadcast_like", b("sum", hit, axes=axes, keepdims=True), x)
    return b("div", b("mul", dy, hit), ties)


register(Reduce("sum", _sum, NUMERIC, grad=lambda b, x, y, dy, axes: dy))
register(Reduce("mean", _mean, FLOAT,
                grad=lambda b, x, y, dy, axes: b("div", dy, _count(b, x, axes))))


def _prod_grad(b: Any, x: Any, y: Any, dy: Any, axes: tuple[int, ...]) -> Any:
    """d prod / dx_i is the product of the other elements (TensorFlow's rule, which it
    computes with exclusive cumprods). At a nonzero x_i that is ``prod / x_i`` (computed
    so); at a zero that would be 0/0 = NaN, so there, with ``P`` the product of the
    nonzero elements and ``Z`` the sum of the zero ones: ``P`` if x_i is the only zero,
    ``P (Z - x_i)`` (the other zero times P) if there are two, else 0. Each is the exact
    polynomial, not only its value (``Z - x_i`` is 0 but has derivative 1 by the other
    zero), so this rule's own derivative, a second derivative, is exact too (TF's is 0
    at a zero: its cumprod gradient divides by x)."""
    def whole(v: Any) -> Any:
        return b("broadcast_like", v, x)
    is_zero = b("equal", x, b.constant(0, x))
    safe = b("where", is_zero, b("ones_like", x), x)
    nonzero_prod = whole(b("prod", safe, axes=axes, keepdims=True))
    zeros = whole(b("sum", b("cast", is_zero, dtype=x.dtype), axes=axes, keepdims=True))
    zero_sum = whole(b("sum", b("where", is_zero, x, b("zeros_like", x)), axes=axes,
                       keepdims=True))
    at_zero = b("where", b("equal", zeros, b.constant(1, x)), b("mul", dy, nonzero_prod),
                b("where", b("equal", zeros, b.constant(2, x)),
                  b("mul", dy, b("mul", nonzero_prod, b("sub", zero_sum, x))),
                  b("zeros_like", x)))
    return b("where", is_zero, at_zero, b("div", b("mul", dy, whole(y)), safe))


register(Reduce("prod", lambda x, axis, keepdims: np.prod(x, axis=axis, keepdims=keepdims,
                                                          dtype=x.dtype), NUMERIC,
                grad=_prod_grad))
register(Reduce("max", np.max, ALL, needs_elements=True, grad=_extremum_grad))
register(Reduce("min", np.min, ALL, needs_elements=True, grad=_extremum_grad))


class ArgReduce(OpDef):
    """Index of the largest (smallest) element along ``axis``; ties go to the first."""

    num_inputs = 1
    traits = frozenset({PURE})
    attrs = {
        "axis": AttrSpec("int", 0, "the axis to search"),
        "output_type": AttrSpec("dtype", DType.i64, "i32 or i64"),
    }

    differentiable = False

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

    def cost(self, inputs, outputs, attrs, symbol_size=1):
        """One comparison per input element (not per result, the default's count)."""
        base = super().cost(inputs, outputs, attrs, symbol_size)
        return type(base)(inputs[0].nbytes(symbol_size) / inputs[0].dtype.itemsize, base.bytes)


register(ArgReduce("argmax", np.argmax))
register(ArgReduce("argmin", np.argmin))
