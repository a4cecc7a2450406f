"""Records of layer and model calls, and the ``training`` flag a model call passes down.

Every call of a layer (or of a model used as a layer) on tensors appends its ops to the
graph at once (graph mode) and leaves a ``Node`` in the graph, keyed by its output values:
which layer, on which input tensors, with which explicit ``training``. Only the outermost
call is recorded: the layers a model or a layer calls inside are its business, so a
nested model is replayed as one unit (its ``call`` traced again) as in Keras. A Functional
``tfc.Model`` walks these records back from its outputs to find its layers, and replays
them (calls the same layers again, so the weights are shared) for the training graph
(``training=True``: dropout on) or on other inputs, as ``Sequential`` calls its layers
again. The ops between layers (``a + b``, ``tfc.concat``) have no record and are replayed
op by op.

Inside a model's call the ``training`` flag it was called with is the default of the
layers it calls (``training_scope``), as in Keras: ``self.dropout(x)`` in a training trace
drops.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from tfc.api.graph import Graph, Tensor
from tfc.ir import core as ir

_state = threading.local()


# ---- structures of tensors: one, a list/tuple, or a dict ------------------------------------

def flatten(value: Any) -> tuple[list[Any], list[str] | None, str]:
    """The leaves of one value, a list/tuple or a dict of them, their dict keys (or None),
    and the structure's kind (``single``, ``list`` or ``dict``)."""
    if isinstance(value, dict):
        return list(value.values()), [str(k) for k in value], "dict"
    if isinstance(value, (list, tuple)):
        return list(value), None, "list"
    return [value], None, "single"


def pack(kind: str, names: Sequence[str] | None, leaves: Sequence[Any]) -> Any:
    """Leaves back in the structure ``flatten`` found."""
    if kind == "dict":
        return dict(zip(names or [], leaves))
    if kind == "list":
        return list(leaves)
    return leaves[0]


# ---- the records ------------------------------------------------------------------------------

Ref = tuple["Node", int]  # output ``i`` of a recorded call


@dataclass(eq=False)
class Node:
    """One call of ``layer`` on ``inputs`` (the leaves of a structure of kind ``in_kind``
    with keys ``in_names``), giving ``outputs`` (likewise). ``producers`` are the calls the
    inputs came from when this call was made (None: a placeholder or an op outside
    layers), and ``previous`` per output the call that had made that value before, when
    this call returned an input unchanged (``Dropout`` in an inference graph): calls are
    told apart by these records, not by their values alone. ``training`` is the flag the
    call was given (None: the model's). ``mark`` is the graph's op count when the call
    returned (what was built before it), ``seq`` its number among all calls."""

    layer: Any
    inputs: list[Tensor]
    in_kind: str
    in_names: list[str] | None
    outputs: list[Tensor]
    out_kind: str
    out_names: list[str] | None
    training: bool | None
    producers: list[Ref | None]
    previous: list[Ref | None]
    mark: int
    seq: int

    def call_again(self, inputs: list[Tensor], training: bool) -> list[Tensor]:
        """The layer called on other input tensors; its outputs in this call's order."""
        flag = self.training if self.training is not None else training
        result = self.layer(pack(self.in_kind, self.in_names, inputs), training=flag)
        if self.out_kind == "dict":
            return [result[k] for k in self.out_names or []]
        return flatten(result)[0]


_calls = itertools.count()


@contextlib.contextmanager
def outermost_call() -> Iterator[bool]:
    """Around a layer's or model's call: yields whether it is the outermost one (the one
    to record; the calls it makes inside are not recorded)."""
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        yield depth == 0
    finally:
        _state.depth = depth


def record_call(layer: Any, inputs: Any, outputs: Any, training: bool | None) -> None:
    """Record the call of ``layer`` on ``inputs`` giving ``outputs`` (each one tensor, a
    list or a dict of them) in their graph."""
    ins, in_names, in_kind = flatten(inputs)
    outs, out_names, out_kind = flatten(outputs)
    if not outs or not all(isinstance(t, Tensor) for t in ins + outs):
        return  # not a call on tensors: nothing a model could replay
    graph = outs[0].graph
    calls = graph.layer_calls
    node = Node(layer, ins, in_kind, in_names, outs, out_kind, out_names, training,
                [calls.get(t.value) for t in ins], [calls.get(t.value) for t in outs],
                len(graph.ir.ops), next(_calls))
    for i, t in enumerate(outs):
        calls[t.value] = (node, i)


