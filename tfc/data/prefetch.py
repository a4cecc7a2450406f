"""``Dataset.prefetch(k)``: a producer thread keeps up to ``k`` elements ready, so the next
batch is there when the step ends; and one producer serves successive passes.

**Across passes.** ``fit`` (``Dataset.epochs``) and an enclosing ``repeat`` open the passes
of a prefetched dataset one after another through a ``PrefetchPasses``: when a pass ends
its producer goes on with the next pass's elements (the pass numbers are fixed: the next
``iter()``'s, the next epoch of the ``repeat``), so the next epoch's first batches are made
while the current epoch's last steps run, and no thread is started per epoch. A pass's
elements depend on its number only (a shuffle seeds each pass from it), so they are those
an iterator opened afresh would yield. When the next pass opened is not the one the
producer went on with (a pass left before its end, another pass number), the producer is
replaced by a fresh one at the right place. A queue's elements are taken for good, so
over a queue (cardinality ``UNKNOWN``) a producer never runs into the next pass.

**Positions.** Each element travels with the upstream iterator's state just after it, so
the consumer's position (``state``) is exact although the producer runs ahead; ``restore``
starts a producer at the restored position.

**Errors and ends.** A producer error is raised in the consumer (once the elements before
it are consumed); every wait is bounded (``timeout_s``); the thread stops when its owner
(the iterator, or the ``PrefetchPasses`` of ``epochs``/``repeat``) is closed or dropped:
it holds no reference to them, and a producer waiting for room wakes up to check its stop
flag.

**The hand-off** is a deque with a waiting flag per side (``_Channel``): taking an element
that is there and putting one where there is room take no lock; a side that must wait
raises its flag and blocks on a plain lock (``_Signal``), which the other side releases
only when it finds the flag up. (``queue.Queue`` runs a lock and a ``Condition``, which
allocates a lock per wait, on both sides per element.) As tf.data's, the producer makes
an element only when there is room for it: at most ``k`` are made ahead.

``busy_s`` is the CPU time the producer thread spent making the elements taken so far:
its Python work holds the interpreter lock, which the consumer's step needs too, so it is
what a prefetch can cost the step beside it (``tools/bench_input.py`` reports it per
batch).

While it makes elements the producer reserves a core (``tfc.backends.cores``), so that
the step's fork-join GEMMs (llvm's OpenBLAS) run on one thread fewer instead of waiting
for a half that the producer descheduled; while it waits for room it holds none (the
reservation spans a run of elements between two waits, not each element). The map
fn's compiled step lets the interpreter lock go while it computes (llvm keeps it only
through steps that are short: ``executable.GIL_HOLD_NS``), so the training step can start
while the producer maps the next batch."""

from __future__ import annotations

import collections
import threading
import time
import weakref
from typing import Any, Callable

from tfc.backends.cores import reserve_core
from tfc.errors import TfcError

_POLL_S = 0.05  # how often a blocked side checks whether it should stop / the other died

_ITEM, _END, _ERROR = 0, 1, 2  # kinds of what a producer puts


