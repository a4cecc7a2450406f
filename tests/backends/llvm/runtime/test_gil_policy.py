"""Which steps keep the GIL while their native code runs (``executable._gil_probe``): a
short step keeps it (and takes the native call path), a step that computes for long
lets other Python threads run, however little memory it touches."""

import threading
import time

import numpy as np
import pytest

import tfc
from tfc.backends.llvm.runtime import executable, pystep
from tfc.runtime import Program

pytestmark = pytest.mark.skipif(pystep.LAYOUT is None,
                                reason="object layouts differ: callables stay in Python")

MIX = (np.eye(64) + 0.01 * np.random.default_rng(0).normal(size=(64, 64))).astype(np.float32)


def callable_of(rounds: int):
    """``y = x`` through ``rounds`` of ``tanh(x @ MIX)`` for x of [32, 64]: with rounds > 0
    hundreds of microseconds of compute in a 16 KB arena (below GIL_HOLD_BYTES)."""
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [32, 64], name="x")
        y = x * 1.0
        for _ in range(rounds):
            y = tfc.tanh(tfc.matmul(y, tfc.constant(MIX)))
        tfc.entry("f", feeds={"x": x}, fetches={"y": y})
    return Program(g.as_module(), backend="llvm").callable("f", ["x"], "y")


def expected(x: np.ndarray, rounds: int) -> np.ndarray:
    y = x.astype(np.float64)
    for _ in range(rounds):
        y = np.tanh(y @ MIX.astype(np.float64))
    return y


def binding_of(fn):
    k = fn.__self__[1]  # the NativeStep behind a native callable
    return k, k.exe, k.exe._last


def test_a_long_step_in_little_memory_lets_the_gil_go():
    rounds = 200
    f = callable_of(rounds)
    x = np.random.default_rng(1).normal(size=(32, 64)).astype(np.float32)
    for _ in range(executable.GIL_PROBE_CALLS + 1):
        np.testing.assert_allclose(f(x), expected(x, rounds), rtol=1e-4, atol=1e-5)
    keeper, exe, bound = binding_of(f)
    assert bound.call is exe._entry  # releases the GIL
    assert keeper.table[pystep.H["enabled"]] == 0  # so its steps stay on the Python path


def assert_a_short_step_keeps_the_gil_and_the_native_path() -> None:
    f = callable_of(0)
    x = np.ones((32, 64), np.float32)
    for _ in range(executable.GIL_PROBE_CALLS + 1):
        np.testing.assert_array_equal(f(x), x)
    keeper, exe, bound = binding_of(f)
    assert bound.call is exe._entry_gil
    assert keeper.table[pystep.H["enabled"]] == 1


def test_a_short_step_keeps_the_gil_and_the_native_path():
    assert_a_short_step_keeps_the_gil_and_the_native_path()


def test_threads_calling_a_long_step_get_the_same_results():
    """The first call's probe runs under the executable's lock: threads that bind and
    call at once all get right answers."""
    rounds = 50
    f = callable_of(rounds)
    xs = [np.random.default_rng(s).normal(size=(32, 64)).astype(np.float32) for s in range(4)]
    results: dict[int, np.ndarray] = {}

    def run(k: int) -> None:
        for _ in range(5):
            results[k] = np.array(f(xs[k]))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for k, x in enumerate(xs):
        np.testing.assert_allclose(results[k], expected(x, rounds), rtol=1e-4, atol=1e-5)


def test_one_slow_first_call_does_not_make_a_short_step_long(monkeypatch):
    """A first call's page faults, or a busy host's stolen cycles, can make one call of a
    trivial step take far over GIL_HOLD_NS: the fastest probe call decides."""
    clock = iter([0, 10 * executable.GIL_HOLD_NS]
                 + [t for k in range(1, 50) for t in (k * 10**9, k * 10**9 + 1_000)])

    class SlowFirstCall:
        perf_counter = staticmethod(time.perf_counter)

        @staticmethod
        def thread_time_ns() -> int:
            return next(clock)

    monkeypatch.setattr(executable, "time", SlowFirstCall)
    assert_a_short_step_keeps_the_gil_and_the_native_path()
