"""Cache writes off a compile's critical path: one worker thread, joined at exit.

A compile that misses its caches stores what it made for the next process (the lowered
module, ``tfc.api.lowered_cache``; the native code, the llvm entry cache). Encoding and
writing that cost a 256-layer MLP's edited first step ~60 ms of its ~360 ms, for a
result nobody in this process reads. ``submit`` hands such a write (known by its file) to a worker thread,
which mostly runs while the first step's native code runs (it releases the GIL).

What is kept as it was:

- a write still lands: the worker is a non-daemon thread, which the interpreter joins at
  a normal exit (before ``atexit`` handlers run); a killed process loses it, as it lost a
  write it was killed in the middle of before (the writes are atomic: a temp file moved
  into place, so a reader finds the old file, the new one or none);
- a failed write is a miss next time: the jobs catch what they caught when run inline
  (``OSError``); anything else is a bug, reported (a traceback on stderr) and never
  raised into the caller, whose compile succeeded;
- this process sees its own writes: a lookup of a key with a write pending waits for it
  (``wait_for``), so it reads what it would have read had the write been inline.

Jobs run one at a time, in the order given. A job must only read what nothing changes
any more (bytes, or a lowered module only its executable holds). Only a caller that opts
in defers: ``later`` runs a job at once unless a ``deferred`` block is open in the
thread, which holds the block's jobs until it ends, or until its ``Held`` is released.
``Session.run`` holds those of a new request's compile and first step, and releases them
once that step has run: the worker then contends with neither the compile's Python for
the GIL nor the first step's kernel threads for the cores (a 2-core host runs both).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from collections import OrderedDict
from typing import Callable, Hashable, Iterator

_lock = threading.Lock()
_jobs: OrderedDict[Hashable, Callable[[], None]] = OrderedDict()  # queued, by key
_running: Hashable | None = None  # the key of the job the worker runs
_worker: threading.Thread | None = None
_held = threading.local()  # .jobs: the ``Held`` of the innermost open ``deferred`` block


class Held:
    """Jobs held back (by key: a later job of a key replaces the one held) until
    ``release`` queues them; released at most once, and releasing twice is harmless."""

    def __init__(self) -> None:
        self.jobs: OrderedDict[Hashable, Callable[[], None]] = OrderedDict()

    def release(self) -> None:
        jobs, self.jobs = self.jobs, OrderedDict()
        for key, job in jobs.items():
            submit(key, job)


@contextlib.contextmanager
def deferred(held: Held | None = None) -> Iterator[Held]:
    """Hold the jobs ``later`` is given in this thread while the block runs, in ``held``
    or a new ``Held``. As the block ends (however it ends: what they write was made) they
    go to the enclosing block's, if one is open, else are released, unless ``held`` was
    given: its owner releases it (once it is done with what should not share the cores)."""
    outer: Held | None = getattr(_held, "jobs", None)
    mine = Held() if held is None else held
    _held.jobs = mine
    try:
        yield mine
    finally:
        _held.jobs = outer
        if outer is not None:
            outer.jobs.update(mine.jobs)
            mine.jobs.clear()
        elif held is None:
            mine.release()


def later(key: Hashable, job: Callable[[], None]) -> None:
    """``job`` (the write of ``key``) held for the worker where a ``deferred`` block is
    open in this thread, queued where a write of ``key`` is (so that they land in the
    order given), else run now."""
    held: Held | None = getattr(_held, "jobs", None)
    if held is not None:
        held.jobs[key] = job  # (a later write of a key replaces the earlier: see submit)
        return
    with _lock:
        queue = key in _jobs or key == _running
    if queue:
        submit(key, job)
    else:
        job()


def submit(key: Hashable, job: Callable[[], None]) -> None:
    """Run ``job`` (the write of ``key``) on the worker thread, after those before it. A
    job for ``key`` still queued is replaced by this one: each job writes the whole of
    its key's file, and the later one what is current (an entry with a binding the first
    step added: ``LLVMExecutable._binding``)."""
    global _worker
    with _lock:
        _jobs[key] = job
        if _worker is None:
            _worker = threading.Thread(target=_run, name="tfc-cache-writes", daemon=False)
            _worker.start()


def _run() -> None:
    global _worker, _running
    while True:
        with _lock:
            if not _jobs:
                _worker = _running = None
                return
            key, job = _jobs.popitem(last=False)
            _running = key
        try:
            job()
        except Exception:  # (a bug: reported, never raised into the compile that queued it)
            print(f"tfc: a cache write failed ({key!r}):", file=sys.stderr)
            traceback.print_exc()


def _forget_in_child() -> None:
    """A forked child starts with no worker and nothing queued (the parent writes what it
    queued; the child's copy of the lock may have been held by the parent's worker)."""
    global _lock, _jobs, _running, _worker
    _lock, _jobs, _running, _worker = threading.Lock(), OrderedDict(), None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def wait_for(key: Hashable) -> None:
    """Return once no write of ``key`` is queued or running (at once where none is)."""
    with _lock:
        busy = key in _jobs or key == _running
    if busy:
        flush()


def flush() -> None:
    """Return once every write submitted before is done."""
    while True:
        with _lock:
            worker = _worker
        if worker is None or worker is threading.current_thread():
            return
        worker.join()
