"""``tfc.metrics``: TF1's streaming metrics (``tf.metrics.accuracy`` ...).

Each metric returns ``(value, update_op)`` and keeps its sums in local variables (the
``LOCAL_VARIABLES`` and ``METRIC_VARIABLES`` collections, float32, named as TF's:
``accuracy/total``, ``accuracy/count``, ``precision/true_positives/count`` ...), which
``tfc.local_variables_initializer()`` resets. ``value`` reads the sums; running
``update_op`` adds a batch to them and returns the metric with that batch included, as
TF's does.

tfc's assigns land at the end of the step and a step reads every variable as it was at
its start, so ``update_op`` is an ``Operation`` (a group of the assigns: usable in
``tf.group`` and ``control_dependencies``) that, fetched, also returns the new value,
computed from the start-of-step sums plus the batch's. Fetching ``value`` and
``update_op`` in the same ``run`` gives the value before the batch (TF leaves that order
undefined).

The arithmetic is TF's: values cast to float32 before they are summed, a mean of
``total / count`` that is 0 while ``count`` is 0 (``div_no_nan``), precision and recall
0 while their denominators are 0.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tfc.api import ops
from tfc.api.graph import Operation, Tensor, Variable
from tfc.api.graph_collections import GraphKeys, add_to_collections
from tfc.api.session import CompositeFetch
from tfc.api.tensor import TensorLike, convert_to_tensor
from tfc.api.variable_scope import variable_scope
from tfc.errors import TypeMismatch
from tfc.ir.types import DType


class MetricUpdate(Operation, CompositeFetch):
    """A metric's ``update_op``: the group of its assigns (an ``Operation``), whose fetch
    also returns the metric's value after the update (``new_value``)."""

    def __init__(self, new_value: Tensor, updates: Sequence[Operation], name: str) -> None:
        super().__init__(new_value.graph, None, list(updates), name=name)
        self.new_value = new_value

    def fetch_tensors(self) -> list[Any]:
        return [self.new_value, self]  # (the session runs an Operation leaf as a target)

    def from_values(self, values: list[Any]) -> Any:
        return values[0]


def _metric_variable(name: str, shape: Sequence[int] = ()) -> Variable:
    """A float32 local variable of zeros (TF's ``metric_variable``)."""
    v = Variable(np.zeros(tuple(shape), np.float32), trainable=False, name=name)
    add_to_collections([GraphKeys.LOCAL_VARIABLES, GraphKeys.METRIC_VARIABLES], v)
    return v


def _div_no_nan(num: Tensor, den: Tensor) -> Tensor:
    """``num / den``, 0 where ``den`` is 0 (``tf.div_no_nan``; the denominators here are
    sums of counts or non-negative weights)."""
    positive = ops.greater(den, 0.0)
    return ops.where(positive, num / ops.where(positive, den, ops.ones_like(den)),
                     ops.zeros_like(num))


def _f32(x: TensorLike) -> Tensor:
    t = convert_to_tensor(x)
    return t if t.dtype == DType.f32 else ops.cast(t, DType.f32)


def _matched(what: str, labels: TensorLike, predictions: TensorLike
             ) -> tuple[Tensor, Tensor]:
    """``labels`` and ``predictions`` of one shape: a trailing axis of size 1 that one of
    them has more is squeezed (TF's ``remove_squeezable_dimensions``)."""
    lab, pred = convert_to_tensor(labels), convert_to_tensor(predictions)
    if pred.type.rank == lab.type.rank + 1 and pred.shape[-1] == 1:
        pred = ops.squeeze(pred, [-1])
    elif lab.type.rank == pred.type.rank + 1 and lab.shape[-1] == 1:
        lab = ops.squeeze(lab, [-1])
    if lab.type.rank != pred.type.rank or any(
            a is not None and b is not None and a != b for a, b in zip(lab.shape, pred.shape)):
        raise TypeMismatch(f"tf.metrics.{what}: labels {lab.type} and predictions "
                           f"{pred.type} must have the same shape")
    return lab, pred


def _weighted(what: str, values: Tensor, weights: TensorLike | None
              ) -> tuple[Tensor, Tensor]:
    """``values * weights`` and the sum of the weights broadcast to ``values`` (float32);
    without weights, ``values`` and their count."""
    if weights is None:
        return values, _f32(ops.size(values))
    w = _f32(weights)
    if w.type.rank > values.type.rank:
        raise TypeMismatch(f"tf.metrics.{what}: weights {w.type} must broadcast to the "
                           f"values {values.type}")
    w = w * ops.ones_like(values)
    return values * w, ops.reduce_sum(w)


def _collect(value: Tensor, update: Operation, metrics_collections: Any,
             updates_collections: Any) -> tuple[Tensor, Operation]:
    if metrics_collections:
        add_to_collections(metrics_collections, value)
    if updates_collections:
        add_to_collections(updates_collections, update)
    return value, update


