"""Neural-network ops against direct formulas and slow loop references written here.

The references below are deliberately naive (loops over output pixels, TensorFlow's
padding formulas spelled out) so that they check the vectorized im2col / window-view
implementations rather than repeat them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.builder import Builder
from tfc.ir.core import Graph
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.registry import lookup
from tfc.ir.types import DType, TensorType
from tfc.testing import infer_op1 as infer1, run_op1

RNG = np.random.default_rng(1)


def t(shape, dtype=DType.f32) -> TensorType:
    return TensorType(dtype, tuple(shape))



def rand(*shape, dtype=np.float64, scale=1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(dtype)


# ---- slow references ------------------------------------------------------------------

def tf_geometry(n: int, k: int, s: int, d: int, padding: str) -> tuple[int, int]:
    """(output size, padding before) per TensorFlow's documented formulas."""
    eff = (k - 1) * d + 1
    if padding == "VALID":
        return math.ceil((n - eff + 1) / s), 0
    out = math.ceil(n / s)
    total = max((out - 1) * s + eff - n, 0)
    return out, total // 2


def conv2d_loops(x, w, strides, padding, dilations=(1, 1)):
    n, h, wd, c = x.shape
    kh, kw, ci, co = w.shape
    ho, top = tf_geometry(h, kh, strides[0], dilations[0], padding)
    wo, left = tf_geometry(wd, kw, strides[1], dilations[1], padding)
    out = np.zeros((n, ho, wo, co))
    for i in range(ho):
        for j in range(wo):
            for a in range(kh):
                for b in range(kw):
                    r = i * strides[0] - top + a * dilations[0]
                    q = j * strides[1] - left + b * dilations[1]
                    if 0 <= r < h and 0 <= q < wd:
                        out[:, i, j, :] += x[:, r, q, :].astype(np.float64) @ w[a, b]
    return out


def pool_loops(x, ksize, strides, padding, kind):
    n, h, wd, c = x.shape
    ho, top = tf_geometry(h, ksize[0], strides[0], 1, padding)
    wo, left = tf_geometry(wd, ksize[1], strides[1], 1, padding)
    out = np.zeros((n, ho, wo, c))
    for i in range(ho):
        for j in range(wo):
            r0, q0 = i * strides[0] - top, j * strides[1] - left
            rows = [r for r in range(r0, r0 + ksize[0]) if 0 <= r < h]
            cols = [q for q in range(q0, q0 + ksize[1]) if 0 <= q < wd]
            win = x[:, rows][:, :, cols].astype(np.float64)  # real elements only
            out[:, i, j, :] = win.max(axis=(1, 2)) if kind == "max" else win.mean(axis=(1, 2))
    return out


# ---- softmax and log_softmax ----------------------------------------------------------

def softmax_direct(x, axis):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax_f64(axis):
    x = rand(3, 4, 5, scale=3)
    expect = softmax_direct(x, axis)
    np.testing.assert_allclose(run_op1("softmax", x, axis=axis), expect, rtol=1e-12)
    np.testing.assert_allclose(run_op1("log_softmax", x, axis=axis), np.log(expect),
                               rtol=1e-12)


