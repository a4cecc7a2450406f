"""The memory of a binding's arena (``LLVMExecutable._make_bound``): zeroed, aligned, and
for a large arena an anonymous mapping of its own that asks the kernel for transparent
huge pages.

A fresh arena is written for the first time by the first step of its binding, and every
page it touches then costs a page fault (the kernel maps and zeroes it). In 4 KB pages an
80 MB arena (issue 21's MLP at L=256) is ~20k faults. Where transparent huge pages are
``madvise`` mode (a common default: ``/sys/kernel/mm/transparent_hugepage/enabled``), a
mapping gets 2 MB pages only if it asks, and only for the 2 MB-aligned 2 MB spans it
covers: an arena of at least ``HUGE_MIN`` bytes is therefore mapped 2 MB-aligned and its
whole huge pages are advised ``MADV_HUGEPAGE`` (its tail, under 2 MB, stays in small
pages: a huge page there would be memory no value uses, per binding). NumPy advises its
own allocations of 4 MB and more, but its ``calloc``'d block is not 2 MB-aligned, so its
first and last partial spans fault in 4 KB pages, and below 4 MB it does not ask at all.

The advice is advice: where the platform has no ``MADV_HUGEPAGE``, anonymous ``mmap`` or
the kernel refuses it (THP off), the arena is the same memory in small pages; where
mapping fails, it is ``np.zeros`` as before. It is always zeroed (anonymous mappings are)
and at least ``ALIGN``-aligned. The mapping is released when the last array viewing it
goes (the binding, and so the executable: nothing else keeps it).
"""

from __future__ import annotations

import mmap

import numpy as np

HUGE_PAGE = 1 << 21  # the x86-64 and arm64 (4 KB granule) transparent huge page
# Arenas below this are np.zeros: they hold no whole huge page.
HUGE_MIN = HUGE_PAGE

# What the arenas made so far got (tests read these): mapped, and advised huge pages.
counts = {"mapped": 0, "advised": 0}

# private anonymous memory (None where the platform's mmap has no such flags: Windows)
_FLAGS: int | None = (mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                      if hasattr(mmap, "MAP_ANONYMOUS") and hasattr(mmap, "MAP_PRIVATE")
                      else None)
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)


def zeroed(nbytes: int, align: int) -> np.ndarray:
    """A zeroed ``uint8`` array of ``nbytes`` whose data address is a multiple of
    ``align`` (a power of two, at most a page) when ``nbytes >= HUGE_MIN`` and the
    platform maps anonymous memory: then 2 MB-aligned and advised huge pages. Smaller
    arrays (and any where mapping fails) are ``np.zeros(nbytes)``, whose alignment the
    caller handles as before (it asks for ``align`` bytes more)."""
    if nbytes >= HUGE_MIN and _FLAGS is not None:
        a = _mapped(nbytes, _FLAGS)
        if a is not None:
            assert a.ctypes.data % align == 0 and a.size == nbytes
            return a
    return np.zeros(nbytes, np.uint8)


def _mapped(nbytes: int, flags: int) -> np.ndarray | None:
    span = nbytes // HUGE_PAGE * HUGE_PAGE  # its whole huge pages
    try:
        # one huge page more, to start on a 2 MB boundary (the unaligned head and the
        # tail past nbytes are address space only: never touched, never backed)
        m = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=flags,
                      prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError, OverflowError):
        return None
    whole = np.frombuffer(m, np.uint8)  # holds the mapping (through a memoryview)
    start = (-whole.ctypes.data) % HUGE_PAGE
    counts["mapped"] += 1
    if _MADV_HUGEPAGE is not None:
        try:
            m.madvise(_MADV_HUGEPAGE, start, span)
            counts["advised"] += 1
        except (OSError, ValueError):  # THP not built in, or refused: small pages
            pass
    return whole[start:start + nbytes]
