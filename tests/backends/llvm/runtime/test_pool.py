"""The native thread pool (``tfc.backends.llvm.runtime.pool``) called directly: it must
cover every chunk exactly once and report the lowest failing chunk's error."""

from __future__ import annotations

import ctypes
import threading

import pytest

from tfc.backends.llvm.runtime import pool

_TASK = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                         ctypes.c_int64)
_RUN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)


def _pool_run(task, n, threads, chunks) -> int:
    run = _RUN(pool.runtime().run_addr)  # ctypes releases the GIL: workers can call back
    return run(ctypes.cast(task, ctypes.c_void_p), None, None, n, threads, chunks)


@pytest.mark.parametrize("n,threads,chunks", [(1, 2, 2), (5, 2, 16), (100, 2, 16),
                                              (1000, 4, 7), (33, 1, 8), (64, 8, 64)])
def test_pool_covers_every_chunk_once(n, threads, chunks):
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def body(argv, params, lo, hi):
        with lock:
            seen.append((lo, hi))
        return 0

    task = _TASK(body)
    assert _pool_run(task, n, threads, chunks) == 0
    covered = sorted(seen)
    assert covered[0][0] == 0 and covered[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))
    assert len(covered) <= max(1, chunks)


def test_pool_reports_lowest_failing_chunk():
    def body(argv, params, lo, hi):
        c = lo // 10
        return 100 + c if c >= 3 else 0

    task = _TASK(body)
    for _ in range(5):
        assert _pool_run(task, 100, 4, 10) == 103
