"""The persistent native thread pool that runs split kernels (``tfc_pool_run``).

How the entry splits a kernel and calls the pool is code generation
(``tfc.backends.llvm.parallel``); this module is what runs: the pool's own code, its
loading and its settings.

**The pool** is a small runtime written here in LLVM IR, compiled once per process into
its own MCJIT engine (never freed: its worker threads live as long as the process) and
bound for the kernels' object code with ``llvm.add_symbol``. Kernel modules declare
``tfc_pool_run`` ``extern_weak``: code loaded before the runtime was registered sees a
null pointer and runs its kernels on the calling thread, so a missing runtime can only
cost speed. Per call it allocates nothing and creates no thread:

- Workers (up to ``threads - 1``, started on first need, detached, all signals blocked)
  wait for the job generation ``gen`` to change: they spin (``TFC_POOL_SPIN`` pause
  instructions, then a few ``sched_yield``: about 100 us, which covers the gap between
  the kernels of a step and between steps), then sleep on a futex (Linux; elsewhere
  they keep yielding). The caller wakes sleepers only when there are any.
- A job is ``chunks`` ranges of ``ceil(n / chunks)`` outer iterations, more chunks than
  threads. Chunks are claimed with a compare-and-swap on one 64-bit ticket (job id in
  the high half, next chunk in the low half): a worker that wakes late, even one that
  read the fields of a later job, can only claim a chunk of the job that is current.
- The calling thread claims chunks too and then waits only for chunks already claimed
  (spinning, then on a futex): a descheduled worker that has claimed nothing costs
  nothing, the caller does its share.
- Error codes: the code of the lowest-numbered failing chunk wins (deterministic).
- One job runs at a time: a caller that finds the pool busy (another Python thread is
  running another executable, one per device in ``tfc.runtime.executor``) runs its
  kernel on its own thread, which is what the busy cores leave it anyway.
- ``fork``: the child has no workers; ``os.register_at_fork`` resets the pool in the
  child, which starts new workers on its first split kernel. Without the reset (a fork
  that bypasses Python) the design still cannot deadlock: the caller finishes every chunk
  itself when no worker claims one.

No Python runs in any of this: a step is still one call from Python into native code.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
from typing import Any

import llvmlite.binding as llvm

MAX_THREADS = 64
POOL_RUN = "tfc_pool_run"
# A chunk is at least this many elements of work (when there is enough for T chunks).
CHUNK_WORK = 8192
CHUNKS_PER_THREAD = 8
# A worker waiting for work polls DEFAULT_SPIN times with a pause instruction (~25 ns
# each on znver3), then YIELDS times with sched_yield (a core another thread wants, an
# OpenBLAS worker during a GEMM, is given up), then sleeps on a futex. About 100 us in
# all: longer than the gap between the kernels of a step and than Python's per-step
# overhead, short enough not to burn a core for long. A caller waiting for chunks that
# workers have claimed spins DEFAULT_SPIN times, then sleeps.
DEFAULT_SPIN = 2000
YIELDS = 50


def default_threads() -> int:
    env = os.environ.get("TFC_NUM_THREADS")
    if env:
        return max(1, min(int(env), MAX_THREADS))
    return max(1, min(os.cpu_count() or 1, 16))


def min_work() -> int:
    return int(os.environ.get("TFC_PARALLEL_MIN", "65536"))


def spin_count() -> int:
    return max(0, int(os.environ.get("TFC_POOL_SPIN", str(DEFAULT_SPIN))))


# ---- the runtime (LLVM IR, one engine per process) ---------------------------------------

_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}


def _platform_ir() -> tuple[str, str, str]:
    """(pause body, wait body, wake body) for this machine: futexes on Linux."""
    machine = platform.machine().lower()
    pause = ("call void @llvm.x86.sse2.pause()\n  ret void" if machine in ("x86_64", "amd64")
             else "ret void")
    nr = _FUTEX.get(machine) if sys.platform.startswith("linux") else None
    if nr is None:
        return pause, "%r = call i32 @sched_yield()\n  ret void", "ret void"
    # FUTEX_WAIT_PRIVATE = 128, FUTEX_WAKE_PRIVATE = 129; values as i64 (varargs)
    wait = (f"%v64 = zext i32 %v to i64\n"
            f"  %r = call i64 (i64, ...) @syscall(i64 {nr}, ptr %a, i64 128, i64 %v64, ptr null)\n"
            f"  ret void")
    wake = (f"%n64 = zext i32 %n to i64\n"
            f"  %r = call i64 (i64, ...) @syscall(i64 {nr}, ptr %a, i64 129, i64 %n64)\n"
            f"  ret void")
    return pause, wait, wake


def runtime_ir(triple: str, layout: str) -> str:
    """The pool's IR (see the module docstring for the protocol)."""
    pause, wait, wake = _platform_ir()
    pause_decl = "declare void @llvm.x86.sse2.pause()" if "x86" in pause else ""
    block_signals = sys.platform.startswith("linux")
    sigmask = ("  %set = alloca [128 x i8], align 8\n"
               "  call void @llvm.memset.p0.i64(ptr %set, i8 -1, i64 128, i1 false)\n"
               "  %sm = call i32 @pthread_sigmask(i32 0, ptr %set, ptr null)\n"
               if block_signals else "")
    return f"""
target triple = "{triple}"
target datalayout = "{layout}"

%job_t = type {{ ptr, ptr, ptr, i64, i64, i64, i32 }}  ; fn argv params n csize chunks helpers

@busy = internal global i32 0, align 64
@gen = internal global i32 0, align 64
@sleepers = internal global i32 0, align 64
@ticket = internal global i64 4294967295, align 64
@finished = internal global i32 0, align 64
@cwait = internal global i32 0, align 64
@err = internal global i64 -1, align 64
@job = internal global %job_t zeroinitializer, align 64
@nworkers = internal global i32 0, align 64
@spin = internal global i64 {DEFAULT_SPIN}, align 64
@stats = internal global [4 x i64] zeroinitializer, align 64

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @pthread_sigmask(i32, ptr, ptr)
declare i64 @syscall(i64, ...)
declare i32 @sched_yield()
{pause_decl}
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

define internal void @pause() {{
  {pause}
}}

define internal void @rt_wait(ptr %a, i32 %v) noinline {{
  {wait}
}}

define internal void @rt_wake(ptr %a, i32 %n) noinline {{
  {wake}
}}

define internal void @stat_add(i32 %k, i64 %d) {{
  %p = getelementptr [4 x i64], ptr @stats, i64 0, i32 %k
  %o = atomicrmw add ptr %p, i64 %d monotonic
  ret void
}}

; Claims and runs chunks of the current job until none is left; returns how many it ran.
; Fields are read between loading the ticket and the compare-and-swap that claims from
; it, so a claim that succeeds was made with the fields of the job it claims from.
define internal i64 @drain() {{
entry:
  %done = alloca i64
  store i64 0, ptr %done
  br label %top
top:
  %t0 = load atomic i64, ptr @ticket seq_cst, align 8
  br label %try
try:
  %t = phi i64 [ %t0, %top ], [ %tnew, %retry ]
  %c = and i64 %t, 4294967295
  %pchunks = getelementptr %job_t, ptr @job, i64 0, i32 5
  %chunks = load atomic i64, ptr %pchunks seq_cst, align 8
  %has = icmp ult i64 %c, %chunks
  br i1 %has, label %claim, label %out
claim:
  %fn = load atomic ptr, ptr @job seq_cst, align 8
  %pargv = getelementptr %job_t, ptr @job, i64 0, i32 1
  %argv = load atomic ptr, ptr %pargv seq_cst, align 8
  %pparams = getelementptr %job_t, ptr @job, i64 0, i32 2
  %params = load atomic ptr, ptr %pparams seq_cst, align 8
  %pn = getelementptr %job_t, ptr @job, i64 0, i32 3
  %n = load atomic i64, ptr %pn seq_cst, align 8
  %pcs = getelementptr %job_t, ptr @job, i64 0, i32 4
  %csize = load atomic i64, ptr %pcs seq_cst, align 8
  %t1 = add i64 %t, 1
  %pair = cmpxchg ptr @ticket, i64 %t, i64 %t1 seq_cst seq_cst
  %ok = extractvalue {{ i64, i1 }} %pair, 1
  %tnew = extractvalue {{ i64, i1 }} %pair, 0
  br i1 %ok, label %run, label %retry
retry:
  br label %try
run:
  %lo = mul i64 %c, %csize
  %hi0 = add i64 %lo, %csize
  %lt = icmp slt i64 %hi0, %n
  %hi = select i1 %lt, i64 %hi0, i64 %n
  %r = call i32 %fn(ptr %argv, ptr %params, i64 %lo, i64 %hi)
  %bad = icmp ne i32 %r, 0
  br i1 %bad, label %fail, label %count
fail:
  %cs = shl i64 %c, 32
  %rz = zext i32 %r to i64
  %packed = or i64 %cs, %rz
  %om = atomicrmw umin ptr @err, i64 %packed seq_cst
  br label %count
count:
  %f = atomicrmw add ptr @finished, i32 1 seq_cst
  %f1 = add i32 %f, 1
  %c32 = trunc i64 %chunks to i32
  %all = icmp eq i32 %f1, %c32
  br i1 %all, label %last, label %next
last:
  %cw = load atomic i32, ptr @cwait seq_cst, align 4
  %w = icmp ne i32 %cw, 0
  br i1 %w, label %wake, label %next
wake:
  call void @rt_wake(ptr @finished, i32 1)
  br label %next
next:
  %d = load i64, ptr %done
  %d1 = add i64 %d, 1
  store i64 %d1, ptr %done
  br label %top
out:
  %dd = load i64, ptr %done
  ret i64 %dd
}}

; A worker: arg = index | (generation seen at start) << 32.
define internal ptr @rt_worker(ptr %arg) {{
entry:
{sigmask}  %seen.a = alloca i32
  %spins.a = alloca i64
  %a = ptrtoint ptr %arg to i64
  %idx = trunc i64 %a to i32
  %ah = lshr i64 %a, 32
  %s0 = trunc i64 %ah to i32
  store i32 %s0, ptr %seen.a
  br label %idle
idle:
  store i64 0, ptr %spins.a
  br label %poll
poll:
  %g = load atomic i32, ptr @gen acquire, align 4
  %seen = load i32, ptr %seen.a
  %changed = icmp ne i32 %g, %seen
  br i1 %changed, label %got, label %spin
spin:
  %sp = load i64, ptr %spins.a
  %lim = load atomic i64, ptr @spin monotonic, align 8
  %sp1 = add i64 %sp, 1
  store i64 %sp1, ptr %spins.a
  %more = icmp ult i64 %sp, %lim
  br i1 %more, label %pausing, label %yielding
pausing:
  call void @pause()
  br label %poll
yielding:
  %ylim = add i64 %lim, {YIELDS}
  %ymore = icmp ult i64 %sp, %ylim
  br i1 %ymore, label %yield, label %sleep
yield:
  %y = call i32 @sched_yield()
  br label %poll
sleep:
  %x1 = atomicrmw add ptr @sleepers, i32 1 seq_cst
  %g2 = load atomic i32, ptr @gen seq_cst, align 4
  %same = icmp eq i32 %g2, %seen
  br i1 %same, label %dowait, label %woke
dowait:
  call void @rt_wait(ptr @gen, i32 %seen)
  br label %woke
woke:
  %x2 = atomicrmw sub ptr @sleepers, i32 1 seq_cst
  br label %poll
got:
  store i32 %g, ptr %seen.a
  %ph = getelementptr %job_t, ptr @job, i64 0, i32 6
  %h = load atomic i32, ptr %ph seq_cst, align 4
  %mine = icmp ult i32 %idx, %h
  br i1 %mine, label %work, label %idle
work:
  %ran = call i64 @drain()
  call void @stat_add(i32 1, i64 %ran)
  br label %idle
}}

; Runs task(argv, params, lo, hi) over [0, n) in `chunks` ranges on up to `threads`
; threads (the caller included); returns the lowest failing chunk's code, or 0.
define i32 @{POOL_RUN}(ptr %fn, ptr %argv, ptr %params, i64 %n, i64 %threads, i64 %chunks) {{
entry:
  %tid.a = alloca i64
  %nw.a = alloca i32
  %one = icmp slt i64 %threads, 2
  %fewc = icmp slt i64 %chunks, 2
  %fewn = icmp slt i64 %n, 2
  %o1 = or i1 %one, %fewc
  %o2 = or i1 %o1, %fewn
  br i1 %o2, label %serial, label %lock
lock:
  %lk = cmpxchg ptr @busy, i32 0, i32 1 acquire monotonic
  %locked = extractvalue {{ i32, i1 }} %lk, 1
  br i1 %locked, label %grow, label %contended
contended:
  call void @stat_add(i32 2, i64 1)
  br label %serial
grow:
  %h0 = sub i64 %threads, 1
  %hbig = icmp sgt i64 %h0, {MAX_THREADS - 1}
  %h1 = select i1 %hbig, i64 {MAX_THREADS - 1}, i64 %h0
  %h = trunc i64 %h1 to i32
  %gcur = load atomic i32, ptr @gen monotonic, align 4
  %nw0 = load atomic i32, ptr @nworkers monotonic, align 4
  store i32 %nw0, ptr %nw.a
  br label %start
start:
  %nw = load i32, ptr %nw.a
  %need = icmp slt i32 %nw, %h
  br i1 %need, label %create, label %started
create:
  %nwz = zext i32 %nw to i64
  %gz = zext i32 %gcur to i64
  %gs = shl i64 %gz, 32
  %argi = or i64 %gs, %nwz
  %argp = inttoptr i64 %argi to ptr
  %cr = call i32 @pthread_create(ptr %tid.a, ptr null, ptr @rt_worker, ptr %argp)
  %crok = icmp eq i32 %cr, 0
  br i1 %crok, label %created, label %started
created:
  %tid = load i64, ptr %tid.a
  %dt = call i32 @pthread_detach(i64 %tid)
  %nwn = add i32 %nw, 1
  store i32 %nwn, ptr %nw.a
  br label %start
started:
  %nwf = load i32, ptr %nw.a
  store atomic i32 %nwf, ptr @nworkers monotonic, align 4
  %hl = icmp slt i32 %nwf, %h
  %eff = select i1 %hl, i32 %nwf, i32 %h
  %none = icmp eq i32 %eff, 0
  br i1 %none, label %unlock_serial, label %post
unlock_serial:
  store atomic i32 0, ptr @busy release, align 4
  br label %serial
post:
  %cm1 = add i64 %chunks, -1
  %ncm = add i64 %n, %cm1
  %csize = sdiv i64 %ncm, %chunks
  %csm1 = add i64 %csize, -1
  %ncs = add i64 %n, %csm1
  %nchunks = sdiv i64 %ncs, %csize
  %gnext = add i32 %gcur, 1
  %gn = zext i32 %gnext to i64
  %tbase = shl i64 %gn, 32
  %tclosed = or i64 %tbase, 4294967295
  store atomic i64 %tclosed, ptr @ticket seq_cst, align 8
  store atomic ptr %fn, ptr @job seq_cst, align 8
  %pargv = getelementptr %job_t, ptr @job, i64 0, i32 1
  store atomic ptr %argv, ptr %pargv seq_cst, align 8
  %pparams = getelementptr %job_t, ptr @job, i64 0, i32 2
  store atomic ptr %params, ptr %pparams seq_cst, align 8
  %pn = getelementptr %job_t, ptr @job, i64 0, i32 3
  store atomic i64 %n, ptr %pn seq_cst, align 8
  %pcs = getelementptr %job_t, ptr @job, i64 0, i32 4
  store atomic i64 %csize, ptr %pcs seq_cst, align 8
  %pch = getelementptr %job_t, ptr @job, i64 0, i32 5
  store atomic i64 %nchunks, ptr %pch seq_cst, align 8
  %ph = getelementptr %job_t, ptr @job, i64 0, i32 6
  store atomic i32 %eff, ptr %ph seq_cst, align 4
  store atomic i32 0, ptr @finished seq_cst, align 4
  store atomic i64 -1, ptr @err seq_cst, align 8
  store atomic i64 %tbase, ptr @ticket seq_cst, align 8
  store atomic i32 %gnext, ptr @gen seq_cst, align 4
  %sl = load atomic i32, ptr @sleepers seq_cst, align 4
  %anysl = icmp ne i32 %sl, 0
  br i1 %anysl, label %wakeall, label %mywork
wakeall:
  call void @rt_wake(ptr @gen, i32 2147483647)
  br label %mywork
mywork:
  %mine = call i64 @drain()
  %nc32 = trunc i64 %nchunks to i32
  %lim = load atomic i64, ptr @spin monotonic, align 8
  br label %spinwait
spinwait:
  %i = phi i64 [ 0, %mywork ], [ %i1, %spinmore ]
  %f = load atomic i32, ptr @finished seq_cst, align 4
  %fin = icmp eq i32 %f, %nc32
  br i1 %fin, label %done, label %spincheck
spincheck:
  %i1 = add i64 %i, 1
  %sm = icmp ult i64 %i, %lim
  br i1 %sm, label %spinmore, label %sleepwait
spinmore:
  call void @pause()
  br label %spinwait
sleepwait:
  store atomic i32 1, ptr @cwait seq_cst, align 4
  br label %sleeploop
sleeploop:
  %f2 = load atomic i32, ptr @finished seq_cst, align 4
  %fin2 = icmp eq i32 %f2, %nc32
  br i1 %fin2, label %woken, label %sleeping
sleeping:
  call void @rt_wait(ptr @finished, i32 %f2)
  br label %sleeploop
woken:
  store atomic i32 0, ptr @cwait seq_cst, align 4
  br label %done
done:
  %e = load atomic i64, ptr @err seq_cst, align 8
  %ok = icmp eq i64 %e, -1
  %e32 = trunc i64 %e to i32
  %rc = select i1 %ok, i32 0, i32 %e32
  call void @stat_add(i32 0, i64 1)
  call void @stat_add(i32 3, i64 %mine)
  store atomic i32 0, ptr @busy release, align 4
  ret i32 %rc
serial:
  %rs = call i32 %fn(ptr %argv, ptr %params, i64 0, i64 %n)
  ret i32 %rs
}}

; The state of a fresh pool (no workers): at load, and in a forked child.
define void @tfc_pool_reset() {{
  store atomic i32 0, ptr @nworkers seq_cst, align 4
  store atomic i32 0, ptr @sleepers seq_cst, align 4
  store atomic i32 0, ptr @cwait seq_cst, align 4
  store atomic i64 4294967295, ptr @ticket seq_cst, align 8
  store atomic i32 0, ptr @busy seq_cst, align 4
  ret void
}}

define void @tfc_pool_set_spin(i64 %n) {{
  store atomic i64 %n, ptr @spin seq_cst, align 8
  ret void
}}

; 0: jobs run on the pool, 1: chunks run by workers, 2: calls that found the pool busy,
; 3: chunks run by callers, 4: workers started.
define i64 @tfc_pool_stat(i32 %k) {{
  %isw = icmp eq i32 %k, 4
  br i1 %isw, label %w, label %s
w:
  %nw = load atomic i32, ptr @nworkers monotonic, align 4
  %nw64 = zext i32 %nw to i64
  ret i64 %nw64
s:
  %p = getelementptr [4 x i64], ptr @stats, i64 0, i32 %k
  %v = load atomic i64, ptr %p monotonic, align 8
  ret i64 %v
}}
"""


