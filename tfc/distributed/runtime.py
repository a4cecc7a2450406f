"""The driver's side of a cluster program: one Ray actor per task, steps launched on all.

A module whose devices name tasks (``/job:ps/task:0/cpu:0``, ``/job:worker/task:1/cpu:0``)
runs with ``Program(module, cluster="local"|"auto"|"HOST:PORT")``: ``ClusterRuntime``
connects to the Ray cluster (``tfc.distributed.cluster``), starts one ``TaskActor``
(``tfc.distributed.task``) per task, spread over distinct nodes while there are enough,
and sends each the artifact's bytes once. Each entry then runs through a
``ClusterExecutable``, which speaks the protocol of an executable that keeps its
updates where it ran them (``fast_step(..., defer=True)`` and ``read_back``, as the
cuda executable does; ``tfc.runtime.runner``): a step sends each task the feeds its
stages use (large ones over a TCP link to the task, ``tfc.distributed.wire``), starts
the step on every task of the entry, and gathers the fetches; the values the tasks
exchange go task to task, never through here; the variables stay on
their tasks, and the program reads them back only when asked (``program.variables``, a
checkpoint, ``save``). The program's own arrays tell which values changed on its side
(``set_variable``, ``restore_checkpoint``): an array that is not the very one this
runtime last saw for a variable is sent to the variable's task with the next step.

Every wait has a timeout (``timeout_s``, default 120 s). A task whose step raises, dies
or does not finish in time fails the step with one ``ExecutionError`` naming the task;
the driver first tells every task to abort the step, so none is left waiting for a
value that will never come, and the step's updates are dropped on every task.
``last_transfer_stats`` counts what the latest step moved between tasks (and to and
from the driver), for benchmarks.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfc.backends.base import StepResult
from tfc.errors import ExecutionError, TfcError
from tfc.ir.core import Module
from tfc.ir.registry import writes_variable
from tfc.devices import task_of
from tfc.distributed.task import (BY_REFERENCE_BYTES, WIRED, WIRED_FEED_BYTES, TaskActor,
                                  cluster_tasks, feed_key, variable_owners)

DEFAULT_TIMEOUT_S = 120.0
# what "cluster=" takes besides a Ray address ("HOST:PORT")
NAMED_CLUSTERS = ("local", "auto", "inprocess")




class ClusterError(TfcError):
    """The cluster could not be used: not reachable, a task that did not start, no Ray.
    (Not the artifact's fault: the loader passes it on as it is.)"""


@dataclass
class TransferStats:
    """What one step moved: between tasks (actor to actor, ``tensors``/``bytes``), from
    the driver to the tasks (the feeds) and back (the fetches), and the values that
    arrived at a task after their step was over there (``stale``, dropped)."""

    tensors: int = 0
    bytes: int = 0
    feed_bytes: int = 0
    fetch_bytes: int = 0
    stale: int = 0
    task_seconds: dict[str, float] = field(default_factory=dict)  # each task's step time
    # where the step's time went (benchmarks): the driver's phases (``launch``: feeds and
    # calls out, ``wait``: until every task answered, ``gather``), each task's (``feeds``,
    # ``run`` with ``send`` and ``recv_wait`` inside it, ``acks``)
    driver_phases: dict[str, float] = field(default_factory=dict)
    task_phases: dict[str, dict[str, float]] = field(default_factory=dict)


def check_cluster_argument(cluster: str) -> str:
    """``cluster`` if it is a cluster the runtime can use, else a one-line ``TfcError``."""
    if cluster in NAMED_CLUSTERS:
        return cluster
    host, sep, port = cluster.rpartition(":")
    if sep and host and port.isdigit():
        return cluster
    raise TfcError(f"cluster {cluster!r}: expected local, auto, inprocess or HOST:PORT "
                   f"(the address of a Ray cluster's head)")


def wire_addresses(where: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[str, int]]:
    """Each task's listener (``ready``'s ``wire``), where its peers and the driver send
    it values; a task whose listener cannot be reached gets them by Ray instead."""
    return {task: (str(w["wire"][0]), int(w["wire"][1])) for task, w in where.items()}


class ClusterRuntime:
    """The actors of one program's tasks on a Ray cluster (see the module docstring)."""

    def __init__(self, module: Module, variables: Mapping[str, np.ndarray], step: int,
                 backend: str, address: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                 native: Mapping[str, Mapping[str, bytes]] | None = None) -> None:
        from tfc.runtime.artifact import artifact_bytes
        self.module = module
        self.timeout_s = timeout_s
        self.tasks = cluster_tasks(module)
        if not self.tasks:
            raise TfcError(f"cluster={address!r}: the module has no task devices to "
                           f"distribute (its devices: {', '.join(module.devices) or 'none'}; "
                           f"compile it with tfc compile --cluster or task devices)")
        self.owners = variable_owners(module)
        from tfc.distributed.cluster import RayCluster, require_ray
        try:
            self.ray = require_ray()
            self.cluster = RayCluster.connect(address, timeout_s=min(timeout_s, 30.0))
        except TfcError as e:
            raise ClusterError(e.message) from None
        self.actors: dict[str, Any] = {}
        self.where: dict[str, dict[str, Any]] = {}  # task -> its node id and pid
        self._links: dict[str, Any] = {}  # task -> the driver's wire Link to it, None: Ray
        try:
            data = self.ray.put(artifact_bytes(module, variables, step, backend, native))
            # what a task restarted after a failure loads (tfc.distributed.recovery)
            self.artifact, self.backend = data, backend
            nodes = self.cluster.spread(len(self.tasks))
            # tasks on nodes of one host (one IP: a loopback cluster's nodes) share its cores
            host = {n.node_id: n.ip for n in self.cluster.nodes}
            sharing = Counter(host[n] for n in nodes)
            for task, node in zip(self.tasks, nodes):
                self.actors[task] = self.cluster.start_actor(
                    TaskActor, task, data, backend, timeout_s, sharing[host[node]],
                    node_id=node,
                    name=f"task {task}", max_concurrency=4, timeout_s=timeout_s)
            self._wait({t: a.ready.remote() for t, a in self.actors.items()}, "start",
                       into=self.where)
            # the tasks' listeners: values go task to task over TCP (tfc.distributed.wire)
            self.wire = wire_addresses(self.where)
            self._wait({t: a.connect.remote(self.actors, self.wire)
                        for t, a in self.actors.items()}, "connect")
            self._executables = {e: ClusterExecutable(self, e) for e in module.entries}
            entries = {t: [e for e, exe in self._executables.items() if t in exe.tasks]
                       for t in self.tasks}
            # each task makes its executables now, all at once (a failure is a start's)
            self.made_from: dict[str, dict[str, str]] = self._wait(
                {t: a.prepare.remote(entries[t]) for t, a in self.actors.items()},
                "compile its part of the program")
        except TfcError as e:
            self.close()
            raise ClusterError(e.message) from None
        except BaseException:
            self.close()
            raise
        # the host array each variable's task value is known to be (see the docstring)
        self.synced: dict[str, np.ndarray] = dict(variables)
        self._outcome: dict[str, bool | None] = {t: None for t in self.tasks}
        self._launches = 0
        self.last_transfer_stats = TransferStats()
        self.stale_total = 0
        self.reads = 0  # read backs so far (each one round trip per task read)
        self.closed = False

    def executable(self, entry: str) -> "ClusterExecutable":
        return self._executables[entry]

    # ---- calls to the tasks --------------------------------------------------------------

    def _wait(self, refs: Mapping[str, Any], what: str, into: dict[str, Any] | None = None,
              step_id: int | None = None) -> dict[str, Any]:
        """The results of one call per task, within the timeout; the first failure is one
        ``ExecutionError`` naming its task, after every task was told to abort
        ``step_id`` (when given) and the others ended (within the timeout too)."""
        ray = self.ray
        by_ref = {r: t for t, r in refs.items()}
        pending = list(by_ref)
        results: dict[str, Any] = into if into is not None else {}
        deadline = time.monotonic() + self.timeout_s
        while pending:
            ready, pending = ray.wait(pending, num_returns=1,
                                      timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                late = ", ".join(by_ref[r] for r in pending)
                error = ExecutionError(f"task {late} did not {what} within "
                                       f"{self.timeout_s:g} s")
                self._abort(step_id, pending, str(error))
                raise error
            task = by_ref[ready[0]]
            try:
                results[task] = ray.get(ready[0])
            except Exception as e:
                error = ExecutionError(self._failure(task, what, e))
                self._abort(step_id, pending, str(error))
                died = None if self._died(e) else self._first_death(pending, by_ref, what)
                raise (error if died is None else ExecutionError(died)) from None
        return results

    def _died(self, e: Exception) -> bool:
        """Whether ``e``, a task's call's error, says that the task's process is gone."""
        ray = self.ray
        return isinstance(e, ray.exceptions.ActorDiedError) or isinstance(
            e, getattr(ray.exceptions, "ActorUnavailableError", ()))

    def _first_death(self, refs: Sequence[Any], by_ref: Mapping[Any, str], what: str
                     ) -> str | None:
        """Why a task among ``refs`` (ended by now, or still running) died, if one did: the
        root cause of a peer's failure, which often comes first (its link to the dead
        task broke) and names only the connection."""
        ray = self.ray
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in ready:
            try:
                ray.get(ref, timeout=0)
            except Exception as e:
                if self._died(e):
                    return self._failure(by_ref[ref], what, e)
        return None

    def _failure(self, task: str, what: str, e: Exception) -> str:
        """One line saying why ``task`` failed to ``what``."""
        if self._died(e):
            return f"task {task} died (its process exited) and could not {what}"
        cause = getattr(e, "cause", None)
        if isinstance(cause, BaseException):
            message = getattr(cause, "message", None) or str(cause)
            return f"task {task} failed to {what}: {message}"
        first = str(e).strip().splitlines()
        return f"task {task} failed to {what}: {first[-1] if first else type(e).__name__}"

    def _abort(self, step_id: int | None, pending: Sequence[Any], message: str) -> None:
        """Tell every task to abort ``step_id``, then wait (bounded) for ``pending``."""
        if step_id is None:
            return
        for actor in self.actors.values():
            try:
                actor.abort.remote(step_id, message)
            except Exception:  # a dead actor: nothing of it waits
                pass
        if pending:
            self.ray.wait(list(pending), num_returns=len(pending),
                          timeout=min(self.timeout_s, 30.0))

    def launch(self, entry: str, tasks: Sequence[str], step: int,
               feeds: Mapping[str, Mapping[int, np.ndarray]], n_feeds: int,
               assign: Mapping[str, Mapping[str, np.ndarray]]) -> dict[int, np.ndarray]:
        """Run one step of ``entry`` on ``tasks``; the fetches by result index."""
        self._check_open()
        clock = time.perf_counter
        started = clock()
        self._launches += 1
        step_id = self._launches
        # a large feed goes over the task's wire link (after the launch: the task waits for
        # it in the step's table), else to the object store once, however many tasks use it
        put: dict[int, Any] = {}
        sent: dict[str, dict[int, Any]] = {}
        wired: dict[str, list[tuple[list[str], np.ndarray]]] = {}
        for t in tasks:
            sent[t] = {}
            for i, a in feeds.get(t, {}).items():
                if a.nbytes >= WIRED_FEED_BYTES and self._link(t) is not None:
                    wired.setdefault(t, []).append(([feed_key(i)], a))
                    sent[t][i] = WIRED
                elif a.nbytes >= BY_REFERENCE_BYTES:
                    if id(a) not in put:
                        put[id(a)] = self.ray.put(a)
                    sent[t][i] = put[id(a)]
                else:
                    sent[t][i] = a
        refs = {t: self.actors[t].run_step.remote(entry, step_id, step, sent[t], n_feeds,
                                                  self._outcome[t], assign.get(t, {}))
                for t in tasks}
        try:
            for t, values in wired.items():
                try:
                    self._links[t].send(step_id, values)
                except ExecutionError as e:
                    self._abort(step_id, list(refs.values()), str(e))
                    raise ExecutionError(f"task {t} could not take the feeds of step "
                                         f"{step}: {e}") from None
            launched = clock()
            results = self._wait(refs, f"run step {step} of @{entry}", step_id=step_id)
        except BaseException:
            for t in tasks:
                self._outcome[t] = False
            raise
        waited = clock()
        stats = TransferStats(feed_bytes=sum(a.nbytes for f in feeds.values()
                                             for a in f.values()))
        fetches: dict[int, np.ndarray] = {}
        for t in tasks:
            self._outcome[t] = True
            out, counters = results[t]
            fetches.update(out)
            stats.tensors += int(counters["tensors"])
            stats.bytes += int(counters["bytes"])
            stats.stale += int(counters["stale"])
            stats.task_seconds[t] = counters.get("seconds", 0.0)
            stats.task_phases[t] = counters.get("phases", {})
        stats.fetch_bytes = sum(a.nbytes for a in fetches.values())
        stats.driver_phases = {"launch": launched - started, "wait": waited - launched,
                               "gather": clock() - waited}
        self.stale_total += stats.stale
        self.last_transfer_stats = stats
        return fetches

    def _link(self, task: str) -> Any:
        """The driver's TCP link to ``task``'s listener (made on first use), or None when
        it cannot be reached: then feeds go by Ray."""
        if task not in self._links:
            from tfc.distributed.wire import Link
            self._links[task] = Link.open(self.wire[task], f"task {task}", self.timeout_s)
        return self._links[task]

    def read(self, names: Sequence[str]) -> list[np.ndarray]:
        """The tasks' current values of variables ``names`` (read-only host arrays, now
        recorded as what the tasks hold)."""
        self._check_open()
        by_task: dict[str, list[str]] = {}
        for name in names:
            by_task.setdefault(self.owners[name], []).append(name)
        refs = {t: self.actors[t].read.remote(ns, self._outcome[t]) for t, ns in by_task.items()}
        results = self._wait(refs, "read variables back")
        self.reads += 1
        values: dict[str, np.ndarray] = {}
        for t, ns in by_task.items():
            self._outcome[t] = None  # settled
            for name, v in zip(ns, results[t]):
                a = np.array(v, copy=True) if not v.flags.c_contiguous else v
                a.flags.writeable = False
                values[name] = a
        out = [values[n] for n in names]
        self.synced.update(zip(names, out))
        return out

    def task_states(self) -> dict[str, str]:
        """Each task (short: ``worker:1``) with its time in the latest step, ``-`` when it
        took no part, ``failed`` when the latest step failed there, ``closed`` after
        ``close``."""
        seconds = self.last_transfer_stats.task_seconds
        out = {}
        for task in self.tasks:
            short = task.replace("/job:", "").replace("/task", "")
            state = ("closed" if self.closed else "failed" if self._outcome[task] is False
                     else f"{seconds[task] * 1e3:.1f}ms" if task in seconds else "-")
            out[short] = state
        return out

    def _check_open(self) -> None:
        if self.closed:
            raise ExecutionError("the program's cluster was closed (program.close())")

    def close(self) -> None:
        """Stop the actors (and the embedded Ray, if the runtime started one)."""
        self.closed = True
        for link in getattr(self, "_links", {}).values():
            if link is not None:
                link.close()
        cluster = getattr(self, "cluster", None)
        if cluster is not None:
            cluster.close()


def _feeds_used(table: Any, devices: Sequence[str]) -> list[int]:
    """The entry's feeds that the stages (inputs, sends) and fetches of ``devices`` use."""
    used: set[int] = set()
    for part in table.devices:
        if part.device not in devices:
            continue
        for st in part.stages:
            used.update(s.feed for s in st.inputs if s.feed is not None)
            used.update(s.value.feed for s in st.sends if s.value.feed is not None)
    used.update(src.feed for device, src in table.fetches
                if device in devices and src.feed is not None)
    return sorted(used)


class ClusterExecutable:
    """One entry of a cluster program, as the program's runner runs it (the module
    docstring); ``last_transfer_stats`` is the runtime's (the latest step's)."""

    def __init__(self, runtime: ClusterRuntime, entry: str) -> None:
        module = runtime.module
        graph = module.graphs[entry]
        self.runtime, self.entry, self.graph = runtime, entry, graph
        self.state_owner = runtime  # every entry's updates stay on the same tasks
        table = module.partitions.get(entry)
        if table is not None:
            by_task: dict[str, list[str]] = {}
            for part in table.devices:
                task = task_of(part.device)
                if task is None:
                    raise TfcError(f"entry '{entry}' runs on {part.device}, which is no "
                                   f"task's device: a cluster program runs on tasks only")
                by_task.setdefault(task, []).append(part.device)
            self.tasks = list(by_task)
            self.feeds = {t: _feeds_used(table, ds) for t, ds in by_task.items()}
        else:  # every op on one device
            from tfc.passes.partition import single_device
            device = single_device(graph, module.devices[0])
            task = task_of(device) if device is not None else None
            if task is None:
                raise TfcError(f"entry '{entry}' runs on {device}, which is no task's "
                               f"device: a cluster program runs on tasks only")
            self.tasks = [task]
            self.feeds = {task: list(range(len(graph.args)))}
        reads: dict[str, None] = {}
        writes: dict[str, None] = {}
        for op in graph.walk():
            var = op.attrs.get("var") if op.kind.startswith("var.") else None
            if var is not None:
                reads[var] = None
                if writes_variable(op):
                    writes[var] = None
        self.var_names: list[str] = list(reads)
        self.update_names: list[str] = list(writes)
        self._n_feeds = len(graph.args)
        self._shapes_seen: set[tuple[Any, ...]] = set()

    @property
    def last_transfer_stats(self) -> TransferStats:
        return self.runtime.last_transfer_stats

    def fast_step(self, feeds: Sequence[np.ndarray], variables: Sequence[np.ndarray],
                  step: int, validate: Callable[[Sequence[np.ndarray]], Any] | None = None,
                  in_place: bool = False, defer: bool = False
                  ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        """One step (``tfc.runtime.runner``'s protocol): feeds are checked C-contiguous
        arrays of the arguments' dtypes (shapes checked by ``validate`` the first time);
        ``variables`` the program's arrays of ``var_names`` (those not identical to
        what the runtime last saw are sent to their tasks first). With ``defer`` the
        updates stay on the tasks (``read_back`` fetches them); else they are read back
        now and returned in ``update_names`` order."""
        shapes = tuple(a.shape for a in feeds)
        if shapes not in self._shapes_seen:
            if validate is not None:
                validate(feeds)
            self._shapes_seen.add(shapes)
        runtime = self.runtime
        synced = runtime.synced
        assign: dict[str, dict[str, np.ndarray]] = {}
        for name, value in zip(self.var_names, variables):
            if synced.get(name) is not value:
                assign.setdefault(runtime.owners[name], {})[name] = value
        per_task = {t: {i: feeds[i] for i in idx} for t, idx in self.feeds.items()}
        tasks = list(dict.fromkeys([*self.tasks, *assign]))
        fetched = runtime.launch(self.entry, tasks, step, per_task, self._n_feeds, assign)
        for values in assign.values():
            synced.update(values)
        fetches = []
        for i in range(len(self.graph.results)):
            f = fetched[i]
            fetches.append(f if f.flags.writeable else np.array(f, copy=True))
        if defer:
            return fetches, None
        return fetches, self.read_back(self.update_names)

    def read_back(self, names: Sequence[str]) -> list[np.ndarray]:
        """The tasks' values of variables ``names`` (read-only host arrays)."""
        return self.runtime.read(names)

    def __call__(self, feeds: Sequence[np.ndarray], variables: Mapping[str, np.ndarray],
                 step: int) -> StepResult:
        fetches, updates = self.fast_step(list(feeds), [variables[n] for n in self.var_names],
                                          step)
        return StepResult(fetches, dict(zip(self.update_names, updates or [])))
