"""The one owner of the pass pipeline: what runs between a module and a backend.

A module is *lowered* for a ``Target`` (a backend, the devices, how transfers travel)
by one pipeline, which this module alone builds and runs:

1. the user's optimization passes (``DEFAULT_PIPELINE``: canonicalize, cse, dce);
2. for devices given, ``placement``, or for a cluster ``replicate`` (which places every
   op on a task's device); for several devices ``partition``, then ``compress`` when f32
   tensors cross devices (for a cluster: tasks) as f16;
3. the backend's own lowering passes, which each backend class declares as data
   (``LLVMBackend.pipeline = "fusion,memory{gemm_updates=true}"``,
   ``ReferenceBackend.pipeline = ""``); with GPUs among the devices, those of the CUDA
   backend too (``lowering_passes``).

``lower`` runs it (verify after every pass, IR dumps, per-pass timings) and records the
target on the module (``Module.lowered_for``); a backend then compiles the module as it
is and runs no pass itself. ``tfc compile``/``tfc ir``, ``Session``, ``tfc.function``,
``Program`` (for a module that is not lowered for its backend: ``lower_entry``, one entry
at a time, on first use) and the multi-device executor all come through here, as JAX's
dispatch comes through its one compiler. Pipelines are text (``"cse,memory{budget=
64MiB}"``, see ``tfc.passes.manager``) or lists of ``PassSpec``.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence, TextIO

from tfc.backends.base import BACKENDS, get_backend
from tfc.devices import parse_device
from tfc.errors import TfcError
from tfc.ir.bytecode import module_to_bytes
from tfc.ir.core import Module
from tfc.passes.manager import DEFAULT_PIPELINE, Pipeline, PassSpec, parse_pipeline, run_passes
from tfc.passes.replicate import ClusterSpec

__all__ = ["DEFAULT_PIPELINE", "Target", "target_pipeline", "lower", "lower_entry",
           "lower_for_devices", "run_pipeline", "check_devices_runnable"]


@dataclass(frozen=True)
class Target:
    """What a module is lowered for: a backend name (``"llvm"``), the devices it runs on
    (``("/cpu:0", "/cpu:1")``; empty: the default one), whether f32 tensors cross
    devices as f16, and the cluster it is replicated for (its tasks' devices are then
    the devices)."""

    backend: str
    devices: tuple[str, ...] = ()
    fp16_transfers: bool = False
    # a cluster (``tfc.passes.replicate.ClusterSpec``): the ``replicate`` pass makes the
    # module one for its tasks, whose devices are then ``devices``
    cluster: ClusterSpec | None = None


def backend_pipeline(backend: str) -> list[PassSpec]:
    """The lowering passes backend ``backend`` declares (its class's ``pipeline``)."""
    return parse_pipeline(get_backend(backend).pipeline)


def lowering_passes(target: Target) -> list[PassSpec]:
    """The lowering passes of every backend that runs a part of ``target``
    (``tfc.devices.device_backend``: a GPU's part runs on CUDA, a CPU's on the target's
    backend), each once, in order: a reference-backend program with a GPU gets the
    fusion and memory plans the CUDA backend compiles from (the reference runs any
    verified IR, fused or not)."""
    from tfc.devices import device_backend
    names = dict.fromkeys([device_backend(d, target.backend) for d in target.devices]
                          or [target.backend])
    out: list[PassSpec] = []
    for name in names:
        out += [p for p in backend_pipeline(name) if p.name not in {q.name for q in out}]
    return out


def check_devices_runnable(devices: Sequence[str]) -> None:
    """A ``TfcError`` when a device of ``devices`` has no backend that can compile for it
    here: a GPU needs the CUDA backend and a CUDA C compiler (NVRTC, or ``nvcc``). A GPU
    itself is not needed to compile: running on a machine without one says so then."""
    gpus = [d for d in devices if parse_device(d).kind == "gpu"]
    if not gpus:
        return
    reason = cuda_compile_unavailable()
    if reason is not None:
        raise TfcError(f"{gpus[0]}: cannot compile for a GPU on this machine: {reason}")


def cuda_compile_unavailable() -> str | None:
    """Why the CUDA backend cannot compile kernels here, or None when it can (it needs no
    GPU for that, only NVRTC or nvcc)."""
    if "cuda" not in BACKENDS:
        return "this tfc has no CUDA backend"
    import importlib
    try:
        nvrtc = importlib.import_module("tfc.backends.cuda.nvrtc")
    except ImportError as e:
        return f"the CUDA backend does not import ({e})"
    if not nvrtc.available():
        return ("no CUDA C compiler found (install NVRTC: pip install -e '.[cuda]', or "
                "nvidia-cuda-nvrtc==13.0.*; or put nvcc on PATH)")
    return None


def target_pipeline(target: Target, passes: Pipeline = DEFAULT_PIPELINE, *,
                    place: bool = True) -> list[PassSpec]:
    """The whole pipeline for ``target``: ``passes`` (the optimizations), then placement
    when devices are given, or ``replicate`` for a cluster (and for several devices
    ``partition``, and ``compress`` for fp16 transfers), then the backend's lowering
    passes; one of those named in
    ``passes`` (``"cse,memory{budget=64MiB}"``) runs in the backend's place with the
    options given there. ``place=False`` leaves placement out: the ops keep the devices
    they have (a module placed by hand). A ``TfcError`` when a device has no backend
    that can compile for it here (``check_devices_runnable``)."""
    check_devices_runnable(target.devices)
    specs = parse_pipeline(passes)
    cluster = target.cluster
    if cluster is not None:  # replication places every op: no placement
        specs.append(PassSpec("replicate", (
            ("ps", cluster.ps), ("workers", cluster.workers),
            ("strategy", cluster.strategy), ("placement", cluster.ps_placement))))
    elif place and target.devices and "placement" not in [p.name for p in specs]:
        specs += parse_pipeline("placement")
    if len(target.devices) > 1:
        specs += parse_pipeline("partition,compress" if target.fp16_transfers else "partition")
    # A lowering pass the user names (with options: ``memory{budget=64MiB}``) runs in the
    # backend's place, once, as the user gave it.
    lowering = lowering_passes(target)
    own = {p.name for p in lowering}
    given = {p.name: p for p in specs if p.name in own}
    return [p for p in specs if p.name not in own] + [given.get(p.name, p) for p in lowering]


def lower(module: Module, target: Target, *, passes: Pipeline = DEFAULT_PIPELINE,
          verify: bool = True, print_after: str | Sequence[str] | None = None,
          print_after_all: bool = False, stream: TextIO | None = None,
          timings: list[tuple[str, float]] | None = None, place: bool = True) -> Module:
    """``module`` (changed in place) lowered for ``target``: ``target_pipeline(target,
    passes, place=place)`` run over it, verified after every pass when ``verify``; the IR is dumped
    to ``stream`` (default stderr) after the passes named by ``print_after`` (each must
    be in the pipeline) or after all; ``timings`` receives ``(pass, seconds)`` for each
    pass. The module records the target in ``lowered_for``. A module lowered for another
    target (a ``.tfc`` compiled again) first forgets what that lowering left: the stage
    graphs, partition tables and memory plans; its graphs are lowered again from there."""
    if target.fp16_transfers and len(target.devices) < 2:
        raise TfcError("fp16 transfers compress transfers between devices; "
                       "give two or more devices")
    if target.cluster is not None and list(target.devices) != target.cluster.devices:
        raise TfcError(f"internal: a target for cluster {target.cluster} must have its "
                       f"devices ({', '.join(target.cluster.devices)})")
    if module.lowered_for is not None and module.lowered_for != target:
        _forget_lowering(module)
    specs = target_pipeline(target, passes, place=place)
    module.devices = list(target.devices)
    module.fp16_transfers = target.fp16_transfers
    module = run_passes(module, specs, verify=verify, print_after=print_after,
                        print_after_all=print_after_all,
                        stream=stream if stream is not None else sys.stderr, timings=timings)
    module.lowered_for = target
    return module


def _forget_lowering(module: Module) -> None:
    """Drop what lowering for a target left in ``module``: stage graphs, partition tables,
    memory plans (the graphs themselves stay: optimized, placed or fused IR is valid input
    to any pipeline)."""
    for table in module.partitions.values():
        for name in table.graph_names():
            module.graphs.pop(name, None)
    module.partitions.clear()
    module.memory_plans.clear()
    module.lowered_for = None


def usable_as_lowered(module: Module, target: Target) -> bool:
    """Whether ``module`` can run on ``target`` as it is: lowered for it, or for the same
    devices by another target whose lowering ran every lowering pass ``target`` needs
    (``lowering_passes``): the reference interpreter runs any verified IR, fused or not;
    llvm and cuda compile from the same fusion regions and memory plans, so an entry of
    a ``/cpu:0,/gpu:0`` module placed wholly on the GPU compiles on cuda as lowered."""
    lowered = module.lowered_for
    if lowered is None:
        return False
    if lowered == target:
        return True
    if (lowered.devices, lowered.fp16_transfers) != (target.devices, target.fp16_transfers):
        return False
    return {p.name for p in lowering_passes(target)} <= {p.name for p in lowering_passes(lowered)}


def lower_entry(module: Module, entry: str, backend: str) -> Module:
    """A module holding just graph ``entry`` of ``module`` (a copy when the backend has
    lowering passes), its graph taken as it is and lowered for one device of ``backend``:
    what a ``Program`` compiles on an entry's first use, so that only the entries that
    run are lowered. ``module`` is unchanged.

    Lowerings are remembered in this process by the entry's content (its bytecode: the
    graph with its locations and the variables), as a jit cache is: building and
    compiling the same graph again runs no pass. The module returned may be shared, so
    it must not be changed."""
    graph = module.graphs.get(entry)
    if graph is None:
        raise TfcError(f"unknown entry '{entry}' (entries: {', '.join(module.graphs)})")
    target = Target(backend)
    lowering = backend_pipeline(backend)
    if not lowering:
        return lower(Module({entry: graph}, dict(module.variables)), target, passes="")
    key = _lowering_key(module, entry, backend)
    if key is not None and key in _LOWERED:
        _LOWERED.move_to_end(key)
        return _LOWERED[key]
    sub = Module({entry: graph.clone()}, dict(module.variables))
    lowered = lower(sub, target, passes="")
    if key is not None:
        _LOWERED[key] = lowered
        while len(_LOWERED) > MAX_REMEMBERED_LOWERINGS:
            del _LOWERED[next(iter(_LOWERED))]
    return lowered


# The in-process memory of ``lower_entry``: the most recently used lowerings, without
# graphs carrying more constant data than ``MAX_REMEMBERED_CONSTANT_BYTES`` (weights baked
# into an ``__init__``: holding them would keep the weights alive, and hashing them costs
# what lowering saves).
MAX_REMEMBERED_LOWERINGS = 64
MAX_REMEMBERED_CONSTANT_BYTES = 1 << 20
_LOWERED: OrderedDict[tuple[str, str, bytes], Module] = OrderedDict()


def _lowering_key(module: Module, entry: str, backend: str) -> tuple[str, str, bytes] | None:
    graph = module.graphs[entry]
    if graph.constant_bytes() > MAX_REMEMBERED_CONSTANT_BYTES:
        return None
    try:
        return backend, entry, module_to_bytes(Module({entry: graph}, module.variables))
    except TfcError:  # attrs the bytecode cannot hold: lowered every time
        return None


def lower_for_devices(module: Module, backend: str,
                      devices: Sequence[str] | None = None) -> Module:
    """``module`` lowered for ``backend`` on its devices (or ``devices``): itself when it
    already is (``tfc compile --devices``), else a lowered copy (partition, compress for
    fp16 transfers, the backend's passes; no optimization passes, and no placement: the
    ops run where they are, on the first device when they have none), so that what runs
    a multi-device entry finds its partition table and planned stage graphs. ``module``
    is unchanged."""
    devices = list(module.devices if devices is None else devices)
    target = Target(backend, tuple(devices), module.fp16_transfers and len(devices) > 1)
    if usable_as_lowered(module, target):
        return module
    copy = Module({name: g.clone() for name, g in module.graphs.items()},
                  dict(module.variables), placement_reports=dict(module.placement_reports),
                  partitions=dict(module.partitions), lowered_for=module.lowered_for)
    return lower(copy, target, passes="", place=False)


def run_pipeline(module: Module, passes: Pipeline, *, verify: bool = True,
                 print_after: str | Sequence[str] | None = None,
                 print_after_all: bool = False, stream: TextIO | None = None) -> Module:
    """Exactly ``passes`` over ``module``, for no target (``tfc opt``: a pass's own
    input and output, as ``mlir-opt`` shows them); the module is not marked lowered."""
    return run_passes(module, passes, verify=verify, print_after=print_after,
                      print_after_all=print_after_all,
                      stream=stream if stream is not None else sys.stderr)
