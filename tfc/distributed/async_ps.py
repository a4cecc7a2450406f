"""Asynchronous parameter-server training on Ray (``--strategy ps-async``: Downpour SGD).

``AsyncPSTrainer(module, ClusterSpec(P, W, "ps-async"), cluster=...)`` cuts the model's
training entry in two (``tfc.passes.async_split``) and starts one Ray actor per task:

- a ``ParameterServer`` per PS task holds its variables (placed as ``ps-sync`` places
  them) and a version, the number of updates it applied. ``read`` gives a snapshot and
  its version; ``apply`` runs the update on the variables as they are now, one worker's
  gradients at a time (the actor runs one call at a time: an update is never half
  seen), counts it and returns its *staleness*: the PS's version at apply minus the
  version the worker read (the number of other workers' updates that landed between);
  with ``staleness_damping``, a gradient staler than W - 1 updates is applied scaled by
  (W - 1) / staleness (``staleness_scale``; off by default: see there);
- a ``Worker`` per worker task loops on its own: read the variables from every PS,
  compute the gradients of its batch, send each PS its gradients and wait for the
  acknowledgement (so that no update is lost or applied twice). There is no barrier:
  a worker never waits for another.

The driver hands each worker its next batch as soon as its previous step is done (the
batches are the driver's: ``train``'s ``batches(step)``), so a fast worker does more
steps than a slow one. With one worker every update has staleness 0 and the run is the
synchronous one (the same updates in the same order).

Every wait is bounded (``timeout_s``); a task that dies or hangs is one
``ExecutionError`` naming it.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TfcError
from tfc.ir.core import Module
from tfc.passes.async_split import AsyncSplit, split_async
from tfc.passes.replicate import ClusterSpec

DEFAULT_TIMEOUT_S = 120.0


def _program(text: str, what: str, backend: str, cores: int,
             variables: Mapping[str, np.ndarray] | None = None) -> Any:
    """A Program of the module ``text`` (the IR's textual form: what travels to a task,
    never pickled Python) on ``cores`` threads."""
    from tfc.backends.base import get_backend
    from tfc.ir.parser import parse_module
    from tfc.runtime import Program
    from tfc.runtime.executor import with_threads
    module = parse_module(text, what)
    return Program(module, variables=variables,
                   backend=with_threads(get_backend(backend), cores))


def _run(program: Any, entry: str, feeds: Mapping[str, np.ndarray], cores: int
         ) -> dict[str, np.ndarray]:
    from tfc.runtime.executor import blas_limited
    with blas_limited(program.backend, cores):
        return program.run(entry, feeds)


def _wait(ray: Any, refs: Sequence[Any], timeout_s: float, what: str) -> list[Any]:
    """``ray.get`` of ``refs`` within ``timeout_s``; one-line ``ExecutionError`` else."""
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    if len(ready) < len(refs):
        raise ExecutionError(f"{what} did not answer within {timeout_s:g} s")
    try:
        return ray.get(list(refs))
    except ray.exceptions.RayError as e:
        raise ExecutionError(f"{what} failed: {_one_line(ray, e)}") from None


def _one_line(ray: Any, e: BaseException) -> str:
    if isinstance(e, ray.exceptions.ActorDiedError) or isinstance(
            e, getattr(ray.exceptions, "ActorUnavailableError", ())):
        return "its process died"
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        return getattr(cause, "message", None) or str(cause).strip().splitlines()[-1]
    lines = str(e).strip().splitlines()
    return lines[-1] if lines else type(e).__name__


def staleness_scale(staleness: int, damp_after: int | None) -> float:
    """What an update of ``staleness`` is scaled by: 1 up to ``damp_after`` (None: always
    1), ``damp_after / staleness`` beyond it.

    Why (the staleness-aware rate of Zhang et al., IJCAI 2016, applied to the outliers
    only): with W workers taking turns, an update is about W - 1 updates stale, and at
    that staleness asynchronous SGD converges as the synchronous one does. What hurts is
    the rare update of a worker that stalled (a busy host, a GC pause) and comes back with
    gradients of weights dozens of updates old: it pulls the model back where it was. The
    digits MLP (Adam 0.005, 4 workers) ended at 0.9622 test accuracy in one of two runs
    whose max staleness was 43, 0.9778 otherwise. Scaling such a gradient by D / staleness
    bounds its pull to that of an update D stale; the gradient enters Adam's moments
    scaled, so with Adam too it moves the weights less. ``AsyncPSTrainer`` uses D = W - 1
    with ``staleness_damping``; one worker's updates are never stale.

    Off by default, because measured it did not help that model: with a worker slowed by
    25 ms (max staleness 28-156) three data orders ended at 0.9756, 0.9756, 0.9822
    undamped and 0.9800, 0.9444, 0.9711 damped. What made it miss 0.97 was the noise of
    its constant Adam rate, in one process too (``examples/mlp_digits_ps.py``)."""
    if damp_after is None or staleness <= damp_after or staleness <= 0:
        return 1.0
    return max(damp_after, 1) / staleness


class ParameterServer:
    """One PS task's actor (see the module docstring)."""

    def __init__(self, task: str, text: str, values: Mapping[str, np.ndarray], backend: str,
                 cores: int, damp_after: int | None = None) -> None:
        self.task, self.cores, self.damp_after = task, cores, damp_after
        self.program = _program(text, f"the update sent to {task}", backend, cores,
                                dict(values))
        for entry in self.program.entries:  # compiled now: not inside the first update
            self.program.callable(entry)
        self.version = 0
        self.staleness: list[int] = []
        self._offers: dict[int, dict[str, np.ndarray]] = {}  # this step's (backup workers)
        self.late = 0

    def ready(self) -> int:
        return os.getpid()

    def read(self, names: Sequence[str]) -> tuple[int, list[np.ndarray]]:
        """The variables ``names`` now, and the version they are."""
        variables = self.program.variables
        return self.version, [variables[n] for n in names]

    def apply(self, entry: str, feeds: Mapping[str, np.ndarray], read_version: int) -> int:
        """Apply one worker's gradients (read at ``read_version``); their staleness. With
        ``damp_after`` = D, gradients staler than D are scaled by D / staleness first
        (``staleness_damping``)."""
        stale = self.version - read_version
        scale = staleness_scale(stale, self.damp_after)
        if scale != 1.0:
            feeds = {n: (v * v.dtype.type(scale) if n.startswith("grad") and v.dtype.kind == "f"
                         else v) for n, v in feeds.items()}
        _run(self.program, entry, feeds, self.cores)
        self.version += 1
        self.staleness.append(stale)
        return stale

    def offer(self, entry: str, feeds: Mapping[str, np.ndarray], read_version: int,
              worker: int, needed: int, stop: int) -> tuple[str, int]:
        """Synchronous training with backup workers (``tfc.distributed.backup``): worker
        ``worker``'s gradients for step ``read_version`` (the version it read). The first
        ``needed`` of a step (one a worker) are kept; the last of them applies their mean (summed in
        worker order, divided by ``needed``, as ``ps-sync`` sums) and ends the step; one
        for a step that is over, or for step ``stop`` or later (the run's end: a
        straggler's last read), is dropped. Returns ``applied``, ``taken`` or ``late``,
        and the step."""
        if read_version != self.version or read_version >= stop or worker in self._offers:
            # (a straggler that read this version before its step began, offering twice)
            self.late += 1
            return "late", read_version
        self._offers[worker] = dict(feeds)
        if len(self._offers) < needed:
            return "taken", read_version
        offers = [self._offers[w] for w in sorted(self._offers)]
        self._offers = {}
        mean = dict(offers[0])
        for name in mean:
            if name.startswith("grad"):
                acc = offers[0][name]
                for other in offers[1:]:
                    acc = acc + other[name]
                mean[name] = acc / np.asarray(needed, acc.dtype) if needed > 1 else acc
        _run(self.program, entry, mean, self.cores)
        self.version += 1
        return "applied", read_version

    def values(self) -> dict[str, np.ndarray]:
        return dict(self.program.variables)


