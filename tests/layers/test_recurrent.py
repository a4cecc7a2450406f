"""LSTM against a numpy LSTM with the same weights; its gradient against finite differences."""

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch
from tests.layers.gradcheck import assert_model_gradients_match_finite_differences


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-z))


def lstm_np(x: np.ndarray, kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray
            ) -> np.ndarray:
    """Keras's LSTM (gates i, f, g, o in the kernels' columns): every h, ``[B, T, U]``."""
    return lstm_state_np(x, kernel, recurrent, bias)[0]


def lstm_state_np(x: np.ndarray, kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Every h (``[B, T, U]``) and the last c (``[B, U]``)."""
    b, t, _ = x.shape
    u = recurrent.shape[0]
    h, c = np.zeros((b, u)), np.zeros((b, u))
    hs = []
    for s in range(t):
        z = x[:, s] @ kernel + h @ recurrent + bias
        i, f, g, o = sigmoid(z[:, :u]), sigmoid(z[:, u:2 * u]), np.tanh(z[:, 2 * u:3 * u]), \
            sigmoid(z[:, 3 * u:])
        c = f * c + i * g
        h = o * np.tanh(c)
        hs.append(h)
    return np.stack(hs, axis=1), c


def test_lstm_matches_numpy():
    x = tfc.placeholder(tfc.float32, [None, 6, 3], name="x")
    lstm = tfc.layers.LSTM(5, return_sequences=True)
    seq = lstm(x)
    last = tfc.layers.LSTM(4)(seq)
    assert str(seq.type) == "f32[B,6,5]" and str(last.type) == "f32[B,4]"
    assert [v.name for v in lstm.variables] == ["lstm/kernel", "lstm/recurrent_kernel",
                                                "lstm/bias"]
    assert [v.shape for v in lstm.variables] == [(3, 20), (5, 20), (20,)]
    xs = np.random.default_rng(0).normal(size=(2, 6, 3)).astype(np.float32)
    with tfc.Session() as sess:
        got, k, r, b = sess.run([seq, *lstm.variables], {x: xs})
    np.testing.assert_array_equal(b, np.r_[np.zeros(5), np.ones(5), np.zeros(10)])
    expected = lstm_np(xs.astype(np.float64), k, r, b)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_lstm_last_output_and_weights_set_from_numpy():
    rng = np.random.default_rng(1)
    model = tfc.Sequential([tfc.layers.LSTM(3, input_shape=(4, 2))])
    model.build()
    weights = [rng.normal(size=w.shape) * 0.5 for w in model.get_weights()]
    model.set_weights(weights)
    xs = rng.normal(size=(5, 4, 2)).astype(np.float32)
    np.testing.assert_allclose(model.predict(xs), lstm_np(xs, *weights)[:, -1], rtol=1e-5,
                               atol=1e-6)


def test_lstm_gradient_matches_finite_differences():
    x = tfc.placeholder(tfc.float64, [None, 3, 2], name="x")
    lstm = tfc.layers.LSTM(2)
    assert lstm(x).dtype == tfc.float64
    xs = np.random.default_rng(2).normal(size=(2, 3, 2))
    c = np.random.default_rng(3).uniform(0.5, 1.5, size=(2, 2))

    def loss_np(ws: list[np.ndarray]) -> float:
        return float((lstm_np(xs, *ws)[:, -1] * c).sum())

    loss = tfc.reduce_sum(lstm(x) * c)
    grads = tfc.gradients(loss, lstm.variables)
    with tfc.Session() as sess:
        weights = sess.run(lstm.variables)
        got = sess.run(grads, {x: xs})
    eps = 1e-6
    for i, w in enumerate(weights):
        numeric = np.zeros_like(w)
        for idx in np.ndindex(w.shape):
            plus = [v.copy() for v in weights]
            minus = [v.copy() for v in weights]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            numeric[idx] = (loss_np(plus) - loss_np(minus)) / (2 * eps)
        np.testing.assert_allclose(got[i], numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("sequences", [False, True])
def test_lstm_return_state(sequences):
    """Keras's ``[output, h, c]``: the output as without ``return_state``, the last ``h``
    and ``c``; usable as a Functional model's outputs and as the next layers' inputs, and
    its gradient through ``c`` (f64) against finite differences."""
    rng = np.random.default_rng(4)
    inp = tfc.keras.Input(shape=(5, 3), dtype="float64")
    lstm = tfc.keras.layers.LSTM(4, return_sequences=sequences, return_state=True)
    out, h, c = lstm(inp)
    assert str(out.type) == ("f64[B,5,4]" if sequences else "f64[B,4]")
    assert str(h.type) == str(c.type) == "f64[B,4]"
    head = tfc.keras.layers.Dense(2)(tfc.keras.layers.Concatenate()([h, c]))
    model = tfc.keras.Model(inp, [out, h, c, head])
    weights = [rng.normal(size=w.shape) * 0.5 for w in model.get_weights()]
    model.set_weights(weights)
    xs = rng.normal(size=(6, 5, 3))
    got_out, got_h, got_c, _ = model.predict(xs)
    hs, c_last = lstm_state_np(xs, *weights[:3])
    np.testing.assert_allclose(got_out, hs if sequences else hs[:, -1], rtol=1e-12)
    np.testing.assert_allclose(got_h, hs[:, -1], rtol=1e-12)
    np.testing.assert_allclose(got_c, c_last, rtol=1e-12)
    trained = tfc.keras.Model(inp, head)
    trained.compile("sgd", "mse")
    tr = trained._require_training()
    feeds = trained._feed_dict(trained._prepare_x(xs),
                               trained._prepare_y(rng.normal(size=(6, 2))))
    assert_model_gradients_match_finite_differences(trained, tr.loss, feeds)


def test_lstm_errors():
    with pytest.raises(TypeMismatch, match=r"takes \[batch, time, features\] inputs"):
        tfc.layers.LSTM(3)(tfc.placeholder(tfc.float32, [None, 4]))
    with pytest.raises(TypeMismatch, match="units must be positive"):
        tfc.layers.LSTM(0)


def gru_np(x: np.ndarray, kernel: np.ndarray, recurrent: np.ndarray,
           bias: np.ndarray | None, reset_after: bool) -> np.ndarray:
    """Keras's GRU (gates z, r, h~ in the kernels' columns): every h, ``[B, T, U]``."""
    b, t, _ = x.shape
    u = recurrent.shape[0]
    b_in = np.zeros(3 * u) if bias is None else bias[0] if reset_after else bias
    b_rec = np.zeros(3 * u) if bias is None or not reset_after else bias[1]
    h = np.zeros((b, u))
    hs = []
    for s in range(t):
        xw = x[:, s] @ kernel + b_in
        if reset_after:
            inner = h @ recurrent + b_rec
            z = sigmoid(xw[:, :u] + inner[:, :u])
            r = sigmoid(xw[:, u:2 * u] + inner[:, u:2 * u])
            hh = np.tanh(xw[:, 2 * u:] + r * inner[:, 2 * u:])
        else:
            z = sigmoid(xw[:, :u] + h @ recurrent[:, :u])
            r = sigmoid(xw[:, u:2 * u] + h @ recurrent[:, u:2 * u])
            hh = np.tanh(xw[:, 2 * u:] + (r * h) @ recurrent[:, 2 * u:])
        h = z * h + (1 - z) * hh
        hs.append(h)
    return np.stack(hs, axis=1)


@pytest.mark.parametrize("reset_after, use_bias", [(True, True), (False, True), (True, False)])
def test_gru_matches_numpy_and_returns_its_state(reset_after, use_bias):
    rng = np.random.default_rng(5)
    inp = tfc.keras.Input(shape=(5, 3), dtype="float64")
    gru = tfc.keras.layers.GRU(4, return_sequences=True, return_state=True,
                               reset_after=reset_after, use_bias=use_bias)
    seq, h = gru(inp)
    assert str(seq.type) == "f64[B,5,4]" and str(h.type) == "f64[B,4]"
    assert [v.name for v in gru.variables] == ["gru/kernel", "gru/recurrent_kernel",
                                               "gru/bias"][:3 if use_bias else 2]
    bias_shape = [(2, 12) if reset_after else (12,)] if use_bias else []
    assert [v.shape for v in gru.variables] == [(3, 12), (4, 12), *bias_shape]
    last = tfc.keras.layers.GRU(2, reset_after=reset_after, use_bias=use_bias)(seq)
    model = tfc.keras.Model(inp, [seq, h, last])
    weights = [rng.normal(size=w.shape) * 0.5 for w in model.get_weights()]
    model.set_weights(weights)
    xs = rng.normal(size=(6, 5, 3))
    got_seq, got_h, got_last = model.predict(xs)
    n = 3 if use_bias else 2
    first, second = weights[:n], weights[n:]
    want = gru_np(xs, *first[:2], first[2] if use_bias else None, reset_after)
    np.testing.assert_allclose(got_seq, want, rtol=1e-12)
    np.testing.assert_allclose(got_h, want[:, -1], rtol=1e-12)
    np.testing.assert_allclose(
        got_last, gru_np(want, *second[:2], second[2] if use_bias else None,
                         reset_after)[:, -1], rtol=1e-12)


@pytest.mark.parametrize("reset_after", [True, False])
def test_gru_gradient_matches_finite_differences(reset_after):
    rng = np.random.default_rng(6)
    inp = tfc.keras.Input(shape=(4, 2), dtype="float64")
    out = tfc.keras.layers.Dense(2)(tfc.keras.layers.GRU(3, reset_after=reset_after)(inp))
    model = tfc.keras.Model(inp, out)
    model.set_weights([rng.normal(size=w.shape) * 0.5 for w in model.get_weights()])
    model.compile("sgd", "mse")
    tr = model._require_training()
    feeds = model._feed_dict(model._prepare_x(rng.normal(size=(3, 4, 2))),
                             model._prepare_y(rng.normal(size=(3, 2))))
    assert_model_gradients_match_finite_differences(model, tr.loss, feeds)


def test_gru_errors():
    with pytest.raises(TypeMismatch, match=r"takes \[batch, time, features\] inputs"):
        tfc.layers.GRU(3)(tfc.placeholder(tfc.float32, [None, 4]))
    with pytest.raises(TypeMismatch, match="units must be positive"):
        tfc.layers.GRU(0)


# ---- dropout and recurrent_dropout (Keras 3's masks) -----------------------------------------

def masked_lstm_np(x, kernel, recurrent, bias, xm, hm):
    """Keras 3's LSTMCell with dropout masks: ``xm`` one input mask for all gates or one
    per gate, ``hm`` one state mask per gate (or None); every h."""
    b, t, _ = x.shape
    u = recurrent.shape[0]
    h, c = np.zeros((b, u)), np.zeros((b, u))
    hs = []
    xm = xm * 4 if len(xm) == 1 else xm
    for s in range(t):
        z = np.concatenate([(x[:, s] * xm[g]) @ kernel[:, g * u:(g + 1) * u]
                            + (h * (hm[g] if hm else 1)) @ recurrent[:, g * u:(g + 1) * u]
                            for g in range(4)], axis=1) + bias
        i, f, g_, o = sigmoid(z[:, :u]), sigmoid(z[:, u:2 * u]), np.tanh(z[:, 2 * u:3 * u]), \
            sigmoid(z[:, 3 * u:])
        c = f * c + i * g_
        h = o * np.tanh(c)
        hs.append(h)
    return np.stack(hs, axis=1)


def masked_gru_np(x, kernel, recurrent, bias, reset_after, xm, hm):
    """Keras 3's GRUCell (implementation 1) with per-gate masks; h carried unmasked."""
    b, t, _ = x.shape
    u = recurrent.shape[0]
    b_in, b_rec = (bias[0], bias[1]) if reset_after else (bias, np.zeros(3 * u))
    h = np.zeros((b, u))
    hs = []
    for s in range(t):
        xg = [(x[:, s] * xm[g]) @ kernel[:, g * u:(g + 1) * u] + b_in[g * u:(g + 1) * u]
              for g in range(3)]
        hg = [h * hm[g] for g in range(3)]
        rz = hg[0] @ recurrent[:, :u] + b_rec[:u]
        rr = hg[1] @ recurrent[:, u:2 * u] + b_rec[u:2 * u]
        z, r = sigmoid(xg[0] + rz), sigmoid(xg[1] + rr)
        if reset_after:
            hh = np.tanh(xg[2] + r * (hg[2] @ recurrent[:, 2 * u:] + b_rec[2 * u:]))
        else:
            hh = np.tanh(xg[2] + (r * hg[2]) @ recurrent[:, 2 * u:])
        h = z * h + (1 - z) * hh
        hs.append(h)
    return np.stack(hs, axis=1)


