"""The local multi-device executor: one step of a partitioned graph, one thread per device.

Each device's partition is cut into *stages* at its receives: a stage holds the ops
whose inputs are all available once the values received before it have arrived. A
stage's number is the number of device-crossing edges on the longest path into it, so
stage ``s`` on one device only waits for values that other devices produce in stages
before ``s`` — the stages of all devices can run concurrently without deadlock. Each
stage is an ordinary graph compiled by the backend (one native call per stage on the
LLVM backend, which releases the GIL while it runs); sends and receives happen between
stages through the step's ``Rendezvous``. With a ``tracer`` set, every stage is a span
of the device's track, and when the backend times its kernels (``LLVMBackend(
profile=True)``) each kernel is a span inside its stage's.

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
from typing import Any, Mapping, Sequence

import numpy as np

from tfc.backends.base import Backend, Executable, StepResult
from tfc.devices import threads_per_device
from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, Op, Value
from tfc.passes.compress import compress_transfers
from tfc.passes.partition import Partition, partition_module
from tfc.pipeline import lower_entry
from tfc.runtime.rendezvous import Rendezvous
from tfc.runtime.trace import Tracer

TRANSFER_KINDS = ("send", "recv")


@dataclass
class Stage:
    """Ops of one device that can run once the values received before them are in."""

    index: int
    graph: Graph                          # args: inputs from outside the stage
    inputs: list[Value]                   # partition value behind each arg
    outputs: list[Value]                  # partition value behind each result
    recvs: list[Op] = field(default_factory=list)  # received before the stage runs
    sends: list[Op] = field(default_factory=list)  # sent after it
    executable: Executable | None = None


@dataclass
class DevicePlan:
    """A device's partition cut into stages, and where its fetches come from."""

    device: str
    partition: Partition
    stages: list[Stage]


def stage_numbers(parts: Mapping[str, Partition]) -> dict[Op, int]:
    """Each op's stage: the most device crossings on a path into it (a recv is one more
    than its send)."""
    stage: dict[Op, int] = {}
    sends = {op.attrs["key"]: op for p in parts.values() for op in p.sends}
    changed = True
    while changed:  # a fixed point; as many rounds as the deepest chain of crossings
        changed = False
        for p in parts.values():
            for op in p.graph.ops:
                if op.kind == "recv":
                    s = stage.get(sends[op.attrs["key"]], 0) + 1
                else:
                    s = max((stage.get(v.op, 0) for v in op.inputs if v.op is not None),
                            default=0)
                if stage.get(op) != s:
                    stage[op] = s
                    changed = True
    return stage


def cut_stages(part: Partition, stage_of: Mapping[Op, int]) -> list[Stage]:
    """``part``'s ops as stage graphs (transfers become stage inputs and outputs)."""
    ops = part.graph.ops
    n = 1 + max((stage_of[op] for op in ops), default=0)
    stages = [Stage(s, Graph(f"{part.graph.name}.s{s}"), [], []) for s in range(n)]
    defined_in: dict[Value, int] = {}
    for op in ops:
        s = stage_of[op]
        if op.kind == "recv":
            stages[s].recvs.append(op)
        elif op.kind == "send":
            stages[s].sends.append(op)
        else:
            stages[s].graph.ops.append(op)
            for r in op.results:
                defined_in[r] = s
    # which values leave their stage: used by a later stage, a send, or a fetch
    leaving: set[Value] = set(part.graph.results)
    for op in ops:
        for v in op.inputs:
            if v in defined_in and (op.kind == "send" or stage_of[op] != defined_in[v]):
                leaving.add(v)
    for st in stages:
        mapping: dict[Value, Value] = {}
        body: list[Op] = []
        for op in st.graph.ops:
            inputs = []
            for v in op.inputs:
                if v not in mapping:
                    if defined_in.get(v) == st.index:
                        raise TfcError(f"internal: {v} used before its definition")
                    mapping[v] = st.graph.add_arg(v.type, v.name)
                    st.inputs.append(v)
                inputs.append(mapping[v])
            new = op.clone(inputs)
            body.append(new)
            mapping.update(zip(op.results, new.results))
        st.graph.ops = body
        out_vals = [r for op in ops if stage_of[op] == st.index and op.kind not in
                    TRANSFER_KINDS for r in op.results if r in leaving]
        st.outputs = out_vals
        st.graph.set_results([mapping[v] for v in out_vals])
    return stages


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
    limited.threads = threads
    return limited


