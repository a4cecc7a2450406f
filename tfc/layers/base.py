"""The ``Layer`` base class: a callable that builds graph ops and owns its variables.

A layer is called on a ``Tensor`` and appends ops to that tensor's graph, as a Keras
layer does in TensorFlow 1's graph mode. Its variables are made on the first call, when
the input's type (and so the kernel's shape) is known, under a name scope unique in the
graph (``dense``, ``dense_1``); later calls re-enter that scope and reuse the variables,
so one layer can appear in a training graph and an inference graph at once. Names are
unique per graph, not per process, so a model file traced twice names its variables the
same way each time.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable, Sequence

from tfc.api.graph import Graph, Tensor, Variable, as_dtype, user_location
from tfc.api.tensor import TensorLike, convert_to_tensor
from tfc.errors import TfcError, TypeMismatch
from tfc.ir.types import DType, TensorType
from tfc.layers.nodes import (add_loss, add_update, default_training, outermost_call,
                              pending_value, record_call)

Initializer = Callable[[Sequence[int], DType], Any]


def _snake_case(name: str) -> str:
    """``Dense`` -> ``dense``, ``MaxPooling2D`` -> ``max_pooling2d`` (Keras's layer names)."""
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


def get_initializer(spec: str | Initializer) -> Initializer:
    """An initializer by Keras name, or a callable ``(shape, dtype) -> tensor-like``.

    Random initializers draw their seeds from the graph (``tfc.set_random_seed``), so a
    model built twice in fresh graphs starts from the same weights.
    """
    from tfc.api import ops, random
    from tfc.layers.initializers import Orthogonal
    if callable(spec):
        return spec
    table: dict[str, Initializer] = {
        "glorot_uniform": lambda shape, dtype: random.glorot_uniform(shape, dtype),
        "zeros": lambda shape, dtype: ops.zeros(shape, dtype),
        "ones": lambda shape, dtype: ops.ones(shape, dtype),
        "uniform": lambda shape, dtype: random.uniform(shape, -0.05, 0.05, dtype),
        "normal": lambda shape, dtype: random.normal(shape, 0.0, 0.05, dtype),
        "orthogonal": lambda shape, dtype: Orthogonal()(shape, dtype),
    }
    # Keras's names of the same (RandomUniform, RandomNormal with their default ranges)
    table["random_uniform"], table["random_normal"] = table["uniform"], table["normal"]
    if spec not in table:
        raise TfcError(f"unknown initializer '{spec}' (known: {', '.join(table)})")
    return table[spec]


def get_activation(spec: str | Callable[[Tensor], Tensor] | None
                   ) -> Callable[[Tensor], Tensor] | None:
    """An activation by name (``relu``, ``softmax`` ...), a callable, or None (linear)."""
    from tfc.api import nn, ops
    if spec is None or callable(spec):
        return spec
    table: dict[str, Callable[[Tensor], Tensor] | None] = {
        "linear": None, "relu": nn.relu, "softmax": nn.softmax, "sigmoid": ops.sigmoid,
        "tanh": ops.tanh, "exp": ops.exp, "softplus": nn.softplus,
        "gelu": nn.gelu,
        # Keras's other activations by name (its defaults: leaky_relu's slope 0.2)
        "elu": nn.elu, "selu": nn.selu, "softsign": nn.softsign, "relu6": nn.relu6,
        "leaky_relu": nn.leaky_relu, "log_softmax": nn.log_softmax,
        "silu": _silu, "swish": _silu, "hard_sigmoid": _hard_sigmoid,
    }
    if spec not in table:
        raise TfcError(f"unknown activation '{spec}' (known: {', '.join(table)})")
    return table[spec]


def _silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)`` (Keras's ``silu`` / ``swish``)."""
    from tfc.api import ops
    return x * ops.sigmoid(x)


def _hard_sigmoid(x: Tensor) -> Tensor:
    """``relu6(x + 3) / 6`` (Keras 3's ``hard_sigmoid``)."""
    from tfc.api import nn
    return nn.relu6(x + 3.0) / 6.0


class InputShape(tuple):
    """What a layer's ``build`` is given (Keras's ``TensorShape``): the input's dims, batch
    dim first, ``None`` where not static (``input_shape[-1]``), and its type: ``dtype``,
    ``rank``, and ``shape`` with symbolic dims (``B``); printed as the type."""

    type: TensorType

    def __new__(cls, t: TensorType) -> "InputShape":
        shape = super().__new__(cls, (d if isinstance(d, int) else None for d in t.shape))
        shape.type = t
        return shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return self.type.rank

    @property
    def shape(self) -> tuple[Any, ...]:
        return tuple(self.type.shape)

    def __str__(self) -> str:
        return str(self.type)

    __repr__ = __str__


class Layer:
    """A Keras-style layer of the graph API. Subclasses implement ``build`` (make the
    variables for an input shape, with ``add_weight``; called once, on the first call) and
    ``call`` (the ops; ``call(x, training)``, or ``call(x)`` for a layer that behaves the
    same in training). Layers assigned as attributes are tracked (Keras's): their
    variables are this layer's too.

    ``name`` overrides the default name scope; ``input_shape`` (without the batch dim)
    tells a ``Sequential`` whose first layer this is what its input looks like; ``dtype``
    fixes the variables' dtype (by default the float input's); ``trainable=False`` keeps
    the layer's variables out of ``trainable_variables``; ``activity_regularizer`` (a
    ``tfc.keras.regularizers`` one, or ``"l1"`` / ``"l2"``) adds its penalty of each
    output of each call, divided by the batch size, to ``losses`` (Keras 3's).
    """

    base_name: str = ""  # the default name scope; the class name in snake case when empty
    uses_training: bool = False  # True: the ops differ between training and inference
    takes_list: bool = False  # True: called on a list of tensors (a merge layer)

    def __init__(self, name: str | None = None, input_shape: Sequence[int | None] | None = None,
                 dtype: Any = None, trainable: bool = True,
                 activity_regularizer: Any = None) -> None:
        from tfc.layers import regularizers
        self._given_name = name
        self.activity_regularizer = regularizers.get(activity_regularizer)
        # the activity penalties of the calls: (the call's training flag, scalar)
        self._activity_losses: list[tuple[bool, Tensor]] = []
        self._scope: str | None = None
        self.graph: Graph | None = None
        self.input_shape = None if input_shape is None else tuple(input_shape)
        self.dtype: DType | None = None if dtype is None else as_dtype(dtype)
        self.trainable = trainable
        self._variables: list[Variable] = []
        self.input_type: Any = None  # a TensorType, or a list of them (a merge layer)
        self.output_type: TensorType | None = None

    # ---- what the layer holds ---------------------------------------------------------

    @property
    def name(self) -> str:
        """The layer's name scope once called (``dense_1``); its base name before."""
        return self._scope or self._base()

    def _base(self) -> str:
        return self._given_name or self.base_name or _snake_case(type(self).__name__)

    @property
    def built(self) -> bool:
        return self.graph is not None

    def __setattr__(self, key: str, value: Any) -> None:
        """Layers and models assigned as attributes (or in lists) are tracked."""
        if not key.startswith("_"):
            for item in (value if isinstance(value, (list, tuple)) else [value]):
                if item is not self and hasattr(type(item), "trainable_variables") and \
                        not isinstance(item, Variable):
                    tracked = self.__dict__.setdefault("_sublayers", [])
                    if not any(item is t for t in tracked):
                        tracked.append(item)
        object.__setattr__(self, key, value)

    @property
    def variables(self) -> list[Variable]:
        """The layer's own variables (``add_weight``), then its tracked sublayers'."""
        return self._with_sublayers(list(self._variables), "variables")

    @property
    def trainable_variables(self) -> list[Variable]:
        if not self.trainable:
            return []
        own = [v for v in self._variables if v.trainable]
        return self._with_sublayers(own, "trainable_variables")

    def _with_sublayers(self, own: list[Variable], attr: str) -> list[Variable]:
        """``own`` and the sublayers' ``attr`` after it, each variable once; a sublayer
        that leads back to this layer (a reference to its model) adds nothing twice."""
        if self.__dict__.get("_collecting"):
            return []
        self._collecting = True
        try:
            for sub in self.__dict__.get("_sublayers", ()):
                own.extend(v for v in getattr(sub, attr) if not any(v is w for w in own))
        finally:
            self._collecting = False
        return own

    def count_params(self) -> int:
        total = 0
        for v in self.variables:
            n = 1
            for d in v.shape:
                n *= d
            total += n
        return total

    # ---- building -----------------------------------------------------------------------

    def add_weight(self, name: str = "weight", shape: Sequence[int] = (),
                   initializer: str | Initializer = "glorot_uniform", dtype: Any = None,
                   trainable: bool = True, regularizer: Any = None,
                   constraint: Any = None) -> Variable:
        """A variable ``<scope>/<name>`` initialized by ``initializer``; call in ``build``
        (Keras's ``add_weight``: ``trainable=False`` keeps it out of training). Its dtype
        by default: the layer's, else its first float input's, else f32. ``regularizer``
        (``tfc.keras.regularizers``, ``"l1"``, ``"l2"``) adds its penalty of the weight to
        ``losses``; ``constraint`` (``tfc.keras.constraints``) projects the weight after
        each optimizer update of a model's ``fit`` (``tfc.layers.constraints``)."""
        from tfc.layers import constraints, regularizers
        init = get_initializer(initializer)
        dt = (as_dtype(dtype) if dtype is not None
              else self.dtype or self.__dict__.get("_input_float_dtype") or DType.f32)
        shape = tuple(int(d) for d in shape)
        project = constraints.get(constraint)
        cls = Variable if project is None else constraints.ConstrainedVariable
        var = cls(lambda: init(shape, dt), trainable=trainable, name=name, dtype=dt)
        var.regularizer = regularizers.get(regularizer)  # type: ignore[attr-defined]
        var.constraint = project  # type: ignore[attr-defined]
        self._variables.append(var)
        return var

    def add_loss(self, loss: Any, training: bool | None = None) -> None:
        """Record the scalar ``loss`` (a tensor of the layer's graph; Keras's ``add_loss``,
        in ``call``): a model's ``fit`` adds those of its training graph's calls to the
        loss, ``evaluate`` those of its inference graph's. ``training``: the mode of the
        call that made it (by default the call running now)."""
        flag = self.__dict__.get("_call_training", False) if training is None else training
        t = convert_to_tensor(loss)
        self._activity_losses.append((bool(flag), t))
        add_loss(t)

    @property
    def losses(self) -> list[Tensor]:
        """The layer's penalties, as Keras 3 lists them: the activity penalties of its
        inference calls (``add_loss``), its sublayers', then each trainable weight's
        regularizer's penalty (made now, in the layer's graph)."""
        return [*activity_losses([self], False), *weight_penalties(self.trainable_variables)]

    def _add_activity_loss(self, out: Any, training: bool) -> None:
        """The activity regularizer's penalty of each output, over the batch size."""
        reg = self.activity_regularizer
        assert reg is not None
        for t in (out if isinstance(out, (list, tuple)) else [out]):
            penalty = reg(t)
            if t.type.rank > 0:
                from tfc.api import ops
                batch = ops.cast(ops.shape(t)[0], penalty.dtype)
                penalty = penalty / batch
            self.add_loss(penalty, training)

    def add_update(self, op: Any) -> None:
        """Record ``op`` (an assign of one of the layer's non-trainable variables, made in
        a training call: a ``BatchNormalization``'s moving statistics) in ``updates``; a
        model's ``fit`` runs the updates of its training graph with each optimizer step
        (``nodes.collecting_updates``)."""
        self.__dict__.setdefault("_updates", []).append(op)
        add_update(op)

    def update_state(self, var: Variable, new_value: Callable[[Tensor], Tensor]) -> None:
        """``add_update`` of ``var.assign(new_value(current))``, where ``current`` is the
        value an earlier update of ``var`` in the same training graph assigns (the layer
        called twice there), else ``var``'s: the one assign of the step is the updates
        applied one after the other, as Keras's fit applies them."""
        current = pending_value(var)
        value = new_value(var.value() if current is None else current)
        op = var.assign(value)
        replaced = add_update(op, var, value)
        own = self.__dict__.setdefault("_updates", [])
        own[:] = [u for u in own if not any(u is r for r in replaced)]
        own.append(op)

    @property
    def updates(self) -> list[Any]:
        """The state updates the layer's training calls made (``add_update``), in order."""
        return list(self.__dict__.get("_updates", ()))

    def build(self, input_type: Any) -> None:
        """Make the layer's variables for its input, once, before the first call:
        ``input_type`` is an ``InputShape`` (a list of them for a layer that merges
        several), usable as Keras's shape (``input_type[-1]``) or as the input's type
        (``.dtype``, ``.rank``, ``.shape``). None by default."""

    def call(self, x: Tensor, training: bool) -> Tensor:
        raise NotImplementedError

    def _call(self, x: Any, training: bool) -> Tensor:
        """``call``, given ``training`` when it takes it (a Keras layer's ``call(x)``)."""
        how = _training_arg(type(self))
        if how == "positional":
            return self.call(x, training)
        if how == "keyword":
            return self.call(x, training=training)
        return self.call(x)  # type: ignore[call-arg]

    def __call__(self, inputs: TensorLike | Sequence[TensorLike],
                 training: bool | None = None) -> Tensor:
        """Append the layer's ops for ``inputs`` (one tensor, or a list for a layer that
        merges several); ``training`` selects training-only behaviour (dropout) for the
        graph being built, by default the enclosing model call's (``nodes.training_scope``).
        An outermost call is recorded in the graph (``nodes.record_call``) for the
        Functional API."""
        packed = isinstance(inputs, (list, tuple)) and (  # nested numbers are one constant
            self.takes_list or any(isinstance(t, (Tensor, Variable)) for t in inputs))
        xs = [convert_to_tensor(t) for t in inputs] if packed else [convert_to_tensor(inputs)]
        if packed != self.takes_list or not xs:
            want = "a list of tensors" if self.takes_list else "one tensor"
            got = f"a list of {len(xs)}" if packed else "one tensor"
            raise TypeMismatch(f"layer '{self.name}' takes {want}, got {got}", user_location())
        x: Any = xs if packed else xs[0]
        in_type: Any = [t.type for t in xs] if packed else xs[0].type
        given, training = training, default_training() if training is None else training
        g = xs[0].graph
        with outermost_call() as outermost:
            if self.graph is None:
                with g.as_default(), g.name_scope(self._base()) as scope:
                    self._scope, self.input_type = scope, in_type
                    self._input_float_dtype = next((t.dtype for t in xs if t.dtype.is_float),
                                                   None)
                    try:
                        self.build([InputShape(t) for t in in_type] if packed
                                   else InputShape(in_type))
                        self._call_training = training
                        out = self._call(x, training)
                        if self.activity_regularizer is not None:
                            self._add_activity_loss(out, training)
                    except TfcError as e:
                        raise self._named(e).at(user_location())
                    self.graph = g  # built: later calls reuse the variables
            elif g is not self.graph:
                raise TfcError(f"layer '{self.name}' was built in another graph",
                               user_location())
            else:
                self._check_input(xs, packed)
                with g.as_default(), g.name_scope(self.name + "/"):
                    try:
                        self._call_training = training
                        out = self._call(x, training)
                        if self.activity_regularizer is not None:
                            self._add_activity_loss(out, training)
                    except TfcError as e:
                        raise self._named(e).at(user_location())
        self.output_type = (out if isinstance(out, Tensor) else out[0]).type  # [out, *states]
        if outermost:
            record_call(self, x, out, given)
        return out

    def _named(self, error: TfcError) -> TfcError:
        """``error`` (from an op the layer built) saying which layer it came from."""
        if f"'{self.name}'" not in error.message:
            error.message = f"{type(self).__name__} '{self.name}': {error.message}"
            error.args = (f"{error.loc}: {error.message}" if error.loc else error.message,)
        return error

    def _check_input(self, xs: list[Tensor], packed: bool) -> None:
        """A built layer takes inputs of the rank and static dims it was built for."""
        built = self.input_type if isinstance(self.input_type, list) else [self.input_type]
        for x, t in zip(xs, built):
            ok = x.dtype == t.dtype and x.type.rank == t.rank and all(
                not (isinstance(a, int) and isinstance(b, int)) or a == b
                for a, b in zip(x.type.shape, t.shape))
            if not ok:
                raise TypeMismatch(f"layer '{self.name}' was built for inputs of type {t}, "
                                   f"got {x.type}", user_location())
        if len(xs) != len(built):
            raise TypeMismatch(f"layer '{self.name}' was built for {len(built)} inputs, "
                               f"got {len(xs)}", user_location())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} '{self.name}'>"