def check_masks(masks, shape, rate):
    """Each mask 0 or 1 / (1 - rate), of ``shape``, some of each."""
    for m in masks:
        assert m.shape == shape
        keep = np.isclose(m, 1 / (1 - rate))
        assert np.all(keep | (m == 0)) and keep.any() and (~keep).any()


@pytest.mark.parametrize("recurrent_dropout", [0.0, 0.4])
def test_lstm_dropout_masks_as_keras(recurrent_dropout):
    """A training call masks as Keras 3's LSTMCell (one input mask, or with a recurrent
    dropout one per gate for the inputs and the state), the same masks at every step; an
    inference call is the plain LSTM; the masks change from step to step."""
    rng = np.random.default_rng(7)
    x = tfc.placeholder(tfc.float64, [None, 5, 6], name="x")
    lstm = tfc.keras.layers.LSTM(4, return_sequences=True, dropout=0.3,
                                 recurrent_dropout=recurrent_dropout)
    assert lstm.uses_training
    infer = lstm(x, training=False)
    train = lstm(x, training=True)
    xm_t, hm_t = lstm._drop.input_masks, lstm._drop.recurrent_masks
    assert len(xm_t) == (4 if recurrent_dropout else 1)
    assert len(hm_t) == (4 if recurrent_dropout else 0)
    xs = rng.normal(size=(32, 5, 6))
    with tfc.Session() as s:
        got_i, got_t, xm, hm, k, r, b = s.run([infer, train, xm_t, hm_t, *lstm.variables],
                                              {x: xs})
        again = s.run(xm_t, {x: xs})
    check_masks(xm, (32, 6), 0.3)
    check_masks(hm, (32, 4), 0.4)
    assert not all(np.array_equal(a, b_) for a, b_ in zip(xm, again))  # fresh each step
    np.testing.assert_allclose(got_i, lstm_np(xs, k, r, b), rtol=1e-12)
    np.testing.assert_allclose(got_t, masked_lstm_np(xs, k, r, b, xm, hm), rtol=1e-12)


