"""``tfc calibrate``: measure the devices and links the cost model reasons about.

Each local CPU device is measured on the backend that will run it: a 512x512 f32
matrix product (compute rate), an element-wise add over 8M floats (memory bandwidth,
12 bytes per element) and a one-op graph on a scalar (fixed cost per step). Logical CPUs
share one machine, so all devices are measured *at the same time*, each in its own
thread: the rates are what a device gets while the others work too. Every repetition
starts on all devices together (a barrier), so no device times a run while another is
still compiling or already done; the rates come from the median run, and the spread of
the runs (min / median / max) is reported per device: two identical logical CPUs once
measured 1.8x apart when each kept its best run of whatever happened to overlap it.
A link between two local devices is a hand-off through the rendezvous: its latency is
measured by ping-pong between two threads, its bandwidth is the memory copy rate (what
moving a tensor costs once it is not a shared reference).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from tfc.devices import DeviceProfile, DeviceRates, LinkRates, parse_device
from tfc.errors import TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Value
from tfc.ir.types import DType, TensorType
from tfc.runtime.program import Program
from tfc.runtime.rendezvous import Rendezvous

GEMM_N = 512
STREAM_ELEMENTS = 8 << 20
BARRIER_TIMEOUT_S = 600.0


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
    def relative(self) -> float:
        """(max - min) / median: 0 for perfectly repeatable runs."""
        return (self.max - self.min) / self.median if self.median > 0 else 0.0


@dataclass
class DeviceMeasurement:
    """One device's rates (from median runs) and the spread of each measurement."""

    rates: DeviceRates
    gemm: Spread
    stream: Spread
    overhead: Spread

    def spread_summary(self) -> str:
        """Each measurement's min/median/max run and (max - min) / median."""
        return ", ".join(f"{name} {_times(s)} (spread {100 * s.relative:.0f}%)"
                         for name, s in (("gemm", self.gemm), ("stream", self.stream),
                                         ("step", self.overhead)))


def _times(s: Spread) -> str:
    """``min/median/max unit``, in ms or us."""
    scale, unit = (1e3, "ms") if s.median >= 1e-3 else (1e6, "us")
    return "/".join(f"{t * scale:.3g}" for t in (s.min, s.median, s.max)) + f" {unit}"


@dataclass
class Calibration:
    """A measured profile and, per device, the spread of the runs behind it."""

    profile: DeviceProfile
    measurements: dict[str, DeviceMeasurement]


def _no_sync() -> None:
    return None


def _timings(f: Callable[[], object], repeats: int, sync: Callable[[], object]) -> Spread:
    f()  # warm up (compiles, faults pages in)
    samples = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        f()
        samples.append(time.perf_counter() - t0)
    return Spread(samples)


def _program(entry: str, shape: Sequence[int], body: Callable[[Builder, Value], Value],
             backend: str | None) -> Program:
    """A program whose one entry ``entry`` feeds ``x: f32[shape]`` and fetches
    ``y = body(x)`` (built with the IR builder: the runtime sits below the Python API)."""
    graph = Graph(entry)
    x = graph.add_arg(TensorType(DType.f32, tuple(shape)), "x")
    graph.set_results([body(Builder(graph), x)], ["y"])
    module = Module()
    module.add_graph(graph)
    return Program(module, backend=backend)


def measure_device(backend: str | None = None, repeats: int = 5, *,
                   sync: Callable[[], object] = _no_sync, gemm_n: int = GEMM_N,
                   stream_elements: int = STREAM_ELEMENTS) -> DeviceMeasurement:
    """Compute rate, bandwidth and per-step overhead of one device (this thread), each
    the median of ``repeats`` runs; ``sync`` is called before every run (the barrier
    that starts the devices' runs together)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((gemm_n, gemm_n), dtype=np.float32)
    x = rng.standard_normal(stream_elements, dtype=np.float32)
    s = np.float32(1.0)

    pm = _program("mm", (gemm_n, gemm_n), lambda b, v: b("matmul", v, v), backend)
    pa = _program("add", (stream_elements,), lambda b, v: b("add", v, v), backend)
    one = np.asarray(1.0, np.float32)
    pt = _program("tiny", (), lambda b, v: b("add", v, b("constant", value=one)), backend)
    gemm = _timings(lambda: pm.run("mm", x=a), repeats, sync)
    stream = _timings(lambda: pa.run("add", x=x), repeats, sync)
    overhead = _timings(lambda: pt.run("tiny", x=s), repeats * 20, sync)
    rates = DeviceRates(flops_per_s=2.0 * gemm_n ** 3 / gemm.median,
                        bytes_per_s=12.0 * stream_elements / stream.median,
                        kernel_overhead_s=overhead.median)
    return DeviceMeasurement(rates, gemm, stream, overhead)


def measure_handoff(rounds: int = 200) -> float:
    """Seconds from a send in one thread to the recv returning in another (median)."""
    value = np.zeros(1, np.float32)
    times: list[float] = []
    for _ in range(rounds):
        rv = Rendezvous(timeout_s=10)
        got = threading.Event()

        def receiver() -> None:
            rv.recv("k")
            got.set()

        t = threading.Thread(target=receiver)
        t.start()
        time.sleep(0)  # let it block in recv
        t0 = time.perf_counter()
        rv.send("k", value)
        got.wait(10)
        times.append(time.perf_counter() - t0)
        t.join()
    return float(np.median(times))


def measure_copy_bandwidth(repeats: int = 5, elements: int = STREAM_ELEMENTS) -> float:
    src = np.ones(elements, np.float32)
    dst = np.empty_like(src)
    t = _timings(lambda: np.copyto(dst, src), repeats, _no_sync).median
    return 2.0 * src.nbytes / t


def calibrate(devices: Sequence[str], backend: str | None = None, repeats: int = 7,
              progress: Callable[[str], None] | None = None, *, gemm_n: int = GEMM_N,
              stream_elements: int = STREAM_ELEMENTS) -> Calibration:
    """A profile of ``devices`` (local CPUs), measured concurrently (module docstring),
    with the spread of each device's runs."""
    for d in devices:
        spec = parse_device(d)
        if spec.kind != "cpu" or spec.job is not None:
            raise TfcError(f"tfc calibrate measures local CPU devices; {d} is not one")
    if repeats < 1:
        raise TfcError(f"tfc calibrate needs at least one run per measurement, not {repeats}")
    measured: dict[str, DeviceMeasurement] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(devices), timeout=BARRIER_TIMEOUT_S)

    def run(d: str) -> None:
        try:
            measured[d] = measure_device(backend, repeats, sync=barrier.wait, gemm_n=gemm_n,
                                         stream_elements=stream_elements)
        except threading.BrokenBarrierError as e:  # another device failed first
            errors.append(e)
        except BaseException as e:  # reported below, in the caller's thread
            errors.insert(0, e)
            barrier.abort()

    if progress:
        progress(f"measuring {len(devices)} device(s) concurrently, {repeats} runs each")
    threads = [threading.Thread(target=run, args=(d,), name=f"tfc-calibrate {d}")
               for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    if progress:
        progress("measuring links")
    link = LinkRates(bytes_per_s=measure_copy_bandwidth(repeats, stream_elements),
                     latency_s=measure_handoff())
    links = {f"{a}->{b}": link for a in devices for b in devices if a != b}
    profile = DeviceProfile({d: measured[d].rates for d in devices}, links, link,
                            source=f"tfc calibrate {time.strftime('%Y-%m-%dT%H:%M:%S')}")
    return Calibration(profile, {d: measured[d] for d in devices})
