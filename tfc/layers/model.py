"""``tfc.Sequential``: a stack of layers with Keras's ``compile`` / ``fit`` / ``evaluate`` /
``predict``, built on the TF1 graph API.

The model builds its graphs once, in the graph that is the default when it is first
built: a placeholder ``x`` (batch dim ``B``), the inference outputs (``training=False``),
and after ``compile`` a placeholder ``y``, the training loss and metrics
(``training=True``: dropout on), the optimizer's step, and the loss and metrics on the
inference outputs (what ``evaluate`` reports). Everything runs through one
``tfc.Session``, which compiles each distinct request once, so every batch after the
first costs one compiled step. ``export`` declares the same graphs as the entries
``predict``, ``evaluate`` and ``train_step`` of a model file, so ``tfc compile`` turns the
model into an artifact that ``tfc run --entry train_step`` trains. ``tfc.Model``
(``tfc.layers.functional``: the Functional API and subclassing) builds its graphs its own
way and trains through the same loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from tfc.api import ops
from tfc.api.graph import (Graph, Operation, Tensor, Variable, as_dtype, get_default_graph,
                           user_location)
from tfc.api.session import Session
from tfc.api.tensor import TensorLike, convert_to_tensor
from tfc.errors import FeedError, TfcError, TypeMismatch
from tfc.ir.types import DType, TensorType
from tfc.callbacks.base import Callback, CallbackList
from tfc.layers.base import Layer
from tfc.layers.losses import Loss, get_loss, get_metric
from tfc.layers.nodes import default_training, outermost_call, record_call
from tfc.layers.progress import FitProgress, format_metrics

# Optimizers by Keras name: (class name in ``tfc.train``, positional arguments).
_OPTIMIZERS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "adam": ("AdamOptimizer", (0.001,)),
    "sgd": ("GradientDescentOptimizer", (0.01,)),
    "rmsprop": ("RMSPropOptimizer", (0.001,)),
    "adagrad": ("AdagradOptimizer", (0.01,)),
    "momentum": ("MomentumOptimizer", (0.01, 0.9)),
}


def get_optimizer(spec: Any) -> Any:
    """A ``tfc.train`` optimizer, or one by Keras name with Keras's default rate."""
    if not isinstance(spec, str):
        if not hasattr(spec, "minimize"):
            raise TfcError(f"optimizer {spec!r} has no minimize(loss); use a "
                           "tfc.train optimizer or one of: " + ", ".join(_OPTIMIZERS))
        return spec
    if spec.lower() not in _OPTIMIZERS:
        raise TfcError(f"unknown optimizer '{spec}' (known: {', '.join(_OPTIMIZERS)})")
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