def test_softmax_f32_and_f16():
    x = rand(6, 10, scale=3)
    for kind, fn in (("softmax", softmax_direct),
                     ("log_softmax", lambda v, a: np.log(softmax_direct(v, a)))):
        out = run_op1(kind, x.astype(np.float32))
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, fn(x.astype(np.float32).astype(np.float64), -1),
                                   rtol=1e-5)
        h = run_op1(kind, x.astype(np.float16))
        assert h.dtype == np.float16
        np.testing.assert_allclose(h, fn(x.astype(np.float16).astype(np.float64), -1),
                                   rtol=2e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_large_logits_stay_finite(dtype):
    x = np.array([[1000.0, 999.0, -1000.0], [-1000.0, -1000.0, -1000.0]], dtype=dtype)
    sm = run_op1("softmax", x)
    lsm = run_op1("log_softmax", x)
    assert np.all(np.isfinite(sm)) and np.all(np.isfinite(lsm))
    shifted = x.astype(np.float64) - x.max(axis=1, keepdims=True)
    np.testing.assert_allclose(sm, softmax_direct(shifted, -1), rtol=1e-6)
    np.testing.assert_allclose(lsm[0, :2], [-np.log1p(np.exp(-1.0)), -1 - np.log1p(np.exp(-1))],
                               rtol=1e-6)
    np.testing.assert_allclose(lsm[1], -np.log(3.0), rtol=1e-6)


def test_softmax_types_and_errors():
    assert str(infer1("softmax", t(("B", 10)))) == "f32[B,10]"
    with pytest.raises(TypeMismatch, match=r"softmax: axis 2 is out of range for rank 2"):
        infer1("softmax", t((3, 4)), axis=2)
    with pytest.raises(TypeMismatch, match=r"log_softmax: input f32\[\] must have rank >= 1"):
        infer1("log_softmax", t(()))
    with pytest.raises(TypeMismatch, match="dtype i32"):
        infer1("softmax", t((3,), DType.i32))


# ---- cross entropies ------------------------------------------------------------------

def xent_direct(logits, labels, axis):
    return -np.sum(labels * np.log(softmax_direct(logits, axis)), axis=axis)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_cross_entropy(axis):
    logits = rand(4, 6, scale=2)
    labels = softmax_direct(rand(4, 6), axis)
    out = run_op1("softmax_cross_entropy", logits, labels, axis=axis)
    assert out.shape == ((6,) if axis == 0 else (4,))
    np.testing.assert_allclose(out, xent_direct(logits, labels, axis), rtol=1e-12)
    o32 = run_op1("softmax_cross_entropy", logits.astype(np.float32),
                  labels.astype(np.float32), axis=axis)
    assert o32.dtype == np.float32
    expect = xent_direct(logits.astype(np.float32).astype(np.float64),
                         labels.astype(np.float32).astype(np.float64), axis)
    np.testing.assert_allclose(o32, expect, rtol=1e-5)


def test_softmax_cross_entropy_large_logits():
    logits = np.array([[1000.0, 0.0, -1000.0], [1000.0, 1000.0, 0.0]], dtype=np.float32)
    labels = np.array([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]], dtype=np.float32)
    out = run_op1("softmax_cross_entropy", logits, labels)
    np.testing.assert_allclose(out, [1000.0, np.log(2.0)], rtol=1e-5)


@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
def test_sparse_softmax_cross_entropy(label_dtype):
    logits = rand(2, 3, 5, scale=2)
    labels = RNG.integers(0, 5, (2, 3)).astype(label_dtype)
    out = run_op1("sparse_softmax_cross_entropy", logits, labels)
    sm = softmax_direct(logits, -1)
    expect = -np.log(np.take_along_axis(sm, labels[..., None].astype(np.int64), -1)[..., 0])
    np.testing.assert_allclose(out, expect, rtol=1e-12)
    o32 = run_op1("sparse_softmax_cross_entropy", logits.astype(np.float32), labels)
    assert o32.dtype == np.float32
    np.testing.assert_allclose(o32, expect, rtol=1e-5)
    big = np.array([[1000.0, -1000.0, 0.0]], dtype=np.float32)
    np.testing.assert_allclose(
        run_op1("sparse_softmax_cross_entropy", big, np.array([2], dtype=label_dtype)),
        [1000.0], rtol=1e-6)


def test_sparse_label_out_of_range():
    logits = rand(3, 4)
    with pytest.raises(ExecutionError, match=r"sparse_softmax_cross_entropy: label 4 at index "
                                             r"\[1\] is out of range \[0, 4\)"):
        run_op1("sparse_softmax_cross_entropy", logits, np.array([0, 4, 1], dtype=np.int32))
    with pytest.raises(ExecutionError, match=r"label -1 at index \[2\]"):
        run_op1("sparse_softmax_cross_entropy", logits, np.array([0, 1, -1], dtype=np.int64))


def test_sigmoid_cross_entropy():
    x = RNG.uniform(-4, 4, (5, 7))
    z = RNG.uniform(0, 1, (5, 7))
    s = 1 / (1 + np.exp(-x))
    expect = -z * np.log(s) - (1 - z) * np.log(1 - s)
    np.testing.assert_allclose(run_op1("sigmoid_cross_entropy", x, z), expect, rtol=1e-12)
    o32 = run_op1("sigmoid_cross_entropy", x.astype(np.float32), z.astype(np.float32))
    assert o32.dtype == np.float32
    np.testing.assert_allclose(o32, expect, rtol=1e-5)
    big = np.array([1000.0, -1000.0, 1000.0, -1000.0], dtype=np.float32)
    zb = np.array([1.0, 0.0, 0.0, 1.0], dtype=np.float32)
    np.testing.assert_allclose(run_op1("sigmoid_cross_entropy", big, zb),
                               [0.0, 0.0, 1000.0, 1000.0], atol=1e-6)


