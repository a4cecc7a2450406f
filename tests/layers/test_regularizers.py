"""Weight and activity regularizers (Keras 3's): the penalties against numpy, ``losses``,
and the loss ``fit`` / ``evaluate`` minimize and report (Keras 3's ``compute_loss``: the
compiled loss plus every penalty), one SGD step by hand, gradients against finite
differences. ``tools/conformance_keras.py`` compares the same models with Keras."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
import tfc.keras
from tfc.errors import TfcError
from tests.layers.gradcheck import assert_model_gradients_match_finite_differences

K = tfc.keras
RNG = np.random.default_rng(0)
X = RNG.normal(size=(6, 4)).astype(np.float32)
Y = RNG.normal(size=(6, 3)).astype(np.float32)
W = RNG.normal(size=(4, 3)).astype(np.float32)
B = RNG.normal(size=3).astype(np.float32)


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def run(t: object) -> np.ndarray:
    with tfc.Session() as s:
        return s.run(t)


def test_penalties_against_numpy() -> None:
    w = tfc.constant(W)
    np.testing.assert_allclose(run(K.regularizers.L1(0.3)(w)), 0.3 * np.abs(W).sum(),
                               rtol=1e-6)
    np.testing.assert_allclose(run(K.regularizers.L2(0.2)(w)), 0.2 * (W ** 2).sum(),
                               rtol=1e-6)
    np.testing.assert_allclose(run(K.regularizers.L1L2(0.1, 0.4)(w)),
                               0.1 * np.abs(W).sum() + 0.4 * (W ** 2).sum(), rtol=1e-6)
    assert run(K.regularizers.L1L2()(w)) == 0.0
    np.testing.assert_allclose(run(K.regularizers.get("l2")(w)), 0.01 * (W ** 2).sum(),
                               rtol=1e-6)
    np.testing.assert_allclose(run(K.regularizers.get("l1")(w)), 0.01 * np.abs(W).sum(),
                               rtol=1e-6)


def test_bad_regularizer_names_and_factors() -> None:
    with pytest.raises(TfcError, match="unknown regularizer 'l3'"):
        K.layers.Dense(2, kernel_regularizer="l3")
    with pytest.raises(TfcError, match="must be a finite number >= 0"):
        K.regularizers.L2(-1.0)


def model(activity: object = None, dropout: bool = False, dtype: str = "float32") -> object:
    inp = K.Input(shape=(4,), dtype=dtype)
    h = K.layers.Dropout(0.5, seed=1)(inp) if dropout else inp
    out = K.layers.Dense(3, kernel_regularizer=K.regularizers.L2(0.1),
                         bias_regularizer=K.regularizers.L1(0.05),
                         activity_regularizer=activity)(h)
    m = K.Model(inp, out)
    m.set_weights([W.astype(dtype), B.astype(dtype)])
    return m


def test_model_losses_and_evaluate_add_the_penalties() -> None:
    m = model(activity=K.regularizers.L1(0.02))
    pred = X @ W + B
    kernel, bias = 0.1 * (W ** 2).sum(), 0.05 * np.abs(B).sum()
    activity = 0.02 * np.abs(pred).sum() / len(X)  # over the batch size, as Keras 3
    losses = m.session.run(m.losses, {m.input: X})
    np.testing.assert_allclose(losses, [activity, kernel, bias], rtol=1e-5)
    m.compile(K.optimizers.SGD(0.1), "mse")
    mse = ((pred - Y) ** 2).mean()
    got = m.evaluate(X, Y, batch_size=len(X))["loss"]
    np.testing.assert_allclose(got, mse + activity + kernel + bias, rtol=1e-5)


def test_one_sgd_step_by_hand() -> None:
    """fit's step descends mse + 0.1 |W|^2 + 0.05 |b|_1, and reports that loss."""
    m = model()
    m.compile(K.optimizers.SGD(0.1), "mse")
    hist = m.fit(X, Y, batch_size=len(X), epochs=1, shuffle=False, verbose=0)
    pred = X @ W + B
    d = 2 * (pred - Y) / pred.size
    w_new = W - np.float32(0.1) * (X.T @ d + 0.2 * W)
    b_new = B - np.float32(0.1) * (d.sum(0) + 0.05 * np.sign(B))
    np.testing.assert_allclose(hist["loss"][0], ((pred - Y) ** 2).mean()
                               + 0.1 * (W ** 2).sum() + 0.05 * np.abs(B).sum(), rtol=1e-5)
    got = m.get_weights()
    np.testing.assert_allclose(got[0], w_new, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], b_new, rtol=1e-5, atol=1e-6)


