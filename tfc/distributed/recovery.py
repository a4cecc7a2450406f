"""Surviving the death of a task: detection, restart, restore from the last checkpoint.

A cluster program (``tfc.distributed.runtime``) fails a step with one ``ExecutionError``
when a task dies. A ``Supervisor`` runs the program's steps and turns such a failure into
a recovery, automatically (the OSDI paper's scheme, and ``tf.train.MonitoredSession``'s):

1. *Detection*, two ways: (a) the step fails (a task's call or a Send/Recv to it fails or
   times out: the runtime's errors), and (b) a ``HealthMonitor`` thread asks every task
   for its node every ``interval_s`` (each ask bounded); a task that does not answer is
   dead, and the step in flight is aborted on every task at once instead of waiting for
   its timeout. After a failed step every task is asked again (bounded) to tell a dead
   task (recover) from a step that failed by itself (a bad feed: raised as it is).
2. *Restart*: each dead task gets a new actor, on another node than the one it died on
   when the cluster has one (the dead node may be what failed), which loads the
   artifact's bytes again; every task is told its peers' new addresses.
3. *Restore*: every variable on every task from the directory's latest checkpoint
   (consistent: all shards from one step, ``tfc.runtime.checkpoint``), the step counter
   and the input position with it; the steps since are run again (the same feeds in the
   same order: ``restore_input``), so the job's result is that of a run resumed from
   that checkpoint. ``--checkpoint-every K`` bounds the steps lost by K.

One line says what happened (``worker:1 died at step 12 (SIGKILL); restarted on node
3f2a…; restored step 10; lost 2 steps; recovered in 1.9 s``), and ``events`` keeps the
timings (detection, restart, restore) for benchmarks.

*Strict or elastic.* By default (``restart``) a dead task is restarted and the job waits
for it (TF's behaviour). ``elastic`` (an allreduce program: ``tfc.distributed.elastic``)
goes on with the N-1 workers left instead, the global batch split over them, the
variables from a survivor (no step is lost), and restarts the dead worker in the
background: when it is ready the ring grows back to N at a step boundary
(``tfc.distributed.rejoin``; ``rejoin=False``: it stays at N-1); where it cannot go on
(a dead task that is no worker, no worker left), it restarts as ``restart`` does when a
checkpoint directory allows it, and says why.

*Failure injection* (tests, demos): ``worker:1@step=12`` SIGKILLs that task's process
(the actor kills itself: ``tfc_kill``; no exception, no clean-up) just before step 12 is
launched, once.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, TypeVar

from tfc.errors import ExecutionError, TfcError

from tfc.distributed.rejoin import DEFAULT_REJOIN_TIMEOUT_S, RejoinEvent

if TYPE_CHECKING:
    from tfc.distributed.elastic import Shrunk
    from tfc.distributed.rejoin import PendingRejoin

T = TypeVar("T")

ON_FAILURE = ("restart", "elastic", "fail")  # what a Supervisor does when a task dies
DEFAULT_HEALTH_INTERVAL_S = 1.0
# recoveries in a row without getting past the failed step: a task that dies every time
# it runs that step is an error, not a loop
DEFAULT_MAX_RESTARTS = 3
# what closing a supervisor waits for a ring still starting to end (then it is closed
# when its start ends, bounded by the runtime's timeouts)
_REJOIN_CLOSE_WAIT_S = 10.0
_PING_TIMEOUT_S = 10.0  # one health check's bound (a busy task still answers: 4 threads)


def short_name(task: str) -> str:
    """``worker:1`` for ``/job:worker/task:1``."""
    return task.replace("/job:", "").replace("/task:", ":")


def full_name(short: str, tasks: Iterable[str]) -> str:
    """The task of ``tasks`` that ``short`` (``worker:1``, or the full name) means; a
    ``TfcError`` listing the tasks when none."""
    tasks = list(tasks)
    for task in tasks:
        if short in (task, short_name(task)):
            return task
    raise TfcError(f"no task {short!r} in the program (its tasks: "
                   f"{', '.join(short_name(t) for t in tasks)})")


@dataclass(frozen=True)
class InjectedFailure:
    """Kill ``task``'s process (SIGKILL) just before step ``step`` is launched."""

    task: str  # as given: ``worker:1``
    step: int

    @classmethod
    def parse(cls, spec: str) -> "InjectedFailure":
        """``worker:1@step=12`` (also ``ps:0@12``); a one-line ``TfcError`` otherwise."""
        m = re.fullmatch(r"\s*([A-Za-z_][\w-]*:\d+)\s*@\s*(?:step\s*=\s*)?(\d+)\s*", spec)
        if m is None:
            raise TfcError(f"--inject-failure {spec!r}: expected TASK@step=N, e.g. "
                           f"worker:1@step=12 or ps:0@step=20")
        return cls(m.group(1), int(m.group(2)))


