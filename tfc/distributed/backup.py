"""Synchronous PS training with backup workers, and injected stragglers (issue #18 item 3).

The OSDI'16 paper's remedy for stragglers: run N + b workers, and let each step take the
first N gradients that arrive and drop the rest. ``BackupTrainer`` does this with the
actors of ``tfc.distributed.async_ps`` (the same cut of the step, ``async_split``): in
step k every worker reads the variables (version k on every PS), computes the gradients
of its own batch and offers them to each PS; each PS keeps the first N offers for its
current version, applies their mean (summed in worker order and divided by N, as
``ps-sync`` does) and moves to version k + 1; an offer computed from an older version
is dropped and counted (``late``): it is never applied to a later step. The driver
starts step k + 1 once every PS applied step k; a straggler still busy with step k takes
its next batch when it is done (reading the new version then).

``b = 0`` is plain synchronous training: every step averages the same N gradients as
``ps-sync`` with N workers (each worker's batch is its shard of the global batch).

``StragglerSpec`` delays workers by a seeded distribution (``--straggler``): each
(worker, step) gets its delay before it computes, from a generator seeded with
(seed, worker, step), so a run's delays do not depend on timing.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from tfc.errors import ExecutionError, TfcError
from tfc.ir.core import Module
from tfc.passes.replicate import ClusterSpec


def _duration(text: str, what: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s)\s*", text)
    if m is None:
        raise TfcError(f"--straggler {what}: {text!r} is not a duration (e.g. 30ms, 0.5s)")
    return float(m.group(1)) * (1e-3 if m.group(2) == "ms" else 1.0)


@dataclass(frozen=True)
class StragglerSpec:
    """Injected delays: ``lognormal:sigma=S,median=M,seed=K`` (every worker, each step
    ``M * exp(S * z)`` with z standard normal; median default 10ms, seed 0) or
    ``worker:I=D[,worker:J=E]`` (worker I is D slower every step)."""

    kind: str
    sigma: float = 0.0
    median_s: float = 0.010
    seed: int = 0
    fixed: tuple[tuple[int, float], ...] = ()

    @classmethod
    def parse(cls, text: str) -> "StragglerSpec":
        kind, _, rest = text.partition(":")
        if kind == "lognormal":
            fields: dict[str, str] = {}
            for item in filter(None, rest.split(",")):
                key, eq, value = item.partition("=")
                if not eq or key not in ("sigma", "median", "seed"):
                    raise TfcError(f"--straggler {text!r}: expected lognormal:sigma=S"
                                   f"[,median=10ms][,seed=K]")
                fields[key] = value
            try:
                sigma = float(fields.get("sigma", "0.5"))
                seed = int(fields.get("seed", "0"))
            except ValueError:
                raise TfcError(f"--straggler {text!r}: sigma is a number, seed a whole "
                               f"number") from None
            if sigma < 0:
                raise TfcError(f"--straggler {text!r}: sigma must be >= 0")
            return cls("lognormal", sigma, _duration(fields.get("median", "10ms"), text), seed)
        fixed = []
        for item in text.split(","):
            m = re.fullmatch(r"worker:(\d+)=(.+)", item.strip())
            if m is None:
                raise TfcError(f"--straggler {text!r}: expected lognormal:sigma=S,... or "
                               f"worker:I=30ms[,worker:J=...]")
            fixed.append((int(m.group(1)), _duration(m.group(2), text)))
        return cls("worker", fixed=tuple(fixed))

    def delay(self, worker: int, step: int) -> float:
        """Worker ``worker``'s extra seconds in step ``step``."""
        if self.kind == "lognormal":
            z = np.random.default_rng([self.seed, worker, step]).standard_normal()
            return float(self.median_s * np.exp(self.sigma * z))
        return sum(d for w, d in self.fixed if w == worker)


@dataclass
class BackupStats:
    """A run with backup workers: each step's wall time, the offers each PS took and
    dropped (``late``), and the workers' fetches of the offers that were taken."""

    step_seconds: list[float] = field(default_factory=list)
    taken: int = 0
    late: int = 0
    # each step's taken offers: (worker, the step whose batch it computed on: an earlier one
    # for a straggler that read the variables only after its own step was over)
    taken_by_step: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    fetches: dict[int, list[dict[str, np.ndarray]]] = field(default_factory=dict)

    def median_s(self) -> float:
        return float(np.median(self.step_seconds)) if self.step_seconds else 0.0

    def p90_s(self) -> float:
        return float(np.percentile(self.step_seconds, 90)) if self.step_seconds else 0.0


