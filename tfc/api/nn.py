"""``tfc.nn``: neural-network ops with TensorFlow's names and keyword conventions."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tfc.api.graph import Tensor, Variable
from tfc.api.ops import sigmoid, tanh  # noqa: F401  (tf.nn.sigmoid, tf.nn.tanh)
from tfc.api.array_ops import top_k  # noqa: F401  (tf.nn.top_k; array24)
from tfc.api.tensor import TensorLike, apply, convert_to_tensor
from tfc.errors import TypeMismatch
from tfc.ir.types import DType

# The public names (TF's tf.nn ones): ``from tfc.nn import *`` and ``dir(tfc.nn)`` give
# these, not the helpers this module imports (np, DType, Tensor, apply ...). A new tf.nn
# function goes in this list too (tests/api/test_nn_namespace.py checks that it does).
__all__ = [
    "avg_pool", "avg_pool2d", "batch_normalization", "bias_add", "conv1d", "conv2d",
    "conv2d_transpose", "depthwise_conv2d", "dropout", "elu", "embedding_lookup", "gelu",
    "in_top_k", "l2_loss", "l2_normalize", "leaky_relu", "local_response_normalization",
    "log_poisson_loss", "log_softmax", "lrn", "max_pool", "max_pool2d", "moments",
    "nce_loss", "normalize_moments", "relu", "relu6", "sampled_softmax_loss", "selu",
    "separable_conv2d", "sigmoid", "sigmoid_cross_entropy_with_logits", "silu", "softmax",
    "softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits_v2",
    "softplus", "softsign", "sparse_softmax_cross_entropy_with_logits",
    "sufficient_statistics", "swish", "tanh", "top_k",
    "weighted_cross_entropy_with_logits", "xw_plus_b",
]


def __dir__() -> list[str]:
    return sorted(__all__)


def relu(x: TensorLike, name: str | None = None) -> Tensor:
    return apply("relu", x, name=name)


def softplus(features: TensorLike, name: str | None = None) -> Tensor:
    """``log(1 + e^x)`` (``tf.nn.softplus``), computed as ``max(x, 0) + log1p(e^-|x|)``:
    exact for large |x| and no overflow (registry op ``softplus``); the gradient is
    ``sigmoid(x)`` (0.5 at 0, where the composition's max would give 1). Within 2.76 ulps
    of the exact value (llvm f32, measured on dense sweeps); TensorFlow returns e^x below
    ``log(eps) + 2`` (-13.9 in f32), dropping the -e^2x/2 term: up to ~7 ulps off there."""
    return apply("softplus", features, name=name)


def leaky_relu(features: TensorLike, alpha: float = 0.2, name: str | None = None) -> Tensor:
    """``x`` where ``x > 0``, else ``alpha * x`` (``tf.nn.leaky_relu``; the gradient is
    ``alpha`` at 0, as TensorFlow's ``LeakyReluGrad``). ``alpha`` is rounded to float32
    first: it is a float attr of TensorFlow's op, so float64 inputs see ``float32(0.2)``."""
    from tfc.api import ops
    x = convert_to_tensor(features)
    return ops.where(x > 0.0, x, x * float(np.float32(alpha)))


def relu6(features: TensorLike, name: str | None = None) -> Tensor:
    """``min(max(x, 0), 6)`` (``tf.nn.relu6``); the gradient flows where ``0 < x < 6``, as
    TensorFlow's ``Relu6Grad``, and NaN stays NaN."""
    from tfc.api import ops
    x = convert_to_tensor(features)
    zero = ops.zeros_like(x)
    return ops.where(x <= 0.0, zero, ops.where(x >= 6.0, zero + 6.0, x))


def elu(features: TensorLike, name: str | None = None) -> Tensor:
    """``x`` where ``x >= 0``, else ``exp(x) - 1`` (``tf.nn.elu``, which computes
    ``exp(x) - 1`` too, not ``expm1``). The exponent is clamped at 0 so that the branch
    not taken cannot overflow into a NaN gradient."""
    from tfc.api import ops
    x = convert_to_tensor(features)
    return ops.where(x < 0.0, ops.exp(ops.minimum(x, 0.0)) - 1.0, x)


def selu(features: TensorLike, name: str | None = None) -> Tensor:
    """``scale * elu(x, alpha)`` with TensorFlow's constants (``tf.nn.selu``)."""
    from tfc.api import ops
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    x = convert_to_tensor(features)
    neg = (ops.exp(ops.minimum(x, 0.0)) - 1.0) * (scale * alpha)
    return ops.where(x < 0.0, neg, x * scale)


def softsign(features: TensorLike, name: str | None = None) -> Tensor:
    """``x / (1 + |x|)`` (``tf.nn.softsign``)."""
    from tfc.api import ops
    x = convert_to_tensor(features)
    return x / (ops.abs(x) + 1.0)


def l2_normalize(x: TensorLike, axis: int | Sequence[int] | None = None,
                 epsilon: float = 1e-12, name: str | None = None, dim: int | None = None
                 ) -> Tensor:
    """``x * rsqrt(max(sum(x ** 2, axis), epsilon))`` (``tf.nn.l2_normalize``, TF's
    formula; ``dim`` is TF1's older name of ``axis``)."""
    from tfc.api import ops
    t = convert_to_tensor(x)
    square_sum = ops.reduce_sum(ops.square(t), axis if dim is None else dim, keepdims=True)
    return t * ops.rsqrt(ops.maximum(square_sum, epsilon))


def xw_plus_b(x: TensorLike, weights: TensorLike, biases: TensorLike,
              name: str | None = None) -> Tensor:
    """``matmul(x, weights) + biases`` (``tf.nn.xw_plus_b``)."""
    from tfc.api import ops
    return bias_add(ops.matmul(x, weights), biases)


def dropout(x: TensorLike, rate: TensorLike | None = None, seed: int | None = None, *,
            keep_prob: TensorLike | None = None) -> Tensor:
    """Zero each element with probability ``rate`` and scale the rest by ``1 / (1 - rate)``
    (``tf.nn.dropout``). The mask is fresh each step: ``random.uniform_like`` draws from
    the seed and the step number, shaped like the (possibly symbolic-batch) input.

    The second argument is TF2's ``rate``, the probability to drop; TF1 code passes
    ``keep_prob=`` (the probability to keep: ``rate = 1 - keep_prob``), as
    ``tf.compat.v1.nn.dropout`` takes it. Beware TF1's positional ``dropout(x, 0.9)``,
    which meant keep 90%: here it drops 90%.

    ``rate`` or ``keep_prob`` may be a scalar tensor (TF1's ``keep_prob`` placeholder, fed
    1.0 to evaluate): its value is then checked by neither side, as in TensorFlow."""
    from tfc.api import ops
    from tfc.errors import TypeMismatch
    if (rate is None) == (keep_prob is None):
        raise TypeMismatch("dropout: give rate (the probability to drop) or keep_prob "
                           "(TF1's probability to keep), one of them")
    if isinstance(rate, (Tensor, Variable)) or isinstance(keep_prob, (Tensor, Variable)):
        return _dropout_fed(x, rate, keep_prob, seed)
    if keep_prob is not None:
        if not 0.0 < keep_prob <= 1.0:
            raise TypeMismatch(f"dropout: keep_prob must be in (0, 1], got {keep_prob}")
        rate = 1.0 - keep_prob
    assert rate is not None
    x = convert_to_tensor(x)
    if not 0.0 <= rate < 1.0:
        raise TypeMismatch(f"dropout: rate must be in [0, 1), got {rate}")
    if not x.dtype.is_float:
        raise TypeMismatch(f"dropout takes float inputs, got {x.type}")
    if rate == 0.0:
        return x
    u = apply("random.uniform_like", x, dtype=x.dtype, seed=x.graph.next_seed(seed))
    keep = ops.cast(ops.greater_equal(u, rate), x.dtype)
    return x * (keep * (1.0 / (1.0 - rate)))


def _dropout_fed(x: TensorLike, rate: TensorLike | None, keep_prob: TensorLike | None,
                 seed: int | None) -> Tensor:
    """``dropout`` with the probability a scalar tensor: keep where ``u >= rate`` and scale
    by ``1 / (1 - rate)`` (with ``rate = 1 - keep_prob``, TF1's arithmetic)."""
    from tfc.api import ops
    t = convert_to_tensor(x)
    if not t.dtype.is_float:
        raise TypeMismatch(f"dropout takes float inputs, got {t.type}")
    p = convert_to_tensor(rate if keep_prob is None else keep_prob)
    if p.type.rank != 0 or p.dtype != t.dtype:
        raise TypeMismatch(f"dropout: a tensor {'rate' if keep_prob is None else 'keep_prob'}"
                           f" must be a scalar of the input's dtype {t.dtype}, got {p.type}")
    r = p if keep_prob is None else 1.0 - p
    scale = 1.0 / (1.0 - r)
    u = apply("random.uniform_like", t, dtype=t.dtype, seed=t.graph.next_seed(seed))
    keep = ops.cast(ops.greater_equal(u, r), t.dtype)
    return t * (keep * scale)


def softmax(logits: TensorLike, axis: int | None = -1, name: str | None = None,
            dim: int | None = None) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis`` (``tf.nn.softmax``: None, TF2's default,
    is the last axis; ``dim`` is TF1's older name)."""
    return apply("softmax", logits, axis=_softmax_axis(axis, dim), name=name)


def log_softmax(logits: TensorLike, axis: int | None = -1, name: str | None = None,
                dim: int | None = None) -> Tensor:
    """``x - log(sum(exp(x)))`` along ``axis`` (as ``softmax``: None is -1, ``dim``
    TF1's name)."""
    return apply("log_softmax", logits, axis=_softmax_axis(axis, dim), name=name)


def _softmax_axis(axis: int | None, dim: int | None) -> int:
    if dim is not None:
        if axis not in (None, -1, dim):
            raise _nn_error(f"softmax: give axis ({axis}) or dim ({dim}), not both")
        return dim
    return -1 if axis is None else axis


def softmax_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike,
                                      axis: int = -1) -> Tensor:
    return apply("softmax_cross_entropy", logits, labels, axis=axis)


def softmax_cross_entropy_with_logits_v2(labels: TensorLike, logits: TensorLike,
                                         axis: int = -1) -> Tensor:
    """TF1's ``_v2``: softmax cross entropy with gradients into the labels too. tfc's
    ``softmax_cross_entropy_with_logits`` is TF2's, which is this one; TF1's un-suffixed
    op stopped the labels' gradient (README differences)."""
    return softmax_cross_entropy_with_logits(labels=labels, logits=logits, axis=axis)


def l2_loss(t: TensorLike, name: str | None = None) -> Tensor:
    """``sum(t ** 2) / 2`` (``tf.nn.l2_loss``), a weight-decay penalty."""
    from tfc.api import ops
    x = convert_to_tensor(t)
    return ops.multiply(ops.reduce_sum(ops.square(x)), 0.5)


def moments(x: TensorLike, axes: Sequence[int], shift: TensorLike | None = None,
            keepdims: bool = False, name: str | None = None,
            keep_dims: bool | None = None) -> tuple[Tensor, Tensor]:
    """The mean and (biased) variance of ``x`` over ``axes`` (``tf.nn.moments``): the
    variance is ``mean(square(x - stop_gradient(mean)))``, TensorFlow's own formula, so
    both values and gradients agree with it. ``shift`` is unused, as in TensorFlow."""
    from tfc.api import ops
    from tfc.api.gradients import stop_gradient
    keep = keepdims if keep_dims is None else keep_dims
    t = convert_to_tensor(x)
    mean = ops.reduce_mean(t, axes, keepdims=True)
    variance = ops.reduce_mean(ops.square(t - stop_gradient(mean)), axes, keepdims=True)
    if not keep:
        mean, variance = ops.squeeze(mean, axes), ops.squeeze(variance, axes)
    return mean, variance


def batch_normalization(x: TensorLike, mean: TensorLike, variance: TensorLike,
                        offset: TensorLike | None, scale: TensorLike | None,
                        variance_epsilon: float, name: str | None = None) -> Tensor:
    """``(x - mean) * scale / sqrt(variance + eps) + offset`` (``tf.nn.batch_normalization``),
    in TensorFlow's order: ``x * inv + (offset - mean * inv)`` with ``inv = rsqrt(variance +
    eps) * scale``."""
    from tfc.api import ops
    inv = ops.rsqrt(convert_to_tensor(variance) + variance_epsilon)
    if scale is not None:
        inv = inv * scale
    shift = -(convert_to_tensor(mean) * inv) if offset is None else offset - mean * inv
    return convert_to_tensor(x) * inv + shift


def embedding_lookup(params: TensorLike, ids: TensorLike, partition_strategy: str = "mod",
                     name: str | None = None, max_norm: float | None = None) -> Tensor:
    """Rows ``ids`` of ``params`` (``tf.nn.embedding_lookup`` of one tensor or variable:
    ``tfc.gather`` on axis 0, so a variable's gradient is an ``IndexedSlices``). A
    partitioned variable (``tfc.PartitionedVariable``) gathers across its shards."""
    from tfc.api import ops
    if isinstance(params, (list, tuple)):
        if len(params) != 1:
            raise TypeMismatch("embedding_lookup: a list of several shards is not supported; "
                               "use a tfc.PartitionedVariable (tfc.fixed_size_partitioner)")
        params = params[0]
    if max_norm is not None:
        raise TypeMismatch("embedding_lookup: max_norm is not supported")
    return ops.gather(params, ids)


def sparse_softmax_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike
                                             ) -> Tensor:
    lab = labels if isinstance(labels, Tensor) else convert_to_tensor(labels, DType.i32)
    return apply("sparse_softmax_cross_entropy", logits, lab)


def sigmoid_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike) -> Tensor:
    return apply("sigmoid_cross_entropy", logits, labels)