def mean(values: TensorLike, weights: TensorLike | None = None,
         metrics_collections: Any = None, updates_collections: Any = None,
         name: str | None = None) -> tuple[Tensor, Operation]:
    """The (weighted) mean of every value seen: ``total / count`` (``tf.metrics.mean``)."""
    with variable_scope(name, default_name="mean"):
        v, n = _weighted("mean", _f32(values), weights)
        total, count = _metric_variable("total"), _metric_variable("count")
        batch_total = ops.reduce_sum(v)
        new_total, new_count = total + batch_total, count + n
        update = MetricUpdate(_div_no_nan(new_total, new_count),
                              [ops.assign_add(total, batch_total),
                               ops.assign_add(count, n)], name="update_op")
        return _collect(_div_no_nan(total.value(), count.value()), update,
                        metrics_collections, updates_collections)


def accuracy(labels: TensorLike, predictions: TensorLike, weights: TensorLike | None = None,
             metrics_collections: Any = None, updates_collections: Any = None,
             name: str | None = None) -> tuple[Tensor, Operation]:
    """The fraction of ``predictions`` equal to ``labels`` (``tf.metrics.accuracy``;
    predictions are cast to the labels' dtype first, as TF)."""
    lab, pred = _matched("accuracy", labels, predictions)
    if pred.dtype != lab.dtype:
        pred = ops.cast(pred, lab.dtype)
    correct = ops.cast(ops.equal(pred, lab), DType.f32)
    return mean(correct, weights, metrics_collections, updates_collections,
                name or "accuracy")


def mean_squared_error(labels: TensorLike, predictions: TensorLike,
                       weights: TensorLike | None = None, metrics_collections: Any = None,
                       updates_collections: Any = None, name: str | None = None
                       ) -> tuple[Tensor, Operation]:
    """The mean of ``(labels - predictions) ** 2`` (``tf.metrics.mean_squared_error``:
    squared in the inputs' dtype, then summed in float32)."""
    lab, pred = _matched("mean_squared_error", labels, predictions)
    return mean(ops.square(lab - pred), weights, metrics_collections, updates_collections,
                name or "mean_squared_error")


def mean_absolute_error(labels: TensorLike, predictions: TensorLike,
                        weights: TensorLike | None = None, metrics_collections: Any = None,
                        updates_collections: Any = None, name: str | None = None
                        ) -> tuple[Tensor, Operation]:
    """The mean of ``|predictions - labels|`` (``tf.metrics.mean_absolute_error``)."""
    lab, pred = _matched("mean_absolute_error", labels, predictions)
    return mean(ops.abs(pred - lab), weights, metrics_collections, updates_collections,
                name or "mean_absolute_error")


def _count(condition: Tensor, weights: TensorLike | None, default_name: str
           ) -> tuple[Variable, Tensor, Operation]:
    """A local ``<default_name>/count`` summing the (weighted) true elements of
    ``condition``: the variable, the batch's sum, and the assign adding it (TF's
    ``_count_condition``)."""
    with variable_scope(None, default_name=default_name):
        values = ops.cast(condition, DType.f32)
        if weights is not None:
            values = values * _f32(weights)
        count = _metric_variable("count")
        batch = ops.reduce_sum(values)
        return count, batch, ops.assign_add(count, batch)


def _ratio(what: str, labels: TensorLike, predictions: TensorLike,
           weights: TensorLike | None, name: str | None, other: str,
           metrics_collections: Any, updates_collections: Any
           ) -> tuple[Tensor, Operation]:
    """``tp / (tp + other)``, 0 while the denominator is 0: precision (``other`` the false
    positives) or recall (the false negatives), over labels and predictions cast to bool."""
    lab, pred = _matched(what, labels, predictions)
    lab = lab if lab.dtype == DType.bool else ops.cast(lab, DType.bool)
    pred = pred if pred.dtype == DType.bool else ops.cast(pred, DType.bool)
    with variable_scope(name, default_name=what):
        tp, tp_batch, tp_update = _count(ops.logical_and(lab, pred), weights,
                                         "true_positives")
        if other == "false_positives":
            wrong = ops.logical_and(ops.logical_not(lab), pred)
        else:
            wrong = ops.logical_and(lab, ops.logical_not(pred))
        xx, xx_batch, xx_update = _count(wrong, weights, other)

        def ratio(t: Tensor, x: Tensor) -> Tensor:
            return _div_no_nan(t, t + x)
        update = MetricUpdate(ratio(tp + tp_batch, xx + xx_batch), [tp_update, xx_update],
                              name="update_op")
        return _collect(ratio(tp.value(), xx.value()), update, metrics_collections,
                        updates_collections)


def precision(labels: TensorLike, predictions: TensorLike, weights: TensorLike | None = None,
              metrics_collections: Any = None, updates_collections: Any = None,
              name: str | None = None) -> tuple[Tensor, Operation]:
    """``tp / (tp + fp)`` over every batch seen (``tf.metrics.precision``)."""
    return _ratio("precision", labels, predictions, weights, name, "false_positives",
                  metrics_collections, updates_collections)