class _Signal:
    """A wake-up that waits for at most one pending signal: a lock held while none is
    pending (``acquire``/``release`` are C calls; a ``Condition`` allocates a lock and
    runs Python per wait and per notify). ``waiting`` is the waiter's flag: the other
    side signals only when it is up, and clears it, so a signal is given once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.waiting = False

    def wait(self, timeout_s: float) -> None:
        self._lock.acquire(timeout=timeout_s)

    def give(self) -> None:
        self.waiting = False
        try:
            self._lock.release()
        except RuntimeError:  # one is pending already (the waiter did not need it)
            pass


class _Channel:
    """A bounded hand-off from one producer thread to one consumer (module docstring).

    Only elements count against ``capacity``: an end or an error is put at once, so the
    next pass's first element can be made while the consumer still takes the current
    pass's last. ``marks_put`` is written by the producer only, ``marks_taken`` by the
    consumer only (the GIL orders their reads and writes). A side raises its waiting
    flag before it checks the other side's progress a last time and waits, and each side
    looks at the other's flag after it made progress: so a wake-up is never lost (a
    spurious one costs a loop)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: collections.deque[tuple] = collections.deque()
        self.marks_put = 0
        self.marks_taken = 0
        self.room = _Signal()   # the producer waits for room
        self.ready = _Signal()  # the consumer waits for an item

    def _elements(self) -> int:
        return len(self.items) - (self.marks_put - self.marks_taken)

    def full(self) -> bool:
        return self._elements() >= self.capacity

    def wait_room(self, stop: threading.Event) -> bool:
        """Wait until there is room for an element; False if stopped meanwhile."""
        room = self.room
        while self._elements() >= self.capacity:
            if stop.is_set():
                return False
            room.waiting = True
            if self._elements() >= self.capacity:  # (checked after the flag is up)
                room.wait(_POLL_S)
            room.waiting = False
        return True

    def put(self, item: tuple) -> None:
        """Put an element (after ``wait_room``) or an end or error (no room needed)."""
        if item[0] != _ITEM:
            self.marks_put += 1
        self.items.append(item)
        if self.ready.waiting:
            self.ready.give()

    def take(self) -> tuple | None:
        """The next item, or None if there is none yet."""
        items = self.items
        if not items:
            return None
        if items[0][0] != _ITEM:
            self.marks_taken += 1  # (before it leaves: the count never reads one low)
        item = items.popleft()
        if self.room.waiting:
            self.room.give()
        return item

    def wait(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for an item (returns early when one is there)."""
        ready = self.ready
        ready.waiting = True
        if not self.items:  # (checked after the flag is up)
            ready.wait(timeout_s)
        ready.waiting = False


class _Stream:
    """A producer thread and its channel: the elements of ``upstream`` (pass ``index``),
    then of the next passes (``make(index)``) while ``last`` (None: no end) allows.
    ``starts`` holds the start position of each pass it went on with, put before the
    previous pass's end (so it is there when the consumer adopts that pass)."""

    def __init__(self, make: Callable[[int], Any], upstream: Any, index: int,
                 last: int | None, capacity: int) -> None:
        self.channel = _Channel(capacity)
        self.stop = threading.Event()
        self.last = last  # (the owner lowers it when it opens the last pass it will)
        self.starts: dict[int, dict[str, Any]] = {}
        self.thread = threading.Thread(target=_produce, name="tfc-prefetch", daemon=True,
                                       args=(make, upstream, index, self))
        self.thread.start()

    def close(self) -> None:
        """Stop the thread and wait for it (bounded)."""
        self.stop.set()
        self.channel.room.give()  # (a producer waiting for room sees the stop at once)
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=5.0)


def _produce(make: Callable[[int], Any], upstream: Any, index: int, stream: _Stream) -> None:
    """Put ``(kind, value, state, cpu_s)``: each element with the upstream state after it
    and the producer's CPU seconds for it; a pass's end (its index as the value), then
    the next pass's elements if ``stream.last`` allows; or the error. The core is
    reserved from a wake-up to the next wait for room (not per element)."""
    channel, stop = stream.channel, stream.stop
    core: reserve_core | None = None
    try:
        clock = time.thread_time()
        while not stop.is_set():
            if channel.full():
                if core is not None:
                    core.__exit__()
                    core = None
                if not channel.wait_room(stop):
                    break
            if core is None:
                core = reserve_core().__enter__()
            try:
                element = upstream.next()
            except StopIteration:
                end = (_END, index, upstream.state(), time.thread_time() - clock)
                _close(upstream)
                upstream = None
                failed: BaseException | None = None
                if stream.last is None or index < stream.last:
                    try:  # (before the end is put: its start is there when it is opened)
                        upstream = make(index + 1)
                        stream.starts[index + 1] = upstream.state()
                    except BaseException as e:  # the next pass's error, after this end
                        upstream, failed = None, e
                channel.put(end)
                if failed is not None:
                    channel.put((_ERROR, failed, None, 0.0))
                clock = time.thread_time()
                if upstream is None:
                    return
                index += 1
                continue
            now = time.thread_time()
            channel.put((_ITEM, element, upstream.state(), now - clock))
            clock = now
    except BaseException as e:  # surfaces in the consumer
        channel.put((_ERROR, e, None, 0.0))
    finally:
        if core is not None:
            core.__exit__()
        if upstream is not None:
            _close(upstream)


def _close(it: Any) -> None:
    close = getattr(it, "close", None)
    if close is not None:
        close()


