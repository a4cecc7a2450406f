"""Cross-entropies on probabilities compute Keras's numbers, and Keras 3's
``Sequential([Input(shape), ...])`` builds at once.

Keras (keras/src/backend/tensorflow/nn.py) scales probabilities that do not sum to 1:
``categorical_crossentropy`` is ``-sum(y log clip(p / sum p))`` and
``sparse_categorical_crossentropy`` is the softmax cross-entropy of ``log clip(p)``, i.e.
``-log(clip(p)[label] / sum clip(p))``; clip to ``[1e-7, 1 - 1e-7]``. The expected values
below are those formulas in numpy; ``tools/conformance_keras.py`` checks against Keras.
"""

from __future__ import annotations

import numpy as np
import pytest

import tfc
import tfc.keras
from tfc.errors import ExecutionError, TfcError
from tfc.layers import losses

from tests.layers.gradcheck import assert_model_gradients_match_finite_differences

EPS = 1e-7
# rows that do not sum to 1 (sigmoid outputs, say), one entry under the clip
P = np.array([[0.9, 0.6, 0.2, 0.3], [0.05, 0.8, 0.7, 1e-9], [0.25, 0.25, 0.25, 0.25]])
LABELS = np.array([0, 3, 2])


def run(fn: object, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    with tfc.Graph().as_default():
        out = fn(tfc.constant(y), tfc.constant(p))  # type: ignore[operator]
        with tfc.Session() as s:
            return s.run(out)


def test_categorical_crossentropy_scales_probabilities() -> None:
    onehot = np.eye(4)[LABELS]
    expected = -np.sum(onehot * np.log(np.clip(P / P.sum(-1, keepdims=True), EPS, 1 - EPS)),
                       axis=-1)
    got = run(losses.categorical_crossentropy, onehot, P)
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    # f32 as a model computes it
    got32 = run(losses.categorical_crossentropy, onehot.astype(np.float32),
                P.astype(np.float32))
    np.testing.assert_allclose(got32, expected, rtol=1e-6)


def test_sparse_categorical_crossentropy_scales_probabilities() -> None:
    clipped = np.clip(P, EPS, 1 - EPS)
    expected = -np.log(clipped[np.arange(3), LABELS] / clipped.sum(-1))
    got = run(losses.sparse_categorical_crossentropy, LABELS.astype(np.int32), P)
    np.testing.assert_allclose(got, expected, rtol=1e-13)


def test_probabilities_that_sum_to_one_keep_their_loss() -> None:
    p = np.where(P < EPS, 0.1, P)  # none clipped
    p = p / p.sum(-1, keepdims=True)
    expected = -np.log(p[np.arange(3), LABELS])
    np.testing.assert_allclose(run(losses.sparse_categorical_crossentropy,
                                   LABELS.astype(np.int32), p), expected, rtol=1e-13)
    np.testing.assert_allclose(run(losses.categorical_crossentropy, np.eye(4)[LABELS], p),
                               expected, rtol=1e-13)


def test_a_label_outside_the_classes_is_an_error() -> None:
    with pytest.raises(ExecutionError, match=r"label 4 at index \[1\] is out of range"):
        run(losses.sparse_categorical_crossentropy, np.array([0, 4, 1], np.int32), P)


@pytest.mark.parametrize("loss", ["categorical_crossentropy",
                                  "sparse_categorical_crossentropy"])
def test_gradients_on_probabilities_match_finite_differences(loss: str) -> None:
    """Through the scaling: a sigmoid's outputs reshaped (so no sigmoid op is read as
    logits), in f64."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 3))
    labels = rng.integers(0, 4, size=5)
    y = labels.astype(np.int32) if loss.startswith("sparse") else np.eye(4)[labels]
    with tfc.Graph().as_default():
        model = tfc.Sequential([tfc.layers.Dense(4, activation="sigmoid"),
                                tfc.layers.Flatten()], input_shape=(3,), input_dtype="float64")
        model.build()
        yt = tfc.constant(y)
        value = tfc.reduce_mean(getattr(losses, loss)(yt, model.outputs))
        assert_model_gradients_match_finite_differences(model, value, {model.inputs: x})


def test_sequential_with_a_leading_input_builds_at_once() -> None:
    with tfc.Graph().as_default():
        model = tfc.keras.Sequential([tfc.keras.Input(shape=(3, 2)), tfc.keras.layers.Flatten(),
                                      tfc.keras.layers.Dense(2)])
        assert model.count_params() == 6 * 2 + 2  # known before any data, as Keras
        kernel = np.arange(12, dtype=np.float32).reshape(6, 2) / 10
        model.set_weights([kernel, np.array([1.0, -1.0], np.float32)])
        x = np.ones((4, 3, 2), np.float32)
        np.testing.assert_allclose(model.predict(x), np.ones((4, 6)) @ kernel + [1, -1],
                                   rtol=1e-6)
        assert model.input_shape == (3, 2) and str(model.inputs.type) == "f32[B,3,2]"
    with tfc.Graph().as_default():
        added = tfc.keras.Sequential()
        added.add(tfc.keras.Input(shape=(4,), dtype="float64"))
        added.add(tfc.keras.layers.Dense(1))
        assert added.count_params() == 5 and added.inputs.dtype == tfc.float64
        with pytest.raises(TfcError, match="an Input must come first"):
            tfc.keras.Sequential([tfc.keras.layers.Dense(1), tfc.keras.Input(shape=(4,))])
