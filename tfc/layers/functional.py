"""``tfc.Model``: the Functional API and subclassed models, on ``Sequential``'s engine.

Functional: ``x = tfc.keras.Input(shape=(784,), name="pixels")`` is a placeholder of the
default graph (batch dim ``B``), layers called on it append their ops at once (graph mode,
as TensorFlow 1's Keras), and ``tfc.Model(inputs, outputs)`` takes the placeholders and the
tensors they lead to, one each or lists or dicts of them. Its inference graph is the one the
user built; its training graph (when a layer behaves differently in training: dropout) is
the same layer calls replayed with ``training=True`` (``tfc.layers.nodes``), as
``Sequential`` calls its layers again, so the three ways of writing one network give the
same IR. A layer called twice is one set of weights.

Subclassing: ``class MyModel(tfc.Model)`` makes layers in ``__init__`` (attributes that are
layers, models or variables, or lists of them, are tracked in assignment order) and builds
its ops in ``call(inputs, training=False)``, traced like ``tfc.function`` on placeholders
shaped like the first data (or ``build(shape)``); ``training`` is the default of the layers
``call`` calls.

Both kinds take ``compile(loss=..., loss_weights=..., metrics=...)`` per output (a list in
output order or a dict by output name), and ``fit`` / ``evaluate`` / ``predict`` take one
array, a list (in input order) or a dict (by input name) per input and output, or a
``tfc.data.Dataset`` of ``(x, y)`` elements of those. The training loop is
``Sequential``'s: this module only builds the graphs and prepares the feeds.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import numpy as np

from tfc.api import ops
from tfc.api.graph import Graph, Tensor, Variable, as_dtype, get_default_graph, user_location
from tfc.errors import FeedError, TfcError, TypeMismatch
from tfc.ir import core as ir
from tfc.ir.registry import make_op
from tfc.ir.types import DType
from tfc.layers.base import Layer, _snake_case
from tfc.layers.losses import get_loss, get_metric
from tfc.layers.model import Sequential, _Training, labels_array, num_examples, take
from tfc.layers.nodes import (Node, Ref, flatten, node_of, outermost_call, pack, producer,
                              record_call, training_scope)


def Input(shape: Sequence[int | None], dtype: Any = "float32",  # noqa: N802 (Keras)
          name: str | None = None,
          batch_size: int | None = None) -> Tensor:
    """A model input (``tf.keras.Input``): a placeholder ``[B, *shape]`` of the default
    graph (``batch_size`` fixes the batch dim), named ``name`` (by default ``input``,
    ``input_1`` ...); that name is the key of its arrays in ``fit``'s dicts."""
    if isinstance(shape, int):
        shape = (shape,)
    return get_default_graph().placeholder(as_dtype(dtype), [batch_size, *shape],
                                           name or "input")


# ---- structures of tensors and arrays ------------------------------------------------------

def _tensors(values: list[Any], what: str, loc: Any) -> list[Tensor]:
    for v in values:
        if not isinstance(v, Tensor):
            raise TfcError(f"{what} must be tensors, got {type(v).__name__}", loc)
    return values


def _unique(names: Sequence[str]) -> list[str]:
    """Names made unique with ``_1``, ``_2`` suffixes (two outputs of one layer)."""
    out: list[str] = []
    for n in names:
        name, i = n, 0
        while name in out:
            i += 1
            name = f"{n}_{i}"
        out.append(name)
    return out


def _short(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1]


# ---- the functional graph: which layer calls and ops lead from inputs to outputs ----------

def _producers(graph: Graph, outputs: Sequence[Tensor], stop: set[ir.Value]
               ) -> tuple[list[Node | ir.Op], set[ir.Value]]:
    """The layer calls and the ops outside layers that ``outputs`` depend on, back to the
    values in ``stop`` (the inputs), in the order they were built (a topological order);
    and the placeholders reached. A walk by hand, not recursion: models may be deep."""
    order = {id(op): i for i, op in enumerate(graph.ir.ops)}
    items: dict[int, tuple[tuple[int, int, int], Node | ir.Op]] = {}
    seen: set[ir.Value] = set()
    reached: set[ir.Value] = set()
    todo: list[tuple[ir.Value, Ref | None]] = [(t.value, producer(t, graph)) for t in outputs]
    while todo:
        v, ref = todo.pop()
        if ref is not None:
            node = ref[0]
            if id(node) not in items:
                items[id(node)] = ((node.mark, 0, node.seq), node)
                todo.extend((t.value, p) for t, p in zip(node.inputs, node.producers))
            continue
        if v in seen:
            continue
        seen.add(v)
        if v in stop or v.op is None:
            reached.add(v)
            continue
        index = order.get(id(v.op), len(order))
        items[id(v.op)] = ((index, 1, 0), v.op)
        todo.extend((u, producer(u, graph, index)) for u in v.op.inputs)
    return [item for _, item in sorted(items.values(), key=lambda kv: kv[0])], reached


