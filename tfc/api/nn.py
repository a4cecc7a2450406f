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


def softmax(logits: TensorLike, axis: int = -1, name: str | None = None) -> Tensor:
    return apply("softmax", logits, axis=axis, name=name)


def log_softmax(logits: TensorLike, axis: int = -1, name: str | None = None) -> Tensor:
    return apply("log_softmax", logits, axis=axis, name=name)


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
