"""Values with ``?`` dims (sizes known only once the feeds' shapes are) run natively.

``split`` of a batch dim ``B`` and ``slice`` with bounds relative to a symbolic dim give
results typed ``?``; the memory plan puts them in dynamic buffers sized per binding,
and the kernels read their dims as run-time params. Every graph here must compile
without falling back to the reference backend (``compile_llvm`` turns the fallback
warning into an error) and match the reference for several batch sizes.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tfc.errors import ExecutionError
from tfc.ir.types import UNKNOWN, DType

F32, F64 = DType.f32, DType.f64
RNG = np.random.default_rng(3)


def _plan(exe):
    return exe._lowered().plan


def test_split_on_batch_then_matmul(h):
    def body(b, a):
        x, w = a
        p0, p1 = b.op("split", x, num=2, axis=0).results
        y0 = b("relu", b("matmul", p0, w))
        y1 = b("matmul", b("tanh", p1), w)
        return [b("add", y0, y1), b("sum", y0, axes=[0]), b("mean", y1)]

    m = h.make_module([("x", F32, ("B", 7)), ("w", F32, (7, 4))], body)
    exe = h.compile_llvm(m)
    assert not exe.fallback_ops
    plan = _plan(exe)
    assert plan.dynamic and all(plan.buffer(v) is not None for v in plan.dynamic)
    for n in (2, 6, 40):
        feeds = [h.rand(RNG, (n, 7)), h.rand(RNG, (7, 4))]
        h.assert_same(*h.run_both(m, feeds, exe=exe), rtol=1e-5, atol=1e-5)
    assert len(exe._bindings) == 3  # one binding per batch size, each with its own arena


def test_split_with_sizes_and_fetched_parts(h):
    def body(b, a):
        first, rest = b.op("split", a[0], sizes=[1, -1], axis=0).results
        return [first, rest, b("mul", rest, b("exp", first))]

    m = h.make_module([("x", F64, ("B", 3))], body)
    exe = h.compile_llvm(m)
    for n in (1, 4, 9):
        h.assert_same(*h.run_both(m, [h.rand(RNG, (n, 3), np.float64)], exe=exe),
                      rtol=1e-12, atol=1e-12)


def test_slice_with_symbolic_sizes(h):
    def body(b, a):
        x, w = a
        s = b("slice", x, begin=[1, 0], end=[-1, 9], strides=[1, 2])  # f32[?,5]
        assert s.type.shape == (UNKNOWN, 5)
        t = b("sigmoid", b("add", b("mul", s, s), b("constant",
                                                    value=np.array(0.5, np.float32))))
        flat = b("reshape", t, shape=[-1])  # a view of a dynamic value
        return [b("matmul", t, w), b("max", t, axes=[0]), b("sum", flat),
                b("slice", x, begin=[0], end=[-2])]

    m = h.make_module([("x", F32, ("B", 9)), ("w", F32, (5, 3))], body)
    exe = h.compile_llvm(m)
    for n in (3, 8, 33):
        feeds = [h.rand(RNG, (n, 9)), h.rand(RNG, (5, 3))]
        h.assert_same(*h.run_both(m, feeds, exe=exe), rtol=1e-5, atol=1e-5)


def test_dynamic_values_share_buffers_and_the_report_shows_them(h):
    def body(b, a):
        x = a[0]
        s = b("slice", x, begin=[1], end=[-1])  # f32[?,4]
        u = b("exp", b("matmul", s, b("transpose", s, perm=[1, 0])))  # f32[?,?]
        v = b("log", b("add", b("sum", u, axes=[1]), b("constant", value=np.array(1, np.float32))))
        w = b("slice", x, begin=[0], end=[-2])
        return [b("sum", v), b("sum", b("tanh", w))]

    m = h.make_module([("x", F32, ("B", 4))], body)
    exe = h.compile_llvm(m)
    plan = _plan(exe)
    dyn = [b for b in plan.buffers if b.dynamic]
    assert dyn and sum(len(b.values) for b in dyn) == len(plan.dynamic)
    report = plan.report()
    assert "dynamic" in report and "?" in report
    for n in (3, 5, 17):
        h.assert_same(*h.run_both(m, [h.rand(RNG, (n, 4))], exe=exe), rtol=1e-5,
                      atol=1e-5)
    sizes = exe.arena_bytes_by_binding
    assert len(sizes) == 3 and sizes[((17, 4),)] > sizes[((3, 4),)]


def test_split_that_does_not_divide_is_an_execution_error(h):
    m = h.make_module([("x", F32, ("B", 2))],
                      lambda b, a: [b("neg", r) for r in b.op("split", a[0], num=2).results])
    exe = h.compile_llvm(m)
    exe([np.ones((4, 2), np.float32)], {}, 0)
    with pytest.raises(ExecutionError, match="split"):
        exe([np.ones((5, 2), np.float32)], {}, 0)


def test_scan_over_a_sliced_sequence(h):
    """A scan whose xs are a dynamic slice: the control kernel's length is a `?` dim."""
    import tfc

    with tfc.Graph().as_default():
        elems = tfc.placeholder(tfc.float32, [None, 2], name="elems")
        tail = elems[1:]
        total = tfc.scan(lambda acc, x: acc + x, tail, initializer=tfc.zeros([2]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with tfc.Session(backend="llvm") as sess:  # llvm's kernel, in every suite mode
                for n in (2, 5):
                    xv = RNG.normal(size=(n, 2)).astype(np.float32)
                    got = sess.run(total, {elems: xv})
                    np.testing.assert_allclose(got, np.cumsum(xv[1:], axis=0), rtol=1e-6)
