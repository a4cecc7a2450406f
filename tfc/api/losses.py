"""``tfc.losses``: TF1's ``tf.losses`` (``tf.compat.v1.losses``), built from graph ops.

Each loss is TF1's per-element loss reduced by ``compute_weighted_loss``: multiplied by
``weights`` (a scalar, or a tensor broadcastable to the losses) and, by default
(``Reduction.SUM_BY_NONZERO_WEIGHTS``), summed and divided by the number of elements
whose weight is not zero (0 when there are none).

As in TF1, the weighting and reduction run in float32 whatever the losses' dtype, and the
result is cast back (``losses_impl.compute_weighted_loss``); ``mean_squared_error`` and
``absolute_difference`` cast their inputs to float32 first too. So a float64 program's
``tf.losses`` value carries float32 rounding, exactly as TensorFlow's does. Each loss is
added to the ``LOSSES`` collection (``loss_collection``), which ``get_total_loss`` sums.
"""

from __future__ import annotations

from typing import Any

from tfc.api import ops
from tfc.api.gradients import stop_gradient
from tfc.api.graph import Tensor, Variable, user_location
from tfc.api.graph_collections import GraphKeys, add_to_collection, get_collection
from tfc.api.tensor import TensorLike, convert_to_tensor
from tfc.errors import TfcError, TypeMismatch
from tfc.ir.types import DType


class Reduction:
    """How ``compute_weighted_loss`` reduces the weighted losses (``tf.losses.Reduction``)."""
    NONE = "none"
    SUM = "weighted_sum"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    MEAN = "weighted_mean"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls) -> tuple[str, ...]:
        return (cls.NONE, cls.SUM, cls.SUM_OVER_BATCH_SIZE, cls.MEAN,
                cls.SUM_BY_NONZERO_WEIGHTS)


def _safe_div(total: Tensor, count: Tensor) -> Tensor:
    """``total / count``, 0 where ``count`` is 0 (TF's ``div_no_nan``), with a gradient
    that stays finite there."""
    zero = ops.equal(count, 0.0)
    return ops.where(zero, ops.zeros_like(total),
                     total / ops.where(zero, ops.ones_like(count), count))


