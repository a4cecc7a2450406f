"""The driver's side of a cluster program: one Ray actor per task, steps launched on all.

A module whose devices name tasks (``/job:ps/task:0/cpu:0``, ``/job:worker/task:1/cpu:0``)
runs with ``Program(module, cluster="local"|"auto"|"HOST:PORT")``: ``ClusterRuntime``
connects to the Ray cluster (``tfc.distributed.cluster``), starts one ``TaskActor``
(``tfc.distributed.task``) per task, spread over distinct nodes while there are enough,
and sends each the artifact's bytes once. Each entry then runs through a
``ClusterExecutable``, which speaks the protocol of an executable that keeps its
updates where it ran them (``fast_step(..., defer=True)`` and ``read_back``, as the
cuda executable does; ``tfc.runtime.runner``): a step writes one launch frame to each
task of the entry over the driver's TCP connection to the task's listener
(``tfc.distributed.wire``), back to back, with the feeds its stages use (a worker only
its rows of the global batch, where its stages split the batch into the workers'
shards), and reads each task's reply (its fetches) as it comes; where the driver cannot
reach a task's listener, the step is launched by Ray instead (an actor call per task).
The values the tasks exchange go task to task, never through here; the variables stay on
their tasks, and the program reads them back only when asked (``program.variables``, a
checkpoint, ``save``). The program's own arrays tell which values changed on its side
(``set_variable``, ``restore_checkpoint``): an array that is not the very one this
runtime last saw for a variable is sent to the variable's task with the next step.

Every wait has a timeout (``timeout_s``, default 120 s). A task whose step raises, dies
(its connection closes, or Ray reports its actor dead) or does not finish in time fails
the step with one ``ExecutionError`` naming the task;
the driver first tells every task to abort the step, so none is left waiting for a
value that will never come, and the step's updates are dropped on every task.
``last_transfer_stats`` counts what the latest step moved between tasks (and to and
from the driver), for benchmarks.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfc.backends.base import StepResult
from tfc.errors import ExecutionError, TfcError
from tfc.ir.core import Graph, Module
from tfc.ir.registry import writes_variable
from tfc.devices import task_of
from tfc.distributed import steptrace
from tfc.distributed.task import (BY_REFERENCE_BYTES, COUNTERS_KEY, TaskActor, assign_key,
                                  cluster_tasks, feed_key, unpacked_counters,
                                  variable_owners)

DEFAULT_TIMEOUT_S = 120.0
# what "cluster=" takes besides a Ray address ("HOST:PORT")
NAMED_CLUSTERS = ("local", "auto", "inprocess")




class ClusterError(TfcError):
    """The cluster could not be used: not reachable, a task that did not start, no Ray.
    (Not the artifact's fault: the loader passes it on as it is.)"""


@dataclass
class TransferStats:
    """What one step moved: between tasks (task to task, ``tensors``/``bytes``), from
    the driver to the tasks (the feeds' bytes sent: a worker's shard of a sharded one)
    and back (the fetches), the values that arrived at a task after their step was over
    there (``stale``, dropped), and how the step was launched (``launch``: ``wire``, a
    frame per task over TCP, or ``ray``, an actor call per task)."""

    tensors: int = 0
    bytes: int = 0
    feed_bytes: int = 0
    fetch_bytes: int = 0
    stale: int = 0
    launch: str = ""
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
                 native: Mapping[str, Mapping[str, bytes]] | None = None,
                 nodes: Sequence[str] | None = None) -> None:
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
        # each (entry, feeds, settle)'s call fields, made once (``_run_wired``)
        self._calls: dict[tuple[str, int, bool | None], dict[str, Any]] = {}
        try:
            data = self.ray.put(artifact_bytes(module, variables, step, backend, native))
            # what a task restarted after a failure loads (tfc.distributed.recovery)
            self.artifact, self.backend = data, backend
            # (``nodes``: where each task goes, e.g. an elastic ring's survivors' nodes)
            nodes = list(nodes) if nodes is not None else self.cluster.spread(len(self.tasks))
            # tasks on nodes of one host (one IP: a loopback cluster's nodes) share its cores
            # (a node that is gone has none: ``start_actors`` says it is not alive)
            host = {n.node_id: n.ip for n in self.cluster.nodes}
            sharing = Counter(host.get(n) for n in nodes)
            from tfc.distributed.cluster import ActorStart
            starts = [ActorStart(TaskActor, (t, data, backend, timeout_s, sharing[host.get(n)]),
                                 n, f"task {t}") for t, n in zip(self.tasks, nodes)]
            # all at once: one process start, not one per task after another
            self.actors = dict(zip(self.tasks, self.cluster.start_actors(starts, timeout_s)))
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
            return self._died_line(task, what)
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
               assign: Mapping[str, Mapping[str, np.ndarray]],
               shards: Mapping[str, Mapping[int, tuple[int, int]]] | None = None
               ) -> dict[int, np.ndarray]:
        """Run one step of ``entry`` on ``tasks``; the fetches by result index.
        ``shards[task][i] = (k, n)``: the task uses only the ``k``-th of ``n`` equal row
        blocks of feed ``i`` (a worker's shard of the global batch), so only those rows
        go to it over the wire (the batch divides by ``n``; else the whole feed, and the
        task's split names the problem)."""
        self._check_open()
        clock = time.perf_counter
        started = clock()
        self._launches += 1
        step_id = self._launches
        if steptrace.ENABLED:
            steptrace.mark(step_id, "launch")
        what = f"run step {step} of @{entry}"
        wired = all(self._link(t) is not None for t in tasks)
        # the tasks this step reached (``_run_wired`` stops at a link that fails): only
        # their pending updates are this step's; the others still hold their previous
        # step's, which a failure here must not drop (``_outcome``: settled, not dropped)
        self._reached = set(tasks)
        try:
            if wired:
                results, feed_bytes, launched = self._run_wired(
                    entry, tasks, step_id, step, feeds, n_feeds, assign, shards or {}, what)
            else:  # a task whose listener this driver cannot reach: the step goes by Ray
                results, feed_bytes, launched = self._run_by_ray(
                    entry, tasks, step_id, step, feeds, n_feeds, assign, what)
        except BaseException:
            for t in tasks:
                if t in self._reached:
                    self._outcome[t] = False
            raise
        waited = clock()
        stats = TransferStats(feed_bytes=feed_bytes, launch="wire" if wired else "ray")
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
        if steptrace.ENABLED:
            steptrace.mark(step_id, "done")
        return fetches

    def _run_wired(self, entry: str, tasks: Sequence[str], step_id: int, step: int,
                   feeds: Mapping[str, Mapping[int, np.ndarray]], n_feeds: int,
                   assign: Mapping[str, Mapping[str, np.ndarray]],
                   shards: Mapping[str, Mapping[int, tuple[int, int]]], what: str
                   ) -> tuple[dict[str, Any], int, float]:
        """The step launched over the tasks' wire links: one frame per task, written back
        to back (its feeds, a worker only its rows of a sharded one; the variables set
        here; the outcome of its previous step), then every task's reply (its fetches and
        counters) read as it comes. The replies, the feeds' bytes sent, and when the
        last frame went out."""
        from tfc.distributed.wire import Outgoing
        feed_bytes = 0
        launched: list[str] = []
        lost: str | None = None
        calls = self._calls
        for t in tasks:
            values: list[Outgoing] = []
            task_shards = shards.get(t)
            for i, a in feeds.get(t, {}).items():
                value = _feed_rows(feed_key(i), a, task_shards.get(i) if task_shards else None)
                feed_bytes += value[1].nbytes
                values.append(value)
            if assign:
                values += [([assign_key(n)], v) for n, v in assign.get(t, {}).items()]
            settle = self._outcome[t]
            call = calls.get((entry, n_feeds, settle))
            if call is None:  # (the same few every step: the wire encodes each once)
                call = calls[(entry, n_feeds, settle)] = {"entry": entry, "n_feeds": n_feeds,
                                                          "settle": settle}
            link = self._links[t]
            try:
                link.call(step_id, call, values, step)
            except ExecutionError as e:
                lost = (self._died_line(t, what) if link.lost
                        else f"task {t} failed to {what}: {e.message}")
                break
            launched.append(t)
        self._reached = set(launched) | ({t} if lost is not None else set())
        sent = time.perf_counter()
        if lost is not None:
            self._abort(step_id, [], lost)
        return self._replies(launched, step_id, what, lost), feed_bytes, sent

    def _replies(self, tasks: Sequence[str], step_id: int, what: str,
                 failure: str | None = None) -> dict[str, Any]:
        """Each task's reply to the launch of ``step_id`` over its link (its fetches by
        index and its counters), within the timeout. The first failure (a task's error, a
        task whose connection closed: its process exited, one that did not answer in
        time, or ``failure`` already) tells every task to abort the step, waits (bounded)
        for the others' replies, and is raised as one ``ExecutionError`` naming its task,
        a task that died first among them. The links are watched by one selector kept
        across steps (``_watched``)."""
        pending = set(tasks)
        results: dict[str, Any] = {}
        died: str | None = None
        watched = self._watched(tasks)
        deadline = time.monotonic() + (self.timeout_s if failure is None
                                       else min(self.timeout_s, 30.0))
        while pending:
            ready = [t for t in pending if self._links[t].buffered]
            if not ready:
                events = watched.select(max(0.0, deadline - time.monotonic()))
                if not events:
                    if failure is None:
                        late = ", ".join(t for t in tasks if t in pending)
                        failure = f"task {late} did not {what} within {self.timeout_s:g} s"
                        self._abort(step_id, [], failure)
                        deadline = time.monotonic() + min(self.timeout_s, 30.0)
                        continue
                    break
                ready = [key.data for key, _ in events]
            for t in ready:
                link = self._links.get(t)
                if t not in pending or link is None:  # not waited for: a late reply
                    self._skip_late(t)
                    continue
                error: str | None = None
                try:
                    frame = link.receive()
                except ExecutionError as e:
                    frame, error = None, f"task {t} failed to {what}: {e.message}"
                if frame is not None and frame[0]["step"] != step_id:
                    continue  # the late reply of a step that failed before
                pending.discard(t)
                if frame is None and error is None:  # closed: the process is gone
                    died = died or self._died_line(t, what)
                    error = died
                elif frame is not None:
                    reply, items = frame[0]["reply"], frame[1]
                    if "error" in reply:
                        error = f"task {t} failed to {what}: {reply['error']}"
                    else:
                        results[t] = _reply_values(items)
                if error is not None and failure is None:
                    failure = error
                    self._abort(step_id, [], failure)
                    deadline = time.monotonic() + min(self.timeout_s, 30.0)
        if died is not None:
            raise ExecutionError(died)
        if failure is not None:
            raise ExecutionError(failure)
        return results

    def _watched(self, tasks: Sequence[str]) -> Any:
        """The selector that watches the links of ``tasks`` for replies (made once, kept
        across steps; a link that was replaced, after a task's restart, is watched
        instead of the old one)."""
        import selectors
        selector = self.__dict__.get("_selector")
        if selector is None:
            selector = self._selector = selectors.DefaultSelector()
            self._selected: dict[str, Any] = {}  # task -> the link the selector watches
        selected = self._selected
        for t in tasks:
            link = self._links[t]
            if selected.get(t) is not link:
                _unwatch(selector, selected.pop(t, None))
                for key in list(selector.get_map().values()):  # its descriptor's old use
                    if key.fd == link.fileno():
                        _unwatch(selector, key.fileobj)
                        selected.pop(key.data, None)
                selector.register(link, selectors.EVENT_READ, t)
                selected[t] = link
        return selector

    def _skip_late(self, task: str) -> None:
        """Drop what came on the link of ``task``, which the step waited for does not wait
        for (a late reply of an earlier, failed step); a link that closed or failed is
        no longer watched (the task's next launch says what happened to it)."""
        link = self._selected.get(task)
        try:
            frame = link.receive() if link is not None else None
        except ExecutionError:
            frame = None
        if frame is None:
            _unwatch(self._selector, self._selected.pop(task, None))

    def _died_line(self, task: str, what: str) -> str:
        """The error of a task whose process is gone (as ``_failure`` says it)."""
        return f"task {task} died (its process exited) and could not {what}"

    def _run_by_ray(self, entry: str, tasks: Sequence[str], step_id: int, step: int,
                    feeds: Mapping[str, Mapping[int, np.ndarray]], n_feeds: int,
                    assign: Mapping[str, Mapping[str, np.ndarray]], what: str
                    ) -> tuple[dict[str, Any], int, float]:
        """The step launched by Ray: one actor call per task (a large feed put in the
        object store once, however many tasks use it). As ``_run_wired``."""
        put: dict[int, Any] = {}
        sent: dict[str, dict[int, Any]] = {}
        for t in tasks:
            sent[t] = {}
            for i, a in feeds.get(t, {}).items():
                if a.nbytes >= BY_REFERENCE_BYTES:
                    if id(a) not in put:
                        put[id(a)] = self.ray.put(a)
                    sent[t][i] = put[id(a)]
                else:
                    sent[t][i] = a
        refs = {t: self.actors[t].run_step.remote(entry, step_id, step, sent[t], n_feeds,
                                                  self._outcome[t], assign.get(t, {}))
                for t in tasks}
        launched = time.perf_counter()
        results = self._wait(refs, what, step_id=step_id)
        feed_bytes = sum(a.nbytes for f in feeds.values() for a in f.values())
        return results, feed_bytes, launched

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

    def trace_events(self) -> dict[str, list[Any]]:
        """Every process's step events so far (``tfc.distributed.steptrace``, with
        ``TFC_STEP_TRACE=1``) by who recorded them: ``driver`` and each task."""
        out = {"driver": steptrace.take()}
        got = self._wait({t: a.trace_events.remote() for t, a in self.actors.items()},
                         "hand over its trace")
        out.update({t: events for t, (_, events) in got.items()})
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
        selector = self.__dict__.get("_selector")
        if selector is not None:
            selector.close()
        for link in getattr(self, "_links", {}).values():
            if link is not None:
                link.close()
        cluster = getattr(self, "cluster", None)
        if cluster is not None:
            cluster.close()


