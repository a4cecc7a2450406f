"""Records of layer calls, and the ``training`` flag a model's ``call`` passes down.

Every call of a layer on tensors appends its ops to the graph at once (graph mode) and
leaves a ``Node`` in the graph, keyed by the output value: which layer, on which input
tensors. A Functional ``tfc.Model`` walks these records back from its outputs to find its
layers, and replays them (calls the same layers again, so the weights are shared) for the
training graph (``training=True``: dropout on) or on other inputs, as ``Sequential`` calls
its layers again. The ops between layers (``a + b``, ``tfc.concat``) have no record and are
replayed op by op.

Inside a subclassed model's ``call`` the ``training`` flag it was called with is the
default of the layers it calls (``training_scope``), as in Keras: ``self.dropout(x)`` in a
training trace drops.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from dataclasses import dataclass
from typing import Any, Iterator

from tfc.api.graph import Graph, Tensor
from tfc.ir import core as ir

_state = threading.local()


@dataclass(eq=False)
class Node:
    """One call of ``layer``: on ``inputs`` (a list when ``packed``: a merge layer's call
    on several tensors), giving ``output``. ``producers`` are the calls the inputs came
    from when this call was made (None: a placeholder or an op outside layers), and
    ``previous`` the call that made ``output`` before, when this call returned its input
    unchanged (``Dropout`` in an inference graph): layer calls are told apart by these
    records, not by their values alone. ``mark`` is the graph's op count when the call
    returned (what was built before it), ``seq`` its number among all calls."""

    layer: Any
    inputs: list[Tensor]
    packed: bool
    output: Tensor
    producers: list["Node | None"]
    previous: "Node | None"
    mark: int
    seq: int


_calls = itertools.count()


def record_call(layer: Any, inputs: list[Tensor], packed: bool, output: Tensor) -> None:
    calls = output.graph.layer_calls
    calls[output.value] = Node(layer, list(inputs), packed, output,
                               [calls.get(t.value) for t in inputs], calls.get(output.value),
                               len(output.graph.ir.ops), next(_calls))


def producer(t: Tensor | ir.Value, graph: Graph, before: int | None = None) -> Node | None:
    """The layer call that made ``t`` (the latest one, or the latest of those recorded
    before the graph had ``before`` ops), or None: a placeholder or an op outside layers."""
    node = graph.layer_calls.get(t.value if isinstance(t, Tensor) else t)
    while node is not None and before is not None and node.mark > before:
        node = node.previous
    return node


def node_of(t: Tensor) -> Node | None:
    """The latest layer call that produced ``t``, or None (an op built outside layers)."""
    return producer(t, t.graph)


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
