"""The memory of a binding's arena (``LLVMExecutable._make_bound``): zeroed, aligned, and
for a large arena an anonymous mapping of its own, which asks the kernel for nothing.

A fresh arena is written for the first time by the first step of its binding: every
page it touches then costs a page fault (the kernel maps and zeroes it), and only those
pages. Steps touched arenas sparsely while the memory plan held buffers for the weight
gradients that GEMM updates absorb (issue 21's MLP: 32 MB of its 80 MB arena at L=256,
8 of 20 MB at L=64); with those left out (``memory{gemm_updates=true}``) a step writes
its whole arena (21 of 21 MB at L=256, 5.3 of 5.3 MB at L=64), but a plan may still
hold pages a step skips (a buffer's tail, past a smaller value). ``np.zeros`` asks for
transparent huge pages on allocations of 4 MB and more (NumPy's ``madvise(MADV_HUGEPAGE)``
on Linux), and a huge page is 2 MB mapped and zeroed at once, touched or not: the whole
80 MB, where 4 KB pages zeroed the 32 MB touched (8.4k faults). Measured on a 2-core
Firecracker VM (THP ``madvise`` mode), the first step's extra CPU over a steady step at
L=256 (the arena's faults, fresh update arrays aside): 4 KB pages 12-23 ms (5 runs);
huge pages 2-110 ms, a third of the runs near 100 ms and more (2 MB of never-touched
guest memory is expensive to back: 80 MB took 4-180 ms in a fresh process, 4 KB pages
35-48 ms), and 48 MB more resident. So an arena of ``MAP_MIN`` bytes and more is a
mapping of its own that does not ask: the system's policy decides (``enabled`` in
``/sys/kernel/mm/transparent_hugepage``; ``always`` still gives huge pages).

It is always zeroed (anonymous mappings are) and page-aligned; where the platform's
``mmap`` has no anonymous private mappings (Windows) or mapping fails, it is
``np.zeros`` as before. The mapping is unmapped when the last array viewing it goes (the
binding, and so the executable: nothing else keeps it).
"""

from __future__ import annotations

import mmap

import numpy as np

# Arenas below this are np.zeros (NumPy asks for no huge pages below 4 MB).
MAP_MIN = 1 << 20

# private anonymous memory (None where the platform's mmap has no such flags: Windows)
_FLAGS: int | None = (mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                      if hasattr(mmap, "MAP_ANONYMOUS") and hasattr(mmap, "MAP_PRIVATE")
                      else None)


def zeroed(nbytes: int) -> np.ndarray:
    """A zeroed, writeable ``uint8`` array of ``nbytes``: for ``nbytes >= MAP_MIN`` (where
    the platform maps anonymous memory) a page-aligned mapping of its own, else (and where
    mapping fails) ``np.zeros(nbytes)``, whose alignment the caller handles."""
    if nbytes >= MAP_MIN and _FLAGS is not None:
        try:
            m = mmap.mmap(-1, nbytes, flags=_FLAGS, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError, OverflowError):
            pass
        else:
            return np.frombuffer(m, np.uint8)  # holds the mapping (through a memoryview)
    return np.zeros(nbytes, np.uint8)