class Sequential:
    """Layers applied one after another (``tf.keras.Sequential``)."""

    def __init__(self, layers: Sequence[Layer] | None = None, name: str | None = None,
                 input_shape: Sequence[int | None] | None = None,
                 input_dtype: Any = None) -> None:
        self.name = name or "sequential"
        self.layers: list[Layer] = []
        self._input_shape = None if input_shape is None else tuple(input_shape)
        self._input_dtype = None if input_dtype is None else as_dtype(input_dtype)
        self.graph: Graph | None = None
        self.inputs: Tensor | None = None
        self.outputs: Tensor | None = None
        self.optimizer: Any = None
        self.loss: Loss | None = None
        self._metric_specs: list[Any] = []
        self._training: _Training | None = None
        self._session: Session | None = None
        self.output_type: TensorType | None = None
        # the optimizer's learning rate as a variable (``learning_rate``), when it was a number
        self._lr_variable: Variable | None = None
        self.stop_training = False  # a callback sets it to end ``fit`` after this epoch
        # the tfc.distribute strategy compile ran in (None: none), and fit's step under it
        self._strategy: Any = None
        self._fit_step: Any = None
        for layer in layers or []:
            self.add(layer)

    # ---- structure ------------------------------------------------------------------------

    def add(self, layer: Layer) -> None:
        if self.built:
            raise TfcError(f"cannot add {layer} to model '{self.name}': it is already built")
        if not callable(layer):
            raise TfcError(f"{layer!r} is not a layer")
        self.layers.append(layer)

    @property
    def built(self) -> bool:
        return self.outputs is not None

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

    def __call__(self, inputs: TensorLike, training: bool | None = None) -> Tensor:
        """The layers applied to ``inputs`` (a model is usable as a layer); ``training``
        defaults to the enclosing model call's (``nodes.training_scope``)."""
        given, training = training, default_training() if training is None else training
        x = given_input = convert_to_tensor(inputs)
        with outermost_call() as outermost:
            for layer in self.layers:
                x = layer(x, training=training)
        self.output_type = x.type
        if outermost:  # a model used as a layer of a Functional model
            record_call(self, given_input, x, given)
        return x

    def count_params(self) -> int:
        return sum(layer.count_params() for layer in self.layers)

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

    def compile(self, optimizer: Any = "rmsprop",
                loss: str | Loss | Callable[[Tensor, Tensor], Tensor] = "mse",
                metrics: Sequence[Any] = ()) -> None:
        """Choose the optimizer (a ``tfc.train`` optimizer or a name: adam, sgd, rmsprop,
        adagrad, momentum), the loss and the metrics; the training graph is built when
        first needed (``fit``, ``evaluate``, ``export``). In a ``tfc.distribute``
        strategy's ``scope()``, ``fit`` trains with that strategy."""
        self.optimizer = get_optimizer(optimizer)
        self.loss = get_loss(loss)
        self._metric_specs = list(metrics)
        self._training = None
        self._use_strategy()

    def _require_training(self) -> _Training:
        if self._training is not None:
            return self._training
        if self.loss is None:
            raise TfcError(f"model '{self.name}' must be compiled first (model.compile(...))",
                           user_location())
        assert self.graph is not None and self.outputs is not None and self.inputs is not None
        loss, out = self.loss, self.outputs
        with self.graph.as_default():
            if loss.sparse_labels:
                y = self.graph.placeholder(DType.i32, [None, *out.type.shape[1:-1]], "y")
            else:
                y = self.graph.placeholder(out.dtype, [None, *out.type.shape[1:]], "y")
            train_out = self(self.inputs, training=True) if self.uses_training else out
            metric_fns = [get_metric(m, loss, out) for m in self._metric_specs]

            def losses_and_metrics(pred: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
                return (ops.reduce_mean(loss(y, pred)),
                        {name: fn(y, pred) for name, fn in metric_fns})

            train_loss, train_metrics = losses_and_metrics(train_out)
            if train_out is out:
                eval_loss, eval_metrics = train_loss, train_metrics
            else:
                eval_loss, eval_metrics = losses_and_metrics(out)
            train_op = self._minimize(train_loss)
        self._training = _Training(y, train_loss, train_metrics, train_op, eval_loss,
                                   eval_metrics)
        return self._training

    def _use_strategy(self) -> None:
        """Train with the strategy of the ``tfc.distribute`` scope ``compile`` runs in."""
        from tfc.distribute.strategy import in_scope_strategy
        self._strategy = in_scope_strategy()

    def _training_step(self, tr: _Training, fetches: list[Tensor]) -> Any:
        """``fit``'s step on one minibatch ``(x, y)``, returning the fetched values: the
        session's, or under the model's strategy data-parallel over its replicas
        (``tfc.distribute.fit``; ``finish_epoch()`` brings its variables into the
        session)."""
        from tfc.distribute.fit import fit_step
        sess = self.session
        assert self.inputs is not None  # built: _require_training checks it

        def one_device(xb: Any, yb: Any) -> Any:
            return sess.run([tr.train_op, fetches], self._feed_dict(xb, yb))[1]
        if self._strategy is not None and self._strategy.cluster_spec is not None and \
                not (isinstance(self.inputs, Tensor) and isinstance(tr.y, Tensor)):
            raise TfcError(f"model '{self.name}': a distribution strategy trains models fed "
                           f"one input tensor and one label tensor so far; this one is fed "
                           f"lists (a Functional model): fit it outside the strategy's "
                           f"scope", user_location())
        self._fit_step = fit_step(self._strategy, sess, self.inputs, tr.y, fetches,
                                  tr.train_op, one_device, f"model '{self.name}'",
                                  self._fit_step)
        return self._fit_step

    def _minimize(self, loss: Tensor) -> Operation:
        """The optimizer's step on ``loss``. A learning rate given as a number is read from
        a non-trainable variable ``<model>/learning_rate`` instead of a constant, so that
        callbacks (``LearningRateScheduler``) can change it between steps without a
        recompile; the optimizer object itself is left as it was."""
        opt = self.optimizer
        rate = getattr(opt, "_learning_rate", None)
        if not isinstance(rate, (int, float, np.floating, np.integer)) or isinstance(rate, bool):
            return opt.minimize(loss, var_list=self.trainable_variables)
        self._lr_variable = Variable(np.asarray(rate, dtype=np.float32), trainable=False,
                                     name=f"{self.name}/learning_rate")
        opt._learning_rate = self._lr_variable
        try:
            return opt.minimize(loss, var_list=self.trainable_variables)
        finally:
            opt._learning_rate = rate

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

    def _feed_dict(self, x: Any, y: Any) -> dict[Tensor, np.ndarray]:
        """The feeds of one step on prepared batches ``x`` and ``y``."""
        return {self.inputs: x, self._require_training().y: y}

    @staticmethod
    def _batches(n: int, batch_size: int, order: np.ndarray | None = None
                 ) -> Iterator[np.ndarray | slice]:
        for start in range(0, n, batch_size):
            yield (slice(start, start + batch_size) if order is None
                   else order[start:start + batch_size])

    def _array_epochs(self, x: Any, y: Any, batch_size: int, shuffle: bool, seed: int,
                      what: str) -> tuple[int, Callable[[], Iterator[tuple[Any, Any]]]]:
        """Steps per epoch and a function giving each epoch's ``(x, y)`` minibatches of
        arrays (a new order per epoch from a generator seeded with ``seed``)."""
        if y is None:
            raise TfcError(f"{what}: y is missing (give x and y arrays, or a tfc.data."
                           f"Dataset of (x, y) batches as x)", user_location())
        xa = self._prepare_x(x)
        ya = self._prepare_y(y)
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

    def _dataset_epochs(self, dataset: Any, y: Any, steps_per_epoch: int | None, what: str
                        ) -> tuple[int | None, Callable[[], Iterator[tuple[Any, Any]]]]:
        """Steps per epoch (None: unknown) and each epoch's ``(x, y)`` batches of a
        ``tfc.data.Dataset``: a new pass per epoch, or with ``steps_per_epoch`` that many
        batches of one pass that goes on across epochs (as Keras). An ``OutOfRangeError``
        (a closed, empty queue behind the dataset) ends the epoch."""
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

        def epoch() -> Iterator[tuple[Any, Any]]:
            it = shared if shared is not None else iter(dataset)
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
                    it.close()  # a prefetch thread stops with its pass
        return (steps_per_epoch if steps_per_epoch is not None
                else count if count >= 0 else None), epoch

    def _epochs(self, x: Any, y: Any, batch_size: int, shuffle: bool, seed: int,
                steps_per_epoch: int | None, what: str
                ) -> tuple[int | None, Callable[[], Iterator[tuple[Any, Any]]]]:
        """Where ``fit``/``evaluate`` take their batches from: arrays or a Dataset."""
        from tfc.data.dataset import Dataset
        if isinstance(x, Dataset):
            return self._dataset_epochs(x, y, steps_per_epoch, what)
        return self._array_epochs(x, y, batch_size, shuffle, seed, what)

    def fit(self, x: Any, y: Any = None, epochs: int = 1, batch_size: int = 32,
            validation_data: tuple[Any, Any] | None = None, shuffle: bool = True,
            seed: int = 0, verbose: int = 1, steps_per_epoch: int | None = None,
            callbacks: Sequence[Callback] | None = None) -> History:
        """Train for ``epochs`` passes over ``(x, y)`` in minibatches (shuffled each epoch
        by a generator seeded with ``seed``), or over ``x``, a ``tfc.data.Dataset`` of
        ``(x, y)`` batches (``batch_size``, ``shuffle`` and ``seed`` are then the
        dataset's business; ``steps_per_epoch`` for an endless one); returns the
        per-epoch mean loss and metrics (and ``val_*`` on ``validation_data``, also shown
        in the epoch's progress line). ``callbacks`` (``tfc.callbacks``) are called at the
        start and end of training, of each epoch and of each batch; one that sets
        ``model.stop_training`` ends the training after the current batch. A model
        compiled in a ``tfc.distribute`` strategy's ``scope()`` trains data-parallel
        over its replicas, with the results of one device on the same global batch."""
        if epochs < 0:
            raise TfcError(f"fit: epochs must be >= 0, got {epochs}")
        steps, epoch_batches = self._epochs(x, y, batch_size, shuffle, seed, steps_per_epoch,
                                            "fit")
        tr = self._require_training()
        names = ["loss", *tr.metrics]
        fetches = [tr.loss, *tr.metrics.values()]
        step = self._training_step(tr, fetches)
        history = History()
        hooks = self._callbacks(callbacks, epochs, steps, verbose)
        hooks.on_train_begin({})
        with FitProgress(epochs, steps, verbose) as progress:  # type: ignore[arg-type]
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
                    val = self.evaluate(*validation_data)
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
        assert self.graph is not None and self.inputs is not None
        fetches = [("loss", tr.loss.value), *((k, t.value) for k, t in tr.metrics.items())]
        return extract(self.graph.ir, "train_step", [("x", self.inputs.value), ("y", tr.y.value)],
                       fetches, tr.train_op.ir_ops(), what=f"model '{self.name}'")

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
                 steps: int | None = None) -> dict[str, float]:
        """Mean loss and metrics over ``(x, y)`` (or the ``(x, y)`` batches of ``x``, a
        ``tfc.data.Dataset``: one pass, or ``steps`` batches) on the inference graph (no
        dropout)."""
        _, batches = self._epochs(x, y, batch_size, False, 0, steps, "evaluate")
        tr = self._require_training()
        names = ["loss", *tr.eval_metrics]
        fetches = [tr.eval_loss, *tr.eval_metrics.values()]
        totals = np.zeros(len(names))
        seen = 0
        for xb, yb in batches():
            values = self.session.run(fetches, self._feed_dict(xb, yb))
            totals += np.asarray(values, dtype=np.float64) * num_examples(xb)
            seen += num_examples(xb)
        out = {k: float(v) for k, v in zip(names, totals / max(seen, 1))}
        if verbose:
            from rich.console import Console
            Console().print(format_metrics(out))
        return out

    def predict(self, x: Any, batch_size: int = 256) -> np.ndarray:
        """The inference outputs for ``x``, computed in batches."""
        xa = self._prepare_x(x)
        parts = [self.session.run(self.outputs, {self.inputs: xa[idx]})
                 for idx in self._batches(len(xa), batch_size)]
        if not parts:
            assert self.outputs is not None
            shape = [0, *(d if isinstance(d, int) else 0 for d in self.outputs.type.shape[1:])]
            return np.zeros(shape, dtype=self.outputs.dtype.np)
        return np.concatenate(parts)

    def get_weights(self) -> list[np.ndarray]:
        """The current values of the model's variables (layer by layer)."""
        values = self.session.variable_values()
        return [np.array(values[v.name]) for v in self.variables]

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Replace the model's variable values (in ``variables`` order)."""
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

    # ---- model files --------------------------------------------------------------------------

    def export(self, name_prefix: str = "") -> None:
        """Declare the model's entry points in its graph (for ``tfc compile``):
        ``predict(x) -> output`` (and ``classes`` for a classifier), and once compiled
        ``evaluate(x, y) -> loss, metrics`` and ``train_step(x, y) -> loss, metrics``,
        which applies one optimizer step on the minibatch ``(x, y)``."""
        if not self.built:
            self.build()
        assert self.graph is not None and self.inputs is not None and self.outputs is not None
        graph = self.graph

        def entry(name: str, feeds: dict[str, Tensor], fetches: dict[str, Tensor],
                  targets: Sequence[Operation] = ()) -> None:  # what tfc.entry does
            graph.entry(name, feeds, fetches, targets, user_location())

        with self.graph.as_default():
            fetches: dict[str, Tensor] = {"output": self.outputs}
            if self.loss is not None and (self.loss.sparse_labels or
                                          self.loss.name == "categorical_crossentropy"):
                fetches["classes"] = ops.argmax(self.outputs, axis=-1, output_type=DType.i32)
            entry(f"{name_prefix}predict", feeds={"x": self.inputs}, fetches=fetches)
            if self.loss is not None:
                tr = self._require_training()
                feeds = {"x": self.inputs, "y": tr.y}
                entry(f"{name_prefix}evaluate", feeds=feeds,
                      fetches={"loss": tr.eval_loss, **tr.eval_metrics})
                entry(f"{name_prefix}train_step", feeds=feeds,
                      fetches={"loss": tr.loss, **tr.metrics}, targets=[tr.train_op])

    def summary(self, print_fn: Callable[[Any], None] | None = None) -> None:
        """A table of the layers, their output types and parameter counts."""
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


def _floats(names: Sequence[str], values: np.ndarray) -> dict[str, float]:
    return {k: float(v) for k, v in zip(names, values)}
