"""``tfc calibrate``: measure the devices and links the cost model reasons about.

Each local CPU device is measured on the backend that will run it: a 512x512 f32
matrix product (compute rate), an element-wise add over 8M floats (memory bandwidth,
12 bytes per element) and a one-op graph on a scalar (fixed cost per step). Logical CPUs
share one machine, so all devices are measured *at the same time*, each in its own
thread: the rates are what a device gets while the others work too. A link between two
local devices is a hand-off through the rendezvous: its latency is measured by
ping-pong between two threads, its bandwidth is the memory copy rate (what moving a
tensor costs once it is not a shared reference).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

import numpy as np

from tfc.devices import DeviceProfile, DeviceRates, LinkRates, parse_device
from tfc.errors import TfcError
from tfc.runtime.rendezvous import Rendezvous

GEMM_N = 512
STREAM_ELEMENTS = 8 << 20


def _best(f: Callable[[], object], repeats: int) -> float:
    f()  # warm up (compiles, faults pages in)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def _program(build: Callable[[object], None], backend: str | None):
    import tfc
    from tfc.runtime import Program
    with tfc.Graph().as_default() as g:
        build(tfc)
    return Program(g.as_module(), backend=backend)


def measure_device(backend: str | None = None, repeats: int = 5) -> DeviceRates:
    """Compute rate, bandwidth and per-step overhead of one device (this thread)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((GEMM_N, GEMM_N), dtype=np.float32)
    x = rng.standard_normal(STREAM_ELEMENTS, dtype=np.float32)
    s = np.float32(1.0)

    def mm(tfc):
        pa = tfc.placeholder(tfc.float32, [GEMM_N, GEMM_N], name="a")
        tfc.entry("mm", feeds={"a": pa}, fetches={"c": tfc.matmul(pa, pa)})

    def add(tfc):
        px = tfc.placeholder(tfc.float32, [STREAM_ELEMENTS], name="x")
        tfc.entry("add", feeds={"x": px}, fetches={"y": px + px})

    def tiny(tfc):
        ps = tfc.placeholder(tfc.float32, [], name="s")
        tfc.entry("tiny", feeds={"s": ps}, fetches={"y": ps + 1.0})

    pm, pa, pt = (_program(b, backend) for b in (mm, add, tiny))
    gemm = _best(lambda: pm.run("mm", a=a), repeats)
    stream = _best(lambda: pa.run("add", x=x), repeats)
    overhead = _best(lambda: pt.run("tiny", s=s), repeats * 20)
    return DeviceRates(flops_per_s=2.0 * GEMM_N ** 3 / gemm,
                       bytes_per_s=12.0 * STREAM_ELEMENTS / stream,
                       kernel_overhead_s=overhead)


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


def measure_copy_bandwidth(repeats: int = 5) -> float:
    src = np.ones(STREAM_ELEMENTS, np.float32)
    dst = np.empty_like(src)
    t = _best(lambda: np.copyto(dst, src), repeats)
    return 2.0 * src.nbytes / t


def calibrate(devices: Sequence[str], backend: str | None = None, repeats: int = 5,
              progress: Callable[[str], None] | None = None) -> DeviceProfile:
    """A profile of ``devices`` (local CPUs), measured concurrently (module docstring)."""
    for d in devices:
        spec = parse_device(d)
        if spec.kind != "cpu" or spec.job is not None:
            raise TfcError(f"tfc calibrate measures local CPU devices; {d} is not one")
    rates: dict[str, DeviceRates] = {}
    errors: list[BaseException] = []

    def run(d: str) -> None:
        try:
            rates[d] = measure_device(backend, repeats)
        except BaseException as e:  # reported below, in the caller's thread
            errors.append(e)

    if progress:
        progress(f"measuring {len(devices)} device(s) concurrently")
    threads = [threading.Thread(target=run, args=(d,)) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    if progress:
        progress("measuring links")
    link = LinkRates(bytes_per_s=measure_copy_bandwidth(repeats), latency_s=measure_handoff())
    links = {f"{a}->{b}": link for a in devices for b in devices if a != b}
    return DeviceProfile({d: rates[d] for d in devices}, links, link,
                         source=f"tfc calibrate {time.strftime('%Y-%m-%dT%H:%M:%S')}")
