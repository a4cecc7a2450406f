"""What runs a compiled entry of the LLVM backend: ``LLVMExecutable``, its bindings and its
run-time tables (``NativeMeta``), which ``LLVMBackend`` (``backend.py``) makes.

A step (``LLVMExecutable.__call__``) is one call into native code: Python checks the
feeds, finds the *binding* for their shapes (concrete shapes of every value, run-time
params, the arena: computed once per distinct feed shapes and reused), takes the
fetch and update arrays (recycled from earlier steps once nobody holds them:
``_recycled``), fills one pointer array and calls ``tfc_entry``.

An executable loaded from an artifact starts from ``NativeMeta`` (the pointer array's
layout, params, error messages, the bindings met so far) and lowers its graph in Python
only for feed shapes those have no binding for. Kernel timing (``profile=True``):
``LLVMExecutable.kernel_times()`` reads the stamps the profiling entry writes.
"""

from __future__ import annotations

import ctypes
import io
import math
import operator
import sys
import threading
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, cast

import numpy as np

from tfc.backends.base import StepOwner, StepResult, checked_feeds
from tfc.backends.llvm.entry import GraphCompiler
from tfc.backends.llvm.step_table import ENTRY, PROF_STAMPS, StepTable, install
from tfc.backends.llvm.runtime import entry_cache, native
from tfc.backends.llvm.runtime.arena import zeroed
from tfc.backends.llvm.runtime.blas_policy import gemms_are_small
from tfc.backends.llvm.runtime.symbols import small_gemms
from tfc.backends.binding import Binding, bind, bind_symbols
from tfc.backends.llvm.runtime.error_detail import ERROR_DETAIL, MAX_DETAIL_INTS, format_error
from tfc.errors import ArtifactError, ExecutionError, FeedError, TfcError
from tfc.ir.core import Graph, Module, Op
from tfc.ir.types import format_shape

if TYPE_CHECKING:
    from tfc.backends.llvm.backend import CompileReport

ALIGN = 64
_ENTRY_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)
_ENTRY_TYPE_GIL = ctypes.PYFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)