def test_cross_entropy_types_and_errors():
    assert str(infer1("softmax_cross_entropy", t(("B", 10)), t(("B", 10)))) == "f32[B]"
    assert str(infer1("softmax_cross_entropy", t(("B", 10)), t((32, 10)))) == "f32[32]"
    assert str(infer1("softmax_cross_entropy", t((10, "B")), t((10, "B")), axis=0)) == "f32[B]"
    assert str(infer1("sparse_softmax_cross_entropy", t(("B", 10)),
                      t(("B",), DType.i32))) == "f32[B]"
    assert str(infer1("sigmoid_cross_entropy", t(("B", 3)), t(("B", 3)))) == "f32[B,3]"
    with pytest.raises(TypeMismatch, match=r"softmax_cross_entropy: logits f32\[B,10\] and "
                                           r"labels f32\[B,9\] must have the same shape"):
        infer1("softmax_cross_entropy", t(("B", 10)), t(("B", 9)))
    with pytest.raises(TypeMismatch, match=r"labels i32\[B,10\] must have the shape of logits "
                                           r"f32\[B,10\] without its class axis, \[B\]"):
        infer1("sparse_softmax_cross_entropy", t(("B", 10)), t(("B", 10), DType.i32))
    with pytest.raises(TypeMismatch, match="labels has dtype f32"):
        infer1("sparse_softmax_cross_entropy", t((4, 10)), t((4,)))
    with pytest.raises(TypeMismatch, match=r"sigmoid_cross_entropy: logits f32\[3\] and "
                                           r"labels f32\[4\]"):
        infer1("sigmoid_cross_entropy", t((3,)), t((4,)))
    with pytest.raises(TypeMismatch, match="different dtypes"):
        infer1("softmax_cross_entropy", t((3, 4)), t((3, 4), DType.f64))


# ---- bias_add -------------------------------------------------------------------------

def test_bias_add():
    x, b = rand(2, 3, 4, 5), rand(5)
    np.testing.assert_array_equal(run_op1("bias_add", x, b), x + b)
    np.testing.assert_array_equal(run_op1("bias_add", x[:, :, 0, 0], b[:3]), x[:, :, 0, 0] + b[:3])
    y = run_op1("bias_add", x, b[:3], data_format="NCHW")
    np.testing.assert_array_equal(y, x + b[:3, None, None])
    assert str(infer1("bias_add", t(("B", 10)), t((10,)))) == "f32[B,10]"
    assert str(infer1("bias_add", t(("B", "C", 8, 8)), t((16,)), data_format="NCHW")) \
        == "f32[B,16,8,8]"
    with pytest.raises(TypeMismatch, match=r"bias_add: bias f32\[5\] has 5 elements but input "
                                           r"f32\[B,10\] has 10 channels \(NHWC\)"):
        infer1("bias_add", t(("B", 10)), t((5,)))
    with pytest.raises(TypeMismatch, match=r"bias f32\[2,5\] must have rank 1"):
        infer1("bias_add", t((3, 5)), t((2, 5)))
    with pytest.raises(TypeMismatch, match=r"data_format must be 'NHWC' or 'NCHW', got 'NWC'"):
        infer1("bias_add", t((3, 5)), t((5,)), data_format="NWC")


# ---- conv2d ---------------------------------------------------------------------------