class BackupTrainer:
    """``spec.workers`` (N) gradients a step from N + ``backup_workers`` workers on
    ``spec.ps`` PS tasks (see the module docstring)."""

    def __init__(self, module: Module, spec: ClusterSpec, cluster: str, *,
                 backup_workers: int = 0, backend: str = "llvm", entry: str | None = None,
                 variables: Mapping[str, np.ndarray] | None = None,
                 timeout_s: float = 120.0) -> None:
        from tfc.distributed.async_ps import AsyncPSTrainer
        if isinstance(backup_workers, bool) or not isinstance(backup_workers, int) \
                or backup_workers < 0:
            raise TfcError(f"--backup-workers {backup_workers!r}: a whole number >= 0")
        if spec.strategy != "ps-sync":
            raise TfcError(f"backup workers take the first N gradients of a synchronous "
                           f"step: use strategy ps-sync, not {spec.strategy}")
        self.needed = spec.workers
        self.backup_workers = backup_workers
        self.inner = AsyncPSTrainer(
            module, ClusterSpec(spec.ps, spec.workers + backup_workers, "ps-async",
                                spec.ps_placement),
            cluster, backend=backend, entry=entry, variables=variables, timeout_s=timeout_s)
        for part in self.inner.split.apply.values():
            sparse = [i for i in part.grad_results
                      if not self.inner.split.gradient.graphs[self.inner.split.entry]
                      .results[i].dtype.is_float]
            if sparse:
                self.inner.close()
                raise TfcError("backup workers average dense gradients; this model has a "
                               "sparse one (IndexedSlices): not supported yet")
        self.timeout_s = timeout_s
        self.workers = list(self.inner.workers)
        self._version = 0  # the steps applied so far (every PS's version)

    def train(self, batches: Callable[[int, int], Mapping[str, np.ndarray]], steps: int,
              straggler: StragglerSpec | None = None,
              progress: Callable[[int, BackupStats], None] | None = None) -> BackupStats:
        """``steps`` synchronous steps; worker ``i`` of step ``k`` computes on
        ``batches(k, i)`` (the N + b workers each on a batch of their own);
        ``progress(k, stats)`` after each step (``taken`` and ``late`` so far)."""
        inner = self.inner
        ray = inner.ray
        stats = BackupStats()
        running: dict[Any, tuple[str, int]] = {}
        n_ps = len([p for p in inner.split.apply.values() if p.variables])
        applied: dict[int, int] = {}  # step -> the PS tasks that applied it
        base = self._version  # the PS tasks' version before this run's first step
        stop = base + steps  # no PS applies an offer read at this version or later
        offers = 0

        def collect(ref: Any, worker: str, k: int) -> None:
            nonlocal offers
            try:
                fetches, answers = ray.get(ref)
            except ray.exceptions.RayError as e:
                from tfc.distributed.async_ps import _one_line
                raise ExecutionError(f"task {worker} failed step {k}: "
                                     f"{_one_line(ray, e)}") from None
            offers += len(answers)
            for status, version in answers:
                if status == "applied":
                    applied[version - base] = applied.get(version - base, 0) + 1
            status, version = answers[0] if answers else ("late", base + k)
            version -= base
            if status != "late":  # (every PS takes the same: one offer per worker and step)
                stats.taken_by_step.setdefault(version, []).append(
                    (self.workers.index(worker), k))
                stats.fetches.setdefault(version, []).append(fetches)
                stats.taken += len(answers)
            stats.late = offers - stats.taken  # so far (the end recounts)

        try:
            for k in range(steps):
                started = time.perf_counter()
                for i, w in enumerate(self.workers):
                    delay = straggler.delay(i, k) if straggler is not None else 0.0
                    ref = inner.workers[w].sync_step.remote(dict(batches(k, i)), i,
                                                            self.needed, stop, delay)
                    running[ref] = (w, k)
                while applied.get(k, 0) < n_ps:
                    ready, _ = ray.wait(list(running), num_returns=1, timeout=self.timeout_s)
                    if not ready:
                        late = ", ".join(sorted({w for w, _ in running.values()}))
                        raise ExecutionError(f"step {k}: not every PS applied it within "
                                             f"{self.timeout_s:g} s (waiting for {late})")
                    worker, j = running.pop(ready[0])
                    collect(ready[0], worker, j)
                stats.step_seconds.append(time.perf_counter() - started)
                if progress is not None:
                    progress(k, stats)
            # the backups' last offers: counted (dropped), never applied
            ready, _ = ray.wait(list(running), num_returns=len(running), timeout=self.timeout_s)
            for ref in ready:
                worker, j = running.pop(ref)
                collect(ref, worker, j)
            if running:
                raise ExecutionError(f"task {', '.join(w for w, _ in running.values())} "
                                     f"did not finish within {self.timeout_s:g} s")
        finally:
            if running:
                ray.wait(list(running), num_returns=len(running),
                         timeout=min(self.timeout_s, 30.0))
        # offers for the step after the last (read once it was applied) were dropped
        for version in [v for v in stats.taken_by_step if v >= steps]:
            del stats.taken_by_step[version]
            stats.fetches.pop(version, None)
        stats.taken = n_ps * sum(len(ws) for ws in stats.taken_by_step.values())
        stats.late = offers - stats.taken
        self._version = stop
        return stats

    def variables(self) -> dict[str, np.ndarray]:
        return self.inner.variables()

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> "BackupTrainer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
