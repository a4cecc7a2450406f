"""LLVM backend kernels against the reference backend, op family by op family.

Every graph is compiled once (with fusion and memory planning) and run for several
feed shapes where a dim is symbolic: one compiled entry serves every batch size.
"""

from __future__ import annotations

import numpy as np
import pytest

from tfc.errors import ExecutionError
from tfc.ir.registry import REDUCTION, kinds_with
from tfc.ir.types import DType
from tfc.testing import compile_lowered

F32, F64, I32, I64, BOOL = DType.f32, DType.f64, DType.i32, DType.i64, DType.bool
RNG = np.random.default_rng(0)


def test_elementwise_chain_broadcast_symbolic_batch(h):
    def body(b, a):
        x, bias, s = a
        y = b("tanh", b("add", b("mul", x, s), bias))
        z = b("where", b("greater", y, b("constant", value=np.array(0.1, np.float32))),
              b("exp", y), b("neg", b("square", y)))
        return [y, b("sigmoid", z), b("cast", b("relu", x), dtype=F64)]

    m = h.make_module([("x", F32, ("B", 5, 7)), ("bias", F32, (7,)), ("s", F32, (5, 1))],
                      body)
    exe = h.compile_llvm(m)
    for n in (1, 7, 64):
        feeds = [h.rand(RNG, (n, 5, 7)), h.rand(RNG, (7,)), h.rand(RNG, (5, 1))]
        h.assert_same(*h.run_both(m, feeds, exe=exe), rtol=2e-6)


def test_reductions_over_each_axis_set(h):
    sets = [None, (0,), (1,), (2,), (0, 1), (0, 2), (1, 2)]
    kinds = sorted(kinds_with(REDUCTION))  # each has a combine rule in kernels_loop

    def body(b, a):
        return [b(kind, a[0], axes=ax, keepdims=(i + j) % 2 == 1)
                for i, kind in enumerate(kinds) for j, ax in enumerate(sets)]

    m = h.make_module([("x", F32, ("B", 6, 5))], body)
    exe = h.compile_llvm(m)
    for n in (1, 7):
        x = RNG.uniform(0.5, 1.5, (n, 6, 5)).astype(np.float32)
        h.assert_same(*h.run_both(m, [x], exe=exe), rtol=1e-5)


