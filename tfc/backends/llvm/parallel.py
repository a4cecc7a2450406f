"""Splitting a kernel's outermost loop across cores: the compile-time side.

A splittable kernel (``Kernel.extent`` set: its outermost loop runs over ``[lo, hi)``)
gets a trampoline with one signature for all kernels,
``i32 k.task(ptr argv, ptr params, i64 lo, i64 hi)``, which unpacks the kernel's
pointers from ``argv``. The step table's loop (``step_table``) hands it to the pool
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

from typing import Any

import llvmlite.ir as ir

from tfc.backends.llvm import irutil
from tfc.backends.llvm.context import Kernel
from tfc.backends.llvm.runtime.pool import min_work


def _never_split(work: tuple[str, int]) -> bool:
    """Whether a kernel's work is known now and below the threshold, so that the step table
    only calls it inline. Its one call site then lets LLVM inline it with its bounds
    known (a 16-element kernel fully vectorized, not the scalar remainder loop of a
    kernel kept out of line for the trampoline: the 100-op chain on 16 floats took
    1.45 us per step at 2 threads against 0.43 us at 1). The threshold is part of the
    backend's cache key, so code compiled under another one is not reused."""
    kind, value = work
    return kind == "const" and value < min_work()


def trampoline(kernel: Kernel) -> ir.Function:
    """``i32 name_task(ptr argv, ptr params, i64 lo, i64 hi)`` calling the kernel (one per
    kernel function: identical kernels share it). Exported: it lives in the kernel's unit
    (``kernel_units``) and the step table's loop hands it to the pool."""
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


def splits(kernel: Kernel) -> bool:
    """Whether the pool may split ``kernel`` (checked again per call against the thread
    count and the threshold, which are run-time params): it has a loop to split, of more
    than one iteration or a run-time count, and work not known to be below the
    threshold."""
    if kernel.extent is None or kernel.work is None:
        return False
    kind, val = kernel.extent
    return not (kind == "const" and val < 2) and not _never_split(kernel.work)


__all__: list[Any] = ["splits", "trampoline"]
