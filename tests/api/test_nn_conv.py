"""``tfc.nn.conv1d``, ``conv2d_transpose``, ``depthwise_conv2d``, ``separable_conv2d``
(``tfc.api.nn_conv``): values against numpy loops written from the definitions (not from
tfc's im2col) on both backends, gradients against central finite differences, shapes with
a symbolic batch, and bad input as a TypeMismatch at the caller's line."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch

RNG = np.random.default_rng(25)


# ---- numpy references: plain loops over output (or input) pixels -----------------------

def same_pads(n: int, k: int, s: int, d: int, padding: str) -> tuple[int, int]:
    """(output size, pad before) of TF's SAME / VALID along one axis."""
    eff = (k - 1) * d + 1
    if padding == "VALID":
        return (n - eff) // s + 1, 0
    out = -(-n // s)
    return out, max((out - 1) * s + eff - n, 0) // 2


def conv2d_np(x, w, s=(1, 1), padding="VALID", d=(1, 1)):
    """Cross-correlation, NHWC input, HWIO filter."""
    kh, kw, _, co = w.shape
    (ho, t), (wo, left) = (same_pads(x.shape[1 + i], w.shape[i], s[i], d[i], padding)
                           for i in range(2))
    out = np.zeros((x.shape[0], ho, wo, co))
    for i in range(ho):
        for j in range(wo):
            for a in range(kh):
                for b in range(kw):
                    r, c = i * s[0] + a * d[0] - t, j * s[1] + b * d[1] - left
                    if 0 <= r < x.shape[1] and 0 <= c < x.shape[2]:
                        out[:, i, j, :] += x[:, r, c, :] @ w[a, b]
    return out


def depthwise_np(x, w, s=(1, 1), padding="VALID", d=(1, 1)):
    """Channel c with filter[:, :, c, m] into output channel c * M + m."""
    n, _, _, c = x.shape
    m = w.shape[3]
    out = np.concatenate([conv2d_np(x[..., ch:ch + 1], w[:, :, ch:ch + 1, :], s, padding, d)
                          for ch in range(c)], axis=-1)
    return out.reshape(*out.shape[:3], c * m)


def transpose_np(x, w, out_shape, s, padding, d=(1, 1)):
    """The scatter definition: input pixel (i, j) adds ``w[a, b] @ x[i, j]`` at output
    pixel ``(i*s + a*d - pad, j*s + b*d - pad)``, the pad of a conv2d over the output."""
    n, h, wd, _ = x.shape
    (_, t), (_, left) = (same_pads(out_shape[1 + i], w.shape[i], s[i], d[i], padding)
                         for i in range(2))
    out = np.zeros(out_shape)
    for i in range(h):
        for j in range(wd):
            for a in range(w.shape[0]):
                for b in range(w.shape[1]):
                    r, c = i * s[0] + a * d[0] - t, j * s[1] + b * d[1] - left
                    if 0 <= r < out_shape[1] and 0 <= c < out_shape[2]:
                        out[:, r, c, :] += x[:, i, j, :] @ w[a, b].T
    return out


def run_both(build, arrays, dtype=tfc.float64):
    """``build(*placeholders)`` run on the llvm and the reference backend."""
    phs = [tfc.placeholder(dtype, a.shape) for a in arrays]
    y = build(*phs)
    got = []
    for backend in ("llvm", "reference"):
        with tfc.Session(backend=backend) as sess:
            got.append(sess.run(y, dict(zip(phs, arrays))))
    return got


def check_grads(build, arrays, eps=1e-6):
    """Gradients of ``sum(c * build(...))`` (fixed random ``c``) w.r.t. every input, on
    the llvm backend, against central differences on the reference backend (f64: rel
    1e-6, abs 1e-9)."""
    phs = [tfc.placeholder(tfc.float64, a.shape) for a in arrays]
    y = build(*phs)
    c = RNG.uniform(0.5, 1.5, size=y.type.static_shape)
    loss = tfc.reduce_sum(y * c)
    with tfc.Session() as sess:
        grads = sess.run(tfc.gradients(loss, phs), dict(zip(phs, arrays)))
    with tfc.Session(backend="reference") as ref:
        for k, (base, grad) in enumerate(zip(arrays, grads)):
            num = np.zeros_like(base)
            for idx in np.ndindex(base.shape):
                vals = []
                for sign in (1, -1):
                    moved = [a.copy() for a in arrays]
                    moved[k][idx] += sign * eps
                    vals.append(float(ref.run(loss, dict(zip(phs, moved)))))
                num[idx] = (vals[0] - vals[1]) / (2 * eps)
            np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-9, err_msg=f"input {k}")


