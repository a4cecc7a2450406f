"""The activation layers against numpy (Keras 3's formulas), their input gradients
against finite differences, and the activations by name."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TfcError, TypeMismatch
from tests.layers.layercheck import (assert_input_gradient_matches_finite_differences,
                                     forward)

L = tfc.keras.layers
# away from the kinks (0, thresholds, max values) so that finite differences are smooth
X = np.array([[-2.3, -0.7, -0.2, 0.15, 0.45, 0.9], [1.7, 2.6, -1.1, 7.2, 0.35, -0.05]])


def relu_np(x: np.ndarray, max_value: float | None = None, slope: float = 0.0,
            threshold: float = 0.0) -> np.ndarray:
    y = np.where(x > threshold, x, slope * (x - threshold))
    return y if max_value is None else np.minimum(y, max_value)


@pytest.mark.parametrize("kwargs", [{}, {"max_value": 1.0}, {"negative_slope": 0.1},
                                    {"threshold": 0.3}, {"max_value": 6.0},
                                    {"max_value": 2.0, "negative_slope": 0.2,
                                     "threshold": 0.5}])
def test_relu_layer_matches_numpy_and_finite_differences(kwargs: dict) -> None:
    got = forward(lambda x, t: L.ReLU(**kwargs)(x), X)
    slope = kwargs.get("negative_slope", 0.0)
    if list(kwargs) == ["negative_slope"]:  # Keras's tf.nn.leaky_relu: a float32 slope
        slope = float(np.float32(slope))
    expected = relu_np(X, kwargs.get("max_value"), slope, kwargs.get("threshold", 0.0))
    np.testing.assert_allclose(got, expected, rtol=1e-15, atol=1e-15)
    assert_input_gradient_matches_finite_differences(lambda x, t: L.ReLU(**kwargs)(x), X)


def test_leaky_relu_elu_softmax_layers_match_numpy() -> None:
    np.testing.assert_allclose(forward(lambda x, t: L.LeakyReLU()(x), X),
                               np.where(X > 0, X, np.float32(0.3) * X), rtol=1e-15)
    np.testing.assert_allclose(forward(lambda x, t: L.LeakyReLU(alpha=0.1)(x), X),
                               np.where(X > 0, X, np.float32(0.1) * X), rtol=1e-15)
    np.testing.assert_allclose(forward(lambda x, t: L.ELU(alpha=0.5)(x), X),
                               np.where(X > 0, X, 0.5 * (np.exp(X) - 1)), rtol=1e-14)
    x3 = X.reshape(2, 2, 3)
    e = np.exp(x3 - x3.max(axis=1, keepdims=True))
    np.testing.assert_allclose(forward(lambda x, t: L.Softmax(axis=1)(x), x3),
                               e / e.sum(axis=1, keepdims=True), rtol=1e-14)
    for make in (lambda x, t: L.ELU(alpha=0.5)(x), lambda x, t: L.LeakyReLU(0.2)(x),
                 lambda x, t: L.Softmax(axis=1)(x)):
        assert_input_gradient_matches_finite_differences(make, x3 if "Softmax" in str(
            make.__code__.co_names) else X)


@pytest.mark.parametrize("name, fn", [
    ("elu", lambda x: np.where(x > 0, x, np.exp(x) - 1)),
    ("softsign", lambda x: x / (1 + np.abs(x))),
    ("relu6", lambda x: np.clip(x, 0, 6)),
    ("leaky_relu", lambda x: np.where(x > 0, x, np.float32(0.2) * x)),
    ("silu", lambda x: x / (1 + np.exp(-x))),
    ("swish", lambda x: x / (1 + np.exp(-x))),
    ("hard_sigmoid", lambda x: np.clip(x + 3, 0, 6) / 6),
    ("log_softmax", lambda x: x - x.max(-1, keepdims=True) - np.log(
        np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))),
    ("selu", lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * (
        np.exp(x) - 1))),
])
def test_activation_layer_by_name(name: str, fn) -> None:
    np.testing.assert_allclose(forward(lambda x, t: L.Activation(name)(x), X), fn(X),
                               rtol=1e-13, atol=1e-15)


def test_activation_by_name_in_dense_and_bad_arguments() -> None:
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.float32, [None, 3])
        assert L.Dense(2, activation="selu")(x).type.shape[1] == 2
        with pytest.raises(TfcError, match="unknown activation 'nope'"):
            L.Activation("nope")
        with pytest.raises(TypeMismatch, match="threshold must be >= 0"):
            L.ReLU(threshold=-1.0)
        with pytest.raises(TypeMismatch, match="axis 2 is out of range"):
            L.Softmax(axis=2)(x)
        with pytest.raises(TypeMismatch, match="takes float inputs"):
            L.ReLU()(tfc.placeholder(tfc.int32, [None, 3]))