def sublayers(roots: Sequence[Any]) -> list[Any]:
    """``roots`` and every layer and model inside them (a model's ``layers``, a layer's
    tracked sublayers), depth first, each once."""
    out: list[Any] = []

    def visit(item: Any) -> None:
        if any(item is o for o in out):
            return
        out.append(item)
        for attr in ("layers", "_sublayers"):
            subs = item.__dict__.get(attr, ())
            for sub in subs if isinstance(subs, (list, tuple)) else ():
                visit(sub)
    for root in roots:
        visit(root)
    return out


def activity_losses(roots: Sequence[Any], training: bool) -> list[Tensor]:
    """The losses (activity penalties, ``add_loss``) that the calls of mode ``training``
    of ``roots`` and their layers made, layer by layer (Keras 3's order in ``losses``)."""
    return [t for layer in sublayers(roots)
            for flag, t in layer.__dict__.get("_activity_losses", ()) if flag == training]


def weight_penalties(weights: Sequence[Variable]) -> list[Tensor]:
    """The regularizer's penalty of each of ``weights`` that has one, in order (made
    now, in the weight's graph)."""
    out = []
    for v in weights:
        reg = getattr(v, "regularizer", None)
        if reg is not None:
            with v.graph.as_default(), v.graph.name_scope(v.name + "/Regularizer/"):
                out.append(reg(v))
    return out


_TRAINING_ARG: dict[type, str] = {}


def _training_arg(cls: type) -> str:
    """How ``cls.call`` takes ``training``: ``"positional"`` (its second argument: tfc's
    layers, Keras's ``call(inputs, training=None)``), ``"keyword"`` (``**kwargs``) or
    ``"none"`` (``call(inputs)``: the same in training); cached per class."""
    known = _TRAINING_ARG.get(cls)
    if known is None:
        try:
            params = list(inspect.signature(getattr(cls, "call")).parameters.values())[1:]
        except (TypeError, ValueError):
            params = []
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                      p.POSITIONAL_OR_KEYWORD)]
        known = ("positional" if len(positional) >= 2
                 or any(p.kind == p.VAR_POSITIONAL for p in params)
                 else "keyword" if any(p.name == "training" or p.kind == p.VAR_KEYWORD
                                       for p in params) else "none")
        _TRAINING_ARG[cls] = known
    return known
