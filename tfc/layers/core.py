"""Core layers: ``Dense``, ``Flatten``, ``Reshape``, ``Dropout``, ``Embedding``, ``Lambda``
(Keras's names and defaults)."""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Sequence

from tfc.api import nn, ops
from tfc.api.graph import Tensor, Variable
from tfc.errors import TypeMismatch
from tfc.ir.types import DType, TensorType
from tfc.layers import constraints, regularizers
from tfc.layers.base import Initializer, Layer, get_activation


def static_dim(layer: Layer, t: TensorType, axis: int, what: str) -> int:
    """Dim ``axis`` of ``t``, which a layer needs known to shape its variables."""
    d = t.shape[axis]
    if not isinstance(d, int):
        raise TypeMismatch(f"{type(layer).__name__} '{layer.name}': the {what} of its input "
                           f"{t} must be known statically, not {d}")
    return d


def float_dtype(layer: Layer, t: TensorType) -> DType:
    """The layer's dtype: given, else its (float) input's."""
    if layer.dtype is not None:
        if t.dtype != layer.dtype:
            raise TypeMismatch(f"{type(layer).__name__} '{layer.name}' has dtype "
                               f"{layer.dtype.value} but its input is {t} (use tfc.cast)")
        return layer.dtype
    if not t.dtype.is_float:
        raise TypeMismatch(f"{type(layer).__name__} '{layer.name}' takes float inputs, got {t} "
                           "(use tfc.cast)")
    return t.dtype


class Dense(Layer):
    """``activation(x @ kernel + bias)`` over the last axis of ``x`` (any leading dims).
    ``kernel_regularizer`` / ``bias_regularizer`` add their penalties to ``losses``,
    ``kernel_constraint`` / ``bias_constraint`` project the weights after each update of
    ``fit`` (Keras's)."""

    def __init__(self, units: int, activation: str | Callable[[Tensor], Tensor] | None = None,
                 use_bias: bool = True, kernel_initializer: str | Initializer = "glorot_uniform",
                 bias_initializer: str | Initializer = "zeros", kernel_regularizer: Any = None,
                 bias_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kernel_regularizer, self.bias_regularizer = regularizers.get(
            kernel_regularizer), regularizers.get(bias_regularizer)
        self.kernel_constraint, self.bias_constraint = constraints.get(
            kernel_constraint), constraints.get(bias_constraint)
        if units <= 0:
            raise TypeMismatch(f"Dense: units must be positive, got {units}")
        self.units = int(units)
        self.activation = get_activation(activation)
        self.use_bias = use_bias
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer

    def build(self, input_type: TensorType) -> None:
        if input_type.rank < 1:
            raise TypeMismatch(f"Dense '{self.name}' needs inputs of rank >= 1, got {input_type}")
        self.dtype = float_dtype(self, input_type)
        n_in = static_dim(self, input_type, -1, "last dim")
        self.kernel = self.add_weight("kernel", (n_in, self.units), self.kernel_initializer,
                                      regularizer=self.kernel_regularizer,
                                      constraint=self.kernel_constraint)
        self.bias = (self.add_weight("bias", (self.units,), self.bias_initializer,
                                     regularizer=self.bias_regularizer,
                                     constraint=self.bias_constraint)
                     if self.use_bias else None)

    def call(self, x: Tensor, training: bool) -> Tensor:
        y = ops.matmul(x, self.kernel)
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y) if self.activation else y


class Flatten(Layer):
    """``[B, d1, d2, ...] -> [B, d1 * d2 * ...]``: the batch dim may be symbolic."""

    def call(self, x: Tensor, training: bool) -> Tensor:
        if x.type.rank < 2:
            return ops.reshape(x, [-1, 1])
        n = math.prod(static_dim(self, x.type, i, f"dim {i}") for i in range(1, x.type.rank))
        return ops.reshape(x, [-1, n])


