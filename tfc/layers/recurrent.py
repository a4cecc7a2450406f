"""``LSTM`` and ``GRU``: recurrent layers, each one ``tfc.scan`` over time.

Inputs are batch-major ``[B, T, features]``. The input projection of every step is one
matrix product before the loop (``x @ kernel + bias``, ``[B, T, 4 units]``); the scan
carries ``(h, c)`` and adds only the recurrent product per step. Gates follow Keras's
layout and order in the kernels' columns: input ``i``, forget ``f``, cell candidate
``g``, output ``o``::

    z = x_t @ kernel + h @ recurrent_kernel + bias
    i, f, g, o = sigmoid(z_i), sigmoid(z_f), tanh(z_g), sigmoid(z_o)
    c = f * c + i * g;   h = o * tanh(c)

The state starts at zero; the forget gate's bias starts at one (Keras's
``unit_forget_bias``), so early in training the cell remembers rather than forgets.
Gradients flow through the scan (a reverse scan of the step's derivative).

``GRU`` is Keras's (gates update ``z``, reset ``r``, candidate ``h~`` in the kernels'
columns; by default ``reset_after``, Keras 3's and cuDNN's form, with separate input and
recurrent biases, ``bias`` of shape ``[2, 3 units]``)::

    x_z, x_r, x_h = split(x_t @ kernel + b_in);  r_z, r_r, r_h = split(h @ recurrent + b_rec)
    z, r = sigmoid(x_z + r_z), sigmoid(x_r + r_r);  h~ = tanh(x_h + r * r_h)
    h = z * h + (1 - z) * h~

(without ``reset_after``: ``h~ = tanh(x_h + (r * h) @ recurrent_h)``, one bias).

Both start their recurrent kernel ``orthogonal`` (Keras's default;
``tfc.layers.initializers.Orthogonal``: the same distribution, not Keras's values) and
take Keras's ``kernel_`` / ``recurrent_`` / ``bias_regularizer`` and ``..._constraint``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from tfc.api import ops
from tfc.api.control import scan
from tfc.api.graph import Tensor
from tfc.api.tensor import apply, constant
from tfc.errors import TypeMismatch
from tfc.ir.types import DType, TensorType
from tfc.layers import constraints, regularizers
from tfc.layers.base import Initializer, Layer, get_activation
from tfc.layers.core import float_dtype, static_dim


def _weight_args(kernel_regularizer: Any, recurrent_regularizer: Any, bias_regularizer: Any,
                 kernel_constraint: Any, recurrent_constraint: Any, bias_constraint: Any
                 ) -> dict[str, dict[str, Any]]:
    """``add_weight``'s regularizer and constraint per weight of a recurrent layer (bad
    names are errors here, at the layer's construction)."""
    r, c = regularizers.get, constraints.get
    return {"kernel": {"regularizer": r(kernel_regularizer), "constraint": c(kernel_constraint)},
            "recurrent": {"regularizer": r(recurrent_regularizer),
                          "constraint": c(recurrent_constraint)},
            "bias": {"regularizer": r(bias_regularizer), "constraint": c(bias_constraint)}}


