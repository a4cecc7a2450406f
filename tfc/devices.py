"""Device names, the devices of this machine, and the device profile the cost model reads.

Names follow TensorFlow: ``/cpu:0``, ``/gpu:1``, and for clusters
``/job:worker/task:2/cpu:0``. Several *logical* CPU devices can share one machine,
each with its share of the cores (the TensorFlow paper's model parallelism on one host,
and what the tests use to run partitions concurrently without a second machine).

A ``DeviceProfile`` holds what ``tfc calibrate`` measured: each device's compute rate
(GEMM flop/s), memory bandwidth and per-kernel overhead, and each link's bandwidth and
latency. Placement turns an op's flops and bytes into seconds with it. Without a
calibrated file, ``default_profile`` gives round numbers for a current x86 core.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

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


def check_runnable(devices: Iterable[str]) -> None:
    """Refuse devices that no backend of this tfc runs: every GPU, for tfc has no CUDA
    backend yet (placing ops there could only fail later, op by op)."""
    gpus = [d for d in devices if parse_device(d).kind == "gpu"]
    if gpus:
        cores = cpu_count()
        raise TfcError(f"{gpus[0]}: no GPU backend is available on this machine (tfc has "
                       f"no CUDA backend yet); the available backends, llvm and reference, "
                       f"run on CPU devices /cpu:0 ... /cpu:N (this machine has {cores} "
                       f"core{'s' if cores != 1 else ''}): use e.g. --devices cpu:0,cpu:1")


def local_devices(cpus: int = 1) -> list[str]:
    """``cpus`` logical CPU devices and every GPU cupy sees."""
    if cpus < 1:
        raise TfcError(f"need at least one CPU device, got {cpus}")
    return [f"/cpu:{i}" for i in range(cpus)] + [f"/gpu:{i}" for i in range(gpu_count())]


# ---- the profile the cost model reads ---------------------------------------------------

PROFILE_FORMAT = "tfc-device-profile"
PROFILE_VERSION = 1
PROFILE_ENV = "TFC_DEVICE_PROFILE"


@dataclass
class DeviceRates:
    """What one device sustains: flop/s on GEMM-like work, bytes/s streaming memory, and
    the fixed cost of starting one kernel."""

    flops_per_s: float
    bytes_per_s: float
    kernel_overhead_s: float = 2e-6


@dataclass
class LinkRates:
    """A transfer of n bytes between two devices takes ``latency_s + n / bytes_per_s``."""

    bytes_per_s: float
    latency_s: float = 5e-6


@dataclass
class DeviceProfile:
    """Measured (or default) rates of devices and the links between them."""

    devices: dict[str, DeviceRates] = field(default_factory=dict)
    links: dict[str, LinkRates] = field(default_factory=dict)  # key "SRC->DST"
    default_link: LinkRates = field(default_factory=lambda: LinkRates(5e9, 5e-6))
    source: str = "defaults"

    def rates(self, device: str) -> DeviceRates:
        if device in self.devices:
            return self.devices[device]
        kind = parse_device(device).kind
        return _DEFAULT_RATES[kind]

    def link(self, src: str, dst: str) -> LinkRates:
        return self.links.get(f"{src}->{dst}", self.default_link)

    def to_json(self) -> str:
        return json.dumps({"format": PROFILE_FORMAT, "version": PROFILE_VERSION,
                           "source": self.source,
                           "devices": {k: asdict(v) for k, v in self.devices.items()},
                           "links": {k: asdict(v) for k, v in self.links.items()},
                           "default_link": asdict(self.default_link)}, indent=2)

    @staticmethod
    def from_json(text: str, where: str = "<profile>") -> "DeviceProfile":
        try:
            data = json.loads(text)
            if data.get("format") != PROFILE_FORMAT:
                raise ValueError(f"not a {PROFILE_FORMAT} file")
            if data.get("version") != PROFILE_VERSION:
                raise ValueError(f"version {data.get('version')}, expected {PROFILE_VERSION}")
            return DeviceProfile(
                devices={k: DeviceRates(**v) for k, v in data["devices"].items()},
                links={k: LinkRates(**v) for k, v in data["links"].items()},
                default_link=LinkRates(**data["default_link"]),
                source=str(data.get("source", where)))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise TfcError(f"{where}: not a valid device profile ({e})") from None


_DEFAULT_RATES = {"cpu": DeviceRates(50e9, 10e9, 2e-6), "gpu": DeviceRates(10e12, 500e9, 8e-6)}


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
    return DeviceProfile.from_json(p.read_text(), str(p))


def save_profile(profile: DeviceProfile, path: str | os.PathLike[str] | None = None) -> Path:
    """Write ``profile`` atomically (temp file + rename) and return where."""
    from tfc.atomic import atomic_write
    p = Path(path) if path is not None else default_profile_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    data = profile.to_json().encode()
    atomic_write(p, lambda f: f.write(data))
    return p