class Reshape(Layer):
    """``[B, *in] -> [B, *target_shape]`` (Keras's ``Reshape``: ``target_shape`` excludes
    the batch dim; one entry may be -1, the size that keeps the element count, computed
    from the input's static dims). The batch dim may be symbolic."""

    def __init__(self, target_shape: Sequence[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        target = tuple(int(d) for d in target_shape)
        if sum(d == -1 for d in target) > 1 or any(d == 0 or d < -1 for d in target):
            raise TypeMismatch(f"Reshape: target_shape must be positive sizes with at most "
                               f"one -1, got {tuple(target_shape)}")
        self.target_shape = target

    def call(self, x: Tensor, training: bool) -> Tensor:
        n = math.prod(static_dim(self, x.type, i, f"dim {i}") for i in range(1, x.type.rank))
        known = math.prod(d for d in self.target_shape if d != -1)
        if (n % known if -1 in self.target_shape else n != known):
            raise TypeMismatch(f"Reshape '{self.name}': cannot reshape its input {x.type} "
                               f"({n} elements per example) to {self.target_shape}")
        target = [n // known if d == -1 else d for d in self.target_shape]
        return ops.reshape(x, [-1, *target])


class Dropout(Layer):
    """In a training graph, zero each element with probability ``rate`` and scale the rest
    by ``1 / (1 - rate)`` (so the expected value is unchanged); in an inference graph, the
    identity. The mask is fresh each step: ``random.uniform_like`` draws from the seed and
    the step number, shaped like the (possibly symbolic-batch) input."""

    uses_training = True

    def __init__(self, rate: float, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise TypeMismatch(f"Dropout: rate must be in [0, 1), got {rate}")
        self.rate, self.seed = float(rate), seed

    def call(self, x: Tensor, training: bool) -> Tensor:
        if not training:
            return x
        if not x.dtype.is_float:
            raise TypeMismatch(f"Dropout '{self.name}' takes float inputs, got {x.type}")
        return nn.dropout(x, self.rate, self.seed)


class Embedding(Layer):
    """Rows of a ``[input_dim, output_dim]`` table picked by integer ids: ``[...] ->
    [..., output_dim]``. Its gradient is sparse (the rows a batch used), so optimizers
    can update only those rows (with an ``embeddings_constraint``, which covers the whole
    table, ``fit`` makes it dense)."""

    def __init__(self, input_dim: int, output_dim: int,
                 embeddings_initializer: str | Initializer = "uniform",
                 embeddings_regularizer: Any = None, embeddings_constraint: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.embeddings_regularizer = regularizers.get(embeddings_regularizer)
        self.embeddings_constraint = constraints.get(embeddings_constraint)
        if input_dim <= 0 or output_dim <= 0:
            raise TypeMismatch(f"Embedding: input_dim and output_dim must be positive, got "
                               f"{input_dim} and {output_dim}")
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.embeddings_initializer = embeddings_initializer

    def build(self, input_type: TensorType) -> None:
        if not input_type.dtype.is_int:
            raise TypeMismatch(f"Embedding '{self.name}' takes integer ids, got {input_type}")
        self.embeddings = self.add_weight("embeddings", (self.input_dim, self.output_dim),
                                          self.embeddings_initializer,
                                          regularizer=self.embeddings_regularizer,
                                          constraint=self.embeddings_constraint)

    def call(self, x: Tensor, training: bool) -> Tensor:
        return ops.gather(self.embeddings, x)


class Lambda(Layer):
    """``function(inputs, **arguments)`` as a layer (Keras's ``Lambda``): a tensor, or a
    list of tensors when called on a list. A function with a ``training`` parameter gets
    the call's mode. ``output_shape`` is accepted for Keras's signature and unused (tfc
    infers the output's type from the ops). The function's variables, if it made any,
    would not be the layer's: write a ``Layer`` for weights."""

    def __init__(self, function: Callable[..., Any], output_shape: Any = None,
                 mask: Any = None, arguments: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not callable(function):
            raise TypeMismatch(f"Lambda: function must be callable, got {function!r}")
        if mask is not None:
            raise TypeMismatch("Lambda: masks are not supported (mask must be None)")
        self.function, self.output_shape = function, output_shape
        self.arguments = dict(arguments or {})
        try:
            params = inspect.signature(function).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        self._takes_training = "training" in params

    def __call__(self, inputs: Any, training: bool | None = None) -> Any:
        """As ``Layer.__call__``; a list of tensors is passed on as a list."""
        self.takes_list = isinstance(inputs, (list, tuple)) and any(
            isinstance(t, (Tensor, Variable)) for t in inputs)
        return super().__call__(inputs, training)

    def call(self, x: Any, training: bool) -> Any:
        extra = {"training": training} if self._takes_training else {}
        return self.function(x, **self.arguments, **extra)

    @property
    def uses_training(self) -> bool:  # type: ignore[override]
        return self._takes_training
