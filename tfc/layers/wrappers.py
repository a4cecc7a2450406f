"""Layer wrappers: ``Bidirectional`` (a recurrent layer run forwards and backwards, the two
outputs merged) and ``TimeDistributed`` (a layer applied to each step of a sequence).

A wrapper's inner layers are its tracked sublayers: their weights are the wrapper's (the
forward layer's, then the backward's: Keras's order), built in the wrapper's name scope
(``bidirectional/forward_lstm/kernel``), and they take the wrapper's training mode.
"""

from __future__ import annotations

import copy
from typing import Any

from tfc.api import ops
from tfc.api.array_ops import reverse
from tfc.api.graph import Tensor
from tfc.api.tensor import apply
from tfc.errors import TypeMismatch
from tfc.layers.base import Layer
from tfc.layers.core import Dense, static_dim

MERGE_MODES = ("concat", "sum", "ave", "mul", None)


class Bidirectional(Layer):
    """``layer`` (an ``LSTM``, ``GRU`` or ``SimpleRNN``, not yet called) over the sequence
    and a copy of it with ``go_backwards`` (its own weights; or ``backward_layer``), their
    outputs merged by ``merge_mode``: ``"concat"`` (Keras's default: ``[..., 2 units]``),
    ``"sum"``, ``"ave"``, ``"mul"``, or ``None`` (the list ``[forward, backward]``). With
    ``return_sequences`` the backward sequence is flipped back to the input's order before
    the merge, as Keras's; with ``return_state`` the output is followed by the forward
    layer's states, then the backward's."""

    def __init__(self, layer: Layer, merge_mode: str | None = "concat",
                 backward_layer: Layer | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if merge_mode not in MERGE_MODES:
            raise TypeMismatch(f"Bidirectional: merge_mode must be one of "
                               f"{', '.join(map(repr, MERGE_MODES))}, got {merge_mode!r}")
        if not hasattr(layer, "go_backwards") or not hasattr(layer, "return_sequences"):
            raise TypeMismatch(f"Bidirectional wraps a recurrent layer (LSTM, GRU, SimpleRNN),"
                               f" got {layer!r}")
        for inner in (layer, backward_layer):
            if inner is not None and inner.built:
                raise TypeMismatch(f"Bidirectional: {inner!r} was already called; wrap a "
                                   f"fresh layer")
        if backward_layer is None:
            backward_layer = copy.deepcopy(layer)
            backward_layer.go_backwards = not layer.go_backwards
        elif not hasattr(backward_layer, "go_backwards"):
            raise TypeMismatch(f"Bidirectional: backward_layer must be a recurrent layer, got "
                               f"{backward_layer!r}")
        for attr in ("return_sequences", "return_state"):
            if getattr(layer, attr) != getattr(backward_layer, attr):
                raise TypeMismatch(f"Bidirectional: the forward and backward layers must "
                                   f"agree on {attr}")
        layer._given_name = "forward_" + layer._base()
        backward_layer._given_name = "backward_" + backward_layer._base()
        self.merge_mode = merge_mode
        self.forward_layer = layer  # tracked first: its weights come first, as Keras's
        self.backward_layer = backward_layer
        self.return_sequences = bool(getattr(layer, "return_sequences"))
        self.return_state = bool(getattr(layer, "return_state"))

    @property
    def uses_training(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.forward_layer, "uses_training", False)
                    or getattr(self.backward_layer, "uses_training", False))

    def call(self, x: Tensor, training: bool) -> Any:
        fwd = self.forward_layer(x, training=training)
        bwd = self.backward_layer(x, training=training)
        states: list[Tensor] = []
        if self.return_state:
            states = [*fwd[1:], *bwd[1:]]
            fwd, bwd = fwd[0], bwd[0]
        if self.return_sequences:
            bwd = reverse(bwd, 1)
        mode = self.merge_mode
        if mode is None:
            return [fwd, bwd, *states]
        out = (ops.concat([fwd, bwd], axis=-1) if mode == "concat"
               else fwd + bwd if mode == "sum"
               else (fwd + bwd) / 2.0 if mode == "ave"
               else fwd * bwd)
        return [out, *states] if states else out


class TimeDistributed(Layer):
    """``layer`` applied to each step of ``[B, T, ...]`` (one set of weights for all steps).
    A ``Dense`` (which maps the last axis, whatever the leading dims) is called on the
    input as it is; any other layer on the batch and time axes merged (``[B * T, ...]``),
    its result split back to ``[B, T, ...]`` with the input's batch dim (``T`` and the
    per-step dims must be static)."""

    def __init__(self, layer: Layer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(layer, Layer):
            raise TypeMismatch(f"TimeDistributed wraps a layer, got {layer!r}")
        if layer.built:
            raise TypeMismatch(f"TimeDistributed: {layer!r} was already called; wrap a fresh "
                               "layer")
        self.layer = layer

    @property
    def uses_training(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.layer, "uses_training", False))

    def call(self, x: Tensor, training: bool) -> Tensor:
        if x.type.rank < 3:
            raise TypeMismatch(f"TimeDistributed '{self.name}' takes [batch, time, ...] inputs"
                               f" (rank >= 3), got {x.type}")
        steps = static_dim(self, x.type, 1, "time dim")
        if isinstance(self.layer, Dense):
            return self.layer(x, training=training)
        inner = [static_dim(self, x.type, i, f"dim {i}") for i in range(2, x.type.rank)]
        y = self.layer(ops.reshape(x, [-1, *inner]), training=training)
        if not isinstance(y, Tensor):
            raise TypeMismatch(f"TimeDistributed '{self.name}': the wrapped layer must return "
                               f"one tensor, got {type(y).__name__}")
        out = [static_dim(self, y.type, i, f"output dim {i}") for i in range(1, y.type.rank)]
        # the shape [B, T, *out] with the input's batch dim (a reshape to -1 would lose it)
        corner = x[(slice(None), slice(None), *([slice(0, 1)] * len(inner)))]
        corner = ops.reshape(corner, [-1, steps] + [1] * len(out)) if len(inner) != len(
            out) else corner
        # (only its shape is read by reshape_like)
        like = corner + ops.zeros([1, 1, *out], x.dtype)
        return apply("reshape_like", y, like)
