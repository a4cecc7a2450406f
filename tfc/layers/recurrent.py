"""``LSTM``, ``GRU`` and ``SimpleRNN``: recurrent layers, each one ``tfc.scan`` over time.

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

``SimpleRNN`` is Keras's: ``h = activation(x_t @ kernel + bias + h @ recurrent_kernel)``.

Each takes Keras's ``go_backwards``: the steps are read last to first, and the sequence
returned (``return_sequences``) is in that reversed order, as Keras's (``Bidirectional``
flips it back).

All start their recurrent kernel ``orthogonal`` (Keras's default;
``tfc.layers.initializers.Orthogonal``: the same distribution, not Keras's values) and
take Keras's ``kernel_`` / ``recurrent_`` / ``bias_regularizer`` and ``..._constraint``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from tfc.api import nn, ops
from tfc.api.array_ops import reverse
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


class _DropoutMasks:
    """Keras 3's RNN dropout (``DropoutRNNCell``), for a layer whose kernels hold ``gates``
    blocks of ``units`` columns: in a training call, masks of ``0`` or ``1 / (1 - rate)``
    drawn once per call (the same mask at every time step, a fresh one each training
    step), ``[B, features]`` on the inputs (``dropout``) and ``[B, units]`` on the state
    that enters the recurrent product (``recurrent_dropout``). As Keras: with a
    ``recurrent_dropout`` each gate has its own masks (Keras's ``implementation=1``), else
    one input mask serves all gates; the state carried on is not masked."""

    def __init__(self, layer: Layer, dropout: float, recurrent_dropout: float,
                 seed: int | None) -> None:
        for name, rate in (("dropout", dropout), ("recurrent_dropout", recurrent_dropout)):
            if not 0.0 <= rate < 1.0:
                raise TypeMismatch(f"{type(layer).__name__}: {name} must be in [0, 1), got "
                                   f"{rate}")
        self.dropout, self.recurrent_dropout = float(dropout), float(recurrent_dropout)
        self.seed = seed
        self._draws = 0
        # the masks of the latest training call: per gate (or one) on the inputs, per
        # gate on the recurrent state (empty: none)
        self.input_masks: list[Tensor] = []
        self.recurrent_masks: list[Tensor] = []

    @property
    def per_gate(self) -> bool:
        return self.recurrent_dropout > 0.0

    def _masks(self, like: Tensor, rate: float, count: int) -> list[Tensor]:
        ones = ops.ones_like(like)
        out = []
        for _ in range(count):
            seed = None if self.seed is None else self.seed + self._draws
            self._draws += 1
            out.append(nn.dropout(ones, rate, seed))
        return out

    def inputs(self, x: Tensor, training: bool, gates: int) -> list[Tensor] | None:
        """Per gate (or one for all) the input masked, or None: no input dropout."""
        if not (training and self.dropout > 0.0):
            return None
        masks = self._masks(x[:, 0, :], self.dropout, gates if self.per_gate else 1)
        self.input_masks = masks
        return [x * ops.expand_dims(m, 1) for m in masks]

    def recurrent(self, zero: Tensor, training: bool, gates: int) -> list[Tensor] | None:
        """Per gate the recurrent state's mask (``[B, units]``), or None."""
        if not (training and self.recurrent_dropout > 0.0):
            return None
        self.recurrent_masks = self._masks(zero, self.recurrent_dropout, gates)
        return self.recurrent_masks


def _project(xs: list[Tensor] | None, x: Tensor, kernel: Any, units: int) -> Tensor:
    """``x @ kernel``, or with per-gate masked inputs ``xs`` each gate's block of columns
    from its own input (one masked input: the whole product from it)."""
    if xs is None:
        return ops.matmul(x, kernel)
    if len(xs) == 1:
        return ops.matmul(xs[0], kernel)
    return ops.concat([ops.matmul(xg, kernel[:, g * units:(g + 1) * units])
                       for g, xg in enumerate(xs)], axis=-1)


def _recurrent_product(h: Tensor, masks: list[Tensor] | None, kernel: Tensor, units: int,
                       gates: Sequence[int]) -> Tensor:
    """``h @ kernel[:, gates' blocks]``, each gate's block from ``h`` times its mask."""
    if masks is None:
        lo, hi = gates[0] * units, (gates[-1] + 1) * units
        return ops.matmul(h, kernel[:, lo:hi])
    parts = [ops.matmul(h * masks[g], kernel[:, g * units:(g + 1) * units]) for g in gates]
    return parts[0] if len(parts) == 1 else ops.concat(parts, axis=-1)


class _Recurrent(Layer):
    """What LSTM, GRU and SimpleRNN share: Keras's common arguments (units, the
    regularizers and constraints of kernel / recurrent kernel / bias, dropout masks,
    return_sequences / return_state, go_backwards) and their kernel and recurrent kernel,
    ``gates * units`` wide."""

    def _setup(self, units: int, kernel_initializer: str | Initializer,
               recurrent_initializer: str | Initializer, regularizers: tuple[Any, Any, Any],
               constraints: tuple[Any, Any, Any], dropout: float, recurrent_dropout: float,
               seed: int | None, return_sequences: bool, return_state: bool,
               go_backwards: bool) -> None:
        self._weight_args = _weight_args(*regularizers, *constraints)
        self._drop = _DropoutMasks(self, dropout, recurrent_dropout, seed)
        self.dropout, self.recurrent_dropout = self._drop.dropout, self._drop.recurrent_dropout
        self.uses_training = bool(dropout or recurrent_dropout)
        if units <= 0:
            raise TypeMismatch(f"{type(self).__name__}: units must be positive, got {units}")
        self.units = int(units)
        self.kernel_initializer = kernel_initializer
        self.recurrent_initializer = recurrent_initializer
        self.return_sequences, self.return_state = return_sequences, return_state
        self.go_backwards = bool(go_backwards)

    def _build_kernels(self, input_type: TensorType, gates: int) -> None:
        if input_type.rank != 3:
            raise TypeMismatch(f"{type(self).__name__} '{self.name}' takes [batch, time, "
                               f"features] inputs, got {input_type}")
        self.dtype = float_dtype(self, input_type)
        n_in = static_dim(self, input_type, 2, "feature dim")
        width, args = gates * self.units, self._weight_args
        self.kernel = self.add_weight("kernel", (n_in, width), self.kernel_initializer,
                                      **args["kernel"])
        self.recurrent_kernel = self.add_weight("recurrent_kernel", (self.units, width),
                                                self.recurrent_initializer, **args["recurrent"])


class LSTM(_Recurrent):
    """An LSTM over ``[B, T, features]``: the last ``h`` (``[B, units]``), or every ``h``
    (``[B, T, units]``) with ``return_sequences``; with ``return_state`` (Keras's) the list
    ``[output, h, c]`` of that output and the final state (``h`` and ``c``: ``[B, units]``
    each), as an encoder hands its state on. ``dropout`` / ``recurrent_dropout`` (training
    only) mask the inputs and the state entering the recurrent product, Keras 3's way
    (``_DropoutMasks``); Keras's random draws differ, the distribution is the same."""

    def __init__(self, units: int, return_sequences: bool = False, return_state: bool = False,
                 kernel_initializer: str | Initializer = "glorot_uniform",
                 recurrent_initializer: str | Initializer = "orthogonal",
                 unit_forget_bias: bool = True, kernel_regularizer: Any = None,
                 recurrent_regularizer: Any = None, bias_regularizer: Any = None,
                 kernel_constraint: Any = None, recurrent_constraint: Any = None,
                 bias_constraint: Any = None, dropout: float = 0.0,
                 recurrent_dropout: float = 0.0, seed: int | None = None,
                 go_backwards: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._setup(units, kernel_initializer, recurrent_initializer,
                    (kernel_regularizer, recurrent_regularizer, bias_regularizer),
                    (kernel_constraint, recurrent_constraint, bias_constraint),
                    dropout, recurrent_dropout, seed, return_sequences, return_state,
                    go_backwards)
        self.unit_forget_bias = unit_forget_bias

    def _bias_init(self, shape: Sequence[int], dtype: DType) -> Any:
        b = np.zeros(shape, dtype=dtype.np)
        if self.unit_forget_bias:
            b[self.units:2 * self.units] = 1.0
        return constant(b)

    def build(self, input_type: TensorType) -> None:
        self._build_kernels(input_type, 4)
        self.bias = self.add_weight("bias", (4 * self.units,), self._bias_init,
                                    **self._weight_args["bias"])

    def call(self, x: Tensor, training: bool) -> Any:
        u = self.units
        x = reverse(x, 1) if self.go_backwards else x
        xs = self._drop.inputs(x, training, 4)
        proj = ops.transpose(_project(xs, x, self.kernel, u) + self.bias, [1, 0, 2])  # [T,B,4u]
        zero = apply("zeros_like", proj[0][:, :u])  # [B, u]: the batch may be symbolic
        recurrent = self.recurrent_kernel.value()
        masks = self._drop.recurrent(zero, training, 4)

        def step(state: tuple[Tensor, Tensor], xw: Tensor) -> tuple[Tensor, Tensor]:
            h, c = state
            z = xw + _recurrent_product(h, masks, recurrent, u, range(4))
            i = ops.sigmoid(z[:, :u])
            f = ops.sigmoid(z[:, u:2 * u])
            g = ops.tanh(z[:, 2 * u:3 * u])
            o = ops.sigmoid(z[:, 3 * u:])
            c = f * c + i * g
            return o * ops.tanh(c), c

        hs, cs = scan(step, proj, initializer=(zero, zero))  # [T, B, u] each
        out = ops.transpose(hs, [1, 0, 2]) if self.return_sequences else hs[-1]
        return [out, hs[-1], cs[-1]] if self.return_state else out


class GRU(_Recurrent):
    """A GRU over ``[B, T, features]`` (Keras's ``GRU``, its arguments and defaults;
    ``dropout`` / ``recurrent_dropout`` as LSTM's): the last ``h`` (``[B, units]``), or
    every ``h`` with ``return_sequences``; with ``return_state`` the list ``[output, h]``.
    The state starts at zero."""

    def __init__(self, units: int, activation: str | Callable[[Tensor], Tensor] | None = "tanh",
                 recurrent_activation: str | Callable[[Tensor], Tensor] | None = "sigmoid",
                 use_bias: bool = True, kernel_initializer: str | Initializer = "glorot_uniform",
                 recurrent_initializer: str | Initializer = "orthogonal",
                 bias_initializer: str | Initializer = "zeros", return_sequences: bool = False,
                 return_state: bool = False, reset_after: bool = True,
                 kernel_regularizer: Any = None, recurrent_regularizer: Any = None,
                 bias_regularizer: Any = None, kernel_constraint: Any = None,
                 recurrent_constraint: Any = None, bias_constraint: Any = None,
                 dropout: float = 0.0, recurrent_dropout: float = 0.0,
                 seed: int | None = None, go_backwards: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._setup(units, kernel_initializer, recurrent_initializer,
                    (kernel_regularizer, recurrent_regularizer, bias_regularizer),
                    (kernel_constraint, recurrent_constraint, bias_constraint),
                    dropout, recurrent_dropout, seed, return_sequences, return_state,
                    go_backwards)
        self.activation = get_activation(activation)
        self.recurrent_activation = get_activation(recurrent_activation)
        self.use_bias, self.reset_after = use_bias, reset_after
        self.bias_initializer = bias_initializer

    def build(self, input_type: TensorType) -> None:
        self._build_kernels(input_type, 3)
        u3 = 3 * self.units
        self.bias = (self.add_weight("bias", (2, u3) if self.reset_after else (u3,),
                                     self.bias_initializer, **self._weight_args["bias"])
                     if self.use_bias else None)

    def call(self, x: Tensor, training: bool) -> Any:
        u = self.units
        act = self.activation or (lambda t: t)
        gate = self.recurrent_activation or (lambda t: t)
        x = reverse(x, 1) if self.go_backwards else x
        proj = _project(self._drop.inputs(x, training, 3), x, self.kernel, u)
        b_rec: Tensor | None = None
        if self.bias is not None:
            b = self.bias.value()
            proj = proj + (b[0] if self.reset_after else b)
            b_rec = b[1] if self.reset_after else None
        proj = ops.transpose(proj, [1, 0, 2])  # [T, B, 3u]
        zero = apply("zeros_like", proj[0][:, :u])  # [B, u]: the batch may be symbolic
        recurrent = self.recurrent_kernel.value()
        reset_after = self.reset_after
        masks = self._drop.recurrent(zero, training, 3)

        def step(h: Tensor, xw: Tensor) -> Tensor:
            if reset_after:
                inner = _recurrent_product(h, masks, recurrent, u, range(3))
                if b_rec is not None:
                    inner = inner + b_rec
                z = gate(xw[:, :u] + inner[:, :u])
                r = gate(xw[:, u:2 * u] + inner[:, u:2 * u])
                hh = act(xw[:, 2 * u:] + r * inner[:, 2 * u:])
            else:
                inner = _recurrent_product(h, masks, recurrent, u, range(2))
                z = gate(xw[:, :u] + inner[:, :u])
                r = gate(xw[:, u:2 * u] + inner[:, u:])
                h_h = h if masks is None else h * masks[2]
                hh = act(xw[:, 2 * u:] + ops.matmul(r * h_h, recurrent[:, 2 * u:]))
            return z * h + (1.0 - z) * hh

        hs = scan(step, proj, initializer=zero)  # [T, B, u]
        out = ops.transpose(hs, [1, 0, 2]) if self.return_sequences else hs[-1]
        return [out, hs[-1]] if self.return_state else out


class SimpleRNN(_Recurrent):
    """A fully connected recurrent layer over ``[B, T, features]`` (Keras's ``SimpleRNN``,
    its arguments and defaults): ``h = activation(x_t @ kernel + bias + h @
    recurrent_kernel)`` from ``h = 0``; the last ``h`` (``[B, units]``), or every ``h``
    with ``return_sequences``; with ``return_state`` the list ``[output, h]``.
    ``dropout`` / ``recurrent_dropout`` (training only) mask the inputs and the state
    entering the recurrent product, one mask per call, as LSTM's."""

    def __init__(self, units: int, activation: str | Callable[[Tensor], Tensor] | None = "tanh",
                 use_bias: bool = True, kernel_initializer: str | Initializer = "glorot_uniform",
                 recurrent_initializer: str | Initializer = "orthogonal",
                 bias_initializer: str | Initializer = "zeros", kernel_regularizer: Any = None,
                 recurrent_regularizer: Any = None, bias_regularizer: Any = None,
                 kernel_constraint: Any = None, recurrent_constraint: Any = None,
                 bias_constraint: Any = None, dropout: float = 0.0,
                 recurrent_dropout: float = 0.0, return_sequences: bool = False,
                 return_state: bool = False, go_backwards: bool = False,
                 seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._setup(units, kernel_initializer, recurrent_initializer,
                    (kernel_regularizer, recurrent_regularizer, bias_regularizer),
                    (kernel_constraint, recurrent_constraint, bias_constraint),
                    dropout, recurrent_dropout, seed, return_sequences, return_state,
                    go_backwards)
        self.activation = get_activation(activation)
        self.use_bias = use_bias
        self.bias_initializer = bias_initializer

    def build(self, input_type: TensorType) -> None:
        self._build_kernels(input_type, 1)
        self.bias = (self.add_weight("bias", (self.units,), self.bias_initializer,
                                     **self._weight_args["bias"])
                     if self.use_bias else None)

    def call(self, x: Tensor, training: bool) -> Any:
        u = self.units
        act = self.activation or (lambda t: t)
        x = reverse(x, 1) if self.go_backwards else x
        proj = _project(self._drop.inputs(x, training, 1), x, self.kernel, u)
        if self.bias is not None:
            proj = proj + self.bias
        proj = ops.transpose(proj, [1, 0, 2])  # [T, B, u]
        zero = apply("zeros_like", proj[0])  # [B, u]: the batch may be symbolic
        recurrent = self.recurrent_kernel.value()
        masks = self._drop.recurrent(zero, training, 1)

        def step(h: Tensor, xw: Tensor) -> Tensor:
            return act(xw + _recurrent_product(h, masks, recurrent, u, range(1)))

        hs = scan(step, proj, initializer=zero)  # [T, B, u]
        out = ops.transpose(hs, [1, 0, 2]) if self.return_sequences else hs[-1]
        return [out, hs[-1]] if self.return_state else out
