"""Image layers: ``Conv2D``, ``Conv2DTranspose``, ``DepthwiseConv2D``,
``SeparableConv2D``, ``Conv1D`` and the 2-D pools, on NHWC (NWC) tensors (TensorFlow's
layout)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from tfc.api import nn
from tfc.api.nn_conv import transpose_output_length
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


# ---- conv25: Conv1D, Conv2DTranspose, DepthwiseConv2D, SeparableConv2D ------------------
# Keras 3's weight names and shapes (``get_weights`` / ``set_weights`` carry over), on the
# composites of ``tfc.api.nn_conv``; channels_last only.

def _channels_last(layer: str, data_format: str | None) -> None:
    if data_format not in (None, "channels_last"):
        raise TypeMismatch(f"{layer}: data_format {data_format!r} is not supported "
                           f"(only channels_last)")


def _check_rank(layer: Layer, t: TensorType, rank: int, layout: str) -> None:
    if t.rank != rank:
        raise TypeMismatch(f"{type(layer).__name__} '{layer.name}' takes {layout} inputs "
                           f"(rank {rank}), got {t}")


class _ConvBase(Layer):
    """The parts Keras's convolutions share: activation, bias, the regularizers and
    constraints of a kernel and a bias."""

    def __init__(self, activation: str | Callable[[Tensor], Tensor] | None, use_bias: bool,
                 bias_initializer: str | Initializer, bias_regularizer: Any,
                 bias_constraint: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.activation = get_activation(activation)
        self.use_bias = use_bias
        self.bias_initializer = bias_initializer
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.bias_constraint = constraints.get(bias_constraint)
        self.bias: Any = None

    def kernel_weight(self, name: str, shape: Sequence[int], initializer: Any,
                      regularizer: Any, constraint: Any) -> Any:
        return self.add_weight(name, tuple(shape), initializer,
                               regularizer=regularizers.get(regularizer),
                               constraint=constraints.get(constraint))

    def add_bias(self, size: int) -> None:
        if self.use_bias:
            self.bias = self.add_weight("bias", (size,), self.bias_initializer,
                                        regularizer=self.bias_regularizer,
                                        constraint=self.bias_constraint)

    def finish(self, y: Tensor) -> Tensor:
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y) if self.activation else y


class Conv1D(_ConvBase):
    """``activation(conv1d(x, kernel) + bias)`` on ``[N, steps, channels]``; kernel
    ``[k, in_channels, filters]``. ``padding="causal"`` pads ``(k - 1) * dilation`` steps
    on the left (Keras's causal convolution: output t sees inputs up to t)."""

    def __init__(self, filters: int, kernel_size: int | Sequence[int],
                 strides: int | Sequence[int] = 1, padding: str = "valid",
                 data_format: str | None = None, dilation_rate: int | Sequence[int] = 1,
                 activation: str | Callable[[Tensor], Tensor] | None = None,
                 use_bias: bool = True, kernel_initializer: str | Initializer = "glorot_uniform",
                 bias_initializer: str | Initializer = "zeros", kernel_regularizer: Any = None,
                 bias_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(activation, use_bias, bias_initializer, bias_regularizer,
                         bias_constraint, **kwargs)
        _channels_last("Conv1D", data_format)
        if filters <= 0:
            raise TypeMismatch(f"Conv1D: filters must be positive, got {filters}")
        self.filters = int(filters)
        self.kernel_size = _single("Conv1D: kernel_size", kernel_size)
        self.strides = _single("Conv1D: strides", strides)
        self.dilation_rate = _single("Conv1D: dilation_rate", dilation_rate)
        self.causal = isinstance(padding, str) and padding.lower() == "causal"
        self.padding = "VALID" if self.causal else _padding(padding)
        self.kernel_initializer = kernel_initializer
        self.kernel_regularizer, self.kernel_constraint = kernel_regularizer, kernel_constraint

    def build(self, input_type: TensorType) -> None:
        _check_rank(self, input_type, 3, "[batch, steps, channels]")
        self.dtype = float_dtype(self, input_type)
        channels = static_dim(self, input_type, 2, "channel dim")
        self.kernel = self.kernel_weight("kernel", (self.kernel_size, channels, self.filters),
                                         self.kernel_initializer, self.kernel_regularizer,
                                         self.kernel_constraint)
        self.add_bias(self.filters)

    def call(self, x: Tensor, training: bool) -> Tensor:
        if self.causal:
            from tfc.api import ops
            x = ops.pad(x, [[0, 0], [(self.kernel_size - 1) * self.dilation_rate, 0], [0, 0]])
        return self.finish(nn.conv1d(x, self.kernel, self.strides, self.padding,
                                     dilations=self.dilation_rate))


def _single(name: str, v: int | Sequence[int]) -> int:
    t = (int(v),) if isinstance(v, int) else tuple(int(x) for x in v)
    if len(t) != 1 or t[0] < 1:
        raise TypeMismatch(f"{name} must be a positive int (or a 1-tuple), got {v!r}")
    return t[0]


class Conv2DTranspose(_ConvBase):
    """``activation(conv2d_transpose(x, kernel) + bias)``; kernel
    ``[kh, kw, filters, in_channels]`` (Keras's and TF's layout). The output size is
    Keras's: ``in * stride`` (SAME) or ``in * stride + max(k - stride, 0)`` (VALID), or
    with ``output_padding`` ``(in - 1) * stride + k - 2 * pad + output_padding``."""

    def __init__(self, filters: int, kernel_size: int | Sequence[int],
                 strides: int | Sequence[int] = 1, padding: str = "valid",
                 output_padding: int | Sequence[int] | None = None,
                 data_format: str | None = None, dilation_rate: int | Sequence[int] = 1,
                 activation: str | Callable[[Tensor], Tensor] | None = None,
                 use_bias: bool = True, kernel_initializer: str | Initializer = "glorot_uniform",
                 bias_initializer: str | Initializer = "zeros", kernel_regularizer: Any = None,
                 bias_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(activation, use_bias, bias_initializer, bias_regularizer,
                         bias_constraint, **kwargs)
        _channels_last("Conv2DTranspose", data_format)
        if filters <= 0:
            raise TypeMismatch(f"Conv2DTranspose: filters must be positive, got {filters}")
        self.filters = int(filters)
        self.kernel_size = _pair("Conv2DTranspose: kernel_size", kernel_size)
        self.strides = _pair("Conv2DTranspose: strides", strides)
        self.dilation_rate = _pair("Conv2DTranspose: dilation_rate", dilation_rate)
        self.padding = _padding(padding)
        self.output_padding: tuple[int, int] | None = None
        if output_padding is not None:
            op = ((int(output_padding),) * 2 if isinstance(output_padding, int)
                  else tuple(int(v) for v in output_padding))
            if len(op) != 2 or not all(0 <= p < s for p, s in zip(op, self.strides)):
                raise TypeMismatch(f"Conv2DTranspose: output_padding {output_padding!r} must "
                                   f"be 2 ints, each below its stride {self.strides}")
            self.output_padding = (op[0], op[1])
        self.kernel_initializer = kernel_initializer
        self.kernel_regularizer, self.kernel_constraint = kernel_regularizer, kernel_constraint

    def build(self, input_type: TensorType) -> None:
        _check_nhwc(self, input_type)
        self.dtype = float_dtype(self, input_type)
        channels = static_dim(self, input_type, 3, "channel dim")
        self.kernel = self.kernel_weight("kernel", (*self.kernel_size, self.filters, channels),
                                         self.kernel_initializer, self.kernel_regularizer,
                                         self.kernel_constraint)
        self.add_bias(self.filters)

    def call(self, x: Tensor, training: bool) -> Tensor:
        hw = [transpose_output_length(
            static_dim(self, x.type, 1 + i, "height" if i == 0 else "width"),
            self.kernel_size[i], self.padding,
            None if self.output_padding is None else self.output_padding[i],
            self.strides[i], self.dilation_rate[i]) for i in range(2)]
        y = nn.conv2d_transpose(x, self.kernel, [None, *hw, self.filters], self.strides,
                                self.padding, dilations=self.dilation_rate)
        return self.finish(y)


class DepthwiseConv2D(_ConvBase):
    """``activation(depthwise_conv2d(x, kernel) + bias)``; kernel
    ``[kh, kw, in_channels, depth_multiplier]`` (Keras 3 names it ``kernel``), bias
    ``[in_channels * depth_multiplier]``."""

    def __init__(self, kernel_size: int | Sequence[int], strides: int | Sequence[int] = 1,
                 padding: str = "valid", depth_multiplier: int = 1,
                 data_format: str | None = None, dilation_rate: int | Sequence[int] = 1,
                 activation: str | Callable[[Tensor], Tensor] | None = None,
                 use_bias: bool = True,
                 depthwise_initializer: str | Initializer = "glorot_uniform",
                 bias_initializer: str | Initializer = "zeros",
                 depthwise_regularizer: Any = None, bias_regularizer: Any = None,
                 depthwise_constraint: Any = None, bias_constraint: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(activation, use_bias, bias_initializer, bias_regularizer,
                         bias_constraint, **kwargs)
        _channels_last("DepthwiseConv2D", data_format)
        if depth_multiplier <= 0:
            raise TypeMismatch(f"DepthwiseConv2D: depth_multiplier must be positive, got "
                               f"{depth_multiplier}")
        self.depth_multiplier = int(depth_multiplier)
        self.kernel_size = _pair("DepthwiseConv2D: kernel_size", kernel_size)
        self.strides = _pair("DepthwiseConv2D: strides", strides)
        self.dilation_rate = _pair("DepthwiseConv2D: dilation_rate", dilation_rate)
        self.padding = _padding(padding)
        self.depthwise_initializer = depthwise_initializer
        self.depthwise_regularizer = depthwise_regularizer
        self.depthwise_constraint = depthwise_constraint

    def build(self, input_type: TensorType) -> None:
        _check_nhwc(self, input_type)
        self.dtype = float_dtype(self, input_type)
        channels = static_dim(self, input_type, 3, "channel dim")
        self.kernel = self.kernel_weight(
            "kernel", (*self.kernel_size, channels, self.depth_multiplier),
            self.depthwise_initializer, self.depthwise_regularizer, self.depthwise_constraint)
        self.add_bias(channels * self.depth_multiplier)

    def call(self, x: Tensor, training: bool) -> Tensor:
        return self.finish(nn.depthwise_conv2d(x, self.kernel, self.strides, self.padding,
                                               dilations=self.dilation_rate))


class SeparableConv2D(_ConvBase):
    """``activation(separable_conv2d(x, depthwise_kernel, pointwise_kernel) + bias)``;
    ``depthwise_kernel [kh, kw, in, depth_multiplier]``, ``pointwise_kernel
    [1, 1, in * depth_multiplier, filters]``, bias ``[filters]`` (Keras 3's order)."""

    def __init__(self, filters: int, kernel_size: int | Sequence[int],
                 strides: int | Sequence[int] = 1, padding: str = "valid",
                 data_format: str | None = None, dilation_rate: int | Sequence[int] = 1,
                 depth_multiplier: int = 1,
                 activation: str | Callable[[Tensor], Tensor] | None = None,
                 use_bias: bool = True,
                 depthwise_initializer: str | Initializer = "glorot_uniform",
                 pointwise_initializer: str | Initializer = "glorot_uniform",
                 bias_initializer: str | Initializer = "zeros",
                 depthwise_regularizer: Any = None, pointwise_regularizer: Any = None,
                 bias_regularizer: Any = None, depthwise_constraint: Any = None,
                 pointwise_constraint: Any = None, bias_constraint: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(activation, use_bias, bias_initializer, bias_regularizer,
                         bias_constraint, **kwargs)
        _channels_last("SeparableConv2D", data_format)
        if filters <= 0 or depth_multiplier <= 0:
            raise TypeMismatch(f"SeparableConv2D: filters ({filters}) and depth_multiplier "
                               f"({depth_multiplier}) must be positive")
        self.filters, self.depth_multiplier = int(filters), int(depth_multiplier)
        self.kernel_size = _pair("SeparableConv2D: kernel_size", kernel_size)
        self.strides = _pair("SeparableConv2D: strides", strides)
        self.dilation_rate = _pair("SeparableConv2D: dilation_rate", dilation_rate)
        self.padding = _padding(padding)
        self.depthwise = (depthwise_initializer, depthwise_regularizer, depthwise_constraint)
        self.pointwise = (pointwise_initializer, pointwise_regularizer, pointwise_constraint)

    def build(self, input_type: TensorType) -> None:
        _check_nhwc(self, input_type)
        self.dtype = float_dtype(self, input_type)
        channels = static_dim(self, input_type, 3, "channel dim")
        mid = channels * self.depth_multiplier
        self.depthwise_kernel = self.kernel_weight(
            "depthwise_kernel", (*self.kernel_size, channels, self.depth_multiplier),
            *self.depthwise)
        self.pointwise_kernel = self.kernel_weight(
            "pointwise_kernel", (1, 1, mid, self.filters), *self.pointwise)
        self.add_bias(self.filters)

    def call(self, x: Tensor, training: bool) -> Tensor:
        return self.finish(nn.separable_conv2d(x, self.depthwise_kernel, self.pointwise_kernel,
                                               self.strides, self.padding,
                                               dilations=self.dilation_rate))


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
Convolution1D = Conv1D
Convolution2DTranspose = Conv2DTranspose
SeparableConvolution2D = SeparableConv2D
