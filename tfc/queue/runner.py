"""Producer threads for queues (``tf.train.QueueRunner``) and their ``Coordinator``.

Each thread of a ``QueueRunner`` runs one of its enqueue operations in a loop in the
session. When the input of every thread is exhausted (its step raised
``OutOfRangeError``: it dequeues from a closed, empty queue upstream), the last one closes
the queue, so consumers see the end of the input. A thread that dies of any other error
hands it to the queue (every waiting and later dequeue raises it: no consumer waits
forever for a dead producer) and to the coordinator (``join`` re-raises it). A stop
request (``Coordinator.request_stop``) closes the queue with its pending enqueues
cancelled, which wakes a producer blocked on a full queue."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Sequence

from tfc.api.graph import Graph, Operation, get_default_graph
from tfc.errors import CancelledError, DeadlineExceededError, OutOfRangeError, TfcError


class Coordinator:
    """Stops a set of threads together and reports the first error (``tf.train.
    Coordinator``)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._on_stop: list[Callable[[], None]] = []
        self._threads: list[threading.Thread] = []

    def should_stop(self) -> bool:
        return self._stop.is_set()

    def request_stop(self, ex: BaseException | None = None) -> None:
        """Ask every thread to stop; ``ex`` (the first one given) is re-raised by
        ``join``."""
        with self._lock:
            if ex is not None and self._error is None:
                self._error = ex
            first = not self._stop.is_set()
            self._stop.set()
            callbacks = list(self._on_stop) if first else []
        for cb in callbacks:
            cb()

    def on_stop(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once when a stop is requested (at once if it was)."""
        with self._lock:
            if not self._stop.is_set():
                self._on_stop.append(callback)
                return
        callback()

    def wait_for_stop(self, timeout_s: float | None = None) -> bool:
        return self._stop.wait(timeout_s)

    def register_thread(self, thread: threading.Thread) -> None:
        self._threads.append(thread)

    def join(self, threads: Iterable[threading.Thread] | None = None,
             stop_grace_period_s: float = 30.0) -> None:
        """Wait for the threads (those registered, and ``threads``) to end, at most
        ``stop_grace_period_s`` after a stop was requested; then re-raise the first
        error a thread reported."""
        wanted = list(self._threads) + [t for t in (threads or []) if t not in self._threads]
        deadline: float | None = None
        for t in wanted:
            while t.is_alive():
                if self._stop.is_set() and deadline is None:
                    deadline = time.monotonic() + stop_grace_period_s
                if deadline is not None and time.monotonic() > deadline:
                    raise TfcError(f"Coordinator.join: thread {t.name} did not stop within "
                                   f"{stop_grace_period_s:g} s of the stop request")
                t.join(timeout=0.1)
        if self._error is not None:
            raise self._error

    def raise_requested_exception(self) -> None:
        if self._error is not None:
            raise self._error


class QueueRunner:
    """Threads running ``enqueue_ops`` (one thread each) into ``queue``."""

    def __init__(self, queue: Any, enqueue_ops: Sequence[Operation]) -> None:
        if not enqueue_ops:
            raise TfcError(f"QueueRunner for queue '{queue.name}' needs enqueue ops")
        self.queue = queue
        self.enqueue_ops = list(enqueue_ops)
        self._lock = threading.Lock()
        self._running = 0

    def _run(self, session: Any, op: Operation, coord: Coordinator) -> None:
        try:
            while not coord.should_stop():
                try:
                    session.run(op)
                except OutOfRangeError:  # this thread's input is exhausted
                    with self._lock:
                        self._running -= 1
                        last = self._running == 0
                    if last:
                        self.queue.close_now()
                    return
                except CancelledError:
                    if coord.should_stop() or self.queue.closed:
                        return  # the queue was closed under us: a stop, not an error
                    raise
                except DeadlineExceededError:
                    if coord.should_stop():
                        return
                    continue  # a full queue nobody reads yet: keep trying until stopped
        except BaseException as e:  # surfaces in the consumer and in coord.join
            self.queue.fail(e)
            coord.request_stop(e)

    def create_threads(self, session: Any, coord: Coordinator | None = None,
                       daemon: bool = True, start: bool = True) -> list[threading.Thread]:
        """One thread per enqueue op (started unless ``start=False``)."""
        coord = coord or Coordinator()
        coord.on_stop(lambda: self.queue.close_now(cancel_pending_enqueues=True))
        with self._lock:
            self._running += len(self.enqueue_ops)
        threads = [threading.Thread(target=self._run, args=(session, op, coord),
                                    name=f"QueueRunner-{self.queue.name}-{i}", daemon=daemon)
                   for i, op in enumerate(self.enqueue_ops)]
        for t in threads:
            coord.register_thread(t)
            if start:
                t.start()
        return threads


def add_queue_runner(runner: QueueRunner, graph: Graph | None = None) -> None:
    """Record ``runner`` in the graph for ``start_queue_runners``."""
    g = graph or get_default_graph()
    g.__dict__.setdefault("_queue_runners", []).append(runner)


def start_queue_runners(session: Any, coord: Coordinator | None = None, daemon: bool = True,
                        start: bool = True) -> list[threading.Thread]:
    """Start the threads of every queue runner added to the session's graph."""
    runners: list[QueueRunner] = session.graph.__dict__.get("_queue_runners", [])
    return [t for r in runners for t in r.create_threads(session, coord, daemon, start)]
