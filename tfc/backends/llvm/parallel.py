"""Splitting a kernel's outermost loop across cores: the entry's side.

A splittable kernel (``Kernel.extent`` set: its outermost loop runs over ``[lo, hi)``)
gets a trampoline with one signature for all kernels,
``i32 k.task(ptr argv, ptr params, i64 lo, i64 hi)``, which unpacks the kernel's
pointers from ``argv``. The entry hands it to the pool
(``tfc.backends.llvm.runtime.pool``):
``tfc_pool_run(task, argv, params, n, threads, chunks)``.

Only kernels with enough work are split: at least ``TFC_PARALLEL_MIN`` elements
(default 65536) and two outer iterations; smaller ones run inline on the calling thread.
``chunks = min(n, clamp(work / CHUNK_WORK, T, CHUNKS_PER_THREAD * T))``. ``T`` is the
backend's ``threads`` (default: ``TFC_NUM_THREADS`` or the number of cores, at most 16).
The thread count and the threshold are run-time params, so object code does not depend
on them, except that a kernel whose work is known at compile time and is below the
threshold has no split path (``_never_split``). BLAS calls are never split (OpenBLAS has
its own pool), nor are kernels that accumulate into shared memory (their ``extent`` is
None).
"""

from __future__ import annotations

from typing import Any, Callable

import llvmlite.ir as ir

from tfc.backends.llvm import irutil
from tfc.backends.llvm.context import Kernel, whole_range
from tfc.backends.llvm.runtime.pool import (CHUNK_WORK, CHUNKS_PER_THREAD, POOL_RUN,
                                            default_threads, min_work, register_runtime)


def _never_split(work: tuple[str, int]) -> bool:
    """Whether a kernel's work is known now and below the threshold, so that the entry
    only calls it inline. Its one call site then lets LLVM inline it with its bounds
    known (a 16-element kernel fully vectorized, not the scalar remainder loop of a
    kernel kept out of line for the trampoline: the 100-op chain on 16 floats took
    1.45 us per step at 2 threads against 0.43 us at 1). The threshold is part of the
    backend's cache key, so code compiled under another one is not reused."""
    kind, value = work
    return kind == "const" and value < min_work()


def _trampoline(kernel: Kernel) -> ir.Function:
    """``i32 name_task(ptr argv, ptr params, i64 lo, i64 hi)`` calling the kernel (one per
    kernel function: identical kernels share it). Exported: it lives in the kernel's unit
    (``kernel_units``) and the entry, in the glue, hands it to the pool."""
    mod = kernel.comp.module
    name = kernel.fn.name + "_task"
    if name in mod.globals:
        return mod.globals[name]
    fn = ir.Function(mod, ir.FunctionType(irutil.I32,
                                          [irutil.PTR, irutil.PTR, irutil.I64, irutil.I64]),
                     name)
    argv, params, lo, hi = fn.args
    b = ir.IRBuilder(fn.append_basic_block())
    ptrs = [b.load(b.gep(argv, [irutil.i64(i)], source_etype=irutil.PTR), typ=irutil.PTR)
            for i in range(len(kernel.storages))]
    b.ret(b.call(kernel.fn, [*ptrs, params, lo, hi]))
    return fn


def _declare_pool(module: ir.Module) -> ir.Function:
    """``i32 tfc_pool_run(task, argv, params, n, threads, chunks)``, weakly bound."""
    if POOL_RUN in module.globals:
        return module.globals[POOL_RUN]
    fn = ir.Function(module, ir.FunctionType(irutil.I32, [irutil.PTR, irutil.PTR, irutil.PTR,
                                                          irutil.I64, irutil.I64, irutil.I64]),
                     POOL_RUN)
    fn.linkage = "extern_weak"
    return fn


def _smin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def _smax(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed(">", x, y), x, y)


def build_parallel(module: ir.Module, threads: int | None
                   ) -> Callable[[ir.IRBuilder, Kernel, list, ir.Value], ir.Value] | None:
    """The entry's way to call a splittable kernel, or None to run everything inline
    (one thread)."""
    nthreads = default_threads() if threads is None else max(1, int(threads))
    if nthreads <= 1:
        return None
    register_runtime()  # object code compiled now may be loaded in this process

    def call(b: ir.IRBuilder, kernel: Kernel, args: list, params: ir.Value) -> ir.Value:
        comp = kernel.comp
        kind, val = kernel.extent  # type: ignore[misc]
        if (kind == "const" and val < 2) or kernel.work is None or _never_split(kernel.work):
            return b.call(whole_range(kernel), [*args, params])

        def load(slot: int) -> ir.Value:
            return b.load(b.gep(params, [irutil.i64(slot)], source_etype=irutil.I64),
                          typ=irutil.I64)

        n = irutil.i64(val) if kind == "const" else load(val)
        wkind, wval = kernel.work
        work = irutil.i64(wval) if wkind == "const" else load(wval)
        t = load(comp.param(("threads",), lambda binding: nthreads))
        least = load(comp.param(("parallel_min",), lambda binding: min_work()))
        pool = _declare_pool(module)
        have_pool = b.icmp_unsigned("!=", b.ptrtoint(pool, irutil.I64), irutil.i64(0))
        split = b.and_(b.and_(b.icmp_signed(">", t, irutil.i64(1)),
                              b.icmp_signed(">=", work, least)),
                       b.and_(b.icmp_signed(">", n, irutil.i64(1)), have_pool))
        chunks = _smin(b, n, _smax(b, t, _smin(b, b.mul(t, irutil.i64(CHUNKS_PER_THREAD)),
                                               b.sdiv(work, irutil.i64(CHUNK_WORK)))))
        tramp = _trampoline(kernel)
        # the pointer array lives in the entry block (a static alloca, reused per call)
        fn_entry = b.function.blocks[0]
        eb = ir.IRBuilder(fn_entry)
        eb.position_at_start(fn_entry)
        argv = eb.alloca(irutil.PTR, size=max(1, len(args)))
        b.position_at_end(b.block)  # llvmlite builders keep an index into their block
        with b.if_else(split) as (then, otherwise):
            with then:
                for i, a in enumerate(args):
                    b.store(a, b.gep(argv, [irutil.i64(i)], source_etype=irutil.PTR))
                rc_par = b.call(pool, [tramp, argv, params, n, t, chunks])
                par_block = b.block
            with otherwise:
                rc_ser = b.call(whole_range(kernel), [*args, params])
                ser_block = b.block
        rc = b.phi(irutil.I32)
        rc.add_incoming(rc_par, par_block)
        rc.add_incoming(rc_ser, ser_block)
        return rc

    return call


__all__: list[Any] = ["build_parallel"]