def producer(t: Tensor | ir.Value, graph: Graph, before: int | None = None) -> Ref | None:
    """The layer call output that ``t`` is (the latest, or the latest recorded before the
    graph had ``before`` ops), or None: a placeholder or an op outside layers."""
    ref = graph.layer_calls.get(t.value if isinstance(t, Tensor) else t)
    while ref is not None and before is not None and ref[0].mark > before:
        ref = ref[0].previous[ref[1]]
    return ref


def node_of(t: Tensor) -> Node | None:
    """The latest layer call that produced ``t``, or None (an op built outside layers)."""
    ref = producer(t, t.graph)
    return None if ref is None else ref[0]


# ---- the training flag ---------------------------------------------------------------------

def default_training() -> bool:
    """The ``training`` flag of a layer called without one: the enclosing model call's."""
    return bool(getattr(_state, "training", False))


@contextlib.contextmanager
def training_scope(training: bool) -> Iterator[None]:
    """Layers called inside (without a ``training`` argument) use ``training``."""
    saved = getattr(_state, "training", False)
    _state.training = bool(training)
    try:
        yield
    finally:
        _state.training = saved


# ---- state updates (a BatchNormalization's moving statistics) -----------------------------

class Updates(list):
    """The updates one ``collecting_updates`` collected, and per variable the value its
    latest update assigns (``pending``): a later update of the same variable in the same
    training graph starts from it and replaces the earlier one (one assign per step)."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[str, tuple[Any, Any]] = {}  # var name -> (op, value)


@contextlib.contextmanager
def collecting_updates() -> Iterator[list[Any]]:
    """Around the building of a model's training graph: yields the list that the state
    updates of the layers called inside (``Layer.add_update``: the assigns of a
    ``BatchNormalization``'s moving statistics) are appended to, so that the model's
    train op runs them with the optimizer's step (Keras's ``fit`` applies them each
    step; TF1's ``UPDATE_OPS`` under ``control_dependencies``)."""
    stack: list[list[Any]] = _state.__dict__.setdefault("updates", [])
    found = Updates()
    stack.append(found)
    try:
        yield found
    finally:
        stack.pop()


def add_update(op: Any, var: Any = None, value: Any = None) -> list[Any]:
    """Hand ``op`` to every enclosing ``collecting_updates`` (none: it runs only when
    fetched, as a Keras layer's update outside ``fit``). With ``var`` (the variable
    ``op`` assigns ``value``), an earlier update of ``var`` collected there is replaced
    (``pending_value``); returns the ops replaced."""
    replaced = []
    for found in getattr(_state, "updates", ()):
        if var is not None:
            earlier = found.pending.get(var.name)
            if earlier is not None:
                found[:] = [u for u in found if u is not earlier[0]]
                replaced.append(earlier[0])
            found.pending[var.name] = (op, value)
        found.append(op)
    return replaced


def pending_value(var: Any) -> Any:
    """The value the innermost ``collecting_updates``' latest update of ``var`` assigns
    (None: none): what a second update in the same step starts from, as Keras's second
    call reads the variable its first call assigned."""
    stack = getattr(_state, "updates", ())
    entry = stack[-1].pending.get(var.name) if stack else None
    return None if entry is None else entry[1]


# ---- added losses (activity regularizers) ----------------------------------------------------

@contextlib.contextmanager
def collecting_losses() -> Iterator[list[Any]]:
    """Around the building of a model's training graph: yields the list that the losses
    the layers called inside add (``Layer.add_loss``: activity penalties) are appended
    to, so that the training loss sums those of its own trace (Keras 3's ``losses`` of
    the training call)."""
    stack: list[list[Any]] = _state.__dict__.setdefault("losses", [])
    found: list[Any] = []
    stack.append(found)
    try:
        yield found
    finally:
        stack.pop()


def add_loss(loss: Any) -> None:
    """Hand ``loss`` to every enclosing ``collecting_losses``."""
    for found in getattr(_state, "losses", ()):
        found.append(loss)
