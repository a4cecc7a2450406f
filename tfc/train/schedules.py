"""The global step and learning-rate schedules, as graph ops (TF1's ``tf.train`` ones).

A schedule is an ordinary scalar tensor computed from the ``global_step`` variable, so
it is re-evaluated every step with no Python in the loop and compiles like any other
part of the graph. Step counts are cast to the learning rate's float dtype first.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from tfc.api import ops
from tfc.api.graph import Graph, Tensor, Variable, get_default_graph, user_location
from tfc.api.tensor import TensorLike, convert_to_tensor
from tfc.errors import TfcError, TypeMismatch
from tfc.ir.types import DType

GLOBAL_STEP = "global_step"


def get_global_step(graph: Graph | None = None) -> Variable | None:
    """The graph's ``global_step`` variable, or None if it has none."""
    g = graph or get_default_graph()
    return g.variables.get(GLOBAL_STEP)


def create_global_step(graph: Graph | None = None) -> Variable:
    """A new ``global_step``: an int64 scalar variable, 0, not trainable, at the graph's
    top level whatever scope is open (as TF's)."""
    g = graph or get_default_graph()
    if GLOBAL_STEP in g.variables:
        raise TfcError("the graph already has a global_step variable", user_location())
    with g.as_default(), g.name_scope("/"), g.device(None):
        return Variable(np.int64(0), trainable=False, name=GLOBAL_STEP)


def get_or_create_global_step(graph: Graph | None = None) -> Variable:
    """The graph's ``global_step``, created on first call. Pass it to ``minimize`` (or
    ``apply_gradients``) to count training steps."""
    step = get_global_step(graph)
    if step is not None:
        if step.dtype not in (DType.i32, DType.i64) or step.type.rank != 0:
            raise TypeMismatch(f"global_step must be an integer scalar, it is {step.type}",
                               user_location())
        return step
    return create_global_step(graph)


def _float(x: TensorLike) -> Tensor:
    """A float scalar tensor: Python numbers become f32 (TF's default), tensors stay."""
    t = convert_to_tensor(x)
    if t.type.rank != 0:
        raise TypeMismatch(f"expected a scalar, got {t.type}", user_location())
    return t if t.dtype.is_float else ops.cast(t, DType.f32)


def _as(x: TensorLike, dtype: DType) -> Tensor:
    """``x`` (a step count or a Python number) as a scalar of ``dtype``."""
    if not isinstance(x, (Tensor, Variable)):
        return convert_to_tensor(x, dtype)  # a value that does not fit dtype is an error
    t = convert_to_tensor(x)
    return t if t.dtype == dtype else ops.cast(t, dtype)


def exponential_decay(learning_rate: TensorLike, global_step: TensorLike, decay_steps: float,
                      decay_rate: float, staircase: bool = False,
                      name: str | None = None) -> Tensor:
    """``learning_rate * decay_rate ** (global_step / decay_steps)``; with ``staircase``
    the exponent is floored, so the rate drops every ``decay_steps`` steps."""
    if decay_steps is None or (not isinstance(decay_steps, (Tensor, Variable))
                               and decay_steps <= 0):
        raise ValueError(f"exponential_decay: decay_steps must be positive, got {decay_steps}")
    lr = _float(learning_rate)
    p = _as(global_step, lr.dtype) / _as(decay_steps, lr.dtype)
    if staircase:
        p = ops.floor(p)
    return ops.multiply(lr, ops.pow(_as(decay_rate, lr.dtype), p))


def cosine_decay(learning_rate: TensorLike, global_step: TensorLike, decay_steps: float,
                 alpha: float = 0.0, name: str | None = None) -> Tensor:
    """Cosine decay from ``learning_rate`` to ``alpha * learning_rate`` over
    ``decay_steps`` steps, then constant (Loshchilov & Hutter's SGDR without restarts)::

        step = min(global_step, decay_steps)
        lr * ((1 - alpha) * 0.5 * (1 + cos(pi * step / decay_steps)) + alpha)
    """
    if not isinstance(decay_steps, (Tensor, Variable)) and decay_steps <= 0:
        raise ValueError(f"cosine_decay: decay_steps must be positive, got {decay_steps}")
    lr = _float(learning_rate)
    steps = _as(decay_steps, lr.dtype)
    step = ops.minimum(_as(global_step, lr.dtype), steps)
    cosine = 0.5 * (1.0 + ops.cos(math.pi * (step / steps)))
    decayed = (1.0 - _as(alpha, lr.dtype)) * cosine + _as(alpha, lr.dtype)
    return ops.multiply(lr, decayed)


def piecewise_constant(x: TensorLike, boundaries: Sequence[Any], values: Sequence[Any],
                       name: str | None = None) -> Tensor:
    """``values[0]`` while ``x <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < x <= boundaries[i]``, and ``values[-1]`` after the last boundary
    (TF's rule). Boundaries take ``x``'s dtype; values share one dtype (f32 for floats)."""
    if len(values) != len(boundaries) + 1:
        raise ValueError(f"piecewise_constant: {len(boundaries)} boundaries need "
                         f"{len(boundaries) + 1} values, got {len(values)}")
    xt = convert_to_tensor(x)
    if xt.type.rank != 0:
        raise TypeMismatch(f"piecewise_constant: x must be a scalar, got {xt.type}",
                           user_location())
    hint = next((convert_to_tensor(v).dtype for v in values
                 if isinstance(v, (Tensor, Variable))), None)
    vals = [convert_to_tensor(v, None if isinstance(v, (Tensor, Variable)) else hint)
            for v in values]
    if len({v.dtype for v in vals}) > 1:
        shown = ", ".join(str(v.type) for v in vals)
        raise TypeMismatch(f"piecewise_constant: values must share a dtype, got {shown}",
                           user_location())
    out = vals[-1]
    for b, v in reversed(list(zip(boundaries, vals))):
        out = ops.where(ops.less_equal(xt, _as(b, xt.dtype)), v, out)
    return out


__all__ = ["get_global_step", "create_global_step", "get_or_create_global_step",
           "exponential_decay", "cosine_decay", "piecewise_constant"]
