"""SimpleRNN, go_backwards, Bidirectional and TimeDistributed against numpy recurrences
with the same weights; their weight gradients against finite differences (f64)."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch
from tests.layers.gradcheck import assert_model_gradients_match_finite_differences
from tests.layers.test_recurrent import lstm_state_np

K = tfc.keras
L = tfc.keras.layers


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def simple_rnn_np(x: np.ndarray, kernel: np.ndarray, recurrent: np.ndarray,
                  bias: np.ndarray | None, act=np.tanh) -> np.ndarray:
    """Keras's SimpleRNN: every h, ``[B, T, U]``."""
    h = np.zeros((x.shape[0], recurrent.shape[0]))
    hs = []
    for s in range(x.shape[1]):
        z = x[:, s] @ kernel + (0 if bias is None else bias) + h @ recurrent
        h = act(z)
        hs.append(h)
    return np.stack(hs, axis=1)


def gradcheck(model, rng, x: np.ndarray, y_shape: tuple) -> None:
    model.compile("sgd", "mse")
    tr = model._require_training()
    feeds = model._feed_dict(model._prepare_x(x), model._prepare_y(rng.normal(size=y_shape)))
    assert_model_gradients_match_finite_differences(model, tr.loss, feeds)


def test_simple_rnn_matches_numpy_and_finite_differences() -> None:
    rng = np.random.default_rng(0)
    inp = K.Input(shape=(5, 3), dtype="float64")
    rnn = L.SimpleRNN(4, return_sequences=True, return_state=True)
    seq, h = rnn(inp)
    back = L.SimpleRNN(2, activation="relu", use_bias=False, go_backwards=True,
                       return_sequences=True)(seq)
    head = L.Dense(2)(L.Flatten()(back))
    assert [v.name for v in rnn.variables] == ["simple_rnn/kernel",
                                               "simple_rnn/recurrent_kernel", "simple_rnn/bias"]
    model = K.Model(inp, [seq, h, back, head])
    assert model.count_params() == 3 * 4 + 4 * 4 + 4 + 4 * 2 + 2 * 2 + 10 * 2 + 2
    weights = [rng.normal(size=w.shape) * 0.5 for w in model.get_weights()]
    model.set_weights(weights)
    xs = rng.normal(size=(3, 5, 3))
    got_seq, got_h, got_back, _ = model.predict(xs)
    hs = simple_rnn_np(xs, *weights[:3])
    np.testing.assert_allclose(got_seq, hs, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got_h, hs[:, -1], rtol=1e-12, atol=1e-14)
    # go_backwards: the steps read last to first, the sequence returned in that order
    np.testing.assert_allclose(got_back, simple_rnn_np(hs[:, ::-1], *weights[3:5], None,
                                                       lambda z: np.maximum(z, 0)),
                               rtol=1e-12, atol=1e-14)
    gradcheck(K.Model(inp, head), rng, xs, (3, 2))