def bias_add(value: TensorLike, bias: TensorLike, data_format: str = "NHWC") -> Tensor:
    return apply("bias_add", value, bias, data_format=data_format)


def _pair(v: int | Sequence[int]) -> tuple[int, ...]:
    return (int(v), int(v)) if isinstance(v, int) else tuple(int(x) for x in v)


def conv2d(input: TensorLike, filters: TensorLike, strides: int | Sequence[int] = 1,  # noqa: A002
           padding: str = "VALID", dilations: int | Sequence[int] = 1,
           name: str | None = None) -> Tensor:
    """NHWC input, HWIO filters (TensorFlow's layouts)."""
    return apply("conv2d", input, filters, strides=_pair(strides), padding=padding,
                 dilations=_pair(dilations), name=name)


def max_pool2d(input: TensorLike, ksize: int | Sequence[int],  # noqa: A002
               strides: int | Sequence[int] | None = None, padding: str = "VALID") -> Tensor:
    return apply("max_pool", input, ksize=_pool_window(ksize),
                 strides=None if strides is None else _pool_window(strides), padding=padding)


def avg_pool2d(input: TensorLike, ksize: int | Sequence[int],  # noqa: A002
               strides: int | Sequence[int] | None = None, padding: str = "VALID") -> Tensor:
    return apply("avg_pool", input, ksize=_pool_window(ksize),
                 strides=None if strides is None else _pool_window(strides), padding=padding)