class PartitionedExecutable:
    """Compiles ``entry``'s partitions' stages with ``backend`` and runs a step across the
    devices, one thread each (see the module docstring)."""

    def __init__(self, module: Module, entry: str, backend: Backend,
                 parts: Mapping[str, Partition] | None = None) -> None:
        self.entry = entry
        self.parts = dict(parts) if parts is not None else partition_module(module, entry)
        self.compression = compress_transfers(self.parts, module.variables) if module.fp16_transfers else None
        stage_of = stage_numbers(self.parts)
        shares = threads_per_device(list(self.parts))
        self.plans: list[DevicePlan] = []
        for device, part in self.parts.items():
            device_backend = _with_threads(backend, shares.get(device))
            stages = cut_stages(part, stage_of)
            for st in stages:
                if st.graph.ops:  # each stage graph lowered for the backend alone
                    sub = lower_entry(Module({st.graph.name: st.graph}, module.variables),
                                      st.graph.name, backend.name)
                    st.executable = device_backend.compile(sub, st.graph.name)
            self.plans.append(DevicePlan(device, part, stages))
        self.n_results = len(module.graphs[entry].results)
        self.tracer: Tracer | None = None  # set to record a timeline (``tfc bench --trace``)
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.plans)),
                                        thread_name_prefix=f"tfc-{entry}")
        self._lock = threading.Lock()  # one step at a time
        self.last_rendezvous: Rendezvous | None = None

    def _run_device(self, plan: DevicePlan, feeds: Sequence[np.ndarray],
                    variables: Mapping[str, np.ndarray], step: int,
                    rendezvous: Rendezvous) -> tuple[dict[Value, np.ndarray],
                                                     dict[str, np.ndarray]]:
        part = plan.partition
        env: dict[Value, np.ndarray] = {a: feeds[i]
                                        for a, i in zip(part.graph.args, part.arg_indices)}
        updates: dict[str, np.ndarray] = {}
        tracer, clock = self.tracer, time.perf_counter
        for st in plan.stages:
            for op in st.recvs:
                t0 = clock()
                env[op.result] = rendezvous.recv(op.attrs["key"])
                if tracer is not None:
                    tracer.recv(plan.device, op.attrs["key"], t0, clock())
            if st.executable is not None:
                t0 = clock()
                result = st.executable([env[v] for v in st.inputs], variables, step)
                env.update(zip(st.outputs, result.fetches))
                if tracer is not None:
                    tracer.span(plan.device, st.graph.name, t0, clock(), "stage",
                                ops=len(st.graph.ops))
                    trace_kernels(tracer, plan.device, st.executable)
                    # memory: the stage's arena and every tensor the device holds now
                    tracer.memory(plan.device, int(getattr(st.executable, "arena_bytes", 0))
                                  + sum(a.nbytes for a in env.values()))
                updates.update(result.updates)
            for op in st.sends:
                value = env[op.inputs[0]]
                rendezvous.send(op.attrs["key"], value)
                if tracer is not None:
                    tracer.send(plan.device, op.attrs["key"], value.nbytes, clock())
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
            for v, i in zip(plan.partition.graph.results, plan.partition.result_indices):
                fetches[i] = env[v]
        return StepResult(fetches, updates)

    def close(self) -> None:
        self._pool.shutdown(wait=False)
