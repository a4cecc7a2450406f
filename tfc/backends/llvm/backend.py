"""The LLVM CPU backend: a graph compiled to native code with one entry point.

Pipeline of ``LLVMBackend.compile(module, entry)``:

1. **Passes.** Unless the module already carries a memory plan for the entry, a copy of
   the entry graph goes through ``fusion`` and ``memory`` (when those passes exist;
   without ``memory`` the backend plans one arena buffer per value itself). The caller's
   module is never changed.
2. **Lowering.** Every op becomes kernel functions in one LLVM module (``kernels``),
   called in schedule order by ``tfc_entry`` (``entry``). Ops the backend cannot lower
   are collected: if there is any, the executable runs the whole graph on the reference
   interpreter, lists them in ``fallback_ops`` and warns (never silently).
3. **Code.** The module is optimized at O3 for the host CPU (new pass manager), compiled
   to object code, and loaded into MCJIT with the BLAS symbols bound. Object code is
   cached on disk by a hash of the IR and the host (``jit``), so compiling the same graph
   again skips LLVM entirely; ``object_code`` and ``LLVMBackend.load`` let an artifact
   carry it.

A step (``LLVMExecutable.__call__``) is one call into native code: Python checks the
feeds, finds the *binding* for their shapes (concrete shapes of every value, run-time
params, the arena: computed once per distinct feed shapes and reused), allocates the
fetches and variable updates (numpy), fills one pointer array and calls ``tfc_entry``.
Steps allocate nothing but their outputs.

Threads: kernels whose outermost loop is large enough are split across pthreads
started by the native code itself (``parallel``; ``threads``, ``TFC_NUM_THREADS``,
``TFC_PARALLEL_MIN``); BLAS uses OpenBLAS's own pool.

Choices where the design left room:

- Fallback is per graph, never per op: one unsupported op (today ``max_pool_grad_grad``
  and integer matmul/convolution) sends the whole graph to the reference backend, named
  in ``fallback_ops``, ``report`` and a warning.
- Run-time checks native code relies on: feed dtypes and shapes (per call; shapes once
  per binding), symbols consistent across feeds, symbolic dims never broadcast at run
  time, variables' dtype and shape. Index errors (``gather``, ``scatter``, labels) and
  integer division by zero are error codes turned into ``ExecutionError``.
- ``load`` (object code from an artifact) lowers the graph again in Python to rebuild
  the run-time tables (params, storage layout, error messages): deterministic, a few
  tens of milliseconds, and no LLVM work; the host key guards against foreign CPUs.
- ``profile=True`` makes the entry call back into Python between kernels
  (``profile_report``): a debugging aid, off by default.
"""

from __future__ import annotations

import ctypes
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from tfc.backends.base import StepResult
from tfc.backends.llvm import jit
from tfc.backends.llvm.blas import register_symbols
from tfc.backends.llvm.context import Binding
from tfc.backends.llvm.entry import ENTRY, GraphCompiler, TrivialPlan, trivial_plan
from tfc.backends.llvm.kernels_scalar import Unsupported
from tfc.backends.llvm.shapes import bind
from tfc.errors import ArtifactError, ExecutionError, FeedError, TfcError
from tfc.ir.core import Graph, Module
from tfc.ir.types import format_shape

ALIGN = 64
_ENTRY_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)


@dataclass
class CompileReport:
    """What one compilation did, for ``tfc compile`` reports and benchmarks."""

    graph: str
    kernels: int = 0
    fallback_ops: list[str] = field(default_factory=list)
    passes: list[str] = field(default_factory=list)
    memory_plan: str = ""
    cached: bool = False
    ir_bytes: int = 0
    object_bytes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        times = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.seconds.items())
        if self.fallback_ops:
            return (f"llvm @{self.graph}: runs on the reference backend (unsupported: "
                    f"{', '.join(self.fallback_ops)}); {times}")
        return (f"llvm @{self.graph}: {self.kernels} kernels, passes [{', '.join(self.passes)}],"
                f" {self.memory_plan} plan, {'cached' if self.cached else 'compiled'} object "
                f"code {self.object_bytes} bytes; {times}")


def _available(name: str) -> bool:
    from tfc.passes.manager import available_passes
    try:
        __import__(f"tfc.passes.{name}")
    except ImportError:
        return False
    return name in available_passes()