def _pool_window(v: int | Sequence[int]) -> tuple[int, ...]:
    """2 ints, or TensorFlow's 4 (``[1, h, w, 1]``)."""
    t = _pair(v)
    return t[1:3] if len(t) == 4 else t


max_pool = max_pool2d
avg_pool = avg_pool2d


def sampled_softmax_loss(weights: TensorLike, biases: TensorLike, labels: TensorLike,
                         inputs: TensorLike, num_sampled: int, num_classes: int,
                         num_true: int = 1,
                         sampled_values: tuple[TensorLike, TensorLike, TensorLike] | None = None,
                         remove_accidental_hits: bool = True, seed: int | None = None,
                         name: str | None = None) -> Tensor:
    """The softmax cross entropy over the true classes and ``num_sampled`` sampled ones
    (``tf.nn.sampled_softmax_loss``, Jean et al. 2015): a per-example loss ``[batch]``
    that costs ``num_sampled + num_true`` rows of ``weights`` instead of all
    ``num_classes``. TF's ``_compute_sampled_logits``, step for step:

    - classes from ``tfc.random.log_uniform_candidate_sampler`` (with replacement: see
      there) unless ``sampled_values`` gives them;
    - the rows of ``weights`` [num_classes, dim] and ``biases`` [num_classes] for the
      true and sampled classes, in one ``tfc.gather`` each (of a partitioned variable:
      each shard is asked for those ids only, ``tfc.api.partitioned``);
    - true logits ``<inputs, w_true> + b_true``, sampled logits ``inputs @ w_s.T + b_s``;
      with ``remove_accidental_hits`` a sampled class equal to one of the example's true
      classes gets ``-FLT_MAX`` added (TF's ``compute_accidental_hits`` weight);
    - both minus ``log(expected count)`` (``subtract_log_q``), then softmax cross
      entropy against labels ``1 / num_true`` for the true classes, 0 for the sampled.
    """
    logits, targets = _sampled_logits("sampled_softmax_loss", weights, biases, labels, inputs,
                                      num_sampled, num_classes, num_true, sampled_values,
                                      remove_accidental_hits, seed)
    return softmax_cross_entropy_with_logits(labels=targets, logits=logits)


