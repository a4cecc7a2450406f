"""Where a step's ``send`` and ``recv`` meet: one table of keyed tensors per step.

A send never blocks (TensorFlow's semantics: the producer goes on); a recv waits until
its key arrives. Inside one process a transfer is a hand-off: the table holds a
reference to the sender's array and the recv returns that same array, so nothing is
copied (what a transfer costs is the receiving thread's wake-up, not its bytes). The
executor sends a stage's values together (``send_many``: one wake-up of the receiver)
and receives a stage's values together (``recv_many``).

A cluster task's rendezvous also receives what other tasks' devices send to its own
(``tfc.distributed.task``: their values arrive by Ray, tagged with the step's id, and are
put here with ``send_many`` like any local send).

If any device's part of the step fails, ``abort`` wakes every waiter with that error,
so one failure never leaves the other devices' threads hanging. A timeout turns a graph
that can never deliver a key (a bug in partitioning, not a user error) into an error
that names the key instead of a hang.

A cluster task's table has a ``reader`` (its ``tfc.distributed.wire.Listener``): a recv
that waits reads the task's sockets itself (``reader.pump``) instead of sleeping until
another thread hands it the value, one thread wake-up fewer per value; a value or an
abort that comes by another thread wakes the reading one (``reader.wake``).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Protocol, Sequence

import numpy as np

from tfc.errors import ExecutionError

DEFAULT_TIMEOUT_S = 300.0


class Reader(Protocol):
    """What delivers a table's values from sockets (``tfc.distributed.wire.Listener``)."""

    def pump(self, timeout_s: float | None) -> bool:
        """Read and deliver what has come, waiting at most ``timeout_s`` for something;
        False at once when another thread is reading."""

    def wake(self) -> None:
        """Make the thread that is reading look again."""


class Rendezvous:
    """A thread-safe table of tensors keyed by rendezvous key, for one step.

    ``handoffs`` counts the tensors sent through it and ``bytes_sent`` adds up their
    sizes: the bytes handed over *by reference* from one device's thread to another's
    (no byte is copied inside one process), e.g. what fp16 transfers halve."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._values: dict[str, np.ndarray] = {}
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self.timeout_s = timeout_s
        self.handoffs = 0
        self.bytes_sent = 0
        self.reader: Reader | None = None

    def send(self, key: str, value: np.ndarray) -> None:
        self.send_many([(key, value)])

    def send_many(self, items: Sequence[tuple[str, np.ndarray]]) -> None:
        """Hand each (key, value) over, waking the waiting receivers once."""
        with self._cond:
            for key, value in items:
                if key in self._values:
                    raise ExecutionError(f"rendezvous key {key!r} was sent twice in one step")
                self._values[key] = value
                self.handoffs += 1
                self.bytes_sent += value.nbytes
            self._cond.notify_all()
        if self.reader is not None:
            self.reader.wake()

    def recv(self, key: str) -> np.ndarray:
        return self.recv_many([key])[0]

    def recv_many(self, keys: Sequence[str]) -> list[np.ndarray]:
        """The values of ``keys``, once all have been sent (each taken out of the table)."""
        values = self._values

        def arrived() -> bool:
            return self._error is not None or all(k in values for k in keys)

        with self._cond:
            ok = (self._cond.wait_for(arrived, timeout=self.timeout_s) if self.reader is None
                  else self._read_until(arrived))
            if self._error is not None:
                raise ExecutionError(f"recv {keys[0]!r}: the step was aborted "
                                     f"({self._error})") from self._error
            if not ok:
                missing = next(k for k in keys if k not in values)
                raise ExecutionError(f"recv {missing!r}: nothing was sent within "
                                     f"{self.timeout_s:g} s")
            return [values.pop(k) for k in keys]

    def _read_until(self, arrived: Callable[[], bool]) -> bool:
        """Read the sockets (``reader``; the table's lock let go meanwhile) until
        ``arrived()``, within the timeout; while another thread reads, wait for it to
        hand the values over (or to stop reading)."""
        assert self.reader is not None
        deadline = time.monotonic() + self.timeout_s
        while not arrived():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._cond.release()
            try:
                read = self.reader.pump(min(left, 1.0))
            finally:
                self._cond.acquire()
            if not read and not arrived():
                self._cond.wait(min(left, 0.05))
        return True

    def wake_readers(self) -> None:
        """Wake the recvs that wait for another thread's reading (it stopped)."""
        with self._cond:
            self._cond.notify_all()

    @property
    def error(self) -> BaseException | None:
        """What aborted the step (``abort``), if anything did."""
        return self._error

    def abort(self, error: BaseException) -> None:
        """Fail every pending and future ``recv`` with ``error``."""
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()
        if self.reader is not None:
            self.reader.wake()