class _Runtime:
    """The loaded pool: its engine (kept for the life of the process) and entry points."""

    def __init__(self) -> None:
        from tfc.backends.llvm import jit
        from tfc.backends.llvm.runtime import native
        from tfc.backends.llvm.runtime.symbols import register_system_symbols
        register_system_symbols()  # the pool's pthreads, futex syscall and sched_yield
        triple, layout = native.triple_and_layout()
        # hand-written SSA: O3 would add ~30 ms to a cold start and nothing to the code
        obj, _ = jit.compile_ir(runtime_ir(triple, layout), optimized=False)
        self.loaded = native.load_object(obj)
        self.run_addr = self.loaded.address(POOL_RUN)
        self.reset = ctypes.CFUNCTYPE(None)(self.loaded.address("tfc_pool_reset"))
        self.set_spin = ctypes.CFUNCTYPE(None, ctypes.c_int64)(
            self.loaded.address("tfc_pool_set_spin"))
        self.stat = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int32)(
            self.loaded.address("tfc_pool_stat"))
        self.set_spin(spin_count())


_lock = threading.Lock()
_runtime: list[_Runtime] = []  # never emptied: workers run its code until the process ends


def runtime() -> _Runtime:
    """The process's pool runtime, compiled (or read from the compile cache) and bound to
    ``tfc_pool_run`` on first use."""
    if _runtime:
        return _runtime[0]
    with _lock:
        if not _runtime:
            rt = _Runtime()
            llvm.add_symbol(POOL_RUN, rt.run_addr)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=rt.reset)
            _runtime.append(rt)
    return _runtime[0]


def register_runtime() -> None:
    """Bind ``tfc_pool_run`` for object code loaded from now on (idempotent)."""
    runtime()


def pool_stats() -> dict[str, int]:
    """Counters of this process's pool (for tests and benchmarks)."""
    rt = runtime()
    names = ("jobs", "worker_chunks", "busy_fallbacks", "caller_chunks", "workers")
    return {n: int(rt.stat(k)) for k, n in enumerate(names)}


__all__: list[Any] = ["default_threads", "min_work", "pool_stats", "register_runtime",
                      "runtime"]