def nce_loss(weights: TensorLike, biases: TensorLike, labels: TensorLike,
             inputs: TensorLike, num_sampled: int, num_classes: int, num_true: int = 1,
             sampled_values: tuple[TensorLike, TensorLike, TensorLike] | None = None,
             remove_accidental_hits: bool = False, partition_strategy: str = "mod",
             name: str = "nce_loss", seed: int | None = None) -> Tensor:
    """Noise-contrastive estimation (``tf.nn.nce_loss``, Gutmann & Hyvarinen 2010): the
    logits of ``sampled_softmax_loss`` (the same rows, ``log(expected count)`` subtracted,
    accidental hits removed only when asked: TF's default here is False), each a logistic
    regression, true classes against ``1 / num_true``, sampled ones against 0; the
    per-example loss ``[batch]`` is the sum of those sigmoid cross entropies. A seeded
    sampler draws other classes than TF's: give ``sampled_values`` to compare numbers.
    ``partition_strategy`` is checked and unused: a ``tfc.PartitionedVariable`` gathers
    its logical rows (as ``embedding_lookup``)."""
    if partition_strategy not in ("mod", "div"):
        raise TypeMismatch(f"nce_loss: partition_strategy must be 'mod' or 'div', got "
                           f"{partition_strategy!r}")
    logits, targets = _sampled_logits("nce_loss", weights, biases, labels, inputs,
                                      num_sampled, num_classes, num_true, sampled_values,
                                      remove_accidental_hits, seed)
    from tfc.api import ops
    return ops.reduce_sum(sigmoid_cross_entropy_with_logits(labels=targets, logits=logits),
                          axis=1)


