"""Native kernel timing: ``LLVMBackend(profile=True)`` and ``kernel_times()``."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tfc.backends.llvm import LLVMBackend
from tfc.backends.llvm.runtime.executable import profile_report
from tfc.errors import ExecutionError
from tfc.ir.types import DType

F32, I32 = DType.f32, DType.i32
RNG = np.random.default_rng(11)


def _mlp(h):
    def body(b, a):
        x, w, i = a
        hid = b("relu", b("add", b("matmul", x, w), x))
        out = b("matmul", hid, w)
        return [b("sum", b("tanh", out)), b("gather", out, i, axis=0)]

    return h.make_module([("x", F32, ("B", 16)), ("w", F32, (16, 16)), ("i", I32, (2,))],
                         body)


def _feeds(n=32, idx=(0, 1)):
    return [RNG.normal(size=(n, 16)).astype(np.float32),
            RNG.normal(size=(16, 16)).astype(np.float32), np.array(idx, np.int32)]


def test_kernel_times_name_and_time_every_kernel(h):
    m = _mlp(h)
    exe = LLVMBackend(profile=True).compile(m, "f")
    assert exe.profiling and exe.kernel_times() == []  # before the first step
    feeds = _feeds()
    t0 = time.perf_counter()
    got = exe(feeds, {}, 0)
    t1 = time.perf_counter()
    times = exe.kernel_times()
    assert len(times) == exe.report.kernels
    names = [n for n, _, _ in times]
    assert names[0] == "matmul#0" and "matmul#1" in names
    assert any(n.startswith("fusion#") and "relu" in n for n in names)
    assert any(n.startswith("gather#0") for n in names)
    prev = t0
    for _, start, end in times:  # in order, inside the call, on perf_counter's clock
        assert prev - 1e-6 <= start <= end <= t1 + 1e-6
        prev = end
    report = profile_report(exe)
    assert sorted(n for _, n in report) == sorted(names)
    assert [s for s, _ in report] == sorted((s for s, _ in report), reverse=True)
    h.assert_same(got, h.run_both(m, feeds)[1], rtol=1e-5, atol=1e-5)  # same results


def test_a_failed_step_has_no_times(h):
    exe = LLVMBackend(profile=True).compile(_mlp(h), "f")
    exe(_feeds(), {}, 0)
    assert exe.kernel_times()
    with pytest.raises(ExecutionError):
        exe(_feeds(idx=(0, 99)), {}, 1)  # gather index out of range
    assert exe.kernel_times() == []


def test_profiling_is_off_by_default_and_leaves_no_trace_in_the_code(h):
    m = _mlp(h)
    plain = h.compile_llvm(m)
    plain(_feeds(), {}, 0)
    assert not plain.profiling and plain.kernel_times() == []
    assert "tfc_prof" not in str(plain._lowered().comp.module)
    prof = LLVMBackend(profile=True).compile(m, "f")
    assert "tfc_prof_stamps" in str(prof._lowered().comp.module)
    assert prof.object_code != plain.object_code


def test_arena_bytes_is_the_latest_bindings(h):
    exe = h.compile_llvm(_mlp(h))
    assert exe.arena_bytes == 0
    exe(_feeds(8), {}, 0)
    small = exe.arena_bytes
    exe(_feeds(64), {}, 0)
    assert exe.arena_bytes > small > 0
    by_binding = exe.arena_bytes_by_binding  # the entry cache may have brought others
    assert by_binding[((8, 16), (16, 16), (2,))] == small
    assert by_binding[((64, 16), (16, 16), (2,))] == exe.arena_bytes


def test_loaded_object_code_keeps_timing(h):
    m = _mlp(h)
    exe = LLVMBackend(profile=True).compile(m, "f")
    exe(_feeds(), {}, 0)
    again = LLVMBackend(profile=True).load(m, "f", LLVMBackend().export(exe))
    again(_feeds(), {}, 0)
    assert [n for n, _, _ in again.kernel_times()] == [n for n, _, _ in exe.kernel_times()]