class LLVMExecutable:
    """A compiled graph: call it with feeds (argument order), variables and the step.

    ``fast_step`` is the same step for callers that have checked the feeds already (a
    ``Program``): no per-call conversions, one ctypes call. An executable loaded with
    ``native_meta`` (an artifact's) starts from the stored run-time tables and bindings
    and lowers its graph in Python only when it meets feed shapes it has no binding for.

    ``signature`` is the graph whose arguments and results a step checks and binds (feed
    and fetch names and types). It is ``graph`` itself, except for an executable made
    with ``lowered`` (``LLVMBackend.compile_stored``): ``module`` and ``graph`` given are
    then the module the lowered one was made from, standing for it (same signature, same
    variables), and the lowered module (``module``, ``graph``) is ``lowered()``, decoded
    when first needed (new feed shapes, or a reader of ``module`` / ``graph``).
    """

    def __init__(self, module: Module, graph: Graph, graph_compiler: GraphCompiler | None,
                 object_code: bytes | None, report: CompileReport,
                 *,
                 meta: "NativeMeta | None" = None,
                 relower: Callable[[], tuple[Module, Graph, GraphCompiler]] | None = None,
                 lowered: Callable[[], Module] | None = None
                 ) -> None:
        self._module, self._graph, self.report = module, graph, report
        self.signature = graph
        self._pending = lowered  # the lowered module, until decoded (``module``)
        self._decoding = threading.Lock()  # (one decode, whichever thread asks first)
        self.fallback_ops = list(report.fallback_ops)
        self.object_code = object_code
        self.host_key = native.host_key()
        self._lock = threading.Lock()
        self._busy = ctypes.c_int64(0)  # 1 while fast_step runs (pystep steps aside)
        self._bindings: dict[tuple, _Bound] = {}
        self._last: _Bound | None = None  # the binding of the latest step
        self._stamps_addr = 0
        self._kernel_labels: tuple[list[tuple[int, str]], int] | None = None
        self.cache_key: str | None = None  # the entry cache's, which learns new bindings
        if self.fallback_ops:
            from tfc.backends.reference import ReferenceBackend
            self._reference = ReferenceBackend().compile(
                Module({graph.name: graph}, module.variables), graph.name)
            return
        assert object_code is not None and (graph_compiler is not None or meta is not None)
        self._graph_compiler = graph_compiler
        self._relower = relower
        t0 = time.perf_counter()
        self._loaded = native.load_object(object_code)
        addr = self._entry_addr = self._loaded.address(ENTRY)
        self._entry = _ENTRY_TYPE(addr)  # releases the GIL during the step
        self._entry_gil = _ENTRY_TYPE_GIL(addr)  # keeps it: for short steps (see _bound)
        self._stamps_addr = self._loaded.global_address(PROF_STAMPS)  # 0 unless profiling
        detail = self._loaded.global_address(ERROR_DETAIL)  # 0 when nothing is checked
        self._error_detail = ((ctypes.c_int64 * (2 + MAX_DETAIL_INTS)).from_address(detail)
                              if detail else None)
        report.seconds["load"] = time.perf_counter() - t0
        if meta is None:
            assert graph_compiler is not None
            meta = NativeMeta.of(graph_compiler, report)
        self.meta = meta
        # the schedule the loaded runner walks (kept alive with the code)
        self._steps = install(self._loaded, StepTable(meta.steps, meta.symbols), meta.n_ptrs,
                              meta.n_params)
        self._arg_dtypes = [a.dtype.np for a in graph.args]
        # (name, numpy dtype, shape, decl) of the variables read and of those updated
        self.var_names = list(meta.var_names)
        self.update_names = list(meta.updates)
        self._var_specs = [_var_spec(module.variables[n]) for n in meta.var_names]
        self._upd_specs = [_var_spec(module.variables[n]) for n in meta.updates]
        in_place = dict(meta.in_place)  # update index -> variable index (see fast_step)
        # the updates' part of every binding's fills: their pools outlive a binding
        self._upd_fills: list[tuple[list[np.ndarray], tuple[int, ...], np.dtype, int]] = [
            ([], s, dt, in_place.get(j, -1)) for j, (_, dt, s, _) in enumerate(self._upd_specs)]
        # An executable that reads no variable (an initializer, an assignment of fed
        # values) keeps none of the update arrays it hands out (fast_step lets its pools
        # and slots go of them): they become variables' values, and its pool's and slot's
        # references would make each look held to the next executable that updates that
        # variable in place (``_sole``), whose first step would allocate fresh memory and
        # write every such update there instead (the first training step after the
        # initializer: 64 MB of new pages at L=256 of issue 21's MLP, ~30 ms of page
        # faults). Such an executable run again allocates its updates anew.
        self._lets_updates_go = bool(self._upd_fills) and not self._var_specs
        self._var_bytes = sum(math.prod(s) * dt.itemsize for _, dt, s, _ in self._var_specs)
        self._constants = list(meta.constants)
        self._n_ptrs = meta.n_ptrs
        self._out_dtypes = [v.dtype.np for v in graph.results]
        self._step_slot = meta.step_slot
        self._errors = list(meta.errors)
        for rec in meta.bindings:
            bound = self._bound_from(rec)
            self._bindings[bound.key] = bound

    # ---- running ------------------------------------------------------------------------

    def __call__(self, feeds: Sequence[np.ndarray], variables: Mapping[str, np.ndarray],
                 step: int) -> StepResult:
        return self._call(feeds, variables, step, False)

    def stored_step(self, feeds: Sequence[np.ndarray], store: dict[str, np.ndarray],
                    step: int) -> StepResult:
        """``self(feeds, store, step)`` for a caller that puts the updates into ``store``
        right after, in place of the values the step read (a ``Session``): an update the
        native code can make in place (``GraphCompiler.in_place_updates``) is then made in
        its variable's own array when nothing but ``store`` holds that (``fast_step``'s
        ``in_place``), as the native call path does (``pystep``): no update array to
        allocate (fresh memory: page faults, on the first steps), no copy of the weight
        into it every step."""
        return self._call(feeds, store, step, True)

    def _call(self, feeds: Sequence[np.ndarray], variables: Mapping[str, np.ndarray],
              step: int, in_place: bool) -> StepResult:
        if self.fallback_ops:
            return self._reference(feeds, variables, step)
        arrays = checked_feeds(self.signature, feeds, self._arg_dtypes)
        values = []
        v = None
        for name, dt, shape, decl in self._var_specs:
            v = variables.get(name)
            if v is None:
                raise ExecutionError(f"variable @{name} is not initialized")
            v = np.asarray(v)
            if v.dtype != dt or v.shape != shape:
                raise ExecutionError(f"variable @{name} is {v.dtype}"
                                     f"{format_shape(v.shape)}, expected {decl.type}")
            if not v.flags.c_contiguous:
                v = np.require(v, requirements="C")
            values.append(v)
        # (each variable array is held by ``variables`` and ``values`` only, as
        # ``fast_step``'s in_place counts: not by this loop's name too)
        del v
        outs, upds = self.fast_step(arrays, values, step, in_place=in_place)
        return StepResult(outs, dict(zip(self.update_names, upds)))

    def fast_step(self, feeds: Sequence[np.ndarray], variables: Sequence[np.ndarray],
                  step: int, validate: Callable[[Sequence[np.ndarray]], Any] | None = None,
                  in_place: bool = False, extra_refs: int = 0
                  ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """One step for a caller that vouches for its inputs: ``feeds`` are C-contiguous
        numpy arrays of the arguments' dtypes, ``variables`` C-contiguous arrays of the
        declared types in ``var_names`` order. Feed shapes are checked once per binding
        (first by ``validate(feeds)``, for the caller's own error messages). Returns
        fetch arrays and update arrays (in ``update_names`` order) that nothing else
        references (recycled from earlier steps when their holders let go: ``_recycled``).
        With ``in_place`` (the caller holds each variable array once, in its store, besides
        the ``variables`` list, and stores the updates in its place), an update the
        native code can make in place (``in_place_updates``) is its variable's own array
        when nothing else holds that (``_sole``): no copy of the variable, no second
        array. ``extra_refs``: the references to each variable array the caller holds
        beyond its store and the ``variables`` list (the multi-device executor's own
        mapping: ``tfc.runtime.executor``). Loops, not comprehensions: this is the per-call
        overhead."""
        bound = self._last
        if bound is None or len(feeds) != len(bound.key) or not _same_shapes(feeds,
                                                                            bound.key):
            key = tuple(map(_SHAPE, feeds))
            bound = self._bindings.get(key)
            if bound is None:
                if validate is not None:
                    validate(feeds)
                bound = self._binding(key)
            self._last = bound
        dp = _data_ptr if _DATA_OFFSET is None else _fast_ptr
        with self._lock:  # the pointer array, params and arena are the binding's own
            busy = self._busy  # set while the binding is half-written: see pystep
            busy.value = 1
            try:
                ptrs = bound.ptrs
                i = 0
                for a in feeds:
                    ptrs[i] = dp(a)
                    i += 1
                if variables:
                    for a in variables:
                        ptrs[i] = dp(a)
                        i += 1
                    del a  # (else the last variable has one reference more: never _sole)
                # Outputs, then updates: an array recycled from the pool is often the one
                # of the last step, whose pointer the slot already holds (the pool keeps
                # it alive).
                arrays = []
                held = bound.in_slots
                i = bound.out_slot
                for pool, s, dt, v in bound.fills:
                    if in_place and v >= 0 and _sole(variables[v], held[i], pool,
                                                     extra_refs):
                        a = variables[v]
                    else:
                        a = _recycled(pool, s, dt, held[i])
                    if held[i] is not a:
                        ptrs[i] = dp(a)
                        held[i] = a
                    arrays.append(a)
                    i += 1
                if self._step_slot is not None:  # random ops read the step number
                    bound.params_u64[self._step_slot] = step % (1 << 64)
                if bound.small_gemms is not None:  # OpenBLAS's threads (blas_policy)
                    small_gemms(bound.small_gemms)
                rc = bound.call(bound.ptrs_addr, bound.params_addr)
                if rc:  # read while no other call can overwrite it
                    detail = None if self._error_detail is None else list(self._error_detail)
                if self._lets_updates_go:  # (see __init__)
                    i = bound.out_slot + bound.n_outs
                    for fill in self._upd_fills:
                        fill[0].clear()
                        held[i] = None
                        i += 1
            finally:
                busy.value = 0
        if rc:
            raise ExecutionError(format_error(self._errors[rc - 1], detail)
                                 if 0 < rc <= len(self._errors) else f"error {rc}")
        n = bound.n_outs
        return arrays[:n], arrays[n:]

    def native_callable(self, owner: StepOwner, call: Callable[..., Any],
                        order: Sequence[int] | None, index: Sequence[int],
                        single: bool) -> Callable[..., Any] | None:
        """``call`` (a ``Program.callable`` or ``Session.make_callable`` step) with its
        usual path in native code (``pystep``); ``None`` where there is none."""
        if self.fallback_ops:
            return None
        from tfc.backends.llvm.runtime.pystep import native_callable
        return native_callable(self, owner, call, order, index, single)

    def _binding(self, key: tuple) -> "_Bound":
        with self._lock:
            bound = self._bindings.get(key)
            if bound is not None:
                return bound
            bound = self._bindings[key] = self._bind(key)
        if self.cache_key is not None:  # the next process starts with this binding
            meta = self.native_meta()  # bindings exist only for native code (no fallback)
            assert self.object_code is not None and meta is not None
            entry_cache.put(self.cache_key, self.object_code, meta)
        return bound

    def _bind(self, feed_shapes: tuple) -> "_Bound":
        """Everything that depends only on the feeds' shapes (computed once per shapes)."""
        g = self.signature
        if len(feed_shapes) != len(g.args):
            raise FeedError(f"@{g.name} takes {len(g.args)} feeds, got {len(feed_shapes)}")
        for a, s in zip(g.args, feed_shapes):
            if len(s) != a.type.rank or any(isinstance(d, int) and d != n
                                             for d, n in zip(a.type.shape, s)):
                raise FeedError(f"feed '{a.name}' has shape {format_shape(s)}, expected {a.type}")
        graph_compiler = self._lowered()
        g = self.graph
        binding = bind(self.module, g, feed_shapes, graph_compiler.comp.regions)
        offsets, total = _offsets(graph_compiler.plan, binding)
        binding.offsets = offsets
        binding.scratch_offset = total
        scratch = max((fn(binding) for fn in graph_compiler.comp.scratch), default=0)
        params = [fn(binding) for fn in graph_compiler.comp.params]
        out_shapes = [binding.shapes[v] for v in g.results]
        return self._make_bound(tuple(feed_shapes), total + scratch, params, out_shapes, binding)

    def _make_bound(self, key: tuple, arena_bytes: int, params: list[int],
                    out_shapes: list[tuple[int, ...]], binding: Binding | None,
                    small: "tuple[bool | None] | None" = None) -> "_Bound":
        """``small``: ``(gemms_are_small's answer,)`` where known (a stored binding's);
        else it is asked of the lowered graph."""
        arena = zeroed(arena_bytes + ALIGN)  # (large ones: a mapping of their own, arena.py)
        start = (-arena.ctypes.data) % ALIGN
        pa = np.array(params, dtype=np.int64) if params else np.zeros(1, np.int64)
        ptrs = np.zeros(self._n_ptrs, dtype=np.uint64)
        nf, nv = len(self.signature.args), len(self.var_names)
        for k, c in enumerate(self._constants):
            ptrs[nf + nv + k] = c.ctypes.data
        ptrs[self._n_ptrs - 1] = arena.ctypes.data + start  # the arena is the last slot
        fills: list[tuple[list[np.ndarray], tuple[int, ...], np.dtype, int]] = [
            ([], tuple(s), dt, -1) for s, dt in zip(out_shapes, self._out_dtypes)]
        fills += self._upd_fills
        touched = (arena_bytes + self._var_bytes
                   + sum(int(np.prod(s)) * dt.itemsize for s, dt in zip(out_shapes,
                                                                        self._out_dtypes))
                   + sum(int(np.prod(s)) * dt.itemsize for s, dt in zip(key, self._arg_dtypes)))
        bound = _Bound(binding, arena, pa, ptrs, [tuple(s) for s in out_shapes],
                       nf + nv + len(self._constants), key=key, fills=fills,
                       n_outs=len(out_shapes),
                       ptrs_addr=ptrs.ctypes.data, params_addr=pa.ctypes.data,
                       params_u64=pa.view(np.uint64), params_used=len(params),
                       in_slots=[None] * self._n_ptrs)
        bound.call = self._entry if touched > GIL_HOLD_BYTES else _gil_probe(self, bound)
        if small is None:
            symbols = (binding.symbols if binding is not None
                       else bind_symbols(self.signature, key))
            small = (gemms_are_small(self.graph, symbols),)
        bound.small_gemms = small[0]
        return bound

    def _bound_from(self, rec: "StoredBinding") -> "_Bound":
        g = self.signature
        ok = (len(rec.params) == self.meta.n_params and len(rec.outs) == len(g.results)
              and len(rec.feeds) == len(g.args)
              and all(len(s) == a.type.rank and all(not isinstance(d, int) or d == n
                                                    for d, n in zip(a.type.shape, s))
                      for a, s in zip(g.args, rec.feeds))
              and all(len(s) == v.type.rank for v, s in zip(g.results, rec.outs)))
        if ok:
            try:
                bind_symbols(g, rec.feeds)
            except FeedError:
                ok = False
        if not ok:
            raise ArtifactError(f"the stored binding {list(rec.feeds)} of @{g.name} does "
                                f"not fit its graph")
        return self._make_bound(rec.feeds, rec.arena, list(rec.params), list(rec.outs), None,
                                rec.small_gemms)

    def _lowered(self) -> GraphCompiler:
        """The graph compiler (lowering again, once, for an executable loaded from native
        code and its tables: its run-time params must be those the code was built with)."""
        if self._graph_compiler is not None:
            return self._graph_compiler
        assert self._relower is not None
        module, graph, graph_compiler = self._relower()
        have = NativeMeta.of(graph_compiler, self.report)
        mine = self.meta
        if (have.var_names, have.updates, have.n_ptrs, have.step_slot, have.errors,
                have.n_params, len(have.constants)) != (
                mine.var_names, mine.updates, mine.n_ptrs, mine.step_slot, mine.errors,
                mine.n_params, len(mine.constants)) or not all(
                    a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
                    for a, b in zip(have.constants, mine.constants)):
            raise ArtifactError(f"the native code of @{graph.name} does not match its graph "
                                f"as lowered by this tfc; recompile it")
        self._adopt(module)
        self._graph_compiler = graph_compiler
        return graph_compiler

    @property
    def module(self) -> Module:
        """The lowered module the native code was built from (decoded now, once, where it
        was pending: see the class docstring)."""
        self._decoded()
        return self._module

    @property
    def graph(self) -> Graph:
        """The entry's lowered graph (``module``'s)."""
        self._decoded()
        return self._graph

    def _decoded(self) -> None:
        pending = self._pending
        if pending is not None:
            with self._decoding:
                if self._pending is not None:
                    self._adopt(pending())

    def _adopt(self, module: Module) -> None:
        """Take ``module`` as the lowered module; an ``ArtifactError`` where its entry's
        signature or variables are not those the native code was set up with (those of
        the module that stood for it)."""
        name = self.signature.name
        graph = module.graphs.get(name)
        if graph is None:
            raise ArtifactError(f"the lowered module lacks @{name}; recompile it")
        if graph is not self.signature and (
                graph.signature() != self.signature.signature() or any(
                    n not in module.variables
                    or module.variables[n].type != self._module.variables[n].type
                    for n in (*self.var_names, *self.update_names))):
            raise ArtifactError(f"the lowered module of @{name} does not keep the signature "
                                f"its native code was set up with; recompile it")
        self._module, self._graph, self._pending = module, graph, None

    def native_meta(self) -> "NativeMeta | None":
        """What loading this executable from its object code needs besides the graph: the
        run-time tables and the bindings seen so far (``None`` for a reference fallback)."""
        if self.fallback_ops:
            return None
        with self._lock:
            bounds = list(self._bindings.values())[-MAX_STORED_BINDINGS:]
        recs = [StoredBinding(b.key, int(b.arena.size - ALIGN),
                              tuple(int(p) for p in b.params[:b.params_used]),
                              tuple(b.out_shapes), (b.small_gemms,)) for b in bounds]
        m = self.meta
        return NativeMeta(m.var_names, m.updates, m.n_ptrs, m.step_slot, m.errors, m.n_params,
                          m.constants, tuple(recs), m.passes, m.kernels, m.in_place,
                          m.steps, m.symbols)

    @property
    def profiling(self) -> bool:
        """Whether the native code timestamps its kernels (``LLVMBackend(profile=True)``)."""
        return not self.fallback_ops and bool(self._stamps_addr)

    def kernel_times(self) -> list[tuple[str, float, float]]:
        """``(kernel name, start, end)`` of each kernel of the latest step, in schedule
        order, in seconds on the ``time.perf_counter`` clock; empty when the executable
        does not profile (see ``LLVMBackend(profile=True)``), before the first step, and
        after a step that failed. Names say what the kernel computes: ``matmul#1``,
        ``fusion#3 (add,relu)`` (``[i/n]`` when one op became several kernels)."""
        if not self.profiling:
            return []
        labels = self._kernel_labels
        if labels is None:
            graph_compiler = self._lowered()
            labels = self._kernel_labels = (graph_compiler.kernel_labels(),
                                            len(graph_compiler.steps))
        steps, n = labels
        sec = self._stamps(n)
        if sec is None:
            return []
        return [(name, float(sec[k]), float(sec[k + 1])) for k, name in steps]

    def step_times(self) -> list[tuple[tuple[Op, ...], float, float]]:
        """``(ops, start, end)`` of every step of the latest step's native entry, kernels
        and the copies between them, in schedule order: what ``kernel_times`` gives plus
        the copies (of results into fetches and update buffers, of a weight into the
        buffer its GEMM updates), each with the ops of the graph it works for
        (``GraphCompiler.step_sources``). Empty as ``kernel_times`` is."""
        if not self.profiling:
            return []
        sources = self._lowered().step_sources()
        sec = self._stamps(len(sources))
        if sec is None:
            return []
        return [(ops, float(sec[k]), float(sec[k + 1])) for k, ops in enumerate(sources)]

    def _stamps(self, n: int) -> np.ndarray | None:
        """The latest step's ``n + 1`` timestamps in seconds on the ``perf_counter``
        clock; None before the first step and after one that failed."""
        stamps = np.ctypeslib.as_array((ctypes.c_int64 * (n + 1)).from_address(
            self._stamps_addr))
        with self._lock:  # not in the middle of a step
            ns = stamps.copy()
        if ns[n] == 0:
            return None
        return ns * 1e-9 + _CLOCK_OFFSET

    def kernel_ops(self) -> list[tuple[Op, ...]]:
        """The ops of the executable's graph that each kernel computes, in the order of
        ``kernel_times()`` (see ``GraphCompiler.kernel_ops``: a fusion is one op, whose
        region's ``sources`` are the unfused ops; a GEMM that updates its weight also
        stands for the scale and the assignment); empty for a reference fallback. An
        executable loaded from native code lowers its graph again, once, to know them."""
        if self.fallback_ops:
            return []
        return self._lowered().kernel_ops()

    @property
    def arena_bytes(self) -> int:
        """Arena size (plan + scratch) of the binding the latest step ran with (0 before
        the first step, and for a reference fallback): what the tracer's memory figure
        reads."""
        b = self._last
        return 0 if b is None else int(b.arena.size - ALIGN)

    @property
    def arena_bytes_by_binding(self) -> dict[tuple, int]:
        """Arena size (plan + scratch) per binding (feed shapes) seen so far."""
        return {k: int(b.arena.size - ALIGN) for k, b in self._bindings.items()}

    def __repr__(self) -> str:
        return f"<LLVMExecutable {self.report}>"


# Which steps keep the GIL (``_make_bound``). Releasing it costs about half a microsecond
# per call, and only a step that keeps it can take the native call path (``pystep``), so a
# short step keeps it. A step that touches more than GIL_HOLD_BYTES is never short. One
# that touches less may still compute for long (a map fn's augmentation: 200 small matmuls
# in a 16 KB arena held the GIL 0.6 ms a batch, so a prefetch thread's map fn and the
# training step beside it could never overlap): its first GIL_PROBE_CALLS calls release
# the GIL and are timed, and the binding keeps the GIL from then on only if the fastest of
# them took under GIL_HOLD_NS of the calling thread's CPU time. Preemption does not count;
# page faults do, and a first call's faults on a fresh arena and fresh code pages (or a
# busy host's stolen cycles) can make one call of a 2 µs step look long: hence the
# fastest of several, not the first. Erring towards releasing costs half a microsecond.
GIL_HOLD_BYTES = 1 << 16
GIL_HOLD_NS = 50_000
GIL_PROBE_CALLS = 3


def _gil_probe(exe: LLVMExecutable, bound: "_Bound") -> Callable[[int, int], int]:
    """The first calls of a binding that touches little memory: run them without the GIL,
    time them and set the binding's ``call`` for the calls after them (module note above
    ``GIL_HOLD_NS``). Runs under the executable's lock, as every call does."""
    fastest = [1 << 62]
    calls = [0]

    def probed_call(ptrs_addr: int, params_addr: int) -> int:
        start = time.thread_time_ns()
        rc = exe._entry(ptrs_addr, params_addr)
        fastest[0] = min(fastest[0], time.thread_time_ns() - start)
        calls[0] += 1
        if calls[0] == GIL_PROBE_CALLS:
            bound.call = exe._entry_gil if fastest[0] < GIL_HOLD_NS else exe._entry
        return int(rc)
    return probed_call


MAX_STORED_BINDINGS = 16


@dataclass(frozen=True)
class StoredBinding:
    """One binding as an artifact stores it: feed shapes, arena bytes, params, fetch
    shapes (the step's slot, if any, is rewritten every call), and whether its GEMMs are
    small (``(blas_policy.gemms_are_small's answer,)``; None where not stored, in tables
    written before it was: then asked of the graph, whose IR an executable made without
    it would otherwise not need: ``LLVMBackend.compile_stored``)."""

    feeds: tuple[tuple[int, ...], ...]
    arena: int
    params: tuple[int, ...]
    outs: tuple[tuple[int, ...], ...]
    small_gemms: tuple[bool | None] | None = None


@dataclass(frozen=True)
class NativeMeta:
    """The run-time tables of an entry's native code: the pointer array's layout (read
    variables, updated variables, constants), the params' count, the step's param slot,
    the error messages, and the bindings (with their params) seen so far. Together with
    the object code it makes an executable without lowering the graph again."""

    var_names: tuple[str, ...]
    updates: tuple[str, ...]
    n_ptrs: int
    step_slot: int | None
    errors: tuple[str, ...]
    n_params: int
    constants: tuple[np.ndarray, ...]
    bindings: tuple[StoredBinding, ...] = ()
    passes: tuple[str, ...] = ()
    kernels: int = 0
    # (update index, read-variable index): updates the native code can make in place
    in_place: tuple[tuple[int, int], ...] = ()
    # the schedule (``step_table.StepTable``): its words and the kernel units' symbols
    steps: tuple[int, ...] = ()
    symbols: tuple[str, ...] = ()

    @staticmethod
    def of(graph_compiler: GraphCompiler, report: CompileReport) -> "NativeMeta":
        """The tables of a lowered entry (its step table empty until its kernel units are
        named: ``LLVMBackend._split``; its in-place updates those the table makes)."""
        comp = graph_compiler.comp
        table, draft = graph_compiler.step_table, graph_compiler.step_draft
        in_place = graph_compiler.in_place_updates() if draft is None else draft.in_place
        return NativeMeta(tuple(graph_compiler.var_names), tuple(graph_compiler.updates),
                          graph_compiler.arena_slot + 1, comp.param_slot(("step",)),
                          tuple(comp.errors), len(comp.params), tuple(graph_compiler.constants),
                          (), tuple(report.passes), report.kernels,
                          tuple(sorted(in_place.items())),
                          table.words if table is not None else (),
                          table.symbols if table is not None else ())

    def to_json(self) -> dict[str, Any]:
        """Everything but the constants (arrays, stored beside it) as JSON data."""
        return {"var_names": list(self.var_names), "updates": list(self.updates),
                "n_ptrs": self.n_ptrs, "step_slot": self.step_slot,
                "errors": list(self.errors), "n_params": self.n_params,
                "constants": len(self.constants), "passes": list(self.passes),
                "kernels": self.kernels, "in_place": [list(p) for p in self.in_place],
                "steps": list(self.steps), "symbols": list(self.symbols),
                "bindings": [{"feeds": [list(s) for s in b.feeds], "arena": b.arena,
                              "params": list(b.params), "outs": [list(s) for s in b.outs],
                              **({} if b.small_gemms is None
                                 else {"small_gemms": b.small_gemms[0]})}
                             for b in self.bindings]}

    def to_members(self, prefix: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The JSON table (``to_json`` and the constants' member names) and the constants
        as ``{prefix}NNNN.npy`` zip members: how artifacts and the entry cache store these
        tables (``read_zip`` takes them back)."""
        table = self.to_json()
        arrays = {f"{prefix}{k:04d}.npy": np.asarray(c) for k, c in enumerate(self.constants)}
        table["constant_files"] = list(arrays)
        return table, arrays

    @staticmethod
    def read_zip(zf: zipfile.ZipFile, table: Any) -> "NativeMeta":
        """The tables ``to_members`` made, from ``zf``; ``ValueError`` saying what is wrong."""
        def read(name: str) -> bytes:
            try:
                return zf.read(name)
            except KeyError:
                raise ValueError(f"no member {name} (a constant)") from None
            except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as e:
                raise ValueError(f"{name} is not a valid .npy file ({e})") from None
        return NativeMeta._read(table, read)

    @staticmethod
    def from_members(table: Any, members: Mapping[str, bytes]) -> "NativeMeta":
        """The tables ``to_members`` made, their constants taken from ``members`` (member
        name -> bytes); ``ValueError`` saying what is wrong."""
        def read(name: str) -> bytes:
            if name not in members:
                raise ValueError(f"no member {name} (a constant)")
            return members[name]
        return NativeMeta._read(table, read)

    @staticmethod
    def _read(table: Any, read: Callable[[str], bytes]) -> "NativeMeta":
        files = table.get("constant_files") if isinstance(table, dict) else None
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise ValueError("'constant_files' should be a list of member names")
        constants = []
        for name in files:
            data = read(name)
            try:
                arr = np.load(io.BytesIO(data), allow_pickle=False)
            except (ValueError, OSError, EOFError) as e:
                raise ValueError(f"{name} is not a valid .npy file ({e})") from None
            if not isinstance(arr, np.ndarray):
                raise ValueError(f"{name} is not a single .npy array")
            constants.append(np.ascontiguousarray(arr))
        return NativeMeta.from_json(table, constants)

    @staticmethod
    def from_json(data: Any, constants: Sequence[np.ndarray]) -> "NativeMeta":
        """The tables ``to_json`` wrote; ``ValueError`` saying what is wrong otherwise."""
        def ints(x: Any, what: str) -> tuple[int, ...]:
            # (the types as a set: the step table's 11,000 words at L=256 in 0.2 ms, not 3)
            if not isinstance(x, list) or not set(map(type, x)) <= {int}:
                raise ValueError(f"{what} should be a list of integers")
            return tuple(x)

        def strs(x: Any, what: str) -> tuple[str, ...]:
            if not isinstance(x, list) or not set(map(type, x)) <= {str}:  # (as ints)
                raise ValueError(f"{what} should be a list of strings")
            return tuple(x)

        if not isinstance(data, dict):
            raise ValueError("not an object")
        n_ptrs, n_params, slot = data.get("n_ptrs"), data.get("n_params"), data.get("step_slot")
        if type(n_ptrs) is not int or type(n_params) is not int or n_ptrs < 1 or n_params < 0:
            raise ValueError("n_ptrs and n_params should be counts")
        if slot is not None and (type(slot) is not int or not 0 <= slot < n_params):
            raise ValueError(f"step_slot {slot!r} is not a param slot")
        if data.get("constants") != len(constants):
            raise ValueError(f"it names {data.get('constants')!r} constants, "
                             f"{len(constants)} are stored")
        recs = []
        for b in data.get("bindings") or []:
            if not isinstance(b, dict) or type(b.get("arena")) is not int or b["arena"] < 0:
                raise ValueError(f"bad binding {b!r}")
            feeds = tuple(ints(s, "a feed shape") for s in b.get("feeds") or [])
            outs = tuple(ints(s, "a fetch shape") for s in b.get("outs") or [])
            if any(d < 0 for s in feeds + outs for d in s):
                raise ValueError(f"bad binding {b!r}")
            small = b.get("small_gemms", ...)
            if small is not ... and small is not None and type(small) is not bool:
                raise ValueError(f"bad binding {b!r}")
            recs.append(StoredBinding(feeds, b["arena"], ints(b.get("params"), "params"), outs,
                                      None if small is ... else (small,)))
        pairs = [ints(p, "an in-place update") for p in data.get("in_place") or []]
        meta = NativeMeta(strs(data.get("var_names"), "var_names"),
                          strs(data.get("updates"), "updates"), n_ptrs, slot,
                          strs(data.get("errors"), "errors"), n_params, tuple(constants),
                          tuple(recs), strs(data.get("passes") or [], "passes"),
                          int(data.get("kernels") or 0),
                          tuple(cast("list[tuple[int, int]]", pairs)),  # checked below
                          ints(data.get("steps"), "steps"),
                          strs(data.get("symbols"), "symbols"))
        if len(meta.var_names) + len(meta.updates) + len(constants) >= n_ptrs:
            raise ValueError("the pointer array is too short")
        if any(len(p) != 2 or not (0 <= p[0] < len(meta.updates)
                                   and 0 <= p[1] < len(meta.var_names)) for p in pairs):
            raise ValueError(f"bad in-place updates {pairs!r}")
        return meta


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
_SHAPE = operator.attrgetter("shape")
_from_address = ctypes.c_void_p.from_address


def _data_ptr(a: np.ndarray) -> int:
    """``a.ctypes.data`` at a fifth of its cost (it builds a ctypes object per call, about
    1.4 us; a step reads one pointer per feed, variable, fetch and update)."""
    if _DATA_OFFSET is None or type(a) is not np.ndarray:
        return a.ctypes.data
    return _from_address(id(a) + _DATA_OFFSET).value or 0


def _fast_ptr(a: np.ndarray, _addr: Any = _from_address, _off: int = _DATA_OFFSET or 0) -> int:
    """``_data_ptr`` of an exact ``np.ndarray`` (``fast_step``'s arrays all are)."""
    return _addr(id(a) + _off).value or 0


@dataclass
class _Bound:
    """One binding ready to run: its arena, params and pointer array (and their
    addresses), the fetch shapes, and the entry to call (with or without the GIL)."""

    binding: Binding | None  # None when it came from an artifact's stored tables
    arena: np.ndarray
    params: np.ndarray
    ptrs: np.ndarray
    out_shapes: list[tuple[int, ...]]
    out_slot: int
    key: tuple = ()
    # per slot from out_slot on, outputs then updates: (the pool its arrays come from
    # (see _recycled), shape, dtype, the variable an update may run in place in or -1)
    fills: list[tuple[list[np.ndarray], tuple[int, ...], np.dtype, int]] = field(
        default_factory=list)
    n_outs: int = 0
    call: Any = None
    ptrs_addr: int = 0
    params_addr: int = 0
    params_u64: Any = None
    params_used: int = 0
    # per pointer slot, the output or update array whose data pointer it holds
    in_slots: list[Any] = field(default_factory=list)
    # whether its GEMMs are all too small for OpenBLAS's threads; None: it has none
    small_gemms: bool | None = None


POOL_SIZE = 2  # arrays kept per output: a variable's update alternates between two


def _recycled(pool: list[np.ndarray], shape: tuple[int, ...], dtype: np.dtype,
              in_slot: np.ndarray | None = None) -> np.ndarray:
    """An output array for this step: one from ``pool`` that nobody else references any
    more, else a new one that joins the pool in place of the oldest. Steps then allocate
    nothing once the caller lets go of earlier results, and never write into an array
    the caller still holds (a view of it counts as a reference too). The references
    that do not count: the pool's, the loop's and the call's, and for ``in_slot`` (the
    array whose pointer the binding's slot holds) that slot's and this argument's."""
    for a in pool:
        if _refcount(a) == (5 if a is in_slot else 3):
            return a
    a = np.empty(shape, dtype)
    if len(pool) >= POOL_SIZE:
        del pool[0]
    pool.append(a)
    return a


_refcount = sys.getrefcount


def _sole(a: np.ndarray, in_slot: np.ndarray | None, pool: list[np.ndarray],
          extra_refs: int = 0) -> bool:
    """Whether variable array ``a`` owns its memory and nobody else holds it: then the
    step may change it in place unseen. The references that do not count: the caller's
    store and list of the step's variables, this argument and the call's, the binding's
    slot and ``in_slot`` if the slot holds ``a`` (it did last step), and the update pool
    if ``a`` came from it, and the ``extra_refs`` its caller's caller holds."""
    refs = 4 + extra_refs
    if a is in_slot:
        refs += 2
    for p in pool:
        if p is a:
            refs += 1
    # (the loop's name holds the pool's last array: counted, ``a`` was never sole when it
    # was that array, i.e. for the two steps after a new update array joined the pool)
    if pool:
        del p
    return _refcount(a) == refs and a.flags.owndata


def _same_shapes(feeds: Sequence[np.ndarray], shapes: tuple) -> bool:
    """Whether the feeds have ``shapes`` (those of the latest binding: the usual case)."""
    i = 0
    for a in feeds:
        if a.shape != shapes[i]:
            return False
        i += 1
    return True


def _offsets(plan: Any, binding: Binding) -> tuple[dict[int, int], int]:
    """Arena byte offset of each buffer of the plan, and the arena's size, for ``binding``
    (dynamic buffers, of values with '?' dims, sized by the binding's concrete shapes)."""
    shapes = binding.shapes
    itemsizes: dict[Any, int] = {}  # dtype -> bytes (a DType's itemsize is 3 lookups)

    def value_bytes(v: Any) -> int:
        s = shapes.get(v)
        if s is None:
            s = binding.shape(v)
        n = 1
        for d in s:
            n *= d
        t = v.type.dtype
        size = itemsizes.get(t)
        if size is None:
            size = itemsizes[t] = t.itemsize
        return n * size

    try:
        offs = plan.offsets(binding.symbols, value_bytes)
        total = plan.arena_bytes(binding.symbols, value_bytes)
        out = {}
        for buf, o in zip(plan.buffers, offs):
            out[buf.id] = o
            room = total - o  # the plan's sizes must hold every value at this binding
            for v in buf.values:
                if v in shapes and value_bytes(v) > room:
                    raise ValueError("buffer too small")
        return out, -(-total // ALIGN) * ALIGN
    except (KeyError, TypeError, ValueError, AttributeError, TfcError):
        # sizes the plan cannot evaluate: lay the buffers out one after another
        out, total = {}, 0
        for buf in plan.buffers:
            out[buf.id] = total
            need = max((value_bytes(v) for v in buf.values if v in binding.shapes), default=0)
            total += -(-need // ALIGN) * ALIGN
        return out, total

# ---- kernel timing ------------------------------------------------------------------------

def _clock_offset() -> float:
    """``time.perf_counter() - CLOCK_MONOTONIC`` in seconds: 0 where perf_counter is that
    clock (Linux), else measured once (the smallest gap of a few back-to-back reads)."""
    info = time.get_clock_info("perf_counter")
    if info.implementation == "clock_gettime(CLOCK_MONOTONIC)":
        return 0.0
    best = None
    for _ in range(5):
        a = time.perf_counter()
        m = time.monotonic_ns() * 1e-9
        b = time.perf_counter()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) / 2 - m)
    assert best is not None
    return best[1]


_CLOCK_OFFSET = _clock_offset()
def profile_report(exe: "LLVMExecutable") -> list[tuple[float, str]]:
    """(seconds, kernel name) per kernel of the latest step of a profiled executable,
    largest first."""
    return sorted(((end - start, name) for name, start, end in exe.kernel_times()),
                  reverse=True)
