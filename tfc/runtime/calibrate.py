"""``tfc calibrate``: measure what the cost model (``tfc.passes.cost_model``) charges.

Logical CPUs share one host, so the host is measured, at 1 thread and at all its cores
(what one device gets when it runs alone; what each of several gets is its share,
``tfc.devices.threads_per_device``), on the backend that will run the programs:

- GEMM: seconds of one matmul kernel against its flops (in whole output tiles,
  ``tfc.passes.cost_model.tiled_gemm_flops``), square products n = 4 ... 512 and a
  batch-like 64x256 @ 256x256, each a chain of matmuls in one program (so the step's
  fixed cost is spread over several kernels and then taken off); the same for f64
  square products n = 4 ... 256 (``gemm_f64``: ~1.4-2x the f32 seconds per flop);
- linalg: seconds of one f64 ``matrix_inverse`` (LAPACK) against its registry flops,
  n = 4 ... 64, as a chain of inverses;
- short rows: seconds of a softmax over ``SHORT_ROW_WIDTH`` classes (a row-order fused
  kernel whose rows are too short to vectorize) against its fused flops;
- streaming: seconds of one element-wise kernel against the bytes it moves, from
  L1-resident to DRAM sizes, as independent adds in one program (fusion keeps them
  separate kernels: none feeds another);
- non-GEMM compute: seconds of one fused kernel of exps (an L2-resident operand, so
  its compute and not its bytes sets the time) against its flops as the op registry
  counts them (``vector``), and of an argmax, a loop the backend does not vectorize,
  against its comparisons (``serial``);
- the fixed cost of one kernel inside a native step: many tiny independent adds against
  the same adds chained into one fused kernel, with the same feeds and fetches (so the
  difference is the kernels' own cost, not the feeds' checks, which a comparison with a
  one-op step folded in: 0.38 us a kernel instead of 0.00-0.07 here);
- the fixed cost of a ``Program.run`` step and what each feed, each fetch, each
  variable the step uses and each variable it writes add to it: one fused kernel of
  tiny adds with one feed and one fetch, with ``IO_COUNT`` feeds, ``IO_COUNT`` fetches,
  ``IO_COUNT`` variables read, ``IO_COUNT`` variables updated (the step's cost at none
  of them is ``step_s``; the curves' and the vector rate's points are their runs less
  the step's cost with their feeds and fetches);
- the multi-device executor's fixed cost per step and per stage (chains of tiny ops
  alternating between two devices, of two lengths: each link one stage and one
  hand-off);
- the in-process hand-off (a send in one thread until the recv returns in another),
  from the executor's trace of those chains, in the same runs (a ping-pong of two idle
  threads apart from them read less than the executor pays, by an amount that moved
  with the load, and the stage, what a link leaves after it, moved 0.1-12 us), and again
  over twice as many devices as cores (``crowded_handoff_s``: a receiver must often be
  woken); and the work of a send and its recv on the threads that call them.

The kernels are measured in ``PASSES`` whole passes over every thread count (each
program compiled once), each point of a curve the median of the passes' (calibrations a
minute apart had differed by up to 1.5x); a thread count whose passes read a big GEMM
no faster than one thread (a neighbour held a core: ``threads_helped``) is measured
again, at most ``MAX_EXTRA_PASSES`` times, and its passes where the threads helped count.
The hand-off, transfer and executor costs are each the median of as many measurements.
Every kernel figure is the 10th percentile of ``repeats`` timed runs after a warm-up
(``Spread.typical``: runs a busy neighbour delayed do not count), every fixed cost of a
step the median run (``measure_fixed``: the model predicts the median step), and the
spread of the runs (min / median / max) is reported per measurement. The fixed costs, a few
microseconds each and the ones a neighbour's burst moves most, are each the median of
``FIXED_ROUNDS`` such measurements (each of 10 runs a round). More threads are never taken to
be slower than one (the backend could run the kernel on one): a curve at several
threads is capped by the one-thread curve. The whole calibration takes
5-6 seconds on a quiet 2-core host (each program is compiled once per thread count; the
compile cache keeps them). Links between hosts are not measured here (a cluster's task does that).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from tfc.backends.base import Backend, get_backend
from tfc.devices import Curve, DeviceProfile, DeviceRates, cpu_count, parse_device
from tfc.errors import TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Value, VariableDecl
from tfc.ir.registry import lookup
from tfc.ir.types import DType, TensorType
from tfc.passes.cost_model import CostModel, tiled_gemm_flops
from tfc.passes.fusion import fuse_graph
from tfc.runtime.executor import blas_limited, with_threads
from tfc.runtime.program import Program
from tfc.runtime.rendezvous import Rendezvous

GEMM_SIZES = (4, 8, 16, 32, 64, 128, 256, 512)
GEMM_F64_SIZES = (4, 8, 16, 32, 64, 128, 256)  # f64 products (ridge's are 8 wide)
LINALG_SIZES = (4, 8, 16, 32, 64)  # n of the n x n f64 inverses of the linalg curve
SHORT_ROWS = (64, 1024)  # rows of the short-row kernel: a softmax over SHORT_ROW_WIDTH
SHORT_ROW_WIDTH = 10  # classes (digits), well under tfc.devices.SHORT_ROW
PASSES = 3  # whole measurements of the kernels, of which each point is the median
# A thread count's pass whose GEMM at the largest size is not this much faster than one
# thread's was measured with a core taken by a neighbour: it is measured again.
THREADED_GEMM_BOUND = 0.9
MAX_EXTRA_PASSES = 3
GEMM_SKINNY = (64, 256)  # a batch of 64 rows through a 256-wide dense layer
STREAM_SIZES = (4096, 65536, 1 << 20, 4 << 20)  # f32 elements per operand
# Work per timed run: enough kernels that the step's fixed cost is a small part of it.
GEMM_RUN_FLOPS = 4e7
STREAM_RUN_BYTES = 4e6
MAX_KERNELS = 32
TINY_KERNELS = 64
IO_COUNT = 16  # feeds (fetches) of the step that measures what a feed (fetch) costs
FIXED_ROUNDS = 3  # separate measurements of the fixed costs, of which the median counts
VECTOR_ELEMENTS = 65536  # f32 elements of the vector-rate kernel (256 KB an operand)
VECTOR_EXPS = 4  # exp(y * x) steps in that kernel
SERIAL_SHAPE = (128, 64)  # the serial-rate kernel: an argmax along the rows of this
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
           body: Callable[[Builder, list[Value]], list[Value]],
           dtype: DType = DType.f32) -> Module:
    """A module whose one entry ``name`` feeds ``dtype`` args of ``shapes`` and fetches
    ``body(args)`` (built with the IR builder: the runtime sits below the Python API)."""
    graph = Graph(name)
    args = [graph.add_arg(TensorType(dtype, tuple(s)), f"x{i}") for i, s in enumerate(shapes)]
    graph.set_results(body(Builder(graph), args))
    module = Module()
    module.add_graph(graph)
    return module


def _feeds(shapes: Sequence[Sequence[int]], scale: float = 1.0,
           dtype: DType = DType.f32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {f"x{i}": (rng.standard_normal(tuple(s)) * scale).astype(dtype.np)
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
        values = {name: np.zeros(tuple(int(d) for d in decl.type.shape), decl.type.dtype.np)
                  for name, decl in module.variables.items()}  # static shapes only here
        program = Program(module, values or None, backend=self.backend)
        (name,) = module.graphs

        def run() -> object:
            return program.run(name, feeds)

        run()  # compiles, faults pages in
        self.jobs[label] = (run, runs)
        return label

    def measure(self, keep: bool = False, median: bool = False) -> dict[str, float]:
        """Each program's typical run (``Spread.typical``; its median run with
        ``median``), by label; the programs are dropped after unless ``keep`` (to
        measure them again)."""
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
            out[label] = spread.median if median else spread.typical
        if not keep:
            self.jobs = {}
        return out


@dataclass
class FixedCosts:
    """A native step's fixed costs: ``step_s`` with no feeds, fetches or variables,
    ``feed_s`` and ``fetch_s`` each feed's and each fetch's, ``variable_s`` each variable's
    the step uses, ``update_s`` what each it writes adds to that, ``kernel_s`` each
    kernel's."""

    step_s: float
    feed_s: float
    fetch_s: float
    variable_s: float
    update_s: float
    kernel_s: float

    def step(self, feeds: int, fetches: int) -> float:
        """The fixed cost of a step with ``feeds`` feeds and ``fetches`` fetches."""
        return self.step_s + self.feed_s * feeds + self.fetch_s * fetches


