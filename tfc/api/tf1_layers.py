"""TF1's functional layers (``tf.layers.dense``, ``tf.compat.v1.layers.*``).

TF1 programs call ``tf.layers.dense(x, 64, activation=tf.nn.relu)``: a function that makes
its variables with ``get_variable`` under a variable scope named after the layer
(``dense/kernel``, then ``dense_1/kernel``; ``name=`` and ``reuse=True`` /
``tfc.AUTO_REUSE`` share them), so that ``trainable_variables()`` and Saver checkpoints
carry TensorFlow's names. They are exposed as ``tfc.layers.dense`` ... next to tfc's
Keras-style layer classes (``tfc.layers.Dense``), as TF1 had both in ``tf.layers``.

Initializers are TF1's: the kernel Glorot uniform (``get_variable``'s default), biases
zeros, ``batch_normalization``'s gamma ones. Regularizers and constraints are refused
(a clear error, not a silent drop).

``batch_normalization`` puts its two moving-average assigns in the ``UPDATE_OPS``
collection, as TF1 does, so the classic ``with tf.control_dependencies(
tf.get_collection(tf.GraphKeys.UPDATE_OPS)): train = opt.minimize(loss)`` updates them.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from tfc.api import nn, ops
from tfc.api.graph import Tensor, Variable
from tfc.api.graph_collections import GraphKeys, add_to_collection
from tfc.api.tensor import TensorLike, convert_to_tensor
from tfc.api.variable_scope import (get_variable, ones_initializer, variable_scope,
                                    zeros_initializer)
from tfc.errors import TypeMismatch
from tfc.ir.types import DType

Activation = Callable[[Tensor], Tensor] | None


def _no_extras(layer: str, **extras: Any) -> None:
    for what, value in extras.items():
        if value is not None:
            raise TypeMismatch(f"tf.layers.{layer}: {what} is not supported")


def _float_input(layer: str, inputs: TensorLike) -> Tensor:
    x = convert_to_tensor(inputs)
    if not x.dtype.is_float:
        raise TypeMismatch(f"tf.layers.{layer} takes float inputs, got {x.type}")
    return x


def _activate(y: Tensor, activation: Activation) -> Tensor:
    return y if activation is None else activation(y)


def dense(inputs: TensorLike, units: int, activation: Activation = None,
          use_bias: bool = True, kernel_initializer: Any = None,
          bias_initializer: Any = None, kernel_regularizer: Any = None,
          bias_regularizer: Any = None, activity_regularizer: Any = None,
          kernel_constraint: Any = None, bias_constraint: Any = None,
          trainable: bool = True, name: str | None = None, reuse: Any = None) -> Tensor:
    """``activation(inputs @ kernel + bias)`` with ``kernel`` [in, units] and ``bias``
    [units] made (or reused) in the scope ``name`` (default ``dense``, ``dense_1`` ...).
    Inputs of rank > 2 are multiplied on their last axis (TF's tensordot)."""
    _no_extras("dense", kernel_regularizer=kernel_regularizer,
               bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
               kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
    x = _float_input("dense", inputs)
    if x.type.rank < 2 or x.shape[-1] is None:
        raise TypeMismatch(f"tf.layers.dense: inputs need rank >= 2 and a static last "
                           f"dimension, got {x.type}")
    with variable_scope(name, default_name="dense", reuse=reuse):
        kernel = get_variable("kernel", [x.shape[-1], int(units)], x.dtype,
                              kernel_initializer, trainable=trainable)
        bias = get_variable("bias", [int(units)], x.dtype,
                            bias_initializer or zeros_initializer(),
                            trainable=trainable) if use_bias else None
        if x.type.rank == 2:
            y = ops.matmul(x, kernel)
        else:
            inner = [d for d in x.shape[1:-1] if d is not None]
            if len(inner) != x.type.rank - 2:
                raise TypeMismatch(f"tf.layers.dense: inputs of rank > 2 need static "
                                   f"inner dimensions, got {x.type}")
            flat = ops.reshape(x, [-1, x.shape[-1]])
            y = ops.reshape(ops.matmul(flat, kernel), [-1, *inner, int(units)])
        if bias is not None:
            y = nn.bias_add(y, bias)
        return _activate(y, activation)


def _pair(v: int | Sequence[int], what: str) -> tuple[int, int]:
    t = (int(v), int(v)) if isinstance(v, int) else tuple(int(i) for i in v)
    if len(t) != 2:
        raise TypeMismatch(f"tf.layers: {what} must be an int or 2 ints, got {v!r}")
    return t[0], t[1]


def _padding(padding: str) -> str:
    p = str(padding).upper()
    if p not in ("VALID", "SAME"):
        raise TypeMismatch(f"tf.layers: padding must be 'valid' or 'same', got {padding!r}")
    return p


def _channels_last(layer: str, data_format: str) -> None:
    if data_format != "channels_last":
        raise TypeMismatch(f"tf.layers.{layer}: only data_format='channels_last' (NHWC) is "
                           f"supported, got {data_format!r}")


def conv2d(inputs: TensorLike, filters: int, kernel_size: int | Sequence[int],
           strides: int | Sequence[int] = (1, 1), padding: str = "valid",
           data_format: str = "channels_last", dilation_rate: int | Sequence[int] = (1, 1),
           activation: Activation = None, use_bias: bool = True,
           kernel_initializer: Any = None, bias_initializer: Any = None,
           kernel_regularizer: Any = None, bias_regularizer: Any = None,
           activity_regularizer: Any = None, kernel_constraint: Any = None,
           bias_constraint: Any = None, trainable: bool = True, name: str | None = None,
           reuse: Any = None) -> Tensor:
    """A 2-D convolution of NHWC ``inputs`` with a kernel [kh, kw, in, filters] (HWIO)
    and a bias [filters], in the scope ``name`` (default ``conv2d``, ``conv2d_1`` ...)."""
    _no_extras("conv2d", kernel_regularizer=kernel_regularizer,
               bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
               kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
    _channels_last("conv2d", data_format)
    x = _float_input("conv2d", inputs)
    if x.type.rank != 4 or x.shape[-1] is None:
        raise TypeMismatch(f"tf.layers.conv2d: inputs must be NHWC with static channels, "
                           f"got {x.type}")
    kh, kw = _pair(kernel_size, "kernel_size")
    with variable_scope(name, default_name="conv2d", reuse=reuse):
        kernel = get_variable("kernel", [kh, kw, x.shape[-1], int(filters)], x.dtype,
                              kernel_initializer, trainable=trainable)
        bias = get_variable("bias", [int(filters)], x.dtype,
                            bias_initializer or zeros_initializer(),
                            trainable=trainable) if use_bias else None
        y = nn.conv2d(x, kernel, strides=_pair(strides, "strides"), padding=_padding(padding),
                      dilations=_pair(dilation_rate, "dilation_rate"))
        if bias is not None:
            y = nn.bias_add(y, bias)
        return _activate(y, activation)


# ---- conv25: conv1d, conv2d_transpose, separable_conv2d ---------------------------------

def _conv_input(layer: str, inputs: TensorLike, rank: int, data_format: str,
                extras: dict[str, Any]) -> Tensor:
    """The float input of a TF1 convolution layer, channels last with static channels."""
    _no_extras(layer, **extras)
    _channels_last(layer, data_format)
    x = _float_input(layer, inputs)
    if x.type.rank != rank or x.shape[-1] is None:
        raise TypeMismatch(f"tf.layers.{layer}: inputs must be "
                           f"{'NWC' if rank == 3 else 'NHWC'} with static channels, got "
                           f"{x.type}")
    return x


def _bias_activate(y: Tensor, filters: int, dtype: DType, use_bias: bool,
                   bias_initializer: Any, trainable: bool, activation: Activation) -> Tensor:
    """``activation(y + bias)`` with the scope's ``bias`` [filters] (TF1's order: the
    bias is made after the kernels)."""
    if use_bias:
        bias = get_variable("bias", [filters], dtype, bias_initializer or zeros_initializer(),
                            trainable=trainable)
        y = nn.bias_add(y, bias)
    return _activate(y, activation)


def _one(v: int | Sequence[int], what: str) -> int:
    t = (int(v),) if isinstance(v, int) else tuple(int(i) for i in v)
    if len(t) != 1:
        raise TypeMismatch(f"tf.layers.conv1d: {what} must be an int (or 1 int), got {v!r}")
    return t[0]


def conv1d(inputs: TensorLike, filters: int, kernel_size: int | Sequence[int],
           strides: int | Sequence[int] = 1, padding: str = "valid",
           data_format: str = "channels_last", dilation_rate: int | Sequence[int] = 1,
           activation: Activation = None, use_bias: bool = True,
           kernel_initializer: Any = None, bias_initializer: Any = None,
           kernel_regularizer: Any = None, bias_regularizer: Any = None,
           activity_regularizer: Any = None, kernel_constraint: Any = None,
           bias_constraint: Any = None, trainable: bool = True, name: str | None = None,
           reuse: Any = None) -> Tensor:
    """A 1-D convolution of NWC ``inputs`` with a kernel [k, in, filters] and a bias
    [filters], in the scope ``name`` (default ``conv1d``, ``conv1d_1`` ...)."""
    x = _conv_input("conv1d", inputs, 3, data_format, dict(
        kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
        activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
        bias_constraint=bias_constraint))
    with variable_scope(name, default_name="conv1d", reuse=reuse):
        kernel = get_variable("kernel", [_one(kernel_size, "kernel_size"),
                                         int(x.shape[-1] or 0), int(filters)], x.dtype,
                              kernel_initializer,
                              trainable=trainable)
        y = nn.conv1d(x, kernel, _one(strides, "strides"), _padding(padding),
                      dilations=_one(dilation_rate, "dilation_rate"))
        return _bias_activate(y, int(filters), x.dtype, use_bias, bias_initializer,
                              trainable, activation)


def conv2d_transpose(inputs: TensorLike, filters: int, kernel_size: int | Sequence[int],
                     strides: int | Sequence[int] = (1, 1), padding: str = "valid",
                     data_format: str = "channels_last", activation: Activation = None,
                     use_bias: bool = True, kernel_initializer: Any = None,
                     bias_initializer: Any = None, kernel_regularizer: Any = None,
                     bias_regularizer: Any = None, activity_regularizer: Any = None,
                     kernel_constraint: Any = None, bias_constraint: Any = None,
                     trainable: bool = True, name: str | None = None,
                     reuse: Any = None) -> Tensor:
    """A transposed 2-D convolution (``tf.nn.conv2d_transpose``) of NHWC ``inputs`` with a
    kernel [kh, kw, filters, in] (TF's layout) and a bias [filters], in the scope ``name``
    (default ``conv2d_transpose``). The output is ``in * stride`` (SAME) or
    ``in * stride + max(k - stride, 0)`` (VALID) high and wide, as TF's; the input's
    height and width must be static."""
    from tfc.api.nn_conv import transpose_output_length
    x = _conv_input("conv2d_transpose", inputs, 4, data_format, dict(
        kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
        activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
        bias_constraint=bias_constraint))
    k, st, pad = _pair(kernel_size, "kernel_size"), _pair(strides, "strides"), _padding(padding)
    hw = []
    for i in range(2):
        n = x.shape[1 + i]
        if n is None or not isinstance(n, int):
            raise TypeMismatch(f"tf.layers.conv2d_transpose: the input's height and width "
                               f"must be static, got {x.type}")
        hw.append(transpose_output_length(n, k[i], pad, None, st[i], 1))
    with variable_scope(name, default_name="conv2d_transpose", reuse=reuse):
        kernel = get_variable("kernel", [*k, int(filters), int(x.shape[-1] or 0)], x.dtype,
                              kernel_initializer, trainable=trainable)
        y = nn.conv2d_transpose(x, kernel, [None, *hw, int(filters)], st, pad)
        return _bias_activate(y, int(filters), x.dtype, use_bias, bias_initializer,
                              trainable, activation)


def separable_conv2d(inputs: TensorLike, filters: int, kernel_size: int | Sequence[int],
                     strides: int | Sequence[int] = (1, 1), padding: str = "valid",
                     data_format: str = "channels_last",
                     dilation_rate: int | Sequence[int] = (1, 1), depth_multiplier: int = 1,
                     activation: Activation = None, use_bias: bool = True,
                     depthwise_initializer: Any = None, pointwise_initializer: Any = None,
                     bias_initializer: Any = None, depthwise_regularizer: Any = None,
                     pointwise_regularizer: Any = None, bias_regularizer: Any = None,
                     activity_regularizer: Any = None, depthwise_constraint: Any = None,
                     pointwise_constraint: Any = None, bias_constraint: Any = None,
                     trainable: bool = True, name: str | None = None,
                     reuse: Any = None) -> Tensor:
    """A depthwise convolution (``depthwise_kernel`` [kh, kw, in, depth_multiplier]) then
    a 1x1 one (``pointwise_kernel`` [1, 1, in * depth_multiplier, filters]) and a bias
    [filters], in the scope ``name`` (default ``separable_conv2d``)."""
    x = _conv_input("separable_conv2d", inputs, 4, data_format, dict(
        depthwise_regularizer=depthwise_regularizer,
        pointwise_regularizer=pointwise_regularizer, bias_regularizer=bias_regularizer,
        activity_regularizer=activity_regularizer, depthwise_constraint=depthwise_constraint,
        pointwise_constraint=pointwise_constraint, bias_constraint=bias_constraint))
    if int(depth_multiplier) < 1:
        raise TypeMismatch(f"tf.layers.separable_conv2d: depth_multiplier must be positive, "
                           f"got {depth_multiplier}")
    kh, kw = _pair(kernel_size, "kernel_size")
    c, m = int(x.shape[-1] or 0), int(depth_multiplier)  # (static: _conv_input checks)
    with variable_scope(name, default_name="separable_conv2d", reuse=reuse):
        dw = get_variable("depthwise_kernel", [kh, kw, c, m], x.dtype, depthwise_initializer,
                          trainable=trainable)
        pw = get_variable("pointwise_kernel", [1, 1, c * m, int(filters)], x.dtype,
                          pointwise_initializer, trainable=trainable)
        y = nn.separable_conv2d(x, dw, pw, _pair(strides, "strides"), _padding(padding),
                                dilations=_pair(dilation_rate, "dilation_rate"))
        return _bias_activate(y, int(filters), x.dtype, use_bias, bias_initializer,
                              trainable, activation)


def max_pooling2d(inputs: TensorLike, pool_size: int | Sequence[int],
                  strides: int | Sequence[int], padding: str = "valid",
                  data_format: str = "channels_last", name: str | None = None) -> Tensor:
    """The maximum over ``pool_size`` windows of NHWC ``inputs`` (``tf.layers``'s)."""
    _channels_last("max_pooling2d", data_format)
    return nn.max_pool2d(inputs, _pair(pool_size, "pool_size"), _pair(strides, "strides"),
                         _padding(padding))


def average_pooling2d(inputs: TensorLike, pool_size: int | Sequence[int],
                      strides: int | Sequence[int], padding: str = "valid",
                      data_format: str = "channels_last", name: str | None = None) -> Tensor:
    """The mean over ``pool_size`` windows of NHWC ``inputs`` (with 'same' padding, of
    the window's elements inside the input, as TF)."""
    _channels_last("average_pooling2d", data_format)
    return nn.avg_pool2d(inputs, _pair(pool_size, "pool_size"), _pair(strides, "strides"),
                         _padding(padding))


def flatten(inputs: TensorLike, name: str | None = None,
            data_format: str = "channels_last") -> Tensor:
    """``inputs`` as [batch, rest] (the dimensions after the first must be static)."""
    _channels_last("flatten", data_format)
    x = convert_to_tensor(inputs)
    rest = [d for d in x.shape[1:] if d is not None]
    if x.type.rank < 1 or len(rest) != x.type.rank - 1:
        raise TypeMismatch(f"tf.layers.flatten: the dimensions after the first must be "
                           f"static, got {x.type}")
    return ops.reshape(x, [-1, int(np.prod(rest, dtype=np.int64))])


def _training(layer: str, training: Any) -> bool | Tensor:
    """``training`` as a Python bool, or a scalar bool tensor (a placeholder)."""
    if isinstance(training, (Tensor, Variable)):
        t = convert_to_tensor(training)
        if t.dtype != DType.bool or t.type.rank != 0:
            raise TypeMismatch(f"tf.layers.{layer}: a tensor training must be a scalar "
                               f"bool, got {t.type}")
        return t
    if not isinstance(training, (bool, np.bool_)):
        raise TypeMismatch(f"tf.layers.{layer}: training must be a bool or a scalar bool "
                           f"tensor, got {training!r}")
    return bool(training)


def dropout(inputs: TensorLike, rate: float = 0.5, noise_shape: Any = None,
            seed: int | None = None, training: Any = False,
            name: str | None = None) -> Tensor:
    """``tf.nn.dropout(inputs, rate)`` when ``training``, else ``inputs`` unchanged (the
    default: ``training=False``, as TF). ``training`` may be a scalar bool placeholder:
    both values are computed and ``where`` picks one each step."""
    _no_extras("dropout", noise_shape=noise_shape)
    x = _float_input("dropout", inputs)
    train = _training("dropout", training)
    if train is False:
        return x
    dropped = nn.dropout(x, rate=rate, seed=seed)
    if train is True:
        return dropped
    return ops.where(train, dropped, x)


def batch_normalization(inputs: TensorLike, axis: int = -1, momentum: float = 0.99,
                        epsilon: float = 1e-3, center: bool = True, scale: bool = True,
                        beta_initializer: Any = None, gamma_initializer: Any = None,
                        moving_mean_initializer: Any = None,
                        moving_variance_initializer: Any = None,
                        beta_regularizer: Any = None, gamma_regularizer: Any = None,
                        beta_constraint: Any = None, gamma_constraint: Any = None,
                        training: Any = False, trainable: bool = True,
                        name: str | None = None, reuse: Any = None, renorm: bool = False,
                        fused: Any = None) -> Tensor:
    """Batch normalization over every axis but ``axis`` (``tf.layers.batch_normalization``).

    Training (``training`` True, or a bool placeholder fed True) normalizes with the
    batch's mean and biased variance (``tfc.nn.moments``); otherwise with the moving ones.
    The moving averages are updated by ``moving -= (moving - batch) * (1 - momentum)``,
    two assigns added to ``UPDATE_OPS`` (with a placeholder ``training`` fed False they
    leave the averages unchanged, as TF's). TF's arithmetic, quirks included: ``1 -
    momentum`` is rounded to float32; where TF would use its fused kernel (``fused`` not
    False, float16/32 inputs of rank 4 normalized on axis 1 or 3) the decay is computed in
    float32 and the moving variance takes the batch's unbiased variance (``n / (n - 1)``
    times the biased one that normalizes the batch). Variables: ``gamma``, ``beta`` (trainable),
    ``moving_mean``, ``moving_variance``. tfc's assigns land at the end of the step, so
    run the updates in the training step (the ``control_dependencies`` idiom)."""
    _no_extras("batch_normalization", beta_regularizer=beta_regularizer,
               gamma_regularizer=gamma_regularizer, beta_constraint=beta_constraint,
               gamma_constraint=gamma_constraint)
    if renorm:
        raise TypeMismatch("tf.layers.batch_normalization: renorm is not supported")
    x = _float_input("batch_normalization", inputs)
    rank = x.type.rank
    if not isinstance(axis, int):
        raise TypeMismatch(f"tf.layers.batch_normalization: axis must be one int, got "
                           f"{axis!r}")
    if not -rank <= axis < rank:
        raise TypeMismatch(f"tf.layers.batch_normalization: axis {axis} out of range for "
                           f"{x.type}")
    ax = axis % rank
    channels = x.shape[ax]
    if channels is None:
        raise TypeMismatch(f"tf.layers.batch_normalization: the normalized axis must be "
                           f"static, got {x.type}")
    train = _training("batch_normalization", training)
    fused_kernel = (fused is not False and rank == 4 and ax in (1, 3)
                    and x.dtype in (DType.f16, DType.f32))
    if fused is True and not fused_kernel:
        raise TypeMismatch(f"tf.layers.batch_normalization: fused=True needs a float16 or "
                           f"float32 input of rank 4 normalized on axis 1 or 3, got "
                           f"{x.type} and axis {axis}")
    reduce_axes = [i for i in range(rank) if i != ax]
    bshape = [1] * rank
    bshape[ax] = int(channels)
    dt, c = x.dtype, [int(channels)]
    with variable_scope(name, default_name="batch_normalization", reuse=reuse):
        gamma = get_variable("gamma", c, dt, gamma_initializer or ones_initializer(),
                             trainable=trainable) if scale else None
        beta = get_variable("beta", c, dt, beta_initializer or zeros_initializer(),
                            trainable=trainable) if center else None
        moving_mean = get_variable("moving_mean", c, dt,
                                   moving_mean_initializer or zeros_initializer(),
                                   trainable=False)
        moving_var = get_variable("moving_variance", c, dt,
                                  moving_variance_initializer or ones_initializer(),
                                  trainable=False)
        if train is False:
            mean, var = moving_mean.value(), moving_var.value()
        else:
            batch_mean, batch_var = nn.moments(x, reduce_axes)
            if fused_kernel:  # (its moving variance is the unbiased one: n / (n - 1))
                n = ops.cast(ops.size(x), dt) * (1.0 / int(channels))
                moving_var_value = batch_var * (n / (n - 1.0))
                decay_value = float(np.float32(1.0) - np.float32(momentum))
            else:
                moving_var_value = batch_var
                decay_value = float(np.float32(1.0 - momentum))
            decay: Any = decay_value
            if train is True:
                mean, var = batch_mean, batch_var
            else:
                mean = ops.where(train, batch_mean, moving_mean)
                var = ops.where(train, batch_var, moving_var)
                decay = ops.where(train, ops.fill([], decay_value, dt), ops.fill([], 0.0, dt))
            for moving, batch in ((moving_mean, batch_mean), (moving_var, moving_var_value)):
                add_to_collection(GraphKeys.UPDATE_OPS,
                                  ops.assign_sub(moving, (moving - batch) * decay))

        def shaped(v: Any) -> Any:
            return None if v is None else ops.reshape(v, bshape)
        return nn.batch_normalization(x, shaped(mean), shaped(var), shaped(beta),
                                      shaped(gamma), epsilon)


__all__ = ["dense", "conv2d", "max_pooling2d", "average_pooling2d", "flatten", "dropout",
           "batch_normalization", "conv1d", "conv2d_transpose", "separable_conv2d"]