@dataclass
class RecoveryEvent:
    """One recovery: which tasks died, how it was found, and where the time went."""

    tasks: list[str]  # short names
    step: int  # the step that failed (or was about to run)
    cause: str  # "SIGKILL" (injected), "process exited", "no answer"
    detected_by: str  # "a failed step" | "a health check"
    nodes: list[str]  # where each restarted
    restored_step: int
    checkpoint: str
    # from the kill (injected) or the failed step's launch to the detection; None for a
    # death the health checks found between steps (when it happened is unknown)
    detect_s: float | None
    restart_s: float
    restore_s: float
    detected_at: float = 0.0  # ``time.monotonic()`` of the detection (benchmarks)
    # elastic: the workers before and after, the layout, where the variables came from,
    # the recompile's and the new ring's times (``restart_s`` is their sum); None: restarted
    elastic: "Shrunk | None" = None
    fell_back: str = ""  # elastic asked, but restarted: why

    @property
    def lost_steps(self) -> int:
        return max(0, self.step - self.restored_step)

    def line(self) -> str:
        died = " and ".join(self.tasks)
        within = "" if self.detect_s is None else f" in {self.detect_s:.2f} s"
        head = f"{died} died at step {self.step} ({self.cause}; found by " \
               f"{self.detected_by}{within}); "
        lost = f"lost {self.lost_steps} step{'s' if self.lost_steps != 1 else ''}"
        shrunk = self.elastic
        if shrunk is not None:
            kept = (f", the {shrunk.shards} shards of the batch kept"
                    if shrunk.layout == "shards" else "")
            return (f"{head}went on with {shrunk.workers_after} of {shrunk.workers_before} "
                    f"workers{kept} (elastic: recompiled in {shrunk.recompile_s:.2f} s, new "
                    f"ring in {shrunk.ring_s:.2f} s); variables of step {self.restored_step} "
                    f"from {shrunk.source} in {self.restore_s:.2f} s; {lost}")
        where = ", ".join(n[:12] for n in self.nodes)
        why = f" (not elastic: {self.fell_back})" if self.fell_back else ""
        return (f"{head}restarted on node {where}{why} in {self.restart_s:.2f} s; restored "
                f"step {self.restored_step} in {self.restore_s:.2f} s; {lost}")


def _died(ray: Any, error: BaseException) -> bool:
    return isinstance(error, ray.exceptions.ActorDiedError) or isinstance(
        error, getattr(ray.exceptions, "ActorUnavailableError", ()))


def ping(runtime: Any, timeout_s: float, skip: Iterable[str] = ()) -> dict[str, str]:
    """Ask every task of ``runtime`` (but those of ``skip``) for its node at once, waiting
    at most ``timeout_s``: the tasks that are dead or did not answer, each with why."""
    ray = runtime.ray
    refs = {}
    bad: dict[str, str] = {}
    skipped = set(skip)
    for task, actor in list(runtime.actors.items()):
        if task in skipped:
            continue
        try:
            refs[task] = actor.tfc_node_id.remote()
        except Exception as e:  # a handle Ray knows to be dead
            bad[task] = "process exited" if _died(ray, e) else str(e).splitlines()[0]
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    done = set(ready)
    for task, ref in refs.items():
        if ref not in done:
            bad[task] = f"no answer within {timeout_s:g} s"
            continue
        try:
            ray.get(ref, timeout=0)
        except Exception as e:
            bad[task] = "process exited" if _died(ray, e) else \
                (str(e).strip().splitlines() or [type(e).__name__])[0]
    return bad


