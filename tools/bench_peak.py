"""The cores' f32 fused-multiply-add peak, measured: the ceiling under every GEMM-bound goal.

A GEMM cannot run faster than the FMA units, so a goal that needs a step's matrix products
done above this rate cannot be met by any code on this machine. One tight loop of
independent vector FMAs (the host's widest vectors, more chains than the FMA latency
times the units, so the pipes never wait) is generated with llvmlite through tfc's own
LLVM plumbing (`tfc.backends.llvm.jit`: host CPU and features, O3) and run on each thread
at once, through ctypes, which releases the GIL.
"""

from __future__ import annotations

import ctypes
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

CHAINS = 12   # independent accumulators: > 4-cycle latency x 2 FMA pipes on x86 cores
ITERS = 1 << 20  # iterations per step, split over the threads (~2 ms at 100 GFLOP/s, AVX2)


def vector_width() -> int:
    """f32 lanes of the host's widest FMA vectors."""
    import llvmlite.binding as llvm
    return 16 if "+avx512f" in llvm.get_host_cpu_features().flatten().split(",") else 8


def step_flops() -> float:
    """The work of one ``FmaPeak.step``, whatever the threads."""
    return 2.0 * CHAINS * vector_width() * ITERS


def _kernel_ir(width: int) -> str:
    """``float fma_loop(float a, float b, i64 n)``: CHAINS vector chains ``acc = acc*a + b``
    n times; returns a lane of their sum, so nothing is dead. Without fast-math flags LLVM
    may not reassociate the chains into fewer, nor fold them away."""
    vt = f"<{width} x float>"
    lines = [f"declare {vt} @llvm.fma.v{width}f32({vt}, {vt}, {vt})",
             "define float @fma_loop(float %a, float %b, i64 %n) {",
             "entry:",
             f"  %va0 = insertelement {vt} poison, float %a, i32 0",
             f"  %va = shufflevector {vt} %va0, {vt} poison, <{width} x i32> zeroinitializer",
             f"  %vb0 = insertelement {vt} poison, float %b, i32 0",
             f"  %vb = shufflevector {vt} %vb0, {vt} poison, <{width} x i32> zeroinitializer",
             "  br label %loop",
             "loop:",
             "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    for k in range(CHAINS):
        lines.append(f"  %acc{k} = phi {vt} [%vb, %entry], [%nxt{k}, %loop]")
    for k in range(CHAINS):
        lines.append(f"  %nxt{k} = call {vt} @llvm.fma.v{width}f32({vt} %acc{k}, {vt} %va, "
                     f"{vt} %vb)")
    lines += ["  %i1 = add i64 %i, 1",
              "  %more = icmp ult i64 %i1, %n",
              "  br i1 %more, label %loop, label %done",
              "done:"]
    prev = "%nxt0"
    for k in range(1, CHAINS):
        lines.append(f"  %s{k} = fadd {vt} {prev}, %nxt{k}")
        prev = f"%s{k}"
    lines += [f"  %r = extractelement {vt} {prev}, i32 0", "  ret float %r", "}"]
    return "\n".join(lines) + "\n"


class FmaPeak:
    """``step()`` runs ``step_flops()`` of the loop, split evenly over ``threads``."""

    def __init__(self, threads: int) -> None:
        from tfc.backends.llvm import jit
        triple, layout = jit.triple_and_layout()
        text = (f'target triple = "{triple}"\ntarget datalayout = "{layout}"\n'
                + _kernel_ir(vector_width()))
        self._loaded = jit.load_object(jit.emit_object(jit.optimize(text)))  # keeps it alive
        fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float, ctypes.c_float, ctypes.c_int64)(
            self._loaded.address("fma_loop"))
        self.threads = max(1, threads)
        n = ITERS // self.threads
        # a = 1 - 2^-20, b = 2^-10: the values stay finite and normal for any n
        self._one: Callable[[], float] = lambda: fn(1.0 - 2.0 ** -20, 2.0 ** -10, n)
        self._pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None

    def step(self) -> float:
        if self._pool is None:
            return self._one()
        futures = [self._pool.submit(self._one) for _ in range(self.threads)]
        return sum(f.result() for f in futures)
