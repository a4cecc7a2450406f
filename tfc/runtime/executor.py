"""The local multi-device executor: one step of a partitioned entry, one thread per device.

It runs what the ``partition`` pass decided (``module.partitions[entry]``, a
``PartitionTable``; ``tfc.passes.partition`` says how the stages are cut): each device
runs its stages in order, every stage an ordinary graph of the module that the backend
compiles by name (one native call per stage on the LLVM backend, which releases the GIL
while it runs); sends and receives happen between stages through the step's
``Rendezvous``. Stage ``s`` on one device only waits for values that other devices
produce in stages before ``s``, so the devices run concurrently without deadlock. The
executor runs no pass. With a ``tracer`` set, every stage is a span of the device's
track, and when the backend times its kernels (``LLVMBackend(profile=True)``) each
kernel is a span inside its stage's.

What a step costs beyond its stages is kept small, because the cost model charges it
(``tfc.passes.cost_model``): the busiest device runs on the calling thread (one thread
wake-up fewer per step), a stage's sends and receives each take the rendezvous once,
a transfer hands the sender's array to the receiver (no copy anywhere: the receiving
stage binds the very array), stages call the backend's ``fast_step`` with inputs checked
once per step, and only the devices that compute share the cores
(``threads_per_device``), their BLAS calls included. An entry whose ops all run on one
device never gets here: it has no table and runs as a single-device program.

Each device's stages compile on the backend of its kind (``tfc.devices.device_backend``):
a GPU's on the CUDA backend, a CPU's on the program's backend (llvm when that is
cuda). The CUDA backend's executables take and return host arrays, so a cpu/gpu edge's
send/recv hands a host array over and the GPU stage copies it to the device and its
results back (the copy the cost model charges at the host link's rate); fp16 transfers
halve those copies as they do any transfer. A GPU's stages share their device copies of
the variables (``share_variables``) and write them only once every device's stages
succeeded (a step stays atomic); the variables that only they touch stay on the GPU
between a ``Program``'s steps (``fast_step(..., defer=True)``, ``read_back``:
``tfc.runtime.held``), so a training step copies back none of them.

On a cluster (``tfc.distributed``) each task's process runs the same executor restricted
to the task's devices (``devices=``): a transfer between two of them is the same hand-off,
and one to another task's device leaves through the ``transport`` the task gives it (actor
to actor) and arrives in the step's rendezvous there (``run_step``).

``PartitionedExecutable`` has the backend ``Executable`` interface, so ``Program`` runs a
multi-device module exactly as it runs a single-device one: same feeds, fetches,
variable semantics (reads see the start of the step, updates apply after it) and
results within float tolerance of the single-device run (bitwise on the reference
backend, where the ops are the same numpy calls).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Hashable, Iterable, Mapping, Sequence

import numpy as np

from tfc.backends.base import Backend, Executable, StepResult, get_backend
from tfc.devices import device_backend, threads_per_device
from tfc.errors import ExecutionError, FeedError, TfcError
from tfc.ir.core import Graph, Module, PartitionStage, StageSource
from tfc.ir.registry import writes_variable
from tfc.ir.types import format_shape
from tfc.passes.compress import CompressReport, compression_report
from tfc.runtime.held import defers, read_back_held
from tfc.runtime.rendezvous import Rendezvous
from tfc.runtime.trace import Tracer


def _slot(src: StageSource) -> Hashable:
    """The key of a value in a device's step: a feed's index, (stage, output), or a key."""
    if src.feed is not None:
        return src.feed
    if src.recv is not None:
        return src.recv
    return (src.stage, src.output)


# How values leave this executable's devices for devices it does not run (another task's,
# ``tfc.distributed``): called with a stage's (key, receiving device, value) triples, once
# per stage that sends any, during the step (its owner knows which step that is).
Transport = Callable[[list[tuple[str, str, np.ndarray]]], None]

# (inputs, variables, step, in_place, extra_refs, defer) -> (fetches, (variable, update)
# pairs); with ``defer`` (``Stage.defers``) the updates stay on the stage's device, written
# by its ``commit_writes`` once the whole step succeeded
StageCall = Callable[[list[np.ndarray], Mapping[str, np.ndarray], int, bool, int, bool],
                     tuple[Sequence[np.ndarray], Iterable[tuple[str, np.ndarray]]]]


@dataclass
class Stage:
    """One stage of a device as the executor runs it: the table's entry, its compiled
    graph, the slots its inputs, outputs and sends read and write, and the keys it
    receives before it runs."""

    index: int
    table: PartitionStage
    graph: Graph | None
    inputs: list[Hashable] = field(default_factory=list)
    outputs: list[Hashable] = field(default_factory=list)
    sends: list[tuple[str, Hashable]] = field(default_factory=list)  # (key, slot)
    recvs: list[str] = field(default_factory=list)
    executable: Executable | None = None
    call: StageCall | None = None  # runs ``executable``: (fetches, (var, update) pairs)
    # sends to devices this executable does not run: (key, receiving device, slot)
    remote_sends: list[tuple[str, str, Hashable]] = field(default_factory=list)
    in_place: bool = False  # its updates may be in place (``in_place_stages``)
    # its executable keeps its device's variable copies with the device's other such
    # stages (a GPU's: ``tfc.runtime.held.defers``, ``share_variables``); its writes wait
    # for the end of the step (``commit_writes``)
    defers: bool = False


@dataclass
class DevicePlan:
    """A device's stages, and where its fetches are (entry result index, slot)."""

    device: str
    stages: list[Stage]
    feeds: list[int]
    fetches: list[tuple[int, Hashable]]


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


