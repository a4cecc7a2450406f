"""The queues: host buffers with graph ops; see the package docstring."""

from __future__ import annotations

import threading
import time
from typing import Any, Sequence

import numpy as np

from tfc.api.graph import Graph, Operation, Tensor, as_dtype, get_default_graph
from tfc.api.host import HostEffect, HostInput, add_host_input, host_operation
from tfc.errors import (CancelledError, DeadlineExceededError, FeedError, OutOfRangeError,
                        TfcError)
from tfc.ir.types import DType

DEFAULT_TIMEOUT_S = 60.0

Row = tuple[np.ndarray, ...]  # one element: a value per component


class QueueBase:
    """What both queues share: the components' types, the buffer, the ops."""

    def __init__(self, capacity: int, dtypes: Sequence[Any],
                 shapes: Sequence[Sequence[int | None]] | None = None,
                 name: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 graph: Graph | None = None) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise TfcError(f"queue capacity must be an integer >= 1, not {capacity!r}")
        if not timeout_s > 0:
            raise TfcError(f"queue timeout_s must be positive, not {timeout_s!r}")
        if isinstance(dtypes, (str, DType)) or not isinstance(dtypes, (list, tuple)):
            dtypes = [dtypes]
        self.dtypes: list[DType] = [as_dtype(d) for d in dtypes]
        if not self.dtypes:
            raise TfcError("a queue needs at least one component dtype")
        self.shapes = _component_shapes(shapes, len(self.dtypes))
        self.capacity = capacity
        self.timeout_s = float(timeout_s)
        self.graph = graph or get_default_graph()
        self.name = self.graph.unique_name(name or type(self).__name__.lower())
        self._items: list[Row] = []
        self._cond = threading.Condition()
        self._closed = False
        self._cancelled = False
        self._error: BaseException | None = None

    # ---- the host side ---------------------------------------------------------------

    def _check_row(self, values: Sequence[Any], what: str) -> Row:
        if len(values) != len(self.dtypes):
            raise FeedError(f"{what} on queue '{self.name}': expected {len(self.dtypes)} "
                            f"components, got {len(values)}")
        out = []
        for i, (v, dt, shape) in enumerate(zip(values, self.dtypes, self.shapes)):
            arr = np.asarray(v)
            if arr.ndim != len(shape) or any(d is not None and d != s
                                             for d, s in zip(shape, arr.shape)):
                raise FeedError(f"{what} on queue '{self.name}': component {i} has shape "
                                f"{list(arr.shape)}, the queue holds {list(shape)}")
            out.append(arr.astype(dt.np, copy=True))
        return tuple(out)

    def _deadline(self, timeout_s: float | None) -> tuple[float, float]:
        limit = self.timeout_s if timeout_s is None else timeout_s
        return time.monotonic() + limit, limit

    def _wait(self, deadline: tuple[float, float], what: str) -> None:
        left = deadline[0] - time.monotonic()
        if left <= 0:
            raise DeadlineExceededError(f"{what} on queue '{self.name}' timed out after "
                                        f"{deadline[1]:g} s (size {len(self._items)} of "
                                        f"{self.capacity}; is a producer running?)")
        self._cond.wait(min(left, 0.5))

    def put_rows(self, rows: Sequence[Row], timeout_s: float | None = None) -> None:
        """Append ``rows`` (each checked), blocking while the queue is full."""
        deadline = self._deadline(timeout_s)
        with self._cond:
            for row in rows:
                while True:
                    if self._closed:
                        raise CancelledError(f"enqueue on queue '{self.name}': the queue is "
                                             f"closed")
                    if len(self._items) < self.capacity:
                        break
                    self._wait(deadline, "enqueue")
                self._items.append(row)
                self._cond.notify_all()

    def _ready(self, n: int) -> bool:
        return len(self._items) >= n

    def _pick(self, n: int) -> list[Row]:
        rows, self._items = self._items[:n], self._items[n:]
        return rows

    def take_rows(self, n: int, timeout_s: float | None = None) -> list[Row]:
        """Remove ``n`` rows, blocking until there are enough; a closed queue with fewer
        left raises ``OutOfRangeError`` (or the error a producer died of)."""
        deadline = self._deadline(timeout_s)
        with self._cond:
            while not self._ready(n):
                if self._error is not None:
                    raise TfcError(f"queue '{self.name}': a producer failed: "
                                   f"{type(self._error).__name__}: {self._error}"
                                   ) from self._error
                if self._closed:
                    if len(self._items) >= n:
                        break
                    raise OutOfRangeError(f"queue '{self.name}' is closed and has "
                                          f"{len(self._items)} element"
                                          f"{'s' if len(self._items) != 1 else ''}, fewer "
                                          f"than the {n} asked for")
                self._wait(deadline, "dequeue")
            rows = self._pick(n)
            self._cond.notify_all()
            return rows

    def close_now(self, cancel_pending_enqueues: bool = False) -> None:
        """Close: later enqueues fail; dequeues take what is left, then OutOfRange."""
        with self._cond:
            self._closed = True
            self._cancelled = self._cancelled or cancel_pending_enqueues
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """A producer died of ``error``: waiting and later dequeues raise it."""
        with self._cond:
            if self._error is None:
                self._error = error
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    # ---- the graph ops --------------------------------------------------------------

    def _component_tensors(self, values: Any, what: str) -> list[Tensor]:
        from tfc.api.tensor import convert_to_tensor
        if not isinstance(values, (list, tuple)):
            values = [values]
        if len(values) != len(self.dtypes):
            raise TfcError(f"{what} on queue '{self.name}': expected {len(self.dtypes)} "
                           f"components, got {len(values)}")
        tensors = []
        with self.graph.as_default():
            for v, dt in zip(values, self.dtypes):
                t = convert_to_tensor(v, dtype=dt) if not isinstance(v, Tensor) else v
                if t.dtype != dt:
                    raise TfcError(f"{what} on queue '{self.name}': {t} is not of dtype "
                                   f"{dt.value}")
                tensors.append(t)
        return tensors

    def enqueue(self, values: Any, name: str | None = None) -> Operation:
        """An operation putting one element (a value per component) into the queue."""
        tensors = self._component_tensors(values, "enqueue")

        def consume(arrays: list[np.ndarray]) -> None:
            self.put_rows([self._check_row(arrays, "enqueue")])
        return host_operation(self.graph, HostEffect(tensors, consume),
                              name or f"{self.name}_enqueue")

    def enqueue_many(self, values: Any, name: str | None = None) -> Operation:
        """An operation putting the rows of ``values`` (first dim) into the queue."""
        tensors = self._component_tensors(values, "enqueue_many")

        def consume(arrays: list[np.ndarray]) -> None:
            counts = {len(a) if a.ndim else -1 for a in arrays}
            if len(counts) != 1 or -1 in counts:
                raise FeedError(f"enqueue_many on queue '{self.name}': the components need "
                                f"one first dim, got shapes "
                                f"{', '.join(str(list(a.shape)) for a in arrays)}")
            rows = [self._check_row([a[i] for a in arrays], "enqueue_many")
                    for i in range(counts.pop())]
            self.put_rows(rows)
        return host_operation(self.graph, HostEffect(tensors, consume),
                              name or f"{self.name}_enqueue_many")

    def _dequeue_placeholders(self, n: int | None, name: str) -> list[Tensor]:
        lead = [] if n is None else [n]
        with self.graph.as_default():
            return [self.graph.placeholder(dt, [*lead, *self._static(shape)], f"{name}_{i}")
                    for i, (dt, shape) in enumerate(zip(self.dtypes, self.shapes))]

    def _static(self, shape: tuple[int | None, ...]) -> list[Any]:
        if any(d is None for d in shape):
            raise TfcError(f"queue '{self.name}': dequeue needs fully known shapes, got "
                           f"{list(shape)}")
        return list(shape)

    def dequeue(self, name: str | None = None) -> Any:
        """The next element: a tensor (one component) or a list of them; each step that
        needs it takes one element (blocking until there is one)."""
        return self._dequeue(None, name or f"{self.name}_dequeue")

    def dequeue_many(self, n: int, name: str | None = None) -> Any:
        """The next ``n`` elements, stacked (first dim ``n``)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise TfcError(f"dequeue_many on queue '{self.name}': n must be an integer >= 1, "
                           f"not {n!r}")
        return self._dequeue(n, name or f"{self.name}_dequeue_many")

    def _dequeue(self, n: int | None, name: str) -> Any:
        placeholders = self._dequeue_placeholders(n, name)

        def produce() -> list[np.ndarray]:
            rows = self.take_rows(1 if n is None else n)
            if n is None:
                return list(rows[0])
            return [np.stack(parts) for parts in zip(*rows)]
        add_host_input(self.graph, HostInput(placeholders, produce))
        return placeholders[0] if len(placeholders) == 1 else placeholders

    def size(self, name: str | None = None) -> Tensor:
        """The number of elements in the queue (an i32 scalar), read before the step."""
        with self.graph.as_default():
            p = self.graph.placeholder(DType.i32, [], name or f"{self.name}_size")
        add_host_input(self.graph, HostInput([p], lambda: [np.asarray(len(self), np.int32)]))
        return p

    def close(self, cancel_pending_enqueues: bool = False, name: str | None = None
              ) -> Operation:
        """An operation closing the queue (see ``close_now``)."""
        return host_operation(self.graph, HostEffect(
            [], lambda _: self.close_now(cancel_pending_enqueues)), name or f"{self.name}_close")


def _component_shapes(shapes: Any, count: int) -> list[tuple[int | None, ...]]:
    """One shape per component: ``None`` means scalars; one component's shape may be
    given bare (``[3]`` rather than ``[[3]]``)."""
    if shapes is None:
        return [() for _ in range(count)]
    listed = list(shapes)
    if count == 1 and all(d is None or isinstance(d, int) for d in listed):
        listed = [listed]  # one component's shape given bare
    if len(listed) != count:
        raise TfcError(f"a queue with {count} dtypes needs as many shapes, got {len(listed)}")
    return [tuple(s) for s in listed]


class FIFOQueue(QueueBase):
    """Elements leave in the order they came (``tf.queue.FIFOQueue``)."""


class RandomShuffleQueue(QueueBase):
    """Elements leave in a random order; a dequeue leaves at least ``min_after_dequeue``
    elements behind (for a good mix) until the queue is closed
    (``tf.queue.RandomShuffleQueue``)."""

    def __init__(self, capacity: int, min_after_dequeue: int, dtypes: Sequence[Any],
                 shapes: Sequence[Sequence[int | None]] | None = None,
                 seed: int | None = None, name: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, graph: Graph | None = None) -> None:
        super().__init__(capacity, dtypes, shapes, name, timeout_s, graph)
        if (isinstance(min_after_dequeue, bool) or not isinstance(min_after_dequeue, int)
                or not 0 <= min_after_dequeue < capacity):
            raise TfcError(f"min_after_dequeue must be an integer in [0, capacity "
                           f"{capacity}), not {min_after_dequeue!r}")
        self.min_after_dequeue = min_after_dequeue
        self._rng = np.random.default_rng(seed)

    def _ready(self, n: int) -> bool:
        return len(self._items) >= n + (0 if self._closed else self.min_after_dequeue)

    def _pick(self, n: int) -> list[Row]:
        rows = []
        for _ in range(n):
            i = int(self._rng.integers(len(self._items)))
            rows.append(self._items[i])
            self._items[i] = self._items[-1]
            self._items.pop()
        return rows