# ---- conv1d ----------------------------------------------------------------------------

@pytest.mark.parametrize("stride,padding,dil", [(1, "VALID", 1), (2, "SAME", 1),
                                                ([1, 2, 1], "SAME", 2), (1, "valid", 2)])
def test_conv1d_matches_loops(stride, padding, dil):
    x, w = RNG.normal(size=(2, 9, 3)), RNG.normal(size=(3, 3, 4))
    s = stride if isinstance(stride, int) else stride[1]
    want = conv2d_np(x[:, None], w[None], (1, s), padding.upper(), (1, dil))[:, 0]
    for got in run_both(lambda a, b: tfc.nn.conv1d(a, b, stride, padding, dilations=dil),
                        [x, w]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv1d_gradients_and_symbolic_batch():
    check_grads(lambda a, b: tfc.nn.conv1d(a, b, 2, "SAME"),
                [RNG.normal(size=(1, 5, 2)), RNG.normal(size=(2, 2, 2))])
    x = tfc.placeholder(tfc.float32, [None, 10, 3])
    assert str(tfc.nn.conv1d(x, tfc.zeros([4, 3, 5]), 3, "SAME").type) == "f32[B,4,5]"


# ---- conv2d_transpose ------------------------------------------------------------------

TRANSPOSE_CASES = [  # x shape, filter shape, output shape, strides, padding, dilations
    ((2, 3, 4, 3), (3, 3, 2, 3), (2, 6, 8, 2), 2, "SAME", 1),
    ((2, 3, 4, 3), (3, 2, 2, 3), (2, 7, 8, 2), [1, 2, 2, 1], "VALID", 1),
    ((1, 3, 3, 2), (2, 2, 2, 2), (1, 9, 8, 2), 3, "VALID", 1),  # 9: a row no tap reaches
    ((1, 4, 4, 2), (3, 3, 1, 2), (1, 4, 4, 1), 1, "SAME", 2),
]


@pytest.mark.parametrize("xs,ws,out,strides,padding,dil", TRANSPOSE_CASES)
def test_conv2d_transpose_matches_scatter_loops(xs, ws, out, strides, padding, dil):
    x, w = RNG.normal(size=xs), RNG.normal(size=ws)
    s = (strides, strides) if isinstance(strides, int) else tuple(strides[1:3])
    want = transpose_np(x, w, out, s, padding, (dil, dil))
    for got in run_both(lambda a, b: tfc.nn.conv2d_transpose(a, b, out, strides, padding,
                                                             dilations=dil), [x, w]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv2d_transpose_is_the_adjoint_of_conv2d():
    """<conv2d(u, w), v> == <u, conv2d_transpose(v, w)>: TF's definition."""
    u, v = RNG.normal(size=(2, 7, 6, 2)), RNG.normal(size=(2, 4, 3, 3))
    w = RNG.normal(size=(3, 2, 2, 3))
    fwd = tfc.nn.conv2d(u, w, 2, "SAME")
    back = tfc.nn.conv2d_transpose(v, w, [2, 7, 6, 2], 2, "SAME")
    with tfc.Session() as sess:
        f, b = sess.run([fwd, back])
    assert np.sum(f * v) == pytest.approx(np.sum(u * b), rel=1e-12)


def test_conv2d_transpose_gradients():
    check_grads(lambda a, b: tfc.nn.conv2d_transpose(a, b, [1, 5, 4, 2], 2, "SAME"),
                [RNG.normal(size=(1, 3, 2, 2)), RNG.normal(size=(2, 3, 2, 2))])


def test_conv2d_transpose_symbolic_batch_from_a_tensor_or_none():
    x = tfc.placeholder(tfc.float64, [None, 3, 4, 3])
    w = RNG.normal(size=(3, 3, 2, 3))
    y = tfc.nn.conv2d_transpose(x, w, [tfc.shape(x)[0], 6, 8, 2], 2)
    z = tfc.nn.conv2d_transpose(x, w, [None, 6, 8, 2], 2)
    assert str(y.type) == str(z.type) == "f64[B,6,8,2]"
    xs = RNG.normal(size=(3, 3, 4, 3))
    with tfc.Session() as sess:
        got = sess.run(y, {x: xs})
    np.testing.assert_allclose(got, transpose_np(xs, w, (3, 6, 8, 2), (2, 2), "SAME"),
                               rtol=1e-12, atol=1e-12)


# ---- depthwise and separable -----------------------------------------------------------

DEPTHWISE_CASES = [  # x shape, filter shape, strides, padding, dilations
    ((2, 6, 5, 3), (3, 3, 3, 1), 1, "SAME", 1),
    ((2, 7, 6, 3), (3, 2, 3, 2), [1, 2, 2, 1], "VALID", 1),
    ((1, 7, 6, 2), (3, 3, 2, 3), 1, "SAME", [2, 2]),
    ((1, 7, 6, 2), (2, 2, 2, 2), 2, "SAME", 1),  # even kernel: more padding after
    ((1, 7, 6, 2), (3, 3, 2, 1), [1, 2, 1, 1], "VALID", 1),  # unequal strides (TF: refused)
    ((1, 9, 8, 2), (2, 2, 2, 1), 2, "SAME", [2, 3]),  # strides with dilations (TF: refused)
]


@pytest.mark.parametrize("xs,ws,strides,padding,dil", DEPTHWISE_CASES)
def test_depthwise_conv2d_matches_per_channel_loops(xs, ws, strides, padding, dil):
    x, w = RNG.normal(size=xs), RNG.normal(size=ws)
    s = (strides, strides) if isinstance(strides, int) else tuple(strides[1:3])
    d = (dil, dil) if isinstance(dil, int) else tuple(dil)
    want = depthwise_np(x, w, s, padding, d)
    for got in run_both(lambda a, b: tfc.nn.depthwise_conv2d(a, b, strides, padding,
                                                             dilations=dil), [x, w]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_depthwise_conv2d_keeps_channels_apart():
    """An inf in one channel stays in that channel's outputs (a block-diagonal conv2d
    would spread NaN = inf * 0 into every channel)."""
    x = np.ones((1, 3, 3, 2))
    x[0, 1, 1, 0] = np.inf
    got = run_both(lambda a, b: tfc.nn.depthwise_conv2d(a, b, 1, "SAME"),
                   [x, np.ones((3, 3, 2, 1))])
    for g in got:
        assert np.isinf(g[..., 0]).all() and (g[..., 1] == [[4, 6, 4], [6, 9, 6], [4, 6, 4]]).all()


def test_depthwise_gradients():
    check_grads(lambda a, b: tfc.nn.depthwise_conv2d(a, b, 2, "SAME"),
                [RNG.normal(size=(1, 3, 3, 2)), RNG.normal(size=(2, 2, 2, 2))])


def test_separable_gradients():
    check_grads(lambda a, b, c: tfc.nn.separable_conv2d(a, b, c, 1, "VALID"),
                [RNG.normal(size=(1, 3, 3, 2)), RNG.normal(size=(2, 2, 2, 1)),
                 RNG.normal(size=(1, 1, 2, 2))])


def test_separable_conv2d_is_depthwise_then_pointwise():
    x, dw = RNG.normal(size=(2, 6, 5, 3)), RNG.normal(size=(3, 3, 3, 2))
    pw = RNG.normal(size=(1, 1, 6, 4))
    want = conv2d_np(depthwise_np(x, dw, (2, 2), "SAME"), pw)
    for got in run_both(lambda a, b, c: tfc.nn.separable_conv2d(a, b, c, [1, 2, 2, 1],
                                                                 "SAME"), [x, dw, pw]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    x = tfc.placeholder(tfc.float32, [None, 8, 8, 3])
    y = tfc.nn.separable_conv2d(x, tfc.zeros([3, 3, 3, 2]), tfc.zeros([1, 1, 6, 5]), 2,
                                "SAME")
    assert str(y.type) == "f32[B,4,4,5]"


# ---- bad input -------------------------------------------------------------------------

def raises_here(fn, match):
    """A TypeMismatch that names this test file (the user's line) and matches."""
    with pytest.raises(TypeMismatch, match=match) as info:
        fn()
    assert info.value.loc is not None and "test_nn_conv.py" in str(info.value.loc)


def test_bad_input_is_a_clear_error_at_the_users_line():
    x4 = tfc.placeholder(tfc.float32, [None, 4, 4, 3])
    raises_here(lambda: tfc.nn.conv1d(tfc.zeros([2, 9, 3]), tfc.zeros([3, 2, 4]), 1),
                "conv1d: input .* has 3 channels but filter .* expects 2")
    raises_here(lambda: tfc.nn.conv1d(tfc.zeros([2, 4, 3]), tfc.zeros([5, 3, 4]), 1),
                "wider than the input")
    raises_here(lambda: tfc.nn.conv2d_transpose(x4, tfc.zeros([3, 3, 2, 5]),
                                                [None, 8, 8, 2], 2),
                "conv2d_transpose: input .* has 3 channels but filter")
    raises_here(lambda: tfc.nn.conv2d_transpose(x4, tfc.zeros([3, 3, 2, 3]),
                                                [None, 8, 8, 4], 2),
                "output_shape has 4 channels but filter .* makes 2")
    raises_here(lambda: tfc.nn.conv2d_transpose(x4, tfc.zeros([3, 3, 2, 3]),
                                                [None, 10, 8, 2], 2),
                r"output_shape \[.*10, 8, 2\] does not fit input .*: .* has height 5, not 4")
    raises_here(lambda: tfc.nn.conv2d_transpose(x4, tfc.zeros([3, 3, 2, 3]), [8, 8, 2], 2),
                "must have 4 entries")
    raises_here(lambda: tfc.nn.depthwise_conv2d(x4, tfc.zeros([3, 3, 2, 1]), 1, "SAME"),
                "depthwise_conv2d: input .* has 3 channels but filter .* expects 2")
    raises_here(lambda: tfc.nn.depthwise_conv2d(x4, tfc.zeros([5, 3, 3, 1]), 1, "VALID"),
                "larger than the input height")
    raises_here(lambda: tfc.nn.separable_conv2d(x4, tfc.zeros([3, 3, 3, 2]),
                                                tfc.zeros([1, 1, 5, 4]), 1, "SAME"),
                "pointwise_filter .* takes 5 channels but depthwise_filter .* makes 6")
    raises_here(lambda: tfc.nn.depthwise_conv2d(x4, tfc.zeros([3, 3, 3, 1]), 1, "FULL"),
                "padding must be 'SAME' or 'VALID'")
    raises_here(lambda: tfc.nn.conv1d(tfc.zeros([2, 9, 3]), tfc.zeros([3, 3, 4]), 1,
                                      data_format="NCW"), "data_format 'NCW' is not supported")