class Worker:
    """One worker task's actor: read, compute, send (see the module docstring)."""

    def __init__(self, task: str, text: str, backend: str, cores: int, timeout_s: float,
                 plan: Mapping[str, Any]) -> None:
        self.task, self.cores, self.timeout_s = task, cores, timeout_s
        self.program = _program(text, f"the gradients sent to {task}", backend, cores)
        self.program.callable(plan["entry"])  # compiled now: not inside the first step
        self.plan = plan
        self.servers: dict[str, Any] = {}

    def connect(self, servers: Mapping[str, Any]) -> int:
        """The PS tasks' actors by task; this worker's process id."""
        self.servers = dict(servers)
        return os.getpid()

    def step(self, feeds: Mapping[str, np.ndarray], delay_s: float = 0.0
             ) -> tuple[dict[str, np.ndarray], list[int]]:
        """One asynchronous step on this worker's batch ``feeds`` (``delay_s``: an injected
        straggler's extra time): the entry's fetches and each PS's staleness of this
        update."""
        import ray
        fetches, sends, order = self._gradients(feeds, delay_s)
        refs = [self.servers[ps].apply.remote(self.plan["entry"], grads, version)
                for ps, (grads, version) in sends.items()]
        staleness = _wait(ray, refs, self.timeout_s,
                          f"{self.task}: sending its gradients to {', '.join(order)}")
        return fetches, staleness

    def sync_step(self, feeds: Mapping[str, np.ndarray], index: int, needed: int, stop: int,
                  delay_s: float = 0.0) -> tuple[dict[str, np.ndarray], list[tuple[str, int]]]:
        """One step of synchronous training with backup workers: offer each PS this
        worker's (number ``index``) gradients for the step it read; each PS's answer
        (``ParameterServer.offer``)."""
        import ray
        fetches, sends, order = self._gradients(feeds, delay_s)
        refs = [self.servers[ps].offer.remote(self.plan["entry"], grads, version, index,
                                              needed, stop)
                for ps, (grads, version) in sends.items()]
        answers = _wait(ray, refs, self.timeout_s,
                        f"{self.task}: sending its gradients to {', '.join(order)}")
        return fetches, [tuple(a) for a in answers]

    def _gradients(self, feeds: Mapping[str, np.ndarray], delay_s: float
                   ) -> tuple[dict[str, np.ndarray], dict[str, tuple[dict[str, np.ndarray], int]],
                              list[str]]:
        """Read the variables, compute the gradients of ``feeds``: the fetches, and what
        to send each PS (its gradients and the version read there)."""
        import ray
        plan = self.plan
        reads = plan["reads"]  # PS -> the variables read from it
        got = _wait(ray, [self.servers[ps].read.remote(names) for ps, names in reads.items()],
                    self.timeout_s, f"{self.task}: reading the variables from the PS tasks")
        versions: dict[str, int] = {}
        value: dict[str, np.ndarray] = {}
        for (ps, names), (version, values) in zip(reads.items(), got):
            versions[ps] = version
            value.update(zip(names, values))
        args = dict(feeds)
        args.update({arg: value[var] for arg, var in plan["read_args"]})
        if delay_s > 0:
            time.sleep(delay_s)
        out = _run(self.program, plan["entry"], args, self.cores)
        results = list(out.values())
        sends: dict[str, tuple[dict[str, np.ndarray], int]] = {}
        for ps, apply in plan["apply"].items():
            grads = {f"grad{i}": results[i] for i in apply["grad_results"]}
            grads.update({arg: value[var] for arg, var in apply["foreign"]})
            sends[ps] = (grads, versions[ps])
        fetches = dict(zip(plan["fetches"], results[:len(plan["fetches"])]))
        return fetches, sends, list(sends)