def _sampled_logits(what: str, weights: TensorLike, biases: TensorLike, labels: TensorLike,
                    inputs: TensorLike, num_sampled: int, num_classes: int, num_true: int,
                    sampled_values: tuple[TensorLike, TensorLike, TensorLike] | None,
                    remove_accidental_hits: bool, seed: int | None
                    ) -> tuple[Tensor, Tensor]:
    """The logits [batch, num_true + num_sampled] of the true then the sampled classes and
    their targets (``1 / num_true``, then 0): TF's ``_compute_sampled_logits`` with
    ``subtract_log_q`` (see ``sampled_softmax_loss``)."""
    from tfc.api import ops
    from tfc.api.random import log_uniform_candidate_sampler
    from tfc.errors import TypeMismatch
    x = convert_to_tensor(inputs)
    lab = labels if isinstance(labels, Tensor) else convert_to_tensor(labels, DType.i64)
    if not x.dtype.is_float or x.type.rank != 2:
        raise TypeMismatch(f"{what}: inputs must be float [batch, dim], got "
                           f"{x.type}")
    if not lab.dtype.is_int or lab.type.rank != 2 or lab.shape[1] != num_true:
        raise TypeMismatch(f"{what}: labels must be integers of shape "
                           f"[batch, {num_true}], got {lab.type}")
    if sampled_values is None:
        sampled_values = log_uniform_candidate_sampler(lab, num_true, num_sampled, False,
                                                       num_classes, seed)
    sampled, true_count, sampled_count = (convert_to_tensor(v) for v in sampled_values)
    sampled = ops.cast(sampled, lab.dtype) if sampled.dtype != lab.dtype else sampled
    if sampled.shape != (num_sampled,):
        raise TypeMismatch(f"{what}: sampled candidates must have shape "
                           f"[{num_sampled}], got {sampled.type}")
    flat_labels = ops.reshape(lab, [-1])
    all_ids = ops.concat([sampled, flat_labels], axis=0)  # the sampled first: a static cut
    all_w = ops.gather(weights, all_ids)
    dim = all_w.shape[1]
    if all_w.type.rank != 2 or dim is None or x.shape[1] not in (dim, None):
        raise TypeMismatch(f"{what}: weights must be [num_classes, dim] with a "
                           f"static dim matching inputs {x.type}, got rows {all_w.type}")
    all_b = ops.gather(biases, all_ids)
    true_w, sampled_w = _split_rows(all_w, num_sampled)
    true_b, sampled_b = _split_rows(all_b, num_sampled)
    true_w = ops.reshape(true_w, [-1, num_true, dim])
    true_logits = ops.reduce_sum(ops.expand_dims(x, 1) * true_w, axis=2) + ops.reshape(
        true_b, [-1, num_true])
    sampled_logits = ops.matmul(x, sampled_w, transpose_b=True) + sampled_b
    if remove_accidental_hits:
        hits = ops.reduce_max(ops.cast(ops.equal(ops.expand_dims(lab, 2), ops.reshape(
            sampled, [1, 1, num_sampled])), x.dtype), axis=1)
        sampled_logits = sampled_logits + hits * float(-np.finfo(np.float32).max)
    true_logits = true_logits - ops.log(ops.cast(true_count, x.dtype))
    sampled_logits = sampled_logits - ops.log(ops.cast(sampled_count, x.dtype))
    logits = ops.concat([true_logits, sampled_logits], axis=1)
    targets = ops.concat([ops.ones_like(true_logits) * (1.0 / num_true),
                          ops.zeros_like(sampled_logits)], axis=1)
    return logits, targets


