"""Activation layers: ``Activation`` (any activation by name or callable) and Keras's
parametrized ones, ``ReLU``, ``LeakyReLU``, ``ELU``, ``Softmax`` (Keras 3's arguments,
defaults and arithmetic). None has weights; each computes the same in training."""

from __future__ import annotations

from typing import Any, Callable

from tfc.api import nn, ops
from tfc.api.graph import Tensor
from tfc.errors import TypeMismatch
from tfc.layers.base import Layer, get_activation


def _float_input(layer: Layer, x: Tensor) -> None:
    if not x.dtype.is_float:
        raise TypeMismatch(f"{type(layer).__name__} '{layer.name}' takes float inputs, got "
                           f"{x.type} (use tfc.cast)")


class Activation(Layer):
    """``activation(x)``: an activation by Keras name (``"relu"``, ``"softmax"``,
    ``"elu"`` ...; ``tfc.layers.base.get_activation``) or a callable on a tensor."""

    def __init__(self, activation: str | Callable[[Tensor], Tensor] | None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.activation = get_activation(activation)

    def call(self, x: Tensor, training: bool) -> Tensor:
        return x if self.activation is None else self.activation(x)


class ReLU(Layer):
    """Keras's ``ReLU(max_value=None, negative_slope=0.0, threshold=0.0)``: ``x`` where
    ``x > threshold``, else ``negative_slope * (x - threshold)``, clipped at ``max_value``.
    Computed as Keras 3's ``relu`` does, step by step (``x * (x > threshold)``, clipped to
    ``[0, max_value]``, minus ``negative_slope * relu(threshold - x)``), so the corner cases
    (a slope with a ``max_value``) give Keras's numbers. Like Keras's layer it takes no
    negative ``max_value``, ``negative_slope`` or ``threshold``."""

    def __init__(self, max_value: float | None = None, negative_slope: float = 0.0,
                 threshold: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if max_value is not None and max_value < 0:
            raise TypeMismatch(f"ReLU: max_value must be >= 0 or None, got {max_value}")
        if negative_slope < 0:
            raise TypeMismatch(f"ReLU: negative_slope must be >= 0, got {negative_slope}")
        if threshold < 0:
            raise TypeMismatch(f"ReLU: threshold must be >= 0, got {threshold}")
        self.max_value = None if max_value is None else float(max_value)
        self.negative_slope, self.threshold = float(negative_slope), float(threshold)

    def call(self, x: Tensor, training: bool) -> Tensor:
        _float_input(self, x)
        slope, top, thr = self.negative_slope, self.max_value, self.threshold
        if slope != 0.0 and top is None and thr == 0.0:
            return nn.leaky_relu(x, slope)
        negative = nn.relu(thr - x) if slope != 0.0 else None
        if thr != 0.0:
            y = x * ops.cast(ops.greater(x, thr), x.dtype)
        elif top == 6.0:
            y, top = nn.relu6(x), None
        else:
            y = nn.relu(x)
        if top is not None:
            y = ops.minimum(ops.maximum(y, 0.0), top)
        return y if negative is None else y - slope * negative


class LeakyReLU(Layer):
    """``x`` where ``x > 0``, else ``negative_slope * x`` (Keras 3's ``LeakyReLU``: default
    slope 0.3, which the ``leaky_relu`` activation by name makes 0.2; Keras 2's ``alpha=``
    is taken too)."""

    def __init__(self, negative_slope: float = 0.3, alpha: float | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        slope = negative_slope if alpha is None else alpha
        if slope < 0:
            raise TypeMismatch(f"LeakyReLU: negative_slope must be >= 0, got {slope}")
        self.negative_slope = float(slope)

    def call(self, x: Tensor, training: bool) -> Tensor:
        _float_input(self, x)
        return nn.leaky_relu(x, self.negative_slope)


class ELU(Layer):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)`` (Keras's ``ELU``)."""

    def __init__(self, alpha: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alpha = float(alpha)

    def call(self, x: Tensor, training: bool) -> Tensor:
        _float_input(self, x)
        y = nn.elu(x)
        if self.alpha == 1.0:
            return y
        return ops.where(ops.greater(x, 0.0), y, self.alpha * y)


class Softmax(Layer):
    """``softmax`` along ``axis`` (the last by default; Keras's ``Softmax``). A loss on its
    output takes the logits behind it, as after a ``softmax`` activation."""

    def __init__(self, axis: int = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.axis = int(axis)

    def call(self, x: Tensor, training: bool) -> Tensor:
        _float_input(self, x)
        if not -x.type.rank <= self.axis < x.type.rank:
            raise TypeMismatch(f"Softmax '{self.name}': axis {self.axis} is out of range for "
                               f"its input {x.type}")
        return nn.softmax(x, axis=self.axis)
