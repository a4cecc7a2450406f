"""``tfc.keras.optimizers``: Keras 3's optimizers (``SGD``, ``Adam``, ``RMSprop``,
``Adagrad``) with Keras's arguments, defaults and update rules, as ``tfc.train``
optimizers (what ``Model.compile`` takes; the names ``"sgd"``, ``"adam"``, ``"rmsprop"``
and ``"adagrad"`` in ``compile`` mean these).

Why not ``tfc.train``'s TF1 optimizers under Keras's names: Keras 3 computes differently
from TF1 where the names are the same. RMSprop's mean square starts at zero (TF1's at
one: its first steps are ~3x smaller than Keras's) with ``epsilon=1e-7`` (TF1 1e-10);
Adam's ``epsilon`` is 1e-7 (TF1 1e-8); Adagrad adds ``epsilon=1e-7`` to the accumulator
under the square root and its default rate is 0.001. SGD with momentum is TF1's
``MomentumOptimizer`` (Keras's ``m = mu m - lr g; w += m`` is the same sequence of
weights with ``m = -lr accum``). Code written against ``tf.keras`` therefore gets Keras's
numbers (``tools/conformance_keras.py`` compares ``fit`` with Keras's, epoch by epoch).

Hyperparameters as Keras 3 holds them: the learning rate is a float32 variable (cast to
each weight's dtype), every other one a Python float used at the weight's dtype, so
float64 weights see ``float32(lr)`` but the exact ``rho``, betas, momentum and epsilon
(TF1's optimizers round them all to float32: ``python_float_as_tf``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tfc.api import ops
from tfc.api.graph import Tensor, Variable
from tfc.errors import TfcError
from tfc.train.optimizers import (AdagradOptimizer, AdamOptimizer, GradientDescentOptimizer,
                                  MomentumOptimizer, Optimizer, RMSPropOptimizer)

__all__ = ["SGD", "Adam", "RMSprop", "Adagrad", "get"]


def _lr(value: Any) -> Any:
    """A number learning rate as Keras 3's float32 variable holds it (a tensor or a
    schedule unchanged)."""
    return np.float32(value) if isinstance(value, (int, float)) else value


def _exact(value: float) -> np.float64:
    """A hyperparameter Keras uses at the weight's dtype: not rounded to float32 (a numpy
    float escapes ``python_float_as_tf``)."""
    return np.float64(value)


def SGD(learning_rate: float = 0.01, momentum: float = 0.0,  # noqa: N802 (Keras)
        nesterov: bool = False) -> Optimizer:
    """Keras's ``SGD``: plain gradient descent, or with ``momentum`` (``nesterov``)."""
    if momentum < 0.0 or momentum > 1.0:
        raise TfcError(f"SGD: momentum must be in [0, 1], got {momentum}")
    if momentum == 0.0:
        return GradientDescentOptimizer(_lr(learning_rate), name="SGD")
    return MomentumOptimizer(_lr(learning_rate), _exact(momentum), use_nesterov=nesterov,
                             name="SGD")


def Adam(learning_rate: float = 0.001, beta_1: float = 0.9,  # noqa: N802 (Keras)
         beta_2: float = 0.999, epsilon: float = 1e-7) -> Optimizer:
    """Keras's ``Adam``: TF1's update rule with Keras's ``epsilon`` (1e-7)."""
    return AdamOptimizer(_lr(learning_rate), _exact(beta_1), _exact(beta_2), _exact(epsilon))


class _KerasRMSProp(RMSPropOptimizer):
    """TF1's ``ApplyRMSProp`` with the mean square starting at zero (Keras's velocity).
    A sparse gradient (an Embedding's) is made dense, as Keras updates it: every row's
    mean square decays (TF1's sparse RMSProp leaves the untouched rows as they were)."""

    _apply_sparse = Optimizer._apply_sparse

    def _create_slots(self, var_list: list[Variable]) -> None:
        for v in var_list:
            self._slot(v, "rms", 0.0)  # created first: the parent finds it made
        super()._create_slots(var_list)


def RMSprop(learning_rate: float = 0.001, rho: float = 0.9,  # noqa: N802 (Keras)
            momentum: float = 0.0, epsilon: float = 1e-7, centered: bool = False
            ) -> Optimizer:
    """Keras's ``RMSprop``: ``v = rho v + (1 - rho) g^2`` from ``v = 0``,
    ``w -= lr g / sqrt(v + epsilon)`` (through a momentum when given; ``centered``
    subtracts the squared mean gradient from ``v``)."""
    return _KerasRMSProp(_lr(learning_rate), _exact(rho), _exact(momentum), _exact(epsilon),
                         centered=centered)


class _KerasAdagrad(AdagradOptimizer):
    """``accum += g^2; w -= lr g / sqrt(accum + epsilon)`` (Keras's; TF1 has no epsilon)."""

    def __init__(self, learning_rate: float, initial_accumulator_value: float,
                 epsilon: float) -> None:
        super().__init__(learning_rate, initial_accumulator_value)
        self._epsilon = epsilon

    def _inv_root(self, acc_t: Tensor, var: Variable) -> Tensor:
        return ops.rsqrt(acc_t + self._hyper(self._epsilon, var))


def Adagrad(learning_rate: float = 0.001,  # noqa: N802 (Keras)
            initial_accumulator_value: float = 0.1, epsilon: float = 1e-7) -> Optimizer:
    """Keras's ``Adagrad`` (``initial_accumulator_value`` must be positive here)."""
    return _KerasAdagrad(_lr(learning_rate), initial_accumulator_value, _exact(epsilon))


_BY_NAME: dict[str, Callable[[], Optimizer]] = {"sgd": SGD, "adam": Adam, "rmsprop": RMSprop,
                                                "adagrad": Adagrad}


def get(name: str) -> Optimizer | None:
    """The optimizer of Keras name ``name`` with Keras's defaults, or None when unknown."""
    make = _BY_NAME.get(name.lower())
    return None if make is None else make()
