"""Ops shaped like another tensor: what gradients need when shapes are symbolic.

Static-shape attrs cannot name a batch dim ``B`` that is only known at run time, so
gradient rules that must rebuild an input's shape (the gradient of ``sum`` broadcasts
back, the gradient of ``reshape`` reshapes back) take the shape from a second input
instead. Their reference reads only that input's shape, never its values.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.registry import BROADCAST, COMPOSITE, GENERATOR, PURE, VIEW, Cost, OpDef, register
from tfc.ir.types import TensorType, broadcast_shapes, dims_compatible


class _Like(OpDef):
    traits = frozenset({PURE})

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        return Cost(0, inputs[0].nbytes(symbol_size) + outputs[0].nbytes(symbol_size))


class FilledLike(_Like):
    """A tensor of ``value`` with the type of the input (``zeros_like``, ``ones_like``)."""

    num_inputs = 1
    traits = frozenset({PURE, GENERATOR, COMPOSITE})
    differentiable = False

    def __init__(self, name: str, value: float) -> None:
        self.name, self.value = name, value

    def expand(self, b: Any, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[Any]:
        """A scalar broadcast to the input's shape (a kernel reads nothing of the input)."""
        x = inputs[0]
        fill = b("constant", value=np.asarray(self.value, dtype=x.dtype.np))
        return [b("broadcast_like", fill, x)]

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [np.full(inputs[0].shape, self.value, dtype=inputs[0].dtype)]

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        return Cost(0, outputs[0].nbytes(symbol_size))


register(FilledLike("zeros_like", 0))
register(FilledLike("ones_like", 1))


@register
class BroadcastLike(_Like):
    """``x`` broadcast to the shape of ``like`` (numpy rules; only ``like``'s shape is read)."""

    name = "broadcast_like"
    num_inputs = 2
    traits = frozenset({PURE, BROADCAST})

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x, like = inputs
        shape = broadcast_shapes(x.shape, like.shape)
        if shape is None or len(shape) != like.rank or not all(
                dims_compatible(a, b) for a, b in zip(shape, like.shape)):
            raise TypeMismatch(f"broadcast_like: cannot broadcast {x} to the shape of {like}")
        return [x.with_shape(like.shape)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x, like = inputs
        return [np.broadcast_to(x, like.shape).copy()]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        return [b.sum_to(grads[0], op.inputs[0]), None]


@register
class ReshapeLike(_Like):
    """``x`` reshaped to the shape of ``like`` (same number of elements)."""

    name = "reshape_like"
    num_inputs = 2
    traits = frozenset({PURE, VIEW})

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x, like = inputs
        nx, nl = x.num_elements(), like.num_elements()
        if nx is not None and nl is not None and nx != nl:
            raise TypeMismatch(f"reshape_like: {x} has {nx} elements, {like} has {nl}")
        return [x.with_shape(like.shape)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x, like = inputs
        if x.size != like.size:
            raise ExecutionError(f"reshape_like: cannot reshape shape {list(x.shape)} to "
                                 f"{list(like.shape)}")
        return [x.reshape(like.shape).copy()]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        return [b("reshape_like", grads[0], op.inputs[0]), None]


