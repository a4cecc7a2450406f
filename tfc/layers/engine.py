"""``tfc.Model``: the training engine every Keras-style model shares, and subclassing.

Keras's layering: ``Model`` is the engine (``compile``, ``fit``, ``evaluate``, ``predict``,
weights, callbacks, checkpoints, ``export``, ``summary``), and a model is one of its three
kinds: ``Sequential`` (``tfc.layers.model``: a stack of layers), ``Functional``
(``tfc.layers.functional``: ``Model(inputs, outputs)`` returns one, as Keras's does) or a
subclass with ``call``, which this module builds itself.

A model builds its graphs once, in the graph that is the default when it is first built:
placeholders for its inputs (batch dim ``B``), the inference outputs (``training=False``),
and after ``compile`` placeholders for the labels, the training loss and metrics
(``training=True``: dropout on), the optimizer's step, and the loss and metrics on the
inference outputs (what ``evaluate`` reports). Everything runs through one
``tfc.Session``, which compiles each distinct request once, so every batch after the
first costs one compiled step. ``export`` declares the same graphs as the entries
``predict``, ``evaluate`` and ``train_step`` of a model file, so ``tfc compile`` turns the
model into an artifact that ``tfc run --entry train_step`` trains.

The engine sees a model through a few hooks: its input and output tensors
(``_input_list``, ``_output_list``), the feeds' names (``_input_feeds``,
``_label_feeds``), how data becomes batches (``_prepare_x``, ``_prepare_y``) and how the
training graph is built (``_build_training``). Prepared batches are one array (a
``Sequential``) or a list of arrays, one per input or output.

Subclassing: ``class MyModel(tfc.Model)`` makes layers in ``__init__`` (attributes that are
layers, models or variables, or lists of them, are tracked in assignment order) and builds
its ops in ``call(inputs, training=False)``, traced like ``tfc.function`` on placeholders
shaped like the first data (or ``build(shape)``); ``training`` is the default of the layers
``call`` calls. As in Keras, a subclass may define ``build(input_shape)`` to make its own
weights with ``add_weight``: it is called once, on the first call, with the inputs' shapes
(batch dim first, ``None`` where unknown). ``compile(loss=..., loss_weights=...,
metrics=...)`` takes one value for every output, a list in output order or a dict by
output name; ``fit`` / ``evaluate`` / ``predict`` one array, a list (in input order) or a
dict (by input name) per input and output, or a ``tfc.data.Dataset`` of ``(x, y)``
elements of those.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from tfc.api import ops
from tfc.api.graph import (Graph, Operation, Tensor, Variable, as_dtype, get_default_graph,
                           user_location)
from tfc.api.session import Session, group
from tfc.callbacks.base import Callback, CallbackList
from tfc.errors import FeedError, TfcError, TypeMismatch
from tfc.ir.types import DType, TensorType
from tfc.layers.base import (Initializer, InputShape, Layer, _snake_case, activity_losses,
                             get_initializer, weight_penalties)
from tfc.layers.losses import Loss, get_loss, get_metric
from tfc.layers.nodes import (collecting_losses, collecting_updates, default_training, flatten,
                              outermost_call, pack, record_call, training_scope)
from tfc.layers.progress import FitProgress, format_metrics

# Optimizers by name that are not Keras's (``tfc.keras.optimizers`` has Keras's: sgd, adam,
# rmsprop, adagrad): (class name in ``tfc.train``, positional arguments).
_OPTIMIZERS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "momentum": ("MomentumOptimizer", (0.01, 0.9)),
}
_KERAS_OPTIMIZERS = ("sgd", "adam", "rmsprop", "adagrad")


def get_optimizer(spec: Any) -> Any:
    """A ``tfc.train`` optimizer, or one by name: Keras's (``tfc.keras.optimizers``, with
    Keras 3's defaults and update rules) or ``"momentum"`` (TF1's, rate 0.01, 0.9)."""
    known = ", ".join([*_KERAS_OPTIMIZERS, *_OPTIMIZERS])
    if not isinstance(spec, str):
        if not hasattr(spec, "minimize"):
            raise TfcError(f"optimizer {spec!r} has no minimize(loss); use a "
                           "tfc.train optimizer or one of: " + known)
        return spec
    if spec.lower() in _KERAS_OPTIMIZERS:
        from tfc.keras import optimizers
        return optimizers.get(spec)
    if spec.lower() not in _OPTIMIZERS:
        raise TfcError(f"unknown optimizer '{spec}' (known: {known})")
    import tfc.train
    cls, args = _OPTIMIZERS[spec.lower()]
    return getattr(tfc.train, cls)(*args)


class History(dict):
    """Per-epoch results of ``fit``: ``{"loss": [...], "accuracy": [...], "val_loss": ...}``
    (a dict; ``.history`` is the dict itself and ``.epoch`` the epoch numbers, as Keras)."""

    @property
    def history(self) -> dict[str, list[float]]:
        return self

    @property
    def epoch(self) -> list[int]:
        return list(range(len(next(iter(self.values()), []))))


@dataclass
class _Training:
    """The graphs ``compile`` asks for, built once per compile."""

    y: Any                            # the label placeholder (a list: one per output, Model)
    loss: Tensor                      # mean loss of the training graph
    metrics: dict[str, Tensor]        # on the training graph (dropout on)
    train_op: Operation
    eval_loss: Tensor                 # the same, on the inference graph
    eval_metrics: dict[str, Tensor] = field(default_factory=dict)
    feeds: list[Tensor] = field(default_factory=list)  # a step's placeholders: x.., y.., w
    sample_weight: Tensor | None = None  # the per-example weights' placeholder (fit's)


class Model:
    """A Keras model: ``Model(inputs, outputs)`` (a ``Functional`` model), or a subclass
    with ``call``; ``Sequential`` is one too.

    ``inputs`` and ``outputs`` are one tensor, a list or a dict of them; inputs are
    placeholders (``tfc.keras.Input``), and each output must depend on them only. Input
    names are the placeholders' (or the dict's keys); output names the layers' that made
    them (or the dict's keys): the keys of ``fit``'s dicts, ``compile``'s per-output losses
    and metrics, and the logged ``<output>_loss`` / ``<output>_<metric>``. ``inputs`` and
    ``outputs`` of a built model are lists (``input`` / ``output`` for one; a
    ``Sequential``'s are its one tensor each).
    """

    _tracked_variables: list[Variable]  # variables assigned as attributes or add_weight's
    layers: list[Any]  # the model's layers and nested models (a subclass's: as assigned)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """``Model(inputs, outputs)`` is a ``Functional`` model (as in Keras)."""
        if cls is Model and (args or "inputs" in kwargs or "outputs" in kwargs):
            from tfc.layers.functional import Functional
            return super().__new__(Functional)
        return super().__new__(cls)

    def __init__(self, inputs: Any = None, outputs: Any = None, name: str | None = None
                 ) -> None:
        if inputs is not None or outputs is not None:
            from tfc.layers.functional import Functional
            if not isinstance(self, Functional):  # Keras's "subclassed Functional"
                Functional.__init__(_as_functional(self), inputs, outputs, name)
                return
        object.__setattr__(self, "_tracked_variables", [])
        object.__setattr__(self, "layers", [])
        self.name = name or _snake_case(type(self).__name__)
        self.graph: Graph | None = None
        self.inputs: Any = None   # a list of placeholders (a Sequential's: one tensor)
        self.outputs: Any = None  # a list of tensors (a Sequential's: one tensor)
        self.input_names: list[str] = []
        self.output_names: list[str] = []
        self._input_kind, self._output_kind = "single", "single"
        self._input_shape: Any = None
        self.optimizer: Any = None
        self.loss: Any = None  # one Loss, or a list or dict of loss specs (one per output)
        self._metric_specs: Any = []
        self._loss_weights: Any = None
        self._training: _Training | None = None
        self._session: Session | None = None
        self.output_type: TensorType | None = None
        # the optimizer's learning rate as a variable (``learning_rate``), when it was a number
        self._lr_variable: Variable | None = None
        self.stop_training = False  # a callback sets it to end ``fit`` after this epoch
        # the tfc.distribute strategy compile ran in (None: none), and fit's step under it
        self._strategy: Any = None
        self._fit_step: Any = None
        # a subclass's own build(input_shape): called already / running now; tracing call now
        self._build_called = False
        self._own_build_running = False
        self._input_float_dtype: DType | None = None  # add_weight's default in build
        self._tracing = False
        if type(self).call is Model.call:
            raise TfcError("tfc.Model needs inputs and outputs (Model(inputs, outputs)), "
                           "or subclass it and define call(inputs, training=False)",
                           user_location())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's own ``build(input_shape)`` (Keras's: it makes weights) runs once,
        on the first call, with the inputs' shapes; ``model.build(shape, dtype)`` called
        from outside still traces the model (``Model.build``), which runs it then. A
        Sequential builds itself (``_traces_in_build``)."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("build")
        if own is not None and not getattr(cls, "_traces_in_build", False):
            cls.build = _own_build(own)  # type: ignore[method-assign]

    # ---- tracking (subclasses) ----------------------------------------------------------------

    def __setattr__(self, key: str, value: Any) -> None:
        """Layers, models and variables assigned as attributes (or in lists) are the
        model's, in assignment order (Keras's tracking)."""
        if not key.startswith("_") and key != "layers":
            tracked = self.__dict__.get("layers")
            for item in (value if isinstance(value, (list, tuple)) else [value]):
                if isinstance(item, (Layer, Model)):
                    if tracked is None:
                        raise TfcError(f"{type(self).__name__}: call super().__init__() "
                                       f"before assigning layers", user_location())
                    if not any(item is t for t in tracked):
                        tracked.append(item)
                elif isinstance(item, Variable) and "_tracked_variables" in self.__dict__:
                    if not any(item is v for v in self._tracked_variables):
                        self._tracked_variables.append(item)
        object.__setattr__(self, key, value)

    def add_weight(self, name: str = "weight", shape: Sequence[int] = (),
                   initializer: str | Initializer = "glorot_uniform", dtype: Any = None,
                   trainable: bool = True, regularizer: Any = None,
                   constraint: Any = None) -> Variable:
        """A variable ``<model>/<name>`` of the model, initialized by ``initializer``
        (Keras's ``add_weight``; in ``__init__`` or ``build``): trained by ``fit`` when
        ``trainable``, saved and restored with the model's weights. Its dtype by default:
        in ``build``, the first float input's; else f32. ``regularizer`` and
        ``constraint``: ``Layer.add_weight``'s."""
        from tfc.layers import constraints, regularizers
        init = get_initializer(initializer)
        dt = as_dtype(dtype) if dtype is not None else self._input_float_dtype or DType.f32
        dims = tuple(int(d) for d in shape)
        project = constraints.get(constraint)
        cls = Variable if project is None else constraints.ConstrainedVariable
        var = cls(lambda: init(dims, dt), trainable=trainable, name=f"{self.name}/{name}",
                  dtype=dt)
        var.regularizer = regularizers.get(regularizer)  # type: ignore[attr-defined]
        var.constraint = project  # type: ignore[attr-defined]
        self._tracked_variables.append(var)
        return var

    @property
    def built(self) -> bool:
        return self.outputs is not None

    @property
    def variables(self) -> list[Variable]:
        return _distinct([*(v for layer in self.layers for v in layer.variables),
                          *self._tracked_variables])

    @property
    def trainable_variables(self) -> list[Variable]:
        own = [v for v in self._tracked_variables if v.trainable]
        return _distinct([*(v for layer in self.layers for v in layer.trainable_variables),
                          *own])

    def count_params(self) -> int:
        return sum(int(np.prod(v.shape)) for v in self.variables)

    @property
    def uses_training(self) -> bool:
        """Whether the training graph differs from the inference graph: ``call`` takes
        ``training`` (a subclass: traced once per value)."""
        return _accepts_training(self.call)

    # ---- calling ----------------------------------------------------------------------------

    def call(self, inputs: Any, training: bool = False) -> Any:
        """The model's ops on ``inputs`` (a subclass defines this)."""
        raise TfcError(f"model '{self.name}' has no call: subclass tfc.Model and define "
                       f"call(inputs, training=False), or give Model(inputs, outputs)")

    def __call__(self, inputs: Any, training: bool | None = None) -> Any:
        """The model applied to tensors (a model is usable as a layer of another, where
        its call is recorded as one); ``training`` defaults to the enclosing model call's.
        The first call runs a subclass's own ``build(input_shape)`` first."""
        given, training = training, default_training() if training is None else training
        with training_scope(training), outermost_call() as outermost:
            self._maybe_build(inputs)
            if _accepts_training(self.call):
                out = self.call(inputs, training=training)
            else:
                out = self.call(inputs)
        first = flatten(out)[0][0]
        if isinstance(first, Tensor):
            self.output_type = first.type
        if outermost:
            record_call(self, inputs, out, given)
        return out

    def _maybe_build(self, inputs: Any) -> None:
        """A subclass's own ``build(input_shape)``, once, before its first call (Keras's):
        the shapes of ``inputs`` (``InputShape``s: the batch dim first, ``None`` where not
        static), in the structure of ``inputs``."""
        if self._build_called or type(self).build is Model.build:
            return
        self._build_called = True
        leaves, keys, kind = flatten(inputs)
        self._input_float_dtype = next((t.dtype for t in leaves
                                        if isinstance(t, Tensor) and t.dtype.is_float), None)
        self._own_build_running = True
        try:
            self.build(pack(kind, keys, [_shape_of(t) for t in leaves]))
        finally:
            self._own_build_running = False

    # ---- building a subclass ------------------------------------------------------------------

    @property
    def input_shape(self) -> Any:
        """The input shape without the batch dim (a list of them for several inputs)."""
        if self.inputs is None:
            return self._input_shape
        shapes = [t.shape[1:] for t in self._input_list()]
        return shapes[0] if len(shapes) == 1 else shapes

    def build(self, input_shape: Any = None, dtype: Any = None) -> None:
        """Trace ``call`` on placeholders (a subclass): ``input_shape`` excludes the batch
        dim and is one shape, a list or a dict of shapes (one placeholder each, named
        ``x``, ``x_0`` ..., or by the dict's keys), ``dtype`` one dtype or one per input.
        Called by a subclass's own ``build(input_shape)`` (``super().build``), it does
        nothing: the model is being traced already."""
        if self.built or self._tracing or self._own_build_running:
            return
        if input_shape is None:
            raise TfcError(f"model '{self.name}' does not know its input shape: call "
                           f"build(shape) or fit/predict on data first", user_location())
        self._trace(input_shape, dtype)

    def _trace(self, input_shape: Any, dtype: Any) -> None:
        """Make the placeholders and trace ``call`` on them (``build``)."""
        shapes, keys, kind = flatten(input_shape)
        if kind == "list" and all(isinstance(d, (int, type(None))) for d in shapes):
            shapes, keys, kind = [tuple(input_shape)], None, "single"
        dtypes = (list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * len(shapes))
        names = keys or (["x"] if kind == "single" else [f"x_{i}" for i in range(len(shapes))])
        self.graph = get_default_graph()
        self._tracing = True
        try:
            with self.graph.as_default():
                ins = [self.graph.placeholder(as_dtype(dt) if dt is not None else DType.f32,
                                              [None, *shape], name)
                       for shape, dt, name in zip(shapes, dtypes, names)]
                out = self(pack(kind, names, ins), training=False)
        finally:
            self._tracing = False
        outs, out_keys, self._output_kind = flatten(out)
        outs = _tensors(outs, f"model '{self.name}': call's results", user_location())
        self._input_kind, self.input_names, self.inputs = kind, names, ins
        self.output_names = out_keys or (["output"] if len(outs) == 1 else
                                         [f"output_{i}" for i in range(len(outs))])
        self.outputs = outs

    def _build_from(self, x: Any) -> None:
        """Build on placeholders shaped and typed like the data ``x``."""
        leaves, keys, kind = flatten(x)
        if kind == "list" and not all(_is_array(a) for a in leaves):
            leaves, keys, kind = [x], None, "single"  # one array given as nested lists
        arrays = [np.asarray(a) for a in leaves]
        dtypes = []
        for a in arrays:
            dt = (DType.f32 if a.dtype.kind == "f" else DType.i32 if a.dtype.kind in "iu"
                  else None)
            if dt is None:
                raise FeedError(f"model '{self.name}': cannot take inputs of dtype {a.dtype}")
            dtypes.append(dt)
        shapes = [a.shape[1:] for a in arrays]
        self._trace(shapes[0] if kind == "single" else pack(kind, keys or [], shapes)
                    if kind == "dict" else shapes, dtypes if kind != "single" else dtypes[0])

    # ---- the model's tensors and feeds (the engine's hooks) ----------------------------------

    def _input_list(self) -> list[Tensor]:
        """The input placeholders, in input order."""
        assert self.inputs is not None
        return list(self.inputs)

    def _output_list(self) -> list[Tensor]:
        """The inference outputs, in output order."""
        assert self.outputs is not None
        return list(self.outputs)

    def _input_feeds(self) -> list[tuple[str, Tensor]]:
        """The inputs by the names an entry (``export``, ``training_graph``) feeds them."""
        return list(zip(self.input_names, self._input_list()))

    def _label_feeds(self, tr: _Training) -> list[tuple[str, Tensor]]:
        """The label placeholders by the names an entry feeds them."""
        return [(y.name, y) for y in tr.y]

    def _predict_fetches(self) -> dict[str, Tensor]:
        """What the exported ``predict`` entry fetches, by name."""
        return dict(zip(self.output_names, self._output_list()))

    def _pack_outputs(self, results: list[np.ndarray]) -> Any:
        """``predict``'s arrays in the structure the outputs were given in."""
        return pack(self._output_kind, self.output_names, results)

    def _by_name(self, value: Any, names: list[str], what: str) -> list[Any]:
        """One leaf per name from one array, a list/tuple (in order) or a dict (by name)."""
        if isinstance(value, dict):
            unknown = [k for k in value if k not in names]
            missing = [n for n in names if n not in value]
            if unknown or missing:
                raise FeedError(f"model '{self.name}': {what} has the keys {sorted(value)}, "
                                f"expected {names}")
            return [value[n] for n in names]
        if isinstance(value, (list, tuple)) and len(names) == 1:
            return [value[0] if len(value) == 1 and _is_array(value[0]) else value]
        if isinstance(value, (list, tuple)):
            if len(value) != len(names):
                raise FeedError(f"model '{self.name}' takes {len(names)} {what} arrays "
                                f"({', '.join(names)}), got {len(value)}")
            return list(value)
        if len(names) != 1:
            raise FeedError(f"model '{self.name}' takes {len(names)} {what} arrays "
                            f"({', '.join(names)}): give a list or a dict")
        return [value]

    def _prepare_x(self, x: Any) -> Any:
        """``x`` as a prepared batch: one array per input, typed as its placeholder (the
        model built on it first when it is not built)."""
        if not self.built:
            self._build_from(x)
        arrays = []
        for name, t, leaf in zip(self.input_names, self._input_list(),
                                 self._by_name(x, self.input_names, "x")):
            arr, want = np.asarray(leaf), t.type
            if arr.ndim != want.rank or any(isinstance(d, int) and d != s
                                            for d, s in zip(want.shape[1:], arr.shape[1:])):
                raise FeedError(f"model '{self.name}' takes input '{name}' of type {want}, "
                                f"got an array of shape {list(arr.shape)}")
            arrays.append(arr.astype(want.dtype.np, copy=False))
        _same_lengths(arrays, self.input_names, f"model '{self.name}': x")
        return arrays

    def _prepare_y(self, y: Any) -> Any:
        """``y`` as a prepared batch: one array per output, typed as its label."""
        tr = self._require_training()
        arrays = [labels_array(leaf, t.type, f"model '{self.name}' takes y '{name}'")
                  for name, t, leaf in zip(self.output_names, tr.y,
                                           self._by_name(y, self.output_names, "y"))]
        _same_lengths(arrays, self.output_names, f"model '{self.name}': y")
        return arrays

    def _feed_dict(self, x: Any, y: Any, tr: _Training | None = None
                   ) -> dict[Tensor, np.ndarray]:
        """The feeds of one step on prepared batches ``x`` and ``y`` (for ``tr``'s graphs:
        with sample weights, ``y`` ends with them)."""
        feeds = (tr or self._require_training()).feeds
        if len(feeds) == 2 and not isinstance(x, list):  # one input, one label: the fast way
            return {feeds[0]: x, feeds[1]: y}
        return dict(zip(feeds, [*batch_arrays(x), *batch_arrays(y)]))

    # ---- training ---------------------------------------------------------------------------

    def compile(self, optimizer: Any = "rmsprop", loss: Any = "mse", metrics: Any = (),
                loss_weights: Any = None) -> None:
        """Choose the optimizer (a ``tfc.train`` optimizer or a name: adam, sgd, rmsprop,
        adagrad, momentum), the loss and the metrics, per output: ``loss`` is one loss for
        every output, a list (output order) or a dict (by output name); ``loss_weights``
        the same for the weights of the total loss (``sum(w * loss)``); ``metrics`` a list
        for every output or a list of lists / a dict of lists per output. The training
        graph is built when first needed (``fit``, ``evaluate``, ``export``). In a
        ``tfc.distribute`` strategy's ``scope()``, ``fit`` trains with that strategy."""
        self.optimizer = get_optimizer(optimizer)
        single = not isinstance(loss, (list, tuple, dict))
        self.loss = get_loss(loss) if single else loss
        self._metric_specs = metrics
        self._loss_weights = loss_weights
        self._training = None
        self._weighted_training: _Training | None = None
        self._lr_variable = None
        self._use_strategy()

    def _require_training(self, weighted: bool = False) -> _Training:
        """The training graphs of the last ``compile``, built on first use; ``weighted``:
        the ones whose losses take per-example weights (``fit(sample_weight=)``), a
        second set built when first asked for (its own optimizer step, on the same
        variables and slots)."""
        if weighted:
            tr = self.__dict__.get("_weighted_training")
            if tr is None:
                self._require_training()  # (the unweighted set first: its names and slots)
                assert self.graph is not None
                with self.graph.as_default():
                    tr = self._build_training(weighted=True)
                assert tr.sample_weight is not None
                tr.feeds = [*self._input_list(), *(t for _, t in self._label_feeds(tr)),
                            tr.sample_weight]
                self._weighted_training = tr
            return tr
        if self._training is not None:
            return self._training
        if self.loss is None:
            raise TfcError(f"model '{self.name}' must be compiled first (model.compile(...))",
                           user_location())
        if not self.built:
            raise TfcError(f"model '{self.name}' is not built yet: fit/evaluate/predict on "
                           f"data or build(shape) first", user_location())
        assert self.graph is not None
        with self.graph.as_default():
            tr = self._build_training()
        tr.feeds = [*self._input_list(), *(t for _, t in self._label_feeds(tr))]
        self._training = tr
        return tr

    def _build_training(self, weighted: bool = False) -> _Training:
        """The label placeholders, losses, metrics and optimizer step, per output: the
        training graph is ``call`` traced again with ``training=True`` where that differs
        (one graph when it computes the same). ``weighted``: the losses take per-example
        weights (a placeholder ``sample_weight``)."""
        assert self.graph is not None and self.outputs is not None
        outputs = self._output_list()
        losses = [get_loss(s) for s in self._per_output(self.loss, "loss", None)]
        weights = [float(w) for w in self._per_output(
            1.0 if self._loss_weights is None else self._loss_weights, "loss_weights", 1.0)]
        metric_specs = self._metrics_per_output()
        names, multi = self.output_names, len(outputs) > 1
        ys = []
        for name, out, loss in zip(names, outputs, losses):
            label = "y" if not multi else f"y_{name}"
            shape = out.type.shape[1:-1] if loss.sparse_labels else out.type.shape[1:]
            ys.append(self.graph.placeholder(DType.i32 if loss.sparse_labels else out.dtype,
                                             [None, *shape], label))
        sw = self._sample_weight_placeholder() if weighted else None
        train_outs, updates, added = outputs, [], []
        if self.uses_training:
            with collecting_updates() as updates, collecting_losses() as added:
                train_outs = self._leaves(self(self._packed_inputs(), training=True))
            if not updates and same_computation(train_outs, outputs):
                train_outs = outputs  # call ignored training: one graph, as Sequential
        metric_fns = [[get_metric(m, loss, out) for m in specs]
                      for specs, loss, out in zip(metric_specs, losses, outputs)]

        def losses_and_metrics(preds: list[Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
            total: Tensor | None = None
            logged: dict[str, Tensor] = {}
            for name, y, pred, loss, w in zip(names, ys, preds, losses, weights):
                part = compiled_loss(loss, y, pred, sw, self.name)
                if multi:
                    logged[f"{name}_loss"] = part
                term = part if w == 1.0 else part * w
                total = term if total is None else total + term
            for name, y, pred, fns in zip(names, ys, preds, metric_fns):
                for metric, fn in fns:
                    logged[f"{name}_{metric}" if multi else metric] = fn(y, pred)
            assert total is not None
            return total, logged

        train_loss, train_metrics = losses_and_metrics(train_outs)
        if train_outs is outputs:
            eval_loss, eval_metrics = train_loss, train_metrics
        else:
            eval_loss, eval_metrics = losses_and_metrics(outputs)
        train_loss, eval_loss = self._with_added_losses(train_loss, eval_loss, added,
                                                        train_outs is outputs)
        train_op = self._minimize(train_loss, updates)
        return _Training(ys, train_loss, train_metrics, train_op, eval_loss, eval_metrics,
                         sample_weight=sw)

    def _sample_weight_placeholder(self) -> Tensor:
        assert self.graph is not None
        return self.graph.placeholder(DType.f32, [None], "sample_weight")

    def _with_added_losses(self, train_loss: Tensor, eval_loss: Tensor, added: list[Tensor],
                           same_graph: bool) -> tuple[Tensor, Tensor]:
        """The training and evaluation losses plus the model's added losses, as Keras 3's
        ``compute_loss`` (for ``fit`` and ``evaluate`` alike): each activity penalty of
        that graph's call (``added``: those the training trace collected; the inference
        graph's when the model has one graph), then each trainable weight's regularizer
        penalty (the same tensors in both), each summed to a scalar and cast to the
        loss's dtype, added one after another."""
        penalties = weight_penalties(self.trainable_variables)
        inference = activity_losses(self.layers, False)
        train_extra = [*(inference if same_graph else added), *penalties]
        eval_extra = [*inference, *penalties]

        def plus(loss: Tensor, extra: list[Tensor]) -> Tensor:
            for t in extra:
                loss = loss + ops.cast(ops.reduce_sum(t), loss.dtype)
            return loss
        if same_graph and train_loss is eval_loss:
            total = plus(train_loss, train_extra)
            return total, total
        return plus(train_loss, train_extra), plus(eval_loss, eval_extra)

    @property
    def losses(self) -> list[Tensor]:
        """Keras's ``model.losses``: the activity penalties of the inference graph's
        layer calls, then each trainable weight's regularizer penalty (made now, in
        the model's graph), in the order ``fit`` adds them to the loss."""
        if self.graph is None:
            return []
        with self.graph.as_default():
            return [*activity_losses(self.layers, False),
                    *weight_penalties(self.trainable_variables)]

    def _per_output(self, spec: Any, what: str, default: Any) -> list[Any]:
        """One ``compile`` argument per output, from one value, a list or a dict."""
        names = self.output_names
        if isinstance(spec, dict):
            unknown = [k for k in spec if k not in names]
            if unknown:
                raise TfcError(f"model '{self.name}': compile's {what} names the output "
                               f"'{unknown[0]}', but the outputs are {names}")
            if default is None:
                missing = [n for n in names if n not in spec]
                if missing:
                    raise TfcError(f"model '{self.name}': compile's {what} has none for the "
                                   f"output '{missing[0]}'")
            return [spec.get(n, default) for n in names]
        if isinstance(spec, (list, tuple)):
            if len(spec) != len(names):
                raise TfcError(f"model '{self.name}': compile's {what} has {len(spec)} "
                               f"entries for {len(names)} outputs ({', '.join(names)})")
            return list(spec)
        return [spec] * len(names)

    def _metrics_per_output(self) -> list[list[Any]]:
        spec = self._metric_specs
        if isinstance(spec, dict) or (isinstance(spec, (list, tuple)) and spec and
                                      all(isinstance(m, (list, tuple)) for m in spec)):
            per = self._per_output(spec, "metrics", ())
            return [list(m) if isinstance(m, (list, tuple)) else [m] for m in per]
        return [list(spec)] * len(self.output_names)

    def _leaves(self, out: Any) -> list[Tensor]:
        """The output tensors of a call, in output order."""
        if isinstance(out, dict):
            return [out[n] for n in self.output_names]
        return flatten(out)[0]

    def _packed_inputs(self) -> Any:
        return pack(self._input_kind, self.input_names, self._input_list())

    def _use_strategy(self) -> None:
        """Train with the strategy of the ``tfc.distribute`` scope ``compile`` runs in."""
        from tfc.distribute.strategy import in_scope_strategy
        self._strategy = in_scope_strategy()

    def _training_step(self, tr: _Training, fetches: list[Tensor]) -> Any:
        """``fit``'s step on one minibatch ``(x, y)``, returning the fetched values: the
        session's, or under the model's strategy data-parallel over its replicas, every
        input and label split the same way (``tfc.distribute.fit``; ``finish_epoch()``
        brings its variables into the session)."""
        from tfc.distribute.fit import fit_step
        sess = self.session

        def one_device(xb: Any, yb: Any) -> Any:
            return sess.run([tr.train_op, fetches], self._feed_dict(xb, yb, tr))[1]
        labels = [t for _, t in self._label_feeds(tr)]
        if tr.sample_weight is not None:  # (split like the labels, which it ends)
            labels.append(tr.sample_weight)
        self._fit_step = fit_step(self._strategy, sess, self._input_list(), labels, fetches,
                                  tr.train_op, one_device, f"model '{self.name}'",
                                  self._fit_step)
        return self._fit_step

    def _minimize(self, loss: Tensor, updates: Sequence[Operation] = ()) -> Operation:
        """The optimizer's step on ``loss``, grouped with ``updates`` (the state updates
        of the training graph's layers: a BatchNormalization's moving statistics, computed
        from the step's batch before the weights change, as Keras's ``fit``). A learning
        rate given as a number is read from a non-trainable variable
        ``<model>/learning_rate`` instead of a constant, so that callbacks
        (``LearningRateScheduler``) can change it between steps without a recompile; the
        optimizer object itself is left as it was."""
        step = self._optimizer_step(loss)
        return group(step, *updates, name="train_step") if updates else step

    def _optimizer_step(self, loss: Tensor) -> Operation:
        opt = self.optimizer
        rate = getattr(opt, "_learning_rate", None)
        if not isinstance(rate, (int, float, np.floating, np.integer)) or isinstance(rate, bool):
            return self._apply_optimizer(loss)
        if self.__dict__.get("_lr_variable") is None:  # (fit's weighted step shares it)
            self._lr_variable = Variable(np.asarray(rate, dtype=np.float32), trainable=False,
                                         name=f"{self.name}/learning_rate")
        opt._learning_rate = self._lr_variable
        try:
            return self._apply_optimizer(loss)
        finally:
            opt._learning_rate = rate

    def _apply_optimizer(self, loss: Tensor) -> Operation:
        """``optimizer.minimize(loss)`` on the trainable variables; where some have a
        constraint (``Layer.add_weight(constraint=)``), their updates write the
        constrained value (``tfc.layers.constraints``), their gradients made dense."""
        from tfc.layers.constraints import ConstrainedVariable, constrained_updates
        opt, var_list = self.optimizer, self.trainable_variables
        constrained = [isinstance(v, ConstrainedVariable) for v in var_list]
        if not any(constrained):
            return opt.minimize(loss, var_list=var_list)
        pairs = opt.compute_gradients(loss, var_list)
        pairs = [(g.to_dense() if c and hasattr(g, "to_dense") else g, v)
                 for c, (g, v) in zip(constrained, pairs)]
        with constrained_updates():
            return opt.apply_gradients(pairs)

    @property
    def learning_rate(self) -> float:
        """The optimizer's current learning rate (settable between steps when the optimizer
        was given a number: see ``_minimize``)."""
        self._require_training()
        if self._lr_variable is None:
            raise TfcError(f"model '{self.name}': the learning rate of "
                           f"{type(self.optimizer).__name__} is a tensor or schedule, not a "
                           f"number the model can read or set")
        return float(self.session.variable_values()[self._lr_variable.name])

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self._require_training()
        rate = np.asarray(value, dtype=np.float32)
        if rate.shape != () or not np.isfinite(rate):
            raise TfcError(f"model '{self.name}': a learning rate must be one finite number, "
                           f"not {value!r}")
        if self._lr_variable is None:
            raise TfcError(f"model '{self.name}': cannot set the learning rate of "
                           f"{type(self.optimizer).__name__}: it was given as a tensor or "
                           f"schedule, not a number")
        self.session.variable_values()  # initialize everything else first
        self.session.variables[self._lr_variable.name] = rate

    # ---- running --------------------------------------------------------------------------

    @property
    def session(self) -> Session:
        """The session the model trains and predicts in (made on first use)."""
        if self._session is None:
            if self.graph is None:
                raise TfcError(f"model '{self.name}' is not built yet")
            self._session = Session(self.graph)
        return self._session

    @staticmethod
    def _batches(n: int, batch_size: int, order: np.ndarray | None = None
                 ) -> Iterator[np.ndarray | slice]:
        for start in range(0, n, batch_size):
            yield (slice(start, start + batch_size) if order is None
                   else order[start:start + batch_size])

    def _array_epochs(self, x: Any, y: Any, batch_size: int, shuffle: bool, seed: int,
                      what: str, sample_weight: Any = None
                      ) -> tuple[int, Callable[[], Iterator[tuple[Any, Any]]]]:
        """Steps per epoch and a function giving each epoch's ``(x, y)`` minibatches of
        arrays (a new order per epoch from a generator seeded with ``seed``); with
        ``sample_weight``, ``y`` is a list that ends with the batch's weights."""
        if y is None:
            raise TfcError(f"{what}: y is missing (give x and y arrays, or a tfc.data."
                           f"Dataset of (x, y) batches as x)", user_location())
        xa = self._prepare_x(x)
        ya = self._prepare_y(y)
        if sample_weight is not None:
            ya = [*batch_arrays(ya), self._prepare_sample_weight(sample_weight,
                                                                 num_examples(ya), what)]
        if num_examples(xa) != num_examples(ya):
            raise FeedError(f"{what}: x has {num_examples(xa)} examples but y has "
                            f"{num_examples(ya)}")
        if batch_size < 1:
            raise TfcError(f"{what}: batch_size must be >= 1, got {batch_size}")
        n = num_examples(xa)
        rng = np.random.default_rng(seed)

        def epoch() -> Iterator[tuple[Any, Any]]:
            order = rng.permutation(n) if shuffle else None
            for idx in self._batches(n, batch_size, order):
                yield take(xa, idx), take(ya, idx)
        return -(-n // batch_size), epoch

    def _prepare_sample_weight(self, sample_weight: Any, n: int, what: str) -> np.ndarray:
        """``fit``'s / ``evaluate``'s per-example weights: ``n`` finite numbers (an array
        ``[n]`` or ``[n, 1]``), as float32."""
        w = np.asarray(sample_weight)
        if w.ndim == 2 and w.shape[1] == 1:
            w = w[:, 0]
        if w.shape != (n,) or w.dtype.kind not in "fiub":
            raise FeedError(f"{what}: sample_weight must be {n} numbers (one per example), "
                            f"got an array of shape {list(w.shape)} and dtype {w.dtype}")
        w = w.astype(np.float32)
        if not np.isfinite(w).all():
            raise FeedError(f"{what}: sample_weight holds a non-finite value")
        return w

    def _dataset_epochs(self, dataset: Any, y: Any, steps_per_epoch: int | None, what: str,
                        epochs: int = 1
                        ) -> tuple[int | None, Callable[[], Iterator[tuple[Any, Any]]]]:
        """Steps per epoch (None: unknown) and each epoch's ``(x, y)`` batches of a
        ``tfc.data.Dataset``: a new pass per epoch (of ``epochs``, opened one after another
        with ``Dataset.epochs``: a prefetch makes the next epoch's first batches while this
        one's last steps run; the function's ``close`` stops its thread), or with
        ``steps_per_epoch`` that many batches of one pass that goes on across epochs (as
        Keras). An ``OutOfRangeError`` (a closed, empty queue behind the dataset) ends the
        epoch."""
        from tfc.data.dataset import INFINITE
        from tfc.errors import OutOfRangeError
        if y is not None:
            raise TfcError(f"{what}: y must be None when x is a Dataset (its elements are "
                           f"(x, y) batches)", user_location())
        if steps_per_epoch is not None and steps_per_epoch < 1:
            raise TfcError(f"{what}: steps_per_epoch must be >= 1, got {steps_per_epoch}")
        count = dataset.cardinality()
        if steps_per_epoch is None and count == INFINITE:
            raise TfcError(f"{what}: the dataset is endless (repeat()); give steps_per_epoch",
                           user_location())
        if not self.built:  # the input shape from a first element (a pass not counted)
            first = dataset.iterator()
            element = next(first, None)
            first.close()
            if isinstance(element, (tuple, list)) and len(element) == 2:
                self._prepare_x(element[0])
        shared = iter(dataset) if steps_per_epoch is not None else None
        passes: Any = dataset.epochs(epochs) if shared is None else None

        def epoch() -> Iterator[tuple[Any, Any]]:
            it = shared if shared is not None else next(passes)
            try:
                for _ in (range(steps_per_epoch) if steps_per_epoch is not None
                          else iter(int, 1)):
                    try:
                        element = next(it)
                    except (StopIteration, OutOfRangeError):
                        return
                    if not isinstance(element, (tuple, list)) or len(element) != 2:
                        raise FeedError(f"{what}: a dataset element must be an (x, y) pair "
                                        f"of batches, got {type(element).__name__}")
                    yield self._prepare_x(element[0]), self._prepare_y(element[1])
            finally:
                if shared is None:
                    it.close()  # (a prefetch thread goes on into the next epoch's pass)
        return (steps_per_epoch if steps_per_epoch is not None
                else count if count >= 0 else None), _Closing(epoch, passes or shared)

    def _epochs(self, x: Any, y: Any, batch_size: int, shuffle: bool, seed: int,
                steps_per_epoch: int | None, what: str, epochs: int = 1,
                sample_weight: Any = None
                ) -> tuple[int | None, Callable[[], Iterator[tuple[Any, Any]]]]:
        """Where ``fit``/``evaluate`` take their batches from (``epochs`` passes): arrays
        or a Dataset (then the function has a ``close``: ``fit`` calls it at its end)."""
        from tfc.data.dataset import Dataset
        if isinstance(x, Dataset):
            if sample_weight is not None:
                raise TfcError(f"{what}: sample_weight goes with x and y arrays, not a "
                               f"Dataset", user_location())
            return self._dataset_epochs(x, y, steps_per_epoch, what, epochs)
        return self._array_epochs(x, y, batch_size, shuffle, seed, what, sample_weight)

    def fit(self, x: Any, y: Any = None, epochs: int = 1, batch_size: int = 32,
            validation_data: tuple[Any, ...] | None = None, shuffle: bool = True,
            seed: int = 0, verbose: int = 1, steps_per_epoch: int | None = None,
            callbacks: Sequence[Callback] | None = None, sample_weight: Any = None
            ) -> History:
        """Train for ``epochs`` passes over ``(x, y)`` in minibatches (shuffled each epoch
        by a generator seeded with ``seed``), or over ``x``, a ``tfc.data.Dataset`` of
        ``(x, y)`` batches (``batch_size``, ``shuffle`` and ``seed`` are then the
        dataset's business; ``steps_per_epoch`` for an endless one); returns the
        per-epoch mean loss and metrics (and ``val_*`` on ``validation_data``, also shown
        in the epoch's progress line). ``callbacks`` (``tfc.callbacks``) are called at the
        start and end of training, of each epoch and of each batch; one that sets
        ``model.stop_training`` ends the training after the current batch. A model
        compiled in a ``tfc.distribute`` strategy's ``scope()`` trains data-parallel
        over its replicas, with the results of one device on the same global batch.
        ``sample_weight`` (one number per example of ``x`` / ``y`` arrays) weights each
        example's loss as Keras 3 does (the loss's ``reduction``: by default the sum of the
        weighted losses over the batch size); the metrics stay unweighted (Keras's
        ``metrics``, not ``weighted_metrics``). ``validation_data`` may be
        ``(x, y, sample_weight)``."""
        if epochs < 0:
            raise TfcError(f"fit: epochs must be >= 0, got {epochs}")
        steps, epoch_batches = self._epochs(x, y, batch_size, shuffle, seed, steps_per_epoch,
                                            "fit", epochs, sample_weight)
        tr = self._require_training(weighted=sample_weight is not None)
        names = ["loss", *tr.metrics]
        fetches = [tr.loss, *tr.metrics.values()]
        step = self._training_step(tr, fetches)
        history = History()
        hooks = self._callbacks(callbacks, epochs, steps, verbose)
        hooks.on_train_begin({})
        progress_bar = FitProgress(epochs, steps, verbose)  # type: ignore[arg-type]
        with progress_bar as progress, _closing(epoch_batches):
            for epoch in range(epochs):
                hooks.on_epoch_begin(epoch, {})
                progress.start_epoch(epoch)
                totals = np.zeros(len(names))
                seen = 0
                for batch, (xb, yb) in enumerate(epoch_batches()):
                    hooks.on_batch_begin(batch, {"batch": batch})
                    values = step(xb, yb)
                    totals += np.asarray(values, dtype=np.float64) * num_examples(xb)
                    seen += num_examples(xb)
                    progress.batch_done(dict(zip(names, totals / seen)))
                    hooks.on_batch_end(batch, {"batch": batch, "size": num_examples(xb),
                                               **_floats(names, totals / seen)})
                    if self.stop_training:
                        break
                step.finish_epoch()
                logs = _floats(names, totals / max(seen, 1))
                if validation_data is not None:
                    vx, vy, *vw = validation_data  # (x, y) or (x, y, sample_weight)
                    val = self.evaluate(vx, vy, sample_weight=vw[0] if vw else None)
                    logs.update({f"val_{k}": v for k, v in val.items()})
                hooks.on_epoch_end(epoch, logs)
                for k, v in logs.items():
                    history.setdefault(k, []).append(v)
                progress.end_epoch(logs)
                if self.stop_training:
                    break
        hooks.on_train_end({})
        return history

    def training_graph(self) -> Any:
        """The IR graph of one training step (``train_step(x, y) -> loss, metrics``), as
        ``fit`` runs it before optimization: for ``FileWriter.add_graph``."""
        from tfc.api.extract import extract
        tr = self._require_training()
        assert self.graph is not None
        feeds = [(n, t.value) for n, t in [*self._input_feeds(), *self._label_feeds(tr)]]
        fetches = [("loss", tr.loss.value), *((k, t.value) for k, t in tr.metrics.items())]
        return extract(self.graph.ir, "train_step", feeds, fetches, tr.train_op.ir_ops(),
                       what=f"model '{self.name}'")

    def _callbacks(self, callbacks: Sequence[Callback] | None, epochs: int, steps: int | None,
                   verbose: int) -> CallbackList:
        """``fit``'s callbacks, given the model and the run's parameters."""
        self.stop_training = False
        hooks = CallbackList(callbacks or [])
        hooks.set_model(self)
        hooks.set_params({"epochs": epochs, "steps": steps, "verbose": verbose})
        return hooks

    def save_weights(self, path: str | Any) -> str:
        """Save every variable of the model's graph (weights, optimizer slots, learning
        rate) and the step to a tfc checkpoint: ``path`` is a directory (the file is
        ``ckpt-<step>.tfckpt``, recorded in its index) or a ``.tfckpt`` file name."""
        from tfc.runtime.checkpoint import save_checkpoint
        sess = self.session
        return str(save_checkpoint(path, sess.variable_values(), sess.step))

    def load_weights(self, path: str | Any) -> None:
        """Restore the model from a checkpoint file or a directory's latest
        (``model.load_weights(tfc.train.latest_checkpoint(dir))``): every model weight
        must be there with its shape and dtype; the other variables of the graph that the
        checkpoint holds (optimizer slots of a compiled model, learning rate) are restored
        too, and the session's step. Variables are matched by name (a model built the
        same way in a new graph or process has the same names). Nothing changes when a
        check fails."""
        from tfc.runtime.checkpoint import CheckpointError, check_values, read_checkpoint
        if path is None:
            raise CheckpointError(f"model '{self.name}': load_weights got None (did "
                                  f"latest_checkpoint find no checkpoint?)")
        if not self.built:
            raise TfcError(f"model '{self.name}' is not built yet: build it (or fit or "
                           f"compile and build) before load_weights")
        if self.loss is not None:
            self._require_training()  # the optimizer's slots exist, to be restored too
        ckpt = read_checkpoint(path)
        graph_vars = self.session.graph.variables
        wanted = {v.name for v in self.variables} | {n for n in graph_vars if n in ckpt.values}
        values = check_values(ckpt, {n: graph_vars[n].decl for n in wanted},
                              allow_extra=True)
        self.session.variable_values()  # initialize everything else first
        self.session.variables.update(values)
        self.session.step = ckpt.step

    def evaluate(self, x: Any, y: Any = None, batch_size: int = 256, verbose: int = 0,
                 steps: int | None = None, sample_weight: Any = None) -> dict[str, float]:
        """Mean loss and metrics over ``(x, y)`` (or the ``(x, y)`` batches of ``x``, a
        ``tfc.data.Dataset``: one pass, or ``steps`` batches) on the inference graph (no
        dropout); ``sample_weight`` weights each example's loss (``fit``'s)."""
        _, batches = self._epochs(x, y, batch_size, False, 0, steps, "evaluate",
                                  sample_weight=sample_weight)
        tr = self._require_training(weighted=sample_weight is not None)
        names = ["loss", *tr.eval_metrics]
        fetches = [tr.eval_loss, *tr.eval_metrics.values()]
        totals = np.zeros(len(names))
        seen = 0
        for xb, yb in batches():
            values = self.session.run(fetches, self._feed_dict(xb, yb, tr))
            totals += np.asarray(values, dtype=np.float64) * num_examples(xb)
            seen += num_examples(xb)
        out = {k: float(v) for k, v in zip(names, totals / max(seen, 1))}
        if verbose:
            from rich.console import Console
            Console().print(format_metrics(out))
        return out

    def train_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None,
                       return_dict: bool = False) -> Any:
        """One optimizer step on the batch ``(x, y)`` (arrays, ``sample_weight`` as
        ``fit``'s), returning its loss and metrics as Keras 3: the loss alone when there
        are no metrics, else ``[loss, *metrics]`` (``fit``'s ``History`` order), or the
        dict with ``return_dict``; callbacks do not run."""
        tr, (xb, yb) = self._one_batch(x, y, sample_weight, "train_on_batch")
        names = ["loss", *tr.metrics]
        step = self._training_step(tr, [tr.loss, *tr.metrics.values()])
        values = step(xb, yb)
        step.finish_epoch()
        return _batch_logs(names, values, return_dict)

    def test_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None,
                      return_dict: bool = False) -> Any:
        """``evaluate`` on one batch ``(x, y)``, returned as ``train_on_batch``'s."""
        tr, (xb, yb) = self._one_batch(x, y, sample_weight, "test_on_batch")
        names = ["loss", *tr.eval_metrics]
        values = self.session.run([tr.eval_loss, *tr.eval_metrics.values()],
                                  self._feed_dict(xb, yb, tr))
        return _batch_logs(names, values, return_dict)

    def predict_on_batch(self, x: Any) -> Any:
        """``predict`` on one batch."""
        return self.predict(x, batch_size=max(1, num_examples(self._prepare_x(x))))

    def _one_batch(self, x: Any, y: Any, sample_weight: Any, what: str
                   ) -> tuple[_Training, tuple[Any, Any]]:
        """The training graphs for ``sample_weight`` and the prepared batch ``(x, y)``."""
        from tfc.data.dataset import Dataset
        if isinstance(x, Dataset):
            raise TfcError(f"{what} takes x and y arrays of one batch, not a Dataset",
                           user_location())
        n = num_examples(self._prepare_x(x))
        if n == 0:
            raise FeedError(f"{what}: the batch has no examples")
        _, batches = self._array_epochs(x, y, n, False, 0, what, sample_weight)
        tr = self._require_training(weighted=sample_weight is not None)
        return tr, next(iter(batches()))

    def predict(self, x: Any, batch_size: int = 256) -> Any:
        """The inference outputs for ``x``, computed in batches: one array, or a list or
        dict of them (as the model's outputs were given)."""
        xa = self._prepare_x(x)
        inputs, outputs = self._input_list(), self._output_list()
        parts = [self.session.run(outputs, dict(zip(inputs, batch_arrays(take(xa, idx)))))
                 for idx in self._batches(num_examples(xa), batch_size)]
        results = []
        for i, out in enumerate(outputs):
            if parts:
                results.append(np.concatenate([p[i] for p in parts]))
            else:
                shape = [0, *(d if isinstance(d, int) else 0 for d in out.type.shape[1:])]
                results.append(np.zeros(shape, dtype=out.dtype.np))
        return self._pack_outputs(results)

    def _build_if_known(self) -> None:
        """Build a model that knows its input before any data, where the kind of model
        can (``Sequential``); the others are built by construction or on data."""

    def get_weights(self) -> list[np.ndarray]:
        """The current values of the model's variables (layer by layer)."""
        self._build_if_known()
        values = self.session.variable_values()
        return [np.array(values[v.name]) for v in self.variables]

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Replace the model's variable values (in ``variables`` order)."""
        self._build_if_known()
        variables = self.variables
        if len(weights) != len(variables):
            raise TfcError(f"set_weights: model '{self.name}' has {len(variables)} variables, "
                           f"got {len(weights)} values")
        self.session.variable_values()  # initialize everything else first
        for var, w in zip(variables, weights):
            arr = np.asarray(w)
            if arr.shape != var.shape:
                raise TypeMismatch(f"set_weights: {var} got a value of shape {list(arr.shape)}")
            self.session.variables[var.name] = arr.astype(var.dtype.np)


    # ---- model files and display --------------------------------------------------------------

    def export(self, name_prefix: str = "") -> None:
        """Declare the model's entry points in its graph (for ``tfc compile``):
        ``predict`` (feeds by input name, fetches by output name), and once compiled
        ``evaluate(x, y) -> loss, metrics`` and ``train_step(x, y) -> loss, metrics``,
        which applies one optimizer step on the minibatch ``(x, y)``."""
        if not self.built:
            self.build(self._input_shape)
        assert self.graph is not None
        graph, loc = self.graph, user_location()
        feeds = dict(self._input_feeds())
        with graph.as_default():
            graph.entry(f"{name_prefix}predict", feeds, self._predict_fetches(), (), loc)
            if self.loss is not None:
                tr = self._require_training()
                feeds = {**feeds, **dict(self._label_feeds(tr))}
                graph.entry(f"{name_prefix}evaluate", feeds,
                            {"loss": tr.eval_loss, **tr.eval_metrics}, (), loc)
                graph.entry(f"{name_prefix}train_step", feeds,
                            {"loss": tr.loss, **tr.metrics}, [tr.train_op], loc)

    def summary(self, print_fn: Callable[[Any], None] | None = None) -> None:
        """A table of the layers, their output types and parameter counts."""
        self._build_if_known()
        from rich.console import Console
        from rich.table import Table
        table = Table(title=f"Model: {self.name}")
        for col in ("Layer (type)", "Output", "Params"):
            table.add_column(col)
        for layer in self.layers:
            out = str(layer.output_type) if getattr(layer, "output_type", None) else "?"
            table.add_row(f"{layer.name} ({type(layer).__name__})", out,
                          f"{layer.count_params():,}")
        table.caption = f"Total params: {self.count_params():,}"
        (print_fn or Console().print)(table)

    @property
    def input(self) -> Tensor:
        return self._one(self._input_list() if self.inputs is not None else None, "inputs")

    @property
    def output(self) -> Tensor:
        return self._one(self._output_list() if self.outputs is not None else None,
                         "outputs")

    def _one(self, tensors: list[Tensor] | None, what: str) -> Tensor:
        if tensors is None or len(tensors) != 1:
            raise TfcError(f"model '{self.name}' has {len(tensors or [])} {what}, not one")
        return tensors[0]


def compiled_loss(loss: Loss, y: Tensor, pred: Tensor, sample_weight: Tensor | None,
                  model: str) -> Tensor:
    """One output's loss in a compiled model, as Keras 3's ``CompileLoss`` calls the loss
    object: its per-example values weighted by ``sample_weight`` (None: unweighted) and
    reduced by its ``reduction``. A loss that does not reduce (``None`` / ``"none"``) is
    refused: fit and evaluate need one number per batch (Keras goes on with a vector)."""
    if loss.reduction in (None, "none"):
        raise TfcError(f"model '{model}': the loss '{loss.name}' has reduction="
                       f"{loss.reduction!r}, one value per example; compile needs a loss "
                       f"that reduces ('sum_over_batch_size', 'sum', "
                       f"'mean_with_sample_weight')", user_location())
    return loss.reduce(loss.values(y, pred), sample_weight)


def _batch_logs(names: list[str], values: Sequence[Any], as_dict: bool) -> Any:
    """``train_on_batch``'s result (Keras 3's): a dict, the one value, or the list."""
    logs = _floats(names, np.asarray(values, dtype=np.float64))
    if as_dict:
        return logs
    return logs["loss"] if len(logs) == 1 else list(logs.values())


def labels_array(y: Any, t: TensorType, what: str) -> np.ndarray:
    """``y`` as an array for the label placeholder of type ``t`` (``[N]`` labels also fit
    ``[N, 1]`` outputs); ``what`` starts the error (``model 'm' ... takes y``)."""
    arr = np.asarray(y)
    if arr.ndim == t.rank - 1 and t.shape[-1] == 1:  # labels [N] for outputs [N, 1]
        arr = arr[..., None]
    if arr.ndim != t.rank:
        raise FeedError(f"{what} of type {t}, got an array of shape {list(arr.shape)}")
    return arr.astype(t.dtype.np, copy=False)


def num_examples(batch: np.ndarray | list[np.ndarray]) -> int:
    """The examples in a prepared batch: one array, or a list of arrays (one per input or
    output of a ``Model``, of equal lengths)."""
    return len(batch[0]) if isinstance(batch, list) else len(batch)


def take(batch: np.ndarray | list[np.ndarray], idx: Any) -> np.ndarray | list[np.ndarray]:
    """The examples ``idx`` (a slice or indices) of a prepared batch."""
    return [a[idx] for a in batch] if isinstance(batch, list) else batch[idx]


class _Closing:
    """An epoch's batches (``fn()``) and ``close()``: stop what feeds them (a prefetch
    thread that goes on across epochs)."""

    def __init__(self, fn: Callable[[], Iterator[tuple[Any, Any]]], source: Any) -> None:
        self.fn, self.source = fn, source

    def __call__(self) -> Iterator[tuple[Any, Any]]:
        return self.fn()

    def close(self) -> None:
        if self.source is not None:
            self.source.close()


def _closing(epochs: Any) -> Any:
    """``with _closing(epoch_batches)``: closed at the end if it can be."""
    return contextlib.closing(epochs) if hasattr(epochs, "close") else contextlib.nullcontext()


def _floats(names: Sequence[str], values: np.ndarray) -> dict[str, float]:
    return {k: float(v) for k, v in zip(names, values)}


def batch_arrays(batch: np.ndarray | list[np.ndarray]) -> list[np.ndarray]:
    """The arrays of a prepared batch, one per input (or output), in order."""
    return batch if isinstance(batch, list) else [batch]


def same_computation(a: Sequence[Tensor], b: Sequence[Tensor]) -> bool:
    """Whether ``a`` and ``b`` are computed by the same ops (kinds, attrs, devices) from
    the same values: a subclass's ``call`` traced with ``training=True`` that did not use
    it, whose ops the model then leaves unused."""
    equal: set[tuple[int, int]] = set()
    todo = [(x.value, y.value) for x, y in zip(a, b)]
    while todo:
        u, v = todo.pop()
        if u is v or (id(u), id(v)) in equal:
            continue
        p, q = u.op, v.op
        if (p is None or q is None or u.index != v.index or p.kind != q.kind or p.regions
                or q.regions or p.device != q.device or len(p.inputs) != len(q.inputs)
                or p.attrs_key() != q.attrs_key()):
            return False
        equal.add((id(u), id(v)))
        todo.extend(zip(p.inputs, q.inputs))
    return len(a) == len(b)


def _as_functional(model: Model) -> Any:
    """``model``, a subclass's instance whose ``__init__`` called ``super().__init__(inputs,
    outputs)`` (Keras's "subclassed Functional"), made a ``Functional`` model: as Keras
    does, ``Model`` among its class's ancestors is replaced by ``Functional``, so the
    subclass keeps its own methods and attributes and trains, saves and loads as a
    Functional model (``type(model)`` stays the user's class)."""
    from tfc.layers.functional import Functional

    def inject(cls: type) -> type:
        if cls is Model:
            return Functional
        if not issubclass(cls, Model) or issubclass(cls, Functional):
            return cls
        cls.__bases__ = tuple(inject(base) for base in cls.__bases__)
        return cls
    inject(type(model))
    return model


def _accepts_training(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "training" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def _own_build(own: Callable[..., None]) -> Callable[..., None]:
    """A subclass's ``build``: its own code (``own``) when the model's first call runs it
    (``_maybe_build``, or a subclass's ``super().build``), else the engine's (trace)."""
    @functools.wraps(own)
    def build(self: Model, input_shape: Any = None, dtype: Any = None) -> None:
        if self._own_build_running:
            own(self, input_shape)
        else:
            Model.build(self, input_shape, dtype)
    return build


def _shape_of(value: Any) -> tuple[int | None, ...]:
    """The shape of a tensor (an ``InputShape``: ``None`` for a dim that is not static,
    and its type) or of an array."""
    return InputShape(value.type) if isinstance(value, Tensor) else tuple(np.shape(value))


def _tensors(values: list[Any], what: str, loc: Any) -> list[Tensor]:
    for v in values:
        if not isinstance(v, Tensor):
            raise TfcError(f"{what} must be tensors, got {type(v).__name__}", loc)
    return values


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or hasattr(value, "__array__")


def _distinct(variables: list[Variable]) -> list[Variable]:
    out: list[Variable] = []
    for v in variables:
        if not any(v is w for w in out):
            out.append(v)
    return out


def _same_lengths(arrays: list[np.ndarray], names: list[str], what: str) -> None:
    lengths = {len(a) for a in arrays}
    if len(lengths) > 1:
        detail = ", ".join(f"{n}: {len(a)}" for n, a in zip(names, arrays))
        raise FeedError(f"{what} arrays differ in their number of examples ({detail})")


__all__ = ["Model", "History", "get_optimizer"]