# A job: label -> (size of one kernel, kernels, feeds, fetches) of the program it times.
Jobs = dict[str, tuple[float, int, int, int]]


def _gemm_jobs(bench: _Bench, sizes: Sequence[int], skinny: tuple[int, int] | None,
               dtype: DType = DType.f32) -> Jobs:
    """Registers a chain of ``dtype`` matmuls per shape; label -> (flops of one as the
    cost model counts them, ``tiled_gemm_flops``; kernels, feeds, fetches)."""
    jobs = {}
    shapes = [(n, n, n) for n in sizes] + ([(skinny[0], skinny[1], skinny[1])] if skinny
                                          else [])
    for m, k, n in shapes:
        flops = tiled_gemm_flops(m, k, n)
        count = max(1, min(MAX_KERNELS, math.ceil(GEMM_RUN_FLOPS / flops)))

        def chain(b: Builder, args: list[Value], count: int = count) -> list[Value]:
            x, w = args
            for _ in range(count):
                x = b("matmul", x, w)
            return [x]

        kind = "gemm" if dtype == DType.f32 else f"gemm {dtype.name}"
        label = bench.add(f"{kind} {m}x{k}@{k}x{n} x{count}",
                          _graph("gemm", [(m, k), (k, n)], chain, dtype),
                          _feeds([(m, k), (k, n)], 1.0 / math.sqrt(k), dtype))
        jobs[label] = (flops, count, 2, 1)
    return jobs