def _split_rows(x: Tensor, head: int) -> tuple[Tensor, Tensor]:
    """``x`` cut on axis 0 after its first ``head`` rows, as (rest, head): the rest may be
    batch-sized (a symbolic axis, whose gradient supports ``[k:]`` slices and gathers)."""
    from tfc.api import ops
    first = ops.gather(x, np.arange(head, dtype=np.int32))
    return x[head:], first


def gelu(features: TensorLike, approximate: bool = False, name: str | None = None) -> Tensor:
    """The Gaussian error linear unit (``tf.nn.gelu``): ``x P(X <= x)`` for a standard
    normal X, as TF 2.21 computes it: ``0.5 x erfc(-x / sqrt(2))`` (no cancellation for
    negative x, where ``1 + erf`` would lose the digits), or with ``approximate`` the
    tanh form ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``. The constants are
    rounded to the input's dtype; TF rounds 1/sqrt(2) and 0.044715 to float32 first even
    for float64 (a 2e-8 relative difference there; JAX and PyTorch use them exactly)."""
    from tfc.api.ops import erfc
    x = convert_to_tensor(features)
    if approximate:
        inner = (x + x * x * x * 0.044715) * 0.7978845608028654
        out = x * 0.5 * (tanh(inner) + 1.0)
    else:
        out = x * 0.5 * erfc(-x * 0.7071067811865476)
    return apply("identity", out, name=name) if name else out


# ---- conv25: the other convolutions (composites in tfc.api.nn_conv) ---------------------
from tfc.api.nn_conv import (conv1d, conv2d_transpose, depthwise_conv2d,  # noqa: E402,F401
                             separable_conv2d)
# ---- linalg25: swish, in_top_k, weighted and Poisson losses, LRN, sufficient statistics --

def _nn_error(msg: str) -> TypeMismatch:
    from tfc.api.graph import user_location
    return TypeMismatch(msg, user_location())


def swish(features: TensorLike, beta: float = 1.0) -> Tensor:
    """``x * sigmoid(beta * x)`` (``tf.nn.swish``, also ``silu``): TF's forward formula;
    its gradient (TF's custom one recomputes the sigmoid to save memory) is the same
    function's derivative, ``s + beta x s (1 - s)``."""
    from tfc.api import ops
    x = convert_to_tensor(features)
    if not x.dtype.is_float:
        raise _nn_error(f"swish takes float tensors, got {x.type}")
    b = convert_to_tensor(beta) if isinstance(beta, (Tensor, Variable)) else None
    if b is not None:
        b = b if b.dtype == x.dtype else ops.cast(b, x.dtype)
        return x * ops.sigmoid(b * x)
    return x * ops.sigmoid(x * float(beta)) if float(beta) != 1.0 else x * ops.sigmoid(x)


silu = swish


def in_top_k(predictions: TensorLike, targets: TensorLike, k: int,
             name: str | None = None) -> Tensor:
    """Whether each example's target class is among its ``k`` largest predictions, ties
    counting in (``tf.nn.in_top_k``, TF's kernel: true iff fewer than ``k`` classes score
    strictly more than the target; false where the target is out of range or any score
    of the row is not finite, as TF 2.21's kernel answers). Predictions ``[batch,
    classes]`` (float, static ``classes``), targets ``[batch]`` (int32/int64), a bool
    ``[batch]``.

    TF1 passes ``(predictions, targets, k)``, TF2 (``tf.math.in_top_k``) ``(targets,
    predictions, k)``: the dtypes tell them apart (integer targets, float predictions),
    so both orders work."""
    from tfc.api import ops
    p, t = convert_to_tensor(predictions), convert_to_tensor(targets)
    if p.dtype.is_int and t.dtype.is_float:  # (TF2's order)
        p, t = t, p
    if not p.dtype.is_float or p.type.rank != 2:
        raise _nn_error(f"in_top_k: predictions must be a float [batch, classes] tensor, "
                        f"got {p.type}")
    if not t.dtype.is_int or t.type.rank != 1:
        raise _nn_error(f"in_top_k: targets must be an int32/int64 [batch] vector, got "
                        f"{t.type}")
    classes = p.type.shape[1]
    if not isinstance(classes, int):
        raise _nn_error(f"in_top_k: the number of classes of {p.type} must be static")
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise _nn_error(f"in_top_k: k must be a Python int, got {k!r}")
    hot = ops.equal(ops.expand_dims(t, 1), np.arange(classes, dtype=t.dtype.np)[None, :])
    target = ops.reduce_sum(ops.where(hot, p, ops.zeros_like(p)), axis=1, keepdims=True)
    above = ops.reduce_sum(ops.cast(ops.greater(p, target), DType.i32), axis=1)
    in_range = ops.logical_and(ops.greater_equal(t, 0), ops.less(t, classes))
    finite = ops.reduce_all(ops.is_finite(p), axis=1)
    sure = ops.logical_and(in_range, finite)
    out = ops.logical_and(sure, ops.less(above, int(k)))
    return out if name is None else ops.identity(out, name=name)