def _replay(graph: Graph, plan: Sequence[Node | ir.Op], inputs: Sequence[Tensor],
            new_inputs: Sequence[Tensor], outputs: Sequence[Tensor], training: bool
            ) -> list[Tensor]:
    """The plan's layer calls made again on ``new_inputs`` (the same layers: shared
    weights) with ``training`` (unless a call was given its own); the ops outside layers
    are copied where one of their inputs changed. Returns the new ``outputs``. Tensors are
    known by the call output they are (a layer that returned its input made a tensor of
    its own), else by their value."""
    env: dict[Any, Tensor] = {a.value: b for a, b in zip(inputs, new_inputs)}
    order = {id(op): i for i, op in enumerate(graph.ir.ops)}
    for item in plan:
        if isinstance(item, Node):
            args = [env.get(p if p is not None else t.value, t)
                    for t, p in zip(item.inputs, item.producers)]
            for i, out in enumerate(item.call_again(args, training)):
                env[(item, i)] = out
            continue
        index = order.get(id(item), len(order))
        keys = [p if p is not None else u
                for u, p in ((u, producer(u, graph, index)) for u in item.inputs)]
        if not any(k in env for k in keys):
            continue  # independent of the inputs (a constant, a variable's read): shared
        values = [env[k].value if k in env else u for k, u in zip(keys, item.inputs)]
        op = make_op(item.kind, values, dict(item.attrs), device=item.device, loc=item.loc,
                     regions=item.regions, result_types=[r.type for r in item.results])
        graph.ir.append(op)
        for old, new in zip(item.results, op.results):
            env[old] = Tensor(graph, new)
    results = []
    for t in outputs:
        p = producer(t, graph)
        results.append(env.get(p if p is not None else t.value, t))
    return results


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


