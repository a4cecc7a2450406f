"""``Dataset.prefetch(k)``: a producer thread keeps up to ``k`` elements ready in a bounded
queue, so the next batch is there when the step ends.

Each element travels with the upstream iterator's state just after it, so the consumer's
position (``state``) is exact although the producer runs ahead. A producer error is
raised in the consumer (once the elements before it are consumed); every wait is bounded
(``timeout_s``); the thread stops when the iterator is closed or dropped (it holds no
reference to the consuming iterator, and every put wakes up to check the stop flag).

``busy_s`` is the CPU time the producer thread spent making the elements taken so far:
its Python work holds the interpreter lock, which the consumer's step needs too, so it is
what a prefetch can cost the step beside it (``tools/bench_input.py`` reports it per
batch).

While it makes an element the producer reserves a core (``tfc.backends.cores``), so that
the step's fork-join GEMMs (llvm's OpenBLAS) run on one thread fewer instead of waiting
for a half that the producer descheduled; while it waits for room in the queue it holds
none. The map fn's compiled step lets the interpreter lock go while it computes (llvm
keeps it only through steps that are short: ``executable.GIL_HOLD_NS``), so the training
step can start while the producer maps the next batch."""

from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Any

from tfc.backends.cores import reserve_core
from tfc.errors import TfcError

_POLL_S = 0.05  # how often a blocked producer checks whether it should stop


def _produce(upstream: Any, out: "queue.Queue[tuple]", stop: threading.Event) -> None:
    """Put ``(kind, value, state, cpu_s)`` items: each element with the upstream state
    after it and the producer's CPU seconds for it; then the end, or the error."""
    def put(item: tuple) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    try:
        while not stop.is_set():
            start = time.thread_time()
            try:
                with reserve_core():  # (not while it waits for room in the queue)
                    element = upstream.next()
            except StopIteration:
                put(("end", None, upstream.state(), time.thread_time() - start))
                return
            if not put(("item", element, upstream.state(), time.thread_time() - start)):
                return
    except BaseException as e:  # surfaces in the consumer
        put(("error", e, None, 0.0))


class PrefetchIterator:
    """The iterator of a prefetched dataset; see the module docstring."""

    def __init__(self, upstream: Any, buffer_size: int, timeout_s: float) -> None:
        self.upstream = upstream
        self.buffer_size = buffer_size
        self.timeout_s = timeout_s
        self.wait_s = 0.0          # seconds the consumer spent waiting for elements
        self.waits = 0             # how many of its gets found the queue empty
        self.busy_s = 0.0          # producer CPU seconds for the elements taken (module doc)
        self._state = upstream.state()
        self._done: tuple | None = None
        self._thread: threading.Thread | None = None
        self._start()

    def _start(self) -> None:
        self._queue: queue.Queue[tuple] = queue.Queue(maxsize=self.buffer_size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=_produce, name="tfc-prefetch", daemon=True,
                                        args=(self.upstream, self._queue, self._stop))
        self._thread.start()
        self._finalizer = weakref.finalize(self, _stop_thread, self._stop, self._thread)

    def next(self) -> Any:
        if self._done is not None:
            raise StopIteration
        try:
            kind, value, state, busy = self._queue.get_nowait()
        except queue.Empty:
            start = time.perf_counter()
            kind, value, state, busy = self._wait()
            self.wait_s += time.perf_counter() - start
            self.waits += 1
        self.busy_s += busy
        if kind == "item":
            self._state = state
            return value
        if kind == "end":
            self._state = state
            self._done = ("end",)
            raise StopIteration
        self._done = ("error",)
        self.close()
        raise value

    def _wait(self) -> tuple:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                pass
            assert self._thread is not None
            if not self._thread.is_alive() and self._queue.empty():
                raise TfcError("Dataset.prefetch: the producer thread ended without a "
                               "result (it was stopped)")
            if time.monotonic() > deadline:
                raise TfcError(f"Dataset.prefetch: no element within {self.timeout_s:g} s "
                               f"(the upstream pipeline is stuck or too slow; raise "
                               f"timeout_s)")

    def state(self) -> dict[str, Any]:
        return self._state

    def restore(self, state: dict[str, Any]) -> None:
        self.close()
        self.upstream.restore(state)
        self._state = state
        self._done = None
        self._start()

    def close(self) -> None:
        """Stop the producer thread and wait for it (bounded)."""
        self._finalizer()


def _stop_thread(stop: threading.Event, thread: threading.Thread) -> None:
    stop.set()
    if thread is not threading.current_thread():
        thread.join(timeout=5.0)