def _linalg_jobs(bench: _Bench, sizes: Sequence[int]) -> Jobs:
    """Registers a chain of f64 ``matrix_inverse`` per n (inverting the inverse again:
    a well-conditioned matrix, near the identity, stays one); label -> (registry flops
    of one, kernels, feeds, fetches)."""
    jobs = {}
    for n in sizes:
        count = max(1, min(MAX_KERNELS, math.ceil(GEMM_RUN_FLOPS / 20 / (2.0 * n ** 3))))

        def chain(b: Builder, args: list[Value], count: int = count) -> list[Value]:
            x = args[0]
            for _ in range(count):
                x = b("matrix_inverse", x)
            return [x]

        module = _graph("linalg", [(n, n)], chain, DType.f64)
        feeds = _feeds([(n, n)], 0.1 / math.sqrt(n), DType.f64)
        feeds["x0"] += np.eye(n)
        label = bench.add(f"linalg inverse f64 {n}x{n} x{count}", module, feeds)
        jobs[label] = (_flops(module) / count, count, 1, 1)
    return jobs


def _short_row_jobs(bench: _Bench, rows: Sequence[int]) -> Jobs:
    """Registers a softmax over ``SHORT_ROW_WIDTH`` classes per row count: one row-order
    fusion over short rows; label -> (the fused kernel's flops as the cost model counts
    them, 1 kernel, 1 feed, 1 fetch)."""
    jobs = {}
    for r in rows:
        shape = (r, SHORT_ROW_WIDTH)

        def softmax(shape: tuple[int, int] = shape) -> Module:
            return _graph("short_row", [shape], lambda b, a: [b("softmax", a[0], axis=1)])

        label = bench.add(f"short rows softmax {r}x{SHORT_ROW_WIDTH}", softmax(),
                          _feeds([shape]))
        jobs[label] = (_fused_flops(softmax()), 1, 1, 1)
    return jobs


def _stream_jobs(bench: _Bench, sizes: Sequence[int]) -> Jobs:
    """Registers independent adds per size; label -> (bytes one moves, kernels, feeds,
    fetches). An add moves 12 bytes per element."""
    jobs = {}
    for n in sizes:
        moved = 12.0 * n
        count = max(1, min(MAX_KERNELS, math.ceil(STREAM_RUN_BYTES / moved)))
        label = bench.add(f"stream {n} x{count}", _adds(count, n), _feeds([(n,)] * (count + 1)))
        jobs[label] = (moved, count, count + 1, count)
    return jobs


