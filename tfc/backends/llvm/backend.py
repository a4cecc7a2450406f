"""The LLVM CPU backend: a graph compiled to native code with one entry point.

Pipeline of ``LLVMBackend.compile(module, entry)``:

1. **Passes** are not the backend's: the module must have been lowered for it
   (``tfc.pipeline.lower`` runs ``LLVMBackend.pipeline``, ``fusion`` then ``memory``),
   so the entry's graph is the final IR and ``module.memory_plans`` holds its schedule
   and arena. ``compile`` refuses a module without the entry's plan.
2. **Lowering.** Every op becomes kernel functions in one LLVM module (``kernels``),
   and the schedule (``entry``) a table of steps that one fixed native loop walks
   (``step_table``: no code per entry). An op lowered like one before
   (the same layer L times) calls that op's kernels instead of building its own
   (``kernel_memo``), identical kernels left become one function, and the module is
   split into one unit per distinct kernel (``kernel_units``). Ops
   the backend cannot lower are collected: if there is any, the executable runs the
   whole graph on the reference interpreter, lists them in ``fallback_ops`` and warns
   (never silently).
3. **Code.** Each unit is optimized at O3 for the host CPU (new pass manager), compiled
   to object code, and all loaded into one MCJIT engine with the BLAS symbols bound and
   the step table's runner; the table is given the units' addresses then. Object code is cached on disk per module by a hash of its
   IR and the host (``jit``), so a kernel met before (in any entry, model or process) and
   the same graph again skip LLVM; ``LLVMBackend.export`` and ``load`` let an artifact carry
   it (members ``object.o``, ``host``, ``tables.json``, ``const/NNNN.npy``).

What runs a step, ``LLVMExecutable``, and its run-time tables (``NativeMeta``) are in
``runtime/executable.py``.

Threads: kernels whose outermost loop is large enough are split into chunks that a
persistent native worker pool and the calling thread share (``parallel``; ``threads``,
``TFC_NUM_THREADS``, ``TFC_PARALLEL_MIN``); BLAS uses OpenBLAS's own pool.

Choices where the design left room:

- Fallback is per graph, never per op: one op the kernels cannot lower (every registered
  op and dtype lowers today: tests/backends/llvm/test_op_coverage.py; what is left are
  shapes such as a symbolic filter size) sends the whole graph to the reference backend,
  named in ``fallback_ops``, ``report`` and a warning.
- Run-time checks native code relies on: feed dtypes and shapes (per call; shapes once
  per binding), symbols consistent across feeds, symbolic dims never broadcast at run
  time, variables' dtype and shape. Index errors (``gather``, ``scatter``, labels) and
  integer division by zero are error codes turned into ``ExecutionError``.
- ``load`` (object code from an artifact) starts from the stored run-time tables
  (params, storage layout, error messages) and lowers the graph again in Python only for
  feed shapes they have no binding for, or when there are no tables: deterministic, a
  few tens of milliseconds, and no LLVM work; the host key guards against foreign CPUs
  (``ForeignNativeCode``: the entry compiles again).
- ``profile=True`` compiles an entry whose step table timestamps every kernel natively
  (``clock_gettime(CLOCK_MONOTONIC)`` before each step and after the last, into a
  global of the loaded code): ``LLVMExecutable.kernel_times()`` gives the latest step's
  ``(kernel name, start, end)`` on the ``time.perf_counter`` clock, which ``tfc bench``
  turns into trace spans. Off by default, and then nothing of it is in the code.
"""

from __future__ import annotations

import io
import json
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Mapping

import numpy as np

from tfc.backends.base import ForeignNativeCode, planned
from tfc.backends.llvm import jit, step_table
from tfc.backends.llvm.entry import GraphCompiler
from tfc.backends.llvm.kernel_units import Split, dedup_kernels, split_module
from tfc.backends.llvm.kernels_scalar import Unsupported
from tfc.backends.llvm.runtime import entry_cache, native
from tfc.backends.llvm.runtime.executable import LLVMExecutable, NativeMeta
from tfc.backends.llvm.runtime.symbols import register_symbols
from tfc.errors import ArtifactError, TfcError
from tfc.ir.core import Graph, Module
from tfc.passes.manager import parse_pipeline, paused_gc


@dataclass
class CompileReport:
    """What one compilation did, for ``tfc compile`` reports and benchmarks."""

    graph: str
    kernels: int = 0
    # kernels that differ (``kernel_units.dedup_kernels``: identical ones are compiled
    # once), and how many of those the object-code cache held; 0 when nothing was lowered
    distinct_kernels: int = 0
    kernels_cached: int = 0
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
        distinct = (f" ({self.distinct_kernels} distinct, {self.kernels_cached} cached)"
                    if self.distinct_kernels else "")
        return (f"llvm @{self.graph}: {self.kernels} kernels{distinct}, "
                f"passes [{', '.join(self.passes)}],"
                f" {self.memory_plan} plan, {'cached' if self.cached else 'compiled'} object "
                f"code {self.object_bytes} bytes; {times}")


