"""Timestamps of a cluster step's hops, for finding its critical path (benchmarks only).

Off unless the environment has ``TFC_STEP_TRACE=1`` when this module is imported (a
cluster's task processes inherit the variable from the node processes, so set it before
the cluster starts: ``tools/bench_cluster.py --trace`` does). When off, a call site
costs one test of ``ENABLED``. When on, each process records ``(ns, thread, step id,
event)`` with ``time.perf_counter_ns()`` (CLOCK_MONOTONIC: comparable across the
processes of one host) and the thread's CPU time (``time.thread_time_ns()``) at every
frame written or read, every wait for a peer's value and its end, and the start and end
of each task's part of a step; ``take`` hands them over (a task's through its actor,
``TaskActor.trace_events``) and forgets them.
"""

from __future__ import annotations

import os
import threading
import time

ENABLED = os.environ.get("TFC_STEP_TRACE", "") not in ("", "0")

# (ns, thread's native id, step id, event, the thread's CPU time in ns)
Event = tuple[int, int, int, str, int]
_events: list[Event] = []


def mark(step_id: int, event: str) -> None:
    """Record ``event`` of step ``step_id`` now (call only under ``if ENABLED``)."""
    _events.append((time.perf_counter_ns(), threading.get_native_id(), step_id, event,
                    time.thread_time_ns()))


def take() -> list[Event]:
    """The events recorded so far, forgotten here."""
    global _events
    events, _events = _events, []
    return events