def prepare(module: Module, entry: str) -> tuple[Module, Graph, Any, list[str]]:
    """The module, graph and memory plan to compile (a copy when passes must run)."""
    if entry not in module.graphs:
        raise TfcError(f"unknown entry '{entry}' (entries: {', '.join(module.graphs)})")
    plan = module.memory_plans.get(entry)
    if plan is not None:
        return module, module.graphs[entry], plan, []
    work = Module({entry: module.graphs[entry].clone()}, dict(module.variables))
    passes = [p for p in ("fusion", "memory") if _available(p)]
    if passes:
        from tfc.passes.manager import run_passes
        work = run_passes(work, passes)
    plan = work.memory_plans.get(entry)
    graph = work.graphs[entry]
    if plan is None:
        plan = trivial_plan(graph)
    return work, graph, plan, passes


class LLVMExecutable:
    """A compiled graph: call it with feeds (argument order), variables and the step."""

    def __init__(self, module: Module, graph: Graph, gc: GraphCompiler | None,
                 object_code: bytes | None, report: CompileReport,
                 fallback_graph: Graph | None = None) -> None:
        self.module, self.graph, self.report = module, graph, report
        self.fallback_ops = list(report.fallback_ops)
        self.object_code = object_code
        self.host_key = jit.host_key()
        self._lock = threading.Lock()
        self._bindings: dict[tuple, _Bound] = {}
        if self.fallback_ops:
            from tfc.backends.reference import ReferenceBackend
            self._reference = ReferenceBackend().compile(
                Module({graph.name: fallback_graph or graph}, module.variables), graph.name)
            return
        assert gc is not None and object_code is not None
        self._gc = gc
        t0 = time.perf_counter()
        self._loaded = jit.load_object(object_code)
        self._entry = _ENTRY_TYPE(self._loaded.address(ENTRY))
        report.seconds["load"] = time.perf_counter() - t0
        self._arg_dtypes = [a.dtype.np for a in graph.args]
        # (name, numpy dtype, shape, decl) of the variables read and of those updated
        self._var_specs = [_var_spec(module.variables[n]) for n in gc.var_names]
        self._upd_specs = [_var_spec(module.variables[n]) for n in gc.updates]
        self._constants = gc.constants
        self._n_ptrs = gc.arena_slot + 1
        self._out_dtypes = [v.dtype.np for v in graph.results]
        self._step_slot = gc.comp.param_slot(("step",))

    # ---- running ------------------------------------------------------------------------

    def __call__(self, feeds: Sequence[np.ndarray], variables: Mapping[str, np.ndarray],
                 step: int) -> StepResult:
        if self.fallback_ops:
            return self._reference(feeds, variables, step)
        graph = self.graph
        if len(feeds) != len(graph.args):
            raise FeedError(f"@{graph.name} takes {len(graph.args)} feeds, got {len(feeds)}")
        arrays = []
        for a, f, dt in zip(graph.args, feeds, self._arg_dtypes):
            f = np.asarray(f)
            if f.dtype != dt:
                raise FeedError(f"feed '{a.name}' has dtype {f.dtype}, expected {a.type}")
            if not f.flags.c_contiguous:
                f = np.require(f, requirements="C")  # keeps 0-d arrays 0-d
            arrays.append(f)
        key = tuple(f.shape for f in arrays)
        with self._lock:
            bound = self._bindings.get(key)
            if bound is None:
                bound = self._bindings[key] = self._bind(key)
            ptrs = bound.ptrs  # every per-step slot is rewritten below, under the lock
            for i, f in enumerate(arrays):
                ptrs[i] = _data_ptr(f)
            base = len(arrays)
            for j, (name, dt, shape, decl) in enumerate(self._var_specs):
                v = variables.get(name)
                if v is None:
                    raise ExecutionError(f"variable @{name} is not initialized")
                v = np.asarray(v)
                if v.dtype != dt or v.shape != shape:
                    raise ExecutionError(f"variable @{name} is {v.dtype}"
                                         f"{format_shape(v.shape)}, expected {decl.type}")
                if not v.flags.c_contiguous:
                    v = np.require(v, requirements="C")
                ptrs[base + j] = _data_ptr(v)
            base = bound.out_slot
            outs = [np.empty(s, dtype=dt) for s, dt in zip(bound.out_shapes, self._out_dtypes)]
            for j, o in enumerate(outs):
                ptrs[base + j] = _data_ptr(o)
            base += len(outs)
            upds = [np.empty(shape, dtype=dt) for _, dt, shape, _ in self._upd_specs]
            for j, u in enumerate(upds):
                ptrs[base + j] = _data_ptr(u)
            if self._step_slot is not None:  # random ops read the step number
                bound.params.view(np.uint64)[self._step_slot] = int(step) % (1 << 64)
            rc = self._entry(ptrs.ctypes.data, bound.params.ctypes.data)
        if rc:
            raise ExecutionError(self._gc.comp.errors[rc - 1]
                                 if 0 < rc <= len(self._gc.comp.errors) else f"error {rc}")
        return StepResult(outs, {spec[0]: u for spec, u in zip(self._upd_specs, upds)})

    def _bind(self, feed_shapes: tuple) -> "_Bound":
        """Everything that depends only on the feeds' shapes (computed once per shapes)."""
        g, gc = self.graph, self._gc
        for a, s in zip(g.args, feed_shapes):
            if len(s) != a.type.rank or any(isinstance(d, int) and d != n
                                             for d, n in zip(a.type.shape, s)):
                raise FeedError(f"feed '{a.name}' has shape {format_shape(s)}, expected {a.type}")
        bd = bind(self.module, g, feed_shapes, gc.comp.regions)
        offsets, total = _offsets(gc.plan, bd)
        bd.offsets = offsets
        bd.scratch_offset = total
        scratch = max((fn(bd) for fn in gc.comp.scratch), default=0)
        arena = np.zeros(total + scratch + ALIGN, dtype=np.uint8)
        start = (-arena.ctypes.data) % ALIGN
        params = np.array([fn(bd) for fn in gc.comp.params], dtype=np.int64)
        ptrs = np.zeros(self._n_ptrs, dtype=np.uint64)
        nf, nv = len(g.args), len(gc.var_names)
        for k, c in enumerate(self._constants):
            ptrs[nf + nv + k] = c.ctypes.data
        ptrs[gc.arena_slot] = arena.ctypes.data + start
        out_shapes = [bd.shapes[v] for v in g.results]
        return _Bound(bd, arena, params if params.size else np.zeros(1, np.int64), ptrs,
                      out_shapes, nf + nv + len(self._constants))

    @property
    def arena_bytes(self) -> dict[tuple, int]:
        """Arena size (plan + scratch) per binding seen so far."""
        return {k: int(b.arena.size - ALIGN) for k, b in self._bindings.items()}

    def __repr__(self) -> str:
        return f"<LLVMExecutable {self.report}>"