class HealthMonitor:
    """Asks every task of ``runtime`` whether it is alive every ``interval_s`` (detection
    (b)), on a daemon thread. A task whose process is gone, or that did not answer two
    checks in a row (each bounded by ``timeout_s``), is dead: it is recorded (``dead``, with when) and the
    step in flight is aborted on every task, so that the driver's wait ends now rather
    than at the step's timeout. ``paused()`` stops the checks while tasks are replaced."""

    def __init__(self, runtime: Any, interval_s: float = DEFAULT_HEALTH_INTERVAL_S,
                 timeout_s: float = _PING_TIMEOUT_S) -> None:
        self.runtime = runtime
        self.interval_s = interval_s
        self.timeout_s = min(timeout_s, runtime.timeout_s)
        self.dead: dict[str, tuple[float, str]] = {}  # task -> (monotonic time, why)
        self.checks = 0
        self._missed: set[str] = set()  # the tasks that did not answer the last check
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._idle = threading.Lock()  # held while a check runs; paused() takes it
        self._thread = threading.Thread(target=self._loop, name="tfc: health checks",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._idle:
                if self._stop.is_set() or self.runtime.closed:
                    return
                try:
                    bad = ping(self.runtime, self.timeout_s)
                except Exception:  # Ray going away under us: the step's error says why
                    continue
                self.checks += 1
                # a task whose process is gone is dead now; one that is alive but silent
                # only after two bounded checks in a row (a loaded host can be slow once)
                silent = {t for t, why in bad.items() if why.startswith("no answer")}
                missed, self._missed = self._missed, silent
                bad = {t: why for t, why in bad.items() if t not in silent or t in missed}
                if bad:
                    self._found(bad)

    def _found(self, bad: dict[str, str]) -> None:
        now = time.monotonic()
        with self._lock:
            new = {t: why for t, why in bad.items() if t not in self.dead}
            for task, why in new.items():
                self.dead[task] = (now, why)
        if not new:
            return
        runtime = self.runtime
        step_id = getattr(runtime, "_launches", None)
        message = (f"task {', '.join(new)} failed a health check "
                   f"({'; '.join(new.values())})")
        # nobody waits longer for a task declared dead: a hung one would hold the step's
        # driver until the runtime's abort wait (30 s) ends
        for task in new:
            link = getattr(runtime, "_links", {}).get(task)
            if link is not None:
                link.cut(message)
            actor = runtime.actors.get(task)
            if actor is not None and new[task].startswith("no answer"):
                try:  # (a step launched by Ray: its call on the hung actor fails now)
                    runtime.ray.kill(actor, no_restart=True)
                except Exception:
                    pass
        for task, actor in list(runtime.actors.items()):
            if task not in self.dead and step_id is not None:
                try:
                    actor.abort.remote(step_id, message)
                except Exception:
                    pass

    def take(self) -> dict[str, tuple[float, str]]:
        """The tasks found dead since the last ``take`` (then forgotten)."""
        with self._lock:
            dead, self.dead = self.dead, {}
        return dead

    def paused(self) -> Any:
        """A context in which no check runs (the tasks are being replaced)."""
        return self._idle

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout_s + self.interval_s + 1.0)


