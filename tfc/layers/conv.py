"""Image layers: ``Conv2D`` and the 2-D pools, on NHWC tensors (TensorFlow's layout)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from tfc.api import nn
from tfc.api.graph import Tensor
from tfc.errors import TypeMismatch
from tfc.ir.types import TensorType
from tfc.layers import constraints, regularizers
from tfc.layers.base import Initializer, Layer, get_activation
from tfc.layers.core import float_dtype, static_dim


def _pair(name: str, v: int | Sequence[int]) -> tuple[int, int]:
    t = (int(v), int(v)) if isinstance(v, int) else tuple(int(x) for x in v)
    if len(t) != 2 or min(t) < 1:
        raise TypeMismatch(f"{name} must be a positive int or two positive ints, got {v!r}")
    return t


def _padding(v: str) -> str:
    p = v.upper()
    if p not in ("SAME", "VALID"):
        raise TypeMismatch(f"padding must be 'valid' or 'same', got {v!r}")
    return p


def _check_nhwc(layer: Layer, t: TensorType) -> None:
    if t.rank != 4:
        raise TypeMismatch(f"{type(layer).__name__} '{layer.name}' takes NHWC inputs "
                           f"(rank 4), got {t}")


class Conv2D(Layer):
    """``activation(conv2d(x, kernel) + bias)``; kernel ``[kh, kw, in_channels, filters]``."""

    def __init__(self, filters: int, kernel_size: int | Sequence[int],
                 strides: int | Sequence[int] = 1, padding: str = "valid",
                 dilation_rate: int | Sequence[int] = 1,
                 activation: str | Callable[[Tensor], Tensor] | None = None,
                 use_bias: bool = True, kernel_initializer: str | Initializer = "glorot_uniform",
                 bias_initializer: str | Initializer = "zeros", kernel_regularizer: Any = None,
                 bias_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kernel_regularizer, self.bias_regularizer = regularizers.get(
            kernel_regularizer), regularizers.get(bias_regularizer)
        self.kernel_constraint, self.bias_constraint = constraints.get(
            kernel_constraint), constraints.get(bias_constraint)
        if filters <= 0:
            raise TypeMismatch(f"Conv2D: filters must be positive, got {filters}")
        self.filters = int(filters)
        self.kernel_size = _pair("Conv2D: kernel_size", kernel_size)
        self.strides = _pair("Conv2D: strides", strides)
        self.dilation_rate = _pair("Conv2D: dilation_rate", dilation_rate)
        self.padding = _padding(padding)
        self.activation = get_activation(activation)
        self.use_bias = use_bias
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer

    def build(self, input_type: TensorType) -> None:
        _check_nhwc(self, input_type)
        self.dtype = float_dtype(self, input_type)
        channels = static_dim(self, input_type, 3, "channel dim")
        self.kernel = self.add_weight("kernel", (*self.kernel_size, channels, self.filters),
                                      self.kernel_initializer,
                                      regularizer=self.kernel_regularizer,
                                      constraint=self.kernel_constraint)
        self.bias = (self.add_weight("bias", (self.filters,), self.bias_initializer,
                                     regularizer=self.bias_regularizer,
                                     constraint=self.bias_constraint)
                     if self.use_bias else None)

    def call(self, x: Tensor, training: bool) -> Tensor:
        y = nn.conv2d(x, self.kernel, strides=self.strides, padding=self.padding,
                      dilations=self.dilation_rate)
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y) if self.activation else y


class _Pool2D(Layer):
    """A 2-D pooling window over NHWC inputs; ``strides`` default to the pool size."""

    pool: Callable[..., Tensor]

    def __init__(self, pool_size: int | Sequence[int] = 2,
                 strides: int | Sequence[int] | None = None, padding: str = "valid",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pool_size = _pair(f"{type(self).__name__}: pool_size", pool_size)
        self.strides = (self.pool_size if strides is None
                        else _pair(f"{type(self).__name__}: strides", strides))
        self.padding = _padding(padding)

    def call(self, x: Tensor, training: bool) -> Tensor:
        _check_nhwc(self, x.type)
        return type(self).pool(x, self.pool_size, self.strides, self.padding)


class MaxPool2D(_Pool2D):
    """The maximum of each window."""

    base_name = "max_pooling2d"
    pool = staticmethod(nn.max_pool2d)


class AveragePooling2D(_Pool2D):
    """The mean of each window."""

    base_name = "average_pooling2d"
    pool = staticmethod(nn.avg_pool2d)


MaxPooling2D = MaxPool2D
AvgPool2D = AveragePooling2D