def _vector_job(bench: _Bench, n: int) -> Jobs:
    """Registers one fused kernel of ``VECTOR_EXPS`` steps ``y = exp(y * x)`` on ``n``
    elements (``x`` small, so ``y`` stays near 1); label -> (its registry flops, 1 kernel,
    2 feeds, 1 fetch)."""
    def chain(b: Builder, args: list[Value]) -> list[Value]:
        y, x = args
        for _ in range(VECTOR_EXPS):
            y = b("exp", b("mul", y, x))
        return [y]

    module = _graph("vector", [(n,), (n,)], chain)
    label = bench.add(f"vector {n} x{VECTOR_EXPS} exp", module, _feeds([(n,), (n,)], 0.1))
    return {label: (_flops(module), 1, 2, 1)}


def _serial_job(bench: _Bench, shape: tuple[int, int]) -> Jobs:
    """Registers one argmax along the rows of ``shape``; label -> (its registry flops,
    1 kernel, 1 feed, 1 fetch)."""
    module = _graph("serial", [shape], lambda b, a: [b("argmax", a[0], axis=1)])
    label = bench.add(f"serial argmax {shape[0]}x{shape[1]}", module, _feeds([shape]))
    return {label: (_flops(module), 1, 1, 1)}


def _fused_flops(module: Module) -> float:
    """The flops of ``module``'s one graph as the cost model counts them once fused (a
    ``fusion`` counts those of its region's ops); fuses ``module`` in place."""
    (graph,) = module.graphs.values()
    fuse_graph(graph)
    return CostModel(DeviceProfile()).flops(graph.ops)


def _flops(module: Module) -> float:
    """The registry's flops of the ops of ``module``'s one graph."""
    (graph,) = module.graphs.values()
    return float(sum(lookup(op.kind).cost([v.type for v in op.inputs],
                                          [r.type for r in op.results], op.attrs).flops
                     for op in graph.ops))


def _points(jobs: Jobs, times: dict[str, float], fixed: FixedCosts) -> Curve:
    """A curve of one kernel's seconds by size: each run less its step's fixed cost (with
    its feeds and fetches), per kernel."""
    points = {size: max(fixed.kernel_s, (times[label] - fixed.step(feeds, fetches)) / count)
              for label, (size, count, feeds, fetches) in jobs.items()}
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


def _chained_adds(count: int, n: int) -> Module:
    """``count`` adds of ``n`` elements, each on the one before (``x_i + y_{i-1}``), every
    one fetched: what ``_adds`` feeds and fetches, in one fused kernel."""
    def chain(b: Builder, a: list[Value]) -> list[Value]:
        out, y = [], a[-1]
        for i in range(count):
            y = b("add", a[i], y)
            out.append(y)
        return out
    return _graph("chain", [(n,)] * (count + 1), chain)


def _summed(feeds: int, n: int) -> Module:
    """One fused kernel adding ``feeds`` feeds of ``n`` elements: one fetch."""
    def total(b: Builder, a: list[Value]) -> list[Value]:
        y = b("add", a[0], a[0])
        for x in a[1:]:
            y = b("add", y, x)
        return [y]
    return _graph("summed", [(n,)] * feeds, total)


def _with_variables(count: int, n: int, update: bool) -> Module:
    """One fused kernel on one feed of ``n`` elements and ``count`` variables of its
    shape: each read into the sum (``update`` False), or each decremented by it."""
    t = TensorType(DType.f32, (n,))
    module = _graph("variables", [(n,)], lambda b, a: [b("add", a[0], a[0])])
    graph = module.graphs["variables"]
    b = Builder(graph)
    y = graph.results[0]
    for i in range(count):
        module.variables[f"v{i}"] = VariableDecl(f"v{i}", t)
        if update:
            b.op("var.assign_sub", graph.results[0], var=f"v{i}")
        else:
            y = b("add", y, b("var.read", var=f"v{i}", result_types=[t]))
    graph.set_results([y])
    return module


