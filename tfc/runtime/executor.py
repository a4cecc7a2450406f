"""The local multi-device executor: one step of a partitioned entry, one thread per device.

It runs what the ``partition`` pass decided (``module.partitions[entry]``, a
``PartitionTable``; ``tfc.passes.partition`` says how the stages are cut): each device
runs its stages in order, every stage an ordinary graph of the module that the backend
compiles by name (one native call per stage on the LLVM backend, which releases the GIL
while it runs); sends and receives happen between stages through the step's
``Rendezvous``. Stage ``s`` on one device only waits for values that other devices
produce in stages before ``s``, so the devices run concurrently without deadlock. The
executor runs no pass. With a ``tracer`` set, every stage is a span of the device's
track, and when the backend times its kernels (``LLVMBackend(profile=True)``) each
kernel is a span inside its stage's.

``PartitionedExecutable`` has the backend ``Executable`` interface, so ``Program`` runs a
multi-device module exactly as it runs a single-device one: same feeds, fetches,
variable semantics (reads see the start of the step, updates apply after it) and
results within float tolerance of the single-device run (bitwise on the reference
backend, where the ops are the same numpy calls).
"""

from __future__ import annotations

import copy
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from tfc.backends.base import Backend, Executable, StepResult
from tfc.devices import threads_per_device
from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, PartitionStage, StageSource
from tfc.passes.compress import CompressReport, compression_report
from tfc.runtime.rendezvous import Rendezvous
from tfc.runtime.trace import Tracer


def _slot(src: StageSource) -> Hashable:
    """The key of a value in a device's step: a feed's index, (stage, output), or a key."""
    if src.feed is not None:
        return src.feed
    if src.recv is not None:
        return src.recv
    return (src.stage, src.output)


@dataclass
class Stage:
    """One stage of a device as the executor runs it: the table's entry, its compiled
    graph, and the slots its inputs, outputs and sends read and write."""

    index: int
    table: PartitionStage
    graph: Graph | None
    inputs: list[Hashable] = field(default_factory=list)
    outputs: list[Hashable] = field(default_factory=list)
    sends: list[tuple[str, Hashable]] = field(default_factory=list)  # (key, slot)
    executable: Executable | None = None


@dataclass
class DevicePlan:
    """A device's stages, and where its fetches are (entry result index, slot)."""

    device: str
    stages: list[Stage]
    feeds: list[int]
    fetches: list[tuple[int, Hashable]]


def trace_kernels(tracer: Tracer, device: str, exe: Any) -> int:
    """One ``kernel`` span per kernel of ``exe``'s latest step, when the backend timed
    them (``kernel_times()``: an LLVM executable compiled with ``profile=True``); the
    number of spans."""
    times = getattr(exe, "kernel_times", None)
    if times is None:
        return 0
    spans = times()
    for name, start, end in spans:
        tracer.span(device, name, start, end, "kernel")
    return len(spans)


def _with_threads(backend: Backend, threads: int | None) -> Backend:
    """``backend`` limited to a device's share of the cores, for backends that split
    kernels across threads (``threads``) and were not given a count by the user: logical
    CPUs run concurrently on one machine and must not each take every core."""
    if threads is None or getattr(backend, "threads", 0) is not None:
        return backend
    limited = copy.copy(backend)
    setattr(limited, "threads", threads)  # backends with a thread count (not all have one)
    return limited


