"""Kernels split across cores (``tfc.backends.llvm.parallel``) on the native thread pool.

Split kernels must give bit-identical results to one thread (every element is computed
by the same code whichever thread runs its range); the pool must work from several Python
threads at once, and keep working in a forked child (the pool itself:
``runtime/test_pool.py``). ``TFC_PARALLEL_MIN=1`` forces splitting of the small arrays
used here."""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest

from tfc.backends.llvm import LLVMBackend, step_table
from tfc.backends.llvm.runtime import pool
from tfc.errors import ExecutionError
from tfc.ir.types import DType
from tfc.pipeline import lower_entry
from tfc.testing import compile_lowered

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _split_everything(monkeypatch):
    monkeypatch.setenv("TFC_PARALLEL_MIN", "1")


def _chain_module(h):
    """An element-wise chain, a row reduction and a full reduction of one input."""
    def body(b, a):
        (x,) = a
        y = b("tanh", b("add", b("mul", x, x), b("constant", value=np.array(0.3, np.float32))))
        return [y, b("sum", y, axes=[1]), b("max", b("exp", x), axes=None)]

    return h.make_module([("x", DType.f32, ("B", 300))], body)


def _compile(m, threads):
    return compile_lowered(LLVMBackend(threads=threads, use_cache=False), m, "f")


def _run(exe, feeds):
    return exe(list(feeds), {}, 0).fetches


def test_split_results_identical_to_one_thread(h):
    m = _chain_module(h)
    one = _compile(m, 1)
    many = [_compile(m, t) for t in (2, 3, 8)]
    before = pool.pool_stats()["jobs"]
    for n in (1, 2, 7, 64, 257):
        x = RNG.standard_normal((n, 300)).astype(np.float32)
        want = _run(one, [x])
        for exe in many:
            for got, ref in zip(_run(exe, [x]), want):
                np.testing.assert_array_equal(got, ref)
        h.assert_same(*h.run_both(m, [x], exe=many[0]), rtol=1e-5, atol=1e-5)
    assert pool.pool_stats()["jobs"] > before  # the pool ran the split kernels


def _split_records(backend: LLVMBackend, m) -> int:
    """The kernels of ``m``'s entry ``f`` that its step table may hand to the pool."""
    draft = backend._lower(lower_entry(m, "f", "llvm"), "f")[2].step_draft
    return sum(kind == step_table.SPLIT for kind, _ in step_table.records(draft.words))


def test_one_thread_builds_no_pool_calls(h):
    m = _chain_module(h)
    assert _split_records(LLVMBackend(threads=2), m) > 0
    assert _split_records(LLVMBackend(threads=1), m) == 0
    text = str(LLVMBackend(threads=1)._lower(lower_entry(m, "f", "llvm"), "f")[2].comp.module)
    assert "_task" not in text  # no trampoline either


def test_kernels_known_to_be_small_have_no_split_path(h, monkeypatch):
    """A kernel whose static size is below the threshold is only called inline, so LLVM
    can inline it with its bounds known (out of line, a 16-element chain ran its scalar
    remainder loop: 3x slower per step at 2 threads than at 1); a symbolic size keeps the
    run-time test."""
    monkeypatch.setenv("TFC_PARALLEL_MIN", "65536")

    def body(b, a):
        (x,) = a
        return [b("tanh", b("mul", x, x))]

    def pool_calls(shape):
        return _split_records(LLVMBackend(threads=2), h.make_module([("x", DType.f32, shape)],
                                                                   body))

    assert pool_calls((4, 300)) == 0
    assert pool_calls((512, 300)) > 0
    assert pool_calls(("B", 300)) > 0


def test_error_code_matches_one_thread(h):
    def body(b, a):
        x, i = a
        return [b("gather", x, i, axis=0)]

    m = h.make_module([("x", DType.f32, (50, 400)), ("i", DType.i32, ("N",))], body)
    x = RNG.standard_normal((50, 400)).astype(np.float32)
    idx = np.arange(40, dtype=np.int32) % 50
    idx[17] = 99
    msgs = []
    for t in (1, 2, 4):
        exe = _compile(m, t)
        with pytest.raises(ExecutionError) as e:
            exe([x, idx], {}, 0)
        msgs.append(str(e.value))
        np.testing.assert_array_equal(exe([x, idx % 50], {}, 0).fetches[0], x[idx % 50])
    assert msgs[1:] == msgs[:1] * 2


def test_concurrent_python_threads(h):
    """One Python thread per executable, all splitting kernels at once (the multi-device
    executor's pattern); each must get its own right answers."""
    mods = [_chain_module(h) for _ in range(4)]
    exes = [_compile(m, 2) for m in mods]
    one = _compile(mods[0], 1)
    xs = [RNG.standard_normal((40 + 8 * k, 300)).astype(np.float32) for k in range(4)]
    wants = [_run(one, [x]) for x in xs]
    errors: list[BaseException] = []
    start = threading.Barrier(len(exes))

    def worker(k):
        try:
            start.wait()
            for _ in range(40):
                for got, ref in zip(_run(exes[k], [xs[k]]), wants[k]):
                    np.testing.assert_array_equal(got, ref)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(exes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[0]


def _child(exe, x, q):
    try:
        fresh = pool.pool_stats()["workers"]  # reset at the fork: no worker yet
        got = _run(exe, [x])
        q.put(([np.asarray(g) for g in got], fresh, pool.pool_stats()))
    except BaseException as e:  # noqa: BLE001 - sent to the parent
        q.put(repr(e))


def test_fork_child_runs_split_kernels(h):
    m = _chain_module(h)
    exe = _compile(m, 2)
    x = RNG.standard_normal((128, 300)).astype(np.float32)
    want = _run(exe, [x])  # the pool has workers before the fork
    assert pool.pool_stats()["workers"] >= 1
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(exe, x, q))
    p.start()
    try:
        res = q.get(timeout=60)
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()
    assert not isinstance(res, str), res
    got, fresh, stats = res
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert fresh == 0 and stats["workers"] >= 1  # the child made its own pool