class PrefetchPasses:
    """Opens the passes ``(*prefix, index)`` of a prefetched dataset one after another
    with one producer (module docstring); ``close`` (or dropping it) stops the producer.

    ``make(index)`` is the upstream iterator of pass ``index``; ``continues`` is whether a
    producer may run into the next pass (not over a queue)."""

    def __init__(self, make: Callable[[int], Any], buffer_size: int, timeout_s: float,
                 continues: bool) -> None:
        self.make = make
        self.buffer_size = buffer_size
        self.timeout_s = timeout_s
        self.continues = continues
        self._stream: list[_Stream | None] = [None]  # (a box: the finalizer holds it)
        self._next: int | None = None  # the pass the producer is on after a pass ended
        self._finalizer = weakref.finalize(self, _close_box, self._stream)

    def open(self, index: int, last: bool = False, alone: bool = False
             ) -> "PrefetchIterator":
        """The iterator of pass ``index``; ``last``: no pass is opened after it; ``alone``
        (also last): the iterator owns these passes, closing it closes them."""
        last = last or alone
        stream = self._stream[0]
        if stream is not None and self._next == index and not stream.stop.is_set():
            stream.last = index if last else None  # (adopted: made from its end on)
            start = stream.starts.pop(index, {})  # (none: an error comes first)
        else:
            stream, start = self._restart(index, None, last)
        self._next = None
        return PrefetchIterator(self, index, stream, start, alone)

    def _restart(self, index: int, state: Any, last: bool) -> tuple[_Stream, dict[str, Any]]:
        """A new producer for pass ``index`` from ``state`` (None: its start), and the
        position it starts at."""
        self._close_stream()
        upstream = self.make(index)
        if state is not None:
            upstream.restore(state)
        start = upstream.state()
        stream = _Stream(self.make, upstream, index,
                         index if last or not self.continues else None, self.buffer_size)
        self._stream[0] = stream
        return stream, start

    def _ended(self, index: int, stream: _Stream) -> None:
        """The consumer took pass ``index``'s end: the producer goes on with the next."""
        if stream is self._stream[0] and (stream.last is None or stream.last > index):
            self._next = index + 1

    def _left(self, stream: _Stream) -> None:
        """A pass's iterator closed before its end: its producer is of no more use."""
        if stream is self._stream[0]:
            self._close_stream()

    def _close_stream(self) -> None:
        stream, self._stream[0], self._next = self._stream[0], None, None
        if stream is not None:
            stream.close()

    def close(self) -> None:
        self._finalizer()


def _close_box(box: list[_Stream | None]) -> None:
    stream, box[0] = box[0], None
    if stream is not None:
        stream.close()


class PrefetchIterator:
    """The iterator of one pass of a prefetched dataset; see the module docstring."""

    def __init__(self, passes: PrefetchPasses, index: int, stream: _Stream,
                 start: dict[str, Any], owns: bool = False) -> None:
        self.passes = passes
        self.index = index
        self.timeout_s = passes.timeout_s
        self.wait_s = 0.0          # seconds the consumer spent waiting for elements
        self.waits = 0             # how many of its takes found nothing there
        self.busy_s = 0.0          # producer CPU seconds for the elements taken (module doc)
        self._owns = owns          # closing this iterator closes its passes (one pass alone)
        self._stream = stream
        self._state = start
        self._done = False
        self._ended = False

    def next(self) -> Any:
        if self._done:
            raise StopIteration
        item = self._stream.channel.take()
        if item is None:
            start = time.perf_counter()
            item = self._wait()
            self.wait_s += time.perf_counter() - start
            self.waits += 1
        kind, value, state, busy = item
        self.busy_s += busy
        if kind == _ITEM:
            self._state = state
            return value
        self._done = True
        if kind == _END:
            self._state = state
            self._ended = True
            self.passes._ended(self.index, self._stream)
            raise StopIteration
        self.close()
        raise value

    def _wait(self) -> tuple:
        channel, thread = self._stream.channel, self._stream.thread
        deadline = time.monotonic() + self.timeout_s
        while True:
            channel.wait(_POLL_S)
            item = channel.take()
            if item is not None:
                return item
            if not thread.is_alive():
                item = channel.take()  # (put just before it ended)
                if item is not None:
                    return item
                raise TfcError("Dataset.prefetch: the producer thread ended without a "
                               "result (it was stopped)")
            if time.monotonic() > deadline:
                raise TfcError(f"Dataset.prefetch: no element within {self.timeout_s:g} s "
                               f"(the upstream pipeline is stuck or too slow; raise "
                               f"timeout_s)")

    def state(self) -> dict[str, Any]:
        return self._state

    def restore(self, state: dict[str, Any]) -> None:
        last = self._stream.last == self.index
        self._stream, self._state = self.passes._restart(self.index, state, last)
        self._done = self._ended = False

    def close(self) -> None:
        """Stop the producer (bounded wait), unless it went on with the next pass that the
        owner of this iterator's passes will open."""
        if self._owns:
            self.passes.close()
        elif not self._ended:
            self.passes._left(self._stream)
