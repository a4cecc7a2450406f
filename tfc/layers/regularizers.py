"""Keras's weight and activity regularizers: ``L1``, ``L2``, ``L1L2``.

A regularizer maps a tensor (a weight, or a layer's output) to a scalar penalty, in the
tensor's dtype. A layer given ``kernel_regularizer=`` / ``bias_regularizer=`` /
``recurrent_regularizer=`` attaches it to the weight (``add_weight(regularizer=)``), one
given ``activity_regularizer=`` applies it to each output of each call, divided by the
batch size (Keras 3's ``Layer.__call__``). ``Model.losses`` lists the penalties, and
``fit`` / ``evaluate`` / ``train_step`` add them to the compiled loss as Keras 3's
``compute_loss`` does (``tfc.layers.engine``).
"""

from __future__ import annotations

from typing import Any, Callable

from tfc.api import ops
from tfc.api.graph import Tensor
from tfc.api.tensor import convert_to_tensor
from tfc.errors import TfcError

__all__ = ["Regularizer", "L1", "L2", "L1L2", "l1", "l2", "l1_l2", "get"]


class Regularizer:
    """A penalty ``x -> scalar`` (subclass and define ``__call__``)."""

    def __call__(self, x: Any) -> Tensor:
        raise NotImplementedError


def _factor(value: Any, what: str) -> float:
    f = 0.0 if value is None else float(value)
    if not f >= 0.0 or f == float("inf"):
        raise TfcError(f"{what}: the factor must be a finite number >= 0, got {value!r}")
    return f


class L1L2(Regularizer):
    """``l1 * sum(|x|) + l2 * sum(x^2)`` (Keras's ``L1L2``; each term only when its factor
    is not zero, the factors cast to ``x``'s dtype)."""

    def __init__(self, l1: float = 0.0, l2: float = 0.0) -> None:
        self.l1 = _factor(l1, "L1L2 l1")
        self.l2 = _factor(l2, "L1L2 l2")

    def __call__(self, x: Any) -> Tensor:
        x = convert_to_tensor(x)
        total = ops.zeros([], x.dtype)
        if self.l1:
            total = total + ops.cast(self.l1, x.dtype) * ops.reduce_sum(ops.abs(x))
        if self.l2:
            total = total + ops.cast(self.l2, x.dtype) * ops.reduce_sum(ops.square(x))
        return total

    def __repr__(self) -> str:
        return f"{type(self).__name__}(l1={self.l1}, l2={self.l2})"


class L1(L1L2):
    """``l1 * sum(|x|)`` (Keras's ``L1``, default factor 0.01)."""

    def __init__(self, l1: float = 0.01) -> None:
        super().__init__(l1=l1)

    def __call__(self, x: Any) -> Tensor:
        x = convert_to_tensor(x)
        return ops.cast(self.l1, x.dtype) * ops.reduce_sum(ops.abs(x))


class L2(L1L2):
    """``l2 * sum(x^2)`` (Keras's ``L2``, default factor 0.01)."""

    def __init__(self, l2: float = 0.01) -> None:
        super().__init__(l2=l2)

    def __call__(self, x: Any) -> Tensor:
        x = convert_to_tensor(x)
        return ops.cast(self.l2, x.dtype) * ops.reduce_sum(ops.square(x))


l1, l2 = L1, L2


def l1_l2(l1: float = 0.01, l2: float = 0.01) -> L1L2:
    """Keras's ``l1_l2``: both factors 0.01 by default."""
    return L1L2(l1, l2)


_BY_NAME: dict[str, Callable[[], Regularizer]] = {
    "l1": L1, "l2": L2, "l1l2": L1L2, "l1_l2": L1L2}


def get(spec: Any) -> Callable[[Any], Tensor] | None:
    """A regularizer: None, one by Keras name (``"l1"``, ``"l2"``: factor 0.01; ``"l1l2"``:
    both 0), or a callable ``x -> scalar``."""
    if spec is None or callable(spec):
        return spec
    if isinstance(spec, str) and spec.lower() in _BY_NAME:
        return _BY_NAME[spec.lower()]()
    raise TfcError(f"unknown regularizer {spec!r} (known: {', '.join(_BY_NAME)}, or a "
                   f"callable)")