def log_poisson_loss(targets: TensorLike, log_input: TensorLike,
                     compute_full_loss: bool = False, name: str | None = None) -> Tensor:
    """``exp(c) - c * z`` for log-rate ``c`` and counts ``z`` (``tf.nn.log_poisson_loss``,
    TF's code); ``compute_full_loss`` adds Stirling's ``z log z - z + log(2 pi z) / 2``
    where ``z > 1`` (0 for ``0 <= z <= 1``)."""
    from tfc.api import ops
    c, z = convert_to_tensor(log_input), convert_to_tensor(targets)
    if not c.dtype.is_float or z.dtype != c.dtype:
        raise _nn_error(f"log_poisson_loss: log_input and targets must be floats of one "
                        f"dtype, got {c.type} and {z.type}")
    if not _compatible(c.type.shape, z.type.shape):
        raise _nn_error(f"log_poisson_loss: log_input {c.type} and targets {z.type} must "
                        "have the same shape")
    result = ops.exp(c) - c * z
    if compute_full_loss:
        stirling = z * ops.log(z) - z + 0.5 * ops.log(z * (2 * np.pi))
        small = ops.logical_and(z >= 0.0, z <= 1.0)
        result = result + ops.where(small, ops.zeros_like(z), stirling)
    return result if name is None else ops.identity(result, name=name)


def _compatible(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x == y or not isinstance(x, int) or not isinstance(y, int)
                                    for x, y in zip(a, b))


def weighted_cross_entropy_with_logits(labels: TensorLike | None = None,
                                       logits: TensorLike | None = None,
                                       pos_weight: TensorLike | None = None,
                                       name: str | None = None,
                                       targets: TensorLike | None = None) -> Tensor:
    """The sigmoid cross entropy with the positive term weighted by ``pos_weight``
    (``tf.nn.weighted_cross_entropy_with_logits``), TF's stable form: ``(1 - z) x + l
    (log1p(exp(-|x|)) + relu(-x))`` with ``l = 1 + (q - 1) z``. ``targets`` is TF1's
    older name of ``labels``."""
    from tfc.api import ops
    if targets is not None:
        if labels is not None:
            raise _nn_error("weighted_cross_entropy_with_logits: give labels or targets "
                            "(its older name), not both")
        labels = targets
    if labels is None or logits is None or pos_weight is None:
        raise _nn_error("weighted_cross_entropy_with_logits: labels, logits and "
                        "pos_weight are required")
    x, z = convert_to_tensor(logits), convert_to_tensor(labels)
    if not x.dtype.is_float or z.dtype != x.dtype:
        raise _nn_error(f"weighted_cross_entropy_with_logits: logits and labels must be "
                        f"floats of one dtype, got {x.type} and {z.type}")
    if not _compatible(x.type.shape, z.type.shape):
        raise _nn_error(f"weighted_cross_entropy_with_logits: logits {x.type} and labels "
                        f"{z.type} must have the same shape")
    q = (convert_to_tensor(pos_weight) if isinstance(pos_weight, (Tensor, Variable))
         else convert_to_tensor(pos_weight, x.dtype))
    log_weight = (q - 1.0) * z + 1.0
    out = (1.0 - z) * x + log_weight * (ops.log1p(ops.exp(-ops.abs(x))) + relu(-x))
    return out if name is None else ops.identity(out, name=name)


