"""Elastic all-reduce grows back: a dead worker's replacement rejoins the ring.

After an elastic recovery (``tfc.distributed.elastic.shrink``) the job runs on the N-1
workers left. With ``rejoin`` (``Supervisor(rejoin=True)``, the default of
``--on-failure elastic``; ``--no-rejoin`` turns it off) it does not stay there:

1. *Restart, in the background.* Right after the shrink a thread starts the whole ring of
   the module the job was compiled to (N workers) as a new ``ClusterRuntime``: N new
   actors, all at once (``RayCluster.start_actors``), each survivor's on its node and
   the dead worker's on the node it died on while that node is alive, else on the
   least used one (``rejoin_node``); they load the artifact, connect and compile their
   parts while the job goes on at N-1. Why the survivors get new actors too: a task
   actor holds one program, and theirs is the N-1 ring's (its stages and links); the
   new ones cost nothing at the step boundary, they start meanwhile.
2. *Rejoin, at a step boundary* (``grow``): before the next step after the ring is
   ready, the variables are read from one survivor (its copy as the last completed step
   left it, bitwise that of every worker), mirrored to the N workers' copies, and the
   program's module, variables and executables swapped in place, as a shrink does; the
   N-1 ring's actors are closed. The new tasks hold the values they were started with,
   so the next step sends every variable with its launch. That step splits the global
   batch N ways again: from here the job computes what a job at N workers computes from
   these variables (the same global batch, the same step counter for random ops). No
   step is lost or run twice.
3. *Bounded.* A ring that fails to start, or is not ready ``timeout_s`` after the shrink,
   is given up (its actors closed): the job goes on at N-1 and a line says why. A worker
   that dies again after ``max_rejoins`` rejoins is not restarted again.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tfc.errors import TfcError

DEFAULT_REJOIN_TIMEOUT_S = 120.0  # from the shrink to the new ring ready, at most


@dataclass
class RejoinEvent:
    """One rejoin: the workers that came back (or did not, and why), and its times."""

    tasks: list[str]  # short names
    workers_before: int
    workers_after: int  # == workers_before when it failed
    step: int  # the step boundary where it happened (or was given up)
    nodes: list[str]  # where each rejoining worker was restarted
    restart_s: float  # from the shrink to the new ring ready (in the background)
    ready_wait_s: float = 0.0  # from ready to the step boundary that took it
    read_s: float = 0.0  # the variables from a survivor
    swap_s: float = 0.0  # the old ring closed, the program swapped
    source: str = ""  # the survivor the variables came from
    failed: str = ""  # why the job goes on without them ("" when they rejoined)

    def line(self) -> str:
        tasks = " and ".join(self.tasks)
        if self.failed:
            return (f"{tasks} did not rejoin ({self.failed}); going on with "
                    f"{self.workers_before} of {self.workers_before + len(self.tasks)} "
                    f"workers")
        where = ", ".join(n[:12] for n in self.nodes)
        return (f"{tasks} rejoined at step {self.step}: back to {self.workers_after} "
                f"workers (restarted on node {where} in {self.restart_s:.2f} s, in the "
                f"background); variables of step {self.step} from {self.source} in "
                f"{self.read_s:.2f} s; lost 0 steps")


def rejoin_node(alive: Sequence[str], died_on: str | None, used: Counter[str]) -> str:
    """The node a worker that died on ``died_on`` restarts on to rejoin: that node while
    it is alive (``alive``: the cluster's alive nodes, in order), as Horovod Elastic and
    TorchElastic restart a worker on its host; else (the node is gone) the least used
    (``used``: tasks per node) alive node, the first in order among equals."""
    if not alive:
        raise TfcError("the Ray cluster has no alive node to restart a worker on")
    if died_on is not None and died_on in alive:
        return died_on
    return min(alive, key=lambda n: (used[n], list(alive).index(n)))


class PendingRejoin:
    """The N-worker ring being started in the background (see the module docstring):
    ``state()`` says ``starting``, ``ready``, ``failed`` or ``late`` (not ready within
    ``timeout_s``); ``take()`` hands over the ready runtime; ``cancel()`` gives it up
    and closes its actors (now, or when its start ends: that start is bounded by the
    runtime's own timeouts)."""

    def __init__(self, module: Any, values: dict[str, np.ndarray], step: int,
                 backend: str, address: str, task_timeout_s: float,
                 nodes: dict[str, str], tasks: Sequence[str], timeout_s: float) -> None:
        self.tasks = list(tasks)  # the rejoining workers (full names)
        self.nodes = nodes  # every task of the new ring -> its node
        self.timeout_s = timeout_s
        self.started = time.monotonic()
        self.ready_at: float | None = None
        self.error = ""
        self._runtime: Any = None
        self._cancelled = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._start, name="tfc: rejoin", daemon=True,
            args=(module, values, step, backend, address, task_timeout_s))
        self._thread.start()

    def _start(self, module: Any, values: dict[str, np.ndarray], step: int, backend: str,
               address: str, task_timeout_s: float) -> None:
        from tfc.distributed.runtime import ClusterRuntime
        from tfc.distributed.task import cluster_tasks
        runtime, error = None, ""
        try:
            runtime = ClusterRuntime(module, values, step, backend, address, task_timeout_s,
                                     nodes=[self.nodes[t] for t in cluster_tasks(module)])
        except Exception as e:  # (one line: the runtime's errors name the task)
            text = str(getattr(e, "message", "") or e).strip()
            error = text.splitlines()[0] if text else type(e).__name__
        with self._lock:
            self.ready_at = time.monotonic()
            cancelled = self._cancelled
            if not cancelled:
                self._runtime, self.error = runtime, error
        if cancelled and runtime is not None:
            runtime.close()
        self._done.set()

    def state(self) -> str:
        with self._lock:
            if self.ready_at is None:
                late = time.monotonic() - self.started > self.timeout_s
                return "late" if late else "starting"
            return "failed" if self.error else "ready"

    def wait(self, timeout_s: float) -> bool:
        """Until the start ended (ready or failed), at most ``timeout_s``: whether it did."""
        return self._done.wait(timeout_s)

    def take(self) -> Any:
        """The ready ring's runtime (once)."""
        with self._lock:
            runtime, self._runtime = self._runtime, None
        assert runtime is not None, "take() of a rejoin that is not ready"
        return runtime

    def cancel(self, wait_s: float = 0.0) -> None:
        """Give the ring up: its actors are closed now when it is ready, else when its
        start ends (waited for up to ``wait_s``)."""
        with self._lock:
            self._cancelled = True
            runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.close()
        if wait_s > 0:
            self._thread.join(wait_s)


def grow(program: Any, runtime: Any) -> tuple[str, float]:
    """``program`` (on its N-1 ring) goes on on ``runtime`` (the ready N ring), at its
    step: the variables from the first worker of the current ring, mirrored to the N
    workers' copies (see the module docstring). The survivor read, and the seconds that
    took."""
    from tfc.distributed.elastic import mirrored_values, read_copy, swap_ring
    from tfc.distributed.recovery import short_name
    old = program._cluster
    source = next(iter(old.tasks))
    started = time.monotonic()
    values = read_copy(old, source)
    read_s = time.monotonic() - started
    swap_ring(program, old, runtime, mirrored_values(runtime.module, values), program.step)
    return short_name(source), read_s