def restart_tasks(runtime: Any, tasks: Sequence[str]) -> list[str]:
    """Replace the actors of ``tasks`` (dead) of ``runtime`` with new ones that load the
    artifact again, each on another node than the one it died on where the cluster has
    one (the least used), then tell every task its peers' new handles and addresses and
    make the new ones compile their part. The node id of each new actor, in order.

    The new tasks hold the artifact's variable values: the caller restores a checkpoint
    (the program's arrays then all differ from what the tasks were sent, so every
    variable is sent again with the next step)."""
    from tfc.distributed.cluster import ActorStart
    from tfc.distributed.runtime import wire_addresses
    from tfc.distributed.task import TaskActor

    cluster = runtime.cluster
    nodes = cluster.nodes
    if not nodes:
        raise ExecutionError(f"cannot restart {', '.join(tasks)}: the Ray cluster at "
                             f"{cluster.address} has no alive node")
    host = {n.node_id: n.ip for n in nodes}
    placed: dict[str, str] = {}
    starts: list[ActorStart] = []
    for task in tasks:
        old = runtime.actors.get(task)
        if old is not None:
            cluster._kill(old)  # (dead already, or not answering: make sure)
        link = runtime._links.pop(task, None)
        if link is not None:
            link.close()
        was_on = runtime.where.get(task, {}).get("node_id")
        used = Counter(w.get("node_id") for t, w in runtime.where.items()
                       if t not in tasks or t in placed)
        candidates = [n.node_id for n in nodes if n.node_id != was_on] or [was_on]
        node = min(candidates, key=lambda n: (used[n], [x.node_id for x in nodes].index(n)))
        sharing = 1 + sum(c for n, c in used.items() if host.get(n) == host[node])
        starts.append(ActorStart(TaskActor, (task, runtime.artifact, runtime.backend,
                                             runtime.timeout_s, sharing), node, f"task {task}"))
        placed[task] = node
        runtime.where[task] = {"node_id": node}
    # all at once: a restart of several tasks costs one process start, not one each
    runtime.actors.update(zip(tasks, cluster.start_actors(starts, runtime.timeout_s)))
    runtime._wait({t: runtime.actors[t].ready.remote() for t in tasks}, "restart",
                  into=runtime.where)
    runtime.wire = wire_addresses(runtime.where)
    runtime._wait({t: a.connect.remote(runtime.actors, runtime.wire)
                   for t, a in runtime.actors.items()}, "connect to the restarted task")
    entries = {t: [e for e, exe in runtime._executables.items() if t in exe.tasks]
               for t in tasks}
    runtime.made_from.update(runtime._wait(
        {t: runtime.actors[t].prepare.remote(entries[t]) for t in tasks},
        "compile its part of the program"))
    for task in tasks:
        runtime._outcome[task] = None  # nothing pending on a new actor
    for name, owner in runtime.owners.items():
        if owner in tasks:
            runtime.synced.pop(name, None)  # its value there is the artifact's
    return [placed[t] for t in tasks]