def with_threads(backend: Backend, threads: int | None, *, override: bool = False) -> Backend:
    """``backend`` running its kernels on ``threads`` threads, for backends that split
    kernels across threads (``threads``): logical CPUs run concurrently on one machine
    and must not each take every core. A count the user gave the backend is kept unless
    ``override`` (``tfc calibrate`` measures at each count); ``threads=None`` keeps it."""
    if threads is None or not hasattr(backend, "threads"):
        return backend
    if getattr(backend, "threads") is not None and not override:
        return backend
    limited = copy.copy(backend)
    setattr(limited, "threads", threads)  # backends with a thread count (not all have one)
    return limited


def blas_limited(backend: Backend, threads: int) -> ContextManager[None]:
    """The BLAS library the backend's kernels call (llvm's OpenBLAS, with a pool of its
    own) on at most ``threads`` threads while the context is entered, through the
    backend's optional ``blas_threads``; nothing for backends without one. The limit is
    process-wide and holders may overlap (``tfc.backends.llvm.runtime.symbols``)."""
    limit = getattr(backend, "blas_threads", None)
    return limit(threads) if limit is not None else contextlib.nullcontext()


def stage_call(exe: Executable, unchecked: Sequence[int] = (), may_update_in_place: bool = False
               ) -> StageCall:
    """How the executor runs ``exe``: through ``fast_step`` where the backend has it, else
    the ``Executable`` call; returns the fetches and the (variable, update) pairs.
    ``may_update_in_place``: the step's other stages never see this stage's variables
    (``in_place_stages``), so ``fast_step`` may make its updates in the variables' own
    arrays when the call asks for it (``in_place``; ``extra_refs`` as ``fast_step``
    counts them).

    ``fast_step`` takes C-contiguous arrays of the arguments' dtypes as they are (their
    shapes it still checks, once per binding). The step's feeds are checked once per
    step and the outputs of native stages are such arrays, so only the inputs listed in
    ``unchecked`` (those computed by a stage that fell back to another backend) are
    checked here; the variables are checked once per step (``_checked_variables``)."""
    fast = getattr(exe, "fast_step", None)
    if fast is None or getattr(exe, "fallback_ops", None):
        def call(inputs: list[np.ndarray], variables: Mapping[str, np.ndarray],
                 step: int, in_place: bool = False, extra_refs: int = 0, defer: bool = False
                 ) -> tuple[Sequence[np.ndarray], Iterable[tuple[str, np.ndarray]]]:
            result = exe(inputs, variables, step)
            return result.fetches, result.updates.items()
        return call
    var_names = list(getattr(exe, "var_names", ()))
    update_names = list(getattr(exe, "update_names", ()))
    args = exe.graph.args  # type: ignore[attr-defined]  # executables with fast_step have it
    checks = [(k, args[k].dtype.np, args[k].name) for k in unchecked]
    in_place_ok = may_update_in_place and "extra_refs" in inspect.signature(fast).parameters

    def fast_call(inputs: list[np.ndarray], variables: Mapping[str, np.ndarray],
                  step: int, in_place: bool = False, extra_refs: int = 0, defer: bool = False
                  ) -> tuple[Sequence[np.ndarray], Iterable[tuple[str, np.ndarray]]]:
        for k, dt, name in checks:
            inputs[k] = _as_input(inputs[k], dt, name)
        if defer:  # the updates stay on the device, applied by ``commit_writes``
            outs, _ = fast(inputs, [variables[n] for n in var_names], step, None,
                           defer=True, commit=False)
            return outs, ()
        if in_place and in_place_ok:
            outs, upds = fast(inputs, [variables[n] for n in var_names], step, None,
                              in_place=True, extra_refs=extra_refs)
        else:
            outs, upds = fast(inputs, [variables[n] for n in var_names], step)
        return outs, zip(update_names, upds)
    return fast_call