def compute_weighted_loss(losses: TensorLike, weights: TensorLike = 1.0, scope: Any = None,
                          loss_collection: Any = GraphKeys.LOSSES,
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``losses * weights`` reduced by ``reduction`` (see the module docstring), added to
    ``loss_collection`` (None: to none) as TF1 does."""
    if reduction not in Reduction.all():
        raise TfcError(f"compute_weighted_loss: unknown reduction {reduction!r}",
                       user_location())
    if weights is None:
        raise TfcError("compute_weighted_loss: weights must not be None", user_location())
    raw = convert_to_tensor(losses)
    if not raw.dtype.is_float:
        raise TypeMismatch(f"losses must be float, got {raw.type}", user_location())
    x = ops.cast(raw, DType.f32)
    w = ops.cast(convert_to_tensor(weights, None if isinstance(weights, (Tensor, Variable))
                                   else DType.f32), DType.f32)
    weighted = x * w
    if reduction == Reduction.NONE:
        loss = weighted
    else:
        loss = ops.reduce_sum(weighted)
        if reduction == Reduction.MEAN:
            loss = _safe_div(loss, ops.reduce_sum(ops.ones_like(x) * w))
        elif reduction == Reduction.SUM_BY_NONZERO_WEIGHTS:
            if isinstance(weights, float) and weights != 0.0:
                present = ops.cast(ops.size(x), DType.f32)
            else:
                nonzero = ops.where(ops.equal(w, 0.0), ops.zeros_like(w), ops.ones_like(w))
                present = ops.reduce_sum(nonzero * ops.ones_like(x))
            loss = _safe_div(loss, present)
        elif reduction == Reduction.SUM_OVER_BATCH_SIZE:
            loss = _safe_div(loss, ops.cast(ops.size(x), DType.f32))
    out = ops.cast(loss, raw.dtype)
    if loss_collection is not None:
        add_to_collection(loss_collection, out)
    return out


def get_losses(scope: str | None = None, loss_collection: str = GraphKeys.LOSSES
               ) -> list[Tensor]:
    """The losses the ``tfc.losses`` functions (and ``add_loss``) made."""
    return get_collection(loss_collection, scope)


def add_loss(loss: Tensor, loss_collection: str = GraphKeys.LOSSES) -> None:
    if loss_collection is not None:
        add_to_collection(loss_collection, loss)


def get_regularization_losses(scope: str | None = None) -> list[Tensor]:
    return get_collection(GraphKeys.REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope: str | None = None, name: str = "total_regularization_loss"
                            ) -> Tensor:
    """The sum of the regularization losses (0.0 when there are none)."""
    regs = get_regularization_losses(scope)
    return ops.add_n(regs) if regs else convert_to_tensor(0.0)


def get_total_loss(add_regularization_losses: bool = True, name: str = "total_loss",
                   scope: str | None = None) -> Tensor:
    """The sum of ``get_losses()`` (and of the regularization losses); an error when
    there are none, as in TF1."""
    parts = get_losses(scope) + (get_regularization_losses(scope)
                                 if add_regularization_losses else [])
    if not parts:
        raise TfcError("get_total_loss: no losses in the LOSSES (or regularization) "
                       "collections", user_location())
    return ops.add_n(parts)


def _as_f32_pair(labels: TensorLike, predictions: TensorLike, what: str
                 ) -> tuple[Tensor, Tensor]:
    if labels is None or predictions is None:
        raise TfcError(f"{what}: labels and predictions must not be None", user_location())
    p = ops.cast(convert_to_tensor(predictions), DType.f32)
    lab = ops.cast(convert_to_tensor(labels), DType.f32)
    return lab, p


def mean_squared_error(labels: TensorLike, predictions: TensorLike,
                       weights: TensorLike = 1.0, scope: Any = None,
                       loss_collection: Any = GraphKeys.LOSSES,
                       reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``(predictions - labels) ** 2``, weighted and reduced (in float32, as TF1)."""
    lab, p = _as_f32_pair(labels, predictions, "mean_squared_error")
    return compute_weighted_loss(ops.square(p - lab), weights, loss_collection=loss_collection,
                                 reduction=reduction)


def absolute_difference(labels: TensorLike, predictions: TensorLike,
                        weights: TensorLike = 1.0, scope: Any = None,
                        loss_collection: Any = GraphKeys.LOSSES,
                        reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``|predictions - labels|``, weighted and reduced (in float32, as TF1)."""
    lab, p = _as_f32_pair(labels, predictions, "absolute_difference")
    return compute_weighted_loss(ops.abs(p - lab), weights, loss_collection=loss_collection,
                                 reduction=reduction)


def softmax_cross_entropy(onehot_labels: TensorLike, logits: TensorLike,
                          weights: TensorLike = 1.0, label_smoothing: float = 0,
                          scope: Any = None, loss_collection: Any = GraphKeys.LOSSES,
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """Softmax cross entropy per example (labels smoothed towards uniform by
    ``label_smoothing``; no gradient into the labels), weighted and reduced."""
    from tfc.api import nn
    z = convert_to_tensor(logits)
    lab = ops.cast(convert_to_tensor(onehot_labels), z.dtype)
    if label_smoothing > 0:
        classes = z.type.shape[-1]
        if not isinstance(classes, int):
            raise TfcError("softmax_cross_entropy: label_smoothing needs a static number "
                           "of classes", user_location())
        lab = lab * (1.0 - label_smoothing) + label_smoothing / classes
    per_example = nn.softmax_cross_entropy_with_logits_v2(labels=stop_gradient(lab),
                                                          logits=z)
    return compute_weighted_loss(per_example, weights, loss_collection=loss_collection,
                                 reduction=reduction)


def sparse_softmax_cross_entropy(labels: TensorLike, logits: TensorLike,
                                 weights: TensorLike = 1.0, scope: Any = None,
                                 loss_collection: Any = GraphKeys.LOSSES,
                                 reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS
                                 ) -> Tensor:
    """Softmax cross entropy of integer class ids per example, weighted and reduced;
    labels of shape ``[batch, 1]`` are squeezed to ``[batch]`` (as TF1)."""
    from tfc.api import nn
    z = convert_to_tensor(logits)
    lab = convert_to_tensor(labels) if isinstance(labels, (Tensor, Variable)) else \
        convert_to_tensor(labels, DType.i32)
    if lab.type.rank == z.type.rank and lab.type.rank > 0 and lab.type.shape[-1] == 1:
        lab = ops.squeeze(lab, [-1])
    per_example = nn.sparse_softmax_cross_entropy_with_logits(labels=lab, logits=z)
    return compute_weighted_loss(per_example, weights, loss_collection=loss_collection,
                                 reduction=reduction)


def sigmoid_cross_entropy(multi_class_labels: TensorLike, logits: TensorLike,
                          weights: TensorLike = 1.0, label_smoothing: float = 0,
                          scope: Any = None, loss_collection: Any = GraphKeys.LOSSES,
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """Sigmoid cross entropy per element (labels smoothed towards 1/2 by
    ``label_smoothing``), weighted and reduced."""
    from tfc.api import nn
    z = convert_to_tensor(logits)
    lab = ops.cast(convert_to_tensor(multi_class_labels), z.dtype)
    if label_smoothing > 0:
        lab = lab * (1 - label_smoothing) + 0.5 * label_smoothing
    per_element = nn.sigmoid_cross_entropy_with_logits(labels=lab, logits=z)
    return compute_weighted_loss(per_element, weights, loss_collection=loss_collection,
                                 reduction=reduction)


__all__ = ["Reduction", "compute_weighted_loss", "get_losses", "add_loss",
           "get_regularization_losses", "get_regularization_loss", "get_total_loss",
           "mean_squared_error", "absolute_difference", "softmax_cross_entropy",
           "sparse_softmax_cross_entropy", "sigmoid_cross_entropy"]
