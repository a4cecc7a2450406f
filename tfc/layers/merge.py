"""Merge layers of the Functional API: ``Concatenate`` and ``Add`` take a list of tensors
(two towers joined into one head: ``Concatenate()([a, b])``)."""

from __future__ import annotations

from typing import Any

from tfc.api import ops
from tfc.api.graph import Tensor
from tfc.errors import TypeMismatch
from tfc.layers.base import Layer


class Concatenate(Layer):
    """The inputs joined along ``axis`` (the last by default); the other dims must agree."""

    takes_list = True

    def __init__(self, axis: int = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.axis = int(axis)

    def call(self, xs: list[Tensor], training: bool) -> Tensor:  # type: ignore[override]
        return ops.concat(xs, axis=self.axis)


class Add(Layer):
    """The element-wise sum of inputs of one type."""

    takes_list = True

    def call(self, xs: list[Tensor], training: bool) -> Tensor:  # type: ignore[override]
        first = xs[0].type
        for x in xs[1:]:
            if x.type != first:
                raise TypeMismatch(f"Add '{self.name}' takes inputs of one type, got {first} "
                                   f"and {x.type}")
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out
