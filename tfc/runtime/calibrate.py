"""``tfc calibrate``: measure what the cost model (``tfc.passes.cost_model``) charges.

Logical CPUs share one host, so the host is measured, at 1 thread and at all its cores
(what one device gets when it runs alone; what each of several gets is its share,
``tfc.devices.threads_per_device``), on the backend that will run the programs:

- GEMM: seconds of one matmul kernel against its flops, square products n = 32 ... 512
  and a batch-like 64x256 @ 256x256, each a chain of matmuls in one program (so the
  step's fixed cost is spread over several kernels and then taken off);
- streaming: seconds of one element-wise kernel against the bytes it moves, from
  L1-resident to DRAM sizes, as independent adds in one program (fusion keeps them
  separate kernels: none feeds another);
- the fixed cost of one kernel inside a native step (many tiny independent adds: the
  step's per-kernel increment, not a whole ``Program.run``);
- the fixed cost of a ``Program.run`` step (a one-op program on a scalar);
- the multi-device executor's fixed cost per step and per stage (chains of tiny ops
  alternating between two devices, of two lengths: each link one stage and one
  hand-off);
- the in-process hand-off (a send in one thread until the recv returns in another) and
  the work of a send and its recv on the threads that call them.

Every figure is the 10th percentile of ``repeats`` timed runs after a warm-up
(``Spread.typical``: runs a busy neighbour delayed do not count), and the spread of the
runs (min / median / max) is reported per measurement. More threads are never taken to
be slower than one (the backend could run the kernel on one): a curve at several
threads is capped by the one-thread curve. The whole calibration takes
a few seconds (each program is compiled once per thread count; the compile cache keeps
them). Links between hosts are not measured here (a cluster's task does that).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from tfc.backends.base import Backend, get_backend
from tfc.devices import Curve, DeviceProfile, DeviceRates, cpu_count, parse_device
from tfc.errors import TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Value
from tfc.ir.types import DType, TensorType
from tfc.runtime.executor import blas_limited, with_threads
from tfc.runtime.program import Program
from tfc.runtime.rendezvous import Rendezvous

GEMM_SIZES = (32, 64, 128, 256, 512)
GEMM_SKINNY = (64, 256)  # a batch of 64 rows through a 256-wide dense layer
STREAM_SIZES = (4096, 65536, 1 << 20, 4 << 20)  # f32 elements per operand
# Work per timed run: enough kernels that the step's fixed cost is a small part of it.
GEMM_RUN_FLOPS = 4e7
STREAM_RUN_BYTES = 4e6
MAX_KERNELS = 32
TINY_KERNELS = 64
EXECUTOR_HOPS = 16


@dataclass
class Spread:
    """Repeated timings of one measurement, in seconds."""

    samples: list[float]

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def max(self) -> float:
        return max(self.samples)

    @property
    def typical(self) -> float:
        """The 10th percentile: what a run takes when nothing else on the host gets in
        its way. On a busy host many runs wait for a core (a BLAS worker woken late
        costs a whole scheduler slice, ~16 ms here), and a median of such runs would
        describe the neighbours, not the machine."""
        return float(np.percentile(self.samples, 10))

    @property
    def relative(self) -> float:
        """(max - min) / median: 0 for perfectly repeatable runs."""
        return (self.max - self.min) / self.median if self.median > 0 else 0.0


def _times(s: Spread) -> str:
    """``min/median/max unit``, in ms or us."""
    scale, unit = (1e3, "ms") if s.median >= 1e-3 else (1e6, "us")
    return "/".join(f"{t * scale:.3g}" for t in (s.min, s.median, s.max)) + f" {unit}"


@dataclass
class Calibration:
    """A measured profile and the spread of the runs behind each of its figures
    (name -> runs of one whole program: ``gemm n=256 x4 @2t`` ...)."""

    profile: DeviceProfile
    spreads: dict[str, Spread] = field(default_factory=dict)

    def spread_summary(self) -> str:
        """Each measurement's min/median/max run and (max - min) / median."""
        return "\n".join(f"  {name}: {_times(s)} (spread {100 * s.relative:.0f}%)"
                         for name, s in self.spreads.items())


