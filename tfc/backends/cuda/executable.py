"""What runs a compiled entry of the CUDA backend: ``CUDAExecutable``.

A step is a precomputed list of actions over device storage, made once per *binding*
(distinct tuple of feed shapes) and replayed every step:

- **Storage.** The memory plan's arena is one device allocation per binding; each arena
  value is a view of it at its buffer's offset, views and in-place results views of
  their root. Fetches (values outside the arena) get a device array per binding, feeds
  a device array per binding that each step copies the host feed into, constants are
  uploaded once. So every op's operands and results are fixed device arrays, and each
  action is bound to them when the binding is made.
- **Actions**, in schedule order, each a prepared zero-argument call (no per-op Python
  work in the step beyond calling it; what changes per step, the step number and the
  arrays fed, is in ``_Now``): a ``fusion`` launches its generated kernel
  (``Device.launcher``: grid from the kernel's ``Launch`` and the binding, arguments
  bound once; class labels it reads are checked first, on the host when they are a
  host feed, else by a kernel whose answer the step reads with its fetches, before its
  variable writes, so a GPU step does not stop for them); a
  view does nothing (it aliases); a float ``matmul`` is one cuBLAS call prepared with its
  arguments (``Device.gemm``, ``gemm.GemmPlan``: no allocation, the transposes as flags,
  f16 on tensor cores with f32 accumulation and one rounding) writing its slot; other
  library ops (``library.LIBRARY``, integer and broadcast products too) run with the
  array module and copy their result into the value's storage; a random op launches its
  Philox kernel (``codegen_random``; the step is its launch argument);
  values known once the feed shapes are (``BY_BINDING`` ops, small pure ops of them and
  of constants: a mean's count), computed on the host when the binding is made, are
  copied into their slot where device work reads them; ``ON_HOST`` ops run their
  registry reference on host copies.
- **Variables live on the device** across steps (``_DeviceVar``): a variable is uploaded
  when the host array the runtime passes is not the one this executable handed back last
  (compared by identity, and only for read-only arrays, which the runtime's are), so a
  training loop uploads its variables once (a fast step passing the very arrays of the
  last one skips even that comparison). Writes update the device copies in place
  (an optimizer's ``assign_sub``: one kernel, a prepared call); a write whose operand is a variable's own
  storage goes through a temporary, so every write sees the start-of-step values.
- **Updates stay on the device** when the runtime lets them (``fast_step(...,
  defer=True)``, what ``Program``'s runner, ``Session`` and the multi-device executor
  ask for: ``tfc.runtime.held`` is the mechanism, ``Program._held`` and
  ``Session.variables`` use it): the step copies nothing back, the device copies
  are authoritative, and ``read_back(names)`` makes host copies only when something
  reads the values (``Program.variables``, a checkpoint, another entry or backend).
  The multi-device executor applies a GPU stage's writes only once every device's
  stages succeeded (``commit=False``, then ``commit_writes``/``drop_writes``).
  Otherwise (``__call__``, a cluster task's executor) each updated variable
  is copied back to the host every step (for an MLP 784-512-512-10, 2.7 MB per step),
  queued with the fetches' copies into pinned memory and waited for by one
  synchronization. Either way a step is atomic: ops never write a variable's storage
  (the memory plan keeps variables out of the arena), the writes run last and their
  index checks (scatters) run before the first write, so a step that fails leaves the
  device copies as they were. An optimizer's writes are prepared library calls
  (``Device.writer``: a device copy, cuBLAS ``axpy``).
- **CUDA graphs** (``cuda_graphs``; ``$TFC_CUDA_GRAPHS=0`` turns them off): a binding
  whose actions only queue work on the stream (generated kernels, prepared cuBLAS calls
  and copies; fed labels checked on the host) is captured once, at its second step, and
  each later step launches the graph (``Device.capture``), its prepared writes a second
  one; cuBLAS calls are recorded through libcublas itself (``device.Prepared``: cupy
  refuses its own cuBLAS wrappers during a capture). Bindings with an op that allocates
  from cupy's pool (the library ops other than products: a graph would keep writing
  memory the pool has reused), reads the step number (random ops: a graph would replay
  one step's draw), synchronizes (host ops) or calls cuBLAS through cupy (the
  convolutions' GEMMs, ``cupy.matmul``: the capture fails, ``graph_problem``) run without
  a graph.
- **Feeds** are host arrays (copied into the binding's feed arrays by an asynchronous
  copy on the step's stream, ``Device.uploader``: straight from the caller's array, page-
  locked once, or through a page-locked staging buffer; the step waits for the copy
  before it returns, so the caller may then change its array) or arrays already on the device (``device_array_type``: ``cupy.ndarray`` on a
  GPU, copied on the device after the step's stream waits for the stream that made them).
- **The device** is the GPU the graph is placed on (``/gpu:N``: ``placed_gpu``), or for a
  graph placed on none ``$TFC_CUDA_DEVICE``'s (``device.cuda_device``).

The device is found when the executable is first called (``device.cuda_device()``), so
compiling needs no GPU and running without one says ``no CUDA device: ...``.
"""

from __future__ import annotations

import operator
import os
import threading
from functools import partial
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np

from tfc.backends.base import StepResult, checked_feeds
from tfc.backends.cuda.kernel import Kernel
from tfc.backends.cuda import library
from tfc.errors import ExecutionError, FeedError, TfcError
from tfc.ir.core import Graph, Module, Op, Value
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.registry import PURE, VIEW, lookup, writes_variable
from tfc.ir.types import format_shape

Action = Callable[[], None]  # one step's work of one op (prepared when binding)