CONV_CASES = [
    # (input shape, filter shape, strides, padding, dilations)
    ((2, 7, 9, 3), (3, 3, 3, 4), (1, 1), "SAME", (1, 1)),
    ((2, 7, 9, 3), (3, 3, 3, 4), (1, 1), "VALID", (1, 1)),
    ((2, 7, 9, 3), (3, 3, 3, 4), (2, 2), "SAME", (1, 1)),
    ((2, 7, 9, 3), (3, 3, 3, 4), (2, 2), "VALID", (1, 1)),
    ((1, 8, 6, 2), (2, 2, 2, 3), (2, 2), "SAME", (1, 1)),   # even kernel
    ((1, 5, 5, 2), (2, 4, 2, 3), (1, 2), "SAME", (1, 1)),   # asymmetric padding
    ((2, 9, 8, 2), (3, 3, 2, 2), (1, 1), "SAME", (2, 2)),   # dilation 2
    ((2, 9, 8, 2), (3, 2, 2, 2), (2, 1), "VALID", (2, 2)),
    ((1, 4, 4, 3), (1, 1, 3, 5), (1, 1), "VALID", (1, 1)),  # 1x1 convolution
    ((1, 3, 3, 1), (5, 5, 1, 1), (1, 1), "SAME", (1, 1)),   # filter larger than image
]


@pytest.mark.parametrize("xs,ws,strides,padding,dil", CONV_CASES)
def test_conv2d_matches_loops(xs, ws, strides, padding, dil):
    x, w = rand(*xs), rand(*ws)
    out = run_op1("conv2d", x, w, strides=strides, padding=padding, dilations=dil)
    expect = conv2d_loops(x, w, strides, padding, dil)
    assert out.shape == expect.shape
    np.testing.assert_allclose(out, expect, rtol=1e-12, atol=1e-12)
    o32 = run_op1("conv2d", x.astype(np.float32), w.astype(np.float32), strides=strides,
                  padding=padding, dilations=dil)
    assert o32.dtype == np.float32
    np.testing.assert_allclose(o32, expect, rtol=1e-5, atol=1e-5)


def test_conv2d_tf_style_attrs_and_pad_at_end():
    # A 1x2 window of ones over [0..4] with SAME: the single pad pixel goes at the end.
    x = np.arange(5.0).reshape(1, 1, 5, 1)
    w = np.ones((1, 2, 1, 1))
    out = run_op1("conv2d", x, w, strides=[1, 1, 1, 1], padding="SAME",
                  dilations=[1, 1, 1, 1])
    np.testing.assert_array_equal(out.ravel(), [1, 3, 5, 7, 4])


def test_conv2d_symbolic_batch_runs():
    g = Graph("conv")
    x = g.add_arg(t(("B", 8, 8, 3)), "x")
    w = g.add_arg(t((3, 3, 3, 4)), "w")
    y = Builder(g)("conv2d", x, w, strides=[2, 2], padding="SAME")
    assert str(y.type) == "f32[B,4,4,4]"
    g.set_results([y])
    xa, wa = rand(5, 8, 8, 3, dtype=np.float32), rand(3, 3, 3, 4, dtype=np.float32)
    (out,) = run_graph(g, [xa, wa], ExecContext({}))
    np.testing.assert_allclose(out, conv2d_loops(xa, wa, (2, 2), "SAME"), rtol=1e-5, atol=1e-5)


def test_conv2d_shapes():
    f = t((3, 3, 3, 32))
    assert str(infer1("conv2d", t(("B", 28, 28, 3)), f, padding="SAME")) == "f32[B,28,28,32]"
    assert str(infer1("conv2d", t(("B", 28, 28, 3)), f, padding="VALID")) == "f32[B,26,26,32]"
    assert str(infer1("conv2d", t(("B", 28, 28, 3)), f, padding="SAME", strides=[2, 2])) \
        == "f32[B,14,14,32]"
    assert str(infer1("conv2d", t(("B", 27, 27, 3)), f, padding="VALID", strides=[2, 2],
                      dilations=[2, 2])) == "f32[B,12,12,32]"
    assert str(infer1("conv2d", t(("B", "H", "W", 3)), f, padding="SAME")) == "f32[B,H,W,32]"
    assert str(infer1("conv2d", t(("B", "H", "W", 3)), f, padding="SAME", strides=[2, 2])) \
        == "f32[B,?,?,32]"
    assert str(infer1("conv2d", t(("B", "H", 9, 3)), f, padding="VALID")) == "f32[B,?,7,32]"
    assert str(infer1("conv2d", t((1, 9, 9, "C")), f)) == "f32[1,7,7,32]"


