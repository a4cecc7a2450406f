"""Loss reductions and per-example weights, as Keras 3's ``Loss.__call__`` /
``reduce_weighted_values``: ``sum(w * l) / count`` (``sum_over_batch_size``),
``sum(w * l)`` (``sum``), ``sum(w * l) / sum(w)`` (``mean_with_sample_weight``), the
values themselves (``none``); ``fit`` / ``evaluate``'s ``sample_weight``. Numbers from
numpy; ``tools/conformance_keras.py`` compares with Keras."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
import tfc.keras
from tfc.errors import FeedError, TfcError

K = tfc.keras
RNG = np.random.default_rng(2)
X = RNG.normal(size=(10, 4)).astype(np.float32)
Y = RNG.normal(size=(10, 2)).astype(np.float32)
SW = RNG.uniform(0, 2, size=10).astype(np.float32)
W = RNG.normal(size=(4, 2)).astype(np.float32)


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def per_example(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    return ((p - y) ** 2).mean(-1)


@pytest.mark.parametrize("reduction, expect", [
    ("sum_over_batch_size", lambda v, w: (v * w).sum() / v.size),
    ("mean", lambda v, w: (v * w).sum() / v.size),
    ("sum", lambda v, w: (v * w).sum()),
    ("mean_with_sample_weight", lambda v, w: (v * w).sum() / w.sum()),
    ("none", lambda v, w: v * w),
    (None, lambda v, w: v * w),
])
def test_loss_object_reductions(reduction: object, expect: object) -> None:
    p = X[:, :2]
    loss = K.losses.MeanSquaredError(reduction=reduction)
    v = per_example(p, Y)
    with tfc.Session() as s:
        weighted, plain = s.run([loss(Y, p, sample_weight=SW), loss(Y, p)])
        col = s.run(loss(Y, p, sample_weight=SW[:, None]))  # [N, 1] weights: squeezed
    np.testing.assert_allclose(weighted, expect(v, SW), rtol=1e-6)  # type: ignore[operator]
    np.testing.assert_allclose(col, weighted, rtol=1e-6)
    np.testing.assert_allclose(plain, expect(v, np.ones_like(SW)), rtol=1e-6)  # type: ignore


def test_zero_weights_give_zero_not_nan() -> None:
    loss = K.losses.MeanSquaredError(reduction="mean_with_sample_weight")
    with tfc.Session() as s:
        assert s.run(loss(Y, X[:, :2], sample_weight=np.zeros(10, np.float32))) == 0.0


def test_bad_reduction_and_weights() -> None:
    with pytest.raises(TfcError, match="unknown reduction 'avg'"):
        K.losses.MeanSquaredError(reduction="avg")
    with pytest.raises(TfcError, match="sample weights"):
        K.losses.MeanSquaredError()(Y, X[:, :2], sample_weight=np.ones((10, 3), np.float32))


def model(loss: object, opt: object = None) -> object:
    inp = K.Input(shape=(4,))
    m = K.Model(inp, K.layers.Dense(2, use_bias=False)(inp))
    m.set_weights([W])
    m.compile(opt or K.optimizers.SGD(0.1), loss)
    return m


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum"])
def test_fit_and_evaluate_weight_each_example(reduction: str) -> None:
    """One SGD step on sum(w * l) (over the batch size): the weights and History's loss;
    evaluate's weighted loss."""
    m = model(K.losses.MeanSquaredError(reduction=reduction))
    scale = 1.0 / len(X) if reduction == "sum_over_batch_size" else 1.0
    p = X @ W
    v = per_example(p, Y)
    np.testing.assert_allclose(m.evaluate(X, Y, sample_weight=SW)["loss"],
                               (v * SW).sum() * scale, rtol=1e-5)
    hist = m.fit(X, Y, batch_size=len(X), shuffle=False, verbose=0, sample_weight=SW)
    np.testing.assert_allclose(hist["loss"][0], (v * SW).sum() * scale, rtol=1e-5)
    d = 2 * (p - Y) / Y.shape[1] * (SW * scale)[:, None]
    np.testing.assert_allclose(m.get_weights()[0], W - np.float32(0.1) * (X.T @ d),
                               rtol=1e-5, atol=1e-6)