def _fixed_jobs(bench: _Bench) -> dict[str, str]:
    """The programs the fixed costs are measured with (``fixed_costs``), by role; each
    runs 10 times a round (they take microseconds)."""
    tiny = (4,)
    return {
        "step": bench.add("step 1 feed 1 fetch", _summed(1, 4), _feeds([tiny]), runs=10),
        "feeds": bench.add(f"step {IO_COUNT} feeds", _summed(IO_COUNT, 4),
                           _feeds([tiny] * IO_COUNT), runs=10),
        "fetches": bench.add(f"step {IO_COUNT} fetches", _fetched(IO_COUNT, 4),
                             _feeds([tiny]), runs=10),
        "variables": bench.add(f"step {IO_COUNT} variables", _with_variables(IO_COUNT, 4, False),
                               _feeds([tiny]), runs=10),
        "updates": bench.add(f"step {IO_COUNT} updates", _with_variables(IO_COUNT, 4, True),
                             _feeds([tiny]), runs=10),
        "kernels": bench.add(f"kernels x{TINY_KERNELS}", _adds(TINY_KERNELS, 4),
                             _feeds([tiny] * (TINY_KERNELS + 1)), runs=10),
        "fused": bench.add(f"kernels x{TINY_KERNELS} fused", _chained_adds(TINY_KERNELS, 4),
                           _feeds([tiny] * (TINY_KERNELS + 1)), runs=10),
    }


def _fetched(fetches: int, n: int) -> Module:
    """One fused kernel of ``fetches`` chained adds on one feed, every one fetched."""
    def chain(b: Builder, a: list[Value]) -> list[Value]:
        out, y = [], a[0]
        for _ in range(fetches):
            y = b("add", y, a[0])
            out.append(y)
        return out
    return _graph("fetched", [(n,)], chain)


def fixed_costs(times: Mapping[str, float]) -> FixedCosts:
    """The fixed costs from the typical runs of ``_fixed_jobs``' programs (by role): each
    feed's and each fetch's cost the slope from one to ``IO_COUNT`` of them, the step's
    the one-feed one-fetch step less one of each, a kernel's the independent adds less
    their fused twin (same feeds, same fetches), per kernel but one; each variable's the
    step with ``IO_COUNT`` variables read less the step without, per variable, and each
    update's the step with that many updated less that many read, per variable."""
    feed_s = max(0.0, (times["feeds"] - times["step"]) / (IO_COUNT - 1))
    fetch_s = max(0.0, (times["fetches"] - times["step"]) / (IO_COUNT - 1))
    step_s = max(1e-7, times["step"] - feed_s - fetch_s)
    variable_s = max(0.0, (times["variables"] - times["step"]) / IO_COUNT)
    update_s = max(0.0, (times["updates"] - times["variables"]) / IO_COUNT)
    kernel_s = max(1e-9, (times["kernels"] - times["fused"]) / (TINY_KERNELS - 1))
    return FixedCosts(step_s, feed_s, fetch_s, variable_s, update_s, kernel_s)


def measure_fixed(backend: Backend, repeats: int, spreads: dict[str, Spread],
                  rounds: int = FIXED_ROUNDS) -> FixedCosts:
    """``fixed_costs`` measured ``rounds`` times, each figure the median of the rounds
    (a burst of a neighbour's work that spoils one round does not move it). Within a
    round each program's figure is its median run, not its 10th percentile: the model
    predicts the median step (what ``tfc bench`` reports), and a step of a few
    microseconds, nearly all fixed cost, has a median 4% above its 10th percentile on a
    quiet host (ridge_gd 5.41 against 5.18 us; the one-feed step 2.44 against 2.34), which
    had left the smallest models predicted 0.75-0.9 of their measured step."""
    out = []
    bench = _Bench(backend, repeats, "1t", spreads)
    roles = _fixed_jobs(bench)  # compiled once, measured in each round
    for r in range(rounds):
        bench.tag = f"1t #{r + 1}"
        times = bench.measure(keep=r + 1 < rounds, median=True)
        out.append(fixed_costs({role: times[label] for role, label in roles.items()}))
    return FixedCosts(*(float(np.median([getattr(f, name) for f in out]))
                        for name in ("step_s", "feed_s", "fetch_s", "variable_s", "update_s",
                                     "kernel_s")))


