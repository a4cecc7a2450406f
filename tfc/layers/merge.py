"""Merge layers of the Functional API: ``Concatenate``, ``Add``, ``Subtract``,
``Multiply``, ``Average``, ``Maximum`` and ``Minimum`` take a list of tensors (two towers
joined into one head: ``Concatenate()([a, b])``). The element-wise ones take inputs of
one type (Keras broadcasts dims of 1; tfc asks for the shapes to agree, README)."""

from __future__ import annotations

from typing import Any, Callable

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


class _ElementwiseMerge(Layer):
    """Inputs of one type combined element by element, left to right, by ``combine``;
    ``arity``: the number of inputs it takes exactly (None: two or more)."""

    takes_list = True
    arity: int | None = None
    combine: Callable[[Tensor, Tensor], Tensor]

    def call(self, xs: list[Tensor], training: bool) -> Tensor:  # type: ignore[override]
        kind = type(self).__name__
        if self.arity is not None and len(xs) != self.arity:
            raise TypeMismatch(f"{kind} '{self.name}' takes exactly {self.arity} inputs, got "
                               f"{len(xs)}")
        if len(xs) < 2:
            raise TypeMismatch(f"{kind} '{self.name}' takes at least 2 inputs, got {len(xs)}")
        first = xs[0].type
        for x in xs[1:]:
            if x.type != first:
                raise TypeMismatch(f"{kind} '{self.name}' takes inputs of one type, got "
                                   f"{first} and {x.type}")
        out = xs[0]
        for x in xs[1:]:
            out = type(self).combine(out, x)
        return self.finish(out, len(xs))

    def finish(self, out: Tensor, n: int) -> Tensor:
        return out


class Subtract(_ElementwiseMerge):
    """``a - b`` of exactly two inputs."""

    arity = 2
    combine = staticmethod(ops.subtract)


class Multiply(_ElementwiseMerge):
    """The element-wise product of the inputs."""

    combine = staticmethod(ops.multiply)


class Average(_ElementwiseMerge):
    """The element-wise mean of the inputs (their sum over their count, Keras's)."""

    combine = staticmethod(ops.add)

    def finish(self, out: Tensor, n: int) -> Tensor:
        return out / float(n)


class Maximum(_ElementwiseMerge):
    """The element-wise maximum of the inputs."""

    combine = staticmethod(ops.maximum)


class Minimum(_ElementwiseMerge):
    """The element-wise minimum of the inputs."""

    combine = staticmethod(ops.minimum)
