"""Host work around a compiled step: values a step takes from the host (a dequeue) and
work it hands back to the host (an enqueue, a close), for state that lives in Python
(``tfc.queue``'s queues) rather than in the step's variables.

A ``HostInput`` is a group of placeholders the session feeds itself: a ``Session.run`` whose
fetches or targets need one (and do not feed it) first calls its ``produce`` (which may
block: a dequeue waits for data), then runs the compiled step with the values fed. An
``Operation`` with a ``host_effect`` is a target whose work is ``consume(values)`` of its
tensors, computed by the step and handed over after it. So a step stays one compiled,
native call; the host parts run before and after it, outside the session's lock (a
dequeue waiting for a producer never holds up that producer's own step)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from tfc.api.graph import Graph, Operation, Tensor
    from tfc.api.session import Session


@dataclass
class HostInput:
    """Placeholders fed before each step with what ``produce`` returns (one per)."""

    placeholders: list["Tensor"]
    produce: Callable[[], list[np.ndarray]]


@dataclass
class HostEffect:
    """What an operation does on the host after the step: ``consume`` the values of
    ``tensors`` (computed by the step)."""

    tensors: list["Tensor"]
    consume: Callable[[list[np.ndarray]], None]


def add_host_input(graph: "Graph", host: HostInput) -> None:
    inputs = graph.__dict__.setdefault("_host_inputs", {})
    for p in host.placeholders:
        inputs[p.value] = host


def host_operation(graph: "Graph", effect: HostEffect, name: str) -> "Operation":
    from tfc.api.graph import Operation
    op = Operation(graph, None, [], name=name)
    op.host_effect = effect  # type: ignore[attr-defined]
    return op


def _split(op: "Operation") -> tuple["Operation | None", list[HostEffect]]:
    """``op`` without its host effects (None if nothing is left), and those effects."""
    from tfc.api.graph import Operation
    effect = getattr(op, "host_effect", None)
    if effect is not None:
        return None, [effect]
    parts = [_split(c) for c in op.control_inputs]
    effects = [e for _, es in parts for e in es]
    if not effects:
        return op, []
    rest = [p for p, _ in parts if p is not None]
    if op.op is None and not rest:
        return None, effects
    return Operation(op.graph, op.op, rest, name=op.name), effects


def host_callable(session: "Session", leaves: list[Any], rebuild: Callable[[list[Any]], Any],
                  tensors: list["Tensor"], targets: list["Operation"], feed_list: list[Any]
                  ) -> Callable[..., Any] | None:
    """``make_callable``'s request as host work around a plain compiled request, or None
    when it needs no host input and has no host effect (nearly always)."""
    from tfc.api.extract import needed_placeholders
    from tfc.api.graph import Operation
    inputs: dict[Any, HostInput] = session.graph.__dict__.get("_host_inputs", {})
    splits = [_split(t) for t in targets]
    effects = [e for _, es in splits for e in es]
    if not inputs and not effects:
        return None
    plain_targets = [p for p, _ in splits if p is not None]
    fed = {t.value for t, _ in session._resolve_feeds({k: None for k in feed_list})}
    effect_tensors = [t for e in effects for t in e.tensors]
    needed = [p for p in needed_placeholders(session.graph, tensors + effect_tensors,
                                             plain_targets)
              if p.value in inputs and p.value not in fed]
    if not needed and not effects:
        return None
    hosts: list[HostInput] = []
    for p in needed:
        h = inputs[p.value]
        if all(h is not x for x in hosts):
            hosts.append(h)
    host_feeds = [p for h in hosts for p in h.placeholders]
    is_op = [isinstance(x, Operation) for x in leaves]
    if tensors or effect_tensors or plain_targets:
        inner = session.make_callable([tensors, effect_tensors, plain_targets],
                                      list(feed_list) + host_feeds)
    else:  # host work only (a close): no step to compile
        def inner(*values: Any) -> Any:
            return [], [], []
    lock: threading.Lock = session.__dict__.setdefault("_host_lock", threading.Lock())

    def call(*values: Any) -> Any:
        produced = [v for h in hosts for v in h.produce()]  # may block (not under the lock)
        with lock:
            fetched, effect_values, _ = inner(*values, *produced)
        i = 0
        for e in effects:
            e.consume([np.asarray(v) for v in effect_values[i:i + len(e.tensors)]])
            i += len(e.tensors)
        it = iter(fetched)
        return rebuild([None if op else next(it) for op in is_op])

    return call
