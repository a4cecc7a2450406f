"""TF1's functional layers (``tfc.layers.dense`` ... : ``tfc.api.tf1_layers``): TF's
variable names and sharing, their values against numpy, gradients against finite
differences, dropout's ``training`` switch, and batch normalization's moving averages
through the ``UPDATE_OPS`` idiom."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TfcError, TypeMismatch

RNG = np.random.default_rng(11)
X = RNG.normal(size=(5, 4))


def names(variables):
    return [v.name for v in variables]


def var(name):
    return tfc.get_default_graph().variables[name]


def numeric_grad(f, base, eps=1e-6):
    num = np.zeros_like(base)
    for i in np.ndindex(base.shape):
        hi, lo = base.copy(), base.copy()
        hi[i] += eps
        lo[i] -= eps
        num[i] = (f(hi) - f(lo)) / (2 * eps)
    return num


def test_dense_names_sharing_and_values():
    w1, w2 = RNG.normal(size=(4, 3)), RNG.normal(size=(3, 2))
    x = tfc.placeholder(tfc.float64, [None, 4])
    h = tfc.layers.dense(x, 3, activation=tfc.nn.relu, name="hidden",
                         kernel_initializer=tfc.constant_initializer(w1),
                         bias_initializer=tfc.constant_initializer(0.5))
    y = tfc.layers.dense(h, 2, kernel_initializer=tfc.constant_initializer(w2))
    tfc.layers.dense(h, 2, use_bias=False)
    again = tfc.layers.dense(x, 3, activation=tfc.nn.relu, name="hidden", reuse=True)
    with tfc.variable_scope("tower"):
        tfc.layers.dense(x, 1)
    assert names(tfc.trainable_variables()) == [
        "hidden/kernel", "hidden/bias", "dense/kernel", "dense/bias", "dense_1/kernel",
        "tower/dense/kernel", "tower/dense/bias"]
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        got_h, got_y, got_again, k1, b = sess.run(
            [h, y, again, var("dense_1/kernel"), var("dense/bias")], {x: X})
    want_h = np.maximum(X @ w1 + 0.5, 0)
    np.testing.assert_allclose(got_h, want_h, rtol=1e-14)
    np.testing.assert_allclose(got_y, want_h @ w2, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(got_again, got_h)
    assert not b.any()  # bias zeros, kernel Glorot uniform: limit sqrt(6 / (3 + 2))
    assert k1.shape == (3, 2) and np.abs(k1).max() <= np.sqrt(6 / 5) and k1.std() > 0


def test_dense_reuse_rules_and_rank3_inputs():
    x = tfc.placeholder(tfc.float64, [None, 2, 4])
    with pytest.raises(TfcError, match="does not exist"):
        tfc.layers.dense(x, 3, name="fc", reuse=True)
    w = RNG.normal(size=(4, 3))
    y = tfc.layers.dense(x, 3, name="fc", reuse=tfc.AUTO_REUSE,
                         kernel_initializer=tfc.constant_initializer(w))
    tfc.layers.dense(x, 3, name="fc", reuse=tfc.AUTO_REUSE)
    with pytest.raises(TfcError, match="already exists"):
        tfc.layers.dense(x, 3, name="fc")
    assert len(tfc.trainable_variables()) == 2
    x3 = RNG.normal(size=(3, 2, 4))
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        np.testing.assert_allclose(sess.run(y, {x: x3}), x3 @ w, rtol=1e-13)


def test_unsupported_arguments_are_clear_errors():
    x = tfc.placeholder(tfc.float32, [None, 4])
    with pytest.raises(TypeMismatch, match="kernel_regularizer is not supported"):
        tfc.layers.dense(x, 2, kernel_regularizer=lambda w: w)
    with pytest.raises(TypeMismatch, match="training must be a bool"):
        tfc.layers.dropout(x, training=1)
    with pytest.raises(TypeMismatch, match="padding must be"):
        tfc.layers.max_pooling2d(tfc.placeholder(tfc.float32, [None, 4, 4, 1]), 2, 2,
                                 padding="full")
    with pytest.raises(TypeMismatch, match="fused=True"):
        tfc.layers.batch_normalization(x, fused=True)


def test_dense_gradient_matches_finite_differences():
    w = RNG.normal(size=(4, 3))
    x = tfc.placeholder(tfc.float64, [None, 4])
    y = tfc.layers.dense(x, 3, activation=tfc.nn.tanh,
                         kernel_initializer=tfc.constant_initializer(w),
                         bias_initializer=tfc.constant_initializer(0.2))
    loss = tfc.reduce_sum(tfc.square(y))
    kernel, bias = tfc.trainable_variables()
    gx, gk, gb = tfc.gradients(loss, [x, kernel, bias])
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        gx, gk, gb = sess.run([gx, gk, gb], {x: X})

    def f(inputs=X, k=w, b=np.full(3, 0.2)):
        return float((np.tanh(inputs @ k + b) ** 2).sum())
    np.testing.assert_allclose(gx, numeric_grad(lambda v: f(inputs=v), X), rtol=1e-7,
                               atol=1e-8)
    np.testing.assert_allclose(gk, numeric_grad(lambda v: f(k=v), w), rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(gb, numeric_grad(lambda v: f(b=v), np.full(3, 0.2)),
                               rtol=1e-7, atol=1e-8)


def np_conv_same(x, k):
    """NHWC x HWIO, stride 1, 'same' padding (odd kernel)."""
    kh, kw = k.shape[:2]
    p = np.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    out = np.zeros(x.shape[:3] + (k.shape[3],))
    for i in range(x.shape[1]):
        for j in range(x.shape[2]):
            out[:, i, j] = np.einsum("bhwc,hwco->bo", p[:, i:i + kh, j:j + kw], k)
    return out


def test_conv_pool_flatten_match_numpy():
    xs = RNG.normal(size=(2, 4, 4, 2))
    k = RNG.normal(size=(3, 3, 2, 3))
    x = tfc.placeholder(tfc.float64, [None, 4, 4, 2])
    c = tfc.layers.conv2d(x, 3, 3, padding="same", activation=tfc.nn.relu,
                          kernel_initializer=tfc.constant_initializer(k))
    mp = tfc.layers.max_pooling2d(c, 2, 2)
    ap = tfc.layers.average_pooling2d(c, (2, 2), strides=2)
    flat = tfc.layers.flatten(mp)
    assert names(tfc.trainable_variables()) == ["conv2d/kernel", "conv2d/bias"]
    assert tuple(flat.shape[1:]) == (12,)
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        got_c, got_mp, got_ap, got_flat = sess.run([c, mp, ap, flat], {x: xs})
    want_c = np.maximum(np_conv_same(xs, k), 0)
    blocks = want_c.reshape(2, 2, 2, 2, 2, 3)
    np.testing.assert_allclose(got_c, want_c, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got_mp, blocks.max(axis=(2, 4)), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got_ap, blocks.mean(axis=(2, 4)), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(got_flat, got_mp.reshape(2, 12))


def test_dropout_follows_training():
    x = tfc.constant(np.ones((200, 50)))
    off = tfc.layers.dropout(x, 0.3)  # TF's default: training=False
    on = tfc.layers.dropout(x, 0.3, training=np.bool_(True), seed=1)  # (a numpy bool too)
    training = tfc.placeholder(tfc.bool, [])
    fed = tfc.layers.dropout(x, rate=0.3, training=training, seed=2)
    with tfc.Session() as sess:
        got_off, got_on = sess.run([off, on])
        fed_false, fed_true = sess.run(fed, {training: False}), sess.run(fed, {training: True})
    np.testing.assert_array_equal(got_off, 1.0)
    np.testing.assert_array_equal(fed_false, 1.0)
    for got in (got_on, fed_true):
        assert set(np.unique(got)) == {0.0, 1 / 0.7}
        assert abs((got == 0).mean() - 0.3) < 0.02  # 10000 draws: 4.4 sigma


def np_bn(x, gamma, beta, eps=1e-3, axes=(0,)):
    mean = x.mean(axis=axes)
    var = x.var(axis=axes)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta, mean, var


def test_batch_normalization_trains_and_updates_moving_averages():
    batches = [RNG.normal(1.0, 2.0, size=(6, 3)) for _ in range(3)]
    x = tfc.placeholder(tfc.float64, [None, 3])
    training = tfc.placeholder(tfc.bool, [])
    y = tfc.layers.batch_normalization(x, training=training, momentum=0.9,
                                       gamma_initializer=tfc.constant_initializer(1.5))
    assert names(tfc.global_variables()) == [
        "batch_normalization/gamma", "batch_normalization/beta",
        "batch_normalization/moving_mean", "batch_normalization/moving_variance"]
    assert names(tfc.trainable_variables()) == names(tfc.global_variables())[:2]
    update_ops = tfc.get_collection(tfc.GraphKeys.UPDATE_OPS)
    assert len(update_ops) == 2
    with tfc.control_dependencies(update_ops):
        step = tfc.no_op()
    decay = float(np.float32(1 - 0.9))  # TF's: 1 - momentum rounded to float32
    mm, mv = np.zeros(3), np.ones(3)
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        for b in batches:
            got, _ = sess.run([y, step], {x: b, training: True})
            want, mean, variance = np_bn(b, 1.5, 0.0)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
            mm, mv = mm - (mm - mean) * decay, mv - (mv - variance) * decay
        got_mm, got_mv = sess.run([var("batch_normalization/moving_mean"),
                                   var("batch_normalization/moving_variance")])
        np.testing.assert_allclose(got_mm, mm, rtol=1e-13)
        np.testing.assert_allclose(got_mv, mv, rtol=1e-13)
        got, _ = sess.run([y, step], {x: batches[0], training: False})  # inference
        np.testing.assert_allclose(got, (batches[0] - mm) / np.sqrt(mv + 1e-3) * 1.5,
                                   rtol=1e-12)
        np.testing.assert_allclose(sess.run(var("batch_normalization/moving_mean")), mm,
                                   rtol=1e-13)  # fed False: the averages stay


def test_batch_normalization_of_images_keeps_tf_fused_unbiased_moving_variance():
    xs = RNG.normal(size=(4, 3, 3, 2)).astype(np.float32)
    x = tfc.placeholder(tfc.float32, [None, 3, 3, 2])
    y = tfc.layers.batch_normalization(x, training=True)
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        got, _ = sess.run([y, tfc.group(*tfc.get_collection(tfc.GraphKeys.UPDATE_OPS))],
                          {x: xs})
        mv = sess.run(var("batch_normalization/moving_variance"))
    want, _, variance = np_bn(xs.astype(np.float64), 1.0, 0.0, axes=(0, 1, 2))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    decay = np.float32(1) - np.float32(0.99)
    np.testing.assert_allclose(mv, 1 - (1 - variance * 36 / 35) * decay, rtol=1e-6)


def test_batch_normalization_gradient_matches_finite_differences():
    gamma = np.array([0.5, 2.0])
    x = tfc.placeholder(tfc.float64, [None, 2])
    y = tfc.layers.batch_normalization(x, training=True, epsilon=0.01,
                                       gamma_initializer=tfc.constant_initializer(gamma))
    w = RNG.normal(size=(5, 2))
    loss = tfc.reduce_sum(y * w)
    g_var = tfc.trainable_variables()[0]
    gx, gg = tfc.gradients(loss, [x, g_var])
    xs = RNG.normal(size=(5, 2))
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        gx, gg = sess.run([gx, gg], {x: xs})

    def f(inputs=xs, g=gamma):
        return float((np_bn(inputs, g, 0.0, eps=0.01)[0] * w).sum())
    np.testing.assert_allclose(gx, numeric_grad(lambda v: f(inputs=v), xs), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(gg, numeric_grad(lambda v: f(g=v), gamma), rtol=1e-7,
                               atol=1e-8)


# ---- conv25: conv1d, conv2d_transpose, separable_conv2d ----------------------------------

def test_conv1d_transpose_and_separable_names_shapes_and_values():
    """TF's scopes and variable shapes (``conv2d_transpose/kernel`` is [kh, kw, out, in]);
    values against numpy loops: conv1d as a sliding dot product, the transposed conv by
    its scatter definition (SAME, stride 2, kernel 3: TF pads the 8-wide output 0 before),
    separable as per-channel 'same' convolutions then a 1x1 one."""
    x1, k1 = RNG.normal(size=(2, 6, 3)), RNG.normal(size=(2, 3, 4))
    x4 = RNG.normal(size=(2, 3, 4, 2))
    kt, dk, pk = (RNG.normal(size=(3, 3, 5, 2)), RNG.normal(size=(3, 3, 2, 2)),
                  RNG.normal(size=(1, 1, 4, 3)))
    p1 = tfc.placeholder(tfc.float64, [None, 6, 3])
    p4 = tfc.placeholder(tfc.float64, [None, 3, 4, 2])
    init = tfc.constant_initializer
    c1 = tfc.layers.conv1d(p1, 4, 2, kernel_initializer=init(k1), bias_initializer=init(0.5))
    ct = tfc.layers.conv2d_transpose(p4, 5, 3, strides=2, padding="same",
                                     kernel_initializer=init(kt), use_bias=False)
    ct_valid = tfc.layers.conv2d_transpose(p4, 5, (3, 2), strides=(2, 1))
    sep = tfc.layers.separable_conv2d(p4, 3, 3, padding="same", depth_multiplier=2,
                                      depthwise_initializer=init(dk),
                                      pointwise_initializer=init(pk), activation=tfc.nn.relu)
    assert names(tfc.trainable_variables()) == [
        "conv1d/kernel", "conv1d/bias", "conv2d_transpose/kernel",
        "conv2d_transpose_1/kernel", "conv2d_transpose_1/bias",
        "separable_conv2d/depthwise_kernel", "separable_conv2d/pointwise_kernel",
        "separable_conv2d/bias"]
    assert var("conv2d_transpose_1/kernel").shape == (3, 2, 5, 2)
    assert [str(t.type) for t in (c1, ct, ct_valid, sep)] == [
        "f64[B,5,4]", "f64[B,6,8,5]", "f64[B,7,5,5]", "f64[B,3,4,3]"]
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        got1, gott, gots = sess.run([c1, ct, sep], {p1: x1, p4: x4})
    want1 = np.stack([np.einsum("bkc,kco->bo", x1[:, i:i + 2], k1) for i in range(5)], 1)
    np.testing.assert_allclose(got1, want1 + 0.5, rtol=1e-12, atol=1e-14)
    wantt = np.zeros((2, 7, 9, 5))  # one extra row/column past the end, cropped below
    for i in range(3):
        for j in range(4):
            wantt[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3] += np.einsum("bc,hwoc->bhwo",
                                                                    x4[:, i, j], kt)
    np.testing.assert_allclose(gott, wantt[:, :6, :8], rtol=1e-12, atol=1e-14)
    depth = np.concatenate([np_conv_same(x4[..., c:c + 1], dk[:, :, c:c + 1])
                            for c in range(2)], axis=-1)
    np.testing.assert_allclose(gots, np.maximum(depth @ pk[0, 0], 0), rtol=1e-12, atol=1e-14)


def test_conv2d_transpose_layer_trains_and_refuses_bad_input():
    xs = RNG.normal(size=(1, 2, 2, 1))
    x = tfc.placeholder(tfc.float64, [None, 2, 2, 1])
    y = tfc.layers.conv2d_transpose(x, 1, 2, strides=2, name="up")
    kernel, bias = var("up/kernel"), var("up/bias")
    loss = tfc.reduce_sum(y * y)
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        k0 = sess.run(kernel)
        gk, gb = sess.run(tfc.gradients(loss, [kernel, bias]), {x: xs})

        def f(**kw):
            k, b = kw.get("k", k0), kw.get("b", np.zeros(1))
            return float(np.sum((np.kron(xs[0, :, :, 0], k[:, :, 0, 0]) + b) ** 2))
    np.testing.assert_allclose(gk, numeric_grad(lambda v: f(k=v), k0), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(gb, numeric_grad(lambda v: f(b=v), np.zeros(1)), rtol=1e-7)
    with pytest.raises(TypeMismatch, match="conv2d_transpose: inputs must be NHWC"):
        tfc.layers.conv2d_transpose(tfc.placeholder(tfc.float32, [None, 4, 4]), 2, 3)
    with pytest.raises(TypeMismatch, match="height and width must be static"):
        tfc.layers.conv2d_transpose(tfc.placeholder(tfc.float32, [None, None, 4, 2]), 2, 3)
    with pytest.raises(TypeMismatch, match="separable_conv2d: pointwise_regularizer is not"):
        tfc.layers.separable_conv2d(tfc.placeholder(tfc.float32, [None, 4, 4, 2]), 2, 3,
                                    pointwise_regularizer=lambda w: w)
    with pytest.raises(TypeMismatch, match="conv1d: only data_format='channels_last'"):
        tfc.layers.conv1d(tfc.placeholder(tfc.float32, [None, 4, 2]), 2, 3,
                          data_format="channels_first")
