"""One task of a cluster program, as its Ray actor runs it (``tfc.distributed.runtime``).

A module compiled for a cluster names its devices after tasks (``/job:ps/task:0/cpu:0``,
``/job:worker/task:1/cpu:0``); each task runs in a process of its own, on a Ray node of
its own when there are enough. ``TaskActor`` is that process's state: it receives the
artifact's bytes (the file format, checked and verified as a file is: never pickled
Python), compiles its devices' stages from the IR with the program's backend, owns the
variables its stages read and write, and runs its part of each step with the same
executor that runs a single process's devices (``PartitionedExecutable`` restricted to
this task's devices).

The driver launches a step on the task over its TCP connection to the task's listener
(``tfc.distributed.wire``: Ray's actor calls cost 10-30x more here and their dispatch
varies, see there): one frame carries the step's feeds (a worker's rows of the global
batch only), the variables the driver's program set, and the outcome of the task's
previous step; the task runs the step in its listener's thread and answers on that
connection with its fetches (``_called``); while the step waits for a peer's value, that
thread reads the sockets itself (``wire.Listener.pump``). Where the driver cannot reach
the task's listener, it launches by Ray instead (``run_step``, an actor call; feeds by
value or, large ones, through Ray's object store).

Values its devices send to another task's go task to task, never through the driver:
one transfer per (value, receiving task) per stage, over a TCP connection to the peer's
listener. Where a peer's listener cannot be reached, they go by Ray instead
(``deliver`` on the peer: small arrays by value, large ones put in Ray's object store
first, mapped zero-copy at the receiver). Each value carries its step's id (the
driver's launch counter): the receiver puts
it into that step's ``Rendezvous``, where the step's recvs find it, also when it arrives
before the step starts there; a value for a step that is over (it failed, or the value
arrived late) is dropped and counted (``stale``). A sender does not wait for the
receiver to take a value: the driver waits for every task of the step, and a task whose
values never came fails its step (within the timeout) as a dead peer does.

A step's variable updates are pending until the driver says whether the step succeeded
on every task (``settle`` on the task's next call): a step that failed anywhere changes
no variable anywhere, as a single process's failed step changes none.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import types
from typing import Any, Mapping, Sequence

import numpy as np

from tfc.backends.base import StepResult, get_backend
from tfc.devices import cpu_count, task_of
from tfc.distributed import steptrace
from tfc.errors import ExecutionError, TfcError
from tfc.ir.core import Module

# arrays of at least this many bytes travel as an object-store reference (zero-copy at
# the receiver, and not copied into the call's message); smaller ones by value
BY_REFERENCE_BYTES = 64 * 1024


def feed_key(index: int) -> str:
    """The key under which feed ``index`` of a step comes in its launch frame."""
    return f"feed:{index}"


def assign_key(name: str) -> str:
    """The key under which the driver's value of variable ``name`` comes in a launch."""
    return f"assign:{name}"


def fetch_key(index: int) -> str:
    """The key under which a task's fetch ``index`` goes back in its reply."""
    return f"fetch:{index}"


# A reply over the wire carries its step's counters as one f64 array under this key (its
# JSON header then is the same every step: ``tfc.distributed.wire``), in this order
COUNTERS_KEY = "counters"
_COUNTS = ("tensors", "bytes", "stale", "seconds")
_PHASES = ("feeds", "send", "recv_wait", "run", "acks")


def packed_counters(counters: Mapping[str, Any]) -> np.ndarray:
    """``run_step``'s counters as the array a reply carries (``unpacked_counters``)."""
    phases = counters.get("phases", {})
    return np.array([counters.get(k, 0) for k in _COUNTS]
                    + [phases.get(k, 0.0) for k in _PHASES], np.float64)


def unpacked_counters(packed: np.ndarray) -> dict[str, Any]:
    """The counters of a reply's array (``packed_counters``), as ``run_step`` returns
    them."""
    values = packed.tolist()
    counters: dict[str, Any] = dict(zip(_COUNTS, values))
    for k in ("tensors", "bytes", "stale"):
        counters[k] = int(counters[k])
    counters["phases"] = dict(zip(_PHASES, values[len(_COUNTS):]))
    return counters


