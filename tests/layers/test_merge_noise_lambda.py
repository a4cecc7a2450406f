"""The element-wise merge layers, Lambda, SpatialDropout2D and GaussianNoise: numpy
references, input gradients against finite differences, training-only behaviour and the
errors for bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch
from tests.layers.layercheck import (assert_input_gradient_matches_finite_differences,
                                     forward)

K = tfc.keras
L = tfc.keras.layers
RNG = np.random.default_rng(2)
A, B, C = (RNG.normal(size=(3, 4)) for _ in range(3))


def test_merges_match_numpy() -> None:
    got = forward(lambda xs, t: [L.Subtract()(xs[:2]), L.Multiply()(xs), L.Average()(xs),
                                 L.Maximum()(xs), L.Minimum()(xs[1:])], [A, B, C])
    for g, e in zip(got, [A - B, A * B * C, (A + B + C) / 3, np.maximum(np.maximum(A, B), C),
                          np.minimum(B, C)]):
        np.testing.assert_allclose(g, e, rtol=1e-15)


def test_merge_gradients_match_finite_differences() -> None:
    # each merge of x with a fixed function of x (away from ties for max / min)
    assert_input_gradient_matches_finite_differences(lambda x, t: (
        L.Subtract()([x, x * x]) + L.Multiply()([x, x + 1.0, x]) + L.Average()([x, 2.0 * x])
        + L.Maximum()([x, 0.5 - x]) + L.Minimum()([x, 0.25 * x + 0.1])), A)


def test_merge_errors() -> None:
    with tfc.Graph().as_default():
        a, b = tfc.placeholder(tfc.float32, [None, 4]), tfc.placeholder(tfc.float32, [None, 3])
        with pytest.raises(TypeMismatch, match="takes exactly 2 inputs, got 3"):
            L.Subtract()([a, a, a])
        with pytest.raises(TypeMismatch, match="takes inputs of one type"):
            L.Multiply()([a, b])
        with pytest.raises(TypeMismatch, match="at least 2 inputs"):
            L.Maximum()([a])


def test_lambda_on_a_tensor_and_a_list_in_a_model() -> None:
    got = forward(lambda xs, t: [L.Lambda(lambda v: v * 2.0 + 1.0)(xs[0]),
                                 L.Lambda(lambda vs, k: vs[0] * vs[1] - k,
                                          arguments={"k": 3.0})(xs)], [A, B])
    np.testing.assert_allclose(got[0], A * 2 + 1, rtol=1e-15)
    np.testing.assert_allclose(got[1], A * B - 3, rtol=1e-15)
    # in a Sequential, with a training flag: the training graph differs
    model = K.Sequential([K.Input(shape=(4,), dtype="float64"),
                          L.Lambda(lambda v, training: v * (10.0 if training else 1.0))])
    assert model.uses_training
    np.testing.assert_allclose(model.predict(A), A, rtol=1e-15)
    with pytest.raises(TypeMismatch, match="function must be callable"):
        L.Lambda(3)


def test_spatial_dropout_drops_whole_channels_in_training_only() -> None:
    x = np.ones((64, 3, 4, 8))
    train, infer = forward(lambda v, t: [L.SpatialDropout2D(0.5, seed=3)(v, training=True),
                                         L.SpatialDropout2D(0.5)(v)], x)
    np.testing.assert_array_equal(infer, x)
    # each (example, channel) map is all 0 or all 2
    per_map = train.transpose(0, 3, 1, 2).reshape(64 * 8, -1)
    assert set(np.unique(per_map)) == {0.0, 2.0}
    assert (per_map == per_map[:, :1]).all()
    assert 0.35 < (per_map[:, 0] == 0).mean() < 0.65  # 512 maps: 5 standard deviations


def test_gaussian_noise_statistics_in_training_only() -> None:
    x = np.full((200, 50), 3.0)
    train, infer = forward(lambda v, t: [L.GaussianNoise(0.5)(v, training=True),
                                         L.GaussianNoise(0.5)(v)], x)
    np.testing.assert_array_equal(infer, x)
    noise = (train - x).ravel()  # 10^4 draws: the mean within 4 sd, the sd within 3%
    assert abs(noise.mean()) < 4 * 0.5 / 100
    assert abs(noise.std() / 0.5 - 1) < 0.03
    assert abs((np.abs(noise) < 0.5).mean() - 0.6827) < 0.02  # normal, not uniform
    with pytest.raises(TypeMismatch, match="stddev must be >= 0"):
        L.GaussianNoise(-1.0)
