"""Losses and metrics for ``Sequential.compile``, by Keras name, as graph ops.

Each loss maps ``(y_true, y_pred)`` to one value per example; the model averages them
over the batch. Cross-entropies on probabilities take the logits behind them when the
probabilities come straight from a ``softmax`` / ``sigmoid`` op (as Keras does), so a
model ending in ``Dense(10, activation="softmax")`` trains through the numerically stable
fused ops instead of ``log(softmax(...))``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

from tfc.api import nn, ops
from tfc.api.graph import Tensor, user_location
from tfc.api.tensor import convert_to_tensor
from tfc.errors import TfcError, TypeMismatch
from tfc.ir.types import DType

EPSILON = 1e-7  # Keras's backend epsilon: probabilities are clipped to [eps, 1 - eps]


def _logits_behind(y_pred: Tensor, kind: str) -> Tensor | None:
    """The input of the ``kind`` op (``softmax`` on the last axis, ``sigmoid``) that made
    ``y_pred``, or None."""
    op = y_pred.value.op
    if op is None or op.kind != kind:
        return None
    if kind == "softmax" and op.attrs.get("axis", -1) not in (-1, y_pred.type.rank - 1):
        return None
    return Tensor(y_pred.graph, op.inputs[0])


def _clip(p: Tensor) -> Tensor:
    return ops.minimum(ops.maximum(p, EPSILON), 1.0 - EPSILON)


def sparse_categorical_crossentropy(y_true: Tensor, y_pred: Tensor,
                                    from_logits: bool = False) -> Tensor:
    """``-log p[label]`` (``p`` scaled to sum to 1, as Keras); labels are integer class
    ids, ``y_pred`` is ``[..., classes]``."""
    labels = y_true if y_true.dtype == DType.i32 else ops.cast(y_true, DType.i32)
    logits = y_pred if from_logits else _logits_behind(y_pred, "softmax")
    if logits is not None:
        return nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    # Keras's: the softmax cross-entropy of log p, i.e. -log(p[label] / sum(p)) with p
    # clipped to [eps, 1 - eps] (probabilities that do not sum to 1 are scaled, as in
    # categorical_crossentropy); a label outside [0, classes) is an error, as with logits
    return nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                       logits=ops.log(_clip(y_pred)))


def categorical_crossentropy(y_true: Tensor, y_pred: Tensor,
                             from_logits: bool = False) -> Tensor:
    """``-sum(y_true * log p)`` over the last axis, ``p`` = ``y_pred / sum(y_pred)``
    (Keras's); ``y_true`` holds probabilities."""
    logits = y_pred if from_logits else _logits_behind(y_pred, "softmax")
    if logits is not None:
        return nn.softmax_cross_entropy_with_logits(labels=y_true, logits=logits)
    # probabilities are scaled to sum to 1 first, as Keras does (sigmoid outputs, or
    # probabilities whose sum drifted, give Keras's numbers, not an unnormalized log)
    p = y_pred / ops.reduce_sum(y_pred, axis=-1, keepdims=True)
    return -ops.reduce_sum(y_true * ops.log(_clip(p)), axis=-1)


def binary_crossentropy(y_true: Tensor, y_pred: Tensor, from_logits: bool = False) -> Tensor:
    """Mean over the last axis of ``-(y log p + (1 - y) log(1 - p))``."""
    logits = y_pred if from_logits else _logits_behind(y_pred, "sigmoid")
    if logits is not None:
        per = nn.sigmoid_cross_entropy_with_logits(labels=y_true, logits=logits)
    else:
        p = _clip(y_pred)
        per = -(y_true * ops.log(p) + (1.0 - y_true) * ops.log(1.0 - p))
    return ops.reduce_mean(per, axis=-1)


def mean_squared_error(y_true: Tensor, y_pred: Tensor) -> Tensor:
    return ops.reduce_mean(ops.square(y_pred - y_true), axis=-1)


def mean_absolute_error(y_true: Tensor, y_pred: Tensor) -> Tensor:
    return ops.reduce_mean(ops.abs(y_pred - y_true), axis=-1)


def huber(y_true: Tensor, y_pred: Tensor, delta: float = 1.0) -> Tensor:
    """Mean over the last axis of ``0.5 e^2`` where ``|e| <= delta``, else ``delta |e| -
    0.5 delta^2`` (``e = y_pred - y_true``; Keras's ``huber``)."""
    error = y_pred - y_true
    abs_error = ops.abs(error)
    quadratic = 0.5 * ops.square(error)
    linear = delta * abs_error - 0.5 * delta * delta
    return ops.reduce_mean(ops.where(ops.less_equal(abs_error, delta), quadratic, linear),
                           axis=-1)


def kl_divergence(y_true: Tensor, y_pred: Tensor) -> Tensor:
    """``sum(t * log(t / p))`` over the last axis, both clipped to ``[eps, 1]`` (Keras's
    ``kl_divergence``)."""
    t = ops.minimum(ops.maximum(y_true, EPSILON), 1.0)
    p = ops.minimum(ops.maximum(y_pred, EPSILON), 1.0)
    return ops.reduce_sum(t * ops.log(t / p), axis=-1)


def _l2_normalize(x: Tensor, axis: int) -> Tensor:
    """Keras 3's ``normalize``: ``x * min(rsqrt(sum(x^2)), 1 / eps)`` (a zero vector stays
    zero)."""
    inv = ops.rsqrt(ops.reduce_sum(ops.square(x), axis=axis, keepdims=True))
    return x * ops.minimum(inv, 1.0 / EPSILON)


def cosine_similarity(y_true: Tensor, y_pred: Tensor, axis: int = -1) -> Tensor:
    """``-sum(normalize(y_true) * normalize(y_pred))`` along ``axis`` (Keras's loss: -1 for
    vectors pointing the same way, 0 for orthogonal or zero vectors)."""
    return -ops.reduce_sum(_l2_normalize(y_true, axis) * _l2_normalize(y_pred, axis),
                           axis=axis)


def binary_focal_crossentropy(y_true: Tensor, y_pred: Tensor, from_logits: bool = False,
                              gamma: float = 2.0, alpha: float = 0.25,
                              apply_class_balancing: bool = False,
                              label_smoothing: float = 0.0) -> Tensor:
    """Keras's ``binary_focal_crossentropy`` (Lin et al. 2018): the mean over the last axis
    of ``(1 - p_t) ** gamma * bce``, ``p_t = y p + (1 - y)(1 - p)``, times ``alpha`` for
    class 1 and ``1 - alpha`` for class 0 with ``apply_class_balancing``; labels smoothed
    towards 0.5 by ``label_smoothing``. ``bce`` is ``binary_crossentropy``'s per element
    (from the logits behind a sigmoid, as Keras's)."""
    t = ops.cast(y_true, y_pred.dtype) if y_true.dtype != y_pred.dtype else y_true
    if label_smoothing:
        t = t * (1.0 - label_smoothing) + 0.5 * label_smoothing
    p = ops.sigmoid(y_pred) if from_logits else y_pred
    logits = _logits_behind(p, "sigmoid")
    if logits is not None:
        bce = nn.sigmoid_cross_entropy_with_logits(labels=t, logits=logits)
    else:
        clipped = _clip(p)
        bce = -(t * ops.log(clipped) + (1.0 - t) * ops.log(1.0 - clipped))
    p_t = t * p + (1.0 - t) * (1.0 - p)
    focal = ops.pow(1.0 - p_t, gamma) * bce
    if apply_class_balancing:
        focal = (t * alpha + (1.0 - t) * (1.0 - alpha)) * focal
    return ops.reduce_mean(focal, axis=-1)


REDUCTIONS = ("sum_over_batch_size", "mean", "sum", "mean_with_sample_weight", "none", None)


@dataclass(frozen=True)
class Loss:
    """A loss function by name, with ``from_logits`` for the cross-entropies and Keras 3's
    ``reduction``: ``"sum_over_batch_size"`` (or ``"mean"``: the sum of the (weighted)
    per-example losses over their count), ``"sum"``, ``"mean_with_sample_weight"`` (over
    the sum of the sample weights) or ``None`` / ``"none"`` (the per-example losses).
    Called as Keras's: ``loss(y_true, y_pred, sample_weight=None)`` -> the reduced loss;
    ``values`` gives the per-example losses."""

    name: str
    fn: Callable[..., Tensor]
    from_logits: bool | None = None  # None: the loss has no such option
    sparse_labels: bool = False  # labels are class ids (one fewer axis than y_pred)
    reduction: str | None = "sum_over_batch_size"

    def __post_init__(self) -> None:
        if self.reduction not in REDUCTIONS:
            raise TfcError(f"loss '{self.name}': unknown reduction {self.reduction!r} "
                           f"(known: {', '.join(map(str, REDUCTIONS))})")

    def values(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        """The per-example losses."""
        if self.from_logits is None:
            return self.fn(y_true, y_pred)
        return self.fn(y_true, y_pred, from_logits=self.from_logits)

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Tensor:
        """The loss of a batch, reduced by ``reduction`` (Keras 3's ``Loss.__call__``)."""
        y_pred = convert_to_tensor(y_pred)
        return self.reduce(self.values(convert_to_tensor(y_true), y_pred), sample_weight)

    def reduce(self, values: Tensor, sample_weight: Any = None) -> Tensor:
        """Keras 3's ``reduce_weighted_values``: ``values * sample_weight`` (weights cast to
        the values' dtype; a weight of shape ``[N]`` and values ``[N, 1]``, or the other way
        round, are matched by their last axis), then summed and divided by the number of
        values (``sum_over_batch_size``) or by the sum of the weights
        (``mean_with_sample_weight``), or left per example (``none``)."""
        if sample_weight is not None:
            w = ops.cast(convert_to_tensor(sample_weight), values.dtype)
            vr, wr = values.type.rank, w.type.rank
            if vr == wr + 1 and values.type.shape[-1] == 1:
                w = ops.expand_dims(w, -1)
            elif wr == vr + 1 and w.type.shape[-1] == 1:
                w = ops.squeeze(w, [-1])
            elif vr != wr and wr != 0:
                raise TypeMismatch(f"loss '{self.name}': sample weights {w.type} do not "
                                   f"match its per-example losses {values.type}",
                                   user_location())
            values = values * w
        if self.reduction in (None, "none") or values.type.rank == 0:
            return values
        if sample_weight is None and self.reduction != "sum":
            return ops.reduce_mean(values)  # (the sum over the count, as one op)
        total = ops.reduce_sum(values)
        if self.reduction == "sum":
            return total
        if self.reduction == "mean_with_sample_weight" and sample_weight is not None:
            divisor = ops.reduce_sum(w)
        else:
            divisor = ops.cast(ops.size(values), values.dtype)
        zero = ops.equal(divisor, 0.0)  # Keras's divide_no_nan: 0 over no weight
        return ops.where(zero, ops.zeros_like(total),
                         total / ops.where(zero, ops.ones_like(divisor), divisor))


_LOSSES = {
    "sparse_categorical_crossentropy": (sparse_categorical_crossentropy, False, True),
    "categorical_crossentropy": (categorical_crossentropy, False, False),
    "binary_crossentropy": (binary_crossentropy, False, False),
    "mean_squared_error": (mean_squared_error, None, False),
    "mean_absolute_error": (mean_absolute_error, None, False),
    "huber": (huber, None, False),
    "kl_divergence": (kl_divergence, None, False),
    "cosine_similarity": (cosine_similarity, None, False),
    "binary_focal_crossentropy": (binary_focal_crossentropy, False, False),
}
_ALIASES = {"mse": "mean_squared_error", "mae": "mean_absolute_error",
            "kld": "kl_divergence", "kullback_leibler_divergence": "kl_divergence"}


def get_loss(spec: str | Loss | Callable[[Tensor, Tensor], Tensor],
             from_logits: bool = False, reduction: str | None = "sum_over_batch_size"
             ) -> Loss:
    """A ``Loss`` by Keras name (``"sparse_categorical_crossentropy"``, ``"mse"`` ...), a
    ``Loss``, or a function ``(y_true, y_pred) -> per-example losses``."""
    if isinstance(spec, Loss):
        return spec
    if callable(spec):
        return Loss(getattr(spec, "__name__", "loss"), spec, reduction=reduction)
    name = _ALIASES.get(spec, spec)
    if name not in _LOSSES:
        raise TfcError(f"unknown loss '{spec}' (known: {', '.join([*_LOSSES, *_ALIASES])})")
    fn, logits_opt, sparse = _LOSSES[name]
    return Loss(name, fn, None if logits_opt is None else from_logits, sparse, reduction)


def SparseCategoricalCrossentropy(from_logits: bool = False,  # noqa: N802 (Keras)
                                  reduction: str | None = "sum_over_batch_size") -> Loss:
    return get_loss("sparse_categorical_crossentropy", from_logits, reduction)


def CategoricalCrossentropy(from_logits: bool = False,  # noqa: N802
                            reduction: str | None = "sum_over_batch_size") -> Loss:
    return get_loss("categorical_crossentropy", from_logits, reduction)


def BinaryCrossentropy(from_logits: bool = False,  # noqa: N802
                       reduction: str | None = "sum_over_batch_size") -> Loss:
    return get_loss("binary_crossentropy", from_logits, reduction)


def MeanSquaredError(reduction: str | None = "sum_over_batch_size") -> Loss:  # noqa: N802
    return get_loss("mean_squared_error", reduction=reduction)


def MeanAbsoluteError(reduction: str | None = "sum_over_batch_size") -> Loss:  # noqa: N802
    return get_loss("mean_absolute_error", reduction=reduction)


def Huber(delta: float = 1.0,  # noqa: N802
          reduction: str | None = "sum_over_batch_size") -> Loss:
    """Keras's ``Huber``: quadratic within ``delta`` of the target, linear beyond."""
    if not delta >= 0.0:
        raise TfcError(f"Huber: delta must be >= 0, got {delta}")
    return Loss("huber", functools.partial(huber, delta=float(delta)), reduction=reduction)


def KLDivergence(reduction: str | None = "sum_over_batch_size") -> Loss:  # noqa: N802
    return get_loss("kl_divergence", reduction=reduction)


def CosineSimilarity(axis: int = -1,  # noqa: N802
                     reduction: str | None = "sum_over_batch_size") -> Loss:
    return Loss("cosine_similarity", functools.partial(cosine_similarity, axis=int(axis)),
                reduction=reduction)


def BinaryFocalCrossentropy(apply_class_balancing: bool = False,  # noqa: N802
                            alpha: float = 0.25, gamma: float = 2.0,
                            from_logits: bool = False, label_smoothing: float = 0.0,
                            reduction: str | None = "sum_over_batch_size") -> Loss:
    """Keras's ``BinaryFocalCrossentropy`` (``binary_focal_crossentropy``)."""
    if not gamma >= 0.0 or not 0.0 <= alpha <= 1.0 or not 0.0 <= label_smoothing <= 1.0:
        raise TfcError(f"BinaryFocalCrossentropy: gamma must be >= 0 and alpha and "
                       f"label_smoothing in [0, 1], got gamma={gamma}, alpha={alpha}, "
                       f"label_smoothing={label_smoothing}")
    fn = functools.partial(binary_focal_crossentropy, gamma=float(gamma), alpha=float(alpha),
                           apply_class_balancing=bool(apply_class_balancing),
                           label_smoothing=float(label_smoothing))
    return Loss("binary_focal_crossentropy", fn, from_logits, reduction=reduction)


# ---- metrics --------------------------------------------------------------------------

def _mean_f32(x: Tensor) -> Tensor:
    return ops.reduce_mean(ops.cast(x, DType.f32))


def accuracy_for(loss: Loss, y_pred: Tensor) -> Callable[[Tensor, Tensor], Tensor]:
    """What ``"accuracy"`` means for ``loss`` (Keras 2's rule): class ids against the
    argmax for sparse labels, argmax against argmax for one-hot labels, ``p > 0.5`` for a
    single output or a binary cross-entropy (``logit > 0`` on logits). Keras 3 compares
    argmaxes for a binary cross-entropy over several outputs and thresholds logits at 0.5
    too; tfc keeps the accuracy of each label (README, "Numbers against Keras")."""
    if loss.sparse_labels:
        def sparse(y_true: Tensor, y_pred: Tensor) -> Tensor:
            pred = ops.argmax(y_pred, axis=-1, output_type=DType.i32)
            labels = y_true if y_true.dtype == DType.i32 else ops.cast(y_true, DType.i32)
            return _mean_f32(ops.equal(pred, labels))
        return sparse
    if y_pred.shape[-1] == 1 or loss.name == "binary_crossentropy":
        threshold = 0.0 if loss.from_logits else 0.5

        def binary(y_true: Tensor, y_pred: Tensor) -> Tensor:
            pred = ops.cast(ops.greater(y_pred, threshold), y_true.dtype)
            return _mean_f32(ops.equal(pred, y_true))
        return binary

    def categorical(y_true: Tensor, y_pred: Tensor) -> Tensor:
        return _mean_f32(ops.equal(ops.argmax(y_pred, axis=-1, output_type=DType.i32),
                                   ops.argmax(y_true, axis=-1, output_type=DType.i32)))
    return categorical


def get_metric(spec: str | Callable[[Tensor, Tensor], Tensor], loss: Loss, y_pred: Tensor
               ) -> tuple[str, Callable[[Tensor, Tensor], Tensor]]:
    """``(name, fn)`` for a metric: ``"accuracy"`` (``"acc"``), ``"mse"``, ``"mae"``, or a
    function ``(y_true, y_pred) -> scalar`` (named by its ``__name__``)."""
    if callable(spec):
        return getattr(spec, "__name__", "metric"), spec
    if spec in ("accuracy", "acc"):
        return "accuracy", accuracy_for(loss, y_pred)
    name = _ALIASES.get(spec, spec)
    if name in ("mean_squared_error", "mean_absolute_error"):
        fn = mean_squared_error if name == "mean_squared_error" else mean_absolute_error
        return spec, lambda t, p: ops.reduce_mean(fn(t, p))
    raise TfcError(f"unknown metric '{spec}' (known: accuracy, mse, mae, or a function)")