def test_activity_penalty_of_the_training_graph() -> None:
    """With dropout, fit's loss takes the activity penalty of the training graph's outputs
    (dropped), evaluate's the inference graph's."""
    m = model(activity=K.regularizers.L2(1.0), dropout=True)
    m.compile(K.optimizers.SGD(0.0), "mse")
    tr = m._require_training()
    train_loss, eval_loss = m.session.run([tr.loss, tr.eval_loss], m._feed_dict([X], [Y]))
    pred = X @ W + B
    weights = 0.1 * (W ** 2).sum() + 0.05 * np.abs(B).sum()
    np.testing.assert_allclose(eval_loss, ((pred - Y) ** 2).mean() + weights
                               + (pred ** 2).sum() / len(X), rtol=1e-5)
    assert abs(train_loss - eval_loss) > 1e-3  # the dropped outputs' penalty differs


def test_gradients_with_penalties_match_finite_differences() -> None:
    m = model(activity=K.regularizers.L1L2(0.01, 0.03), dtype="float64")
    m.compile(K.optimizers.SGD(0.1), "mse")
    tr = m._require_training()
    assert_model_gradients_match_finite_differences(
        m, tr.loss, m._feed_dict([X.astype(np.float64)], [Y.astype(np.float64)]))


def test_recurrent_and_conv_layers_take_regularizers() -> None:
    x = tfc.placeholder(tfc.float32, [None, 5, 3])
    lstm = K.layers.LSTM(2, kernel_regularizer="l2", recurrent_regularizer="l1",
                         bias_regularizer=K.regularizers.L2(0.5))
    lstm(x)
    conv = K.layers.Conv2D(2, 3, kernel_regularizer="l1", bias_regularizer="l2")
    conv(tfc.placeholder(tfc.float32, [None, 5, 5, 1]))
    with tfc.Session() as s:
        k, r, b, ck, cb = s.run([lstm.kernel, lstm.recurrent_kernel, lstm.bias, conv.kernel,
                                 conv.bias])
        got = s.run(lstm.losses + conv.losses)
    np.testing.assert_allclose(got, [0.01 * (k ** 2).sum(), 0.01 * np.abs(r).sum(),
                                     0.5 * (b ** 2).sum(), 0.01 * np.abs(ck).sum(),
                                     0.01 * (cb ** 2).sum()], rtol=1e-5)


def test_a_custom_layers_add_loss_counts_in_its_own_graph() -> None:
    """A custom layer's ``self.add_loss`` in ``call`` (Keras's): fit's loss takes the
    training call's, evaluate's the inference call's, each once."""
    class Penalized(K.layers.Layer):
        def call(self, x):
            self.add_loss(0.5 * tfc.reduce_mean(tfc.square(x)))
            return x

    inp = K.Input(shape=(4,))
    h = K.layers.Dropout(0.5, seed=2)(inp)
    out = K.layers.Dense(3, use_bias=False)(Penalized()(h))
    m = K.Model(inp, out)
    m.set_weights([W])
    m.compile(K.optimizers.SGD(0.0), "mse")
    tr = m._require_training()
    feeds = m._feed_dict([X], [Y])
    train_loss, eval_loss = m.session.run([tr.loss, tr.eval_loss], feeds)
    np.testing.assert_allclose(eval_loss, ((X @ W - Y) ** 2).mean() + 0.5 * (X ** 2).mean(),
                               rtol=1e-5)
    assert len(m.losses) == 1 and abs(train_loss - eval_loss) > 1e-3