def _unwatch(selector: Any, link: Any) -> None:
    """Stop watching ``link`` (None: nothing; one closed already is dropped as well)."""
    if link is not None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            selector.unregister(link)


def _reply_values(items: Sequence[tuple[list[str], np.ndarray]]
                  ) -> tuple[dict[int, np.ndarray], dict[str, Any]]:
    """A task's reply's fetches by result index and its step's counters."""
    fetches: dict[int, np.ndarray] = {}
    counters: dict[str, Any] = {}
    for keys, value in items:
        if keys[0] == COUNTERS_KEY:
            counters = unpacked_counters(value)
        else:
            fetches[int(keys[0].partition(":")[2])] = value
    return fetches, counters


def _feed_rows(key: str, feed: np.ndarray, shard: tuple[int, int] | None) -> Any:
    """What goes on the wire of ``feed`` for a task: the whole array, or, for a task that
    uses only row block ``k`` of ``n`` (``shard``) of a batch that divides, those rows
    with their place in it (``tfc.distributed.wire``: the task gets an array of the whole
    shape, the other rows zero, which its split never hands to a kernel that uses them)."""
    if shard is None or feed.ndim == 0 or feed.shape[0] % shard[1]:
        return ([key], feed)
    rows = feed.shape[0] // shard[1]
    first = shard[0] * rows
    return ([key], feed[first:first + rows], (feed.shape[0], first))


