"""Weight constraints (Keras 3's): the projections against numpy, and a model's optimizer
step writing the constrained updated weight (Keras assigns ``constraint(w)`` after the
gradients), in the same step; outside ``fit`` a constrained variable is a plain one.
``tools/conformance_keras.py`` compares fit with Keras."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
import tfc.keras
from tfc.errors import TfcError

K = tfc.keras
EPS = 1e-7
RNG = np.random.default_rng(1)
W = RNG.normal(size=(4, 3))
X = RNG.normal(size=(8, 4)).astype(np.float32)
Y = RNG.normal(size=(8, 3)).astype(np.float32)


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def norms(w: np.ndarray, axis: object) -> np.ndarray:
    return np.sqrt((w ** 2).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("make, expect", [
    (lambda: K.constraints.MaxNorm(1.5),
     lambda w: w * np.clip(norms(w, 0), 0, 1.5) / (EPS + norms(w, 0))),
    (lambda: K.constraints.MaxNorm(0.5, axis=1),
     lambda w: w * np.clip(norms(w, 1), 0, 0.5) / (EPS + norms(w, 1))),
    (lambda: K.constraints.NonNeg(), lambda w: np.maximum(w, 0)),
    (lambda: K.constraints.UnitNorm(), lambda w: w / (EPS + norms(w, 0))),
    (lambda: K.constraints.UnitNorm(axis=[0, 1]), lambda w: w / (EPS + norms(w, (0, 1)))),
    (lambda: K.constraints.MinMaxNorm(1.0, 1.8, rate=0.3),
     lambda w: w * (0.3 * np.clip(norms(w, 0), 1.0, 1.8) + 0.7 * norms(w, 0))
     / (EPS + norms(w, 0))),
])
def test_projections_against_numpy(make: object, expect: object) -> None:
    with tfc.Session() as s:
        got = s.run(make()(tfc.constant(W)))  # type: ignore[operator]
    np.testing.assert_allclose(got, expect(W), rtol=1e-12)  # type: ignore[operator]


def test_names_and_bad_names() -> None:
    assert isinstance(K.constraints.get("non_neg"), K.constraints.NonNeg)
    assert isinstance(K.constraints.get("max_norm"), K.constraints.MaxNorm)
    with pytest.raises(TfcError, match="unknown constraint 'positive'"):
        K.layers.Dense(2, kernel_constraint="positive")


def build(opt: object) -> object:
    inp = K.Input(shape=(4,))
    out = K.layers.Dense(3, kernel_constraint=K.constraints.MaxNorm(0.5),
                         bias_constraint=K.constraints.NonNeg())(inp)
    m = K.Model(inp, out)
    m.compile(opt, "mse")
    return m


def test_sgd_step_then_constraint_by_hand() -> None:
    m = build(K.optimizers.SGD(0.3))
    w0, b0 = W.astype(np.float32), np.array([0.2, -0.1, 0.05], np.float32)
    m.set_weights([w0, b0])  # (not constrained: set_weights writes as given)
    np.testing.assert_array_equal(m.get_weights()[1], b0)
    m.fit(X, Y, batch_size=len(X), epochs=1, shuffle=False, verbose=0)
    pred = X @ w0 + b0
    d = 2 * (pred - Y) / pred.size
    w1 = w0 - np.float32(0.3) * (X.T @ d)
    b1 = b0 - np.float32(0.3) * d.sum(0)
    want_w = w1 * np.clip(norms(w1, 0), 0, 0.5) / (EPS + norms(w1, 0))
    got = m.get_weights()
    np.testing.assert_allclose(got[0], want_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], np.maximum(b1, 0), rtol=1e-5, atol=1e-6)
    assert (np.sqrt((got[0] ** 2).sum(0)) <= 0.5 + 1e-6).all()


def test_adam_and_a_user_assign_outside_fit() -> None:
    """Every optimizer's update is constrained (Adam: assign_sub of its step); a user's
    assign outside fit is not (Keras's: only the optimizer applies constraints)."""
    m = build(K.optimizers.Adam(0.5))
    m.fit(X, Y * 10, batch_size=4, epochs=3, shuffle=False, verbose=0)
    w, b = m.get_weights()
    assert (np.sqrt((w ** 2).sum(0)) <= 0.5 + 1e-6).all() and (b >= 0).all()
    dense = m.layers[-1]
    with m.graph.as_default():
        big = dense.kernel.assign(np.full((4, 3), 5.0, np.float32))
    m.session.run(big)
    np.testing.assert_array_equal(m.get_weights()[0], 5.0)


def test_embedding_gradient_made_dense_for_a_constraint() -> None:
    """A sparse (row) gradient of a constrained weight is made dense: the constraint
    covers the whole weight, every row."""
    inp = K.Input(shape=(2,), dtype="int32")
    out = K.layers.Flatten()(K.layers.Embedding(5, 3, embeddings_constraint="non_neg")(inp))
    m = K.Model(inp, out)
    m.compile(K.optimizers.SGD(0.1), "mse")
    m.set_weights([-np.ones((5, 3), np.float32)])
    m.fit(np.array([[0, 1]]), np.zeros((1, 6), np.float32), epochs=1, verbose=0)
    np.testing.assert_array_equal(m.get_weights()[0], 0.0)  # untouched rows too
