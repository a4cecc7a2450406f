"""The glue as data: an entry's schedule as a table of words that one fixed loop walks.

A step of an entry runs the graph's kernels in schedule order with pointers computed from
the pointer array and the arena offsets among the params, copies between buffers, and
hands large splittable kernels to the thread pool. That used to be a function generated
per entry (``tfc_entry``: one call per kernel, 1.5k calls for a 256-layer MLP), built in
llvmlite, printed and compiled for every model and for every edit of one. Now it is data:

- ``draft`` (after lowering, where the entry function was built) turns the schedule into
  records, naming each kernel by its function;
- ``finish`` (after ``kernel_units.split_module`` named each kernel's unit by its
  content) names the kernels by their units' symbols: ``StepTable``, the words and the
  symbols, which ``NativeMeta`` stores beside the object code;
- ``RUNNER`` is the same module for every entry: ``tfc_entry(ptrs, params)`` loads the
  table's address from its global ``tfc_step_table`` and walks it (``tfc_run_steps``).
  Its object code comes from the object-code cache after the first compile on a host;
- ``install`` (when the code is loaded) checks the table, resolves the symbols to the
  loaded units' addresses and points ``tfc_step_table`` at a copy with them filled in.

The table (``i64`` words): a header of ``HEADER`` words (the step count, the arena's
pointer slot, the most pointers a kernel takes, then addresses ``install`` fills in: the
kernels' entry points, the pool's ``tfc_pool_run``, the profile's stamps and clock; then
the threads and the split threshold as *values*), then one record per step:

- a kernel run inline: ``INLINE, symbol, nargs, pointer * nargs``;
- a kernel the pool may split: ``SPLIT, symbol, nargs, extent, work, pointer * nargs``;
  split when threads > 1, work >= threshold and extent > 1 (``parallel``), with
  ``chunks = min(extent, max(threads, min(threads * CHUNKS_PER_THREAD, work / CHUNK_WORK)))``;
- a copy: ``COPY, src, dst, nbytes slot``; ``COPY_IF_APART`` skips it when the two
  pointers are the same array (an update made in place: ``in_place_updates``).

A *pointer* ``d >= 0`` is ``ptrs[d]``; ``d < 0`` is the arena plus ``params[-d - 1]``. A
*value* ``v >= 0`` is the constant ``v``; ``v < 0`` is ``params[-v - 1]``. A symbol is an
index into the symbols; unit ``s`` exports ``s_whole(argv, params)`` (the kernel over its
whole range, its pointers read from ``argv``) and, when splittable, ``s_task(argv, params,
lo, hi)``.

Per step the loop reads a few words and fills the kernel's pointer array: nanoseconds
against kernels of microseconds (measured on the issue's MLP, one thread: step CPU time
within noise of the generated entry's at L = 4, 64 and 256).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import llvmlite.ir as ir
import numpy as np

from tfc.backends.llvm import irutil
from tfc.backends.llvm.context import Kernel, Storage, whole_range
from tfc.backends.llvm.runtime.pool import CHUNK_WORK, CHUNKS_PER_THREAD, default_threads, \
    min_work
from tfc.errors import ArtifactError

if TYPE_CHECKING:
    from tfc.backends.llvm.entry import GraphCompiler
    from tfc.backends.llvm.runtime.native import Loaded

ENTRY = "tfc_entry"
RUN = "tfc_run_steps"
TABLE_GLOBAL = "tfc_step_table"
PROF_STAMPS = "tfc_prof_stamps"  # the global of kernel timestamps (profile mode)
INLINE, SPLIT, COPY, COPY_IF_APART = 0, 1, 2, 3
WHOLE_SUFFIX, TASK_SUFFIX = "_whole", "_task"
# header words
(H_STEPS, H_ARENA_SLOT, H_MAX_ARGS, H_FNS, H_POOL, H_STAMPS, H_CLOCK, H_THREADS,
 H_MIN_WORK) = range(9)
HEADER = 9
CLOCK_MONOTONIC = 1  # Linux


@dataclass(frozen=True)
class StepTable:
    """An entry's schedule as ``install`` takes it: the words (addresses in the header
    left 0) and the unit symbols the kernel records name by index."""

    words: tuple[int, ...]
    symbols: tuple[str, ...]


@dataclass
class Draft:
    """The table before the units have their symbols: records name kernel functions."""

    words: list[int]
    functions: list[str]  # kernel function names, by the index the records use
    # ``in_place_updates`` of the schedule drafted (update index -> variable index): the
    # updates its COPY_IF_APART records make, which the run-time tables must name
    in_place: dict[int, int]


def _pointer(graph_compiler: GraphCompiler, s: Storage) -> int:
    if s.kind in ("arena", "scratch"):
        return -graph_compiler.arena_offset_param(s) - 1
    return graph_compiler.slot_of(s)


def _value(kind: str, val: int) -> int:
    return val if kind == "const" else -val - 1


def draft(graph_compiler: GraphCompiler, threads: int | None, profile: bool) -> Draft:
    """The records of ``graph_compiler``'s steps (its kernels lowered and deduplicated).
    Asks for the params the records read (arena offsets, the thread count, the
    threshold) as the generated entry did; with ``profile``, defines the stamps global."""
    from tfc.backends.llvm.entry import Copy
    from tfc.backends.llvm.parallel import splits, trampoline
    comp = graph_compiler.comp
    nthreads = default_threads() if threads is None else max(1, int(threads))
    words = [0] * HEADER
    words[H_STEPS] = len(graph_compiler.steps)
    words[H_ARENA_SLOT] = graph_compiler.arena_slot
    words[H_THREADS] = words[H_MIN_WORK] = 1
    index: dict[str, int] = {}
    functions: list[str] = []
    in_place_updates = graph_compiler.in_place_updates()
    in_place = {Storage("upd", j) for j in in_place_updates}
    max_args, any_split = 1, False
    # per step, what is the same for many (a kernel function called from every layer, a
    # storage every kernel of a layer takes): each computed once, keyed without the
    # Python-level hash of a Storage or the name lookups of an llvmlite function
    pointers: dict[Storage, int] = {}
    at = pointers.get
    fn_index: dict[int, tuple[Any, int]] = {}  # id(function) -> (function, its index)
    split_of: dict[tuple[int, Any, Any], bool] = {}  # (id(function), extent, work) -> splits

    def pointer(s: Storage) -> int:
        d = at(s)
        if d is None:
            d = pointers[s] = _pointer(graph_compiler, s)
        return d

    for step in graph_compiler.steps:
        if type(step) is Copy:
            words += [COPY_IF_APART if step.dst in in_place else COPY,
                      pointer(step.src), pointer(step.dst), step.nbytes_slot]
            continue
        assert isinstance(step, Kernel)
        fn = step.fn
        hit = fn_index.get(id(fn))
        if hit is None:
            whole_range(step)  # (once per function: it makes its wrapper once)
            name = fn.name
            k = index.get(name)
            if k is None:
                k = index[name] = len(functions)
                functions.append(name)
            hit = fn_index[id(fn)] = (fn, k)
        k = hit[1]
        found = list(map(at, step.storages))  # (each storage's pointer made once)
        args: list[int] = list(map(pointer, step.storages)) if None in found \
            else found  # type: ignore[assignment]
        if len(args) > max_args:
            max_args = len(args)
        split = False
        if nthreads > 1:
            key = (id(fn), step.extent, step.work)
            split = split_of.get(key)  # type: ignore[assignment]
            if split is None:
                split = split_of[key] = splits(step)
                if split:
                    trampoline(step)  # (once per function too)
        if split:
            assert step.extent is not None and step.work is not None
            any_split = True
            words += [SPLIT, k, len(args), _value(*step.extent), _value(*step.work), *args]
        else:
            words += [INLINE, k, len(args), *args]
    words[H_MAX_ARGS] = max_args
    if any_split:
        words[H_THREADS] = _value("param", comp.param(("threads",), lambda binding: nthreads))
        words[H_MIN_WORK] = _value("param", comp.param(("parallel_min",),
                                                       lambda binding: min_work()))
    if profile:
        arr = ir.ArrayType(irutil.I64, len(graph_compiler.steps) + 1)
        stamps = ir.GlobalVariable(comp.module, arr, PROF_STAMPS)
        stamps.initializer = ir.Constant(arr, None)
    return Draft(words, functions, in_place_updates)


def finish(plan: Draft, symbol_of: dict[str, str]) -> StepTable:
    """``plan`` with each kernel function named by its unit's symbol (``symbol_of``:
    function name -> ``tfck_<hash>``); records keep their indices, which now index
    ``symbols``: functions that became one unit still have one index each."""
    return StepTable(tuple(plan.words), tuple(symbol_of[f] for f in plan.functions))


def check(table: StepTable, n_ptrs: int, n_params: int) -> int:
    """The most pointers a kernel record of ``table`` passes (what the loop's pointer
    array holds: counted here, not taken from the header), after checking that every
    record reads inside the pointer array, the params and the symbols (native code walks
    it unchecked); ``ArtifactError`` otherwise."""
    w, nsym = table.words, len(table.symbols)

    def bad(what: str) -> ArtifactError:
        return ArtifactError(f"invalid step table: {what}")

    if len(w) < HEADER or w[H_STEPS] < 0:
        raise bad("no header")
    if w[H_ARENA_SLOT] != n_ptrs - 1:
        raise bad("the arena is not the last pointer")

    def value(v: int) -> None:
        if v < 0 and -v - 1 >= n_params:
            raise bad(f"param slot {-v - 1} of {n_params}")

    def pointer(d: int) -> None:
        if d >= n_ptrs or (d < 0 and -d - 1 >= n_params):
            raise bad(f"pointer {d}")
    value(w[H_THREADS])
    value(w[H_MIN_WORK])
    pos, steps, most, used = HEADER, 0, w[H_MAX_ARGS], 1
    while pos < len(w):
        kind = w[pos]
        if kind in (COPY, COPY_IF_APART):
            if pos + 4 > len(w) or not 0 <= w[pos + 3] < n_params:
                raise bad(f"copy at word {pos}")
            pointer(w[pos + 1])
            pointer(w[pos + 2])
            pos += 4
        elif kind in (INLINE, SPLIT):
            first = pos + (5 if kind == SPLIT else 3)
            if first > len(w) or not 0 <= w[pos + 1] < nsym or not 0 <= w[pos + 2] <= most:
                raise bad(f"kernel at word {pos}")
            if kind == SPLIT:
                value(w[pos + 3])
                value(w[pos + 4])
            if first + w[pos + 2] > len(w):
                raise bad(f"kernel at word {pos}")
            for d in w[first:first + w[pos + 2]]:
                pointer(d)
            used = max(used, w[pos + 2])
            pos = first + w[pos + 2]
        else:
            raise bad(f"record kind {kind} at word {pos}")
        steps += 1
    if steps != w[H_STEPS]:
        raise bad(f"{steps} records for {w[H_STEPS]} steps")
    return used


def install(loaded: Loaded, table: StepTable, n_ptrs: int, n_params: int) -> np.ndarray:
    """Point the loaded runner's ``tfc_step_table`` at ``table`` with its addresses filled
    in; returns the array, which must live as long as the code. ``ArtifactError`` for a
    table that does not fit the code (``check``, a symbol it does not define)."""
    most = check(table, n_ptrs, n_params)
    words = np.array(table.words + (0,) * (2 * len(table.symbols)), dtype=np.int64)
    fns = words[len(table.words):]
    splits = _split_symbols(table)
    for k, symbol in enumerate(table.symbols):
        try:
            fns[2 * k] = loaded.address(symbol + WHOLE_SUFFIX)
            fns[2 * k + 1] = loaded.address(symbol + TASK_SUFFIX) if k in splits else 0
        except RuntimeError:
            raise ArtifactError(f"the native code has no kernel {symbol}") from None
    words[H_MAX_ARGS] = most
    words[H_FNS] = fns.ctypes.data
    if splits:
        from tfc.backends.llvm.runtime.pool import runtime
        words[H_POOL] = runtime().run_addr
    stamps = loaded.global_address(PROF_STAMPS)
    if stamps:
        from tfc.backends.llvm.runtime.symbols import libc
        words[H_STAMPS] = stamps
        words[H_CLOCK] = ctypes.cast(libc().clock_gettime, ctypes.c_void_p).value or 0
        if not words[H_CLOCK]:
            words[H_STAMPS] = 0
    where = loaded.global_address(TABLE_GLOBAL)
    if not where:
        raise ArtifactError("the native code has no step table")
    ctypes.c_void_p.from_address(where).value = words.ctypes.data
    return words


def records(words: Sequence[int]) -> Iterator[tuple[int, int]]:
    """``(kind, position)`` of each record of a checked table's ``words``."""
    pos = HEADER
    while pos < len(words):
        kind = words[pos]
        yield kind, pos
        pos += 4 if kind in (COPY, COPY_IF_APART) else (
            (5 if kind == SPLIT else 3) + words[pos + 2])


