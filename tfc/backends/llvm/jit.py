"""LLVM's half of code generation: the O3 pipeline for the host CPU and object code.

``compile_ir`` turns the printed IR of a module into object code, through the object-code
cache of ``tfc.backends.llvm.runtime.native`` (which also holds the target machine and
loads the code into this process). ``compile_split`` does it for an entry split into its
kernel units (``kernel_units``): each unit at O3 through the cache (so a kernel compiled
for any entry, model or process before is not compiled again), with the global variables
at ``GLUE_SPEED`` and the step table's fixed runner, all bundled into one object-code
blob (``native.bundle``).

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

# The module of an entry's global variables (no code) at O0, in both the pipeline and code
# generation. (The per-entry glue that used to be compiled at this level, 385 calls for a
# 64-layer MLP, is now a table: ``step_table``.)
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

    code: bytes  # the bundle, in load order: the global variables, the units, the runner
    units: int
    units_cached: int


def compile_split(data: str, units: list[str], runner: str, use_cache: bool = True
                  ) -> SplitCode:
    """Object code for the global variables (at ``GLUE_SPEED``), each kernel unit (at O3)
    and the step table's runner (``step_table.runner``: the same text for every entry, so
    from the cache after the first compile on a host), each verified before it is
    optimized and each through the object-code cache, bundled in the order
    ``kernel_units.Split`` says they load."""
    objects, hits = [], 0
    for text in units:
        obj, cached = compile_ir(text, use_cache)
        objects.append(obj)
        hits += cached
    data_obj, _ = compile_ir(data, use_cache, speed=GLUE_SPEED)
    runner_obj, _ = compile_ir(runner, use_cache)
    return SplitCode(bundle([data_obj, *objects, runner_obj]), len(units), hits)