def measure_executor(backend: Backend, repeats: int, spreads: dict[str, Spread],
                     fixed: FixedCosts, transfer_s: float, cores: int | None = None
                     ) -> tuple[float, float, float, float | None]:
    """The multi-device executor's fixed cost per step, its cost per stage, its hand-off
    and its hand-off with more device threads than ``cores`` (None without ``cores``):
    chains of ``h`` tiny adds alternating between two devices (``h`` stages, ``h - 1``
    hand-offs) for two lengths; the line through their steps has the per-link cost as
    its slope (a stage, a kernel, a hand-off, a send/recv pair, and the stage graph's two
    feeds and its fetch, charged as a one-device step's: ``CostModel.boundary_seconds``)
    and the step's fixed cost at its start (the first stage has one feed).

    The hand-off is measured inside those chains (``executor_handoffs``: from a send to
    the recv that waited for it returning, in the executor's own trace), interleaved
    with the timed runs, not by a ping-pong of two idle threads apart from them: a
    stage's cost is what is left of a link after the hand-off, and a hand-off measured
    at another moment moved with the host's load (calibrations a minute apart read the
    stage at 0.1-12 us). With more device threads than cores (a chain over ``2 x
    cores`` devices) a receiver is often descheduled and must be woken: its hand-off
    is measured apart (on the 2-core host 13-26 us, against 7-8 us for two devices)."""
    steps: dict[int, float] = {}
    programs = {hops: _hops_program(hops, 2, backend) for hops in (2, EXECUTOR_HOPS)}
    feeds = _feeds([(4,)])
    handoffs: list[float] = []
    for hops, program in programs.items():
        spread = _timings(lambda: program.run("hops", feeds), repeats * 4)
        spreads[f"executor {hops} stages"] = spread
        steps[hops] = spread.typical
        handoffs += executor_handoffs(program, "hops", feeds, repeats * 2)
    # a traced hand-off runs from the send call to the recv call's return: it holds the
    # send's and the recv's work (``transfer_s``), which the model charges apart
    link_s = float(np.median(handoffs)) if handoffs else measure_handoff() + transfer_s
    handoff_s = max(1e-7, link_s - transfer_s)
    crowded_s = None
    if cores is not None:
        crowded = _hops_program(EXECUTOR_HOPS, 2 * cores, backend)
        waits = executor_handoffs(crowded, "hops", feeds, repeats * 2)
        crowded_s = max(handoff_s, float(np.median(waits)) - transfer_s) if waits else None
    kernel_s = fixed.kernel_s
    first_io = fixed.feed_s + fixed.fetch_s  # add(a, a): the feed, the value sent
    link_io = 2 * fixed.feed_s + fixed.fetch_s  # add(x, a): x received, the feed; one out
    per_link = max(0.0, (steps[EXECUTOR_HOPS] - steps[2]) / (EXECUTOR_HOPS - 2))
    stage_s = max(1e-7, per_link - kernel_s - link_io - link_s)
    step_s = steps[2] - 2 * (stage_s + kernel_s) - first_io - link_io - link_s
    return max(1e-6, step_s), stage_s, handoff_s, crowded_s


def _hops_program(hops: int, devices: int, backend: Backend) -> Program:
    """A chain of ``hops`` tiny adds, the i-th on device ``i % devices``."""
    names = [f"/cpu:{i}" for i in range(devices)]

    def chain(b: Builder, args: list[Value]) -> list[Value]:
        x = args[0]
        for i in range(hops):
            x = b("add", x, args[0])
            assert x.op is not None
            x.op.device = names[i % devices]
        return [x]

    module = _graph("hops", [(4,)], chain)
    module.devices = names
    return Program(module, backend=backend)


def executor_handoffs(program: Program, entry: str, feeds: Mapping[str, np.ndarray],
                      runs: int) -> list[float]:
    """The hand-offs of ``runs`` steps of ``entry`` on the multi-device executor, from
    its trace (``tfc.runtime.pgo.HandoffTracer``: a send until the recv that waited for
    it returns); none for a program the executor does not run."""
    from tfc.runtime.executor import PartitionedExecutable
    from tfc.runtime.pgo import HandoffTracer
    program.run(entry, feeds)  # compiles
    exe = program._executable(entry)
    if not isinstance(exe, PartitionedExecutable):
        return []
    tracer = HandoffTracer()
    exe.tracer = tracer
    out: list[float] = []
    try:
        for _ in range(runs):
            program.run(entry, feeds)
            out += tracer.handoffs()
            tracer.clear()
    finally:
        exe.tracer = None
    return out


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
    rendezvous (a reference moves; no bytes are copied). ``measure_executor`` takes the
    hand-off from the executor's own steps, and this only where their trace saw no
    receiver wait."""
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


def median_curve(curves: Sequence[Curve]) -> Curve:
    """Point by point, the median of ``curves`` measured at the same sizes (the passes of
    one measurement): a pass a neighbour's burst slowed moves no point."""
    sizes = curves[0].sizes
    if any(c.sizes != sizes for c in curves):
        raise ValueError("the passes of a curve must be measured at the same sizes")
    return Curve(list(sizes), [float(np.median([c.seconds[i] for c in curves]))
                               for i in range(len(sizes))])