def _values_used(graph: Graph) -> list[Any]:
    """Every use of a value in ``graph``: its ops' inputs (regions too) and its results."""
    used: list[Any] = list(graph.results)
    for op in graph.walk():
        used += op.inputs
        for region in op.regions:
            used += region.results
    return used


def _batch_shards(module: Module, table: Any, devices: Sequence[str]
                  ) -> dict[int, tuple[int, int]]:
    """The feeds of which ``devices`` (a task's) use one row block only: feed ``i`` ->
    (``k``, ``n``) where every use of it there is a ``split`` on axis 0 into ``n`` equal
    blocks of which only block ``k`` is used (the replicate pass's shard of the global
    batch for worker ``k``). A feed a device sends or fetches whole is not one of them."""
    shards: dict[int, tuple[int, int] | None] = {}
    for part in table.devices:
        if part.device not in devices:
            continue
        for st in part.stages:
            for s in st.sends:
                if s.value.feed is not None:
                    shards[s.value.feed] = None
            graph = module.graphs.get(st.graph) if st.graph is not None else None
            for j, src in enumerate(st.inputs):
                if src.feed is None:
                    continue
                shard = _one_block(graph, graph.args[j]) if graph is not None else None
                if shards.setdefault(src.feed, shard) != shard:
                    shards[src.feed] = None
    for device, src in table.fetches:
        if device in devices and src.feed is not None:
            shards[src.feed] = None
    return {i: s for i, s in shards.items() if s is not None}