def _as_input(value: Any, dtype: np.dtype, name: str | None) -> np.ndarray:
    """``value`` as a C-contiguous array of ``dtype`` (no copy when it is one already)."""
    a = np.asarray(value)
    if a.dtype != dtype:
        raise ExecutionError(f"stage input '{name}' has dtype {a.dtype}, expected "
                             f"{np.dtype(dtype)}")
    return a if a.flags.c_contiguous else np.require(a, requirements="C")


def _checked_variables(specs: Sequence[tuple[str, np.dtype, tuple[Any, ...], Any]],
                       variables: Mapping[str, Any]) -> Mapping[str, np.ndarray]:
    """``variables`` when each variable of ``specs`` (name, dtype, shape, declared type)
    is a C-contiguous array of its declared type (a ``Program``'s always are); else a
    copy of the mapping with those made so, or an ``ExecutionError`` naming the first
    that cannot be (what an executable's own call says). The stages' fast calls then
    take the arrays as they are."""
    fixed: dict[str, np.ndarray] = {}
    for name, dtype, shape, type_ in specs:
        v = variables.get(name)
        if v is None:
            raise ExecutionError(f"variable @{name} is not initialized")
        if (type(v) is np.ndarray and v.dtype == dtype and v.shape == shape
                and v.flags.c_contiguous):
            continue
        a = np.asarray(v)
        if a.dtype != dtype or a.shape != shape:
            raise ExecutionError(f"variable @{name} is {a.dtype}{format_shape(a.shape)}, "
                                 f"expected {type_}")
        fixed[name] = np.ascontiguousarray(a)
    if not fixed:
        return variables
    return {**variables, **fixed}


def _unchecked_sources(table: Any, compiled: Mapping[tuple[str, int], Executable]
                       ) -> set[tuple[str, StageSource]]:
    """The (device, value) pairs of ``table`` that a stage without a native fast path
    computes (directly, or received from one): what ``stage_call`` must check."""
    def native(device: str, stage: int) -> bool:
        exe = compiled.get((device, stage))
        return (exe is not None and getattr(exe, "fast_step", None) is not None
                and not getattr(exe, "fallback_ops", ()))

    out: set[tuple[str, StageSource]] = set()
    sent = {s.key: (device, s.value) for device, _, s in table.sends()}
    for d in table.devices:
        for st in d.stages:
            for src in st.inputs:
                device, value = d.device, src
                while value.recv is not None and value.recv in sent:
                    device, value = sent[value.recv]
                if value.feed is None and not native(device, value.stage or 0):
                    out.add((d.device, src))
    return out


def _variables_touched(graph: Graph) -> set[str]:
    """The variables ``graph`` (its regions included) reads or writes."""
    return {op.attrs["var"] for op in graph.walk()
            if op.kind.startswith("var.") and "var" in op.attrs}


def in_place_stages(module: Module, table: Any) -> set[tuple[str, int]]:
    """The stages (device, index) of ``table`` whose updates may be made in their
    variables' own arrays as far as the other stages go: every other stage that reads or
    writes one of its variables is an earlier stage of the same device (it has run to
    its end before this one starts). Then no stage of the step sees a variable change
    under it, and reads still see the start of the step. Within the stage the backend
    decides (``GraphCompiler.in_place_updates`` on llvm), and per step whether the array
    is held by anyone else (``fast_step``'s reference count)."""
    touched: dict[tuple[str, int], set[str]] = {}
    written: dict[tuple[str, int], set[str]] = {}
    for part in table.devices:
        for i, st in enumerate(part.stages):
            if st.graph is not None:
                graph = module.graphs[st.graph]
                touched[part.device, i] = _variables_touched(graph)
                written[part.device, i] = {op.attrs["var"] for op in graph.walk()
                                           if writes_variable(op) and "var" in op.attrs}
    out: set[tuple[str, int]] = set()
    for (device, i), names in written.items():
        if not names:
            continue
        if all(not (names & other) or (d == device and j < i)
               for (d, j), other in touched.items() if (d, j) != (device, i)):
            out.add((device, i))
    return out


