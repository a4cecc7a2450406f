"""Pooling layers beyond ``tfc.layers.conv``'s 2-D windows: the global poolings (a mean
or maximum over every spatial position: ``[B, H, W, C] -> [B, C]``, ``[B, T, C] -> [B,
C]``; ``keepdims`` keeps the pooled axes as 1s, Keras 3's) and the 1-D windows over
``[B, steps, features]`` (a 2-D window of width 1 on ``[B, steps, 1, features]``, so the
two share one kernel and one gradient). Channels last only (TensorFlow's default)."""

from __future__ import annotations

from typing import Any, Callable

from tfc.api import nn, ops
from tfc.api.graph import Tensor
from tfc.errors import TypeMismatch
from tfc.layers.base import Layer


def _check_format(layer_name: str, data_format: str | None) -> None:
    if data_format not in (None, "channels_last"):
        raise TypeMismatch(f"{layer_name}: only data_format='channels_last' is supported, got "
                           f"{data_format!r} (transpose the input)")


def _check_rank(layer: Layer, x: Tensor, rank: int, what: str) -> None:
    if x.type.rank != rank:
        raise TypeMismatch(f"{type(layer).__name__} '{layer.name}' takes {what} inputs "
                           f"(rank {rank}), got {x.type}")


class _GlobalPool(Layer):
    rank: int = 4
    what: str = "[batch, height, width, channels]"
    reduce: Callable[..., Tensor]

    def __init__(self, data_format: str | None = None, keepdims: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check_format(type(self).__name__, data_format)
        self.keepdims = bool(keepdims)

    def call(self, x: Tensor, training: bool) -> Tensor:
        _check_rank(self, x, self.rank, self.what)
        axes = list(range(1, self.rank - 1))
        return type(self).reduce(x, axis=axes, keepdims=self.keepdims)


class GlobalAveragePooling2D(_GlobalPool):
    """The mean over height and width: ``[B, H, W, C] -> [B, C]``."""

    reduce = staticmethod(ops.reduce_mean)


class GlobalMaxPooling2D(_GlobalPool):
    """The maximum over height and width: ``[B, H, W, C] -> [B, C]``."""

    reduce = staticmethod(ops.reduce_max)


class GlobalAveragePooling1D(_GlobalPool):
    """The mean over the steps: ``[B, T, C] -> [B, C]`` (Keras's ``mask`` is not taken)."""

    rank, what = 3, "[batch, steps, features]"
    reduce = staticmethod(ops.reduce_mean)


class GlobalMaxPooling1D(_GlobalPool):
    """The maximum over the steps: ``[B, T, C] -> [B, C]``."""

    rank, what = 3, "[batch, steps, features]"
    reduce = staticmethod(ops.reduce_max)


def _positive(name: str, v: Any) -> int:
    if isinstance(v, (tuple, list)) and len(v) == 1:
        v = v[0]
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise TypeMismatch(f"{name} must be a positive int, got {v!r}")
    return int(v)


class _Pool1D(Layer):
    """A window of ``pool_size`` steps every ``strides`` (default: the pool size) over
    ``[B, T, C]``; ``padding`` ``"valid"`` or ``"same"`` (TensorFlow's: an average over
    the window's positions inside the input)."""

    pool: Callable[..., Tensor]

    def __init__(self, pool_size: int = 2, strides: int | None = None, padding: str = "valid",
                 data_format: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        name = type(self).__name__
        _check_format(name, data_format)
        self.pool_size = _positive(f"{name}: pool_size", pool_size)
        self.strides = self.pool_size if strides is None else _positive(f"{name}: strides",
                                                                         strides)
        if padding.upper() not in ("SAME", "VALID"):
            raise TypeMismatch(f"{name}: padding must be 'valid' or 'same', got {padding!r}")
        self.padding = padding.upper()

    def call(self, x: Tensor, training: bool) -> Tensor:
        _check_rank(self, x, 3, "[batch, steps, features]")
        y = type(self).pool(ops.expand_dims(x, 2), (self.pool_size, 1), (self.strides, 1),
                            self.padding)
        return ops.squeeze(y, [2])


class MaxPooling1D(_Pool1D):
    """The maximum of each window of steps."""

    base_name = "max_pooling1d"
    pool = staticmethod(nn.max_pool2d)


class AveragePooling1D(_Pool1D):
    """The mean of each window of steps."""

    base_name = "average_pooling1d"
    pool = staticmethod(nn.avg_pool2d)


MaxPool1D = MaxPooling1D
AvgPool1D = AveragePooling1D
GlobalAvgPool2D = GlobalAveragePooling2D
GlobalMaxPool2D = GlobalMaxPooling2D
GlobalAvgPool1D = GlobalAveragePooling1D
GlobalMaxPool1D = GlobalMaxPooling1D