class PartitionedExecutable:
    """Compiles the stage graphs of ``entry``'s partition table with ``backend`` and runs a
    step across the devices, one thread each (see the module docstring)."""

    def __init__(self, module: Module, entry: str, backend: Backend) -> None:
        table = module.partitions.get(entry)
        if table is None:
            raise TfcError(f"entry '{entry}': the module was not lowered for several devices "
                           f"(it has no partition table for @{entry}; run the partition "
                           f"pass, as tfc compile --devices does)")
        table.check(module)
        self.entry = entry
        self.table = table
        self.compression: CompressReport | None = (
            compression_report(module, entry) if table.compressed else None)
        shares = threads_per_device([d.device for d in table.devices])
        self.plans: list[DevicePlan] = []
        for part in table.devices:
            device_backend = _with_threads(backend, shares.get(part.device))
            stages = []
            for i, st in enumerate(part.stages):
                graph = module.graphs[st.graph] if st.graph is not None else None
                stage = Stage(i, st, graph, [_slot(s) for s in st.inputs],
                              [(i, k) for k in range(len(graph.results) if graph else 0)],
                              [(s.key, _slot(s.value)) for s in st.sends])
                if graph is not None:
                    stage.executable = device_backend.compile(module, graph.name)
                stages.append(stage)
            fetches = [(i, _slot(src)) for i, (device, src) in enumerate(table.fetches)
                       if device == part.device]
            feeds = sorted({s for st in stages for s in [*st.inputs, *(x for _, x in st.sends)]
                            if isinstance(s, int)} | {s for _, s in fetches if isinstance(s, int)})
            self.plans.append(DevicePlan(part.device, stages, feeds, fetches))
        self.n_results = len(table.fetches)
        self.tracer: Tracer | None = None  # set to record a timeline (``tfc bench --trace``)
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.plans)),
                                        thread_name_prefix=f"tfc-{entry}")
        self._lock = threading.Lock()  # one step at a time
        self.last_rendezvous: Rendezvous | None = None

    def _run_device(self, plan: DevicePlan, feeds: Sequence[np.ndarray],
                    variables: Mapping[str, np.ndarray], step: int,
                    rendezvous: Rendezvous) -> tuple[dict[Hashable, np.ndarray],
                                                     dict[str, np.ndarray]]:
        env: dict[Hashable, np.ndarray] = {i: feeds[i] for i in plan.feeds}
        updates: dict[str, np.ndarray] = {}
        tracer, clock = self.tracer, time.perf_counter
        for st in plan.stages:
            for recv in st.table.recvs:
                t0 = clock()
                env[recv.key] = rendezvous.recv(recv.key)
                if tracer is not None:
                    tracer.recv(plan.device, recv.key, t0, clock())
            if st.executable is not None:
                assert st.graph is not None
                t0 = clock()
                result = st.executable([env[s] for s in st.inputs], variables, step)
                env.update(zip(st.outputs, result.fetches))
                if tracer is not None:
                    tracer.span(plan.device, st.graph.name, t0, clock(), "stage",
                                ops=len(st.graph.ops))
                    trace_kernels(tracer, plan.device, st.executable)
                    # memory: the stage's arena and every tensor the device holds now
                    tracer.memory(plan.device, int(getattr(st.executable, "arena_bytes", 0))
                                  + sum(a.nbytes for a in env.values()))
                updates.update(result.updates)
            for key, slot in st.sends:
                value = env[slot]
                rendezvous.send(key, value)
                if tracer is not None:
                    tracer.send(plan.device, key, value.nbytes, clock())
        return env, updates

    def __call__(self, feeds: Sequence[np.ndarray], variables: Mapping[str, np.ndarray],
                 step: int) -> StepResult:
        with self._lock:
            rendezvous = Rendezvous()
            self.last_rendezvous = rendezvous

            def run(plan: DevicePlan) -> Any:
                try:
                    return self._run_device(plan, feeds, variables, step, rendezvous)
                except BaseException as e:
                    rendezvous.abort(e)
                    raise

            futures = [self._pool.submit(run, plan) for plan in self.plans]
            results, errors = [], []
            for f in futures:
                try:
                    results.append(f.result())
                except BaseException as e:
                    errors.append(e)
            if errors:  # the root cause, not the recvs it aborted (those chain to it)
                raise next((e for e in errors if e.__cause__ is None), errors[0])
        fetches: list[Any] = [None] * self.n_results
        updates: dict[str, np.ndarray] = {}
        for plan, (env, upd) in zip(self.plans, results):
            updates.update(upd)
            for i, slot in plan.fetches:
                fetches[i] = env[slot]
        return StepResult(fetches, updates)

    def close(self) -> None:
        self._pool.shutdown(wait=False)