def recall(labels: TensorLike, predictions: TensorLike, weights: TensorLike | None = None,
           metrics_collections: Any = None, updates_collections: Any = None,
           name: str | None = None) -> tuple[Tensor, Operation]:
    """``tp / (tp + fn)`` over every batch seen (``tf.metrics.recall``)."""
    return _ratio("recall", labels, predictions, weights, name, "false_negatives",
                  metrics_collections, updates_collections)


def auc(labels: TensorLike, predictions: TensorLike, weights: TensorLike | None = None,
        num_thresholds: int = 200, metrics_collections: Any = None,
        updates_collections: Any = None, curve: str = "ROC", name: str | None = None,
        summation_method: str = "trapezoidal", thresholds: Sequence[float] | None = None
        ) -> tuple[Tensor, Operation]:
    """The area under the ROC (or precision-recall) curve (``tf.metrics.auc``), TF's
    approximation: true/false positive and negative counts at ``num_thresholds``
    thresholds (``-1e-7``, ``i / (num_thresholds - 1)``, ``1 + 1e-7``; a prediction above
    a threshold is positive) kept in four local ``[num_thresholds]`` variables
    (``auc/true_positives`` ...), then a Riemann sum over the curve's points
    (``trapezoidal``, or ``minoring`` / ``majoring``; PR's ``careful_interpolation`` is
    not supported), with TF's ``1e-6`` added to the
    rates' numerators and denominators. Predictions should lie in [0, 1]; TF asserts
    that at run time, tfc does not check it (one outside counts as positive, or
    negative, at every threshold)."""
    if curve not in ("ROC", "PR"):
        raise TypeMismatch(f"tf.metrics.auc: curve must be 'ROC' or 'PR', got {curve!r}")
    method = summation_method
    if method == "careful_interpolation" and curve == "ROC":
        method = "trapezoidal"  # (as TF: the careful interpolation is PR's only)
    if method not in ("trapezoidal", "minoring", "majoring"):
        raise TypeMismatch(f"tf.metrics.auc: summation_method {summation_method!r} is not "
                           f"supported (trapezoidal, minoring, majoring)")
    if thresholds is None:
        if num_thresholds < 2:
            raise TypeMismatch(f"tf.metrics.auc: num_thresholds must be > 1, got "
                               f"{num_thresholds}")
        inner = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
        thresholds = [0.0 - 1e-7] + inner + [1.0 + 1e-7]
    else:
        thresholds = [0.0 - 1e-7] + [float(t) for t in sorted(thresholds)] + [1.0 + 1e-7]
    n = len(thresholds)
    lab, pred = _matched("auc", labels, predictions)
    with variable_scope(name, default_name="auc"):
        pred_col = ops.reshape(_f32(pred), [-1, 1])
        lab_col = ops.reshape(lab if lab.dtype == DType.bool else ops.cast(lab, DType.bool),
                              [-1, 1])
        thresh = np.asarray(thresholds, np.float32).reshape(1, n)
        pred_pos = ops.greater(pred_col, thresh)  # [examples, thresholds]
        w = None if weights is None else ops.reshape(_f32(weights) * ops.ones_like(
            _f32(pred)), [-1, 1])
        counts, updates = [], []
        for var_name, label_is, pred_is in (("true_positives", True, True),
                                            ("false_negatives", True, False),
                                            ("true_negatives", False, False),
                                            ("false_positives", False, True)):
            cond = ops.logical_and(lab_col if label_is else ops.logical_not(lab_col),
                                   pred_pos if pred_is else ops.logical_not(pred_pos))
            hits = ops.cast(cond, DType.f32)
            if w is not None:
                hits = hits * w
            total = _metric_variable(var_name, [n])
            batch = ops.reduce_sum(hits, axis=0)
            counts.append((total, batch))
            updates.append(ops.assign_add(total, batch))

        def area(tp: Tensor, fn: Tensor, tn: Tensor, fp: Tensor) -> Tensor:
            eps = 1.0e-6
            rec = (tp + eps) / (tp + fn + eps)
            if curve == "ROC":
                x, y = fp / (fp + tn + eps), rec
            else:
                x, y = rec, (tp + eps) / (tp + fp + eps)
            dx = x[:n - 1] - x[1:]
            if method == "trapezoidal":
                height = (y[:n - 1] + y[1:]) / 2.0
            elif method == "minoring":
                height = ops.minimum(y[:n - 1], y[1:])
            else:
                height = ops.maximum(y[:n - 1], y[1:])
            return ops.reduce_sum(dx * height)
        update = MetricUpdate(area(*(t + b for t, b in counts)), updates, name="update_op")
        return _collect(area(*(t.value() for t, _ in counts)), update, metrics_collections,
                        updates_collections)


__all__ = ["auc", "mean", "accuracy", "mean_squared_error", "mean_absolute_error", "precision",
           "recall", "MetricUpdate"]