def cluster_tasks(module: Module) -> dict[str, list[str]]:
    """The module's tasks (in the order of its devices) and each one's devices; empty
    when no device names a task."""
    tasks: dict[str, list[str]] = {}
    for device in module.devices:
        task = task_of(device)
        if task is not None:
            tasks.setdefault(task, []).append(device)
    return tasks


def variable_owners(module: Module) -> dict[str, str]:
    """The task that owns each variable: that of the devices of the ops that read or write
    it (one device, as placement keeps a variable and its ops together), else of its
    declared device, else the first task. A ``TfcError`` when two tasks touch one variable:
    each task holds its variables, so that would need a copy kept in step (not done)."""
    tasks = cluster_tasks(module)
    first = next(iter(tasks), None)
    owners: dict[str, str] = {}
    for entry, graph in module.entries.items():
        for op in graph.walk():
            var = op.attrs.get("var") if op.kind.startswith("var.") else None
            if var is None or op.device is None:
                continue
            task = task_of(op.device)
            if task is None:
                continue
            if owners.setdefault(var, task) != task:
                raise TfcError(f"variable @{var} is used on two tasks ({owners[var]} and "
                               f"{task}, in @{entry}); a cluster program keeps each variable "
                               f"on the task of its ops (place them together)")
    for name, decl in module.variables.items():
        if name not in owners:
            task = task_of(decl.device) if decl.device is not None else None
            if task is not None or first is not None:
                owners[name] = task or first  # type: ignore[assignment]
    return owners


def _frozen_update(value: np.ndarray) -> np.ndarray:
    """A step's update made read-only as it is (the executor's own array, which nothing
    else holds: no view, so that the next step may update it in place again)."""
    if value.flags.c_contiguous and value.flags.owndata:
        value.flags.writeable = False
        return value
    return _frozen(value)


def _frozen(value: np.ndarray) -> np.ndarray:
    """A read-only C-contiguous array (the stages take it as it is; nothing changes it)."""
    a = np.require(value, requirements="C")
    if a is value and a.flags.writeable:
        a = a.view()  # (the caller's array keeps its flags)
    a.flags.writeable = False
    return a


@functools.cache
def _timed_rendezvous() -> type:
    from tfc.runtime.rendezvous import Rendezvous

    class TimedRendezvous(Rendezvous):
        """A step's table that adds up the time its recvs waited (``waited``: the step's
        breakdown in ``run_step``'s counters)."""

        waited = 0.0
        step_id = -1  # (its marks in a step trace)

        def recv_many(self, keys: Sequence[str]) -> list[np.ndarray]:
            started = time.perf_counter()
            if steptrace.ENABLED:
                steptrace.mark(self.step_id, f"wait {keys[0]}")
            try:
                return super().recv_many(keys)
            finally:
                if steptrace.ENABLED:
                    steptrace.mark(self.step_id, f"got {keys[0]}")
                # (devices' threads may race here: a benchmark's figure, not a result)
                self.waited += time.perf_counter() - started

    return TimedRendezvous


_SUCCEEDED: dict[str, Any] = {}  # a wire reply's fields when the step succeeded

# What a step runs besides the kernels, called as plain functions (``TaskActor.__init__``)
_STEP_PATH = ("_called", "_run_step", "_settle", "_refuse_changed", "_rendezvous",
              "_executable", "_await_deliveries", "_end", "_send", "_link", "_receive",
              "_reading_stopped")


