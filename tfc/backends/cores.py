"""Cores that a thread of this process takes for work of its own, which the backends'
thread pools then leave to it.

A ``Dataset.prefetch`` producer makes the next batch while the training step runs. The
step's GEMMs are fork-join over every core (llvm's OpenBLAS: two threads on 2 cores); with
the producer running beside them there are more runnable threads than cores, and the
GEMM's caller waits for its descheduled half. The CNN step of ``examples/cnn_digits.py``
beside a busy Python thread (2 cores, load 5.5): median 120 us and 37 steps/s with
OpenBLAS on two threads, 97 us and 1,024 steps/s on one. So while a thread holds
``reserve_core()`` (the producer, while it makes an element; not while it waits for room
in its queue), backends that run threads of their own use one thread fewer per
reservation (never fewer than one). (An OpenBLAS worker that is already spinning after a
GEMM spins on: for steps whose GEMMs are all small, llvm keeps OpenBLAS on one thread
throughout, ``tfc.backends.llvm.runtime.blas_policy``.)

Backends register a hook (``on_reserved``) that is called with the number of cores held
whenever it changes (and once at registration); calls are serialized by this module's
lock, so a hook sees the counts in order. A hook must not call back into this module.
"""

from __future__ import annotations

import threading
from typing import Callable

_lock = threading.Lock()
_reserved = 0
_hooks: list[Callable[[int], None]] = []


def reserved() -> int:
    """How many cores threads of this process hold now."""
    return _reserved


def on_reserved(hook: Callable[[int], None]) -> Callable[[], None]:
    """Call ``hook(count)`` now and whenever the number of cores held changes; returns
    the function that stops the calls."""
    with _lock:
        _hooks.append(hook)
        hook(_reserved)

    def remove() -> None:
        with _lock:
            _hooks.remove(hook)
    return remove


def _change(delta: int) -> None:
    global _reserved
    with _lock:
        _reserved += delta
        for hook in _hooks:
            hook(_reserved)


class reserve_core:
    """``with reserve_core(): ...``: this thread needs a core of its own for the block
    (module docstring). Cheap when no backend registered a hook: one lock."""

    def __enter__(self) -> "reserve_core":
        _change(1)
        return self

    def __exit__(self, *exc: object) -> None:
        _change(-1)
