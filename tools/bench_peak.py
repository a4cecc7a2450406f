"""The cores' f32 fused-multiply-add peak, measured: the ceiling under every GEMM-bound goal.

A GEMM cannot run faster than the FMA units, so a goal that needs a step's matrix products
done above this rate cannot be met by any code on this machine. One tight loop of
independent vector FMAs (the host's widest vectors, more chains than the FMA latency
times the units, so the pipes never wait) is generated with llvmlite through tfc's own
LLVM plumbing (`tfc.backends.llvm.jit` and `.runtime.native`: host CPU and features, O3)
and run on each thread at once, through ctypes, which releases the GIL.

Where it runs matters as much as what it runs. A BLAS thread pool that did any work in
the same process busy-waits on its cores for a while afterwards (OpenBLAS's workers spin
for tens of milliseconds): timed after tfc's matrix products, the 2-thread loop shared one
core with a spinning worker and read the 1-thread peak (Zen 4: 115 GFLOP/s at 2 threads,
117 at 1, while numpy's GEMM ran at 208 on 2 threads). ``bench.py`` therefore times it in
a process of its own in which no BLAS or framework ever ran. And a step is timed by the
CPU time its threads spent in the loop, not by the wall clock: on a shared host another
process holding a core for a few milliseconds stretches a wall-clock step (the loop ran at
115 GFLOP/s of wall time beside other jobs on this Zen 5 host, whose one-core peak is 270)
but not the loop's own CPU time. The report takes the fastest step: a ceiling is its best.
"""

from __future__ import annotations

import ctypes
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

FMA_LATENCY = 4  # cycles, f32 FMA on Zen 3/4/5 and on Intel since Skylake
FMA_PIPES = 2    # FMA units per core on the same cores
CHAINS = 12      # independent accumulators: > latency x pipes, and 14 vector registers in all
ITERS = 1 << 22  # loop iterations per step, split over the threads (~6 ms on one core)


def vector_width(features: str | None = None) -> int:
    """f32 lanes of the widest FMA vectors of ``features`` (LLVM's ``+avx512f,...`` string;
    the host's when None)."""
    if features is None:
        import llvmlite.binding as llvm
        features = llvm.get_host_cpu_features().flatten()
    return 16 if "+avx512f" in features.split(",") else 8


def step_flops() -> float:
    """The work of one ``FmaPeak.step``, whatever the threads."""
    return 2.0 * CHAINS * vector_width() * ITERS


def kernel_ir(width: int) -> str:
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


def loop_assembly(cpu: str | None = None, width: int | None = None) -> str:
    """The loop's x86 assembly as O3 makes it for ``cpu`` (LLVM's name: ``znver4``,
    ``haswell``; with its own features) with ``width``-lane vectors, or for the host (its
    CPU, features and widest vectors) when ``cpu`` is None: to check that the loop is what
    the module docstring says on hosts other than this one."""
    import llvmlite.binding as llvm
    from tfc.backends.llvm import jit
    from tfc.backends.llvm.runtime import native

    triple, layout = native.triple_and_layout()
    features = ""
    if cpu is None:
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        width = vector_width(features) if width is None else width
    if width is None:
        raise ValueError(f"loop_assembly: give the vector width for cpu {cpu!r}")
    tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features,
                                                               opt=3)
    text = f'target triple = "{triple}"\ntarget datalayout = "{layout}"\n' + kernel_ir(width)
    mod = jit.optimize(text, tm)
    return tm.emit_assembly(mod)


class FmaPeak:
    """``step()`` runs ``step_flops()`` of the loop, split evenly over ``threads``: the
    calling thread runs one share and a pool the others, all at once."""

    def __init__(self, threads: int) -> None:
        from tfc.backends.llvm import jit
        from tfc.backends.llvm.runtime import native
        triple, layout = native.triple_and_layout()
        text = (f'target triple = "{triple}"\ntarget datalayout = "{layout}"\n'
                + kernel_ir(vector_width()))
        self._loaded = native.load_object(jit.emit_object(jit.optimize(text)))  # keeps it alive
        fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float, ctypes.c_float, ctypes.c_int64)(
            self._loaded.address("fma_loop"))
        self.threads = max(1, threads)
        n = ITERS // self.threads
        # a = 1 - 2^-20, b = 2^-10: the values stay finite and normal for any n
        self._loop: Callable[[], float] = lambda: fn(1.0 - 2.0 ** -20, 2.0 ** -10, n)
        self._pool = ThreadPoolExecutor(self.threads - 1) if self.threads > 1 else None

    def _one(self) -> float:
        """One thread's share; returns the CPU seconds this thread spent in it."""
        t = time.thread_time()
        self._loop()
        return time.thread_time() - t

    def step(self) -> float:
        """Run one step on every thread at once; returns its time on the FMA units: the
        largest CPU time of a thread's share. Wall time would count the moments another
        process (or a BLAS pool spinning in this one) held a core; CPU time does not, and
        the shares are equal, so the slowest thread's is the step's."""
        if self._pool is None:
            return self._one()
        futures = [self._pool.submit(self._one) for _ in range(self.threads - 1)]
        return max([self._one(), *(f.result() for f in futures)])


def main(argv: list[str]) -> int:
    """``python tools/bench_peak.py [THREADS...]``: the peak (fastest of 30 steps, in CPU
    time) at each thread count, in this process, and the loop's assembly with ``--asm``."""
    if "--asm" in argv:
        text = loop_assembly()
        start = text.find("fma_loop:")
        print(text[start:text.find(".Lfunc_end", start)])
    for threads in [int(a) for a in argv if a.isdigit()] or [1, 2]:
        peak = FmaPeak(threads)
        for _ in range(3):
            peak.step()
        best = min(peak.step() for _ in range(30))
        print(f"{threads} thread(s): {step_flops() / best / 1e9:.0f} GFLOP/s "
              f"({vector_width() * 32} bit vectors, {CHAINS} chains)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
