"""``tfc calibrate``'s GPU part: what the cost model charges a ``/gpu:N`` device.

Measured through cupy on the GPU itself, the way the CUDA backend runs there: GEMM as
``xp.matmul`` into a preallocated result (cuBLAS), f32 square products of a few sizes;
streams as a device-to-device copy (``xp.copyto``: bytes read plus bytes written);
the fixed cost of one kernel (a one-element add launched from Python); and the host
link both ways (``xp.asarray`` of a host array, ``.get()`` of a device one: pageable
host memory, as the backend's feeds and fetches are), its latency from 4-byte copies.
Every figure is the median of ``repeats`` timed loops, each ended by a synchronize.

The measuring code takes its array module and its synchronize as arguments
(``measure_rates``), so the same code runs with numpy in the tests; ``measure_gpu``
binds them to cupy and the device. Without a GPU the profile keeps the H100-class
defaults (``tfc.devices.default_gpu_rates``, ``DEFAULT_HOST_LINK``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from tfc.devices import Curve, DeviceProfile, DeviceRates, LinkRates, gpu_count, parse_device
from tfc.errors import TfcError

GEMM_SIZES = (256, 1024, 2048, 4096)
STREAM_BYTES = (1 << 20, 16 << 20, 256 << 20)
LINK_BYTES = 64 << 20


@dataclass
class GpuCalibration:
    """One GPU's measured rates and its host link, both ways."""

    device: str
    rates: DeviceRates
    to_device: LinkRates
    to_host: LinkRates
    name: str = "GPU"

    def apply(self, profile: DeviceProfile) -> None:
        """Store the measurements in ``profile`` (``DeviceProfile.rates``/``host_link``
        read them back)."""
        local = f"/gpu:{parse_device(self.device).index}"
        profile.devices[local] = self.rates
        profile.links[f"host->{local}"] = self.to_device
        profile.links[f"{local}->host"] = self.to_host


def _seconds(call: Callable[[], Any], sync: Callable[[], None], repeats: int,
             loops: int = 1) -> float:
    """Median seconds of one ``call`` (``loops`` back to back, then a synchronize)."""
    call()  # warm-up: plans, pools, the first launch
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(loops):
            call()
        sync()
        samples.append((time.perf_counter() - t0) / loops)
    return float(np.median(samples))


def measure_rates(xp: Any, sync: Callable[[], None], to_device: Callable[[np.ndarray], Any],
                  to_host: Callable[[Any], np.ndarray], *, repeats: int = 5,
                  gemm_sizes: Sequence[int] = GEMM_SIZES,
                  stream_bytes: Sequence[int] = STREAM_BYTES,
                  link_bytes: int = LINK_BYTES) -> tuple[DeviceRates, LinkRates, LinkRates]:
    """The GEMM and stream curves, the kernel cost and the host link of the device that
    ``xp`` (an array module: cupy, or numpy in tests) computes on (module docstring)."""
    f32 = np.float32
    one_a, one_b, one_c = (xp.ones((1,), dtype=f32) for _ in range(3))
    kernel_s = _seconds(lambda: xp.add(one_a, one_b, out=one_c), sync, repeats, loops=20)
    gemm_flops, gemm_s = [], []
    for n in sorted(gemm_sizes):
        a, b, c = (xp.ones((n, n), dtype=f32) for _ in range(3))
        gemm_flops.append(2.0 * n ** 3)
        gemm_s.append(_seconds(lambda: xp.matmul(a, b, out=c), sync, repeats))
        del a, b, c
    stream_sizes, stream_s = [], []
    for nbytes in sorted(stream_bytes):
        src, dst = xp.ones((nbytes // 4,), dtype=f32), xp.empty((nbytes // 4,), dtype=f32)
        stream_sizes.append(2.0 * (nbytes // 4) * 4)  # read + written
        stream_s.append(_seconds(lambda: xp.copyto(dst, src), sync, repeats))
        del src, dst
    host = np.ones((link_bytes // 4,), dtype=f32)
    tiny = np.ones((1,), dtype=f32)
    device_copy = to_device(host)
    device_tiny = to_device(tiny)
    up_latency = _seconds(lambda: to_device(tiny), sync, repeats, loops=20)
    down_latency = _seconds(lambda: to_host(device_tiny), sync, repeats, loops=20)
    up = _seconds(lambda: to_device(host), sync, repeats)
    down = _seconds(lambda: to_host(device_copy), sync, repeats)
    rates = DeviceRates({1: _increasing(gemm_flops, gemm_s)},
                        {1: _increasing(stream_sizes, stream_s)}, max(kernel_s, 1e-9))
    return (rates, _link(link_bytes, up, up_latency), _link(link_bytes, down, down_latency))


def _increasing(sizes: list[float], seconds: list[float]) -> Curve:
    """A curve through the points, each at least 1 ns (a timer's floor)."""
    return Curve(sizes, [max(s, 1e-9) for s in seconds])


def _link(nbytes: int, seconds: float, latency_s: float) -> LinkRates:
    """A link from a big copy's seconds and a tiny one's (its latency)."""
    latency_s = max(0.0, min(latency_s, seconds / 2))
    return LinkRates(nbytes / max(seconds - latency_s, 1e-9), latency_s)


def measure_gpu(device: str, repeats: int = 5) -> GpuCalibration:
    """Measure ``device`` (``/gpu:N``) with cupy; a ``TfcError`` when there is no such
    GPU here."""
    index = parse_device(device).index
    count = gpu_count()
    if index >= count:
        raise TfcError(f"{device}: no such CUDA device here ({count} GPU"
                       f"{'s' if count != 1 else ''} visible to cupy)")
    import cupy  # only with a GPU there: the [cuda] extra
    with cupy.cuda.Device(index):
        sync = cupy.cuda.Device(index).synchronize
        rates, up, down = measure_rates(cupy, sync, cupy.asarray, cupy.asnumpy,
                                        repeats=repeats)
        name = cupy.cuda.runtime.getDeviceProperties(index)["name"]
    return GpuCalibration(device, rates, up, down,
                          name.decode() if isinstance(name, bytes) else str(name))