def kill_task(program: Any, task: str, timeout_s: float = 30.0) -> None:
    """SIGKILL the process of ``program``'s task ``task`` (``worker:1``) and wait until Ray
    reports it dead (bounded): the failure injection, also from Python."""
    runtime = _runtime(program)
    name = full_name(task, runtime.tasks)
    ray = runtime.ray
    ref = runtime.actors[name].tfc_kill.remote()
    try:
        ray.get(ref, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise ExecutionError(f"task {name} was sent SIGKILL but Ray did not report it dead "
                             f"within {timeout_s:g} s") from None
    except Exception:  # the call fails with its process: dead
        return


def _runtime(program: Any) -> Any:
    runtime = getattr(program, "_cluster", None)
    if runtime is None:
        raise TfcError("failure recovery and injection need a program on a Ray cluster "
                       "(cluster='local', 'auto' or HOST:PORT)")
    return runtime


@dataclass
class Supervisor:
    """Runs a cluster program's steps and recovers from the death of its tasks (see the
    module docstring). ``step(run_one)`` runs ``run_one()`` (one program step: it may call
    ``program.run`` with the next feeds, record, checkpoint) until a step succeeds, and
    after a recovery first runs again the steps lost, so a caller's loop counts steps as
    if none failed.

    ``on_failure``: ``restart`` the dead tasks (strict), go on with the allreduce workers
    left (``elastic``), or ``fail`` (raise the step's error).
    ``checkpoint_dir``: where the program's checkpoints are (the latest is restored; one
    of the current step is saved first unless the latest is of it: a failure before the
    first checkpoint goes back to where the job began); optional for ``elastic``, where
    it is what a fall back to ``restart`` restores (``batch_sizes``: see the field).
    ``restore_input``:
    called with the restored ``Checkpoint`` to put the input pipeline back (its
    ``extra``). ``inject``: failures to inject (``InjectedFailure`` or its text).
    ``report``: where the one-line summaries go (stderr by default). ``health_interval_s``:
    between health checks (None: none); ``health_timeout_s``: each check's bound (a
    task silent for two checks in a row is dead). ``max_restarts``: recoveries in a row
    that do not get past the step that failed before it gives up (an ``ExecutionError``).
    ``run_one`` must feed a step that is run again the batch of that step
    (``program.step``): after an elastic recovery the failed step runs again as it was.
    ``rejoin`` (elastic): restart the dead workers in the background and grow the ring
    back when they are ready (each rejoin in ``rejoins``), given up when not ready within
    ``rejoin_timeout_s`` of the shrink; ``ring()`` says the ring's size for a progress
    line."""

    program: Any
    checkpoint_dir: str | Path | None
    on_failure: str = "restart"
    inject: Sequence[InjectedFailure | str] = ()
    restore_input: Callable[[Any], None] | None = None
    report: Callable[[str], None] | None = None
    health_interval_s: float | None = DEFAULT_HEALTH_INTERVAL_S
    health_timeout_s: float = _PING_TIMEOUT_S  # one health check's bound
    max_restarts: int = DEFAULT_MAX_RESTARTS
    save_initial: Callable[[], None] | None = None
    # elastic: the global batch sizes still to come that the caller knows (an input
    # pipeline's batch and its epoch's last, partial one): each must split into the
    # workers left for the ``even`` layout (``tfc.distributed.elastic``)
    batch_sizes: Sequence[int] = ()
    # elastic: restart the dead workers in the background and grow the ring back to N
    # when they are ready (``tfc.distributed.rejoin``), giving up after ``rejoin_timeout_s``
    rejoin: bool = True
    rejoin_timeout_s: float = DEFAULT_REJOIN_TIMEOUT_S
    events: list[RecoveryEvent] = field(default_factory=list)
    rejoins: list[RejoinEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.on_failure not in ON_FAILURE:
            raise TfcError(f"on_failure {self.on_failure!r}: expected one of "
                           f"{', '.join(ON_FAILURE)}")
        runtime = _runtime(self.program)
        self._pending = [InjectedFailure.parse(f) if isinstance(f, str) else f
                         for f in self.inject]
        for failure in self._pending:
            full_name(failure.task, runtime.tasks)  # an unknown task fails now
        self._killed: dict[str, tuple[float, str]] = {}  # task -> (when, how): injected
        self._stuck = 0
        recovers = self.on_failure in ("restart", "elastic")
        self.monitor = (HealthMonitor(runtime, self.health_interval_s, self.health_timeout_s)
                        if self.health_interval_s and recovers else None)
        if self.on_failure == "elastic" and runtime.module.replicated_from is None:
            raise TfcError("--on-failure elastic goes on with the allreduce workers left; "
                           "this program was not compiled with --strategy allreduce (use "
                           "--on-failure restart)")
        # elastic: the ring a rejoin grows back to, the program's own (N workers)
        self._full = runtime.module if self.on_failure == "elastic" else None
        self._full_tasks = list(runtime.tasks)
        self._pending_rejoin: PendingRejoin | None = None
        self._given_up: list[PendingRejoin] = []  # (closed when their start ends)
        self._died_on: dict[str, str] = {}  # a dead worker -> its node (where it rejoins)
        self._rejoined: Counter[str] = Counter()  # rejoins per worker
        if recovers and (self.on_failure == "restart" or self.checkpoint_dir is not None):
            if self.checkpoint_dir is None:
                raise TfcError("recovering from a failure needs a checkpoint directory to "
                               "restore from (--checkpoint-dir DIR)")
            if not _latest_is_of(Path(self.checkpoint_dir), self.program.step):
                # a failure before the first checkpoint goes back to where the job began
                # (not to an older run's latest in the directory)
                if self.save_initial is not None:
                    self.save_initial()
                else:
                    self.program.save_checkpoint(self.checkpoint_dir)

    def step(self, run_one: Callable[[], T]) -> T:
        program = self.program
        target = program.step + 1
        while True:
            self._inject_due(program.step)
            dead = self.monitor.take() if self.monitor is not None else {}
            if dead:  # found between steps: recover before launching into a dead task
                self._recover(program.step, dead, "a health check", None)
                continue
            if self._pending_rejoin is not None:  # a step boundary: grow back if ready
                self._rejoin_due()
            launched = time.monotonic()
            try:
                out = run_one()
            except ExecutionError as error:
                if self.on_failure == "fail":
                    raise
                self._after_failure(program.step, error, launched)
                continue
            if program.step >= target:
                return out

    def _inject_due(self, step: int) -> None:
        for failure in [f for f in self._pending if f.step == step]:
            self._pending.remove(failure)
            runtime = _runtime(self.program)
            if self._full is not None and full_name(failure.task, self._full_tasks) \
                    not in runtime.tasks:  # a worker the elastic ring is without now
                (self.report or _to_stderr)(f"{failure.task} is not in the ring at step "
                                            f"{step}: not killed")
                continue
            task = full_name(failure.task, runtime.tasks)
            killed = time.monotonic()
            kill_task(self.program, failure.task)
            self._killed[task] = (killed, "SIGKILL")

    def _after_failure(self, step: int, error: ExecutionError, launched: float) -> None:
        """The step failed: which tasks are dead (every task asked, bounded)? None: the
        step failed by itself, and its error is raised as it is."""
        runtime = _runtime(self.program)
        found = time.monotonic()
        seen = self.monitor.take() if self.monitor is not None else {}
        bad = ping(runtime, min(_PING_TIMEOUT_S, runtime.timeout_s), skip=seen)
        if not bad and not seen:
            raise error
        how = "a health check" if seen and min(t for t, _ in seen.values()) < found \
            else "a failed step"
        dead = {**{t: (found, why) for t, why in bad.items()}, **seen}
        self._recover(step, dead, how, launched)

    def _recover(self, step: int, dead: dict[str, tuple[float, str]], how: str,
                 launched: float | None) -> None:
        program = self.program
        runtime = _runtime(program)
        # recoveries in a row that did not get past the step that failed before
        self._stuck = self._stuck + 1 if self.events and step <= self.events[-1].step else 1
        if self._stuck > self.max_restarts:
            raise ExecutionError(f"task {', '.join(dead)} died at step {step} again, after "
                                 f"{self.max_restarts} recoveries that did not get past "
                                 f"it; giving up")
        tasks = list(dead)
        detected = min(t for t, _ in dead.values())
        killed = [self._killed[t][0] for t in tasks if t in self._killed]
        since = min(killed) if killed else launched
        cause = "; ".join(sorted({self._killed[t][1] if t in self._killed else why
                                  for t, (_, why) in dead.items()}))
        for t in tasks:
            self._killed.pop(t, None)
            self._died_on[t] = runtime.where.get(t, {}).get("node_id", "")
        # a ring still starting for the workers dead before: a new one starts after this
        # recovery, for all the workers missing then
        self._cancel_rejoin()
        started = time.monotonic()
        fell_back = ""
        if self.on_failure == "elastic":
            from tfc.distributed.elastic import why_not_elastic
            fell_back = why_not_elastic(runtime, tasks) or ""
            if not fell_back:
                self._shrink(step, tasks, cause, how, detected, since)
                return
            if self.checkpoint_dir is None:
                raise ExecutionError(f"task {', '.join(short_name(t) for t in tasks)} died at "
                                     f"step {step}, and the job cannot go on without it: "
                                     f"{fell_back} (give --checkpoint-dir to restart it "
                                     f"instead)")
        pause = self.monitor.paused() if self.monitor is not None else _NoPause()
        with pause:
            nodes = restart_tasks(runtime, tasks)
            restarted = time.monotonic()
            path = program.restore_checkpoint(self.checkpoint_dir)
            if self.restore_input is not None:
                from tfc.runtime.checkpoint import read_checkpoint
                self.restore_input(read_checkpoint(path))
            if self.monitor is not None:
                self.monitor.take()  # what it saw of the old actors meanwhile
        event = RecoveryEvent(
            tasks=[short_name(t) for t in tasks], step=step, cause=cause, detected_by=how,
            nodes=nodes, restored_step=program.step, checkpoint=str(path),
            detect_s=None if since is None else max(0.0, detected - since),
            restart_s=restarted - started,
            restore_s=time.monotonic() - restarted, detected_at=detected,
            fell_back=fell_back)
        self.events.append(event)
        (self.report or _to_stderr)(event.line())

    def _shrink(self, step: int, tasks: list[str], cause: str, how: str, detected: float,
                since: float | None) -> None:
        """Go on with the workers left (``tfc.distributed.elastic.shrink``), the health
        checks then watching the new ring."""
        from tfc.distributed.elastic import shrink
        pause = self.monitor.paused() if self.monitor is not None else _NoPause()
        with pause:
            shrunk = shrink(self.program, tasks, self.checkpoint_dir, self.batch_sizes)
            if shrunk.restored_step != step and self.restore_input is not None:
                from tfc.runtime.checkpoint import read_checkpoint  # (from a checkpoint)
                self.restore_input(read_checkpoint(shrunk.source))
            if self.monitor is not None:
                self.monitor.runtime = _runtime(self.program)
                self.monitor.take()  # what it saw of the old actors meanwhile
        event = RecoveryEvent(
            tasks=[short_name(t) for t in tasks], step=step, cause=cause, detected_by=how,
            nodes=shrunk.nodes, restored_step=shrunk.restored_step, checkpoint=shrunk.source,
            detect_s=None if since is None else max(0.0, detected - since),
            restart_s=shrunk.recompile_s + shrunk.ring_s, restore_s=shrunk.read_s,
            detected_at=detected, elastic=shrunk)
        self.events.append(event)
        line = event.line()
        if self.rejoin:
            line += self._start_rejoin()
        (self.report or _to_stderr)(line)

    def _missing(self) -> list[str]:
        """The workers of the full ring that the program's ring lacks."""
        from tfc.distributed.task import cluster_tasks
        current = _runtime(self.program).tasks
        return [t for t in cluster_tasks(self._full) if t not in current] \
            if self._full is not None else []

    def _start_rejoin(self) -> str:
        """Start the full ring in the background (``tfc.distributed.rejoin``) for the
        workers missing now; what the recovery line says of it."""
        from tfc.distributed.rejoin import PendingRejoin, rejoin_node
        runtime = _runtime(self.program)
        missing = self._missing()
        names = " and ".join(short_name(t) for t in missing)
        tired = [t for t in missing if self._rejoined[t] >= self.max_restarts]
        if tired:
            return (f"; {short_name(tired[0])} is not restarted again (it died after "
                    f"rejoining {self._rejoined[tired[0]]} times)")
        try:
            alive = [n.node_id for n in runtime.cluster.nodes]
            used = Counter(w["node_id"] for w in runtime.where.values())
            nodes = {t: w["node_id"] for t, w in runtime.where.items()}
            for task in missing:
                nodes[task] = rejoin_node(alive, self._died_on.get(task), used)
                used[nodes[task]] += 1
            assert self._full is not None
            values = self.program.stored_variables  # (the shrunk ring's: any will do)
            from tfc.distributed.elastic import mirrored_values, unmirrored
            full = mirrored_values(self._full, {n: values[n] for n in unmirrored(self._full)})
            self._pending_rejoin = PendingRejoin(
                self._full, full, self.program.step, runtime.backend,
                runtime.cluster.address, runtime.timeout_s, nodes, missing,
                self.rejoin_timeout_s)
        except TfcError as e:
            return f"; {names} cannot rejoin ({e.message})"
        return f"; restarting {names} in the background to rejoin"

    def _rejoin_due(self) -> None:
        """At a step boundary: grow the ring back when the pending one is ready; give it
        up when it failed or is late (saying why)."""
        from tfc.distributed.rejoin import grow
        pending = self._pending_rejoin
        assert pending is not None
        state = pending.state()
        if state == "starting":
            return
        self._pending_rejoin = None
        program = self.program
        before = len(_runtime(program).tasks)
        now = time.monotonic()
        event = RejoinEvent(tasks=[short_name(t) for t in pending.tasks],
                            workers_before=before, workers_after=before, step=program.step,
                            nodes=[pending.nodes[t] for t in pending.tasks],
                            restart_s=(pending.ready_at or now) - pending.started)
        if state != "ready":
            pending.cancel()
            self._given_up.append(pending)
            event.failed = (f"not ready within {pending.timeout_s:g} s" if state == "late"
                            else f"the restart failed: {pending.error}")
        else:
            pause = self.monitor.paused() if self.monitor is not None else _NoPause()
            with pause:
                runtime = pending.take()
                event.ready_wait_s = now - (pending.ready_at or now)
                try:
                    event.source, event.read_s = grow(program, runtime)
                except ExecutionError as e:  # the survivor's read failed: not grown
                    runtime.close()
                    event.failed = f"reading the variables failed: {e.message}"
                else:
                    event.workers_after = len(runtime.tasks)
                    event.swap_s = time.monotonic() - now - event.read_s
                    for task in pending.tasks:
                        self._rejoined[task] += 1
                    if self.monitor is not None:
                        self.monitor.runtime = runtime
                        self.monitor.take()  # what it saw of the old actors meanwhile
        self.rejoins.append(event)
        (self.report or _to_stderr)(event.line())

    def wait_for_rejoin(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until the ring being restarted in the background
        is ready or failed; the next ``step`` then grows back (or says why not). Whether
        its start ended: True as well when a step boundary already settled it (a start
        that fails at once can end before the caller asks), False when none was started.
        For tests and benchmarks: a job does not wait, it goes on at N-1 meanwhile."""
        pending = self._pending_rejoin
        if pending is None:
            return bool(self.rejoins)
        return pending.wait(timeout_s)

    def ring(self) -> str:
        """The ring's size for a progress line (``ring 2/3, worker:1 rejoining``); empty
        unless elastic."""
        if self._full is None:
            return ""
        from tfc.distributed.elastic import worker_index
        from tfc.distributed.task import cluster_tasks
        now = sum(worker_index(t) is not None for t in _runtime(self.program).tasks)
        text = f"ring {now}/{len(cluster_tasks(self._full))}"
        pending = self._pending_rejoin
        if pending is not None:
            text += f", {' and '.join(short_name(t) for t in pending.tasks)} rejoining"
        return text

    def _cancel_rejoin(self) -> None:
        pending, self._pending_rejoin = self._pending_rejoin, None
        if pending is not None:
            pending.cancel()
            self._given_up.append(pending)

    def close(self) -> None:
        # a ring still starting: closed when its start ends (waited for, bounded, so
        # that no actor of it outlives the job's)
        self._cancel_rejoin()
        deadline = time.monotonic() + _REJOIN_CLOSE_WAIT_S
        for pending in self._given_up:
            pending.wait(max(0.0, deadline - time.monotonic()))
        self._given_up = [p for p in self._given_up if p.state() in ("starting", "late")]
        if self.monitor is not None:
            self.monitor.close()

    def __enter__(self) -> "Supervisor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _latest_is_of(directory: Path, step: int) -> bool:
    """Whether the latest checkpoint in ``directory`` is one of ``step`` (by its name)."""
    from tfc.runtime.checkpoint import PREFIX, CheckpointError, latest_checkpoint
    try:
        latest = latest_checkpoint(directory) if directory.is_dir() else None
    except CheckpointError:
        return False
    return latest is not None and Path(latest).name.startswith(f"{PREFIX}-{step}.")


class _NoPause:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)
