"""``tfc.random``: seeded random tensors and variable initializers.

Every random op is counter-based (Philox, see ``tfc.ops.random``): its values depend only
on its seed and the step number, so every backend reproduces them bit for bit. An op
without a seed gets one from the graph (``tfc.set_random_seed``) and a per-graph counter.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from tfc.api.graph import Tensor, as_dtype, get_default_graph, user_location
from tfc.api.tensor import TensorLike, apply
from tfc.errors import TypeMismatch
from tfc.ir.types import DType


def _seed(seed: int | None) -> int:
    return get_default_graph().next_seed(seed)


def uniform(shape: Sequence[int], minval: float = 0.0, maxval: float | None = 1.0,
            dtype: Any = DType.f32, seed: int | None = None) -> Tensor:
    """Uniform in ``[minval, maxval)``; ``maxval=None`` is 1 for floats (TF1's
    ``tf.random_uniform`` default) and an error for integers, which need a bound."""
    dt = as_dtype(dtype)
    if maxval is None:
        if dt.is_int:
            raise TypeMismatch(f"random uniform: maxval must be given for {dt.name}",
                               user_location())
        maxval = 1.0
    if dt.is_int:
        return apply("random.uniform_int", shape=tuple(shape), minval=int(minval),
                     maxval=int(maxval), dtype=dt, seed=_seed(seed))
    return apply("random.uniform", shape=tuple(shape), minval=float(minval),
                 maxval=float(maxval), dtype=dt, seed=_seed(seed))


def normal(shape: Sequence[int], mean: float = 0.0, stddev: float = 1.0,
           dtype: Any = DType.f32, seed: int | None = None) -> Tensor:
    return apply("random.normal", shape=tuple(shape), mean=float(mean),
                 stddev=float(stddev), dtype=as_dtype(dtype), seed=_seed(seed))


def truncated_normal(shape: Sequence[int], mean: float = 0.0, stddev: float = 1.0,
                     dtype: Any = DType.f32, seed: int | None = None) -> Tensor:
    return apply("random.truncated_normal", shape=tuple(shape), mean=float(mean),
                 stddev=float(stddev), dtype=as_dtype(dtype), seed=_seed(seed))


def shuffle(x: TensorLike, seed: int | None = None) -> Tensor:
    """A random permutation of the first axis, fresh each step."""
    return apply("shuffle", x, seed=_seed(seed))


def glorot_uniform(shape: Sequence[int], dtype: Any = DType.f32,
                   seed: int | None = None) -> Tensor:
    """Xavier/Glorot uniform: U(-l, l) with l = sqrt(6 / (fan_in + fan_out))."""
    receptive = math.prod(shape[:-2]) if len(shape) > 2 else 1
    fan_in = shape[-2] * receptive if len(shape) >= 2 else shape[0]
    fan_out = shape[-1] * receptive if len(shape) >= 2 else shape[0]
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return uniform(shape, -limit, limit, dtype, seed)


def log_uniform_candidate_sampler(true_classes: TensorLike, num_true: int, num_sampled: int,
                                  unique: bool, range_max: int, seed: int | None = None
                                  ) -> tuple[Tensor, Tensor, Tensor]:
    """``num_sampled`` classes from Zipf's log-uniform distribution over
    ``[0, range_max)``, ``P(k) = log((k + 2) / (k + 1)) / log(range_max + 1)``, fresh each
    step (``tf.random.log_uniform_candidate_sampler``). Returns ``(sampled_candidates,
    true_expected_count, sampled_expected_count)``; the counts are ``num_sampled * P(k)``,
    in f64 (TF's are f32: f64 keeps an f64 model's loss exact to rounding).

    Each draw is TF's ``LogUniformSampler::Sample``: ``floor(exp(u * log(range_max + 1)))
    - 1`` for uniform ``u`` in [0, 1), taken mod ``range_max``. Only ``unique=False``
    (draws with replacement) is provided: TF's ``unique=True`` draws until it has
    ``num_sampled`` distinct classes, a data-dependent number of draws that tfc's static
    shapes cannot express; ask for it and you get a clear error, not other numbers."""
    from tfc.api import ops
    from tfc.api.tensor import convert_to_tensor
    from tfc.errors import TfcError
    if unique:
        raise TfcError("log_uniform_candidate_sampler: unique=True (sampling without "
                       "replacement) is not supported: its number of draws depends on the "
                       "data; use unique=False")
    if num_sampled < 1 or range_max < 1:
        raise TfcError(f"log_uniform_candidate_sampler: num_sampled ({num_sampled}) and "
                       f"range_max ({range_max}) must be >= 1")
    labels = convert_to_tensor(true_classes)
    if not labels.dtype.is_int or labels.type.rank != 2 or labels.shape[1] != num_true:
        raise TfcError(f"log_uniform_candidate_sampler: true_classes must be integers of "
                       f"shape [batch, {num_true}], got {labels.type}")
    log_range = math.log(range_max + 1.0)
    u = uniform([num_sampled], dtype=DType.f64, seed=seed)
    drawn = ops.floor(ops.exp(u * log_range)) - 1.0
    sampled = ops.cast(drawn - ops.floor(drawn / range_max) * range_max, labels.dtype)

    def expected(k: Tensor) -> Tensor:
        kf = ops.cast(k, DType.f64)
        p = (ops.log(kf + 2.0) - ops.log(kf + 1.0)) / log_range
        return p * float(num_sampled)
    return sampled, expected(labels), expected(sampled)
