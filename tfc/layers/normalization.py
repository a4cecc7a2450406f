"""Normalization layers: ``BatchNormalization`` and ``LayerNormalization`` (Keras 3's
arguments, defaults, weights and arithmetic).

``BatchNormalization`` is the one layer with state that training changes outside the
optimizer: its training call normalizes with the batch's statistics and makes the assigns
of the moving statistics (``Layer.add_update``), which a model's ``fit`` runs with each
optimizer step (``nodes.collecting_updates``). Its inference call reads the moving
statistics. Both compute as Keras 3 on TensorFlow: ``tf.nn.moments`` (biased variance)
and ``tf.nn.batch_normalization``'s ``x * inv + (beta - mean * inv)`` with ``inv =
rsqrt(var + epsilon) * gamma``, so float32 results agree to rounding.
"""

from __future__ import annotations

from typing import Any, Sequence

from tfc.api import nn, ops
from tfc.api.graph import Tensor, Variable
from tfc.errors import TypeMismatch
from tfc.ir.types import TensorType
from tfc.layers.base import Initializer, Layer
from tfc.layers.core import float_dtype, static_dim


def _axes(layer: Layer, axis: int | Sequence[int], t: TensorType) -> list[int]:
    """``axis`` (one or several, negative from the end) as sorted non-negative axes of
    ``t``, each once; the batch axis is allowed only for a rank-1 input, as Keras."""
    given = [axis] if isinstance(axis, int) else list(axis)
    out = []
    for a in given:
        if not isinstance(a, int) or not -t.rank <= a < t.rank:
            raise TypeMismatch(f"{type(layer).__name__} '{layer.name}': axis {a} is out of "
                               f"range for its input {t}")
        out.append(a % t.rank)
    if not out or len(set(out)) != len(out):
        raise TypeMismatch(f"{type(layer).__name__} '{layer.name}': axis {axis} must name "
                           f"distinct axes")
    return sorted(out)


def _broadcast(v: Any, shape: list[int]) -> Any:
    """A weight of the normalized axes' shape reshaped to broadcast against the input
    (``None`` stays ``None``)."""
    return None if v is None else ops.reshape(v, shape)