def _one_block(graph: Graph, arg: Any) -> tuple[int, int] | None:
    """(``k``, ``n``) when ``arg``'s only use in ``graph`` is one ``split`` on axis 0
    into ``n`` equal blocks of which only block ``k`` is used; else None."""
    used = _values_used(graph)
    splits = [op for op in graph.walk() if arg in op.inputs]
    if len(splits) != 1 or sum(v is arg for v in used) != 1:
        return None
    op = splits[0]
    n = op.attrs.get("num")
    if op.kind != "split" or op.attrs.get("axis") != 0 or not isinstance(n, int):
        return None
    blocks = [k for k, r in enumerate(op.results) if any(v is r for v in used)]
    return (blocks[0], n) if len(blocks) == 1 else None


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
            self.shards = {t: _batch_shards(module, table, ds) for t, ds in by_task.items()}
        else:  # every op on one device
            from tfc.passes.partition import single_device
            device = single_device(graph, module.devices[0])
            task = task_of(device) if device is not None else None
            if task is None:
                raise TfcError(f"entry '{entry}' runs on {device}, which is no task's "
                               f"device: a cluster program runs on tasks only")
            self.tasks = [task]
            self.feeds = {task: list(range(len(graph.args)))}
            self.shards = {}
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
        fetched = runtime.launch(self.entry, tasks, step, per_task, self._n_feeds, assign,
                                 self.shards)
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
