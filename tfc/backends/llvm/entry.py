"""One graph -> kernel functions in one LLVM module, and the schedule that runs them.

A step runs the graph's kernels in schedule order (``GraphCompiler.steps``), copies what
must be copied (a fetch that is a feed, a variable or a view; an assigned value that
could not be computed in place: right after the value is defined, while its buffer holds
it), and returns 0 or the first kernel's error code. The schedule is data, walked by one
fixed native loop (``step_table``): ``i32 tfc_entry(ptr ptrs, ptr params)``.

``ptrs`` is one array of data pointers, in this order: the feeds (graph arguments), the
variables whose start-of-step value the graph reads (sorted by name), the constants, the caller's output
buffers (one per graph result), the variable-update buffers (one per updated variable,
in ``GraphCompiler.updates`` order), and the arena. ``params`` is the ``i64`` array of
run-time parameters (``context.Compiler.params``), which include the arena offset of
every buffer.

Storage (see ``context``): graph results are computed straight into the caller's output
buffers and assigned values into the update buffers when the value is computed by an op
of this graph (not a view, feed, variable or constant), appears first there, and is not
overwritten in place by a later op; everything else computed lives in the arena, one
buffer per value of the memory plan (views share their source's storage).

Kernel timing (``profile=True``): the loop reads ``CLOCK_MONOTONIC`` (``clock_gettime``,
the clock of ``time.perf_counter`` on Linux) before each step and after the last, into
the global ``tfc_prof_stamps`` (``i64`` nanoseconds, one per step plus one); it zeroes
the last stamp first, so a step that failed leaves it 0. Each step has a label
(``GraphCompiler.labels``): the op it lowers, e.g. ``matmul#1`` or ``fusion#3
(add,relu)``. Without ``profile`` the table has no stamps and the loop skips them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from tfc.backends.llvm.context import Compiler, Kernel, Storage
from tfc.backends.llvm.kernels_expr import is_view
from tfc.backends.llvm.kernels_scalar import Unsupported
from tfc.ir.core import Graph, Module, Op, Value
from tfc.ir.registry import writes_variable

STORAGE_KINDS = frozenset({"var.read", "constant"})  # storage of their own, no kernel
INT64_MAX = (1 << 63) - 1


def no_kernel(kind: str) -> bool:
    """Ops that compute nothing: ``var.read`` and ``constant`` (storage of their own) and
    views (their input's storage)."""
    return kind in STORAGE_KINDS or is_view(kind)


@dataclass
class Copy:
    """``dst = src`` (``nbytes`` a param slot), a step of the schedule."""

    src: Storage
    dst: Storage
    nbytes_slot: int


@dataclass
class GraphCompiler:
    """Storage assignment, kernel calls and the entry function of one graph."""

    module: Module
    graph: Graph
    plan: Any  # a tfc.passes.memory.MemoryPlan
    triple: str = ""
    layout: str = ""
    comp: Compiler = field(init=False)
    var_names: list[str] = field(default_factory=list)
    constants: list[np.ndarray] = field(default_factory=list)
    updates: list[str] = field(default_factory=list)
    # positions in ``var_names`` and ``updates`` (lookups per kernel and per pointer were
    # list scans: quadratic in the variables of a 256-layer model)
    var_index: dict[str, int] = field(default_factory=dict)
    update_index: dict[str, int] = field(default_factory=dict)
    steps: list[Kernel | Copy] = field(default_factory=list)  # in schedule order
    # per op that made steps: (its first step, the step after its last, the op, how many
    # ops of its kind came before it); ``labels`` and ``step_ops`` are read off them
    marks: list[tuple[int, int, Op, int]] = field(default_factory=list)
    buffers: list[int] = field(default_factory=list)  # arena buffer ids used
    gemm_updates: dict[Op, Any] | None = None  # gemm_update.find(graph), when lowering
    # the LLVM text of the kernel functions (``kernel_units``: printed once, after lowering)
    function_texts: dict[str, str] = field(default_factory=dict)
    # op signature -> the kernels an op with it was lowered to (``kernel_memo``)
    kernel_memo: dict[Any, Any] = field(default_factory=dict)
    # op kind -> its lowering (``kernels.lowering_of``, asked once per kind)
    lowerings: dict[str, Any] = field(default_factory=dict)
    memo_keys: Any = None  # what its signatures are made of (``kernel_memo.Keys``)
    # the schedule as data (``step_table``): drafted after lowering, finished once the
    # kernel units are named
    step_draft: Any = None
    step_table: Any = None

    def __post_init__(self) -> None:
        self.comp = Compiler(self.graph.name, self.triple, self.layout)
        self._const_index: dict[int, int] = {}
        self._arena_of: dict[int, Storage] = {}  # per buffer in ``buffers``, its storage

    # ---- storage ----------------------------------------------------------------------

    def const_storage(self, arr: np.ndarray) -> Storage:
        k = self._const_index.get(id(arr))
        if k is None:
            k = self._const_index[id(arr)] = len(self.constants)
            self.constants.append(np.ascontiguousarray(arr))
        return Storage("const", k)

    def assign_storage(self) -> None:
        g, st, plan = self.graph, self.comp.storage, self.plan
        writes: dict[str, bool] = {}  # writes_variable per kind (a registry lookup per op)
        for op in g.ops:
            if op.kind not in writes:
                writes[op.kind] = writes_variable(op)
        overwritten = set(getattr(plan, "in_place", {}).values())
        # results and assigned values computed in place of their final buffers
        redirect: dict[Value, Storage] = {}
        for j, v in enumerate(g.results):
            if self._computed(v) and v not in redirect and v not in overwritten:
                redirect[v] = Storage("out", j)
        names: set[str] = set()  # variables whose start-of-step value is read
        for op in g.ops:  # (one walk: the reads, and the updates in order)
            kind = op.kind
            if kind == "var.read":
                names.add(op.attrs["var"])
            elif writes[kind]:
                name = op.attrs["var"]
                if kind != "var.assign":
                    names.add(name)
                if name in self.update_index:
                    raise Unsupported(f"@{name} is updated twice in one step")
                self.update_index[name] = len(self.updates)
                self.updates.append(name)
                assigned = op.inputs[0] if kind == "var.assign" else None
                if assigned is not None and self._computed(assigned) \
                        and assigned not in redirect and assigned not in overwritten:
                    redirect[assigned] = Storage("upd", len(self.updates) - 1)
        self.var_names = sorted(names)
        self.var_index = {name: k for k, name in enumerate(self.var_names)}
        for i, a in enumerate(g.args):
            st[a] = Storage("feed", i)
        views: dict[str, bool] = {}  # is_view per kind
        # values the plan leaves out, which no kernel writes (``gemm_update``): no storage
        unplanned = set(getattr(plan, "unplanned", ()))
        for op in g.ops:
            kind = op.kind
            view = views.get(kind)
            if view is None:
                view = views[kind] = is_view(kind)
            if kind == "var.read":
                st[op.result] = Storage("var", op.attrs["var"])
            elif kind == "constant":
                st[op.result] = self.const_storage(op.attrs["value"])
            elif view:
                st[op.result] = st[op.inputs[0]]
            else:
                for r in op.results:
                    if r in redirect:
                        st[r] = redirect[r]
                    elif r not in unplanned:
                        st[r] = self._arena(r)

    def _computed(self, v: Value) -> bool:
        return v.op is not None and not no_kernel(v.op.kind)

    def _arena(self, v: Value) -> Storage:
        plan = self.plan
        root = plan.alias_of.get(v, v)
        buf = plan.buffer_of.get(root, plan.buffer_of.get(v))
        if buf is None:
            raise Unsupported(f"the memory plan has no buffer for {v}")
        s = self._arena_of.get(buf)
        if s is None:  # (one Storage per buffer)
            s = self._arena_of[buf] = Storage("arena", buf)
            self.buffers.append(buf)
        return s

    # ---- kernels ----------------------------------------------------------------------

    def kernel(self, base: str, values: list[Value], extra: Sequence[Storage] = ()) -> Kernel:
        """A new kernel taking the storages of ``values`` (deduplicated) and ``extra``."""
        storages: list[Storage] = []
        for v in values:
            s = self.comp.storage.get(v)
            if s is None:
                raise Unsupported(f"{v} has no storage")
            if s not in storages:
                storages.append(s)
        for s in extra:
            if s not in storages:
                storages.append(s)
        kernel = Kernel(self.comp, self.comp.unique(base), storages)
        self.steps.append(kernel)
        return kernel

    @property
    def calls(self) -> list[Kernel]:
        return [s for s in self.steps if isinstance(s, Kernel)]

    def bytes_param(self, v: Value) -> int:
        item = v.dtype.itemsize
        return self.comp.param(("bytes", id(v)), lambda binding: binding.size(v) * item)

    def copy_now(self, v: Value, dst: Storage, nbytes_of: Value | None = None) -> None:
        """Copy ``v`` to ``dst`` at this point of the schedule (while ``v``'s buffer
        surely holds it: the memory plan may reuse it after its last use)."""
        src = self.comp.storage[v]
        if src != dst:
            self.steps.append(Copy(src, dst, self.bytes_param(nbytes_of or v)))

    def in_place_updates(self) -> dict[int, int]:
        """Updates that may be computed in their variable's own array: update index ->
        read-variable index. Those are the updates made by copying the variable into the
        update buffer and accumulating there (``gemm_update``, a variable's scatter) where
        no later step reads the variable and no later step can fail: given the same array
        for both slots, the copy is skipped (the entry compares the pointers) and the step
        changes the array in place. A step that fails (a label out of range ...) must
        leave every variable as it was, so an update made before a step that may fail goes
        to its own buffer, which the runtime applies only when the step succeeds; the one
        exception is the update's own kernel right after the copy when it fails only
        before writing (``Kernel.fails_before_writes``: a scatter checks its indices
        first). Whether it may (nothing but the program holds the array) is decided per
        call by the runtime."""
        out: dict[int, int] = {}
        last_use: dict[Storage, int] = {}  # the last step that uses each storage
        failing: list[int] = []  # the steps that may fail
        copies: list[int] = []
        for k, step in enumerate(self.steps):
            if type(step) is Copy:
                last_use[step.src] = k
                last_use[step.dst] = k
                copies.append(k)
                continue
            for st in step.storages:  # type: ignore[union-attr]
                last_use[st] = k
            if step.can_fail:  # type: ignore[union-attr]
                failing.append(k)
        for k in copies:
            step = self.steps[k]
            assert isinstance(step, Copy)
            if not (step.src.kind == "var" and step.dst.kind == "upd"):
                continue
            if last_use[step.src] > k or failing and failing[-1] > k and any(  # read, or
                    j > k and not self._fails_first(j, step.dst)  # may fail later
                    for j in failing):
                continue
            name = step.src.index
            if name in self.var_index:
                out[int(step.dst.index)] = self.var_index[name]
        return out

    def _fails_first(self, k: int, update: Storage) -> bool:
        """Whether step ``k`` may fail only before writing, and only into ``update``
        right after its copy (step ``k - 1``), so a failure leaves the variable as it was."""
        step, before = self.steps[k], self.steps[k - 1]
        return (isinstance(step, Kernel) and step.fails_before_writes
                and isinstance(before, Copy) and before.dst == update)

    def lower_all(self, lower: Callable[["GraphCompiler", Op], None]) -> list[str]:
        """Lower every op; returns the kinds that could not be lowered (with reasons)."""
        failed: list[str] = []
        g = self.graph
        wanted: dict[Value, list[int]] = {}
        for j, v in enumerate(g.results):
            wanted.setdefault(v, []).append(j)
        for v in g.args:  # fetches of feeds
            for j in wanted.get(v, []):
                self.copy_now(v, Storage("out", j))
        seen: dict[str, int] = {}  # (per kind, the ops met: labels count them)
        steps, marks = self.steps, self.marks
        for op in g.ops:
            kind = op.kind
            n = seen.get(kind, 0)
            seen[kind] = n + 1
            first = len(steps)
            try:
                lower(self, op)
            except Unsupported as e:
                failed.append(f"{kind} ({e})" if str(e) and str(e) != kind else kind)
                continue
            if len(steps) > first:
                marks.append((first, len(steps), op, n))
            if wanted:
                for r in op.results:
                    got = wanted.get(r)
                    if got is not None:
                        for j in got:
                            self.copy_now(r, Storage("out", j))
        return failed

    @property
    def labels(self) -> list[str]:
        """Per step, the op it lowers: ``op_label`` (``[i/n]`` after it when the op made
        several kernels), ``copy (label)`` for a copy an op made, ``copy`` for the others
        (fetches of feeds, results copied out). Made when asked (profiles, reports)."""
        return self._labelled()[0]

    @property
    def step_ops(self) -> list[Op | None]:
        """Per step, the op that made it (None: a copy of a result or fetched feed)."""
        return self._labelled()[1]

    def _labelled(self) -> tuple[list[str], list[Op | None]]:
        labels: list[str] = []
        ops: list[Op | None] = []
        for first, end, op, n in self.marks:
            while len(labels) < first:
                labels.append("copy")
                ops.append(None)
            label = _label_text(op, n)
            new = self.steps[first:end]
            ops.extend(op for _ in new)
            count = sum(isinstance(s, Kernel) for s in new)
            i = 0
            for s in new:
                if isinstance(s, Kernel):
                    i += 1
                    labels.append(label if count == 1 else f"{label} [{i}/{count}]")
                else:
                    labels.append(f"copy ({label})")
        labels.extend("copy" for _ in self.steps[len(labels):])
        ops.extend(None for _ in self.steps[len(ops):])
        return labels, ops

    def kernel_labels(self) -> list[tuple[int, str]]:
        """(step index, label) of each kernel, in schedule order."""
        labels = self.labels
        return [(k, labels[k] if k < len(labels) else f"kernel {k}")
                for k, s in enumerate(self.steps) if isinstance(s, Kernel)]

    def step_sources(self) -> list[tuple[Op, ...]]:
        """The ops of the graph each step (kernel or copy) works for, in schedule order:
        the op it lowers, and for a weight update folded into its GEMM (``gemm_update``)
        the ops that update stands for too (they emit no kernel of their own); none for
        the copies of fetched feeds, which no op computes."""
        updates = self.gemm_updates or {}
        step_ops = self.step_ops
        out: list[tuple[Op, ...]] = []
        for k in range(len(self.steps)):
            op = step_ops[k] if k < len(step_ops) else None
            upd = updates.get(op) if op is not None else None
            out.append(() if op is None else
                       (op, *upd.absorbed) if upd is not None and upd.matmul is op else (op,))
        return out

    def kernel_ops(self) -> list[tuple[Op, ...]]:
        """``step_sources`` of the kernels only, in ``kernel_labels`` order."""
        sources = self.step_sources()
        return [sources[k] for k, s in enumerate(self.steps) if isinstance(s, Kernel)]

    # ---- the entry --------------------------------------------------------------------

    def slot_of(self, s: Storage) -> int:
        nf, nv, nc = len(self.graph.args), len(self.var_names), len(self.constants)
        nr = len(self.graph.results)
        if s.kind == "feed":
            return s.index
        if s.kind == "var":
            return nf + self.var_index[s.index]
        if s.kind == "const":
            return nf + nv + s.index
        if s.kind == "out":
            return nf + nv + nc + s.index
        if s.kind == "upd":
            return nf + nv + nc + nr + s.index
        raise ValueError(s)

    @property
    def arena_slot(self) -> int:
        return (len(self.graph.args) + len(self.var_names) + len(self.constants)
                + len(self.graph.results) + len(self.updates))

    def arena_offset_param(self, s: Storage) -> int:
        if s.kind == "scratch":
            return self.comp.param(("scratch",), lambda binding: binding.scratch_offset)
        k = s.index
        return self.comp.param(("arena", k), lambda binding: binding.offsets[k])


def op_label(op: Op, seen: dict[str, int]) -> str:
    """What a kernel of ``op`` is called in profiles: ``kind#n`` (the n-th op of that
    kind in the schedule, from 0) and, for a fusion, the kinds it fuses."""
    n = seen.get(op.kind, 0)
    seen[op.kind] = n + 1
    return _label_text(op, n)


def _label_text(op: Op, n: int) -> str:
    """``op_label`` of the ``n``-th op of its kind."""
    label = f"{op.kind}#{n}"
    if op.kind == "fusion" and op.regions:
        kinds = dict.fromkeys(o.kind for r in op.regions for o in r.ops
                              if o.kind != "constant")
        label += f" ({','.join(kinds)})"
    return label