def worker_plan(split: AsyncSplit) -> dict[str, Any]:
    """What a worker needs to know of the split (plain data: it travels to the actor)."""
    from tfc.passes.async_split import _arg_name
    reads: dict[str, list[str]] = {}
    needed = list(split.read_args)
    for part in split.apply.values():
        needed += [v for v in part.foreign_reads if v not in needed]
    for var in needed:
        reads.setdefault(split.var_device[var], []).append(var)
    graph = split.gradient.graphs[split.entry]
    n_batch = len(graph.args) - len(split.read_args)
    return {
        "entry": split.entry, "reads": reads, "fetches": split.fetch_names,
        "read_args": [(graph.args[n_batch + k].name, var)
                      for k, var in enumerate(split.read_args)],
        "apply": {ps: {"grad_results": list(part.grad_results),
                       "foreign": [(_arg_name("remote", k, var), var)
                                   for k, var in enumerate(part.foreign_reads)]}
                  for ps, part in split.apply.items() if part.variables},
    }


@dataclass
class AsyncStats:
    """What ``train`` did: the updates (each worker step's fetches and staleness per PS
    apply), its wall time, and how many steps each worker took."""

    steps: int = 0
    seconds: float = 0.0
    staleness: list[int] = field(default_factory=list)   # one per PS apply
    fetches: list[dict[str, np.ndarray]] = field(default_factory=list)  # per step, in order
    worker_steps: dict[str, int] = field(default_factory=dict)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    def histogram(self) -> dict[int, int]:
        """How many updates had each staleness."""
        return dict(sorted(Counter(self.staleness).items()))

    def staleness_line(self) -> str:
        """``staleness: median 1, p90 3, max 5, mean 1.42 (120 updates)``."""
        if not self.staleness:
            return "staleness: no updates"
        s = np.asarray(self.staleness)
        return (f"staleness: median {np.median(s):g}, p90 {np.percentile(s, 90):g}, "
                f"max {s.max()}, mean {s.mean():.2f} ({s.size} updates)")