def threads_helped(one_thread: Curve, threaded: Curve) -> bool:
    """Whether ``threaded`` (a GEMM curve at several threads) is faster than
    ``one_thread`` at the largest size both measured, by ``THREADED_GEMM_BOUND``: a big
    GEMM splits over the threads; a pass that read it at one thread's rate (or slower)
    was measured while a neighbour held a core."""
    size = min(one_thread.sizes[-1], threaded.sizes[-1])
    return threaded.at(size) < one_thread.at(size) * THREADED_GEMM_BOUND


@dataclass
class _ThreadJobs:
    """The kernel programs of one thread count, compiled once and measured in each pass,
    with the curves each pass gave (kind -> one curve per pass)."""

    threads: int
    bench: _Bench
    jobs: dict[str, Jobs]
    passes: dict[str, list[Curve]] = field(default_factory=dict)

    def measure(self, base: Backend, fixed: FixedCosts, tag: str) -> dict[str, Curve]:
        """One pass: every program's typical run, as each kind's curve."""
        self.bench.tag = tag
        with blas_limited(base, self.threads):
            times = self.bench.measure(keep=True)
        curves = {kind: _points(jobs, times, fixed) for kind, jobs in self.jobs.items()}
        for kind, curve in curves.items():
            self.passes.setdefault(kind, []).append(curve)
        return curves


def _executor_costs(backend: Backend, repeats: int, spreads: dict[str, Spread],
                    fixed: FixedCosts, passes: int, cores: int
                    ) -> tuple[float, float, float, float, float | None]:
    """The hand-off, a send and recv's work, the executor's step and stage costs and
    the hand-off with more device threads than ``cores``, each the median of
    ``passes`` measurements (two calibrations a minute apart had read the executor's
    step at 1 and 23 us, its stage at 15 and 3)."""
    runs = []
    crowded: list[float] = []
    for p in range(passes):
        transfer_s = measure_transfer()
        tagged: dict[str, Spread] = {}
        step_s, stage_s, handoff_s, crowded_s = measure_executor(
            backend, repeats, tagged, fixed, transfer_s, cores)
        spreads.update({f"{name} #{p + 1}": spread for name, spread in tagged.items()})
        runs.append((handoff_s, transfer_s, step_s, stage_s))
        if crowded_s is not None:
            crowded.append(crowded_s)
    handoff, transfer, step, stage = (float(np.median(column)) for column in zip(*runs))
    return handoff, transfer, step, stage, (float(np.median(crowded)) if crowded else None)