def _var_spec(decl: Any) -> tuple[str, np.dtype, tuple, Any]:
    return decl.name, np.dtype(decl.type.dtype.np), tuple(decl.type.shape), decl


def _data_offset() -> int | None:
    """Byte offset of the data pointer inside a numpy array object, when ``id`` is its
    address (CPython) and the field sits where NumPy's ABI puts it; ``None`` otherwise."""
    probe = np.empty(3, np.float64)
    for off in (16, ctypes.sizeof(ctypes.c_void_p) * 2):
        try:
            if ctypes.c_void_p.from_address(id(probe) + off).value == probe.ctypes.data:
                return off
        except (ValueError, OverflowError):
            break
    return None


_DATA_OFFSET = _data_offset()
_from_address = ctypes.c_void_p.from_address


def _data_ptr(a: np.ndarray) -> int:
    """``a.ctypes.data`` at a fifth of its cost (it builds a ctypes object per call, about
    1.4 us; a step reads one pointer per feed, variable, fetch and update)."""
    if _DATA_OFFSET is None or type(a) is not np.ndarray:
        return a.ctypes.data
    return _from_address(id(a) + _DATA_OFFSET).value or 0


@dataclass
class _Bound:
    binding: Binding
    arena: np.ndarray
    params: np.ndarray
    ptrs: np.ndarray
    out_shapes: list[tuple[int, ...]]
    out_slot: int


