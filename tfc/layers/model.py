"""``tfc.Sequential``: a stack of layers, a ``tfc.Model`` (``tfc.layers.engine``: Keras's
``compile`` / ``fit`` / ``evaluate`` / ``predict`` on the TF1 graph API).

A Sequential model has one input and one output, held as tensors (``model.inputs``,
``model.outputs``) rather than the lists of the other kinds. Its graphs: a placeholder
``x`` (batch dim ``B``), the layers applied to it (``training=False``), and after
``compile`` a placeholder ``y``, the training loss and metrics (the layers called again with
``training=True`` where one uses it: dropout), the optimizer's step, and the loss and
metrics on the inference outputs. ``export`` names the feeds ``x`` and ``y`` and the
fetches ``output`` (and ``classes`` for a classifier).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tfc.api import ops
from tfc.api.graph import Tensor, Variable, as_dtype, get_default_graph, user_location
from tfc.api.tensor import TensorLike, convert_to_tensor
from tfc.errors import FeedError, TfcError
from tfc.ir.types import DType
from tfc.layers.base import Layer
from tfc.layers.engine import (History, Model, _Training, compiled_loss, get_optimizer,
                               labels_array)
from tfc.layers.losses import Loss, get_metric
from tfc.layers.nodes import (collecting_losses, collecting_updates, default_training,
                              outermost_call, record_call)


class Sequential(Model):
    """Layers applied one after another (``tf.keras.Sequential``)."""

    _traces_in_build = True  # build makes the placeholder and calls the layers itself

    def __setattr__(self, key: str, value: Any) -> None:
        """Plain: a layer assigned as an attribute is not one of the stack (``add`` and
        ``layers=`` make it)."""
        object.__setattr__(self, key, value)

    def __init__(self, layers: Sequence[Layer] | None = None, name: str | None = None,
                 input_shape: Sequence[int | None] | None = None,
                 input_dtype: Any = None) -> None:
        super().__init__(name=name or "sequential")
        self._input_shape = None if input_shape is None else tuple(input_shape)
        self._input_dtype = None if input_dtype is None else as_dtype(input_dtype)
        self.input_names, self.output_names = ["x"], ["output"]
        for layer in layers or []:
            self.add(layer)

    # ---- structure ------------------------------------------------------------------------

    def add(self, layer: Layer | Tensor) -> None:
        """Append ``layer``; a ``tfc.keras.Input`` as the first item (Keras 3's
        ``Sequential([Input(shape), ...])``) gives the input's shape and dtype instead."""
        if self.built:
            raise TfcError(f"cannot add {layer} to model '{self.name}': it is already built")
        if isinstance(layer, Tensor) and layer.value.op is None:  # a placeholder: an Input
            if self.layers or self._input_shape is not None:
                raise TfcError(f"model '{self.name}': an Input must come first, and only "
                               f"once (got {layer})")
            self._input_shape = tuple(d if isinstance(d, int) else None
                                      for d in layer.type.shape[1:])
            self._input_dtype = layer.dtype
            return
        if not callable(layer):
            raise TfcError(f"{layer!r} is not a layer")
        self.layers.append(layer)

    @property
    def input_shape(self) -> tuple[int | None, ...] | None:
        """The input shape without the batch dim, where known (given, or once built)."""
        if self.inputs is not None:
            return self.inputs.shape[1:]
        first = self.layers[0].input_shape if self.layers else None
        return self._input_shape or first

    @property
    def uses_training(self) -> bool:
        return any(getattr(layer, "uses_training", False) for layer in self.layers)

    @property
    def variables(self) -> list[Variable]:
        return [v for layer in self.layers for v in layer.variables]

    @property
    def trainable_variables(self) -> list[Variable]:
        return [v for layer in self.layers for v in layer.trainable_variables]

    def call(self, inputs: TensorLike, training: bool = False) -> Tensor:
        """The layers applied to ``inputs`` in order, each with ``training``."""
        x = convert_to_tensor(inputs)
        for layer in self.layers:
            x = layer(x, training=training)
        return x

    def __call__(self, inputs: TensorLike, training: bool | None = None) -> Tensor:
        """The layers applied to ``inputs`` (a model is usable as a layer); ``training``
        defaults to the enclosing model call's (``nodes.training_scope``)."""
        given, training = training, default_training() if training is None else training
        x = given_input = convert_to_tensor(inputs)
        with outermost_call() as outermost:
            x = self.call(x, training=training)
        self.output_type = x.type
        if outermost:  # a model used as a layer of a Functional model
            record_call(self, given_input, x, given)
        return x

    def count_params(self) -> int:
        self._build_if_known()
        return sum(layer.count_params() for layer in self.layers)

    def _build_if_known(self) -> None:
        """Build now when the input shape is known (``input_shape=``, an ``Input``) and no
        layer is built yet: Keras builds such a model at once, so its weights, parameter
        count and summary are there before any data (``set_weights`` right away)."""
        if not self.built and self.layers and self.input_shape is not None and \
                not any(getattr(layer, "built", False) for layer in self.layers):
            self.build()

    # ---- building ---------------------------------------------------------------------------

    def build(self, input_shape: Sequence[int | None] | None = None, dtype: Any = None) -> None:
        """Make the input placeholder ``x`` (``[B, *input_shape]``) and the inference graph
        in the default graph. ``input_shape`` excludes the batch dim; by default the
        model's or its first layer's ``input_shape``."""
        if self.built:
            return
        if not self.layers:
            raise TfcError(f"model '{self.name}' has no layers")
        shape = input_shape if input_shape is not None else self.input_shape
        if shape is None:
            raise TfcError(f"model '{self.name}' does not know its input shape: pass "
                           "input_shape= to the model or its first layer, or call build(shape)",
                           user_location())
        dt = as_dtype(dtype) if dtype is not None else (self._input_dtype or DType.f32)
        self.graph = get_default_graph()
        with self.graph.as_default():
            self.inputs = self.graph.placeholder(dt, [None, *shape], "x")
            self.outputs = self(self.inputs, training=False)

    def _build_training(self, weighted: bool = False) -> _Training:
        """The label placeholder ``y``, the loss and metrics and the optimizer's step
        (``weighted``: the loss takes per-example weights, a placeholder
        ``sample_weight``)."""
        assert self.graph is not None and self.outputs is not None and self.inputs is not None
        loss, out = self.loss, self.outputs
        if not isinstance(loss, Loss) or self._loss_weights is not None:
            raise TfcError(f"model '{self.name}' is a Sequential: it has one output, so "
                           f"compile takes one loss and no loss_weights", user_location())
        if loss.sparse_labels:
            y = self.graph.placeholder(DType.i32, [None, *out.type.shape[1:-1]], "y")
        else:
            y = self.graph.placeholder(out.dtype, [None, *out.type.shape[1:]], "y")
        sw = self._sample_weight_placeholder() if weighted else None
        train_out, updates, added = out, [], []
        if self.uses_training:
            with collecting_updates() as updates, collecting_losses() as added:
                train_out = self(self.inputs, training=True)
        metric_fns = [get_metric(m, loss, out) for m in self._metric_specs]

        def losses_and_metrics(pred: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
            return (compiled_loss(loss, y, pred, sw, self.name),
                    {name: fn(y, pred) for name, fn in metric_fns})

        train_loss, train_metrics = losses_and_metrics(train_out)
        if train_out is out:
            eval_loss, eval_metrics = train_loss, train_metrics
        else:
            eval_loss, eval_metrics = losses_and_metrics(out)
        train_loss, eval_loss = self._with_added_losses(train_loss, eval_loss, added,
                                                        train_out is out)
        train_op = self._minimize(train_loss, updates)
        return _Training(y, train_loss, train_metrics, train_op, eval_loss, eval_metrics,
                         sample_weight=sw)

    # ---- the engine's hooks: one input tensor, one output tensor -------------------------------

    def _input_list(self) -> list[Tensor]:
        assert self.inputs is not None
        return [self.inputs]

    def _output_list(self) -> list[Tensor]:
        assert self.outputs is not None
        return [self.outputs]

    def _label_feeds(self, tr: _Training) -> list[tuple[str, Tensor]]:
        return [("y", tr.y)]

    def _predict_fetches(self) -> dict[str, Tensor]:
        """``output``, and ``classes`` (the argmax) for a classifier."""
        fetches: dict[str, Tensor] = {"output": self.outputs}
        if self.loss is not None and (self.loss.sparse_labels or
                                      self.loss.name == "categorical_crossentropy"):
            fetches["classes"] = ops.argmax(self.outputs, axis=-1, output_type=DType.i32)
        return fetches

    def _pack_outputs(self, results: list[np.ndarray]) -> np.ndarray:
        return results[0]

    def _prepare_x(self, x: Any) -> np.ndarray:
        arr = np.asarray(x)
        if not self.built:
            dt = self._input_dtype or (DType.f32 if arr.dtype.kind == "f" else
                                       DType.i32 if arr.dtype.kind in "iu" else None)
            if dt is None:
                raise FeedError(f"model '{self.name}': cannot take inputs of dtype {arr.dtype}")
            self.build(self.input_shape or arr.shape[1:], dt)
        assert self.inputs is not None
        want = self.inputs.type
        if arr.ndim != want.rank or any(isinstance(d, int) and d != s
                                        for d, s in zip(want.shape[1:], arr.shape[1:])):
            raise FeedError(f"model '{self.name}' takes x of type {want}, got an array of "
                            f"shape {list(arr.shape)}")
        return arr.astype(want.dtype.np, copy=False)

    def _prepare_y(self, y: Any) -> np.ndarray:
        t = self._require_training().y.type
        assert self.loss is not None  # compiled: _require_training checks it
        return labels_array(y, t, f"model '{self.name}' with loss {self.loss.name} takes y")


__all__ = ["Sequential", "History", "get_optimizer"]