class LSTM(Layer):
    """An LSTM over ``[B, T, features]``: the last ``h`` (``[B, units]``), or every ``h``
    (``[B, T, units]``) with ``return_sequences``; with ``return_state`` (Keras's) the list
    ``[output, h, c]`` of that output and the final state (``h`` and ``c``: ``[B, units]``
    each), as an encoder hands its state on."""

    def __init__(self, units: int, return_sequences: bool = False, return_state: bool = False,
                 kernel_initializer: str | Initializer = "glorot_uniform",
                 recurrent_initializer: str | Initializer = "orthogonal",
                 unit_forget_bias: bool = True, kernel_regularizer: Any = None,
                 recurrent_regularizer: Any = None, bias_regularizer: Any = None,
                 kernel_constraint: Any = None, recurrent_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._weight_args = _weight_args(kernel_regularizer, recurrent_regularizer,
                                         bias_regularizer, kernel_constraint,
                                         recurrent_constraint, bias_constraint)
        if units <= 0:
            raise TypeMismatch(f"LSTM: units must be positive, got {units}")
        self.units = int(units)
        self.return_sequences = return_sequences
        self.return_state = return_state
        self.kernel_initializer = kernel_initializer
        self.recurrent_initializer = recurrent_initializer
        self.unit_forget_bias = unit_forget_bias

    def _bias_init(self, shape: Sequence[int], dtype: DType) -> Any:
        b = np.zeros(shape, dtype=dtype.np)
        if self.unit_forget_bias:
            b[self.units:2 * self.units] = 1.0
        return constant(b)

    def build(self, input_type: TensorType) -> None:
        if input_type.rank != 3:
            raise TypeMismatch(f"LSTM '{self.name}' takes [batch, time, features] inputs, got "
                               f"{input_type}")
        self.dtype = float_dtype(self, input_type)
        n_in = static_dim(self, input_type, 2, "feature dim")
        u4, args = 4 * self.units, self._weight_args
        self.kernel = self.add_weight("kernel", (n_in, u4), self.kernel_initializer,
                                      **args["kernel"])
        self.recurrent_kernel = self.add_weight("recurrent_kernel", (self.units, u4),
                                                self.recurrent_initializer, **args["recurrent"])
        self.bias = self.add_weight("bias", (u4,), self._bias_init, **args["bias"])

    def call(self, x: Tensor, training: bool) -> Any:
        u = self.units
        proj = ops.transpose(ops.matmul(x, self.kernel) + self.bias, [1, 0, 2])  # [T, B, 4u]
        zero = apply("zeros_like", proj[0][:, :u])  # [B, u]: the batch may be symbolic
        recurrent = self.recurrent_kernel.value()

        def step(state: tuple[Tensor, Tensor], xw: Tensor) -> tuple[Tensor, Tensor]:
            h, c = state
            z = xw + ops.matmul(h, recurrent)
            i = ops.sigmoid(z[:, :u])
            f = ops.sigmoid(z[:, u:2 * u])
            g = ops.tanh(z[:, 2 * u:3 * u])
            o = ops.sigmoid(z[:, 3 * u:])
            c = f * c + i * g
            return o * ops.tanh(c), c

        hs, cs = scan(step, proj, initializer=(zero, zero))  # [T, B, u] each
        out = ops.transpose(hs, [1, 0, 2]) if self.return_sequences else hs[-1]
        return [out, hs[-1], cs[-1]] if self.return_state else out


class GRU(Layer):
    """A GRU over ``[B, T, features]`` (Keras's ``GRU``, its arguments and defaults but
    dropout): the last ``h`` (``[B, units]``), or every ``h`` with ``return_sequences``;
    with ``return_state`` the list ``[output, h]``. The state starts at zero."""

    def __init__(self, units: int, activation: str | Callable[[Tensor], Tensor] | None = "tanh",
                 recurrent_activation: str | Callable[[Tensor], Tensor] | None = "sigmoid",
                 use_bias: bool = True, kernel_initializer: str | Initializer = "glorot_uniform",
                 recurrent_initializer: str | Initializer = "orthogonal",
                 bias_initializer: str | Initializer = "zeros", return_sequences: bool = False,
                 return_state: bool = False, reset_after: bool = True,
                 kernel_regularizer: Any = None, recurrent_regularizer: Any = None,
                 bias_regularizer: Any = None, kernel_constraint: Any = None,
                 recurrent_constraint: Any = None, bias_constraint: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._weight_args = _weight_args(kernel_regularizer, recurrent_regularizer,
                                         bias_regularizer, kernel_constraint,
                                         recurrent_constraint, bias_constraint)
        if units <= 0:
            raise TypeMismatch(f"GRU: units must be positive, got {units}")
        self.units = int(units)
        self.activation = get_activation(activation)
        self.recurrent_activation = get_activation(recurrent_activation)
        self.use_bias, self.reset_after = use_bias, reset_after
        self.kernel_initializer = kernel_initializer
        self.recurrent_initializer = recurrent_initializer
        self.bias_initializer = bias_initializer
        self.return_sequences, self.return_state = return_sequences, return_state

    def build(self, input_type: TensorType) -> None:
        if input_type.rank != 3:
            raise TypeMismatch(f"GRU '{self.name}' takes [batch, time, features] inputs, got "
                               f"{input_type}")
        self.dtype = float_dtype(self, input_type)
        n_in = static_dim(self, input_type, 2, "feature dim")
        u3, args = 3 * self.units, self._weight_args
        self.kernel = self.add_weight("kernel", (n_in, u3), self.kernel_initializer,
                                      **args["kernel"])
        self.recurrent_kernel = self.add_weight("recurrent_kernel", (self.units, u3),
                                                self.recurrent_initializer, **args["recurrent"])
        self.bias = (self.add_weight("bias", (2, u3) if self.reset_after else (u3,),
                                     self.bias_initializer, **args["bias"])
                     if self.use_bias else None)

    def call(self, x: Tensor, training: bool) -> Any:
        u = self.units
        act = self.activation or (lambda t: t)
        gate = self.recurrent_activation or (lambda t: t)
        proj = ops.matmul(x, self.kernel)
        b_rec: Tensor | None = None
        if self.bias is not None:
            b = self.bias.value()
            proj = proj + (b[0] if self.reset_after else b)
            b_rec = b[1] if self.reset_after else None
        proj = ops.transpose(proj, [1, 0, 2])  # [T, B, 3u]
        zero = apply("zeros_like", proj[0][:, :u])  # [B, u]: the batch may be symbolic
        recurrent = self.recurrent_kernel.value()
        reset_after = self.reset_after

        def step(h: Tensor, xw: Tensor) -> Tensor:
            if reset_after:
                inner = ops.matmul(h, recurrent)
                if b_rec is not None:
                    inner = inner + b_rec
                z = gate(xw[:, :u] + inner[:, :u])
                r = gate(xw[:, u:2 * u] + inner[:, u:2 * u])
                hh = act(xw[:, 2 * u:] + r * inner[:, 2 * u:])
            else:
                inner = ops.matmul(h, recurrent[:, :2 * u])
                z = gate(xw[:, :u] + inner[:, :u])
                r = gate(xw[:, u:2 * u] + inner[:, u:])
                hh = act(xw[:, 2 * u:] + ops.matmul(r * h, recurrent[:, 2 * u:]))
            return z * h + (1.0 - z) * hh

        hs = scan(step, proj, initializer=zero)  # [T, B, u]
        out = ops.transpose(hs, [1, 0, 2]) if self.return_sequences else hs[-1]
        return [out, hs[-1]] if self.return_state else out
