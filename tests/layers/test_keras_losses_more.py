"""Keras's Huber, KLDivergence and CosineSimilarity losses against numpy (Keras 3's
formulas), by object and by name, with their gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
import tfc.keras
from tfc.errors import TfcError
from tfc.layers import losses

RNG = np.random.default_rng(5)
Y = RNG.normal(size=(4, 3))
P = RNG.normal(size=(4, 3))
Q = RNG.dirichlet(np.ones(3), size=4)
R = RNG.dirichlet(np.ones(3), size=4)
R[0, 1] = 0.0  # one entry under the clip


def huber_np(y, p, delta):
    e = np.abs(p - y)
    return np.where(e <= delta, 0.5 * e ** 2, delta * e - 0.5 * delta ** 2).mean(-1)


def kld_np(y, p):
    y, p = np.clip(y, 1e-7, 1), np.clip(p, 1e-7, 1)
    return (y * np.log(y / p)).sum(-1)


def cosine_np(y, p, axis):
    n = lambda v: v / np.linalg.norm(v, axis=axis, keepdims=True)  # noqa: E731
    return -(n(y) * n(p)).sum(axis)


def value_and_gradient(loss, y, p):
    with tfc.Graph().as_default():
        pt = tfc.placeholder(tfc.float64, p.shape)
        value_t = loss(tfc.constant(y), pt)
        out = tfc.reduce_sum(value_t)  # (per-example losses: their sum's gradient)
        grad = tfc.gradients(out, pt)[0]
        with tfc.Session() as s:
            value, g = s.run([value_t, grad], {pt: p})
            eps, rng = 1e-6, np.random.default_rng(0)
            for _ in range(4):
                idx = tuple(int(rng.integers(0, d)) for d in p.shape)
                vals = []
                for sign in (1, -1):
                    moved = p.copy()
                    moved[idx] += sign * eps
                    vals.append(float(s.run(out, {pt: moved})))
                assert g[idx] == pytest.approx((vals[0] - vals[1]) / (2 * eps), rel=1e-6,
                                               abs=1e-9)
    return value


def focal_np(y, p, gamma=2.0, alpha=0.25, balance=False, smoothing=0.0):
    y = y * (1 - smoothing) + 0.5 * smoothing
    q = np.clip(p, 1e-7, 1 - 1e-7)
    bce = -(y * np.log(q) + (1 - y) * np.log(1 - q))
    p_t = y * p + (1 - y) * (1 - p)
    out = (1 - p_t) ** gamma * bce
    return (out * (y * alpha + (1 - y) * (1 - alpha)) if balance else out).mean(-1)


LABELS = (RNG.uniform(size=(4, 3)) > 0.5).astype(np.float64)
SIG = 1 / (1 + np.exp(-P))


@pytest.mark.parametrize("make, y, p, expected", [
    (lambda: tfc.keras.losses.BinaryFocalCrossentropy(), LABELS, SIG,
     focal_np(LABELS, SIG).mean()),
    (lambda: tfc.keras.losses.BinaryFocalCrossentropy(True, 0.3, 1.5, True, 0.1), LABELS, P,
     focal_np(LABELS, SIG, 1.5, 0.3, True, 0.1).mean()),
    (lambda: tfc.keras.losses.Huber(), Y, P, huber_np(Y, P, 1.0).mean()),
    (lambda: tfc.keras.losses.Huber(delta=0.3, reduction="sum"), Y, P,
     huber_np(Y, P, 0.3).sum()),
    (lambda: losses.get_loss("huber"), Y, P, huber_np(Y, P, 1.0).mean()),
    (lambda: tfc.keras.losses.KLDivergence(), Q, R, kld_np(Q, R).mean()),
    (lambda: losses.get_loss("kld"), Q, np.clip(R, 0.01, 1), kld_np(Q, np.clip(R, 0.01, 1))
     .mean()),
    (lambda: tfc.keras.losses.CosineSimilarity(), Y, P, cosine_np(Y, P, -1).mean()),
    (lambda: tfc.keras.losses.CosineSimilarity(axis=0, reduction=None), Y, P,
     cosine_np(Y, P, 0)),
])
def test_loss_matches_numpy_and_finite_differences(make, y, p, expected) -> None:
    np.testing.assert_allclose(value_and_gradient(make(), y, p), expected, rtol=1e-13)


def test_cosine_similarity_of_a_zero_vector_is_zero_and_bad_delta() -> None:
    y = np.array([[0.0, 0.0], [1.0, 1.0]])
    p = np.array([[1.0, 2.0], [-1.0, -1.0]])
    with tfc.Graph().as_default():
        out = losses.cosine_similarity(tfc.constant(y), tfc.constant(p))
        with tfc.Session() as s:
            np.testing.assert_allclose(s.run(out), [0.0, 1.0], rtol=1e-15)
    with pytest.raises(TfcError, match="delta must be >= 0"):
        tfc.keras.losses.Huber(delta=-1.0)
