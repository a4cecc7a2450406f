"""Conv2D and the pools: types with a symbolic batch, names, values against numpy loops."""

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def conv_same_np(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """SAME, stride 1, odd kernel: plain loops over output pixels."""
    kh, kw, _, co = w.shape
    ph, pw = kh // 2, kw // 2
    xp = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    n, h, wd, _ = x.shape
    out = np.zeros((n, h, wd, co))
    for i in range(h):
        for j in range(wd):
            patch = xp[:, i:i + kh, j:j + kw, :]
            out[:, i, j, :] = np.tensordot(patch, w, axes=([1, 2, 3], [0, 1, 2]))
    return out


def test_conv_pool_flatten_stack():
    x = tfc.placeholder(tfc.float32, [None, 8, 8, 2], name="x")
    conv = tfc.layers.Conv2D(5, 3, padding="same", activation="relu")
    pool = tfc.layers.MaxPool2D(2)
    h = conv(x)
    p = pool(h)
    f = tfc.layers.Flatten()(p)
    assert [str(t.type) for t in (h, p, f)] == ["f32[B,8,8,5]", "f32[B,4,4,5]", "f32[B,80]"]
    assert [v.name for v in conv.variables] == ["conv2d/kernel", "conv2d/bias"]
    assert conv.kernel.shape == (3, 3, 2, 5) and pool.name == "max_pooling2d"
    xs = np.random.default_rng(1).normal(size=(3, 8, 8, 2)).astype(np.float32)
    with tfc.Session() as sess:
        hv, pv, w = sess.run([h, p, conv.kernel], {x: xs})
    expected = np.maximum(conv_same_np(xs.astype(np.float64), w.astype(np.float64)), 0)
    np.testing.assert_allclose(hv, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(pv, hv.reshape(3, 4, 2, 4, 2, 5).max(axis=(2, 4)))


def test_valid_strided_conv_and_average_pool():
    x = tfc.placeholder(tfc.float32, [None, 9, 7, 1])
    y = tfc.layers.Conv2D(2, (3, 2), strides=2)(x)
    assert str(y.type) == "f32[B,4,3,2]"
    z = tfc.layers.AveragePooling2D(pool_size=2, strides=1)(y)
    assert str(z.type) == "f32[B,3,2,2]"
    xs = np.random.default_rng(2).normal(size=(2, 9, 7, 1)).astype(np.float32)
    with tfc.Session() as sess:
        yv, zv = sess.run([y, z], {x: xs})
    np.testing.assert_allclose(
        zv, (yv[:, :-1, :-1] + yv[:, 1:, :-1] + yv[:, :-1, 1:] + yv[:, 1:, 1:]) / 4, rtol=1e-5)


def test_conv_errors():
    with pytest.raises(TypeMismatch, match=r"takes NHWC inputs \(rank 4\), got f32\[B,8,8\]"):
        tfc.layers.Conv2D(4, 3)(tfc.placeholder(tfc.float32, [None, 8, 8]))
    with pytest.raises(TypeMismatch, match="channel dim of its input"):
        tfc.layers.Conv2D(4, 3)(tfc.placeholder(tfc.float32, [None, 8, 8, None]))
    with pytest.raises(TypeMismatch, match="padding must be 'valid' or 'same'"):
        tfc.layers.Conv2D(4, 3, padding="full")
    with pytest.raises(TypeMismatch, match="kernel_size must be a positive int"):
        tfc.layers.Conv2D(4, (3, 0))


# ---- conv25: Conv1D, Conv2DTranspose, DepthwiseConv2D, SeparableConv2D -----------------

def correlate_np(x, w, s, pads):
    """Cross-correlation of NHWC ``x`` (zero padded by ``pads`` = (top, bottom, left,
    right)) with HWIO ``w`` at strides ``s``: loops over output pixels."""
    xp = np.pad(x, ((0, 0), pads[:2], pads[2:], (0, 0)))
    kh, kw = w.shape[:2]
    ho, wo = (xp.shape[1] - kh) // s[0] + 1, (xp.shape[2] - kw) // s[1] + 1
    out = np.zeros((x.shape[0], ho, wo, w.shape[3]))
    for i in range(ho):
        for j in range(wo):
            patch = xp[:, i * s[0]:i * s[0] + kh, j * s[1]:j * s[1] + kw, :]
            out[:, i, j, :] = np.tensordot(patch, w, axes=([1, 2, 3], [0, 1, 2]))
    return out


def scatter_np(x, w, out_hw, s, top_left):
    """Transposed convolution by its definition: input pixel (i, j) adds
    ``kernel[a, b] @ x[i, j]`` at (i*s + a - top, j*s + b - left); kernel [kh, kw, out, in]."""
    out = np.zeros((x.shape[0], *out_hw, w.shape[2]))
    for i in range(x.shape[1]):
        for j in range(x.shape[2]):
            for a in range(w.shape[0]):
                for b in range(w.shape[1]):
                    r, c = i * s[0] + a - top_left[0], j * s[1] + b - top_left[1]
                    if 0 <= r < out_hw[0] and 0 <= c < out_hw[1]:
                        out[:, r, c, :] += x[:, i, j, :] @ w[a, b].T
    return out


def run_layer(layer, xs, weights):
    """``layer`` on a placeholder with a symbolic batch, its weights set (f64)."""
    x = tfc.placeholder(tfc.float64, [None, *xs.shape[1:]])
    y = layer(x)
    with tfc.Session() as sess:
        for v, w in zip(layer.variables, weights):
            sess.variables[v.name] = w
        return y, sess.run(y, {x: xs})


def test_conv1d_layer_names_causal_and_same():
    rng = np.random.default_rng(25)
    xs, k, b = rng.normal(size=(2, 7, 3)), rng.normal(size=(3, 3, 4)), rng.normal(size=4)
    layer = tfc.keras.layers.Conv1D(4, 3, padding="causal", dilation_rate=2)
    y, got = run_layer(layer, xs, [k, b])
    assert [v.name for v in layer.variables] == ["conv1d/kernel", "conv1d/bias"]
    assert str(y.type) == "f64[B,7,4]"
    # causal: 4 zero steps on the left; the dilated kernel [k0, 0, k1, 0, k2]
    dil = np.zeros((5, 3, 4))
    dil[::2] = k
    want = correlate_np(xs[:, None], dil[None], (1, 1), (0, 0, 4, 0))[:, 0] + b
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with tfc.Graph().as_default():
        y, got = run_layer(tfc.layers.Conv1D(4, 3, strides=2, padding="same",
                                             activation="relu"), xs, [k, b])
    assert str(y.type) == "f64[B,4,4]"
    want = correlate_np(xs[:, None], k[None], (1, 2), (0, 0, 1, 1))[:, 0] + b
    np.testing.assert_allclose(got, np.maximum(want, 0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("padding,output_padding,hw,top_left", [
    ("same", None, (8, 10), (0, 0)),  # in * stride; TF pads (k - s) = 1: 0 before
    ("valid", None, (9, 11), (0, 0)),  # in * stride + max(k - stride, 0)
    ("same", 1, (8, 10), (0, 0)),  # (in - 1) * s + k - 2 * (k // 2) + 1
])
def test_conv2d_transpose_layer_sizes_and_values(padding, output_padding, hw, top_left):
    rng = np.random.default_rng(26)
    xs, k, b = rng.normal(size=(2, 4, 5, 2)), rng.normal(size=(3, 3, 3, 2)), rng.normal(size=3)
    layer = tfc.keras.layers.Conv2DTranspose(3, 3, strides=2, padding=padding,
                                             output_padding=output_padding)
    y, got = run_layer(layer, xs, [k, b])
    assert [v.name for v in layer.variables] == ["conv2d_transpose/kernel",
                                                 "conv2d_transpose/bias"]
    assert layer.kernel.shape == (3, 3, 3, 2) and str(y.type) == f"f64[B,{hw[0]},{hw[1]},3]"
    np.testing.assert_allclose(got, scatter_np(xs, k, hw, (2, 2), top_left) + b,
                               rtol=1e-12, atol=1e-12)


def test_depthwise_and_separable_layers_match_loops():
    rng = np.random.default_rng(27)
    xs = rng.normal(size=(2, 6, 5, 3))
    dk, db = rng.normal(size=(3, 3, 3, 2)), rng.normal(size=6)
    layer = tfc.keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2)
    y, got = run_layer(layer, xs, [dk, db])
    assert [v.name for v in layer.variables] == ["depthwise_conv2d/kernel",
                                                 "depthwise_conv2d/bias"]
    assert str(y.type) == "f64[B,6,5,6]"
    per_channel = np.concatenate([correlate_np(xs[..., c:c + 1], dk[:, :, c:c + 1], (1, 1),
                                               (1, 1, 1, 1)) for c in range(3)], axis=-1)
    np.testing.assert_allclose(got, per_channel + db, rtol=1e-12, atol=1e-12)
    pk, pb = rng.normal(size=(1, 1, 6, 4)), rng.normal(size=4)
    with tfc.Graph().as_default():
        sep = tfc.layers.SeparableConv2D(4, 3, padding="same", depth_multiplier=2)
        y, got = run_layer(sep, xs, [dk, pk, pb])
    assert [v.name for v in sep.variables] == ["separable_conv2d/depthwise_kernel",
                                               "separable_conv2d/pointwise_kernel",
                                               "separable_conv2d/bias"]
    assert str(y.type) == "f64[B,6,5,4]"
    np.testing.assert_allclose(got, per_channel @ pk[0, 0] + pb, rtol=1e-12, atol=1e-12)


def test_new_conv_layers_gradients_match_finite_differences():
    """Every weight of a DepthwiseConv2D -> Conv2DTranspose -> SeparableConv2D -> Conv1D
    stack gets its gradient (llvm) equal to a central difference (reference backend, f64,
    rel 1e-6) at 2 random elements."""
    L, rng = tfc.keras.layers, np.random.default_rng(28)
    x = tfc.placeholder(tfc.float64, [2, 4, 4, 2])
    layers = [L.DepthwiseConv2D(2, strides=2), L.Conv2DTranspose(2, 3, strides=2,
                                                                 padding="same"),
              L.SeparableConv2D(1, 2), L.Reshape((9, 1)), L.Conv1D(1, 2, padding="causal")]
    h = x
    for layer in layers:
        h = layer(h)
    loss = tfc.reduce_sum(h * rng.uniform(0.5, 1.5, size=(2, 9, 1)))
    variables = [v for layer in layers for v in layer.variables]
    assert len(variables) == 9
    feed = {x: rng.normal(size=(2, 4, 4, 2))}
    with tfc.Session() as sess:
        values = {v.name: rng.normal(size=v.shape) for v in variables}
        sess.variables.update(values)
        grads = sess.run(tfc.gradients(loss, variables), feed)
    with tfc.Session(backend="reference") as ref:
        for v, grad in zip(variables, grads):
            for _ in range(2):
                idx = tuple(rng.integers(0, d) for d in v.shape)
                ends = []
                for sign in (1, -1):
                    moved = values[v.name].copy()
                    moved[idx] += sign * 1e-6
                    ref.variables.update({**values, v.name: moved})
                    ends.append(float(ref.run(loss, feed)))
                assert grad[idx] == pytest.approx((ends[0] - ends[1]) / 2e-6, rel=1e-6,
                                                  abs=1e-9), (v.name, idx)


def test_new_conv_layer_errors():
    with pytest.raises(TypeMismatch, match=r"Conv1D 'conv1d' takes \[batch, steps, "):
        tfc.layers.Conv1D(2, 3)(tfc.placeholder(tfc.float32, [None, 8, 8, 2]))
    with pytest.raises(TypeMismatch, match="output_padding .* below its stride"):
        tfc.layers.Conv2DTranspose(2, 3, strides=2, output_padding=2)
    with pytest.raises(TypeMismatch, match="height of its input .* must be known"):
        tfc.layers.Conv2DTranspose(2, 3)(tfc.placeholder(tfc.float32, [None, None, 4, 2]))
    with pytest.raises(TypeMismatch, match="data_format 'channels_first' is not supported"):
        tfc.layers.DepthwiseConv2D(3, data_format="channels_first")
    with pytest.raises(TypeMismatch, match="depth_multiplier must be positive"):
        tfc.layers.DepthwiseConv2D(3, depth_multiplier=0)