def test_unit_weights_train_as_no_weights_with_shared_state() -> None:
    """Weights of one give the unweighted run, through Adam's slots and the learning
    rate the unweighted step shares; Sequential too; metrics stay unweighted."""
    a = model("mse", K.optimizers.Adam(0.05))
    a.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    a.fit(X, Y, batch_size=4, epochs=1, shuffle=False, verbose=0,
          sample_weight=np.ones(10, np.float32))
    with tfc.Graph().as_default():
        b = model("mse", K.optimizers.Adam(0.05))
        b.fit(X, Y, batch_size=4, epochs=3, shuffle=False, verbose=0)
        np.testing.assert_allclose(a.get_weights()[0], b.get_weights()[0], rtol=1e-6)
    s = K.Sequential([K.Input(shape=(4,)), K.layers.Dense(2, use_bias=False)])
    s.set_weights([W])
    s.compile(K.optimizers.SGD(0.1), "mse", metrics=["mae"])
    got = s.evaluate(X, Y, sample_weight=SW)
    p = X @ W
    np.testing.assert_allclose(got["loss"], (per_example(p, Y) * SW).mean(), rtol=1e-5)
    np.testing.assert_allclose(got["mae"], np.abs(p - Y).mean(), rtol=1e-5)


def test_validation_data_with_weights() -> None:
    m = model("mse")
    hist = m.fit(X, Y, epochs=1, verbose=0, validation_data=(X, Y, SW))
    with tfc.Graph().as_default():
        ref = model("mse")
        ref.fit(X, Y, epochs=1, verbose=0)
        np.testing.assert_allclose(hist["val_loss"][0],
                                   ref.evaluate(X, Y, sample_weight=SW)["loss"], rtol=1e-6)


def test_bad_sample_weights_and_unreduced_losses_in_compile() -> None:
    m = model("mse")
    with pytest.raises(FeedError, match="sample_weight must be 10 numbers"):
        m.fit(X, Y, sample_weight=np.ones(9), verbose=0)
    with pytest.raises(FeedError, match="non-finite"):
        m.evaluate(X, Y, sample_weight=np.full(10, np.nan))
    ds = tfc.data.Dataset.from_tensor_slices((X, Y)).batch(5)
    with pytest.raises(TfcError, match="not a Dataset"):
        m.fit(ds, sample_weight=SW, verbose=0)
    bad = model(K.losses.MeanSquaredError(reduction=None))
    with pytest.raises(TfcError, match="reduction=None, one value per example"):
        bad.fit(X, Y, verbose=0)


def test_weighted_step_reads_the_models_learning_rate() -> None:
    """model.learning_rate (one variable) drives the weighted step too: set to 0, a
    weighted fit leaves the weights as they were."""
    m = model("mse")
    m.fit(X, Y, epochs=1, verbose=0)
    before = m.get_weights()[0]
    m.learning_rate = 0.0
    m.fit(X, Y, epochs=1, verbose=0, sample_weight=SW)
    np.testing.assert_array_equal(m.get_weights()[0], before)


def test_train_test_predict_on_batch() -> None:
    """train_on_batch is one fit step on the whole batch (Keras 3: this batch's loss, or
    [loss, *metrics], or a dict); test_on_batch is evaluate's; predict_on_batch predict's."""
    m = model("mse")
    m.compile(K.optimizers.SGD(0.1), "mse", metrics=["mae"])
    p = X @ W
    before = m.test_on_batch(X, Y, sample_weight=SW, return_dict=True)
    np.testing.assert_allclose(before["loss"], (per_example(p, Y) * SW).mean(), rtol=1e-5)
    np.testing.assert_allclose(before["mae"], np.abs(p - Y).mean(), rtol=1e-5)
    np.testing.assert_allclose(m.predict_on_batch(X), p, rtol=1e-5, atol=1e-6)
    loss, mae = m.train_on_batch(X, Y, sample_weight=SW)
    assert (loss, mae) == pytest.approx((before["loss"], before["mae"]), rel=1e-6)
    with tfc.Graph().as_default():
        ref = model("mse")
        ref.fit(X, Y, batch_size=len(X), shuffle=False, verbose=0, sample_weight=SW)
        np.testing.assert_allclose(m.get_weights()[0], ref.get_weights()[0], rtol=1e-6)
    single = model("mse")
    assert isinstance(single.train_on_batch(X, Y), float)
    with pytest.raises(FeedError, match="no examples"):
        single.train_on_batch(X[:0], Y[:0])