@pytest.mark.parametrize("reset_after", [True, False])
def test_gru_dropout_masks_as_keras(reset_after):
    rng = np.random.default_rng(8)
    x = tfc.placeholder(tfc.float64, [None, 4, 3], name="x")
    gru = tfc.keras.layers.GRU(5, return_sequences=True, dropout=0.25,
                               recurrent_dropout=0.5, reset_after=reset_after)
    train = gru(x, training=True)
    xs = rng.normal(size=(40, 4, 3))
    with tfc.Session() as s:
        got, xm, hm, k, r, b = s.run([train, gru._drop.input_masks,
                                      gru._drop.recurrent_masks, *gru.variables], {x: xs})
    assert len(xm) == len(hm) == 3
    check_masks(xm, (40, 3), 0.25)
    check_masks(hm, (40, 5), 0.5)
    np.testing.assert_allclose(got, masked_gru_np(xs, k, r, b, reset_after, xm, hm),
                               rtol=1e-12)


def test_rnn_dropout_in_fit_and_bad_rates():
    """fit trains through the dropped graph (the model has a training graph), predict
    is the plain one; rates outside [0, 1) are errors."""
    rng = np.random.default_rng(9)
    inp = tfc.keras.Input(shape=(4, 3))
    out = tfc.keras.layers.Dense(1)(tfc.keras.layers.LSTM(3, dropout=0.5,
                                                          recurrent_dropout=0.5, seed=3)(inp))
    model = tfc.keras.Model(inp, out)
    model.compile("sgd", "mse")
    assert model.uses_training
    xs, ys = rng.normal(size=(16, 4, 3)), rng.normal(size=(16, 1))
    p0 = model.predict(xs)
    np.testing.assert_array_equal(model.predict(xs), p0)
    tr = model._require_training()
    feeds = model._feed_dict(model._prepare_x(xs), model._prepare_y(ys))
    assert model.session.run(tr.loss, feeds) != pytest.approx(
        model.session.run(tr.eval_loss, feeds), rel=1e-6)
    with pytest.raises(TypeMismatch, match="recurrent_dropout must be in"):
        tfc.keras.layers.GRU(2, recurrent_dropout=1.0)
    with pytest.raises(TypeMismatch, match="dropout must be in"):
        tfc.keras.layers.LSTM(2, dropout=-0.1)