# The members ``LLVMBackend.export`` makes for one entry and ``load`` reads: the object
# code, the host key it was built for, the run-time tables and their constants.
OBJECT_MEMBER, HOST_MEMBER, TABLES_MEMBER, CONSTANTS_PREFIX = (
    "object.o", "host", "tables.json", "const/")


def _check_host(entry: str, host_key: str) -> None:
    """``ForeignNativeCode`` unless object code built for ``host_key`` runs here."""
    if host_key != native.host_key():
        parts = host_key.split("|")
        cpu = parts[1] if len(parts) > 1 else host_key
        raise ForeignNativeCode(f"object code for @{entry} was built for another CPU "
                                f"({cpu}); recompile it here")


def _npy_bytes(arr: np.ndarray) -> bytes:
    """``arr`` as the ``.npy`` file ``np.save`` writes (no pickle)."""
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


class LLVMBackend:
    """Compiles entry graphs to native code through llvmlite (see the module docstring)."""

    name = "llvm"
    # What ``tfc.pipeline`` runs before ``compile``: fuse kernels, then plan the arena.
    pipeline = "fusion,memory{gemm_updates=true}"  # (no buffers for what gemm_update folds)

    def __init__(self, *, use_cache: bool = True, threads: int | None = None,
                 profile: bool = False) -> None:
        self.use_cache = use_cache
        self.threads = threads
        self.profile = profile

    def _lower(self, module: Module, entry: str) -> tuple[Module, Graph, GraphCompiler,
                                                          CompileReport]:
        from tfc.backends.llvm.kernels import lower
        report = CompileReport(entry)
        graph, plan = planned(module, entry, self.name)
        report.passes = [p.name for p in parse_pipeline(self.pipeline)]  # run before compile
        report.memory_plan = "memory pass"
        t1 = time.perf_counter()
        triple, layout = native.triple_and_layout()
        graph_compiler = GraphCompiler(module, graph, plan, triple, layout)
        try:
            graph_compiler.assign_storage()
            failed = graph_compiler.lower_all(lower)
        except Unsupported as e:
            failed = [str(e)]
        report.fallback_ops = sorted(set(failed))
        report.kernels = len(graph_compiler.calls)
        if not failed:
            report.distinct_kernels = dedup_kernels(graph_compiler)
            graph_compiler.step_draft = step_table.draft(graph_compiler, self.threads,
                                                         self.profile)
        report.seconds["lower"] = time.perf_counter() - t1
        return module, graph, graph_compiler, report

    @staticmethod
    def _split(graph_compiler: GraphCompiler) -> Split:
        """The kernel units of a lowered entry; sets its step table (the draft's kernels
        named by their units' symbols)."""
        assert graph_compiler.step_draft is not None
        split = split_module(graph_compiler)
        graph_compiler.step_table = step_table.finish(graph_compiler.step_draft,
                                                      split.symbols)
        return split

    def thread_count(self) -> int:
        """The threads its kernels split over: ``threads``, else the pool's default
        (``TFC_NUM_THREADS`` or the cores)."""
        from tfc.backends.llvm.runtime.pool import default_threads
        return default_threads() if self.threads is None else max(1, int(self.threads))

    def blas_threads(self, threads: int) -> ContextManager[None]:
        """OpenBLAS (which the GEMM kernels call; its thread count is process-wide and
        apart from the kernels' own ``threads``) on at most ``threads`` threads while the
        returned context is entered: the multi-device executor limits a step's BLAS calls
        to the devices' share of the cores, as it limits their kernels
        (``tfc.runtime.executor``), and ``tfc calibrate`` measures at each count. Holders
        may overlap across threads (``symbols.limited_threads`` says how)."""
        from tfc.backends.llvm.runtime.symbols import limited_threads
        return limited_threads(threads)

    def profiled(self) -> "LLVMBackend":
        """This backend with kernel timing on (``profile=True``), for ``tfc bench``."""
        return LLVMBackend(use_cache=self.use_cache, threads=self.threads, profile=True)

    def _options(self) -> str:
        """The settings the native code and its bindings depend on (entry cache key)."""
        from tfc.backends.llvm.runtime.pool import default_threads, min_work
        threads = default_threads() if self.threads is None else max(1, int(self.threads))
        return f"threads={threads} parallel_min={min_work()} profile={self.profile}"

    def _cache_key(self, module: Module, entry: str) -> str | None:
        if not self.use_cache:
            return None
        try:
            return entry_cache.entry_key(module, entry, self._options())
        except TfcError:  # attrs the bytecode cannot hold: compile without the cache
            return None

    def compile(self, module: Module, entry: str) -> LLVMExecutable:
        """The executable of ``entry`` of ``module``, which must be lowered for this
        backend (``tfc.pipeline.lower``): its memory plan is there, no pass runs here."""
        with paused_gc():  # (the lowering's objects live until it ends: see paused_gc)
            return self._compile(module, entry)

    def _compile(self, module: Module, entry: str) -> LLVMExecutable:
        planned(module, entry, self.name)
        register_symbols()
        t0 = time.perf_counter()
        key = self._cache_key(module, entry)
        hit = entry_cache.get(key) if key is not None else None
        if hit is not None:
            try:
                exe = self._from_meta(module, entry, *hit)
            except ArtifactError:  # tables that do not fit: compile anew, and replace them
                pass
            else:
                exe.report.seconds["entry cache"] = time.perf_counter() - t0
                exe.cache_key = key
                return exe
        work, graph, graph_compiler, report = self._lower(module, entry)
        if report.fallback_ops:
            warnings.warn(f"llvm backend: graph @{entry} runs on the reference backend; "
                          f"ops not supported yet: {', '.join(report.fallback_ops)}",
                          stacklevel=3)
            return LLVMExecutable(work, graph, None, None, report)
        t0 = time.perf_counter()
        split = self._split(graph_compiler)
        runner = step_table.runner(graph_compiler.triple, graph_compiler.layout)
        report.ir_bytes = len(split.data) + sum(len(u.text) for u in split.units)
        t1 = time.perf_counter()
        report.seconds["ir"] = t1 - t0
        code = jit.compile_split(split.data, [u.text for u in split.units], runner,
                                 self.use_cache)
        obj = code.code
        report.kernels_cached = code.units_cached
        report.cached = code.units_cached == code.units
        report.object_bytes = len(obj)
        report.seconds["llvm"] = time.perf_counter() - t1
        exe = LLVMExecutable(work, graph, graph_compiler, obj, report)
        if key is not None:
            exe.cache_key = key
            meta = exe.native_meta()
            assert meta is not None  # native code: no fallback ops (returned above)
            entry_cache.put(key, obj, meta)
        return exe

    def compile_stored(self, source_key: str, module: Module, entry: str,
                       lowered: Callable[[], Module]) -> LLVMExecutable | None:
        """The executable the entry cache holds for ``entry`` of the module lowered from
        ``module`` under ``source_key`` (``tfc.api.lowered_cache``'s key: that module's
        ``Module.source_key``), made without that lowered module; None where the cache
        holds no such entry (or tables that do not fit): the caller then compiles the
        lowered module (``compile``).

        ``module``, the module the lowered one was made from, stands for it (the passes
        keep the entry's signature and the variables: the caller checks that the lowered
        one recorded the same, ``lowered_cache.Lowering.stand_in``), and ``lowered()``
        gives the lowered module (decoded and verified, once) when its IR is needed: feed
        shapes the tables have no binding for (``relower``), ``exe.module`` /
        ``exe.graph``.

        This is no laxer than ``compile`` of the decoded module: on an entry-cache hit
        that compile reads the decoded IR for nothing but the key (``source_key``, known
        before decoding: ``entry_cache.source_entry_key``) and the signature; the code
        that runs is the entry's, which ``compile`` in some process made from a module it
        lowered, or decoded and verified, itself, never from this process's on-disk IR.
        Its tables are checked against the signature here (``_from_meta``), its bindings
        when loaded (``LLVMExecutable._bound_from``), and anything lowered later is
        lowered from ``lowered()``, which verifies what it reads from disk, and must give
        the same tables (``LLVMExecutable._lowered``)."""
        if not self.use_cache:
            return None
        with paused_gc():
            register_symbols()
            t0 = time.perf_counter()
            key = entry_cache.source_entry_key(source_key, entry, self._options())
            hit = entry_cache.get(key)
            if hit is None:
                return None
            try:
                exe = self._from_meta(module, entry, *hit, lowered=lowered)
            except ArtifactError:  # tables that do not fit: ``compile`` replaces them
                return None
            exe.report.seconds["entry cache"] = time.perf_counter() - t0
            exe.cache_key = key
            return exe

    def export(self, executable: Any) -> dict[str, bytes]:
        """The members an artifact stores for ``executable``: its object code, the host
        key it was built for and its run-time tables (``NativeMeta``: ``tables.json``
        and the constants as ``const/NNNN.npy``). None for a reference fallback or an
        executable this backend did not make (a partitioned entry's)."""
        if not isinstance(executable, LLVMExecutable) or executable.object_code is None:
            return {}
        members = {OBJECT_MEMBER: executable.object_code,
                   HOST_MEMBER: executable.host_key.encode("utf-8")}
        meta = executable.native_meta()
        if meta is not None:  # run-time tables: loading needs no lowering
            table, arrays = meta.to_members(CONSTANTS_PREFIX)
            members[TABLES_MEMBER] = json.dumps(table).encode("utf-8")
            for name, arr in arrays.items():
                members[name] = _npy_bytes(arr)
        return members

    def load(self, module: Module, entry: str, members: Mapping[str, bytes]
             ) -> LLVMExecutable:
        """The executable of ``entry`` from the members ``export`` made (``load_code``
        does the work). ``ForeignNativeCode`` for code built on another host; an
        ``ArtifactError`` for members it cannot use. Without ``tables.json`` (artifacts
        that stored none) the graph is lowered again to rebuild the tables."""
        for name in (OBJECT_MEMBER, HOST_MEMBER):
            if name not in members:
                raise ArtifactError(f"the native code of '{entry}' lacks its member {name}")
        try:
            host = members[HOST_MEMBER].decode("utf-8")
        except UnicodeDecodeError:
            raise ArtifactError(f"the host key of '{entry}' is not text") from None
        _check_host(entry, host)
        meta, used = None, {OBJECT_MEMBER, HOST_MEMBER}
        if TABLES_MEMBER in members:
            try:
                table = json.loads(members[TABLES_MEMBER].decode("utf-8"))
                meta = NativeMeta.from_members(table, members)
            except ValueError as e:  # bad JSON or UTF-8 too
                raise ArtifactError(f"invalid native tables for '{entry}': {e}") from None
            used.update([TABLES_MEMBER, *table["constant_files"]])
        unknown = sorted(set(members) - used)
        if unknown:
            raise ArtifactError(f"the native code of '{entry}' has members the llvm backend "
                                f"does not know: {', '.join(unknown)}")
        return self.load_code(module, entry, members[OBJECT_MEMBER], host, meta)

    def load_code(self, module: Module, entry: str, object_code: bytes,
                  host_key: str | None = None, meta: NativeMeta | None = None
                  ) -> LLVMExecutable:
        """The executable of ``entry`` from object code made by ``compile`` (on a machine
        with the same ``host_key``). With ``meta`` (``LLVMExecutable.native_meta()`` of the
        compiled one) nothing is lowered until a call meets feed shapes that ``meta`` has
        no binding for; without it the graph is lowered again in Python to rebuild the
        run-time tables. LLVM neither optimizes nor generates code either way."""
        register_symbols()
        if host_key is not None:
            _check_host(entry, host_key)
        if meta is None:
            work, graph, graph_compiler, report = self._lower(module, entry)
            if report.fallback_ops:
                raise ArtifactError(f"@{entry} cannot run on the llvm backend (unsupported: "
                                    f"{', '.join(report.fallback_ops)})")
            self._split(graph_compiler)  # (the units' symbols: the step table names them)
            report.object_bytes = len(object_code)
            report.cached = True
            return LLVMExecutable(work, graph, graph_compiler, object_code, report)
        return self._from_meta(module, entry, object_code, meta)

    def _from_meta(self, module: Module, entry: str, object_code: bytes, meta: NativeMeta,
                   lowered: Callable[[], Module] | None = None) -> LLVMExecutable:
        """The executable of stored object code and its tables: lowering waits for feed
        shapes the tables have no binding for. ``lowered``: ``module`` only stands for
        the lowered module, which ``lowered()`` gives (``compile_stored``)."""
        if entry not in module.graphs:
            raise TfcError(f"unknown entry '{entry}' (entries: {', '.join(module.graphs)})")
        graph = module.graphs[entry]
        unknown = [n for n in (*meta.var_names, *meta.updates) if n not in module.variables]
        if unknown:
            raise ArtifactError(f"the native code of @{entry} uses undeclared variable "
                                f"@{unknown[0]}")
        if meta.n_ptrs != (len(graph.args) + len(meta.var_names) + len(meta.constants)
                           + len(graph.results) + len(meta.updates) + 1):
            raise ArtifactError(f"the native tables of @{entry} do not fit its graph")
        report = CompileReport(entry, kernels=meta.kernels, passes=list(meta.passes),
                               memory_plan="stored", cached=True,
                               object_bytes=len(object_code))

        def relower() -> tuple[Module, Graph, GraphCompiler]:
            work, g, graph_compiler, rep = self._lower(
                module if lowered is None else lowered(), entry)
            if rep.fallback_ops:
                raise ArtifactError(f"@{entry} cannot run on the llvm backend (unsupported: "
                                    f"{', '.join(rep.fallback_ops)})")
            report.seconds.update(rep.seconds)
            return work, g, graph_compiler

        return LLVMExecutable(module, graph, None, object_code, report, meta=meta,
                              relower=relower, lowered=lowered)

