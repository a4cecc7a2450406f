"""Native callables (``pystep``): ``Program.callable``'s usual path in machine code must
do exactly what the Python path does — same results, variables, step counts, errors —
take that path once warm, and leak nothing."""

import sys
import threading

import numpy as np
import pytest

import tfc
from tfc.backends.llvm.runtime import executable, pystep
from tfc.errors import ExecutionError, FeedError
from tfc.runtime import Program

pytestmark = pytest.mark.skipif(pystep.LAYOUT is None,
                                reason="object layouts differ: callables stay in Python")


def make_program() -> Program:
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 3], name="x")
        y = tfc.placeholder(tfc.float32, [None], name="y")
        w = tfc.Variable(np.linspace(-1, 1, 3).astype(np.float32), name="w")
        noise = tfc.random.uniform([3], seed=7)  # reads the step number
        pred = tfc.reduce_sum(x * w, axis=1)
        loss = tfc.reduce_mean(tfc.square(pred - y))
        train = w.assign_sub(0.1 * tfc.gradients(loss, w)[0] + 0.001 * noise)
        tfc.entry("train", feeds={"x": x, "y": y}, fetches={"loss": loss, "pred": pred},
                  targets=[train])
        k = tfc.placeholder(tfc.int32, [2], name="k")
        tfc.entry("divide", feeds={"k": k}, fetches={"q": k[0] // k[1]})
        return Program(g.as_module(), backend="llvm")


def batch(n: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)).astype(np.float32), rng.normal(size=n).astype(np.float32)


def keeper(fn):
    """The ``NativeStep`` behind a native callable (its ``__self__`` is (table, keeper))."""
    assert type(fn).__name__ == "builtin_function_or_method"
    return fn.__self__[1]


def count_slow_calls(fn) -> list[int]:
    """Count the calls that leave the native path (they go through the Python step)."""
    k, calls = keeper(fn), [0]
    inner = k.call

    def counted(*values):
        calls[0] += 1
        return inner(*values)
    k.call = counted
    return calls


def test_native_steps_match_python_steps_bit_for_bit():
    native, python = make_program(), make_program()
    f = native.callable("train", ["y", "x"], ["loss", "pred"])  # feeds in another order
    slow = count_slow_calls(f)
    for i in range(12):
        x, y = batch(seed=i)
        want = python.run("train", x=x, y=y)
        loss, pred = f(y, x)
        np.testing.assert_array_equal(loss, want["loss"])  # the same native code
        np.testing.assert_array_equal(pred, want["pred"])
        np.testing.assert_array_equal(native.variables["w"], python.variables["w"])
    assert native.step == python.step == 12
    assert not native.variables["w"].flags.writeable
    assert slow[0] <= 3  # the first steps, until the pools have a free array each


def test_single_fetch_and_results_held_by_the_caller_are_never_overwritten():
    p = make_program()
    f = p.callable("train", ["x", "y"], "pred")
    kept = []
    for i in range(6):
        x, _ = batch(seed=i)
        w = p.variables["w"]  # the value the step reads
        kept.append((f(x, np.zeros(4, np.float32)), x, w))
    for pred, x, w in kept:
        np.testing.assert_allclose(pred, (x * w).sum(axis=1), rtol=1e-6)


def test_new_shapes_bad_feeds_and_errors_go_through_the_python_path():
    p = make_program()
    f = p.callable("train", ["x", "y"], "loss")
    for n in (4, 7, 4, 2, 7):  # the table follows the binding in use
        x, y = batch(n, seed=n)
        want = float(np.mean(((x * p.variables["w"]).sum(axis=1) - y) ** 2))
        assert float(f(x, y)) == pytest.approx(want, rel=1e-6)
    x, y = batch()
    want = np.mean(((x * p.variables["w"]).sum(axis=1) - y) ** 2)  # converted feeds
    np.testing.assert_allclose(f(np.asfortranarray(x), y.tolist()), want, rtol=1e-6)
    with pytest.raises(FeedError, match="feed 'x' has dtype f64"):
        f(x.astype(np.float64), y)
    with pytest.raises(FeedError, match="dim B is 4 in feed 'x' .* but 3 in feed 'y'"):
        f(x, y[:3])
    with pytest.raises(FeedError, match="takes 2 feeds \\(x, y\\), got 1"):
        f(x)
    with pytest.raises(TypeError, match="keyword"):
        f(x=x, y=y)
    assert p.step == 6

    d = p.callable("divide", ["k"], "q")
    assert int(d(np.array([7, 2], np.int32))) == 3
    for _ in range(2):
        with pytest.raises(ExecutionError, match="division by zero"):
            d(np.array([7, 0], np.int32))
    assert int(d(np.array([9, 3], np.int32))) == 3
    assert p.step == 8


def test_uninitialized_variable_is_reported():
    p = make_program()
    f = p.callable("train", ["x", "y"], "loss")
    f(*batch())
    del p._variables["w"]
    with pytest.raises(ExecutionError, match="variable @w is not initialized"):
        f(*batch())


def test_a_warm_native_callable_leaks_no_references():
    p = make_program()
    f = p.callable("train", ["x", "y"], ["loss", "pred"])
    x, y = batch()
    for _ in range(5):
        loss, pred = f(x, y)  # as the loop below: the previous results are held
    exe = p._executable("train")
    before = (sys.getrefcount(x), sys.getrefcount(y), sys.getrefcount(p._variables),
              [len(pool) for pool, *_ in exe._last.fills])
    slow = count_slow_calls(f)
    for _ in range(2000):
        loss, pred = f(x, y)
    del loss, pred
    assert slow[0] == 0
    assert (sys.getrefcount(x), sys.getrefcount(y), sys.getrefcount(p._variables),
            [len(pool) for pool, *_ in exe._last.fills]) == before
    assert all(sys.getrefcount(a) <= 4 for pool, *_ in exe._last.fills[:exe._last.n_outs]
               for a in pool)
    assert p.step == 2005


def test_threads_share_a_native_callable():
    """Threads with feeds of different shapes: each step sees its own binding (the table
    is rebuilt as the latest binding changes, one thread at a time)."""
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None], name="x")
        tfc.entry("f", feeds={"x": x}, fetches={"y": tfc.tanh(x) * 2.0 + x})
    p = Program(g.as_module(), backend="llvm")
    f = p.callable("f", ["x"], "y")
    errors = []

    def work(seed: int) -> None:
        x = np.random.default_rng(seed).normal(size=8 * (1 + seed % 2)).astype(np.float32)
        want = np.tanh(x) * 2 + x
        for _ in range(3000):
            if not np.allclose(f(x), want, rtol=1e-6, atol=1e-6):
                errors.append(seed)
                return

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert p.step == 12000


def test_steps_that_release_the_gil_stay_in_python():
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None], name="x")
        tfc.entry("f", feeds={"x": x}, fetches={"y": x * 3.0})
    p = Program(g.as_module(), backend="llvm")
    f = p.callable("f", ["x"], "y")
    slow = count_slow_calls(f)
    big = np.ones(1 << 16, np.float32)  # over GIL_HOLD_BYTES: the GIL is let go
    for _ in range(3):
        np.testing.assert_array_equal(f(big), big * 3)
    assert slow[0] == 3 and keeper(f).table[pystep.H["enabled"]] == 0
    small = np.ones(8, np.float32)  # the GIL probe's calls go the Python way, then native
    probes = executable.GIL_PROBE_CALLS
    for _ in range(probes + 2):
        np.testing.assert_array_equal(f(small), small * 3)
    assert slow[0] == 3 + probes and keeper(f).table[pystep.H["enabled"]] == 1
