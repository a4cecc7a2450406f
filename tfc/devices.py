"""Device names, the devices of this machine, and the device profile the cost model reads.

Names follow TensorFlow: ``/cpu:0``, ``/gpu:1``, and for clusters
``/job:worker/task:2/cpu:0``. Several *logical* CPU devices can share one machine,
each with its share of the cores (the TensorFlow paper's model parallelism on one host,
and what the tests use to run partitions concurrently without a second machine).

A ``DeviceProfile`` (file format version 2) holds what ``tfc calibrate`` measured: the
host's cores; per op class (GEMM-like, streaming) the seconds of one kernel against its
size at 1 thread and at all cores (``Curve``), and the rates of non-GEMM compute
(vectorized and serial kernels, by flops); the fixed costs of a kernel inside a native
step, of a ``Program.run`` step and of each of its feeds, fetches, variables and
variable updates, of an executor stage and of an in-process hand-off; links between
hosts; and for GPUs (``/gpu:N``, run by the CUDA backend) their GEMM and stream curves
and the host<->device copy (``links["host->/gpu:0"]``), measured by ``tfc calibrate``
through cupy when a GPU is there. The compute rates (vector, serial, short-row, f64
GEMM, linalg) and the per-feed, -fetch and -variable costs came later within version 2:
a file without them still loads, and is costed as when it was written. The cost model
(``tfc.passes.cost_model``) turns an op into seconds with it. Without a calibrated file
the defaults are round numbers for a current x86 core on a ``DEFAULT_CORES``-core host
(no compute rates, no per-feed costs: their ``step_s`` holds a typical step's), and for a
GPU those of an H100-class card on PCIe (``default_gpu_rates``, ``DEFAULT_HOST_LINK``).
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from tfc.errors import TfcError

_NAME = re.compile(r"^(?:/job:(?P<job>[a-z_][a-z0-9_]*)/task:(?P<task>\d+))?"
                   r"/(?P<kind>cpu|gpu):(?P<index>\d+)$")


@dataclass(frozen=True, order=True)
class DeviceSpec:
    """A parsed device name; ``job``/``task`` are None on the local machine."""

    kind: str
    index: int
    job: str | None = None
    task: int | None = None

    def __str__(self) -> str:
        host = f"/job:{self.job}/task:{self.task}" if self.job is not None else ""
        return f"{host}/{self.kind}:{self.index}"


def task_of(device: str) -> str | None:
    """The cluster task (one process, on one host) a device belongs to, as TensorFlow names
    it: ``/job:worker/task:1`` for ``/job:worker/task:1/cpu:0``; None for a device of this
    process (``/cpu:1``)."""
    spec = parse_device(device)
    return None if spec.job is None else f"/job:{spec.job}/task:{spec.task}"


def normalize_device(spec: str | None) -> str | None:
    """``"cpu:0"``, ``"/CPU:0"`` and ``"/device:CPU:0"`` all mean ``/cpu:0``."""
    if spec is None or spec == "":
        return None
    s = spec.strip().lower().replace("device:", "")
    return s if s.startswith("/") else "/" + s


def parse_device(spec: str) -> DeviceSpec:
    """A full device name (``/cpu:1``, ``gpu:0``, ``/job:ps/task:0/cpu:0``) as a spec."""
    name = normalize_device(spec) or ""
    m = _NAME.match(name)
    if m is None:
        raise TfcError(f"bad device name {spec!r}: expected /cpu:N, /gpu:N or "
                       f"/job:NAME/task:N/cpu:N")
    task = m.group("task")
    return DeviceSpec(m.group("kind"), int(m.group("index")), m.group("job"),
                      int(task) if task is not None else None)


def parse_devices(specs: str | Iterable[str]) -> list[str]:
    """``"cpu:0,cpu:1"`` (or a list) -> canonical names, checked, without repeats."""
    items = specs.split(",") if isinstance(specs, str) else list(specs)
    out: list[str] = []
    for item in items:
        if item.strip():
            name = str(parse_device(item))
            if name in out:
                raise TfcError(f"device {name} is listed twice")
            out.append(name)
    if not out:
        raise TfcError("no devices given")
    return out


def matches(constraint: str, device: str) -> bool:
    """Whether ``device`` satisfies a user's (possibly partial) ``device`` scope: ``/cpu:1``
    matches ``/cpu:1`` and ``/job:w/task:0/cpu:1``; ``/job:ps/task:0/cpu:0`` only itself."""
    want, have = parse_device(constraint), parse_device(device)
    if (want.kind, want.index) != (have.kind, have.index):
        return False
    return want.job is None or (want.job, want.task) == (have.job, have.task)


def cpu_count() -> int:
    """Cores this process may use (its affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threads_per_device(devices: Sequence[str], cores: int | None = None) -> dict[str, int]:
    """Each local CPU device's share of ``cores`` (default: ``cpu_count()``), at least one
    thread each: ``max(1, cores // len(cpus))``.

    ``devices`` are the devices that run work in a step: logical CPUs of one machine run
    concurrently and must not each take every core, but a device whose part of the step
    computes nothing (it only hands feeds over, or has no ops) takes no share, so the
    executor passes only the devices with compute stages and the cost model those of a
    candidate placement that have ops. One rule for both, so what the model predicts is
    what the runtime does. GPUs get no CPU share."""
    cpus = [d for d in devices if parse_device(d).kind == "cpu"]
    total = cpu_count() if cores is None else cores
    share = max(1, total // max(1, len(cpus)))
    return {d: share for d in cpus}


def gpu_count() -> int:
    """GPUs cupy can see (0 without cupy or without a driver)."""
    try:
        import cupy  # noqa: F401  (optional extra)
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no cupy, no driver, no device: all mean "no GPU here"
        return 0


def device_backend(device: str, backend: str) -> str:
    """The backend that runs ``device``'s ops in a program whose backend is ``backend``:
    a GPU's on ``cuda``; a CPU's on ``backend``, or on ``llvm`` when that is ``cuda``
    (the CUDA backend runs GPUs only). One rule for the executor, the pipeline and
    ``Program``, so that a module placed on ``/cpu:0,/gpu:0`` runs its CPU part on the
    CPU backend the user chose and its GPU part on CUDA."""
    if parse_device(device).kind == "gpu":
        return "cuda"
    return "llvm" if backend == "cuda" else backend


def program_backend(devices: Sequence[str], backend: str) -> str:
    """The backend a program on ``devices`` names as its own: ``cuda`` when every device
    is a GPU (nothing runs on a CPU backend), else ``backend``."""
    if devices and all(parse_device(d).kind == "gpu" for d in devices):
        return "cuda"
    return backend


def local_devices(cpus: int = 1) -> list[str]:
    """``cpus`` logical CPU devices and every GPU cupy sees."""
    if cpus < 1:
        raise TfcError(f"need at least one CPU device, got {cpus}")
    return [f"/cpu:{i}" for i in range(cpus)] + [f"/gpu:{i}" for i in range(gpu_count())]


# ---- the profile the cost model reads ---------------------------------------------------

PROFILE_FORMAT = "tfc-device-profile"
PROFILE_VERSION = 2
PROFILE_ENV = "TFC_DEVICE_PROFILE"
# The host the default profile describes (no calibrated file): a fixed count, so that a
# placement made with the defaults is the same on every machine.
DEFAULT_CORES = 4


@dataclass
class Curve:
    """Seconds of one kernel against its size (flops, or bytes moved), measured at a few
    sizes. Between them the curve is interpolated log-log (a kernel's rate changes smoothly
    with its size: caches, blocking, start-up); beyond the ends it keeps the end point's
    rate (seconds proportional to size), which is what a bigger GEMM or a longer stream
    does once the machine is saturated."""

    sizes: list[float]
    seconds: list[float]

    def __post_init__(self) -> None:
        if len(self.sizes) != len(self.seconds) or not self.sizes:
            raise ValueError("a curve needs as many sizes as seconds, at least one")
        if not all(_positive(x) for x in [*self.sizes, *self.seconds]):
            raise ValueError("a curve's sizes and seconds must be finite and positive")
        if any(a >= b for a, b in zip(self.sizes, self.sizes[1:])):
            raise ValueError("a curve's sizes must increase")

    @staticmethod
    def rate(per_s: float) -> "Curve":
        """One rate at every size: ``size / per_s`` seconds."""
        return Curve([1.0], [1.0 / per_s])

    def at(self, size: float) -> float:
        """Seconds of a kernel of ``size`` (0 for no work)."""
        if size <= 0:
            return 0.0
        xs, ys = self.sizes, self.seconds
        if size <= xs[0]:
            return ys[0] * size / xs[0]
        if size >= xs[-1]:
            return ys[-1] * size / xs[-1]
        i = bisect.bisect_right(xs, size) - 1
        f = (math.log(size) - math.log(xs[i])) / (math.log(xs[i + 1]) - math.log(xs[i]))
        return math.exp(math.log(ys[i]) + f * (math.log(ys[i + 1]) - math.log(ys[i])))


def _by_threads(curves: Mapping[int, Curve], size: float, threads: int) -> float:
    """A curve measured at some thread counts, read at ``threads``: a measured count as
    measured; between two, interpolated log-log in the count; above the largest, as the
    largest (threads beyond those measured add nothing); below the smallest, the
    smallest's seconds times smallest/threads (each thread doing its share)."""
    counts = sorted(curves)
    threads = max(1, int(threads))
    if threads in curves:
        return curves[threads].at(size)
    if threads > counts[-1]:
        return curves[counts[-1]].at(size)
    if threads < counts[0]:
        return curves[counts[0]].at(size) * counts[0] / threads
    i = bisect.bisect_right(counts, threads) - 1
    lo, hi = counts[i], counts[i + 1]
    f = math.log(threads / lo) / math.log(hi / lo)
    a, b = curves[lo].at(size), curves[hi].at(size)
    return math.exp(math.log(a) + f * (math.log(b) - math.log(a))) if a > 0 and b > 0 else a


# The curves of ``DeviceRates`` a profile may lack (measured by later versions of
# ``tfc calibrate`` within format version 2): without one, its ops cost as before it.
OPTIONAL_RATES = ("vector", "serial", "short_row", "gemm_f64", "linalg")
# A reduction kernel whose innermost loop (along the last axis: the row it reduces, or
# the last axis it keeps) is shorter than this runs as scalar code: the loop
# vectorizer's SIMD body covers at most one or two vectors of it.
SHORT_ROW = 32


@dataclass
class DeviceRates:
    """What one device's kernels take, by op class, kernel size and thread count: GEMM-like
    kernels (matmul, conv) by flops, streaming kernels (element-wise, reductions, copies) by
    bytes moved, each a ``Curve`` per thread count; plus the fixed cost of one kernel
    inside a native step (the curves include it at the sizes they measured).

    ``vector`` (optional: profiles written before it was measured have none) is the
    seconds of a non-GEMM kernel against its flops (the registry's: ``exp`` counts 10 a
    element), per thread count: a kernel that computes much per byte (a softmax's exp and
    log) takes longer than its bytes say, and is costed by the slower of the two.
    ``serial`` (optional too) is the same for kernels that run one dependent loop per
    result, which the backend does not vectorize (arg-reductions: ~4 ns an element here
    against ~0.02 for an exp). ``short_row`` (optional) is the same for a reduction
    kernel, and what is fused into it, whose innermost loop is shorter than
    ``SHORT_ROW`` elements: scalar code (a softmax over 10 classes: ~5 GFLOP/s here
    against ~50 on a flat kernel; a row-order kernel also recomputes each row's
    element-wise values in each of its phases).
    ``gemm_f64`` (optional) is the GEMM curve of f64 products (half the SIMD lanes of
    f32: ~1.4-2x the seconds per flop); without it f64 products take the f32 curve.
    ``linalg`` (optional) is the seconds of a LAPACK kernel (``matrix_inverse``,
    ``matrix_determinant``) against its registry flops, measured on f64 inverses: a
    small inverse is its calls' overhead (0.7 us for 8x8 here, whose bytes stream in
    0.02); without it those ops are costed as other non-GEMM ops."""

    gemm: dict[int, Curve]
    stream: dict[int, Curve]
    kernel_s: float = 5e-7
    vector: dict[int, Curve] | None = None
    serial: dict[int, Curve] | None = None
    short_row: dict[int, Curve] | None = None
    gemm_f64: dict[int, Curve] | None = None
    linalg: dict[int, Curve] | None = None

    def __post_init__(self) -> None:
        if not self.gemm or not self.stream:
            raise ValueError("device rates need a GEMM and a stream curve")
        for kind in OPTIONAL_RATES:
            rate = getattr(self, kind)
            if rate is not None and not rate:
                raise ValueError(f"{kind}: a rate needs at least one thread count")
        for kind, curves in (("gemm", self.gemm), ("stream", self.stream),
                             *((k, getattr(self, k) or {}) for k in OPTIONAL_RATES)):
            if any(t < 1 for t in curves):
                raise ValueError(f"{kind}: thread counts must be >= 1, got "
                                 f"{sorted(curves)}")
        _check_seconds("kernel_s", self.kernel_s)

    @staticmethod
    def flat(flops_per_s: float, bytes_per_s: float, kernel_s: float = 5e-7,
             cores: int = 1) -> "DeviceRates":
        """One GEMM and one stream rate at every size, reached with ``cores`` threads; each
        of fewer threads gives ``1 / cores`` of it (a device with half the cores has
        half the rate)."""
        return DeviceRates({1: Curve.rate(flops_per_s / cores), cores: Curve.rate(flops_per_s)},
                           {1: Curve.rate(bytes_per_s / cores), cores: Curve.rate(bytes_per_s)},
                           kernel_s)

    def gemm_seconds(self, flops: float, threads: int, f64: bool = False) -> float:
        """Seconds of a GEMM of ``flops`` (an f64 one on ``gemm_f64`` when measured)."""
        curves = self.gemm_f64 if f64 and self.gemm_f64 is not None else self.gemm
        return max(self.kernel_s, _by_threads(curves, flops, threads))

    def stream_seconds(self, nbytes: float, threads: int) -> float:
        return max(self.kernel_s, _by_threads(self.stream, nbytes, threads))

    def vector_seconds(self, flops: float, threads: int) -> float:
        """Seconds of ``flops`` of non-GEMM compute (0 without a measured vector rate)."""
        if self.vector is None or flops <= 0:
            return 0.0
        return _by_threads(self.vector, flops, threads)

    def serial_seconds(self, flops: float, threads: int) -> float:
        """Seconds of ``flops`` in a serial kernel (0 without a measured serial rate)."""
        if self.serial is None or flops <= 0:
            return 0.0
        return _by_threads(self.serial, flops, threads)

    def short_row_seconds(self, flops: float, threads: int) -> float | None:
        """Seconds of ``flops`` of a row kernel over short rows (None when not measured)."""
        if self.short_row is None:
            return None
        return _by_threads(self.short_row, flops, threads) if flops > 0 else 0.0

    def linalg_seconds(self, flops: float, threads: int) -> float | None:
        """Seconds of a LAPACK kernel of ``flops`` (None when not measured)."""
        if self.linalg is None:
            return None
        return max(self.kernel_s, _by_threads(self.linalg, flops, threads))

    def to_dict(self) -> dict[str, Any]:
        out = {"gemm": _curves_to_dict(self.gemm), "stream": _curves_to_dict(self.stream),
               "kernel_s": self.kernel_s}
        for kind in OPTIONAL_RATES:
            rate = getattr(self, kind)
            if rate is not None:
                out[kind] = _curves_to_dict(rate)
        return out

    @staticmethod
    def from_dict(d: Mapping[str, Any], where: str) -> "DeviceRates":
        """The rates in ``d``; a ValueError naming the field (under ``where``) if bad."""
        try:
            optional = {kind: None if d.get(kind) is None
                        else _curves_from_dict(d[kind], f"{where}.{kind}")
                        for kind in OPTIONAL_RATES}
            return DeviceRates(_curves_from_dict(d["gemm"], f"{where}.gemm"),
                               _curves_from_dict(d["stream"], f"{where}.stream"),
                               float(d["kernel_s"]), **optional)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise _field_error(where, e) from None


def _positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


def _check_seconds(name: str, value: float) -> None:
    """A fixed cost must be a finite number of seconds, >= 0 (NaN would poison every
    estimate; a negative one would make splitting look free)."""
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {value}")


def _field_error(where: str, e: Exception) -> ValueError:
    """``e`` as a ValueError that names the field it came from."""
    what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
    return ValueError(what if what.startswith(where) else f"{where}: {what}")


def _curves_to_dict(curves: Mapping[int, Curve]) -> dict[str, Any]:
    return {str(t): {"sizes": c.sizes, "seconds": c.seconds} for t, c in sorted(curves.items())}


def _curves_from_dict(d: Mapping[str, Any], where: str) -> dict[int, Curve]:
    curves = {}
    for t, c in d.items():
        try:
            curves[int(t)] = Curve([float(x) for x in c["sizes"]],
                                   [float(x) for x in c["seconds"]])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise _field_error(f"{where}.{t}", e) from None
    return curves


@dataclass
class LinkRates:
    """A transfer of n bytes between two hosts takes ``latency_s + n / bytes_per_s``."""

    bytes_per_s: float
    latency_s: float = 5e-6

    def __post_init__(self) -> None:
        if not _positive(self.bytes_per_s):
            raise ValueError(f"bytes_per_s must be finite and > 0, got {self.bytes_per_s}")
        _check_seconds("latency_s", self.latency_s)

    @staticmethod
    def from_dict(d: Mapping[str, Any], where: str) -> "LinkRates":
        try:
            return LinkRates(float(d["bytes_per_s"]), float(d.get("latency_s", 5e-6)))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise _field_error(where, e) from None


@dataclass
class DeviceProfile:
    """Measured (or default) costs of this host's devices and of the links between hosts.

    ``cpu`` are the rates of every local CPU device (logical CPUs share the host's
    ``cores``: a device's thread count is its share, ``threads_per_device``); ``devices``
    overrides them per device. Fixed costs: ``step_s`` of one ``Program.run`` step of a
    one-device program with no feeds, fetches or variables, ``feed_s`` and ``fetch_s``
    what each feed and each fetch add to it (checks, conversions, the arrays handed to
    and from the native step), ``variable_s`` each variable the step uses, ``update_s``
    what each variable it writes adds to that (a new array each step); all four 0 in
    profiles written before they were measured, whose ``step_s`` holds one feed and one
    fetch; ``executor_step_s`` of one step of the multi-device executor
    (its threads, its rendezvous), ``stage_s`` what it adds per stage it runs;
    ``handoff_s`` the latency of handing a tensor to another device of this process (a
    reference: no bytes move; measured inside the executor's steps), ``crowded_handoff_s``
    that latency when the step's devices outnumber the host's cores (``handoff_seconds``;
    None in profiles written before it was measured: then ``handoff_s``),
    ``transfer_s`` the work of one send and its recv (charged
    to both devices' threads). ``links`` (key ``"SRC->DST"``) and ``default_link`` are
    links between hosts. ``source`` is ``"defaults"`` for the built-in round numbers.
    A cluster's links (``tfc calibrate --cluster``; None/0 where not measured):
    ``cluster_link`` what a value costs between two task processes (latency, bytes/s),
    ``cluster_call_s`` the driver's launch of a step on one more task (a frame on its TCP
    connection to the task; the frames go out one after another; a task's send of a
    value costs about as much), ``cluster_round_s`` the rest of a driver's round trip
    after the last frame (the task waking to it, its answer, the driver waking to that),
    ``cluster_hop_cpu_s`` the CPU time one frame between two processes costs in all (the
    sender's write, the receiver's wake-up and read): with more task processes than
    cores, the step's CPU summed over its processes bounds it."""

    devices: dict[str, DeviceRates] = field(default_factory=dict)
    links: dict[str, LinkRates] = field(default_factory=dict)
    default_link: LinkRates = field(default_factory=lambda: LinkRates(1e9, 5e-5))
    source: str = "defaults"
    cores: int = DEFAULT_CORES
    cpu: DeviceRates = field(default_factory=lambda: default_cpu_rates())
    step_s: float = 5e-6
    executor_step_s: float = 5e-5
    stage_s: float = 5e-6
    handoff_s: float = 1e-5
    transfer_s: float = 2e-6
    feed_s: float = 0.0
    fetch_s: float = 0.0
    variable_s: float = 0.0
    update_s: float = 0.0
    crowded_handoff_s: float | None = None
    cluster_link: LinkRates | None = None
    cluster_call_s: float = 0.0
    cluster_round_s: float = 0.0
    cluster_hop_cpu_s: float = 0.0

    def __post_init__(self) -> None:
        if self.cores < 1:
            raise ValueError(f"cores must be >= 1, got {self.cores}")
        for name in ("step_s", "executor_step_s", "stage_s", "handoff_s", "transfer_s",
                     "feed_s", "fetch_s", "variable_s", "update_s", "cluster_call_s",
                     "cluster_round_s", "cluster_hop_cpu_s"):
            _check_seconds(name, getattr(self, name))
        if self.crowded_handoff_s is not None:
            _check_seconds("crowded_handoff_s", self.crowded_handoff_s)

    def handoff_seconds(self, devices: int) -> float:
        """One in-process hand-off in a step that ``devices`` devices run: with more of
        them (each a thread) than the host's cores, a receiver is often descheduled and
        must be woken first (``crowded_handoff_s``, when measured)."""
        if devices > self.cores and self.crowded_handoff_s is not None:
            return self.crowded_handoff_s
        return self.handoff_s

    @property
    def calibrated(self) -> bool:
        """Whether the rates were measured (else they are the built-in defaults)."""
        return self.source != "defaults"

    def describe(self) -> str:
        """Where the rates come from, for reports."""
        if self.calibrated:
            return f"calibrated rates ({self.source}, {self.cores} cores)"
        return f"default rates ({self.cores}-core x86 host assumed; run `tfc calibrate`)"

    def rates(self, device: str) -> DeviceRates:
        """``device``'s rates: measured for it (``devices``), else the host's CPU rates
        for a CPU, the H100-class defaults (``default_gpu_rates``) for a GPU."""
        if device in self.devices:
            return self.devices[device]
        if parse_device(device).kind == "gpu":
            return _DEFAULT_GPU
        return self.cpu

    def link(self, src: str, dst: str) -> LinkRates:
        return self.links.get(f"{src}->{dst}", self.default_link)

    def host_link(self, gpu: str, to_gpu: bool) -> LinkRates:
        """The host<->device copy of ``gpu`` (``/gpu:0``, or with its host task): links
        ``"host->/gpu:0"`` (``to_gpu``) and ``"/gpu:0->host"`` as ``tfc calibrate``
        measured them with cupy, else ``DEFAULT_HOST_LINK``."""
        spec = parse_device(gpu)
        local = f"/gpu:{spec.index}"
        key = f"host->{local}" if to_gpu else f"{local}->host"
        return self.links.get(key, DEFAULT_HOST_LINK)

    def host_copies(self, src: str, dst: str) -> list[LinkRates]:
        """The host<->device copies a tensor makes from ``src`` to ``dst``: the CUDA
        backend takes and returns host arrays (a cpu/gpu edge's send/recv is the copy),
        so a value leaving a GPU is copied to the host, and one entering a GPU is copied
        to it; none between CPUs."""
        out = []
        if parse_device(src).kind == "gpu":
            out.append(self.host_link(src, to_gpu=False))
        if parse_device(dst).kind == "gpu":
            out.append(self.host_link(dst, to_gpu=True))
        return out

    def to_json(self) -> str:
        return json.dumps({"format": PROFILE_FORMAT, "version": PROFILE_VERSION,
                           "source": self.source, "cores": self.cores,
                           "step_s": self.step_s, "executor_step_s": self.executor_step_s,
                           "stage_s": self.stage_s, "handoff_s": self.handoff_s,
                           "transfer_s": self.transfer_s, "feed_s": self.feed_s,
                           "fetch_s": self.fetch_s, "variable_s": self.variable_s,
                           "update_s": self.update_s,
                           **({"crowded_handoff_s": self.crowded_handoff_s}
                              if self.crowded_handoff_s is not None else {}),
                           "cpu": self.cpu.to_dict(),
                           "devices": {k: v.to_dict() for k, v in self.devices.items()},
                           "links": {k: asdict(v) for k, v in self.links.items()},
                           "default_link": asdict(self.default_link),
                           "cluster_link": (asdict(self.cluster_link)
                                            if self.cluster_link is not None else None),
                           "cluster_call_s": self.cluster_call_s,
                           "cluster_round_s": self.cluster_round_s,
                           "cluster_hop_cpu_s": self.cluster_hop_cpu_s}, indent=1)

    @staticmethod
    def from_json(text: str, where: str = "<profile>") -> "DeviceProfile":
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
                raise ValueError(f"not a {PROFILE_FORMAT} file")
        except (ValueError, TypeError) as e:
            raise TfcError(f"{where}: not a valid device profile ({e})") from None
        version = data.get("version")
        if version != PROFILE_VERSION:
            raise TfcError(f"{where}: a version-{version} device profile; this tfc reads "
                           f"version {PROFILE_VERSION} (per-op-class curves by size and "
                           f"threads): re-run `tfc calibrate -o {where}`")
        try:
            return DeviceProfile(
                devices={k: DeviceRates.from_dict(v, f"devices.{k}")
                         for k, v in data["devices"].items()},
                links={k: LinkRates.from_dict(v, f"links.{k}")
                       for k, v in data["links"].items()},
                default_link=LinkRates.from_dict(data["default_link"], "default_link"),
                source=str(data.get("source", where)), cores=int(data["cores"]),
                cpu=DeviceRates.from_dict(data["cpu"], "cpu"), step_s=float(data["step_s"]),
                executor_step_s=float(data["executor_step_s"]),
                stage_s=float(data["stage_s"]), handoff_s=float(data["handoff_s"]),
                transfer_s=float(data["transfer_s"]),
                feed_s=float(data.get("feed_s", 0.0)), fetch_s=float(data.get("fetch_s", 0.0)),
                variable_s=float(data.get("variable_s", 0.0)),
                update_s=float(data.get("update_s", 0.0)),
                crowded_handoff_s=(None if data.get("crowded_handoff_s") is None
                                   else float(data["crowded_handoff_s"])),
                cluster_link=(LinkRates.from_dict(data["cluster_link"], "cluster_link")
                              if data.get("cluster_link") is not None else None),
                cluster_call_s=float(data.get("cluster_call_s", 0.0)),
                cluster_round_s=float(data.get("cluster_round_s", 0.0)),
                cluster_hop_cpu_s=float(data.get("cluster_hop_cpu_s", 0.0)))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise TfcError(f"{where}: not a valid device profile ({e})") from None


def default_cpu_rates() -> DeviceRates:
    """Round numbers for one current x86 core and a ``DEFAULT_CORES`` host: GEMM from
    10 GFLOP/s (a 32x32 product) to 50 GFLOP/s (256 and up) per thread, scaling
    sub-linearly with threads on small products; streams at 30 GB/s per thread in cache,
    10 GB/s per thread from DRAM, at most 20 GB/s for the host."""
    n = DEFAULT_CORES
    gemm_sizes = [2.0 * 32 ** 3, 2.0 * 64 ** 3, 2.0 * 128 ** 3, 2.0 * 256 ** 3]
    per_thread = [10e9, 25e9, 40e9, 50e9]
    speedup = [1.0, 1.5, 0.6 * n, 0.9 * n]
    stream_sizes = [64e3, 1e6, 16e6, 64e6]
    stream_rate = [30e9, 30e9, 10e9, 10e9]
    stream_speedup = [1.0, 0.8 * n, 2.0, 2.0]
    return DeviceRates(
        {1: Curve(gemm_sizes, [s / r for s, r in zip(gemm_sizes, per_thread)]),
         n: Curve(gemm_sizes, [s / (r * max(1.0, k))
                               for s, r, k in zip(gemm_sizes, per_thread, speedup)])},
        {1: Curve(stream_sizes, [s / r for s, r in zip(stream_sizes, stream_rate)]),
         n: Curve(stream_sizes, [s / (r * max(1.0, k))
                                 for s, r, k in zip(stream_sizes, stream_rate, stream_speedup)])},
        kernel_s=5e-7)


def default_gpu_rates() -> DeviceRates:
    """Round numbers for one H100-class GPU (no calibrated file, or no GPU measured):
    f32 GEMM through cuBLAS from ~1 TFLOP/s (a 128^3 product, launch-bound) to
    40 TFLOP/s (4096^3 and up; TF32 tensor cores off, as cupy's default); streams from
    launch-bound to 2.5 TB/s (HBM3, what a copy kernel reaches); 8 us per kernel (a launch
    from Python). A GPU takes no share of the host's cores: one curve, any thread count."""
    gemm_sizes = [2.0 * 128 ** 3, 2.0 * 1024 ** 3, 2.0 * 4096 ** 3]
    gemm_rates = [1e12, 20e12, 40e12]
    stream_sizes = [1e6, 64e6, 1e9]
    stream_rates = [100e9, 1.5e12, 2.5e12]
    return DeviceRates(
        {1: Curve(gemm_sizes, [s / r for s, r in zip(gemm_sizes, gemm_rates)])},
        {1: Curve(stream_sizes, [s / r for s, r in zip(stream_sizes, stream_rates)])},
        kernel_s=8e-6)


_DEFAULT_GPU = default_gpu_rates()
# The host<->GPU copy without a measured one: PCIe 4/5 x16 from pageable host memory
# (what ``cupy.asarray``/``.get()`` of a numpy array reach), ~10 us per copy.
DEFAULT_HOST_LINK = LinkRates(12e9, 1e-5)


def default_profile_path() -> Path:
    """Where ``tfc calibrate`` writes and placement reads: ``$TFC_DEVICE_PROFILE``, else
    ``~/.cache/tfc/devices.json``."""
    env = os.environ.get(PROFILE_ENV)
    if env:
        return Path(env)
    return Path(os.path.expanduser("~")) / ".cache" / "tfc" / "devices.json"


def load_profile(path: str | os.PathLike[str] | None = None) -> DeviceProfile:
    """The profile at ``path`` (or the default path); defaults when no file is there and
    none was asked for by name."""
    p = Path(path) if path is not None else default_profile_path()
    if not p.exists():
        if path is not None:
            raise TfcError(f"{p}: no such device profile (run `tfc calibrate -o {p}`)")
        return DeviceProfile()
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise TfcError(f"{p}: cannot read device profile ({reason})") from None
    return DeviceProfile.from_json(text, str(p))


def save_profile(profile: DeviceProfile, path: str | os.PathLike[str] | None = None) -> Path:
    """Write ``profile`` atomically (temp file + rename) and return where."""
    from tfc.atomic import atomic_write
    p = Path(path) if path is not None else default_profile_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    data = profile.to_json().encode()
    atomic_write(p, lambda f: f.write(data))
    return p