class _Now:
    """What changes from step to step that a few actions read: the step number (random
    and host ops) and the arrays fed (class label checks read host feeds on the host)."""

    step: int = 0
    feeds: Sequence[Any] = ()


@dataclass
class CompileReport:
    """What compiling one entry did, for ``tfc compile`` reports and benchmarks."""

    graph: str
    kernels: int = 0
    fallback_ops: list[str] = field(default_factory=list)
    host_ops: list[str] = field(default_factory=list)
    ptx_bytes: int = 0
    arch: str = ""
    seconds: dict[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        times = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.seconds.items())
        if self.fallback_ops:
            return (f"cuda @{self.graph}: runs on the reference backend (unsupported: "
                    f"{', '.join(self.fallback_ops)}); {times}")
        host = f", on the host: {', '.join(self.host_ops)}" if self.host_ops else ""
        ptx = f"PTX {self.ptx_bytes} bytes for {self.arch}" if self.ptx_bytes else \
            "no PTX (NVRTC absent: compiled when first run)"
        return f"cuda @{self.graph}: {self.kernels} kernels, {ptx}{host}; {times}"


@dataclass
class _DeviceVar:
    """A variable's device storage and the host array it was last equal to."""

    array: Any
    host: np.ndarray | None  # the host array that holds the same value (identity check)


@dataclass
class _Bound:
    """Everything that depends on one tuple of feed shapes."""

    feeds: list[Any]  # device arrays the feeds are copied into
    stagers: list[Callable[[np.ndarray], Any]]  # host feed -> feeds[i] (``uploader``)
    actions: list[Action]
    fetches: list[Any]  # device arrays of the results
    # (variable, op kind, operand arrays, whether an operand is a variable's storage)
    updates: list[tuple[str, str, list[Any], bool]]
    keep: list[Any]  # the arena and anything else the views need alive
    # the updates as prepared in-place writes, when each is a plain assign/add/sub of
    # a value that is no variable's storage (an optimizer's); else None (``_update``)
    writes: list[Action] | None = None
    # class-label checks run on the device, read once when the step's actions are done
    label_checks: list["_DeviceLabelCheck"] = field(default_factory=list)
    # CUDA graphs (``CUDAExecutable.cuda_graphs``): the actions' device work in order,
    # when every action only queues work on the stream or checks fed labels
    # (``host_checks``: their host part runs before each launch); else None
    device_actions: list[Action] | None = None
    host_checks: list["_FedLabelCheck"] = field(default_factory=list)
    # the captured actions, one graph per pattern of feeds on the device (a fed label's
    # check kernel is in the graph only for a device feed), launched as one call
    replays: dict[tuple[bool, ...], Action] = field(default_factory=dict)
    warmed: set[tuple[bool, ...]] = field(default_factory=set)  # patterns run once
    write_replay: Action | None = None  # the captured ``writes``


@dataclass
class _DeviceLabelCheck:
    """A class-label check queued on the device (``codegen_conv.label_check_kernel``):
    ``found`` receives the first bad label's flat index (or -1) and the label, which the
    step reads once its actions are queued; ``armed`` while this step launched it."""

    found: Any
    op: Op
    name: str
    depth: int
    shape: tuple[int, ...]
    armed: bool = False

    def error(self, found: np.ndarray) -> TfcError | None:
        """The reference's error for what the kernel found, or None (all in range)."""
        from tfc.ops.array import label_error
        self.armed = False
        if int(found[0]) < 0:
            return None
        where = [int(i) for i in np.unravel_index(int(found[0]), self.shape)]
        return ExecutionError(label_error(self.name, int(found[1]), where, self.depth),
                              self.op.loc)