def local_response_normalization(input: TensorLike, depth_radius: int = 5,  # noqa: A002
                                 bias: float = 1.0, alpha: float = 1.0, beta: float = 0.5,
                                 name: str | None = None) -> Tensor:
    """``x / (bias + alpha * sum(x^2 over channels d-r..d+r)) ** beta`` of a 4-D NHWC
    tensor (``tf.nn.local_response_normalization``, ``lrn``), as TF's CPU kernel computes
    it (up to 384 channels): the window sums are one matmul of ``x^2`` with a 0/1 band
    matrix, then ``x * rsqrt(t)`` for beta 0.5, ``x * (1 / t)`` for 1, else ``x *
    exp(-beta log t)``. ``bias``, ``alpha`` and ``beta`` are float attrs in TF: rounded to
    float32 first. The channel count must be static (the band is a constant)."""
    from tfc.api import ops
    x = convert_to_tensor(input)
    if not x.dtype.is_float or x.type.rank != 4:
        raise _nn_error(f"local_response_normalization takes a 4-D float tensor, got "
                        f"{x.type}")
    depth = x.type.shape[3]
    if not isinstance(depth, int):
        raise _nn_error(f"local_response_normalization: the channels of {x.type} must be "
                        "static")
    if not isinstance(depth_radius, (int, np.integer)) or depth_radius < 0:
        raise _nn_error(f"local_response_normalization: depth_radius must be an int >= 0, "
                        f"got {depth_radius!r}")
    b, a, e = (float(np.float32(v)) for v in (bias, alpha, beta))
    i, j = np.ogrid[:depth, :depth]
    band = (np.abs(i - j) <= int(depth_radius)).astype(x.dtype.np)
    t = ops.matmul(ops.square(x), band) * a + b
    scale = (ops.reciprocal(t) if e == 1.0 else ops.rsqrt(t) if e == 0.5
             else ops.exp(ops.log(t) * -e))
    out = x * scale
    return out if name is None else ops.identity(out, name=name)


lrn = local_response_normalization


def sufficient_statistics(x: TensorLike, axes: Sequence[int], shift: TensorLike | None = None,
                          keepdims: bool = False, name: str | None = None,
                          keep_dims: bool | None = None
                          ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """``(count, sum(x - shift), sum((x - shift)^2), shift)`` over ``axes``
    (``tf.nn.sufficient_statistics``, TF's code; without ``shift``: ``sum(x)``,
    ``sum(x^2)`` and None). The count has ``x``'s dtype; a symbolic dim among ``axes`` is
    counted at run time."""
    from tfc.api import ops
    t = convert_to_tensor(x)
    rank = t.type.rank
    given = [int(a) for a in ([axes] if isinstance(axes, (int, np.integer)) else axes)]
    if any(not -rank <= a < rank for a in given):
        raise _nn_error(f"sufficient_statistics: axes {axes} out of range for {t.type}")
    ax = sorted({a % rank for a in given})
    keep = keepdims if keep_dims is None else keep_dims
    dims = [t.type.shape[a] for a in ax]
    if all(isinstance(d, int) for d in dims):
        counts = convert_to_tensor(np.asarray(np.prod([int(d) for d in dims], dtype=np.int64),
                                              t.dtype.np))
    else:
        sizes = ops.gather(ops.cast(ops.shape(t), t.dtype), np.array(ax, np.int32))
        counts = ops.reduce_prod(sizes)
    if shift is not None:
        s = convert_to_tensor(shift) if isinstance(shift, (Tensor, Variable)) else \
            convert_to_tensor(shift, t.dtype)
        m_ss, v_ss = t - s, ops.squared_difference(t, s)
    else:
        s = None
        m_ss, v_ss = t, ops.square(t)
    return (counts, ops.reduce_sum(m_ss, ax, keepdims=bool(keep)),
            ops.reduce_sum(v_ss, ax, keepdims=bool(keep)), s)


def normalize_moments(counts: TensorLike, mean_ss: TensorLike, variance_ss: TensorLike,
                      shift: TensorLike | None, name: str | None = None
                      ) -> tuple[Tensor, Tensor]:
    """The mean and variance from ``sufficient_statistics`` (``tf.nn.normalize_moments``,
    TF's code): ``divisor = 1 / counts``, ``shifted = mean_ss * divisor``, mean ``shifted
    + shift``, variance ``variance_ss * divisor - shifted^2``."""
    from tfc.api import ops
    divisor = ops.reciprocal(convert_to_tensor(counts))
    shifted_mean = ops.multiply(mean_ss, divisor)
    mean = shifted_mean if shift is None else ops.add(shifted_mean, shift)
    variance = ops.subtract(ops.multiply(variance_ss, divisor), ops.square(shifted_mean))
    return mean, variance