def _timings(f: Callable[[], object], repeats: int) -> Spread:
    f()  # warm up (compiles, faults pages in)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        samples.append(time.perf_counter() - t0)
    return Spread(samples)


def _graph(name: str, shapes: Sequence[Sequence[int]],
           body: Callable[[Builder, list[Value]], list[Value]]) -> Module:
    """A module whose one entry ``name`` feeds f32 args of ``shapes`` and fetches
    ``body(args)`` (built with the IR builder: the runtime sits below the Python API)."""
    graph = Graph(name)
    args = [graph.add_arg(TensorType(DType.f32, tuple(s)), f"x{i}") for i, s in enumerate(shapes)]
    graph.set_results(body(Builder(graph), args))
    module = Module()
    module.add_graph(graph)
    return module


def _feeds(shapes: Sequence[Sequence[int]], scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {f"x{i}": (rng.standard_normal(tuple(s)) * scale).astype(np.float32)
            for i, s in enumerate(shapes)}


class _Bench:
    """Times programs on one backend: each registered program is compiled and warmed up,
    then ``measure`` runs them in interleaved rounds (each round runs every program once
    untimed, to warm the caches as the kernels before it would in a step, then times it
    once, or ``runs`` times), so a program's runs are spread over the whole measurement
    and a burst of a neighbour's work spoils one run of each, not every run of one."""

    def __init__(self, backend: Backend, repeats: int, tag: str,
                 spreads: dict[str, Spread]) -> None:
        self.backend, self.repeats, self.tag, self.spreads = backend, repeats, tag, spreads
        self.jobs: dict[str, tuple[Callable[[], object], int]] = {}

    def add(self, label: str, module: Module, feeds: dict[str, np.ndarray],
            runs: int = 1) -> str:
        program = Program(module, backend=self.backend)
        (name,) = module.graphs

        def run() -> object:
            return program.run(name, feeds)

        run()  # compiles, faults pages in
        self.jobs[label] = (run, runs)
        return label

    def measure(self) -> dict[str, float]:
        """Each program's typical run (``Spread.typical``), by label."""
        samples: dict[str, list[float]] = {label: [] for label in self.jobs}
        clock = time.perf_counter
        for _ in range(self.repeats):
            for label, (run, runs) in self.jobs.items():
                run()  # caches warm again after the other programs, as in a step
                for _ in range(runs):
                    t0 = clock()
                    run()
                    samples[label].append(clock() - t0)
        out = {}
        for label, times in samples.items():
            spread = Spread(times)
            self.spreads[f"{label} @{self.tag}"] = spread
            out[label] = spread.typical
        self.jobs = {}
        return out


def _gemm_jobs(bench: _Bench, sizes: Sequence[int], skinny: tuple[int, int] | None
               ) -> dict[str, tuple[float, int]]:
    """Registers a chain of matmuls per shape; label -> (flops of one, kernels)."""
    jobs = {}
    shapes = [(n, n, n) for n in sizes] + ([(skinny[0], skinny[1], skinny[1])] if skinny
                                          else [])
    for m, k, n in shapes:
        flops = 2.0 * m * k * n
        count = max(1, min(MAX_KERNELS, math.ceil(GEMM_RUN_FLOPS / flops)))

        def chain(b: Builder, args: list[Value], count: int = count) -> list[Value]:
            x, w = args
            for _ in range(count):
                x = b("matmul", x, w)
            return [x]

        label = bench.add(f"gemm {m}x{k}@{k}x{n} x{count}", _graph("gemm", [(m, k), (k, n)], chain),
                          _feeds([(m, k), (k, n)], 1.0 / math.sqrt(k)))
        jobs[label] = (flops, count)
    return jobs


def _stream_jobs(bench: _Bench, sizes: Sequence[int]) -> dict[str, tuple[float, int]]:
    """Registers independent adds per size; label -> (bytes one moves, kernels). An add
    moves 12 bytes per element."""
    jobs = {}
    for n in sizes:
        moved = 12.0 * n
        count = max(1, min(MAX_KERNELS, math.ceil(STREAM_RUN_BYTES / moved)))
        label = bench.add(f"stream {n} x{count}", _adds(count, n), _feeds([(n,)] * (count + 1)))
        jobs[label] = (moved, count)
    return jobs


def _points(jobs: dict[str, tuple[float, int]], times: dict[str, float], step_s: float,
            kernel_s: float) -> Curve:
    """A curve of one kernel's seconds by size: each run less the step, per kernel."""
    points = {size: max(kernel_s, (times[label] - step_s) / count)
              for label, (size, count) in jobs.items()}
    return _curve(points)


def _adds(count: int, n: int) -> Module:
    """``count`` independent adds of ``n`` elements (``x_i + x_last``): separate kernels,
    for none feeds another."""
    return _graph("adds", [(n,)] * (count + 1),
                  lambda b, a: [b("add", a[i], a[-1]) for i in range(count)])


def _capped(curve: Curve, one_thread: Curve | None) -> Curve:
    """``curve`` no slower than ``one_thread`` at any of its sizes."""
    if one_thread is None:
        return curve
    return Curve(curve.sizes, [min(t, one_thread.at(x))
                               for x, t in zip(curve.sizes, curve.seconds)])


def _curve(points: dict[float, float]) -> Curve:
    sizes = sorted(points)
    return Curve(sizes, [points[s] for s in sizes])


def _step_job(bench: _Bench) -> str:
    """Fixed cost of one ``Program.run`` step: a one-op program on a scalar."""
    return bench.add("step", _graph("step", [()], lambda b, a: [b("add", a[0], a[0])]),
                     _feeds([()]), runs=10)


def _kernel_job(bench: _Bench) -> str:
    """Fixed cost of one kernel inside a native step: many tiny independent adds (less
    the step, per kernel)."""
    return bench.add(f"kernels x{TINY_KERNELS}", _adds(TINY_KERNELS, 4),
                     _feeds([(4,)] * (TINY_KERNELS + 1)))


def measure_executor(backend: Backend, repeats: int, spreads: dict[str, Spread],
                     kernel_s: float, handoff_s: float, transfer_s: float
                     ) -> tuple[float, float]:
    """The multi-device executor's fixed cost per step and its cost per stage: chains of
    ``h`` tiny adds alternating between two devices (``h`` stages, ``h - 1`` hand-offs)
    for two lengths; the line through their steps has the per-link cost as its slope
    (a stage, a kernel, a hand-off and a send/recv pair) and the step's fixed cost at
    its start."""
    devices = ["/cpu:0", "/cpu:1"]
    steps: dict[int, float] = {}
    for hops in (2, EXECUTOR_HOPS):
        def chain(b: Builder, args: list[Value], hops: int = hops) -> list[Value]:
            x = args[0]
            for i in range(hops):
                x = b("add", x, args[0])
                assert x.op is not None
                x.op.device = devices[i % 2]
            return [x]

        module = _graph("hops", [(4,)], chain)
        module.devices = devices
        program = Program(module, backend=backend)
        feeds = _feeds([(4,)])
        spread = _timings(lambda: program.run("hops", feeds), repeats * 4)
        spreads[f"executor {hops} stages"] = spread
        steps[hops] = spread.typical
    per_link = max(0.0, (steps[EXECUTOR_HOPS] - steps[2]) / (EXECUTOR_HOPS - 2))
    stage_s = max(1e-7, per_link - kernel_s - handoff_s - transfer_s)
    fixed = steps[2] - 2 * (stage_s + kernel_s) - (handoff_s + transfer_s)
    return max(1e-6, fixed), stage_s


def measure_transfer(rounds: int = 2000) -> float:
    """The work of one send and its recv through rendezvous, in one thread (no waiting):
    what each transfer costs the two devices' threads besides the hand-off latency."""
    value = np.zeros(1, np.float32)
    samples = []
    for _ in range(3):
        rv = Rendezvous(timeout_s=10)
        t0 = time.perf_counter()
        for i in range(rounds):
            rv.send(str(i), value)
            rv.recv(str(i))
        samples.append((time.perf_counter() - t0) / rounds)
    return min(samples)


def measure_handoff(rounds: int = 200) -> float:
    """Seconds from a send in one thread to the recv returning in another: half the round
    trip (``Spread.typical`` of the rounds) of a ping-pong between two threads through
    rendezvous (a reference moves; no bytes are copied)."""
    value = np.zeros(1, np.float32)
    rv = Rendezvous(timeout_s=10)

    def echo() -> None:
        for i in range(rounds + 1):
            rv.send(f"pong{i}", rv.recv(f"ping{i}"))

    t = threading.Thread(target=echo, name="tfc-calibrate echo")
    t.start()
    times: list[float] = []
    try:
        for i in range(rounds + 1):
            t0 = time.perf_counter()
            rv.send(f"ping{i}", value)
            rv.recv(f"pong{i}")
            if i:  # the first round starts the thread
                times.append((time.perf_counter() - t0) / 2)
    finally:
        t.join()
    return Spread(times).typical


def calibrate(devices: Sequence[str] = ("/cpu:0",), backend: str | None = None,
              repeats: int = 9, progress: Callable[[str], None] | None = None, *,
              gemm_sizes: Sequence[int] = GEMM_SIZES,
              gemm_skinny: tuple[int, int] | None = GEMM_SKINNY,
              stream_sizes: Sequence[int] = STREAM_SIZES,
              cores: int | None = None) -> Calibration:
    """A profile of this host (module docstring) for its local CPU ``devices``, which
    share its ``cores`` (default: this process's)."""
    for d in devices:
        spec = parse_device(d)
        if spec.kind != "cpu" or spec.job is not None:
            raise TfcError(f"tfc calibrate measures local CPU devices; {d} is not one")
    if repeats < 1:
        raise TfcError(f"tfc calibrate needs at least one run per measurement, not {repeats}")
    cores = max(1, cores if cores is not None else cpu_count())
    base = get_backend(backend)
    spreads: dict[str, Spread] = {}
    gemm: dict[int, Curve] = {}
    stream: dict[int, Curve] = {}
    thread_counts = sorted({1, cores // 2 if cores >= 4 else 1, cores})
    step_s = kernel_s = 0.0
    for threads in thread_counts:
        if progress:
            progress(f"measuring kernels at {threads} thread{'s' if threads > 1 else ''}")
        bench = _Bench(with_threads(base, threads, override=True), repeats, f"{threads}t", spreads)
        with blas_limited(base, threads):
            fixed = (_step_job(bench), _kernel_job(bench)) if threads == 1 else None
            gemm_jobs = _gemm_jobs(bench, gemm_sizes, gemm_skinny)
            stream_jobs = _stream_jobs(bench, stream_sizes)
            times = bench.measure()
        if fixed is not None:
            step_s = times[fixed[0]]
            kernel_s = max(1e-9, (times[fixed[1]] - step_s) / TINY_KERNELS)
        gemm[threads] = _capped(_points(gemm_jobs, times, step_s, kernel_s), gemm.get(1))
        stream[threads] = _capped(_points(stream_jobs, times, step_s, kernel_s),
                                  stream.get(1))
    if progress:
        progress("measuring hand-offs and executor stages")
    handoff_s = measure_handoff()
    transfer_s = measure_transfer()
    executor_step_s, stage_s = measure_executor(with_threads(base, max(1, cores // 2), override=True),
                                                repeats, spreads, kernel_s, handoff_s,
                                                transfer_s)
    profile = DeviceProfile(
        source=f"tfc calibrate {time.strftime('%Y-%m-%dT%H:%M:%S')} ({base.name})",
        cores=cores, cpu=DeviceRates(gemm, stream, kernel_s), step_s=step_s,
        executor_step_s=executor_step_s, stage_s=stage_s, handoff_s=handoff_s,
        transfer_s=transfer_s)
    return Calibration(profile, spreads)
