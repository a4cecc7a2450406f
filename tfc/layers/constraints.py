"""Keras's weight constraints: ``MaxNorm``, ``NonNeg``, ``UnitNorm``, ``MinMaxNorm``.

A constraint maps a weight to its projection. A layer given ``kernel_constraint=`` /
``bias_constraint=`` (``recurrent_constraint=``) attaches it to the weight
(``add_weight(constraint=)``), and a model's optimizer step writes ``constraint(w_new)``
instead of the updated ``w_new`` (Keras 3 assigns ``constraint(w)`` after applying the
gradients). tfc's variables take one assign per step, so ``constrained_updates`` turns the
optimizer's assign of ``w_new`` (or ``assign_add`` / ``assign_sub`` of a delta) into one
assign of the constrained value, in the same step. Only the model's training step applies
them (as Keras: ``set_weights`` or a user's ``assign`` does not).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

from tfc.api import ops
from tfc.api.graph import Operation, Tensor, Variable
from tfc.api.tensor import convert_to_tensor
from tfc.errors import TfcError

__all__ = ["Constraint", "MaxNorm", "NonNeg", "UnitNorm", "MinMaxNorm", "get",
           "max_norm", "non_neg", "unit_norm", "min_max_norm"]

EPSILON = 1e-7  # Keras's backend epsilon, added to the norms it divides by

Axis = int | Sequence[int]


class Constraint:
    """A projection ``w -> w'`` of a weight (subclass and define ``__call__``)."""

    def __call__(self, w: Any) -> Tensor:
        raise NotImplementedError


def _norms(w: Tensor, axis: Axis) -> Tensor:
    return ops.sqrt(ops.reduce_sum(ops.square(w), axis=_axes(axis), keepdims=True))


def _axes(axis: Axis) -> Any:
    return int(axis) if isinstance(axis, int) else [int(a) for a in axis]


class MaxNorm(Constraint):
    """Norms along ``axis`` at most ``max_value``: ``w * clip(n, 0, max) / (eps + n)``."""

    def __init__(self, max_value: float = 2.0, axis: Axis = 0) -> None:
        self.max_value, self.axis = float(max_value), axis

    def __call__(self, w: Any) -> Tensor:
        w = convert_to_tensor(w)
        n = _norms(w, self.axis)
        desired = ops.clip_by_value(n, 0.0, self.max_value)
        return w * (desired / (EPSILON + n))


class NonNeg(Constraint):
    """``max(w, 0)``."""

    def __call__(self, w: Any) -> Tensor:
        return ops.maximum(convert_to_tensor(w), 0.0)


class UnitNorm(Constraint):
    """Norms along ``axis`` one: ``w / (eps + n)``."""

    def __init__(self, axis: Axis = 0) -> None:
        self.axis = axis

    def __call__(self, w: Any) -> Tensor:
        w = convert_to_tensor(w)
        return w / (EPSILON + _norms(w, self.axis))


class MinMaxNorm(Constraint):
    """Norms along ``axis`` moved toward ``[min_value, max_value]`` by ``rate``:
    ``w * (rate * clip(n, min, max) + (1 - rate) * n) / (eps + n)``."""

    def __init__(self, min_value: float = 0.0, max_value: float = 1.0, rate: float = 1.0,
                 axis: Axis = 0) -> None:
        self.min_value, self.max_value = float(min_value), float(max_value)
        self.rate, self.axis = float(rate), axis

    def __call__(self, w: Any) -> Tensor:
        w = convert_to_tensor(w)
        n = _norms(w, self.axis)
        desired = (self.rate * ops.clip_by_value(n, self.min_value, self.max_value)
                   + (1 - self.rate) * n)
        return w * (desired / (EPSILON + n))


max_norm, non_neg, unit_norm, min_max_norm = MaxNorm, NonNeg, UnitNorm, MinMaxNorm

_BY_NAME: dict[str, Callable[[], Constraint]] = {
    "max_norm": MaxNorm, "maxnorm": MaxNorm, "non_neg": NonNeg, "nonneg": NonNeg,
    "unit_norm": UnitNorm, "unitnorm": UnitNorm, "min_max_norm": MinMaxNorm,
    "minmaxnorm": MinMaxNorm}


def get(spec: Any) -> Callable[[Any], Tensor] | None:
    """A constraint: None, one by Keras name (``"non_neg"``, ``"max_norm"`` ... with its
    defaults), or a callable ``w -> w'``."""
    if spec is None or callable(spec):
        return spec
    if isinstance(spec, str) and spec.lower() in _BY_NAME:
        return _BY_NAME[spec.lower()]()
    raise TfcError(f"unknown constraint {spec!r} (known: {', '.join(_BY_NAME)}, or a "
                   f"callable)")


class ConstrainedVariable(Variable):
    """A layer's weight with a ``constraint`` (``Layer.add_weight``): inside
    ``constrained_updates()`` (a model's optimizer step) its update writes
    ``constraint(new value)``; elsewhere it is a plain variable. (The engine makes its
    gradient dense: a row-by-row update could not apply a whole-weight constraint.)"""

    constraint: Callable[[Any], Tensor]

    def _update(self, kind: str, value: Any, name: str | None) -> Operation:
        if not _ACTIVE:
            return super()._update(kind, value, name)
        v = convert_to_tensor(value, dtype=self.dtype)
        new = (v if kind == "var.assign" else self.value() + v if kind == "var.assign_add"
               else self.value() - v)
        return super()._update("var.assign", self.constraint(new), name)


_ACTIVE: list[bool] = []


@contextlib.contextmanager
def constrained_updates() -> Iterator[None]:
    """Updates of constrained variables made inside write the constrained value."""
    _ACTIVE.append(True)
    try:
        yield
    finally:
        _ACTIVE.pop()