def _accepts_training(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "training" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


# ---- the model --------------------------------------------------------------------------

class Model(Sequential):
    """A Keras model: ``Model(inputs, outputs)`` (Functional) or a subclass with ``call``.

    ``inputs`` and ``outputs`` are one tensor, a list or a dict of them; inputs are
    placeholders (``tfc.keras.Input``), and each output must depend on them only. Input
    names are the placeholders' (or the dict's keys); output names the layers' that made
    them (or the dict's keys): the keys of ``fit``'s dicts, ``compile``'s per-output losses
    and metrics, and the logged ``<output>_loss`` / ``<output>_<metric>``. ``inputs`` and
    ``outputs`` of a built model are lists (``input`` / ``output`` for one).
    """

    _tracked_variables: list[Variable]  # variables assigned as attributes (subclasses)

    def __init__(self, inputs: Any = None, outputs: Any = None, name: str | None = None
                 ) -> None:
        object.__setattr__(self, "_tracked_variables", [])
        super().__init__(name=name or ("model" if type(self) is Model
                                       else _snake_case(type(self).__name__)))
        self.inputs: list[Tensor] | None = None  # type: ignore[assignment]
        self.outputs: list[Tensor] | None = None  # type: ignore[assignment]
        self.input_names: list[str] = []
        self.output_names: list[str] = []
        self._input_kind, self._output_kind = "single", "single"
        self._plan: list[Node | ir.Op] | None = None  # Functional: what __call__ replays
        self._loss_weights: Any = None
        if inputs is None and outputs is None:
            if type(self).call is Model.call:
                raise TfcError("tfc.Model needs inputs and outputs (Model(inputs, outputs)), "
                               "or subclass it and define call(inputs, training=False)",
                               user_location())
            return
        if inputs is None or outputs is None:
            raise TfcError("tfc.Model needs both inputs and outputs", user_location())
        self._build_functional(inputs, outputs, user_location())

    # ---- tracking (subclasses) ----------------------------------------------------------------

    def __setattr__(self, key: str, value: Any) -> None:
        """Layers, models and variables assigned as attributes (or in lists) are the
        model's, in assignment order (Keras's tracking)."""
        if not key.startswith("_") and key != "layers":
            tracked = self.__dict__.get("layers")
            for item in (value if isinstance(value, (list, tuple)) else [value]):
                if isinstance(item, (Layer, Sequential)):
                    if tracked is None:
                        raise TfcError(f"{type(self).__name__}: call super().__init__() "
                                       f"before assigning layers", user_location())
                    if not any(item is t for t in tracked):
                        tracked.append(item)
                elif isinstance(item, Variable):
                    self._tracked_variables.append(item)
        object.__setattr__(self, key, value)

    @property
    def variables(self) -> list[Variable]:
        return _distinct([*super().variables, *self._tracked_variables])

    @property
    def trainable_variables(self) -> list[Variable]:
        own = [v for v in self._tracked_variables if v.trainable]
        return _distinct([*super().trainable_variables, *own])

    def count_params(self) -> int:
        return sum(int(np.prod(v.shape)) for v in self.variables)

    def add(self, layer: Layer) -> None:
        raise TfcError(f"model '{self.name}' is not a Sequential: call layers on tensors "
                       f"(Functional) or in call (subclass)", user_location())

    # ---- Functional construction -------------------------------------------------------------

    def _build_functional(self, inputs: Any, outputs: Any, loc: Any) -> None:
        ins, in_keys, self._input_kind = flatten(inputs)
        outs, out_keys, self._output_kind = flatten(outputs)
        ins = _tensors(ins, f"model '{self.name}': inputs", loc)
        outs = _tensors(outs, f"model '{self.name}': outputs", loc)
        if not ins or not outs:
            raise TfcError(f"model '{self.name}' needs at least one input and one output", loc)
        graph = ins[0].graph
        for t in ins + outs:
            if t.graph is not graph:
                raise TfcError(f"model '{self.name}': its inputs and outputs must be in one "
                               f"graph", loc)
        for t in ins:
            if t.value.op is not None:
                raise TfcError(f"model '{self.name}': input {t} is not a placeholder "
                               f"(tfc.keras.Input)", loc)
        self.input_names = in_keys or _unique([_short(t.value.name or "input") for t in ins])
        stop = {t.value for t in ins}
        plan, used = _producers(graph, outs, stop)
        for name, t in zip(out_keys or [""] * len(outs), outs):
            _, reached = _producers(graph, [t], stop)
            described = name or _describe(t)
            strays = [v for v in reached if v not in stop]
            if strays:
                raise TfcError(f"model '{self.name}': output {described} depends on the "
                               f"placeholder '{strays[0].name}', which is not among the "
                               f"model's inputs", loc)
            if not reached & stop:
                raise TfcError(f"model '{self.name}': output {described} is not connected to "
                               f"the model's inputs", loc)
        for name, t in zip(self.input_names, ins):
            if t.value not in used:
                raise TfcError(f"model '{self.name}': input '{name}' is not used by any "
                               f"output (a dangling Input)", loc)
        self.output_names = out_keys or _unique([_output_name(t) for t in outs])
        self._plan = plan
        self.layers = _distinct_layers(item.layer for item in plan if isinstance(item, Node))
        self.graph = graph
        self.inputs, self.outputs = list(ins), list(outs)
        self.output_type = outs[0].type

    @property
    def uses_training(self) -> bool:
        """Whether the training graph differs: a layer uses ``training`` (Functional), or
        ``call`` takes it (subclass: traced once per value)."""
        if self._plan is None and type(self).call is not Model.call:
            return _accepts_training(self.call)
        return any(getattr(layer, "uses_training", False) for layer in self.layers)

    # ---- calling --------------------------------------------------------------------------------

    def call(self, inputs: Any, training: bool = False) -> Any:
        """The model's ops on ``inputs`` (a subclass defines this; a Functional model
        replays its layer calls on them)."""
        if self._plan is None:
            raise TfcError(f"model '{self.name}' has no call: subclass tfc.Model and define "
                           f"call(inputs, training=False), or give Model(inputs, outputs)")
        assert self.inputs is not None and self.outputs is not None and self.graph is not None
        leaves, keys, kind = flatten(inputs)
        if kind == "dict":
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise TfcError(f"model '{self.name}': no input named '{missing[0]}' among "
                               f"{sorted(inputs)}", user_location())
            leaves = [inputs[n] for n in self.input_names]
        if len(leaves) != len(self.inputs):
            raise TfcError(f"model '{self.name}' takes {len(self.inputs)} inputs, got "
                           f"{len(leaves)}", user_location())
        from tfc.api.tensor import convert_to_tensor
        new = [convert_to_tensor(t) for t in leaves]
        for n, t, want in zip(self.input_names, new, self.inputs):
            if t.graph is not self.graph:
                raise TfcError(f"model '{self.name}' was built in another graph",
                               user_location())
            if t.dtype != want.dtype or t.type.rank != want.type.rank:
                raise TypeMismatch(f"model '{self.name}': input '{n}' is {want.type}, got "
                                   f"{t.type}", user_location())
        outs = _replay(self.graph, self._plan, self.inputs, new, self.outputs, training)
        return pack(self._output_kind, self.output_names, outs)

    def __call__(self, inputs: Any, training: bool | None = None) -> Any:
        """The model applied to tensors (a model is usable as a layer of another, where
        its call is recorded as one); ``training`` defaults to the enclosing model call's."""
        from tfc.layers.nodes import default_training
        given, training = training, default_training() if training is None else training
        with training_scope(training), outermost_call() as outermost:
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

    # ---- subclass building ------------------------------------------------------------------

    @property
    def input_shape(self) -> Any:
        """The input shape without the batch dim (a list of them for several inputs)."""
        if self.inputs is None:
            return self._input_shape
        shapes = [t.shape[1:] for t in self.inputs]
        return shapes[0] if len(shapes) == 1 else shapes

    def build(self, input_shape: Any = None, dtype: Any = None) -> None:
        """Trace ``call`` on placeholders (a subclass): ``input_shape`` excludes the batch
        dim and is one shape, a list or a dict of shapes (one placeholder each, named
        ``x``, ``x_0`` ..., or by the dict's keys), ``dtype`` one dtype or one per input."""
        if self.built:
            return
        if input_shape is None:
            raise TfcError(f"model '{self.name}' does not know its input shape: call "
                           f"build(shape) or fit/predict on data first", user_location())
        shapes, keys, kind = flatten(input_shape)
        if kind == "list" and all(isinstance(d, (int, type(None))) for d in shapes):
            shapes, keys, kind = [tuple(input_shape)], None, "single"
        dtypes = (list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * len(shapes))
        names = keys or (["x"] if kind == "single" else [f"x_{i}" for i in range(len(shapes))])
        self.graph = get_default_graph()
        with self.graph.as_default():
            ins = [self.graph.placeholder(as_dtype(dt) if dt is not None else DType.f32,
                                          [None, *shape], name)
                   for shape, dt, name in zip(shapes, dtypes, names)]
            out = self(pack(kind, names, ins), training=False)
        outs, out_keys, self._output_kind = flatten(out)
        outs = _tensors(outs, f"model '{self.name}': call's results", user_location())
        self._input_kind, self.input_names, self.inputs = kind, names, ins
        self.output_names = out_keys or (["output"] if len(outs) == 1 else
                                         [f"output_{i}" for i in range(len(outs))])
        self.outputs = outs

    # ---- data ---------------------------------------------------------------------------------

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

    def _prepare_x(self, x: Any) -> list[np.ndarray]:  # type: ignore[override]
        if not self.built:
            self._build_from(x)
        assert self.inputs is not None
        arrays = []
        for name, t, leaf in zip(self.input_names, self.inputs,
                                 self._by_name(x, self.input_names, "x")):
            arr, want = np.asarray(leaf), t.type
            if arr.ndim != want.rank or any(isinstance(d, int) and d != s
                                            for d, s in zip(want.shape[1:], arr.shape[1:])):
                raise FeedError(f"model '{self.name}' takes input '{name}' of type {want}, "
                                f"got an array of shape {list(arr.shape)}")
            arrays.append(arr.astype(want.dtype.np, copy=False))
        _same_lengths(arrays, self.input_names, f"model '{self.name}': x")
        return arrays

    def _build_from(self, x: Any) -> None:
        """Build a subclass on placeholders shaped and typed like the data ``x``."""
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
        self.build(shapes[0] if kind == "single" else pack(kind, keys or [], shapes)
                   if kind == "dict" else shapes, dtypes if kind != "single" else dtypes[0])

    def _prepare_y(self, y: Any) -> list[np.ndarray]:  # type: ignore[override]
        tr = self._require_training()
        arrays = [labels_array(leaf, t.type, f"model '{self.name}' takes y '{name}'")
                  for name, t, leaf in zip(self.output_names, tr.y,
                                           self._by_name(y, self.output_names, "y"))]
        _same_lengths(arrays, self.output_names, f"model '{self.name}': y")
        return arrays

    def _feed_dict(self, x: Any, y: Any) -> dict[Tensor, np.ndarray]:
        assert self.inputs is not None
        return {**dict(zip(self.inputs, x)), **dict(zip(self._require_training().y, y))}

    # ---- training ---------------------------------------------------------------------------

    def compile(self, optimizer: Any = "rmsprop", loss: Any = "mse",
                metrics: Any = (), loss_weights: Any = None) -> None:
        """As ``Sequential.compile``, per output: ``loss`` is one loss for every output, a
        list (output order) or a dict (by output name); ``loss_weights`` the same for the
        weights of the total loss (``sum(w * loss)``); ``metrics`` a list for every output
        or a list of lists / a dict of lists per output."""
        single = not isinstance(loss, (list, tuple, dict))
        super().compile(optimizer, loss if single else "mse", ())
        self.loss = self.loss if single else loss
        self._metric_specs = metrics
        self._loss_weights = loss_weights

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

    def _require_training(self) -> _Training:
        if self._training is not None:
            return self._training
        if self.loss is None:
            raise TfcError(f"model '{self.name}' must be compiled first (model.compile(...))",
                           user_location())
        if not self.built:
            raise TfcError(f"model '{self.name}' is not built yet: fit/evaluate/predict on "
                           f"data or build(shape) first", user_location())
        assert self.graph is not None and self.inputs is not None and self.outputs is not None
        losses = [get_loss(s) for s in self._per_output(self.loss, "loss", None)]
        weights = [float(w) for w in self._per_output(
            1.0 if self._loss_weights is None else self._loss_weights, "loss_weights", 1.0)]
        metric_specs = self._metrics_per_output()
        names, multi = self.output_names, len(self.outputs) > 1
        with self.graph.as_default():
            ys = []
            for name, out, loss in zip(names, self.outputs, losses):
                label = "y" if not multi else f"y_{name}"
                shape = out.type.shape[1:-1] if loss.sparse_labels else out.type.shape[1:]
                ys.append(self.graph.placeholder(DType.i32 if loss.sparse_labels else out.dtype,
                                                 [None, *shape], label))
            if self.uses_training:
                train_outs = self._leaves(self(self._packed_inputs(), training=True))
                if same_computation(train_outs, self.outputs):
                    train_outs = self.outputs  # call ignored training: one graph, as Sequential
            else:
                train_outs = self.outputs
            metric_fns = [[get_metric(m, loss, out) for m in specs]
                          for specs, loss, out in zip(metric_specs, losses, self.outputs)]

            def losses_and_metrics(preds: list[Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
                total: Tensor | None = None
                logged: dict[str, Tensor] = {}
                for name, y, pred, loss, w in zip(names, ys, preds, losses, weights):
                    part = ops.reduce_mean(loss(y, pred))
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
            if train_outs is self.outputs:
                eval_loss, eval_metrics = train_loss, train_metrics
            else:
                eval_loss, eval_metrics = losses_and_metrics(self.outputs)
            train_op = self._minimize(train_loss)
        self._training = _Training(ys, train_loss, train_metrics, train_op, eval_loss,
                                   eval_metrics)
        return self._training

    def _leaves(self, out: Any) -> list[Tensor]:
        """The output tensors of a call, in output order."""
        if isinstance(out, dict):
            return [out[n] for n in self.output_names]
        return flatten(out)[0]

    def _packed_inputs(self) -> Any:
        assert self.inputs is not None
        return pack(self._input_kind, self.input_names, self.inputs)

    def training_graph(self) -> Any:
        from tfc.api.extract import extract
        tr = self._require_training()
        assert self.graph is not None and self.inputs is not None
        feeds = [*((n, t.value) for n, t in zip(self.input_names, self.inputs)),
                 *((y.name, y.value) for y in tr.y)]
        fetches = [("loss", tr.loss.value), *((k, t.value) for k, t in tr.metrics.items())]
        return extract(self.graph.ir, "train_step", feeds, fetches, tr.train_op.ir_ops(),
                       what=f"model '{self.name}'")

    def predict(self, x: Any, batch_size: int = 256) -> Any:
        """The inference outputs for ``x``, computed in batches: one array, or a list or
        dict of them (as the model's outputs were given)."""
        xa = self._prepare_x(x)
        assert self.inputs is not None and self.outputs is not None
        parts = [self.session.run(self.outputs, dict(zip(self.inputs, take(xa, idx))))
                 for idx in self._batches(num_examples(xa), batch_size)]
        results = []
        for i, out in enumerate(self.outputs):
            if parts:
                results.append(np.concatenate([p[i] for p in parts]))
            else:
                shape = [0, *(d if isinstance(d, int) else 0 for d in out.type.shape[1:])]
                results.append(np.zeros(shape, dtype=out.dtype.np))
        return pack(self._output_kind, self.output_names, results)

    # ---- model files and display --------------------------------------------------------------

    def export(self, name_prefix: str = "") -> None:
        """Declare ``predict`` (feeds by input name, fetches by output name), and once
        compiled ``evaluate`` and ``train_step`` (labels ``y`` or ``y_<output>``)."""
        if not self.built:
            self.build(self._input_shape)
        assert self.graph is not None and self.inputs is not None and self.outputs is not None
        graph, loc = self.graph, user_location()
        feeds = dict(zip(self.input_names, self.inputs))
        graph.entry(f"{name_prefix}predict", feeds, dict(zip(self.output_names, self.outputs)),
                    (), loc)
        if self.loss is not None:
            tr = self._require_training()
            feeds = {**feeds, **{y.name: y for y in tr.y}}
            graph.entry(f"{name_prefix}evaluate", feeds,
                        {"loss": tr.eval_loss, **tr.eval_metrics}, (), loc)
            graph.entry(f"{name_prefix}train_step", feeds, {"loss": tr.loss, **tr.metrics},
                        [tr.train_op], loc)

    def summary(self, print_fn: Callable[[Any], None] | None = None) -> None:
        """A table of the inputs and layers: output types, parameters, and (Functional)
        what each layer is connected to."""
        if self._plan is None:
            return super().summary(print_fn)
        from rich.console import Console
        from rich.table import Table
        assert self.inputs is not None
        table = Table(title=f"Model: {self.name}")
        for col in ("Layer (type)", "Output", "Params", "Connected to"):
            table.add_column(col)
        for name, t in zip(self.input_names, self.inputs):
            table.add_row(f"{name} (InputLayer)", str(t.type), "0", "")
        inputs = {t.value: n for n, t in zip(self.input_names, self.inputs)}
        calls: dict[int, list[Node]] = {}
        for item in self._plan:
            if isinstance(item, Node):
                calls.setdefault(id(item.layer), []).append(item)
        for layer in self.layers:
            nodes = calls[id(layer)]
            inbound = [p[0].layer.name if p is not None else inputs.get(t.value, _describe(t))
                       for n in nodes for t, p in zip(n.inputs, n.producers)]
            table.add_row(f"{layer.name} ({type(layer).__name__})",
                          ", ".join(str(t.type) for t in nodes[0].outputs),
                          f"{layer.count_params():,}", ", ".join(dict.fromkeys(inbound)))
        table.caption = f"Total params: {self.count_params():,}"
        (print_fn or Console().print)(table)

    @property
    def input(self) -> Tensor:
        return self._one(self.inputs, "inputs")

    @property
    def output(self) -> Tensor:
        return self._one(self.outputs, "outputs")

    def _one(self, tensors: list[Tensor] | None, what: str) -> Tensor:
        if tensors is None or len(tensors) != 1:
            raise TfcError(f"model '{self.name}' has {len(tensors or [])} {what}, not one")
        return tensors[0]


def _describe(t: Tensor) -> str:
    op = t.value.op
    return f"'{t.value.name}'" if op is None else f"{t.type} (made by {op.kind})"


def _output_name(t: Tensor) -> str:
    node = node_of(t)
    if node is not None:
        return _short(node.layer.name)
    return t.value.op.kind if t.value.op is not None else _short(t.value.name or "output")


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or hasattr(value, "__array__")


def _distinct(variables: list[Variable]) -> list[Variable]:
    out: list[Variable] = []
    for v in variables:
        if not any(v is w for w in out):
            out.append(v)
    return out


def _distinct_layers(layers: Any) -> list[Any]:
    out: list[Any] = []
    for layer in layers:
        if not any(layer is other for other in out):
            out.append(layer)
    return out


def _same_lengths(arrays: list[np.ndarray], names: list[str], what: str) -> None:
    lengths = {len(a) for a in arrays}
    if len(lengths) > 1:
        detail = ", ".join(f"{n}: {len(a)}" for n, a in zip(names, arrays))
        raise FeedError(f"{what} arrays differ in their number of examples ({detail})")


__all__ = ["Input", "Model"]