def progress_line(stats: AsyncStats, steps: int) -> str:
    """The progress output of an asynchronous run: steps done, their rate, the latest
    scalar fetches and the staleness so far."""
    last = stats.fetches[-1] if stats.fetches else {}
    scalars = "  ".join(f"{n} {float(v):.4g}" for n, v in last.items() if np.ndim(v) == 0)
    return (f"step {stats.steps}/{steps}  {stats.steps_per_s:.1f} steps/s  {scalars}  "
            f"{stats.staleness_line()}")


class AsyncPSTrainer:
    """The tasks of one asynchronous training run on a Ray cluster (module docstring).

    ``module`` is the single-device training module as traced (its optimizer marks on);
    ``variables`` its variables' initial values (default: its initializers').
    ``staleness_damping``: each PS scales gradients staler than W - 1 updates by
    (W - 1) / staleness (``staleness_scale``); off (the default), every update applies
    as computed."""

    def __init__(self, module: Module, spec: ClusterSpec, cluster: str, *,
                 backend: str = "llvm", entry: str | None = None,
                 variables: Mapping[str, np.ndarray] | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, staleness_damping: bool = False
                 ) -> None:
        from tfc.devices import cpu_count
        from tfc.distributed.cluster import RayCluster, require_ray
        from tfc.ir.printer import print_module
        from tfc.runtime import Program
        if spec.strategy != "ps-async":
            raise TfcError(f"AsyncPSTrainer runs --strategy ps-async, not {spec.strategy}")
        self.spec, self.timeout_s = spec, timeout_s
        self.split = split_async(module, spec, entry)
        if variables is None:
            variables = Program(module, backend="reference").variables
        initial = {n: np.asarray(variables[n]) for n in module.variables}
        self.ray = require_ray()
        self.cluster = RayCluster.connect(cluster, timeout_s=min(timeout_s, 30.0))
        try:
            tasks = [*spec.ps_devices, *spec.worker_devices]
            nodes = self.cluster.spread(len(tasks))
            cores = max(1, cpu_count() // len(tasks))
            self.servers: dict[str, Any] = {}
            for ps, node in zip(spec.ps_devices, nodes):
                part = self.split.apply[ps]
                self.servers[ps] = self.cluster.start_actor(
                    ParameterServer, ps, print_module(part.module),
                    {n: initial[n] for n in part.variables}, backend, cores,
                    spec.workers - 1 if staleness_damping else None, node_id=node, name=f"task {ps}", max_concurrency=1, timeout_s=timeout_s)
            plan = worker_plan(self.split)
            text = print_module(self.split.gradient)
            self.workers: dict[str, Any] = {}
            for w, node in zip(spec.worker_devices, nodes[spec.ps:]):
                self.workers[w] = self.cluster.start_actor(
                    Worker, w, text, backend, cores, timeout_s, plan,
                    node_id=node, name=f"task {w}", max_concurrency=1, timeout_s=timeout_s)
            actors = {**self.servers, **self.workers}
            pids = _wait(self.ray, [a.ready.remote() if t in self.servers
                                    else a.connect.remote(self.servers)
                                    for t, a in actors.items()], timeout_s, "starting the tasks")
            self.pids: dict[str, int] = dict(zip(actors, pids))  # task -> its process
        except BaseException:
            self.close()
            raise
        self.closed = False

    def train(self, batches: Callable[[int], Mapping[str, np.ndarray]], steps: int,
              progress: Callable[[int, AsyncStats], None] | None = None,
              straggler: Any = None) -> AsyncStats:
        """``steps`` asynchronous steps, step ``k`` on ``batches(k)``, each handed to the
        first worker that is free; ``progress(k, stats)`` after each step that ends;
        ``straggler`` (``tfc.distributed.backup.StragglerSpec``) delays workers."""
        index = {w: i for i, w in enumerate(self.workers)}
        ray = self.ray
        stats = AsyncStats(worker_steps={w: 0 for w in self.workers})
        running: dict[Any, tuple[str, int]] = {}
        started = time.perf_counter()
        next_step = 0

        def launch(worker: str) -> None:
            nonlocal next_step
            delay = straggler.delay(index[worker], next_step) if straggler is not None else 0.0
            ref = self.workers[worker].step.remote(dict(batches(next_step)), delay)
            running[ref] = (worker, next_step)
            next_step += 1

        try:
            for w in self.workers:
                if next_step < steps:
                    launch(w)
            while running:
                ready, _ = ray.wait(list(running), num_returns=1, timeout=self.timeout_s)
                if not ready:
                    late = ", ".join(sorted({w for w, _ in running.values()}))
                    raise ExecutionError(f"task {late} did not finish a step within "
                                         f"{self.timeout_s:g} s")
                worker, k = running.pop(ready[0])
                try:
                    fetches, staleness = ray.get(ready[0])
                except ray.exceptions.RayError as e:
                    raise ExecutionError(f"task {worker} failed step {k}: "
                                         f"{_one_line(ray, e)}") from None
                stats.steps += 1
                stats.worker_steps[worker] += 1
                stats.staleness.extend(staleness)
                stats.fetches.append(fetches)
                if next_step < steps:
                    launch(worker)
                stats.seconds = time.perf_counter() - started
                if progress is not None:
                    progress(k, stats)
        finally:
            if running:  # an error: the others' steps end on their own (bounded)
                ray.wait(list(running), num_returns=len(running),
                         timeout=min(self.timeout_s, 30.0))
        stats.seconds = time.perf_counter() - started
        return stats

    def variables(self) -> dict[str, np.ndarray]:
        """Every variable's value on its PS now."""
        out: dict[str, np.ndarray] = {}
        for values in _wait(self.ray, [s.values.remote() for s in self.servers.values()],
                            self.timeout_s, "reading the variables back from the PS tasks"):
            out.update(values)
        return out

    def close(self) -> None:
        self.closed = True
        cluster = getattr(self, "cluster", None)
        if cluster is not None:
            cluster.close()

    def __enter__(self) -> "AsyncPSTrainer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