class BatchNormalization(Layer):
    """Normalize each feature along ``axis`` (by default the last: a Dense's units, a
    Conv2D's channels) over the batch and every other axis, then scale by ``gamma`` and
    shift by ``beta`` (Keras's ``BatchNormalization``).

    In training (``fit``, or a call with ``training=True``) the statistics are the batch's
    mean and biased variance, and the layer makes the updates ``moving = moving * momentum
    + batch * (1 - momentum)`` of ``moving_mean`` and ``moving_variance`` with the biased
    batch variance, Keras 3's rule (``fit`` runs them each step; see ``add_update``). In
    inference (``predict``, ``evaluate``) the moving statistics are used. A layer with
    ``trainable=False`` always normalizes with the moving statistics and updates nothing
    (Keras 3: ``training and self.trainable``). Its weights, in Keras's order: ``gamma``
    (with ``scale``), ``beta`` (with ``center``), ``moving_mean``, ``moving_variance``, the
    last two non-trainable (counted in ``count_params``, saved by ``get_weights``).

    Called twice in one training graph (a layer shared by two branches), its second call's
    updates start from the values the first's assign, and the step assigns the result (one
    assign per variable), as Keras's ``fit`` applies the two updates one after the other.

    Not here: Keras's regularizers, constraints, ``renorm`` and ``synchronized``; training
    under a data-parallel strategy (the replicate pass refuses: each replica's batch
    statistics differ).
    """

    uses_training = True

    def __init__(self, axis: int = -1, momentum: float = 0.99, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True,
                 beta_initializer: str | Initializer = "zeros",
                 gamma_initializer: str | Initializer = "ones",
                 moving_mean_initializer: str | Initializer = "zeros",
                 moving_variance_initializer: str | Initializer = "ones",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(axis, int):
            raise TypeMismatch(f"BatchNormalization: axis must be one int, got {axis!r}")
        if epsilon <= 0.0:
            raise TypeMismatch(f"BatchNormalization: epsilon must be positive, got {epsilon}")
        self.axis, self.momentum, self.epsilon = axis, float(momentum), float(epsilon)
        self.center, self.scale = center, scale
        self.beta_initializer, self.gamma_initializer = beta_initializer, gamma_initializer
        self.moving_mean_initializer = moving_mean_initializer
        self.moving_variance_initializer = moving_variance_initializer

    def build(self, input_type: Any) -> None:
        t: TensorType = input_type.type
        self.dtype = float_dtype(self, t)
        (axis,) = _axes(self, self.axis, t)
        n = static_dim(self, t, axis, f"normalized dim (axis {self.axis})")
        self._axis = axis
        self.gamma: Variable | None = (self.add_weight("gamma", (n,), self.gamma_initializer)
                                       if self.scale else None)
        self.beta: Variable | None = (self.add_weight("beta", (n,), self.beta_initializer)
                                      if self.center else None)
        self.moving_mean = self.add_weight("moving_mean", (n,), self.moving_mean_initializer,
                                           trainable=False)
        self.moving_variance = self.add_weight("moving_variance", (n,),
                                               self.moving_variance_initializer,
                                               trainable=False)

    def call(self, x: Tensor, training: bool) -> Tensor:
        rank = x.type.rank
        reduce = [a for a in range(rank) if a != self._axis]
        mean: Any
        variance: Any
        if training and self.trainable:
            mean, variance = nn.moments(x, reduce)
            m = self.momentum
            self.update_state(self.moving_mean, lambda v: v * m + mean * (1.0 - m))
            self.update_state(self.moving_variance, lambda v: v * m + variance * (1.0 - m))
        else:
            mean, variance = self.moving_mean, self.moving_variance
        gamma, beta = self.gamma, self.beta
        if self._axis != rank - 1:  # Keras's backend reshapes to broadcast
            shape = [1] * rank
            shape[self._axis] = -1
            mean, variance = _broadcast(mean, shape), _broadcast(variance, shape)
            gamma, beta = _broadcast(gamma, shape), _broadcast(beta, shape)
        return nn.batch_normalization(x, mean, variance, beta, gamma, self.epsilon)


class LayerNormalization(Layer):
    """Normalize each example over ``axis`` (by default the last; several axes may be
    given) with its own mean and biased variance, then scale by ``gamma`` and shift by
    ``beta``, each shaped like the normalized axes (Keras's ``LayerNormalization``: the
    same in training and inference). Computed as Keras 3, by ``nn.batch_normalization``:
    ``x * inv + (beta - mean * inv)`` with ``inv = rsqrt(var + epsilon) * gamma``."""

    def __init__(self, axis: int | Sequence[int] = -1, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True,
                 beta_initializer: str | Initializer = "zeros",
                 gamma_initializer: str | Initializer = "ones", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if epsilon <= 0.0:
            raise TypeMismatch(f"LayerNormalization: epsilon must be positive, got {epsilon}")
        self.axis = axis if isinstance(axis, int) else list(axis)
        self.epsilon, self.center, self.scale = float(epsilon), center, scale
        self.beta_initializer, self.gamma_initializer = beta_initializer, gamma_initializer

    def build(self, input_type: Any) -> None:
        t: TensorType = input_type.type
        self.dtype = float_dtype(self, t)
        self._axes = _axes(self, self.axis, t)
        shape = tuple(static_dim(self, t, a, f"normalized dim {a}") for a in self._axes)
        self.gamma: Variable | None = (self.add_weight("gamma", shape, self.gamma_initializer)
                                       if self.scale else None)
        self.beta: Variable | None = (self.add_weight("beta", shape, self.beta_initializer)
                                      if self.center else None)

    def call(self, x: Tensor, training: bool) -> Tensor:
        rank = x.type.rank
        mean, variance = nn.moments(x, self._axes, keepdims=True)
        gamma, beta = self.gamma, self.beta
        if self._axes != [rank - 1]:
            shape = [1] * rank
            for a in self._axes:
                shape[a] = static_dim(self, x.type, a, f"normalized dim {a}")
            gamma, beta = _broadcast(gamma, shape), _broadcast(beta, shape)
        return nn.batch_normalization(x, mean, variance, beta, gamma, self.epsilon)


__all__ = ["BatchNormalization", "LayerNormalization"]