class CUDAExecutable:
    """A compiled entry: call it with feeds (argument order), variables and the step."""

    def __init__(self, module: Module, graph: Graph, kernels: Mapping[int, Kernel],
                 ptx: str | None, arch: str, report: CompileReport) -> None:
        self.module, self.graph = module, graph
        self.kernels = dict(kernels)  # op position in graph.ops -> its kernel
        self.ptx, self.arch, self.report = ptx, arch, report
        self.fallback_ops: list[str] = list(report.fallback_ops)
        self.plan: Any = module.memory_plans.get(graph.name)
        self._lock = threading.Lock()
        self._device: Any = None
        self._handle: Any = None
        self._bindings: dict[tuple, _Bound] = {}
        self._last: _Bound | None = None
        self._vars: dict[str, _DeviceVar] = {}
        self._constants: dict[Value, Any] = {}
        self._now = _Now()
        self._synced: list[np.ndarray] | None = None  # see fast_step
        self._uncommitted: _Bound | None = None  # a step's writes not applied yet
        # Replay each binding's steps as a captured CUDA graph (``_replayed``): on unless
        # ``$TFC_CUDA_GRAPHS=0`` (an H200: the MLP step 1.46x faster with host feeds,
        # 1.92x with device feeds, a chain of 40 short layers 3.35x, bit for bit:
        # tools/gpu_state_check.py); ``graph_problem`` says why a capture failed.
        self.cuda_graphs = os.environ.get("TFC_CUDA_GRAPHS", "1") != "0"
        self.graph_problem: str | None = None
        self.graph_launches = 0  # steps replayed as a graph (tools report it)
        # ``fast_step`` takes host feeds that are not C-contiguous: each is staged into
        # its pinned buffer by one strided copy (``Device.uploader``), not first made
        # contiguous by the runtime (a second pass over fresh memory)
        self.takes_strided_feeds = True
        self._arg_dtypes = [np.dtype(a.dtype.np) for a in graph.args]
        # the N of the /gpu:N the graph's ops are placed on (None: no GPU named; the
        # device is then $TFC_CUDA_DEVICE's, see ``device.cuda_device``)
        self.device_index: int | None = placed_gpu(module, graph)
        # The variables the step touches; those it reads (``var_names``: the runtime's
        # fast path passes their values in this order) and writes (``update_names``).
        touched: dict[str, None] = {}
        reads: dict[str, None] = {}
        writes: list[str] = []
        for op in graph.ops:
            if op.kind == "var.read" or writes_variable(op):
                touched[op.attrs["var"]] = None
                if op.kind != "var.assign":
                    reads[op.attrs["var"]] = None
                if writes_variable(op):
                    writes.append(op.attrs["var"])
        self._var_names = list(touched)
        self.var_names: list[str] = list(reads)
        self.update_names: list[str] = writes

    # ---- running ------------------------------------------------------------------------

    def __call__(self, feeds: Sequence[np.ndarray], variables: Mapping[str, np.ndarray],
                 step: int) -> StepResult:
        if self.fallback_ops:
            ctx = ExecContext(variables, step)
            return StepResult(run_graph(self.graph, feeds, ctx), ctx.updates)
        return self._step(checked_feeds(self.graph, feeds, self._arg_dtypes), variables, step)

    def fast_step(self, feeds: Sequence[Any], variables: Sequence[np.ndarray],
                  step: int, validate: Callable[[Sequence[Any]], Any] | None = None,
                  in_place: bool = False, defer: bool = False, commit: bool = True
                  ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        """The step for a caller that vouches for its inputs (``tfc.runtime.runner``):
        feeds of the arguments' dtypes (numpy arrays, C-contiguous or not:
        ``takes_strided_feeds``; or arrays of ``device_array_type``), ``variables`` the values of ``var_names``. Feed shapes
        are checked by ``validate`` the first time they are seen. Returns the fetches
        and the updates in ``update_names`` order, fresh host arrays; with ``defer``
        the updates stay on the device (``None`` is returned for them): the caller
        then passes the same host arrays again for the variables this executable
        updated, and asks ``read_back`` for their values. With ``defer`` and not
        ``commit`` (the multi-device executor, whose other devices may still fail the
        step) the writes are checked but wait for ``commit_writes`` (or
        ``drop_writes``): the step is atomic across devices."""
        if validate is not None and tuple(a.shape for a in feeds) not in self._bindings:
            validate(feeds)
        synced = self._synced  # the very arrays of the last fast step: nothing to upload
        current = synced is not None and len(synced) == len(variables) and \
            all(map(operator.is_, variables, synced))
        self._synced = None
        result = self._step(feeds, dict(zip(self.var_names, variables)), step, defer,
                            current, commit or not defer)
        self._synced = list(variables)
        if defer:
            return result.fetches, None
        return result.fetches, [result.updates[n] for n in self.update_names]

    def commit_writes(self) -> None:
        """Apply the variable writes of the last step, run with ``commit=False``."""
        with self._lock:
            bound, self._uncommitted = self._uncommitted, None
            if bound is None:
                return
            dev = self._device
            with dev.lock:
                if dev.emulated:
                    self._update(bound, checked=True)
                else:
                    with dev:
                        self._update(bound, checked=True)

    def drop_writes(self) -> None:
        """Forget the writes of the last step run with ``commit=False`` (the step failed
        elsewhere): the device copies keep the values they had before it."""
        with self._lock:
            self._uncommitted = None

    def read_back(self, names: Sequence[str]) -> list[np.ndarray]:
        """Host copies (read-only) of the device values of variables ``names`` (each one
        this executable holds: it wrote it in a deferred step). Passing these very
        arrays back as the variables' values uploads nothing."""
        with self._lock:
            dev = self._device
            self._synced = None
            held = [self._vars[name] for name in names]
            with dev.lock:
                out = dev.to_host_later([dv.array for dv in held])  # one synchronization
                dev.synchronize()
            for dv, host in zip(held, out):
                host.flags.writeable = False
                dv.host = host
            return out

    def share_variables(self, pool: dict[str, Any]) -> None:
        """Keep the device copies of variables in ``pool``, shared with the other
        executables given it (the stages of one GPU in the multi-device executor, which
        commits their writes only after all of them ran): what one writes is what the
        others read next, with no copy. Before the first step."""
        with self._lock:
            pool.update(self._vars)
            self._vars = pool

    def device_array_type(self) -> type | None:
        """The type of the device's arrays that steps take as feeds without a host round
        trip (``cupy.ndarray`` on a GPU, ``device.EmulatedArray`` under the emulator).
        Finds the device (``no CUDA device: ...`` when there is none)."""
        with self._lock:
            return self._ready().array_type

    def _step(self, arrays: Sequence[Any], variables: Mapping[str, np.ndarray],
              step: int, defer: bool = False, current: bool = False, commit: bool = True
              ) -> StepResult:
        """One step; ``current``: the device copies are known to hold ``variables``;
        ``commit``: apply its writes (else ``commit_writes`` does, for a deferred step)."""
        with self._lock:
            dev = self._ready()
            with dev.lock:
                return self._step_locked(dev, arrays, variables, step, defer, current, commit)

    def _step_locked(self, dev: Any, arrays: Sequence[Any], variables: Mapping[str, np.ndarray],
                     step: int, defer: bool, current: bool, commit: bool) -> StepResult:
        """``_step`` holding the executable's lock and the device's (``Device.lock``: one
        thread at a time queues work on the device's stream)."""
        if not current:
            self._synced = None
            self._sync_variables(variables)
        key = tuple(a.shape for a in arrays)
        bound = self._bindings.get(key)
        if bound is None:
            bound = self._bindings[key] = self._bind(key)
        self._last = bound
        now = self._now
        now.step, now.feeds = step, arrays
        on_device = dev.array_type
        reading = []  # copies still reading host feeds (``Device.uploader``)
        for buf, stage, f in zip(bound.feeds, bound.stagers, arrays):
            if type(f) is on_device:
                dev.copy_on_device(buf, f)
            else:
                reading.append(stage(f))
        try:
            if not dev.emulated:
                with dev:
                    result = self._run(bound, step, defer, commit)
            else:
                result = self._run(bound, step, defer, commit)
        finally:  # the caller may change its arrays once the step returns
            for copy in reading:
                if copy is not None:
                    copy.synchronize()
        if defer and not current:  # the device copies are newer than the arrays passed
            for name, *_ in bound.updates:
                if name in variables:  # (one it does not read: what another passed)
                    self._vars[name].host = variables[name]
        return result

    def _run(self, bound: _Bound, step: int, defer: bool = False, commit: bool = True
             ) -> StepResult:
        """The step's actions, then its variable writes, then (unless ``defer``) the
        updated variables' host copies. A failure leaves the device copies as they were
        (nothing before the writes touches them; the writes' checks come first)."""
        dev = self._device
        if not (self.cuda_graphs and self._replayed(bound)):
            for act in bound.actions:
                act()
        # Copies queued before the variable writes read the start-of-step values;
        # one synchronization waits for all of them.
        fetches = dev.to_host_later(bound.fetches)
        synced = _checked_labels(dev, bound.label_checks)  # (before any variable write)
        self._uncommitted = None
        if commit:
            self._update(bound)
        else:
            self._check_writes(bound)
            self._uncommitted = bound
        if defer:
            if bound.fetches and not synced:  # (else nothing waits: the next read or
                dev.synchronize()             # step is queued after)
            return StepResult(fetches, {})
        names = [u[0] for u in bound.updates]
        hosts = dev.to_host_later([self._vars[n].array for n in names])
        dev.synchronize()
        updates: dict[str, np.ndarray] = {}
        for name, host in zip(names, hosts):
            host.flags.writeable = False  # as the runtime stores it: see _sync_variables
            self._vars[name].host = host
            updates[name] = host
        return StepResult(fetches, updates)

    def _replayed(self, bound: _Bound) -> bool:
        """Run the step's actions as one captured CUDA graph (``cuda_graphs``), when the
        binding's actions allow it (``_Bound.device_actions``); whether it did. Each
        pattern of feeds on the device first runs once without (it loads kernels and
        makes library handles), then is captured and replayed; the binding's writes,
        where they are prepared calls, are captured with the first. A capture that
        fails says why in ``graph_problem`` and the binding runs without a graph."""
        if bound.device_actions is None:
            return False
        dev = self._device
        on_device = dev.array_type
        pattern = tuple(type(f) is on_device for f in self._now.feeds)
        replay = bound.replays.get(pattern)
        if replay is None and pattern not in bound.warmed:
            bound.warmed.add(pattern)
            return False
        for check in bound.host_checks:  # (a bad label raises before any device work)
            check.host_part()
        if replay is None:
            try:
                replay = bound.replays[pattern] = dev.capture(bound.device_actions)
                if bound.writes is not None and bound.write_replay is None:
                    bound.write_replay = dev.capture(bound.writes)
            except Exception as e:  # noqa: BLE001  (what the driver or cupy refused)
                self.graph_problem = f"{type(e).__name__}: {e}"
                bound.device_actions, bound.replays = None, {}
                return False
        replay()
        self.graph_launches += 1
        return True

    def _check_writes(self, bound: _Bound) -> None:
        """The checks of the step's writes (scatter rows in range), before any write."""
        if bound.writes is None:
            for name, kind, ops, _ in bound.updates:
                if kind in ("var.scatter_add", "var.scatter_sub"):
                    library.check_scatter_rows(self._vars[name].array, ops[0], kind)

    def _update(self, bound: _Bound, checked: bool = False) -> None:
        """Apply the step's variable writes to the device copies. Writes whose operand is
        a variable's own storage (``assign @a, read @b``) are computed into temporaries
        first, so every write sees the start-of-step values; the others (an optimizer's
        ``assign_sub`` of an arena value) update the variable in place."""
        if bound.write_replay is not None:
            bound.write_replay()
            return
        if bound.writes is not None:
            for write in bound.writes:
                write()
            return
        xp = self._device.xp
        if not checked:  # checks first: no write of a failing step
            self._check_writes(bound)
        later = []
        for name, kind, ops, reads_state in bound.updates:
            if reads_state:
                later.append((name, _written(xp, kind, self._vars[name].array.copy(), ops)))
        for name, kind, ops, reads_state in bound.updates:
            if not reads_state:
                _written(xp, kind, self._vars[name].array, ops)
        for name, value in later:
            self._vars[name].array[...] = value

    def _ready(self) -> Any:
        """The device, with this entry's kernels loaded (first call only). PTX is made
        here when compiling had no NVRTC, or when it targets a newer architecture than
        the GPU's (``compute_90`` PTX does not load on an ``sm_80`` device)."""
        if self._device is None:
            from tfc.backends.cuda.device import GpuDevice, cuda_device
            dev = cuda_device(self.device_index)
            if self.kernels and isinstance(dev, GpuDevice):
                own = f"compute_{dev.compute_capability}"
                if self.ptx is None or _arch_number(self.arch) > _arch_number(own):
                    from tfc.backends.cuda.kernel import module_source
                    from tfc.backends.cuda.nvrtc import compile_ptx
                    self.arch = own
                    self.ptx = compile_ptx(module_source(self._kernel_list()), arch=own)
            self._handle = dev.load(self._kernel_list(), self.ptx or "") \
                if self.kernels else None
            self._device = dev
        return self._device

    def _kernel_list(self) -> list[Kernel]:
        return [self.kernels[i] for i in sorted(self.kernels)]

    def _sync_variables(self, variables: Mapping[str, np.ndarray]) -> None:
        """Upload each variable the step uses unless its device copy is current: the
        host array passed is the very read-only array this executable returned."""
        dev = self._device
        for name in self._var_names:
            host = variables.get(name)
            dv = self._vars.get(name)
            if host is None:
                if name in self.var_names:
                    raise ExecutionError(f"variable @{name} is not initialized")
                continue
            if dv is not None and dv.host is host and not host.flags.writeable:
                continue
            decl = self.module.variables[name]
            arr = np.require(host, requirements="C")  # (keeps 0-d arrays 0-d)
            if arr.dtype != decl.type.dtype.np or arr.ndim != decl.type.rank:
                raise ExecutionError(f"variable @{name} is {arr.dtype}"
                                     f"{format_shape(arr.shape)}, expected {decl.type}")
            if dv is not None and dv.array.shape == arr.shape:
                dev.upload(dv.array, arr)
                dv.host = host
            else:
                self._vars[name] = _DeviceVar(dev.to_device(arr), host)
                self._bindings.clear()  # bound views of the old storage

    # ---- bindings -----------------------------------------------------------------------

    def _bind(self, feed_shapes: tuple) -> _Bound:
        """The storage and actions for one tuple of feed shapes."""
        from tfc.backends.binding import bind
        g, dev, plan = self.graph, self._device, self.plan
        xp = dev.xp
        for a, s in zip(g.args, feed_shapes):
            if len(s) != a.type.rank or any(isinstance(d, int) and d != n
                                             for d, n in zip(a.type.shape, s)):
                raise FeedError(f"feed '{a.name}' has shape {format_shape(s)}, expected {a.type}")
        binding = bind(self.module, g, feed_shapes)
        syms = binding.symbols

        def nbytes(v: Value) -> int:
            return binding.size(v) * v.dtype.itemsize

        offsets = plan.offsets(syms, nbytes)
        total = plan.arena_bytes(syms, nbytes)
        arena = dev.empty((max(total, 1),), np.uint8)
        keep: list[Any] = [arena]
        start = {b.id: o for b, o in zip(plan.buffers, offsets)}
        store: dict[Value, Any] = {}

        def at(v: Value, root: Any) -> Any:
            return root.reshape(binding.shape(v)) if root.shape != binding.shape(v) else root

        feeds = []
        for a in g.args:
            store[a] = dev.empty(binding.shape(a), a.dtype.np)
            feeds.append(store[a])
        for name in self._var_names:
            if name not in self._vars:  # written, never read: storage to copy into
                decl = self.module.variables[name]
                self._vars[name] = _DeviceVar(dev.empty(decl.type.static_shape,
                                                        decl.type.dtype.np), None)

        def storage(v: Value) -> Any:
            """The device array holding ``v`` (its arena slot, or one of its own)."""
            root = plan.root(v)
            if root is not v and root in store:
                return at(v, store[root])
            buf = plan.buffer_of.get(root)
            if buf is None:
                return dev.empty(binding.shape(v), v.dtype.np)
            n = nbytes(v)
            raw = arena[start[buf]:start[buf] + n]
            return raw.view(v.dtype.np).reshape(binding.shape(v))

        actions: list[Action] = []
        # each action's kind for CUDA graphs: "device" (work on the stream alone), "label"
        # (a check of fed labels: on the host for a host feed), "other" (allocates, reads
        # the step number, or synchronizes: the step then runs without a graph)
        kinds: list[str] = []
        updates: list[tuple[str, str, list[Any], bool]] = []
        state: set[Value] = set()  # values that are variables' storage (reads, their views)
        known, needed = _known_at_bind(g, binding)
        checks: list[_DeviceLabelCheck] = []
        fetched = set(g.results)
        fetched_copies: dict[Value, Any] = {}  # fetched views copied out of the arena
        for i, op in enumerate(g.ops):
            kind = op.kind
            if kind != "constant" and op.results and all(r in known for r in op.results):
                # computed now (shape arithmetic: a mean's count); only what device work
                # reads or the step fetches is copied into its slot, every step
                vals = [r for r in op.results if r in needed]
                outs = [storage(r) for r in vals]
                for r, o in zip(vals, outs):
                    store[r] = o
                if vals:
                    actions.append(_copy_action([dev.to_device(known[r]) for r in vals], outs))
                    kinds.append("device")
                continue
            if kind == "var.read":
                store[op.result] = self._vars[op.attrs["var"]].array
                state.add(op.result)
                continue
            if kind == "constant":
                c = self._constants.get(op.result)
                if c is None:
                    c = self._constants[op.result] = dev.to_device(
                        np.asarray(op.attrs["value"], dtype=op.result.dtype.np))
                store[op.result] = c
                continue
            if writes_variable(op):
                updates.append((op.attrs["var"], kind, [store[v] for v in op.inputs],
                                any(v in state for v in op.inputs)))
                continue
            if lookup(kind).has(VIEW):
                store[op.result] = store[op.inputs[0]].reshape(binding.shape(op.result))
                if op.inputs[0] in state:
                    state.add(op.result)
                if op.result in fetched and plan.buffer(op.result) is not None:
                    # a fetched view of an arena value: the plan keeps its storage only
                    # until the view's last use, so it is copied out now (as the llvm
                    # backend does), not read at the end of the step from a reused slot
                    out = dev.empty(binding.shape(op.result), op.result.dtype.np)
                    actions.append(_copy_action([store[op.result]], [out]))
                    kinds.append("device")
                    fetched_copies[op.result] = out
                continue
            ins = [store[v] for v in op.inputs]
            outs = [storage(r) for r in op.results]
            for r, o in zip(op.results, outs):
                store[r] = o
            if kind == "fusion":
                for act, check_kind in _label_checks(dev, op, ins, g.args, self._now,
                                                     checks):
                    actions.append(act)
                    kinds.append(check_kind)
                actions.append(self._launcher(self.kernels[i], ins, outs, syms))
                kinds.append("device")
                continue
            prepare = library.PREPARED.get(kind)
            if prepare is not None:  # conv/pool: generated kernels and GEMMs, bound now
                actions.append(_prepared_action(prepare, dev, op, ins, outs))
                kinds.append("device")
                continue
            how = library.how_to_run(kind)
            gemm = _gemm_action(dev, op, ins, outs[0]) if kind == "matmul" else None
            kinds.append("device" if gemm is not None else "other")
            if gemm is not None:
                actions.append(gemm)
            elif how == "library":
                actions.append(_library_action(xp, library.LIBRARY[kind], op, ins, outs))
            elif how == "random" and i in self.kernels:
                actions.append(_random_kernel_action(dev, self._handle, self.kernels[i],
                                                     outs[0], binding.size(op.result),
                                                     self._now))
            elif how == "random":
                shape = binding.shape(op.result)
                actions.append(_random_action(xp, op, shape, outs[0], self._now))
            else:  # "host": the registry reference on host copies
                actions.append(_host_action(dev, op, ins, outs, self._now))
        fetches = [fetched_copies.get(v, store[v]) for v in g.results]
        stagers = [dev.uploader(f) for f in feeds]
        bound = _Bound(feeds, stagers, actions, fetches, updates, keep,
                       _prepared_writes(dev, updates, self._vars), checks)
        assert len(kinds) == len(actions)  # (one kind per action)
        if all(k in ("device", "label") for k in kinds):
            bound.device_actions = [a if k == "device" else cast(_FedLabelCheck, a).device_part
                                    for a, k in zip(actions, kinds)]
            bound.host_checks = [cast(_FedLabelCheck, a) for a, k in zip(actions, kinds)
                                 if k == "label"]
        return bound

    def _launcher(self, kernel: Kernel, ins: list[Any], outs: list[Any],
                  syms: Mapping[str, int]) -> Action:
        """The kernel's launch with everything prepared (``Device.launcher``); a kernel
        with ``scratch_bytes`` gets its own zeroed scratch, for this binding."""
        scratch = []
        if kernel.launch.scratch_bytes:
            scratch.append(self._device.to_device(np.zeros(kernel.launch.scratch_bytes,
                                                           np.uint8)))
        args = (*ins, *outs, *scratch, *(np.int64(syms[s]) for s in kernel.symbols))
        return self._device.launcher(self._handle, kernel, kernel.launch.grid(syms),
                                     kernel.launch.block, kernel.launch.shared_bytes, args)

    # ---- what tools ask ------------------------------------------------------------------

    @property
    def arena_bytes(self) -> int:
        """Device arena size of the binding the latest step ran with (0 before the first
        step and for a reference fallback): what the tracer's memory figure reads."""
        return 0 if self._last is None else int(self._last.keep[0].size)

    def __repr__(self) -> str:
        return f"<CUDAExecutable @{self.graph.name}: {self.report}>"


def placed_gpu(module: Module, graph: Graph) -> int | None:
    """The index N of the GPU ``graph`` runs on: the ``/gpu:N`` its ops are placed on
    (the placer's or the user's ``device`` scope; ops placed nowhere count as the
    module's first device), else the only GPU among the module's devices; None when
    neither names one GPU. Ops placed on two GPUs are an error: one executable runs on
    one device (the partition pass gives each device its own graphs)."""
    from tfc.devices import parse_device
    default = module.devices[0] if module.devices else None
    placed = {d for d in (op.device or default for op in graph.ops) if d is not None}
    gpus = {parse_device(d).index for d in placed if parse_device(d).kind == "gpu"}
    if not gpus:
        gpus = {parse_device(d).index for d in module.devices
                if parse_device(d).kind == "gpu"}
        if len(gpus) != 1:
            return None
    if len(gpus) > 1:
        raise ExecutionError(f"@{graph.name} has ops on several GPUs "
                             f"({', '.join(f'/gpu:{i}' for i in sorted(gpus))}); the cuda "
                             f"backend runs one graph on one GPU")
    return next(iter(gpus))


def _arch_number(arch: str) -> int:
    """90 for ``compute_90`` (and ``compute_90a``)."""
    digits = "".join(ch for ch in arch.removeprefix("compute_") if ch.isdigit())
    return int(digits or 0)


def _prepared_writes(dev: Any, updates: list[tuple[str, str, list[Any], bool]],
                     variables: Mapping[str, _DeviceVar]) -> list[Action] | None:
    """``updates`` as in-place calls bound to their arrays (what ``_update`` does for
    them): one library call each where the device has one (``Device.writer``: a copy,
    cuBLAS ``axpy``), else the array module's ufunc; None when one reads a variable's
    storage or is a scatter."""
    xp = dev.xp
    ufunc = {"var.assign_add": xp.add, "var.assign_sub": xp.subtract}
    writes: list[Action] = []
    for name, kind, ops, reads_state in updates:
        target = variables[name].array
        if reads_state or kind not in (*ufunc, "var.assign"):
            return None
        prepared = dev.writer(kind, target, ops[0])
        if prepared is not None:
            writes.append(prepared)
        elif kind == "var.assign":
            writes.append(partial(xp.copyto, target, ops[0]))
        else:
            writes.append(partial(ufunc[kind], target, ops[0], out=target))
    return writes


def _written(xp: Any, kind: str, target: Any, ops: list[Any]) -> Any:
    """``target`` (a variable's value) after the write ``kind`` of ``ops``, in place."""
    if kind == "var.assign":
        target[...] = ops[0]
    elif kind == "var.assign_add":
        xp.add(target, ops[0], out=target)
    elif kind == "var.assign_sub":
        xp.subtract(target, ops[0], out=target)
    else:  # var.scatter_add / var.scatter_sub
        library.scatter_rows(xp, target, ops[0], ops[1], kind,
                             1 if kind == "var.scatter_add" else -1)
    return target


def _label_checks(dev: Any, op: Op, ins: list[Any], args: Sequence[Value], now: _Now,
                  checks: list[_DeviceLabelCheck]) -> list[tuple[Action, str]]:
    """The checks of the class labels a fusion's kernel reads (``codegen.label_checks``):
    a label out of range is the reference's error, and the step changes nothing. Labels
    fed as a host array are checked on the host before the launch; labels on the device
    (fed as a device array, or computed) by a kernel queued before the launch, whose
    answer the step reads once, after its last action and before its variable writes
    (``_checked_labels``): a GPU step never stops midway for them. Each with its kind
    for CUDA graphs (``CUDAExecutable._bind``): ``label`` for fed labels."""
    from tfc.backends.cuda.codegen import label_checks
    from tfc.backends.cuda.codegen_conv import INTS, label_check_kernel
    from tfc.backends.cuda.conv import launcher
    from tfc.ir.types import DType
    out: list[tuple[Action, str]] = []
    for c in label_checks(op):
        labels, depth, name = ins[c.operand], c.depth, c.op
        fed = args.index(op.inputs[c.operand]) if op.inputs[c.operand] in args else None
        where = _label_op(op, c.operand, name)
        dtype = DType.from_numpy(labels.dtype)
        if labels.size == 0:
            continue  # (no label to check)
        if dtype not in INTS:  # (labels of a type the check kernel lacks: on the host)
            out.append((partial(_host_label_check, labels, name, depth, where), "other"))
            continue
        found = dev.empty((2,), np.int64)
        chk = _DeviceLabelCheck(found, where, name, depth, tuple(labels.shape))
        checks.append(chk)
        kernel = label_check_kernel(dtype)
        launch = launcher(dev, [kernel], kernel.name, 1, (labels, found, np.int64(labels.size),
                                                          np.int64(depth)))

        if fed is None:  # (labels computed on the device: the kernel, every step)
            def check(launch: Action = launch, chk: _DeviceLabelCheck = chk) -> None:
                launch()
                chk.armed = True
            out.append((check, "other"))
        else:
            out.append((_FedLabelCheck(launch, name, depth, fed, chk, where, now,
                                       dev.array_type), "label"))
    return out


@dataclass
class _FedLabelCheck:
    """The check of class labels fed to the step: on the host for a host feed (before
    any device work), by the check kernel (``_DeviceLabelCheck``) for a device feed.
    Called, it does either; a CUDA graph (``CUDAExecutable._replayed``) captures
    ``device_part`` (the kernel's launch, for a device feed) and runs ``host_part`` before
    each launch of the graph (the host check, or arming the kernel's answer)."""

    launch: Action
    name: str
    depth: int
    fed: int
    chk: _DeviceLabelCheck
    where: Op
    now: _Now
    device_type: type

    def __call__(self) -> None:
        self.host_part()
        self.device_part()

    def on_device(self) -> bool:
        return type(self.now.feeds[self.fed]) is self.device_type

    def host_part(self) -> None:
        from tfc.ops.array import check_labels
        if self.on_device():
            self.chk.armed = True
            return
        self.chk.armed = False
        try:  # a host feed: checked where it is
            check_labels(self.name, np.asarray(self.now.feeds[self.fed]), self.depth)
        except TfcError as e:
            raise e.at(self.where.loc)

    def device_part(self) -> None:
        if self.on_device():
            self.launch()


def _host_label_check(labels: Any, name: str, depth: int, where: Op) -> None:
    """Labels checked on the host (a synchronization on a GPU)."""
    from tfc.ops.array import check_labels
    if bool(((labels < 0) | (labels >= depth)).any()):
        try:
            check_labels(name, labels if isinstance(labels, np.ndarray) else labels.get(),
                         depth)
        except TfcError as e:
            raise e.at(where.loc)


def _label_op(fusion: Op, operand: int, name: str) -> Op:
    """The checking ``one_hot`` in ``fusion``'s region that reads operand ``operand`` as
    labels of ``name``: its location is the loss's, which the reference's error names."""
    region = fusion.regions[0]
    for o in region.ops:
        if o.kind == "one_hot" and o.attrs.get("labels_of") == name and \
                o.inputs[0] is region.args[operand] and o.loc is not None:
            return o
    return fusion


def _checked_labels(dev: Any, checks: Sequence[_DeviceLabelCheck]) -> bool:
    """Read the answers of the label checks this step queued on the device (one
    synchronization, which the fetches' copies queued before share) and raise the first
    check's error; whether it synchronized."""
    armed = [c for c in checks if c.armed]
    if not armed:
        return False
    found = dev.to_host_later([c.found for c in armed])
    dev.synchronize()
    errors = [c.error(f) for c, f in zip(armed, found)]
    for e in errors:
        if e is not None:
            raise e
    return True


def _gemm_action(dev: Any, op: Op, ins: list[Any], out: Any) -> Action | None:
    """A float ``matmul`` as one prepared cuBLAS call writing its storage
    (``Device.gemm``: no allocation, no copy, the transposes as flags; f16 with f32
    accumulation and one rounding), or None for what one call cannot do (integers,
    broadcast batches, empty dims: ``library.LIBRARY``'s matmul runs those)."""
    from tfc.backends.cuda.gemm import gemm_plan
    a, b = ins
    if np.dtype(out.dtype) not in (np.float16, np.float32, np.float64) or \
            not all(x.flags.c_contiguous for x in (a, b, out)):
        return None
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    plan = gemm_plan(a.shape, b.shape, ta, tb)
    if plan is None:
        inner_a = a.shape[-2] if ta else a.shape[-1]
        inner_b = b.shape[-1] if tb else b.shape[-2]
        if inner_a != inner_b:
            raise ExecutionError(f"matmul: inner dims {inner_a} and {inner_b} differ at "
                                 f"run time", op.loc)
        return None
    if plan.out_shape != tuple(out.shape):
        return None
    return dev.gemm(plan, a, b, out)


def _random_kernel_action(dev: Any, handle: Any, kernel: Kernel, out: Any, n: int,
                          now: _Now) -> Action:
    """A random op as its one Philox kernel (``codegen_random``): the launch prepared but
    for the step, which changes every step."""
    from tfc.backends.cuda.codegen_random import launch_args
    grid = kernel.launch.grid({"n": n})
    block, launch = kernel.launch.block, dev.launch

    def run() -> None:
        launch(handle, kernel, grid, block, 0, launch_args(out, n, now.step))
    return run


def _prepared_action(prepare: library.Preparer, dev: Any, op: Op, ins: list[Any],
                     outs: list[Any]) -> Action:
    """A ``library.PREPARED`` op bound to this binding's arrays (its errors: the op's)."""
    try:
        return prepare(dev, ins, outs, op.attrs)[1]
    except TfcError as e:
        raise e.at(op.loc)


def _random_action(xp: Any, op: Op, shape: tuple[int, ...], out: Any, now: _Now) -> Action:
    kind, attrs = op.kind, op.attrs

    def run() -> None:
        out[...] = library.sample(xp, kind, attrs, shape, now.step)
    return run


def _library_action(xp: Any, fn: library.LibraryFn, op: Op, ins: list[Any],
                    outs: list[Any]) -> Action:
    attrs = op.attrs

    def run() -> None:
        try:
            vals = fn(xp, ins, attrs)
        except TfcError as e:
            raise e.at(op.loc)
        for o, val in zip(outs, vals):
            o[...] = val
    return run


# Values computed when a binding is made are small: shapes and what is computed from them.
KNOWN_MAX_ELEMENTS = 1 << 12


def _known_at_bind(g: Graph, binding: Any) -> tuple[dict[Value, np.ndarray], set[Value]]:
    """The values of ``g`` known once the feed shapes are (``BY_BINDING`` ops such as
    ``shape``, constants, and small pure ops of known values, e.g. a mean's count
    ``prod(gather(shape(x), 0))``), computed on the host by the registry reference; and
    the values device work reads or the step fetches (``needed``). Computing them here
    keeps them off the device's path: a ``gather`` of a shape would otherwise check its
    indices, synchronizing with the GPU, every step."""
    known: dict[Value, np.ndarray] = {}
    done: set[Op] = set()
    for op in g.ops:
        opdef = lookup(op.kind)
        if op.kind == "constant":
            ins: list[np.ndarray] | None = []
        elif library.how_to_run(op.kind) == "binding":  # shapes and attrs alone
            ins = [np.empty(binding.shape(v), v.dtype.np) for v in op.inputs]
        elif op.regions or op.kind == "fusion" or not opdef.has(PURE) or not op.results \
                or not all(v in known for v in op.inputs) \
                or any(binding.size(r) > KNOWN_MAX_ELEMENTS for r in op.results):
            ins = None
        else:
            ins = [known[v] for v in op.inputs]
        if ins is None:
            continue
        try:
            vals = opdef.reference(None, ins, op.attrs)
        except TfcError as e:
            raise e.at(op.loc)
        except (ArithmeticError, ValueError, IndexError) as e:
            raise ExecutionError(f"{op.kind} failed: {e}", op.loc) from e
        if isinstance(vals, np.ndarray):
            vals = [vals]
        for r, val in zip(op.results, vals):
            known[r] = np.asarray(val, dtype=r.dtype.np)
        done.add(op)
    needed = {v for op in g.ops if op not in done for v in op.inputs} | set(g.results)
    return known, needed


def _copy_action(sources: list[Any], outs: list[Any]) -> Action:
    """Copy per-binding values into their storage (an arena slot other values reuse)."""
    def run() -> None:
        for o, src in zip(outs, sources):
            o[...] = src
    return run


def _host_action(dev: Any, op: Op, ins: list[Any], outs: list[Any], now: _Now) -> Action:
    opdef = lookup(op.kind)

    def run() -> None:
        host = [dev.to_host(a) for a in ins]
        try:
            vals = opdef.reference(ExecContext({}, now.step), host, op.attrs)
        except TfcError as e:
            raise e.at(op.loc)
        except (ArithmeticError, ValueError, IndexError, np.linalg.LinAlgError) as e:
            raise ExecutionError(f"{op.kind} failed: {e}", op.loc) from e
        for o, val in zip(outs, vals):
            dev.upload(o, np.asarray(val, o.dtype))
    return run
