"""LLVM's half of code generation: the O3 pipeline for the host CPU and object code.

``compile_ir`` turns the printed IR of a module into object code, through the object-code
cache of ``tfc.backends.llvm.runtime.native`` (which also holds the target machine and
loads the code into this process).
"""

from __future__ import annotations

import llvmlite.binding as llvm

from tfc.backends.llvm.runtime.native import cache_get, cache_key, cache_put, target_machine


def optimize(ir_text: str, tm: llvm.TargetMachine | None = None) -> llvm.ModuleRef:
    """Parse, verify and optimize ``ir_text`` with the O3 pipeline for the host CPU (for
    ``tm``'s CPU when given: tools check the code made for other hosts with it)."""
    tm = target_machine() if tm is None else tm
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
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


def emit_object(mod: llvm.ModuleRef) -> bytes:
    return target_machine().emit_object(mod)


def compile_ir(ir_text: str, use_cache: bool = True, *, optimized: bool = True
               ) -> tuple[bytes, bool]:
    """Object code for ``ir_text`` and whether it came from the cache. ``optimized``: run
    the O3 pipeline first; without it the IR, already lean, goes straight to code
    generation (still for the host CPU)."""
    key = cache_key(ir_text if optimized else "; not optimized\n" + ir_text)
    if use_cache:
        obj = cache_get(key)
        if obj is not None:
            return obj, True
    if optimized:
        mod = optimize(ir_text)
    else:
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
    obj = emit_object(mod)
    if use_cache:
        cache_put(key, obj)
    return obj, False