def calibrate(devices: Sequence[str] = ("/cpu:0",), backend: str | None = None,
              repeats: int = 9, progress: Callable[[str], None] | None = None, *,
              gemm_sizes: Sequence[int] = GEMM_SIZES,
              gemm_skinny: tuple[int, int] | None = GEMM_SKINNY,
              gemm_f64_sizes: Sequence[int] = GEMM_F64_SIZES,
              linalg_sizes: Sequence[int] = LINALG_SIZES,
              short_rows: Sequence[int] = SHORT_ROWS,
              stream_sizes: Sequence[int] = STREAM_SIZES,
              vector_elements: int = VECTOR_ELEMENTS,
              cores: int | None = None, passes: int = PASSES) -> Calibration:
    """A profile of this host (module docstring) for its local CPU ``devices``, which
    share its ``cores`` (default: this process's). The kernels are measured in
    ``passes`` whole passes (every thread count in each), each curve's points the median
    of the passes; a thread count whose passes show threads not helping a big GEMM
    (``threads_helped``) in more than half of them is measured again until half of them
    do, at most ``MAX_EXTRA_PASSES`` times more, and only the passes where they helped
    count (all of them when none did)."""
    for d in devices:
        spec = parse_device(d)
        if spec.kind != "cpu" or spec.job is not None:
            raise TfcError(f"tfc calibrate measures local CPU devices; {d} is not one")
    if repeats < 1:
        raise TfcError(f"tfc calibrate needs at least one run per measurement, not {repeats}")
    if passes < 1:
        raise TfcError(f"tfc calibrate needs at least one pass, not {passes}")
    cores = max(1, cores if cores is not None else cpu_count())
    base = get_backend(backend)
    spreads: dict[str, Spread] = {}
    thread_counts = sorted({1, cores // 2 if cores >= 4 else 1, cores})
    if progress:
        progress("measuring a step's fixed costs")
    one_thread = with_threads(base, 1, override=True)
    with blas_limited(base, 1):
        fixed = measure_fixed(one_thread, repeats, spreads)
    if progress:
        progress("compiling the kernels")
    per_threads = []
    for threads in thread_counts:
        bench = _Bench(with_threads(base, threads, override=True), repeats, f"{threads}t",
                       spreads)
        with blas_limited(base, threads):
            jobs = {"gemm": _gemm_jobs(bench, gemm_sizes, gemm_skinny),
                    "gemm_f64": _gemm_jobs(bench, gemm_f64_sizes, None, DType.f64),
                    "linalg": _linalg_jobs(bench, linalg_sizes),
                    "short_row": _short_row_jobs(bench, short_rows),
                    "stream": _stream_jobs(bench, stream_sizes),
                    "vector": _vector_job(bench, vector_elements),
                    "serial": _serial_job(bench, SERIAL_SHAPE)}
        per_threads.append(_ThreadJobs(threads, bench, jobs))
    for p in range(passes):
        if progress:
            progress(f"measuring kernels, pass {p + 1} of {passes}")
        for t in per_threads:
            t.measure(base, fixed, f"{t.threads}t #{p + 1}")
    # the GEMM curves by thread count: threaded passes that read a big GEMM no faster than
    # one thread are measured again (a neighbour held a core), within a bound
    one = median_curve(per_threads[0].passes["gemm"])
    for t in per_threads[1:]:
        extra = 0
        while (sum(threads_helped(one, c) for c in t.passes["gemm"]) < (passes + 1) // 2
               and extra < MAX_EXTRA_PASSES):
            extra += 1
            if progress:
                progress(f"{t.threads} threads ran a big GEMM no faster than one: "
                         f"measuring again ({extra} of at most {MAX_EXTRA_PASSES})")
            t.measure(base, fixed, f"{t.threads}t again #{extra}")
    curves: dict[str, dict[int, Curve]] = {}
    for t in per_threads:
        helped = [i for i, c in enumerate(t.passes["gemm"])
                  if t.threads == 1 or threads_helped(one, c)]
        keep = helped or list(range(len(t.passes["gemm"])))
        for kind, runs in t.passes.items():
            curve = median_curve([runs[i] for i in keep])
            curves.setdefault(kind, {})[t.threads] = _capped(curve, curves.get(kind, {}).get(1))
    if progress:
        progress("measuring hand-offs and executor stages")
    handoff_s, transfer_s, executor_step_s, stage_s, crowded_s = _executor_costs(
        with_threads(base, max(1, cores // 2), override=True), repeats, spreads, fixed,
        passes, cores)
    profile = DeviceProfile(
        source=f"tfc calibrate {time.strftime('%Y-%m-%dT%H:%M:%S')} ({base.name})",
        cores=cores, cpu=DeviceRates(curves["gemm"], curves["stream"], fixed.kernel_s,
                                     curves["vector"], curves["serial"],
                                     short_row=curves["short_row"],
                                     gemm_f64=curves["gemm_f64"], linalg=curves["linalg"]),
        step_s=fixed.step_s, feed_s=fixed.feed_s, fetch_s=fixed.fetch_s,
        variable_s=fixed.variable_s, update_s=fixed.update_s,
        executor_step_s=executor_step_s, stage_s=stage_s, handoff_s=handoff_s,
        transfer_s=transfer_s, crowded_handoff_s=crowded_s)
    return Calibration(profile, spreads)
