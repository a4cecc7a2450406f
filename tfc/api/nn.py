"""``tfc.nn``: neural-network ops with TensorFlow's names and keyword conventions."""

from __future__ import annotations

from typing import Sequence

from tfc.api.graph import Tensor
from tfc.api.ops import sigmoid, tanh  # noqa: F401  (tf.nn.sigmoid, tf.nn.tanh)
from tfc.api.tensor import TensorLike, apply, convert_to_tensor
from tfc.ir.types import DType


def relu(x: TensorLike, name: str | None = None) -> Tensor:
    return apply("relu", x, name=name)


def dropout(x: TensorLike, rate: float, seed: int | None = None) -> Tensor:
    """Zero each element with probability ``rate`` and scale the rest by ``1 / (1 - rate)``
    (``tf.nn.dropout``). The mask is fresh each step: ``random.uniform_like`` draws from
    the seed and the step number, shaped like the (possibly symbolic-batch) input."""
    from tfc.api import ops
    from tfc.errors import TypeMismatch
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


def softmax(logits: TensorLike, axis: int = -1, name: str | None = None) -> Tensor:
    return apply("softmax", logits, axis=axis, name=name)


def log_softmax(logits: TensorLike, axis: int = -1, name: str | None = None) -> Tensor:
    return apply("log_softmax", logits, axis=axis, name=name)


def softmax_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike,
                                      axis: int = -1) -> Tensor:
    return apply("softmax_cross_entropy", logits, labels, axis=axis)


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