def _offsets(plan: Any, bd: Binding) -> tuple[dict[int, int], int]:
    """Arena byte offset of each buffer of the plan, and the arena's size, for ``bd``."""
    if isinstance(plan, TrivialPlan):
        offs, total = plan.offsets_for(bd)
        return dict(enumerate(offs)), total
    try:
        offs = plan.offsets(bd.symbols)
        total = plan.arena_bytes(bd.symbols)
        out = {buf.id: o for buf, o in zip(plan.buffers, offs)}
        for buf in plan.buffers:  # the plan's sizes must hold every value at this binding
            need = max((bd.size(v) * v.dtype.itemsize for v in buf.values if v in bd.shapes),
                       default=0)
            if out[buf.id] + need > total:
                raise ValueError("buffer too small")
        return out, -(-total // ALIGN) * ALIGN
    except (KeyError, TypeError, ValueError, AttributeError):
        # sizes the plan cannot evaluate ("?" dims): lay the buffers out one after another
        out, total = {}, 0
        for buf in plan.buffers:
            out[buf.id] = total
            need = max((bd.size(v) * v.dtype.itemsize for v in buf.values if v in bd.shapes),
                       default=0)
            total += -(-need // ALIGN) * ALIGN
        return out, total


class LLVMBackend:
    """Compiles entry graphs to native code through llvmlite (see the module docstring)."""

    name = "llvm"

    def __init__(self, *, use_cache: bool = True, threads: int | None = None,
                 profile: bool = False) -> None:
        self.use_cache = use_cache
        self.threads = threads
        self.profile = profile

    def _lower(self, module: Module, entry: str) -> tuple[Module, Graph, GraphCompiler,
                                                          CompileReport, Graph]:
        from tfc.backends.llvm.kernels import lower
        report = CompileReport(entry)
        t0 = time.perf_counter()
        work, graph, plan, passes = prepare(module, entry)
        report.passes = passes
        report.memory_plan = "trivial" if isinstance(plan, TrivialPlan) else "memory pass"
        t1 = time.perf_counter()
        report.seconds["passes"] = t1 - t0
        triple, layout = jit.triple_and_layout()
        gc = GraphCompiler(work, graph, plan, triple, layout)
        try:
            gc.assign_storage()
            failed = gc.lower_all(lower)
        except Unsupported as e:
            failed = [str(e)]
        report.fallback_ops = sorted(set(failed))
        report.kernels = len(gc.calls)
        if not failed:
            from tfc.backends.llvm.parallel import build_parallel
            if self.profile:
                _install_profiler()
            gc.build_entry(build_parallel(gc.comp.module, self.threads), self.profile)
        report.seconds["lower"] = time.perf_counter() - t1
        return work, graph, gc, report, module.graphs[entry]

    def compile(self, module: Module, entry: str) -> LLVMExecutable:
        register_symbols()
        work, graph, gc, report, original = self._lower(module, entry)
        if report.fallback_ops:
            warnings.warn(f"llvm backend: graph @{entry} runs on the reference backend; "
                          f"ops not supported yet: {', '.join(report.fallback_ops)}",
                          stacklevel=2)
            return LLVMExecutable(work, graph, None, None, report, fallback_graph=original)
        t0 = time.perf_counter()
        text = str(gc.comp.module)
        report.ir_bytes = len(text)
        t1 = time.perf_counter()
        report.seconds["ir"] = t1 - t0
        obj, cached = jit.compile_ir(text, self.use_cache)
        report.cached = cached
        report.object_bytes = len(obj)
        report.seconds["llvm"] = time.perf_counter() - t1
        return LLVMExecutable(work, graph, gc, obj, report)

    def load(self, module: Module, entry: str, object_code: bytes,
             host_key: str | None = None) -> LLVMExecutable:
        """The executable of ``entry`` from object code made by ``compile`` (on a machine
        with the same ``host_key``): the graph is lowered again in Python to rebuild the
        run-time tables, but LLVM neither optimizes nor generates code."""
        register_symbols()
        if host_key is not None and host_key != jit.host_key():
            raise ArtifactError(f"object code for @{entry} was built for another CPU "
                                f"({host_key.split('|')[1]}); recompile it here")
        work, graph, gc, report, original = self._lower(module, entry)
        if report.fallback_ops:
            raise ArtifactError(f"@{entry} cannot run on the llvm backend (unsupported: "
                                f"{', '.join(report.fallback_ops)})")
        report.object_bytes = len(object_code)
        report.cached = True
        return LLVMExecutable(work, graph, gc, object_code, report)


# ---- profiling (a debugging aid: a Python callback between kernels) ---------------------

_PROFILE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int32)
PROFILE: dict[str, Any] = {"last": None, "times": {}}


def _profile_tick(k: int) -> None:
    now = time.perf_counter()
    last = PROFILE["last"]
    if last is not None and k > 0:
        PROFILE["times"][k - 1] = PROFILE["times"].get(k - 1, 0.0) + now - last
    PROFILE["last"] = now


_PROFILE_CB = _PROFILE_TYPE(_profile_tick)


def _install_profiler() -> None:
    import llvmlite.binding as llvm
    llvm.add_symbol("tfc_profile", ctypes.cast(_PROFILE_CB, ctypes.c_void_p).value)


def profile_report(exe: "LLVMExecutable") -> list[tuple[float, str]]:
    """(seconds, step name) per step of a profiled executable, largest first."""
    names = [getattr(s, "name", "copy") for s in exe._gc.steps]
    out = [(t, names[k] if k < len(names) else "?") for k, t in PROFILE["times"].items()]
    return sorted(out, reverse=True)