class TaskActor:
    """The state of one task's process; its methods are what the driver and the peers
    call through Ray (``tfc.distributed.runtime`` wraps it with ``ray.remote``)."""

    def __init__(self, task: str, artifact: bytes, backend: str, timeout_s: float,
                 sharing: int = 1) -> None:
        from tfc.runtime.artifact import read_task_artifact
        from tfc.runtime.executor import with_threads
        # Ray wraps every method of an actor's class for its tracing, in two layers where
        # the actor's process wraps them again (about 15 calls a step, 28 ms of 0.8 s of
        # a null-step worker's thread over 400 steps); what a step calls goes to the
        # plain functions (none of them is called by Ray, which looks its methods up on
        # the class)
        for name in _STEP_PATH:
            setattr(self, name, types.MethodType(getattr(TaskActor, name), self))
        # The tasks of one host share its cores (``sharing`` of them run there): each gets
        # its share for its kernels and its BLAS calls, as the logical devices of one
        # process do (``threads_per_device``). Two tasks that each took every core of a
        # 2-core host ran their kernels' spinning thread pools over each other: 10x slower.
        self.cores = max(1, cpu_count() // max(1, sharing))
        self.backend = with_threads(get_backend(backend), self.cores)
        module, values, native = read_task_artifact(
            artifact, f"the artifact sent to {task}", self.backend)
        self.task = task
        self.module = module
        self.timeout_s = timeout_s
        tasks = cluster_tasks(module)
        if task not in tasks:
            raise TfcError(f"task {task} has no device in the module "
                           f"({', '.join(module.devices)})")
        self.devices = tasks[task]
        self._task_of = {d: t for t, ds in tasks.items() for d in ds}
        owners = variable_owners(module)
        self.variables: dict[str, np.ndarray] = {
            n: _frozen(v) for n, v in values.items() if owners.get(n) == task}
        # entries of one device of this task whose object code came with the artifact (built
        # on a CPU like this one); the others compile from the IR when first prepared
        self._executables: dict[str, Any] = {e: exe for e, exe in native.items()
                                             if e not in module.partitions}
        self.made_from = {e: "object code" for e in self._executables}
        self._peers: dict[str, Any] = {}
        self._lock = threading.Lock()  # the step tables, the counters
        self._steps: dict[int, Any] = {}  # step id -> its Rendezvous
        self._finished = -1  # the newest step id that ended here
        self._pending: tuple[int, dict[str, np.ndarray]] | None = None
        # variables a step that failed elsewhere had already updated here in place
        self._changed_by_failure: set[str] = set()
        self._deliveries: list[Any] = []  # this step's deliver calls (their refs)
        self._step_id = 0  # the id of the step running here
        self.stale = 0
        self._sent_tensors = 0
        self._sent_bytes = 0
        self._listener: Any = None  # tfc.distributed.wire: what peers send comes here
        self._wire: dict[str, Any] = {}  # peer task -> its listener's (host, port)
        self._links: dict[str, Any] = {}  # peer task -> its Link, None: by Ray
        self._links_lock = threading.Lock()  # (the task's devices send from their threads)
        self._phases: dict[str, float] = {}  # this step's time by phase (benchmarks)

    # ---- set-up --------------------------------------------------------------------------

    def ready(self) -> dict[str, Any]:
        """Where this task runs: its Ray node id, process id, share of the cores, and the
        address (``wire``) where it takes values and launches over TCP (listening from now
        on)."""
        import ray
        from tfc.distributed.wire import Listener
        if self._listener is None:
            self._listener = Listener(ray.util.get_node_ip_address(), self._receive,
                                      calls=self._called, send_timeout_s=self.timeout_s)
            self._listener.on_release = self._reading_stopped
        return {"task": self.task, "node_id": ray.get_runtime_context().get_node_id(),
                "pid": os.getpid(), "cores": self.cores, "wire": self._listener.address}

    def connect(self, peers: Mapping[str, Any],
                wire: Mapping[str, Sequence[Any]] | None = None) -> None:
        """The other tasks' actor handles, and their listeners' addresses, by task name
        (links to the old addresses are closed: this is called again after a restart)."""
        self._peers = {t: h for t, h in peers.items() if t != self.task}
        self._wire = {t: tuple(a) for t, a in (wire or {}).items() if t != self.task}
        with self._links_lock:  # again after a peer's restart: its new listener's links
            links, self._links = self._links, {}
        for link in links.values():
            if link is not None:
                link.close()

    def _link(self, task: str) -> Any:
        """The TCP link to ``task`` (made on first use), or None: by Ray."""
        with self._links_lock:
            if task not in self._links:
                from tfc.distributed.wire import Link
                address = self._wire.get(task)
                pump = self._listener.pump if self._listener is not None else None
                self._links[task] = (Link.open(address, f"task {task}", self.timeout_s,
                                               pump=pump)
                                     if address is not None else None)
            return self._links[task]

    def prepare(self, entries: Sequence[str]) -> dict[str, str]:
        """Make this task's executables of ``entries`` now (errors surface before a step);
        how each was made (``object code`` of the artifact, or ``compiled`` from the IR)."""
        for entry in entries:
            self._executable(entry)
        return {e: self.made_from.get(e, "compiled") for e in entries}

    def _executable(self, entry: str) -> Any:
        exe = self._executables.get(entry)
        if exe is None:
            from tfc.runtime.program import lowered_module
            if entry in self.module.partitions:
                from tfc.runtime.executor import PartitionedExecutable
                exe = PartitionedExecutable(self.module, entry, self.backend,
                                            devices=self.devices, transport=self._send,
                                            cores=self.cores)
            else:  # the entry runs on one device, of this task
                lowered = lowered_module(self.module, entry, self.backend)
                exe = self.backend.compile(lowered, entry)
            self._executables[entry] = exe
        return exe

    # ---- steps ---------------------------------------------------------------------------

    def run_step(self, entry: str, step_id: int, step: int, feeds: Mapping[int, Any],
                 n_feeds: int, settle: bool | None, assign: Mapping[str, np.ndarray]
                 ) -> tuple[dict[int, np.ndarray], dict[str, Any]]:
        """This task's part of step ``step_id`` of ``entry`` (program step ``step``: random
        ops are seeded with it): ``feeds`` by argument index (those its stages use),
        ``settle`` the outcome of the task's previous step (apply or drop its updates),
        ``assign`` variable values the driver's program set since. Returns this task's
        fetches by result index and the step's transfer counters (a feed launched by Ray
        may be an object-store reference, put there once for every task that uses it)."""
        return self._run_step(entry, step_id, step, feeds, n_feeds, settle, assign)

    def _run_step(self, entry: str, step_id: int, step: int, feeds: Mapping[int, Any],
                  n_feeds: int, settle: bool | None, assign: Mapping[str, np.ndarray]
                  ) -> tuple[dict[int, np.ndarray], dict[str, Any]]:
        """``run_step`` (a launch over the wire calls it directly)."""
        if steptrace.ENABLED:
            steptrace.mark(step_id, "step start")
        self._settle(settle)
        for name, value in assign.items():
            self.variables[name] = _frozen(value)
        self._refuse_changed(assign)
        rendezvous = self._rendezvous(step_id)
        if rendezvous is None or rendezvous.error is not None:  # (told before it started)
            why = f" ({rendezvous.error})" if rendezvous is not None else ""
            self._end(step_id)
            raise ExecutionError(f"{self.task}: step {step_id} was aborted before it "
                                 f"started here{why}")
        stale_before = self.stale
        clock = time.perf_counter
        started = clock()
        self._sent_tensors = self._sent_bytes = 0
        self._deliveries = []
        self._step_id = step_id
        phases = self._phases = {"feeds": 0.0, "send": 0.0, "recv_wait": 0.0}
        rendezvous.waited = 0.0
        try:
            exe = self._executable(entry)
            args: list[Any] = [None] * n_feeds
            for i, value in feeds.items():
                args[i] = value
            refs = [i for i, v in feeds.items() if type(v) is not np.ndarray]
            if refs:  # (a launch by Ray: large feeds come as object-store references)
                import ray
                refs = [i for i in refs if isinstance(feeds[i], ray.ObjectRef)]
                for i, value in zip(refs, ray.get([feeds[i] for i in refs],
                                                  timeout=self.timeout_s)):
                    args[i] = value
            phases["feeds"] = clock() - started
            ran = clock()
            if entry in self.module.partitions:
                fetches, updates = exe.run_step(args, self.variables, step, rendezvous,
                                                in_place=True)
            else:
                from tfc.runtime.executor import blas_limited
                with blas_limited(self.backend, self.cores):
                    result: StepResult = exe(args, self.variables, step)
                fetches, updates = list(result.fetches), dict(result.updates)
            phases["run"] = clock() - ran
            acked = clock()
            self._await_deliveries()
            phases["acks"] = clock() - acked
            phases["recv_wait"] = rendezvous.waited
        except BaseException as e:
            rendezvous.abort(e)
            raise
        finally:
            self._end(step_id)
        self._pending = (step_id, {n: _frozen_update(u) for n, u in updates.items()})
        out = {i: np.asarray(f) for i, f in enumerate(fetches) if f is not None}
        if steptrace.ENABLED:
            steptrace.mark(step_id, "step end")
        return out, {"tensors": self._sent_tensors, "bytes": self._sent_bytes,
                     "stale": self.stale - stale_before,
                     "seconds": time.perf_counter() - started, "phases": phases}

    def _called(self, meta: Mapping[str, Any], items: list[tuple[list[str], np.ndarray]]
                ) -> tuple[dict[str, Any], list[tuple[list[str], np.ndarray]]]:
        """A step launched over the wire (the listener's ``calls``): ``run_step`` on the
        frame's call (its program step is the frame's) and values; the reply is its
        counters (an array: ``packed_counters``) and fetches, or its error (one line: what
        the driver's error says after the task's name)."""
        call = meta["call"]
        feeds: dict[int, np.ndarray] = {}
        assign: dict[str, np.ndarray] = {}
        for keys, value in items:
            kind, _, name = keys[0].partition(":")
            if kind == "feed":
                feeds[int(name)] = value
            else:
                assign[name] = value
        try:
            out, counters = self._run_step(str(call["entry"]), int(meta["step"]),
                                          int(meta["program_step"]), feeds,
                                          int(call["n_feeds"]), call["settle"], assign)
        except Exception as e:
            message = getattr(e, "message", None) or str(e) or type(e).__name__
            return {"error": message}, []
        return _SUCCEEDED, [([COUNTERS_KEY], packed_counters(counters)),
                            *[([fetch_key(i)], a) for i, a in out.items()]]

    def _send(self, items: list[tuple[str, str, np.ndarray]]) -> None:
        """The executor's transport: each value once to each task that receives it,
        tagged with the running step's id."""
        step_id = self._step_id
        by_task: dict[str, dict[int, tuple[list[str], np.ndarray]]] = {}
        for key, device, value in items:
            task = self._task_of[device]
            by_task.setdefault(task, {}).setdefault(id(value), ([], value))[0].append(key)
        put: dict[int, Any] = {}  # a value several tasks receive goes to the store once
        started = time.perf_counter()
        tensors = nbytes = 0
        deliveries = []
        for task, values in by_task.items():
            link = self._link(task)
            tensors += len(values)
            nbytes += sum(v.nbytes for _, v in values.values())
            if link is not None:
                link.send(step_id, list(values.values()))
                continue
            import ray
            payload = []
            for keys, value in values.values():
                a = np.require(value, requirements="C")
                if a.nbytes >= BY_REFERENCE_BYTES:
                    if id(value) not in put:
                        put[id(value)] = ray.put(a)
                    payload.append((keys, put[id(value)]))
                else:
                    payload.append((keys, a))
            deliveries.append(self._peers[task].deliver.remote(step_id, payload))
        with self._lock:  # (the task's devices send from threads of their own)
            self._sent_tensors += tensors
            self._sent_bytes += nbytes
            self._deliveries += deliveries
            self._phases["send"] = self._phases.get("send", 0.0) + time.perf_counter() - started

    def _await_deliveries(self) -> None:
        """Wait until every value sent this step reached its task (a failed delivery, a
        dead peer, is this step's error, within the timeout)."""
        if not self._deliveries:
            return
        import ray
        refs, self._deliveries = self._deliveries, []
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s)
        if len(ready) < len(refs):
            raise ExecutionError(f"{self.task}: a peer task did not take the values sent to "
                                 f"it within {self.timeout_s:g} s")
        ray.get(refs)

    def deliver(self, step_id: int, payload: list[tuple[list[str], Any]]) -> None:
        """Values another task sent to this one's devices for step ``step_id`` by Ray
        (arrays, or object-store references)."""
        import ray
        if self._rendezvous(step_id) is None:  # the step is over here: dropped
            self._receive(step_id, payload)
            return
        refs = [v for _, v in payload if isinstance(v, ray.ObjectRef)]
        got = iter(ray.get(refs, timeout=self.timeout_s) if refs else ())
        self._receive(step_id, [(keys, next(got) if isinstance(value, ray.ObjectRef)
                                 else value) for keys, value in payload])

    def _receive(self, step_id: int, payload: Sequence[tuple[list[str], Any]]) -> None:
        """Put values for step ``step_id`` (each with its keys) into that step's table;
        a value whose step is over here is dropped and counted as stale."""
        rendezvous = self._rendezvous(step_id)
        if rendezvous is None:  # the step is over here: a late value is dropped
            with self._lock:
                self.stale += sum(len(keys) for keys, _ in payload)
            return
        rendezvous.send_many([(key, array) for keys, array in payload for key in keys])

    def trace_events(self) -> tuple[int, list[Any]]:
        """This process's id and its step events so far (``tfc.distributed.steptrace``)."""
        return os.getpid(), steptrace.take()

    def abort(self, step_id: int, message: str) -> None:
        """Fail step ``step_id`` here: its waiting recvs raise, and it will not start."""
        rendezvous = self._rendezvous(step_id)
        if rendezvous is not None:
            rendezvous.abort(ExecutionError(message))

    def _rendezvous(self, step_id: int) -> Any:
        """Step ``step_id``'s table (made by whichever comes first: the step or a value
        for it); None once the step is over here."""
        with self._lock:
            if step_id <= self._finished:
                return None
            table = self._steps.get(step_id)
            if table is None:
                table = self._steps[step_id] = _timed_rendezvous()(self.timeout_s)
                table.step_id = step_id
                table.reader = self._listener  # a recv reads the sockets itself
            return table

    def _reading_stopped(self) -> None:
        """A thread stopped reading the sockets (``Listener.on_release``): a recv of the
        running steps that waited for it may read now."""
        with self._lock:
            tables = list(self._steps.values())
        for table in tables:
            table.wake_readers()

    def _end(self, step_id: int) -> None:
        with self._lock:
            self._finished = max(self._finished, step_id)
            for old in [s for s in self._steps if s <= step_id]:
                del self._steps[old]

    # ---- variables -----------------------------------------------------------------------

    def _settle(self, settle: bool | None) -> None:
        """Apply (``settle``: the step succeeded on every task) or drop the updates of
        this task's latest step."""
        pending, self._pending = self._pending, None
        if pending is not None and settle:
            self.variables.update(pending[1])
        elif pending is not None and settle is False:  # dropped: one made in place is made
            self._changed_by_failure.update(n for n, u in pending[1].items()
                                            if self.variables.get(n) is u)

    def _refuse_changed(self, assigned: Mapping[str, Any]) -> None:
        """An ``ExecutionError`` while a variable that a step which failed on another task
        had already updated here in place (``tfc.runtime.executor.in_place_stages``) is
        not assigned anew (the driver restoring a checkpoint assigns every variable)."""
        self._changed_by_failure.difference_update(assigned)
        if self._changed_by_failure:
            names = ", ".join("@" + n for n in sorted(self._changed_by_failure))
            raise ExecutionError(f"{self.task}: {names} were updated in place by a step "
                                 f"that then failed on another task; assign or restore them "
                                 f"before running another step")

    def read(self, names: Sequence[str], settle: bool | None) -> list[np.ndarray]:
        """The values of variables ``names`` (each owned by this task)."""
        self._settle(settle)
        self._refuse_changed({})
        missing = [n for n in names if n not in self.variables]
        if missing:
            raise ExecutionError(f"{self.task} does not hold variable @{missing[0]}")
        return [self.variables[n] for n in names]