def test_reduction_with_consumers_and_integers(h):
    def body(b, a):
        x, i = a
        e = b("exp", b("sub", x, b("max", x, axes=[1], keepdims=True)))
        col = b("sum", b("mul", x, x), axes=[0])  # a column reduction with a consumer
        return [b("div", e, b("sum", e, axes=[1], keepdims=True)),
                b("sqrt", col), b("sum", i, axes=[0]), b("max", i), b("mean", x)]

    m = h.make_module([("x", F64, ("B", 9)), ("i", I32, ("B", 3))], body)
    exe = h.compile_llvm(m)
    for n in (1, 7, 64):
        feeds = [h.rand(RNG, (n, 9), np.float64), RNG.integers(-9, 9, (n, 3)).astype(np.int32)]
        h.assert_same(*h.run_both(m, feeds, exe=exe), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype,rtol", [(F32, 1e-5), (F64, 1e-12)])
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_transpose_flags(h, dtype, rtol, ta, tb):
    a_shape = (9, "B") if ta else ("B", 9)
    b_shape = (4, 9) if tb else (9, 4)
    m = h.make_module([("a", dtype, a_shape), ("b", dtype, b_shape)],
                      lambda b, a: b("matmul", a[0], a[1], transpose_a=ta, transpose_b=tb))
    exe = h.compile_llvm(m)
    for n in (1, 7, 64):
        ash = (9, n) if ta else (n, 9)
        feeds = [h.rand(RNG, ash, dtype.np), h.rand(RNG, b_shape, dtype.np)]
        h.assert_same(*h.run_both(m, feeds, exe=exe), rtol=rtol, atol=rtol)


def test_matmul_batched_and_broadcast(h):
    def body(b, a):
        return [b("matmul", a[0], a[1]), b("matmul", a[0], a[2], transpose_b=True)]

    m = h.make_module([("a", F32, (3, "B", 5)), ("b", F32, (3, 5, 6)), ("c", F32, (1, 4, 5))],
                      body)
    exe = h.compile_llvm(m)
    for n in (1, 7):
        feeds = [h.rand(RNG, (3, n, 5)), h.rand(RNG, (3, 5, 6)), h.rand(RNG, (1, 4, 5))]
        h.assert_same(*h.run_both(m, feeds, exe=exe), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [I32, I64])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_integer_matmul_wraps_as_numpy(h, dtype, ta, tb):
    """The loop kernels (no integer BLAS): every transpose order, a batch broadcast against
    a matrix and against a batch dim of size 1, an empty batch; operands over the whole
    range, so products and sums overflow and must wrap as numpy's do (exact results)."""
    def body(b, a):
        x, w, y, z = a
        return [b("matmul", x, w, transpose_a=ta, transpose_b=tb),
                b("matmul", y, z, transpose_a=ta, transpose_b=tb)]

    xs = (7, "B") if ta else ("B", 7)
    ws = (5, 7) if tb else (7, 5)
    ys, zs = (3, 1, *((6, 4) if ta else (4, 6))), (2, *((3, 6) if tb else (6, 3)))
    m = h.make_module([("x", dtype, xs), ("w", dtype, ws), ("y", dtype, ys),
                       ("z", dtype, zs)], body)
    exe = h.compile_llvm(m)
    info = np.iinfo(dtype.np)
    for n in (0, 1, 9):
        feeds = [RNG.integers(info.min, info.max, (7, n) if ta else (n, 7), dtype=dtype.np),
                 RNG.integers(info.min, info.max, ws, dtype=dtype.np),
                 RNG.integers(-50, 50, ys, dtype=dtype.np),
                 RNG.integers(info.min, info.max, zs, dtype=dtype.np)]
        h.assert_same(*h.run_both(m, feeds, exe=exe))


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_conv2d_and_pools_with_gradients(h, padding):
    def body(b, a):
        x, w, dy = a
        y = b("conv2d", x, w, strides=[1, 1], padding=padding)
        p = b("max_pool", y, ksize=[2, 2], padding=padding)
        q = b("avg_pool", y, ksize=[3, 3], strides=[2, 2], padding=padding)
        dx = b("conv2d_backprop_input", w, y, x, padding=padding)
        dw = b("conv2d_backprop_filter", x, y, w, padding=padding)
        gp = b("max_pool_grad", y, p, b("ones_like", p), ksize=[2, 2], padding=padding)
        ga = b("avg_pool_grad", b("ones_like", q), y, ksize=[3, 3], strides=[2, 2],
               padding=padding)
        return [y, p, q, dx, dw, gp, ga]

    m = h.make_module([("x", F32, ("B", 9, 8, 2)), ("w", F32, (3, 3, 2, 4)),
                       ("dy", F32, (1,))], body)
    exe = h.compile_llvm(m)
    for n in (1, 3):
        feeds = [h.rand(RNG, (n, 9, 8, 2)), h.rand(RNG, (3, 3, 2, 4)), h.rand(RNG, (1,))]
        h.assert_same(*h.run_both(m, feeds, exe=exe), rtol=1e-5, atol=1e-5)


def test_movement_ops(h):
    def body(b, a):
        x, idx, v = a
        return [
            b("transpose", x, perm=[2, 0, 1]),
            b("slice", x, begin=[0, 3, 1], end=[2**63 - 1, 0, 5], strides=[1, -1, 2]),
            b("slice", x, begin=[0, 1], end=[1, 3], squeeze_axes=[0]),
            b("concat", x, b("neg", x), axis=2),
            b("concat", x, x, axis=0),
            b("stack", x, x, axis=1),
            b("pad", x, paddings=[0, 0, 1, 2, 2, 1], value=-1.5),
            b("pad", x, paddings=[0, 0, 2, 1, 1, 2], mode="reflect"),
            b("pad", x, paddings=[0, 0, 2, 1, 1, 2], mode="symmetric"),
            b("tile", x, multiples=[1, 2, 3]),
            b("broadcast_to", v, shape=[2, 3, 6]),
            b("gather", x, idx, axis=1),
            b("one_hot", idx, depth=5, axis=0),
            b("argmax", x, axis=1), b("argmin", x, axis=2, output_type=I32),
            b("reshape", b("exp", x), shape=[-1]),
            b("expand_dims", x, axis=1),
            b("range", limit=7.0, delta=2.0, dtype=F32),
            b("fill", shape=[2, 2], value=3.0, dtype=I64),
            b("shape", x), b("zeros_like", x),
        ] + list(b.op("split", x, axis=2, sizes=[2, -1]).results)

    m = h.make_module([("x", F32, ("B", 4, 6)), ("idx", I32, (2, 2)), ("v", F32, (6,))], body)
    exe = h.compile_llvm(m)
    for n in (1, 3):
        feeds = [h.rand(RNG, (n, 4, 6)), RNG.integers(0, 4, (2, 2)).astype(np.int32),
                 h.rand(RNG, (6,))]
        h.assert_same(*h.run_both(m, feeds, exe=exe))


def test_f16_argmax_and_argmin(h):
    """f16 is compared in f32 (exact): the first index on ties, the first NaN wins."""
    def body(b, a):
        (x,) = a
        return [b("argmax", x, axis=1), b("argmin", x, axis=0), b("argmax", x, axis=2),
                b("argmin", x, axis=1, output_type=I32)]

    m = h.make_module([("x", DType.f16, ("B", 5, 6))], body)
    exe = h.compile_llvm(m)
    for n in (1, 4):
        x = RNG.integers(-2, 3, (n, 5, 6)).astype(np.float16)  # many ties
        x[0, 1, 2] = x[0, 3, 2] = np.nan
        x[-1, 2, :] = [-np.inf, np.inf, 1e-4, 6e4, -6e4, 1.5e-4]
        h.assert_same(*h.run_both(m, [x], exe=exe))


def test_scatter_softmax_family(h):
    def body(b, a):
        d, i, u, logits, labels, p = a
        return [b("scatter_add", d, i, u), b("softmax", logits), b("log_softmax", logits),
                b("sparse_softmax_cross_entropy", logits, labels),
                b("softmax_cross_entropy", logits, p),
                b("sigmoid_cross_entropy", logits, p)]

    m = h.make_module([("d", F32, (5, 3)), ("i", I64, (4,)), ("u", F32, (4, 3)),
                       ("logits", F32, ("B", 6)), ("labels", I32, ("B",)), ("p", F32, ("B", 6))],
                      body)
    exe = h.compile_llvm(m)
    for n in (1, 7):
        p = RNG.uniform(0, 1, (n, 6)).astype(np.float32)
        feeds = [h.rand(RNG, (5, 3)), np.array([0, 4, 0, 2]), h.rand(RNG, (4, 3)),
                 h.rand(RNG, (n, 6)) * 5, RNG.integers(0, 6, n).astype(np.int32),
                 p / p.sum(1, keepdims=True)]
        h.assert_same(*h.run_both(m, feeds, exe=exe), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [F32, F64, DType.f16])
def test_composites_without_a_kernel_compile_their_registry_expansion(h, monkeypatch, dtype):
    """The softmax family unfused (fusion declines it here) is lowered through its registry
    entry's expansion (``tfc.ir.expand``), the one fusion uses too: the reference's
    numbers, f16 computed in f32 and rounded once (within one f16 ulp; the llvm backend's
    own decomposition, before, rounded f16 per op: 2.6e-3 off), and logits of 100s stay
    finite (max subtracted)."""
    import warnings

    from tfc.backends.llvm import LLVMBackend
    from tfc.passes import fusion

    declined: list[str] = []

    def composite_info(op):  # how fusion would take a composite op: not at all
        declined.append(op.kind)
        return None

    monkeypatch.setattr(fusion, "_composite_info", composite_info)
    kinds = ["softmax", "log_softmax", "sparse_softmax_cross_entropy", "softmax_cross_entropy"]

    def body(b, a):
        logits, labels, p = a
        return [b("softmax", logits), b("log_softmax", logits, axis=0),
                b("sparse_softmax_cross_entropy", logits, labels),
                b("softmax_cross_entropy", logits, p)]

    m = h.make_module([("logits", dtype, ("B", 50)), ("labels", I32, ("B",)),
                       ("p", dtype, ("B", 50))], body)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to the reference
        exe = compile_lowered(LLVMBackend(use_cache=False), m, "f")  # a cached one is fused
    assert sorted(set(declined)) == sorted(kinds)
    rtol, atol = {DType.f16: (1e-3, 1e-6), F32: (2e-5, 1e-6), F64: (1e-12, 1e-15)}[dtype]
    for n, scale in ((1, 3), (64, 3), (7, 300)):
        p = RNG.uniform(0, 1, (n, 50))
        feeds = [(h.rand(RNG, (n, 50)) * scale).astype(dtype.np),
                 RNG.integers(0, 50, n).astype(np.int32),
                 (p / p.sum(1, keepdims=True)).astype(dtype.np)]
        got, want = h.run_both(m, feeds, exe=exe)
        assert all(np.isfinite(f).all() for f in want.fetches)
        h.assert_same(got, want, rtol=rtol, atol=atol)


def test_variable_updates(h):
    from tfc.ir.types import TensorType

    def body(b, a):
        (g,) = a
        w = b.op("var.read", var="w", result_types=[TensorType(F32, (4, 3))]).result
        b.op("var.assign", b("sub", w, b("mul", g, b("constant", value=np.array(0.5, np.float32)))),
             var="w")
        b.op("var.assign_add", g, var="m")
        b.op("var.scatter_sub", b("constant", value=np.array([1, 1, 3])),
             b("constant", value=np.ones((3, 3), np.float32)), var="e")
        return [b("sum", w)]

    m = h.make_module([("g", F32, (4, 3))], body,
                      variables={"w": TensorType(F32, (4, 3)), "m": TensorType(F32, (4, 3)),
                                 "e": TensorType(F32, (4, 3))})
    variables = {k: h.rand(RNG, (4, 3)) for k in "wme"}
    before = {k: v.copy() for k, v in variables.items()}
    h.assert_same(*h.run_both(m, [h.rand(RNG, (4, 3))], variables))
    for k in variables:  # start-of-step values are never written
        np.testing.assert_array_equal(variables[k], before[k])


def test_runtime_errors_are_reported(h):
    m = h.make_module([("x", F32, (3, 2)), ("i", I32, ("N",)), ("a", I32, (2,)),
                       ("b", I32, (2,))],
                      lambda b, a: [b("gather", a[0], a[1]), b("div", a[2], a[3])])
    exe = h.compile_llvm(m)
    x = h.rand(RNG, (3, 2))
    ok = exe([x, np.array([2, 0], np.int32), np.array([7, -7], np.int32),
              np.array([2, 2], np.int32)], {}, 0)
    np.testing.assert_array_equal(ok.fetches[1], [3, -4])
    with pytest.raises(ExecutionError, match=r"^gather: index 3 is out of range \[0, 3\) for "
                                             r"axis 0 of params with shape \[3, 2\]$"):
        exe([x, np.array([3], np.int32), np.ones(2, np.int32), np.ones(2, np.int32)], {}, 0)
    with pytest.raises(ExecutionError, match="division by zero"):
        exe([x, np.array([1], np.int32), np.ones(2, np.int32), np.zeros(2, np.int32)], {}, 0)


def test_random_uniform_is_bit_exact(h):
    def body(b, a):
        return [b("random.uniform", shape=[3, 7], seed=1, minval=-2.0, maxval=3.0),
                b("random.uniform", shape=[5], seed=2**40 + 5, dtype=F64),
                b("random.uniform", shape=[2, 3], seed=-3, dtype=DType.f16),
                b("mul", a[0], b("random.uniform_like", a[0], seed=9))]

    m = h.make_module([("x", F32, ("B", 5))], body)
    exe = h.compile_llvm(m)
    from tfc.backends.reference import ReferenceBackend
    ref = ReferenceBackend().compile(m, "f")
    for step, n in ((0, 1), (1, 7), (2**63 + 5, 64)):
        x = h.rand(RNG, (n, 5))
        for got, want in zip(exe([x], {}, step).fetches, ref([x], {}, step).fetches):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("with_full_output", [False, True])
def test_f16_mean_over_leading_axes_accumulates_in_f32(h, with_full_output):
    # 4096 rows: an f16 running sum would stall near 2048 (spacing 2) and the mean drift
    # by ~10%; the reference accumulates in f32, so both agree to one f16 ulp.
    def body(b, a):
        m = b("mean", a[0], axes=[0])
        return [m, b("neg", a[0])] if with_full_output else [m]

    mod = h.make_module([("x", DType.f16, ("B", 8))], body)
    x = RNG.uniform(0.5, 1.5, (4096, 8)).astype(np.float16)
    got, want = h.run_both(mod, [x])
    h.assert_same(got, want, rtol=1e-3, atol=0)