def test_simple_rnn_dropout_masks_inputs_and_state_in_training() -> None:
    """Keras's SimpleRNNCell: ``act((x * m_x) @ kernel + b + (h * m_h) @ recurrent)`` with
    one mask per call; the inference call is the plain recurrence."""
    rng = np.random.default_rng(5)
    x = tfc.placeholder(tfc.float64, [None, 4, 3])
    rnn = L.SimpleRNN(5, dropout=0.3, recurrent_dropout=0.4, return_sequences=True)
    assert rnn.uses_training
    infer, train = rnn(x, training=False), rnn(x, training=True)
    xs = rng.normal(size=(20, 4, 3))
    with tfc.Session() as s:
        got_i, got_t, xm, hm, k, r, b = s.run([infer, train, rnn._drop.input_masks,
                                               rnn._drop.recurrent_masks, *rnn.variables],
                                              {x: xs})
    assert len(xm) == len(hm) == 1
    assert set(np.unique(xm[0])) == {0.0, 1 / 0.7} and set(np.unique(hm[0])) == {0.0, 1 / 0.6}
    np.testing.assert_allclose(got_i, simple_rnn_np(xs, k, r, b), rtol=1e-12, atol=1e-14)
    h, hs = np.zeros((20, 5)), []
    for t in range(4):
        h = np.tanh((xs[:, t] * xm[0]) @ k + b + (h * hm[0]) @ r)
        hs.append(h)
    np.testing.assert_allclose(got_t, np.stack(hs, 1), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", ["concat", "sum", "ave", "mul", None])
def test_bidirectional_lstm_matches_numpy(mode: str | None) -> None:
    rng = np.random.default_rng(1)
    inp = K.Input(shape=(4, 3), dtype="float64")
    bi = L.Bidirectional(L.LSTM(2, return_sequences=True), merge_mode=mode)
    out = bi(inp)
    model = K.Model(inp, out)
    assert [v.name for v in bi.variables] == [
        f"bidirectional/{d}_lstm/{w}" for d in ("forward", "backward")
        for w in ("kernel", "recurrent_kernel", "bias")]
    weights = [rng.normal(size=w.shape) * 0.5 for w in model.get_weights()]
    model.set_weights(weights)
    xs = rng.normal(size=(2, 4, 3))
    fwd = lstm_state_np(xs, *weights[:3])[0]
    bwd = lstm_state_np(xs[:, ::-1], *weights[3:])[0][:, ::-1]  # flipped back
    expected = {"concat": np.concatenate([fwd, bwd], -1), "sum": fwd + bwd,
                "ave": (fwd + bwd) / 2, "mul": fwd * bwd, None: [fwd, bwd]}[mode]
    np.testing.assert_allclose(model.predict(xs), expected, rtol=1e-12, atol=1e-14)


def test_bidirectional_last_output_state_and_gradients() -> None:
    rng = np.random.default_rng(2)
    inp = K.Input(shape=(4, 3), dtype="float64")
    out, fh, fc, bh, bc = L.Bidirectional(L.LSTM(2, return_state=True))(inp)
    head = L.Dense(2)(L.Concatenate()([out, fc, bh]))
    model = K.Model(inp, [out, fh, fc, bh, bc, head])
    weights = [rng.normal(size=w.shape) * 0.5 for w in model.get_weights()]
    model.set_weights(weights)
    xs = rng.normal(size=(2, 4, 3))
    got = model.predict(xs)
    fseq, fcell = lstm_state_np(xs, *weights[:3])
    bseq, bcell = lstm_state_np(xs[:, ::-1], *weights[3:6])
    expected = [np.concatenate([fseq[:, -1], bseq[:, -1]], -1), fseq[:, -1], fcell,
                bseq[:, -1], bcell]
    for g, e in zip(got[:5], expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-14)
    # the gradient through both directions and the merge (a SimpleRNN: cheap to compile)
    bi = L.Bidirectional(L.SimpleRNN(2, return_sequences=True), merge_mode="mul")
    model = K.Model(inp, L.Dense(2)(L.Flatten()(bi(inp))))
    model.set_weights([rng.normal(size=w.shape) * 0.5 for w in model.get_weights()])
    gradcheck(model, rng, xs, (2, 2))


def test_time_distributed_dense_matches_numpy_and_finite_differences() -> None:
    rng = np.random.default_rng(3)
    model = K.Sequential([K.Input(shape=(3, 4, 2), dtype="float64"),
                          L.TimeDistributed(L.Dense(5, activation="tanh")), L.Flatten(),
                          L.Dense(2)])
    model.build()
    td = model.layers[0]
    assert [v.name for v in td.variables] == ["time_distributed/dense/kernel",
                                              "time_distributed/dense/bias"]
    assert str(td.output_type) == "f64[B,3,4,5]"
    weights = [rng.normal(size=w.shape) * 0.5 for w in model.get_weights()]
    model.set_weights(weights)
    xs = rng.normal(size=(2, 3, 4, 2))
    hidden = np.tanh(xs @ weights[0] + weights[1]).reshape(2, -1)
    np.testing.assert_allclose(model.predict(xs), hidden @ weights[2] + weights[3],
                               rtol=1e-12, atol=1e-14)
    gradcheck(model, rng, xs, (2, 2))


def test_time_distributed_other_layers_merge_batch_and_time() -> None:
    """A layer other than Dense sees ``[B * T, ...]``; the result keeps the batch dim."""
    rng = np.random.default_rng(4)
    inp = K.Input(shape=(3, 4, 5, 2), dtype="float64")
    conv = L.Conv2D(2, 2, activation="tanh")
    td = L.TimeDistributed(conv)
    out, flat = td(inp), L.TimeDistributed(L.Flatten())(inp)
    assert str(out.type) == "f64[B,3,3,4,2]" and str(flat.type) == "f64[B,3,40]"
    assert str(L.Add()([flat, flat]).type) == "f64[B,3,40]"  # B, not an unknown dim
    model = K.Model(inp, [out, flat])
    weights = [rng.normal(size=w.shape) for w in model.get_weights()]
    model.set_weights(weights)
    xs = rng.normal(size=(2, 3, 4, 5, 2))
    got, got_flat = model.predict(xs)
    np.testing.assert_array_equal(got_flat, xs.reshape(2, 3, 40))
    k, b = weights
    frames = xs.reshape(6, 4, 5, 2)
    conv_np = np.zeros((6, 3, 4, 2))
    for i in range(3):
        for j in range(4):
            conv_np[:, i, j] = np.einsum("nhwc,hwcf->nf", frames[:, i:i + 2, j:j + 2], k)
    np.testing.assert_allclose(got, np.tanh(conv_np + b).reshape(2, 3, 3, 4, 2), rtol=1e-12,
                               atol=1e-14)


def test_wrapper_errors() -> None:
    with pytest.raises(TypeMismatch, match="wraps a recurrent layer"):
        L.Bidirectional(L.Dense(3))
    with pytest.raises(TypeMismatch, match="merge_mode must be one of"):
        L.Bidirectional(L.LSTM(3), merge_mode="max")
    used = L.LSTM(2)
    used(tfc.placeholder(tfc.float32, [None, 3, 2]))
    with pytest.raises(TypeMismatch, match="already called"):
        L.Bidirectional(used)
    with pytest.raises(TypeMismatch, match="agree on return_sequences"):
        L.Bidirectional(L.LSTM(2), backward_layer=L.LSTM(2, return_sequences=True,
                                                         go_backwards=True))
    with pytest.raises(TypeMismatch, match=r"\[batch, time, \.\.\.\] inputs"):
        L.TimeDistributed(L.Dense(2))(tfc.placeholder(tfc.float32, [None, 3]))