def test_conv2d_errors():
    with pytest.raises(TypeMismatch, match=r"^conv2d: input f32\[B,28,28,3\] has 3 channels "
                                           r"but filter f32\[3,3,1,32\] expects 1$"):
        infer1("conv2d", t(("B", 28, 28, 3)), t((3, 3, 1, 32)), padding="SAME")
    with pytest.raises(TypeMismatch, match=r"conv2d: input f32\[28,28,3\] must have rank 4"):
        infer1("conv2d", t((28, 28, 3)), t((3, 3, 3, 8)))
    with pytest.raises(TypeMismatch, match=r"conv2d: filter f32\[3,3,8\] must have rank 4"):
        infer1("conv2d", t((1, 28, 28, 3)), t((3, 3, 8)))
    with pytest.raises(TypeMismatch, match=r"padding must be 'SAME' or 'VALID', got 'same'"):
        infer1("conv2d", t((1, 8, 8, 3)), t((3, 3, 3, 8)), padding="same")
    with pytest.raises(TypeMismatch, match=r"strides=\[1, 2, 2\] must have 2 ints"):
        infer1("conv2d", t((1, 8, 8, 3)), t((3, 3, 3, 8)), strides=[1, 2, 2])
    with pytest.raises(TypeMismatch, match=r"strides=\[2, 2, 2, 1\] must be 1 in the batch"):
        infer1("conv2d", t((1, 8, 8, 3)), t((3, 3, 3, 8)), strides=[2, 2, 2, 1])
    with pytest.raises(TypeMismatch, match=r"dilations=\[0, 1\] must be positive"):
        infer1("conv2d", t((1, 8, 8, 3)), t((3, 3, 3, 8)), dilations=[0, 1])
    with pytest.raises(TypeMismatch, match=r"conv2d: filter of 5 \(size 3 with dilation 2\) is "
                                           r"larger than the input height 4 of f32\[B,4,9,3\] "
                                           r"with VALID padding"):
        infer1("conv2d", t(("B", 4, 9, 3)), t((3, 3, 3, 8)), dilations=[2, 2])
    with pytest.raises(TypeMismatch, match="dtype i32"):
        infer1("conv2d", t((1, 8, 8, 3), DType.i32), t((3, 3, 3, 8), DType.i32))


def test_conv2d_cost():
    ins = [t((2, 8, 8, 3)), t((3, 3, 3, 16))]
    outs = [infer1("conv2d", *ins, padding="SAME", strides=[2, 2])]
    c = lookup("conv2d").cost(ins, outs, {"padding": "SAME", "strides": (2, 2),
                                          "dilations": (1, 1)})
    assert c.flops == 2 * 2 * 4 * 4 * 16 * 3 * 3 * 3


# ---- pooling --------------------------------------------------------------------------

POOL_CASES = [
    ((2, 7, 9, 3), (2, 2), (2, 2), "VALID"),
    ((2, 7, 9, 3), (2, 2), (2, 2), "SAME"),
    ((2, 7, 9, 3), (3, 3), (1, 1), "SAME"),
    ((2, 7, 9, 3), (3, 3), (1, 1), "VALID"),
    ((1, 5, 6, 2), (3, 2), (2, 1), "SAME"),
    ((1, 5, 6, 2), (3, 3), (2, 2), "SAME"),
    ((1, 2, 2, 1), (3, 3), (1, 1), "SAME"),   # window larger than image
]


@pytest.mark.parametrize("xs,k,s,padding", POOL_CASES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_matches_loops(xs, k, s, padding, kind):
    x = rand(*xs) - 3.0  # negative values: zero padding would show in max_pool
    expect = pool_loops(x, k, s, padding, kind)
    out = run_op1(f"{kind}_pool", x, ksize=k, strides=s, padding=padding)
    assert out.shape == expect.shape
    np.testing.assert_allclose(out, expect, rtol=1e-12)
    o32 = run_op1(f"{kind}_pool", x.astype(np.float32), ksize=k, strides=s, padding=padding)
    assert o32.dtype == np.float32
    np.testing.assert_allclose(o32, expect, rtol=1e-5)


def test_pool_same_padding_semantics():
    x = np.array([1.0, 2.0, 3.0]).reshape(1, 1, 3, 1)
    avg = run_op1("avg_pool", x, ksize=[1, 2], strides=[1, 1], padding="SAME")
    np.testing.assert_array_equal(avg.ravel(), [1.5, 2.5, 3.0])  # last window: one real pixel
    mx = run_op1("max_pool", -x, ksize=[1, 1, 2, 1], strides=[1, 1, 1, 1], padding="SAME")
    np.testing.assert_array_equal(mx.ravel(), [-1.0, -2.0, -3.0])  # pads never win


def test_pool_defaults_and_int_max_pool():
    x = RNG.integers(-100, 100, (2, 6, 6, 3)).astype(np.int32)
    out = run_op1("max_pool", x, ksize=[2, 2])  # strides default to ksize, VALID
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, pool_loops(x, (2, 2), (2, 2), "VALID", "max"))
    same = run_op1("max_pool", x[:, :5], ksize=[2, 2], padding="SAME")
    np.testing.assert_array_equal(same, pool_loops(x[:, :5], (2, 2), (2, 2), "SAME", "max"))


