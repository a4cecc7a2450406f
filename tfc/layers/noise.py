"""Regularization layers that act in training only: ``SpatialDropout2D`` (whole feature
maps dropped) and ``GaussianNoise`` (additive zero-mean noise). In an inference graph both
are the identity. Their random draws are tfc's (fresh each step, from the seed and the
step number, shaped like the possibly symbolic-batch input); Keras's numbers differ, the
distribution is the same."""

from __future__ import annotations

import math
from typing import Any

from tfc.api import nn, ops
from tfc.api.graph import Tensor
from tfc.api.tensor import apply
from tfc.errors import TypeMismatch
from tfc.layers.base import Layer
from tfc.layers.pooling import _check_format, _check_rank


def _float_input(layer: Layer, x: Tensor) -> None:
    if not x.dtype.is_float:
        raise TypeMismatch(f"{type(layer).__name__} '{layer.name}' takes float inputs, got "
                           f"{x.type}")


class SpatialDropout2D(Layer):
    """In training, each channel of each example zeroed with probability ``rate`` (the
    whole ``H x W`` map at once: neighbouring pixels are correlated, so element-wise
    dropout would barely regularize a convolution) and the rest scaled by ``1 / (1 -
    rate)``; the identity in inference."""

    uses_training = True

    def __init__(self, rate: float, data_format: str | None = None, seed: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check_format("SpatialDropout2D", data_format)
        if not 0.0 <= rate < 1.0:
            raise TypeMismatch(f"SpatialDropout2D: rate must be in [0, 1), got {rate}")
        self.rate, self.seed = float(rate), seed

    def call(self, x: Tensor, training: bool) -> Tensor:
        _check_rank(self, x, 4, "[batch, height, width, channels]")
        _float_input(self, x)
        if not training or self.rate == 0.0:
            return x
        mask = nn.dropout(ops.ones_like(x[:, :1, :1, :]), self.rate, self.seed)  # [B,1,1,C]
        return x * mask


class GaussianNoise(Layer):
    """In training, ``x + stddev * n`` with ``n`` standard normal, drawn afresh each step
    (Box-Muller from two uniform draws); the identity in inference."""

    uses_training = True

    def __init__(self, stddev: float, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not stddev >= 0.0:
            raise TypeMismatch(f"GaussianNoise: stddev must be >= 0, got {stddev}")
        self.stddev, self.seed = float(stddev), seed

    def call(self, x: Tensor, training: bool) -> Tensor:
        _float_input(self, x)
        if not training or self.stddev == 0.0:
            return x
        seed = x.graph.next_seed(self.seed)
        u1 = apply("random.uniform_like", x, dtype=x.dtype, seed=seed)
        u2 = apply("random.uniform_like", x, dtype=x.dtype, seed=seed + 1)
        # 1 - u1 lies in (0, 1]: the log is finite
        radius = ops.sqrt(-2.0 * ops.log(1.0 - u1))
        return x + self.stddev * (radius * ops.cos((2.0 * math.pi) * u2))
