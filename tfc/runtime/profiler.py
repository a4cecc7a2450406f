"""``tfc bench``: time an entry's steps, per device, and write the timeline.

A multi-device program's executor records every stage, send and recv in a ``Tracer``;
a single-device program is one native call per step, recorded as one span. On the LLVM
backend each kernel is a span too, inside its stage's (``bench_entry(kernels=...)``,
on by default when tracing). The report
gives the step time (median, min, max over the timed steps), and per device the time
spent computing, waiting in recvs, the bytes sent and the peak memory: the largest
arena a stage's memory plan needs (when the backend has one) plus the tensors the
device holds after each stage (feeds, received and computed tensors).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from tfc.runtime.executor import PartitionedExecutable, trace_kernels
from tfc.runtime.trace import DeviceStats, Tracer


@dataclass
class BenchReport:
    entry: str
    steps: int
    step_s: list[float]
    devices: dict[str, DeviceStats] = field(default_factory=dict)
    estimated_s: float | None = None  # the cost model's step (``_estimate``)

    @property
    def median_s(self) -> float:
        return float(np.median(self.step_s))

    def summary(self) -> str:
        line = (f"@{self.entry}: {self.steps} steps, median {self.median_s * 1e3:.3f} ms "
                f"[{min(self.step_s) * 1e3:.3f}-{max(self.step_s) * 1e3:.3f}] per step, "
                f"{1.0 / self.median_s:.1f} steps/s")
        if self.estimated_s is not None:
            line += (f"; predicted {self.estimated_s * 1e3:.3f} ms (measured / predicted "
                     f"{self.median_s / self.estimated_s:.2f})")
        return line


def _arena_bytes(exe: Any) -> int:
    return int(getattr(exe, "arena_bytes", 0) or 0)


def bench_entry(program: Any, entry: str, feeds: Mapping[str, Any], steps: int,
                warmup: int = 2, tracer: Tracer | None = None,
                kernels: bool | None = None) -> BenchReport:
    """Run ``warmup`` then ``steps`` steps of ``entry``, timing each (and tracing the
    timed ones into ``tracer`` when given).

    ``kernels`` (default: whether a ``tracer`` is given) also records one span per
    kernel inside each stage span, on a backend that can time its kernels (the LLVM
    backend's ``profiled()``: a copy of the program, with the same variables and step,
    compiled again with native timestamps around every kernel, a few tens of
    nanoseconds each; ``program`` itself is then left as it was)."""
    if kernels is None:
        kernels = tracer is not None
    profiled = getattr(program.backend, "profiled", None) if kernels else None
    if profiled is not None:  # a twin of the program whose backend times each kernel
        from tfc.runtime.program import Program
        program = Program(program.module, program.variables, backend=profiled(),
                          step=program.step,  # (a cluster program's twin: threads)
                          cluster="inprocess" if program.cluster else None)
    return _bench(program, entry, feeds, steps, warmup, tracer)


def _bench(program: Any, entry: str, feeds: Mapping[str, Any], steps: int, warmup: int,
           tracer: Tracer | None) -> BenchReport:
    for _ in range(warmup):
        program.run(entry, feeds)
    exe = program._executable(entry)
    partitioned = isinstance(exe, PartitionedExecutable)
    tracer = tracer or Tracer()
    if partitioned:
        exe.tracer = tracer
    device = _device_of(program.module, entry)
    times: list[float] = []
    try:
        for i in range(steps):
            tracer.step = program.step
            t0 = time.perf_counter()
            program.run(entry, feeds)
            t1 = time.perf_counter()
            times.append(t1 - t0)
            if not partitioned:
                tracer.span(device, f"{entry} (one native call)", t0, t1, "stage")
                trace_kernels(tracer, device, exe)
    finally:
        if partitioned:
            exe.tracer = None
    if not partitioned:
        tracer.memory(device, _arena_bytes(exe) + sum(np.asarray(f).nbytes
                                                      for f in feeds.values()))
    return BenchReport(entry, steps, times, dict(tracer.stats),
                       _estimate(program.module, entry, feeds))


def _device_of(module: Any, entry: str) -> str:
    """The device an entry that runs as one program runs on: the one its ops use (an
    entry of a multi-device module whose ops all sit on one device is not partitioned)."""
    from tfc.passes.partition import single_device
    default = (module.devices or ["/cpu:0"])[0]
    if len(module.devices) < 2:
        return default
    return single_device(module.graphs[entry], default) or default


def _estimate(module: Any, entry: str, feeds: Mapping[str, Any]) -> float | None:
    """The cost model's step of ``entry`` at the batch of ``feeds``, for every program (one
    device too): ``tfc.runtime.estimate.estimate_entry``, as profile-guided placement
    and ``tools/bench_placement.py`` estimate it. None when the module has no such graph."""
    from tfc.passes.cost_model import SYMBOL_SIZE
    from tfc.runtime.estimate import estimate_entry
    graph = module.graphs.get(entry)
    if graph is None:
        return None
    batch = next((np.shape(feeds[a.name])[0] for a in graph.args
                  if a.type.rank and isinstance(a.type.shape[0], str) and a.name in feeds),
                 SYMBOL_SIZE)
    return estimate_entry(module, entry, int(batch))