def device_held_variables(stages: Sequence[tuple[str, Stage]]) -> dict[str, Any]:
    """The variables that only stages of one device whose executables share their
    variable copies (``Stage.defers``: a GPU's) read or write, each with the executable
    of such a stage that writes it: their values can live on that device between steps,
    and nothing else needs them on the host."""
    devices: dict[str, set[str]] = {}
    writer: dict[str, Any] = {}
    for device, st in stages:
        if st.graph is None:
            continue
        for name in _variables_touched(st.graph):
            devices.setdefault(name, set()).add(device if st.defers else "")
        if st.defers:
            for name in getattr(st.executable, "update_names", ()):
                writer[name] = st.executable
    return {name: exe for name, exe in writer.items()
            if len(devices[name]) == 1 and "" not in devices[name]}


class PartitionedExecutable:
    """Compiles the stage graphs of ``entry``'s partition table with ``backend`` and runs a
    step across the devices, one thread each (see the module docstring).

    Only the devices that compute (have a stage with a graph) share the cores
    (``threads_per_device``; ``threads`` says what each got); a device that only hands
    feeds over gets none. The busiest device runs on the calling thread, the others on
    the executable's worker threads; any device's error aborts the step's rendezvous,
    waits for the others to stop and surfaces (the root cause, not the aborted recvs).

    ``devices`` restricts it to some of the table's devices (a cluster task's: the
    ``tfc.distributed`` runtime runs one such executable per task): it compiles and runs
    only their stages, hands what they send to other devices to ``transport``, and takes
    what those send from the step's rendezvous (``run_step``), where the transport of
    the other end put it; its fetches are those of its devices (None elsewhere).
    ``cores`` is what its devices share (default: this process's ``cpu_count()``; a task
    that shares its host with other tasks gets its part)."""

    def __init__(self, module: Module, entry: str, backend: Backend, *,
                 devices: Sequence[str] | None = None,
                 transport: Transport | None = None, cores: int | None = None) -> None:
        table = module.partitions.get(entry)
        if table is None:
            raise TfcError(f"entry '{entry}': the module was not lowered for several devices "
                           f"(it has no partition table for @{entry}; run the partition "
                           f"pass, as tfc compile --devices does)")
        table.check(module)
        local = [d.device for d in table.devices] if devices is None else list(devices)
        if transport is None and len(local) < len(table.devices):
            raise TfcError(f"entry '{entry}': running some of its devices needs a transport "
                           f"for the values the others exchange with them")
        self.entry = entry
        self.table = table
        self.devices = [d.device for d in table.devices if d.device in local]
        self.transport = transport
        self.compression: CompressReport | None = (
            compression_report(module, entry) if table.compressed else None)
        # the cores go to the devices that compute, each its share (threads_per_device)
        computing = [d.device for d in table.devices
                     if d.device in local and any(st.graph for st in d.stages)]
        self.threads: dict[str, int] = threads_per_device(computing, cores)
        graph = module.graphs[entry]
        self._feed_dtypes = [a.dtype.np for a in graph.args]
        self._feed_names = list(graph.arg_names)
        self.plans: list[DevicePlan] = []
        fast_vars: set[str] = set()
        compiled: dict[tuple[str, int], Executable] = {}
        backends = {backend.name: backend}  # the backend of each device kind's part
        parts = [part for part in table.devices if part.device in local]
        for part in parts:
            name = device_backend(part.device, backend.name)
            if name not in backends:
                backends[name] = get_backend(name)
            stage_backend = with_threads(backends[name], self.threads.get(part.device))
            for i, st in enumerate(part.stages):
                if st.graph is not None:
                    compiled[part.device, i] = stage_backend.compile(module, st.graph)
        unchecked = _unchecked_sources(table, compiled)
        in_place = in_place_stages(module, table)
        pools: dict[str, dict[str, Any]] = {}  # a GPU's variable copies, for its stages
        for part in parts:
            stages = []
            for i, st in enumerate(part.stages):
                g = module.graphs[st.graph] if st.graph is not None else None
                stage = Stage(i, st, g, [_slot(s) for s in st.inputs],
                              [(i, k) for k in range(len(g.results) if g else 0)],
                              [(s.key, _slot(s.value)) for s in st.sends
                               if s.receiver in local],
                              [r.key for r in st.recvs],
                              remote_sends=[(s.key, s.receiver, _slot(s.value))
                                            for s in st.sends if s.receiver not in local])
                if g is not None:
                    exe = stage.executable = compiled[part.device, i]
                    stage.in_place = (part.device, i) in in_place
                    if defers(exe) and callable(getattr(exe, "share_variables", None)):
                        stage.defers = True
                        getattr(exe, "share_variables")(pools.setdefault(part.device, {}))
                    stage.call = stage_call(exe, [k for k, s in enumerate(st.inputs)
                                                  if (part.device, s) in unchecked],
                                            stage.in_place)
                    if getattr(exe, "fast_step", None) and not getattr(exe, "fallback_ops", ()):
                        fast_vars.update(getattr(exe, "var_names", ()))
                stages.append(stage)
            fetches = [(i, _slot(src)) for i, (device, src) in enumerate(table.fetches)
                       if device == part.device]
            feeds = sorted({s for st in stages
                            for s in [*st.inputs, *(x for _, x in st.sends),
                                      *(x for _, _, x in st.remote_sends)]
                            if isinstance(s, int)} | {s for _, s in fetches if isinstance(s, int)})
            self.plans.append(DevicePlan(part.device, stages, feeds, fetches))
        self._var_specs = [(n, np.dtype(module.variables[n].type.dtype.np),
                            tuple(module.variables[n].type.shape), module.variables[n].type)
                           for n in sorted(fast_vars)]
        self.n_results = len(table.fetches)
        # the entry's feeds that this executable's devices use (all, unless ``devices``)
        self.feed_indices = sorted({i for plan in self.plans for i in plan.feeds})
        self.tracer: Tracer | None = None  # set to record a timeline (``tfc bench --trace``)
        # the busiest device on the calling thread: one thread fewer to wake per step
        self._inline = max(range(len(self.plans)), key=lambda i: sum(
            len(st.graph.ops) for st in self.plans[i].stages if st.graph is not None))
        self._others = [p for i, p in enumerate(self.plans) if i != self._inline]
        self._pool = (ThreadPoolExecutor(max_workers=len(self._others),
                                         thread_name_prefix=f"tfc-{entry}")
                      if self._others else None)
        # a backend whose kernels call a BLAS library with threads of its own
        # (``blas_threads``: llvm's OpenBLAS) has those limited to the share too, per step
        self._backend = backends.get(device_backend("/cpu:0", backend.name), backend)
        self._blas_share: int | None = (
            (getattr(backend, "threads", None)  # the user's count, if given
             or min(self.threads.values(), default=1)) if self.threads else None)
        self._lock = threading.Lock()  # one step at a time
        self.last_rendezvous: Rendezvous | None = None
        # variables a failed step had already changed in place: their arrays, refused
        # until replaced (assigned, restored)
        self._changed_by_failure: dict[str, np.ndarray] = {}
        # the stages whose writes wait for the step's end, and the variables whose values
        # can stay on their device between steps (``device_held_variables``)
        self._deferring = [st for plan in self.plans for st in plan.stages if st.defers]
        self._device_held = device_held_variables(
            [(plan.device, st) for plan in self.plans for st in plan.stages])
        self._deferred_writes: dict[str, Any] = {
            n: st.executable for st in self._deferring
            for n in getattr(st.executable, "update_names", ())}
        # ``fast_step`` (what a Program's hot path calls) when every stage runs natively
        # and every fetch is a stage's output: then fetches and updates are fresh arrays
        stages = [st for plan in self.plans for st in plan.stages if st.executable]
        native = all(getattr(st.executable, "fast_step", None) is not None
                     and not getattr(st.executable, "fallback_ops", ()) for st in stages)
        if native and all(src.feed is None for device, src in table.fetches
                          if device in local):
            self.var_names = [n for n, *_ in self._var_specs]
            self.update_names = list(dict.fromkeys(
                n for st in stages for n in getattr(st.executable, "update_names", ())))
            self._shapes_seen: set[tuple] = set()
            self.fast_step = self._fast_step
            # Updates kept between steps (``fast_step(..., defer=True)``, what a
            # Program's runner asks for when ``read_back`` exists): those of
            # ``_device_held`` on their device (variable -> an executable of it,
            # ``_on_device``), the others as host arrays (``_kept``), with the array the
            # caller passed then (``_given``: while it passes that one again, it is stale).
            self._on_device: dict[str, Any] = {}
            self._kept: dict[str, np.ndarray] = {}
            self._given: dict[str, Any] = {}
            if self._device_held:
                self.read_back = self._read_back

    def _run_device(self, plan: DevicePlan, feeds: Sequence[np.ndarray | None],
                    variables: Mapping[str, np.ndarray], step: int,
                    rendezvous: Rendezvous, in_place: bool = False, extra_refs: int = 0,
                    applied: list[str] | None = None, defer: bool = False
                    ) -> tuple[dict[Hashable, np.ndarray], dict[str, np.ndarray]]:
        env: dict[Hashable, np.ndarray] = {i: feeds[i] for i in plan.feeds}  # type: ignore[misc]
        updates: dict[str, np.ndarray] = {}
        tracer, clock = self.tracer, time.perf_counter
        for st in plan.stages:
            if st.recvs:
                if tracer is None:
                    env.update(zip(st.recvs, rendezvous.recv_many(st.recvs)))
                else:
                    t0 = clock()
                    env.update(zip(st.recvs, rendezvous.recv_many(st.recvs)))
                    tracer.recvs(plan.device, st.recvs, t0, clock())
            if st.call is not None:
                t0 = clock() if tracer is not None else 0.0
                fetches, upds = st.call([env[s] for s in st.inputs], variables, step,
                                        in_place, extra_refs, st.defers)
                env.update(zip(st.outputs, fetches))
                if in_place and st.in_place and applied is not None:
                    for name, u in upds:
                        updates[name] = u
                        if u is variables[name]:  # changed in place: now, not at the end
                            applied.append(name)
                else:
                    updates.update(upds)
                if tracer is not None:
                    assert st.graph is not None and st.executable is not None
                    tracer.span(plan.device, st.graph.name, t0, clock(), "stage",
                                ops=len(st.graph.ops))
                    trace_kernels(tracer, plan.device, st.executable)
                    # memory: the stage's arena and every tensor the device holds now
                    tracer.memory(plan.device, int(getattr(st.executable, "arena_bytes", 0))
                                  + sum(a.nbytes for a in env.values()))
            if st.sends:
                values = [(key, env[slot]) for key, slot in st.sends]
                at = clock() if tracer is not None else 0.0
                rendezvous.send_many(values)
                if tracer is not None:
                    for key, value in values:
                        tracer.send(plan.device, key, value.nbytes, at)
            if st.remote_sends:
                assert self.transport is not None  # (the constructor's check)
                self.transport([(key, to, env[slot]) for key, to, slot in st.remote_sends])
        return env, updates

    def _checked_feeds(self, feeds: Sequence[Any]) -> list[np.ndarray]:
        """The feeds as C-contiguous arrays of the entry's argument dtypes (checked once
        per step here, not again by every stage)."""
        if len(feeds) != len(self._feed_dtypes):
            raise FeedError(f"@{self.entry} takes {len(self._feed_dtypes)} feeds, "
                            f"got {len(feeds)}")
        out = []
        for name, f, dt in zip(self._feed_names, feeds, self._feed_dtypes):
            if type(f) is not np.ndarray or f.dtype != dt or not f.flags.c_contiguous:
                f = np.asarray(f)
                if f.dtype != dt:
                    raise FeedError(f"feed '{name}' of @{self.entry} has dtype {f.dtype}, "
                                    f"expected {np.dtype(dt)}")
                f = np.require(f, requirements="C")  # keeps 0-d arrays 0-d
            out.append(f)
        return out

    def __call__(self, feeds: Sequence[np.ndarray], variables: Mapping[str, np.ndarray],
                 step: int) -> StepResult:
        arrays = self._checked_feeds(feeds)
        fetches, updates = self._step(arrays, _checked_variables(self._var_specs, variables),
                                      step)
        return StepResult(fetches, updates)

    def _fast_step(self, feeds: Sequence[np.ndarray], variables: Sequence[np.ndarray],
                   step: int, validate: Callable[[Sequence[np.ndarray]], Any] | None = None,
                   _in_place: bool = False, defer: bool = False
                   ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        """The step for a caller that vouches for its inputs, as the llvm executable's
        ``fast_step`` (``tfc.runtime.runner``): feeds are C-contiguous arrays of the
        arguments' dtypes (their shapes checked by ``validate`` the first time they are
        seen), ``variables`` those of ``var_names`` as a ``Program`` holds them. The
        fetches and the updates (``update_names`` order) are arrays nothing else holds:
        native stages' own outputs (offered only when every stage runs natively and no
        fetch is a feed). With ``_in_place`` (the runner holds each variable once in its
        store and once in ``variables``) a stage that no other stage of the step sees the
        variables of (``in_place_stages``) makes its updates in their own arrays where its
        backend can (a scatter then touches only its rows: no copy of the table per step).

        ``defer`` (offered with ``read_back`` when a GPU's stages alone touch some
        variables: ``device_held_variables``) keeps every update here instead of
        returning it (``None``): those on their device, the others as host arrays;
        the caller passes the same arrays again for them (this executable then uses
        its own values) and asks ``read_back`` for their values (``tfc.runtime.held``).
        A deferred step makes no update in place.
        """
        shapes = tuple(a.shape for a in feeds)
        if shapes not in self._shapes_seen:
            if validate is not None:
                validate(feeds)
            self._shapes_seen.add(shapes)
        given = dict(zip(self.var_names, variables))
        if defer:
            return self._deferred_step(feeds, given, step), None
        self._forget_deferred()
        # the references beyond the runner's two: ``variables`` and this mapping
        fetches, updates = self._step(feeds, given, step, in_place=_in_place, extra_refs=2)
        return fetches, [updates[n] for n in self.update_names]

    def _deferred_step(self, feeds: Sequence[np.ndarray], given: dict[str, Any],
                       step: int) -> list[np.ndarray]:
        """``fast_step(..., defer=True)``'s step (see there); the fetches."""
        current = dict(given)
        for name in list(self._kept):
            if given.get(name) is self._given[name]:  # stale: ours is newer
                current[name] = self._kept[name]
            else:  # the caller wrote it (or read it back): its value is the one
                del self._kept[name], self._given[name]
        for name in list(self._on_device):
            if given.get(name) is not self._given.get(name, given.get(name)):
                del self._on_device[name]  # (the stage uploads the caller's value)
        fetches, updates = self._step(feeds, current, step, defer=True)
        for name, value in updates.items():
            self._kept[name] = value
            self._given[name] = given.get(name)
            self._on_device.pop(name, None)
        for name, exe in self._device_held.items():
            self._on_device[name] = exe
            self._given[name] = given.get(name)
            self._kept.pop(name, None)
        return fetches

    def _read_back(self, names: Sequence[str]) -> list[np.ndarray]:
        """Host copies (read-only) of the values this executable keeps for ``names``
        (each one it updated in a deferred step): one ``read_back`` per GPU."""
        out: dict[str, Any] = {}
        on_device = {n: self._on_device[n] for n in names if n in self._on_device}
        read_back_held(on_device, out)
        for name in names:
            if name in out:
                del self._on_device[name]
            else:
                out[name] = self._kept.pop(name)
                out[name].flags.writeable = False
            self._given.pop(name, None)
        return [out[n] for n in names]

    def _forget_deferred(self) -> None:
        """A step given every value by its caller: nothing kept from deferred steps
        is newer (a caller reads them back before such a step)."""
        if self._kept or self._on_device:
            self._kept.clear()
            self._on_device.clear()
            self._given.clear()

    def run_step(self, feeds: Sequence[np.ndarray | None], variables: Mapping[str, np.ndarray],
                 step: int, rendezvous: Rendezvous, in_place: bool = False
                 ) -> tuple[list[Any], dict[str, np.ndarray]]:
        """One step of this executable's devices with ``rendezvous`` as the step's table
        (where another task's transport delivers what its devices send to these):
        ``feeds`` in argument order (None for those of ``feed_indices``' complement),
        C-contiguous arrays of their dtypes; ``variables`` those of the stages (with
        ``in_place``: the caller's store, which holds each array once, so that updates
        may be made in them as ``fast_step`` makes them). The fetches (None for other
        devices') and the updates of these devices."""
        return self._step(feeds, _checked_variables(self._var_specs, variables), step,
                          rendezvous, in_place=in_place)

    def _step(self, arrays: Sequence[np.ndarray | None], variables: Mapping[str, np.ndarray],
              step: int, rendezvous: Rendezvous | None = None, in_place: bool = False,
              extra_refs: int = 0, defer: bool = False
              ) -> tuple[list[Any], dict[str, np.ndarray]]:
        with self._lock:
            if self._changed_by_failure:
                self._refuse_changed(variables)
            rendezvous = Rendezvous() if rendezvous is None else rendezvous
            self.last_rendezvous = rendezvous
            applied: list[str] = []  # updates made in place so far (list.append: atomic)

            def run(plan: DevicePlan) -> Any:
                try:
                    return self._run_device(plan, arrays, variables, step, rendezvous,
                                            in_place, extra_refs, applied, defer)
                except BaseException as e:
                    rendezvous.abort(e)
                    raise

            with (blas_limited(self._backend, self._blas_share)
                  if self._blas_share is not None else contextlib.nullcontext()):
                futures = ([self._pool.submit(run, plan) for plan in self._others]
                           if self._pool is not None else [])
                outcomes: list[Any] = []
                errors: list[BaseException] = []
                try:
                    inline = run(self.plans[self._inline])
                except BaseException as e:
                    inline, errors = None, [e]
                for f in futures:  # every device has stopped before the step returns
                    try:
                        outcomes.append(f.result())
                    except BaseException as e:
                        errors.append(e)
            late = self._end_deferred(bool(errors), defer) if self._deferring else {}
            if errors:  # the root cause, not the recvs it aborted (those chain to it)
                error = next((e for e in errors if e.__cause__ is None), errors[0])
                if applied and isinstance(error, Exception):
                    raise self._failed_after_in_place(error, applied, variables) from error
                raise error
        outcomes.insert(self._inline, inline)
        fetches: list[Any] = [None] * self.n_results
        updates: dict[str, np.ndarray] = {}
        fetched: set[int] = set()
        for plan, (env, upd) in zip(self.plans, outcomes):
            updates.update(upd)
        updates.update(late)
        for plan, (env, _) in zip(self.plans, outcomes):
            for i, slot in plan.fetches:
                value = env[slot]
                if id(value) in fetched:  # a value fetched twice: each fetch its own array
                    value = value.copy()
                fetched.add(id(value))
                fetches[i] = value
        return fetches, updates

    def _end_deferred(self, failed: bool, defer: bool) -> dict[str, np.ndarray]:
        """The GPU stages' writes, which waited for every device: applied when no stage
        failed (else dropped: the device copies keep their start-of-step values). The
        updates the caller gets as host arrays: all of theirs but those that stay on
        the device in a deferred step (``_device_held``)."""
        for st in self._deferring:
            exe: Any = st.executable
            if failed:
                exe.drop_writes()
            else:
                exe.commit_writes()
        if failed:
            return {}
        wanted = {n: exe for n, exe in self._deferred_writes.items()
                  if not (defer and n in self._device_held)}
        out: dict[str, np.ndarray] = {}
        read_back_held(wanted, out)
        return out

    def _failed_after_in_place(self, error: Exception, applied: Sequence[str],
                               variables: Mapping[str, np.ndarray]) -> ExecutionError:
        """A step that failed after some of its updates were made in place: those
        variables hold the failed step's update (the others do not), so they are refused
        until replaced; the error says so."""
        names = sorted(set(applied))
        self._changed_by_failure.update({n: variables[n] for n in names})
        return ExecutionError(f"{error} (the step had already updated "
                              f"{', '.join('@' + n for n in names)} in place; assign or "
                              f"restore them before the next step)")

    def _refuse_changed(self, variables: Mapping[str, np.ndarray]) -> None:
        """An ``ExecutionError`` for a variable a failed step changed in place that is
        still that array (``_failed_after_in_place``); forget those replaced since."""
        for name, array in list(self._changed_by_failure.items()):
            if variables.get(name) is not array:
                del self._changed_by_failure[name]
        if self._changed_by_failure:
            names = ", ".join("@" + n for n in sorted(self._changed_by_failure))
            raise ExecutionError(f"{names}: a failed step had already updated them in place "
                                 f"(not the other variables); assign or restore them "
                                 f"before running another step")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