def test_pool_shapes_and_errors():
    assert str(infer1("max_pool", t(("B", 28, 28, 32)), ksize=[2, 2])) == "f32[B,14,14,32]"
    assert str(infer1("avg_pool", t(("B", 7, 7, 8)), ksize=[2, 2], strides=[2, 2],
                      padding="SAME")) == "f32[B,4,4,8]"
    assert str(infer1("avg_pool", t(("B", "H", 7, 8)), ksize=[3, 3], strides=[1, 1],
                      padding="SAME")) == "f32[B,H,7,8]"
    with pytest.raises(TypeMismatch, match=r"max_pool: window of 3 is larger than the input "
                                           r"width 2 of f32\[1,4,2,1\] with VALID padding"):
        infer1("max_pool", t((1, 4, 2, 1)), ksize=[3, 3])
    with pytest.raises(TypeMismatch, match=r"avg_pool: input f32\[4,4,1\] must have rank 4"):
        infer1("avg_pool", t((4, 4, 1)), ksize=[2, 2])
    with pytest.raises(TypeMismatch, match="missing required attr 'ksize'"):
        infer1("max_pool", t((1, 4, 4, 1)))
    with pytest.raises(TypeMismatch, match="avg_pool: input has dtype i32"):
        infer1("avg_pool", t((1, 4, 4, 1), DType.i32), ksize=[2, 2])
    with pytest.raises(TypeMismatch, match=r"ksize=\[2\] must have 2 ints"):
        infer1("max_pool", t((1, 4, 4, 1)), ksize=[2])


def test_pool_cost():
    ins = [t((2, 8, 8, 3))]
    outs = [infer1("avg_pool", *ins, ksize=[2, 2])]
    c = lookup("avg_pool").cost(ins, outs, {"ksize": (2, 2), "strides": None,
                                            "padding": "VALID"})
    assert c.flops == 2 * 4 * 4 * 3 * 4


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_cross_entropy_of_a_symbolic_batch_with_static_labels_compiles(sparse):
    """Logits ``[B, 4]`` with constant labels of batch 5: the expansion reshapes the logits
    to the labels' static batch (``aligned``), so the llvm backend lowers it natively (it
    sent the whole graph to the reference backend, with a warning, when the expansion
    reduced ``[B, 4]`` and ``[5, 4]`` in one kernel); values and gradients as the
    reference's, and another batch is a clear error on both backends."""
    import warnings

    import tfc
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 4, size=5).astype(np.int32)
    xv = rng.normal(size=(5, 4)).astype(np.float32)
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        if sparse:
            per = tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=tfc.constant(ids),
                                                                  logits=x)
        else:
            hot = tfc.constant(np.eye(4, dtype=np.float32)[ids])
            per = tfc.nn.softmax_cross_entropy_with_logits(labels=hot, logits=x)
        loss = tfc.reduce_mean(per)
        grad = tfc.gradients(loss, [x])[0]
        got = {}
        for backend in ("llvm", "reference"):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with tfc.Session(backend=backend) as s:
                    got[backend] = s.run([loss, grad], {x: xv})
                    with pytest.raises(ExecutionError, match=r"\[6, ?4\]|\[6\]"):
                        s.run(loss, {x: np.zeros((6, 4), np.float32)})
    logp = xv - xv.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    np.testing.assert_allclose(got["llvm"][0], -logp[np.arange(5), ids].mean(), rtol=1e-6)
    np.testing.assert_allclose(got["llvm"][0], got["reference"][0], rtol=1e-6)
    np.testing.assert_allclose(got["llvm"][1], got["reference"][1], rtol=1e-5, atol=1e-7)
