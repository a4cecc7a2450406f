"""Whether a step's GEMMs are worth OpenBLAS's threads.

OpenBLAS splits a GEMM over all its threads from M*N*K = 262144 on, fork-join: the
caller waits (spinning) for the other threads' parts, and those threads spin ~0.1 s
after each GEMM waiting for the next. For the CNN of ``examples/cnn_digits.py`` at
batch 32 (largest GEMM 32x64x256, 1 MFLOP, ~10 us on one core) two threads gain nothing
even with a core free (measured 10.2 us at one thread, 11.5 us at two), and once the
host or the process has one more runnable thread than cores (a ``Dataset.prefetch``
producer, another job) the caller waits for a descheduled half: on this 2-core host at
load 5 the step cost 1.43 ms of CPU for 0.09 ms of work, 420 steps/s against 10,660 with
OpenBLAS on one thread. So a step whose GEMMs are all under ``SMALL_GEMM_FLOPS`` (about
20 us of one core's work) runs OpenBLAS on one thread; a step with a larger one, or one
whose sizes cannot be told, leaves the count as it is (``symbols.small_gemms``). The
price, on a host with nothing else running: the CNN step's median was 0.108 ms with a
spinning second OpenBLAS thread, 0.121 ms without (load 2.3), at half the CPU time; and a
``prefetch`` thread beside it then has a core (``tools/bench_input.py``).
"""

from __future__ import annotations

from typing import Mapping

from tfc.errors import TfcError
from tfc.ir.core import Graph
from tfc.ir.registry import lookup
from tfc.ir.types import TensorType

# The ops the backend runs as OpenBLAS GEMMs (``kernels_linalg``); their registry cost's
# flops are the GEMM's 2*M*N*K.
GEMM_KINDS = frozenset({"matmul", "conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"})
SMALL_GEMM_FLOPS = 2 * (1 << 20)


def _concrete(t: TensorType, symbols: Mapping[str, int]) -> TensorType:
    return TensorType(t.dtype, tuple(symbols[d] if isinstance(d, str) else d
                                     for d in t.shape))


def gemms_are_small(graph: Graph, symbols: Mapping[str, int]) -> bool | None:
    """Whether every GEMM of ``graph`` (regions included) has fewer than
    ``SMALL_GEMM_FLOPS`` flops at the symbols' sizes ``symbols``; False when one is
    larger or its size cannot be told; None when there is no GEMM (the step leaves
    OpenBLAS as it is)."""
    found = False
    for op in graph.walk():
        if op.kind not in GEMM_KINDS:
            continue
        found = True
        try:
            cost = lookup(op.kind).cost([_concrete(v.type, symbols) for v in op.inputs],
                                        [_concrete(r.type, symbols) for r in op.results],
                                        op.attrs)
        except (KeyError, TfcError, NotImplementedError):
            return False
        if cost.flops >= SMALL_GEMM_FLOPS:
            return False
    return True if found else None
