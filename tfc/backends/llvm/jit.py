"""LLVM's half of code generation: the O3 pipeline for the host CPU and object code.

``compile_ir`` turns the printed IR of a module into object code, through the object-code
cache of ``tfc.backends.llvm.runtime.native`` (which also holds the target machine and
loads the code into this process). ``compile_split`` does it for an entry split into its
glue and kernel units (``kernel_units``): each unit at O3 through the cache (so a kernel
compiled for any entry, model or process before is not compiled again), the glue at
``GLUE_SPEED``, all bundled into one object-code blob (``native.bundle``).

The units are compiled one after the other: llvmlite runs every call into LLVM under one
process-wide lock (``llvmlite.binding.ffi._lib_fn_wrapper``), so modules compiled on two
threads take turns although ctypes releases the GIL. Measured (64 small loop modules, each
in its own LLVM context, 2-core host under load ~9): one thread 1.43 s, two threads
1.72 s; the same two threads with the lock bypassed (a measurement only: llvmlite does
not support that) 2.06 s, then 1.73 s, no gain visible on that host.
"""

from __future__ import annotations

import llvmlite.binding as llvm

from dataclasses import dataclass

from tfc.backends.llvm.runtime.native import (bundle, cache_get, cache_key, cache_put,
                                              target_machine)

# The glue (the entry: pointer arithmetic and the calls in schedule order, straight-line
# code that grows with the model) at O0, in both the pipeline and code generation: for the
# 64-layer MLP's glue (385 calls, 200 kB of IR), O1 + O3 code generation took 0.50 s, O0
# 0.06 s; its code runs once per step around kernels of microseconds to milliseconds.
GLUE_SPEED = 0


def optimize(ir_text: str, tm: llvm.TargetMachine | None = None, speed: int = 3
             ) -> llvm.ModuleRef:
    """Parse, verify and optimize ``ir_text`` with the O``speed`` pipeline for the host
    CPU (for ``tm``'s CPU when given: tools check the code made for other hosts with it)."""
    tm = target_machine() if tm is None else tm
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=speed)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    # The vectorizer still interleaves (unrolls) vector loops; the generic unroller on top
    # of it multiplies code size by ~20 (full unrolls of small static nests around vector
    # bodies with inlined exp/log) and compile time by ~10 for no measured speed.
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)
    return mod


def emit_object(mod: llvm.ModuleRef, speed: int = 3) -> bytes:
    """Object code of ``mod``, generated at level ``speed`` (0-3)."""
    return target_machine(speed).emit_object(mod)


def compile_ir(ir_text: str, use_cache: bool = True, *, optimized: bool = True,
               speed: int = 3) -> tuple[bytes, bool]:
    """Object code for ``ir_text`` and whether it came from the cache. ``optimized``: run
    the O``speed`` pipeline first; without it the IR, already lean, goes straight to code
    generation (still for the host CPU)."""
    tag = f"; speed {speed}\n" if speed != 3 else ""
    key = cache_key(tag + ir_text if optimized else "; not optimized\n" + ir_text)
    if use_cache:
        obj = cache_get(key)
        if obj is not None:
            return obj, True
    if optimized:
        mod = optimize(ir_text, speed=speed)
    else:
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
    obj = emit_object(mod, speed)
    if use_cache:
        cache_put(key, obj)
    return obj, False


@dataclass
class SplitCode:
    """The object code of a split entry and how much of it came from the cache."""

    code: bytes  # the bundle, in load order: the global variables, the units, the glue
    units: int
    units_cached: int
    glue_cached: bool


def compile_split(data: str, glue: str, units: list[str], use_cache: bool = True
                  ) -> SplitCode:
    """Object code for the global variables and the glue (at ``GLUE_SPEED``) and each
    kernel unit (at O3), each verified before it is optimized and each through the
    object-code cache, bundled in the order ``kernel_units.Split`` says they load."""
    objects, hits = [], 0
    for text in units:
        obj, cached = compile_ir(text, use_cache)
        objects.append(obj)
        hits += cached
    data_obj, _ = compile_ir(data, use_cache, speed=GLUE_SPEED)
    glue_obj, glue_cached = compile_ir(glue, use_cache, speed=GLUE_SPEED)
    return SplitCode(bundle([data_obj, *objects, glue_obj]), len(units), hits, glue_cached)
