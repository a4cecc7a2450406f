"""Where a step's ``send`` and ``recv`` meet: one table of keyed tensors per step.

A send never blocks (TensorFlow's semantics: the producer goes on); a recv waits until
its key arrives. If any device's part of the step fails, ``abort`` wakes every waiter
with that error, so one failure never leaves the other devices' threads hanging. A
timeout turns a graph that can never deliver a key (a bug in partitioning, not a user
error) into an error that names the key instead of a hang.
"""

from __future__ import annotations

import threading

import numpy as np

from tfc.errors import ExecutionError

DEFAULT_TIMEOUT_S = 300.0


class Rendezvous:
    """A thread-safe table of tensors keyed by rendezvous key, for one step."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._values: dict[str, np.ndarray] = {}
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self.timeout_s = timeout_s
        self.bytes_sent = 0

    def send(self, key: str, value: np.ndarray) -> None:
        with self._cond:
            if key in self._values:
                raise ExecutionError(f"rendezvous key {key!r} was sent twice in one step")
            self._values[key] = value
            self.bytes_sent += value.nbytes
            self._cond.notify_all()

    def recv(self, key: str) -> np.ndarray:
        with self._cond:
            ok = self._cond.wait_for(lambda: key in self._values or self._error is not None,
                                     timeout=self.timeout_s)
            if self._error is not None:
                raise ExecutionError(f"recv {key!r}: the step was aborted "
                                     f"({self._error})") from self._error
            if not ok:
                raise ExecutionError(f"recv {key!r}: nothing was sent within "
                                     f"{self.timeout_s:g} s")
            return self._values.pop(key)

    def abort(self, error: BaseException) -> None:
        """Fail every pending and future ``recv`` with ``error``."""
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()