def _split_symbols(table: StepTable) -> set[int]:
    return {table.words[pos + 1] for kind, pos in records(table.words) if kind == SPLIT}


@functools.cache
def runner(triple: str, layout: str) -> str:
    """The module every entry loads last: ``tfc_entry``, the loop and the table global."""
    head = (f'target triple = "{triple}"\ntarget datalayout = "{layout}"\n' if triple else "")
    return head + _RUNNER.format(
        ENTRY=ENTRY, RUN=RUN, TABLE=TABLE_GLOBAL, HEADER=HEADER, COPY=COPY, SPLIT=SPLIT,
        CHUNK_WORK=CHUNK_WORK, CHUNKS_PER_THREAD=CHUNKS_PER_THREAD, CLOCK=CLOCK_MONOTONIC)


_RUNNER = """
@{TABLE} = global ptr null

declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define internal i64 @word(ptr %t, i64 %i) alwaysinline {{
  %p = getelementptr i64, ptr %t, i64 %i
  %v = load i64, ptr %p
  ret i64 %v
}}

; a pointer: ptrs[d] for d >= 0, else the arena plus params[-d - 1]
define internal ptr @pointer(ptr %ptrs, ptr %params, ptr %arena, i64 %d) alwaysinline {{
entry:
  %isslot = icmp sge i64 %d, 0
  br i1 %isslot, label %slot, label %offset
slot:
  %sp = getelementptr ptr, ptr %ptrs, i64 %d
  %s = load ptr, ptr %sp
  ret ptr %s
offset:
  %k = sub i64 -1, %d
  %op = getelementptr i64, ptr %params, i64 %k
  %off = load i64, ptr %op
  %a = getelementptr i8, ptr %arena, i64 %off
  ret ptr %a
}}

; a value: v for v >= 0, else params[-v - 1]
define internal i64 @value(ptr %params, i64 %v) alwaysinline {{
entry:
  %isconst = icmp sge i64 %v, 0
  br i1 %isconst, label %const, label %param
const:
  ret i64 %v
param:
  %k = sub i64 -1, %v
  %pp = getelementptr i64, ptr %params, i64 %k
  %x = load i64, ptr %pp
  ret i64 %x
}}

define internal void @stamp(ptr %stamps, ptr %clock, i64 %k, ptr %ts) noinline {{
  %r = call i32 %clock(i32 {CLOCK}, ptr %ts)
  %sec = load i64, ptr %ts
  %np = getelementptr i64, ptr %ts, i64 1
  %nsec = load i64, ptr %np
  %ns = mul i64 %sec, 1000000000
  %now = add i64 %ns, %nsec
  %sp = getelementptr i64, ptr %stamps, i64 %k
  store i64 %now, ptr %sp
  ret void
}}

define i32 @{RUN}(ptr %t, ptr %ptrs, ptr %params) {{
entry:
  %ts = alloca i64, i64 2
  %n = call i64 @word(ptr %t, i64 0)
  %arena_slot = call i64 @word(ptr %t, i64 1)
  %max_args = call i64 @word(ptr %t, i64 2)
  %fns.i = call i64 @word(ptr %t, i64 3)
  %fns = inttoptr i64 %fns.i to ptr
  %pool.i = call i64 @word(ptr %t, i64 4)
  %pool = inttoptr i64 %pool.i to ptr
  %stamps.i = call i64 @word(ptr %t, i64 5)
  %stamps = inttoptr i64 %stamps.i to ptr
  %clock.i = call i64 @word(ptr %t, i64 6)
  %clock = inttoptr i64 %clock.i to ptr
  %threads.d = call i64 @word(ptr %t, i64 7)
  %threads = call i64 @value(ptr %params, i64 %threads.d)
  %least.d = call i64 @word(ptr %t, i64 8)
  %least = call i64 @value(ptr %params, i64 %least.d)
  %argv = alloca ptr, i64 %max_args
  %ap = getelementptr ptr, ptr %ptrs, i64 %arena_slot
  %arena = load ptr, ptr %ap
  %have_pool = icmp ne i64 %pool.i, 0
  %many = icmp sgt i64 %threads, 1
  %may_split = and i1 %have_pool, %many
  %prof = icmp ne i64 %stamps.i, 0
  br i1 %prof, label %zero, label %head
zero:
  %last = getelementptr i64, ptr %stamps, i64 %n
  store i64 0, ptr %last
  br label %head
head:
  %k = phi i64 [0, %entry], [0, %zero], [%k1, %next]
  %pos = phi i64 [{HEADER}, %entry], [{HEADER}, %zero], [%pos1, %next]
  %done = icmp eq i64 %k, %n
  br i1 %done, label %finish, label %step
step:
  br i1 %prof, label %tick, label %dispatch
tick:
  call void @stamp(ptr %stamps, ptr %clock, i64 %k, ptr %ts)
  br label %dispatch
dispatch:
  %kind = call i64 @word(ptr %t, i64 %pos)
  %iscopy = icmp sge i64 %kind, {COPY}
  %p1 = add i64 %pos, 1
  %w1 = call i64 @word(ptr %t, i64 %p1)
  %p2 = add i64 %pos, 2
  %w2 = call i64 @word(ptr %t, i64 %p2)
  br i1 %iscopy, label %copy, label %kernel
copy:
  %src = call ptr @pointer(ptr %ptrs, ptr %params, ptr %arena, i64 %w1)
  %dst = call ptr @pointer(ptr %ptrs, ptr %params, ptr %arena, i64 %w2)
  %p3 = add i64 %pos, 3
  %nbslot = call i64 @word(ptr %t, i64 %p3)
  %nb = call i64 @word(ptr %params, i64 %nbslot)
  %always = icmp eq i64 %kind, {COPY}
  %apart = icmp ne ptr %dst, %src
  %do = or i1 %always, %apart
  br i1 %do, label %docopy, label %copied
docopy:
  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %nb, i1 false)
  br label %copied
copied:
  %pos.c = add i64 %pos, 4
  br label %next
kernel:
  %split = icmp eq i64 %kind, {SPLIT}
  %skip = select i1 %split, i64 5, i64 3
  %a0 = add i64 %pos, %skip
  br label %args
args:
  %i = phi i64 [0, %kernel], [%i1, %arg]
  %more = icmp slt i64 %i, %w2
  br i1 %more, label %arg, label %call
arg:
  %ai = add i64 %a0, %i
  %d = call i64 @word(ptr %t, i64 %ai)
  %ptr = call ptr @pointer(ptr %ptrs, ptr %params, ptr %arena, i64 %d)
  %slotp = getelementptr ptr, ptr %argv, i64 %i
  store ptr %ptr, ptr %slotp
  %i1 = add i64 %i, 1
  br label %args
call:
  %pos.k = add i64 %a0, %w2
  %wi = shl i64 %w1, 1
  %wp = getelementptr ptr, ptr %fns, i64 %wi
  %whole = load ptr, ptr %wp
  %try = and i1 %split, %may_split
  br i1 %try, label %measure, label %inline
measure:
  %p3k = add i64 %pos, 3
  %ext.d = call i64 @word(ptr %t, i64 %p3k)
  %ext = call i64 @value(ptr %params, i64 %ext.d)
  %p4k = add i64 %pos, 4
  %work.d = call i64 @word(ptr %t, i64 %p4k)
  %work = call i64 @value(ptr %params, i64 %work.d)
  %enough = icmp sge i64 %work, %least
  %long = icmp sgt i64 %ext, 1
  %go = and i1 %enough, %long
  br i1 %go, label %parallel, label %inline
parallel:
  %ti = add i64 %wi, 1
  %tp = getelementptr ptr, ptr %fns, i64 %ti
  %task = load ptr, ptr %tp
  %tmax = mul i64 %threads, {CHUNKS_PER_THREAD}
  %byw = sdiv i64 %work, {CHUNK_WORK}
  %lt1 = icmp slt i64 %tmax, %byw
  %m1 = select i1 %lt1, i64 %tmax, i64 %byw
  %gt2 = icmp sgt i64 %threads, %m1
  %m2 = select i1 %gt2, i64 %threads, i64 %m1
  %lt3 = icmp slt i64 %ext, %m2
  %chunks = select i1 %lt3, i64 %ext, i64 %m2
  %rc.p = call i32 %pool(ptr %task, ptr %argv, ptr %params, i64 %ext, i64 %threads, i64 %chunks)
  br label %called
inline:
  %rc.i = call i32 %whole(ptr %argv, ptr %params)
  br label %called
called:
  %rc = phi i32 [%rc.p, %parallel], [%rc.i, %inline]
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %next, label %failed
failed:
  ret i32 %rc
next:
  %pos1 = phi i64 [%pos.c, %copied], [%pos.k, %called]
  %k1 = add i64 %k, 1
  br label %head
finish:
  br i1 %prof, label %tock, label %end
tock:
  call void @stamp(ptr %stamps, ptr %clock, i64 %n, ptr %ts)
  br label %end
end:
  ret i32 0
}}

define i32 @{ENTRY}(ptr %ptrs, ptr %params) {{
  %t = load ptr, ptr @{TABLE}
  %rc = call i32 @{RUN}(ptr %t, ptr %ptrs, ptr %params)
  ret i32 %rc
}}
"""
