"""``tfc.nn.nce_loss``: against a numpy reference of TF's ``_compute_sampled_logits`` +
sigmoid cross entropies on given samples (accidental hits kept, TF's default, and
removed), its gradient against finite differences, and a seeded sampler's loss."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch

V, D, S = 30, 3, 5
RNG = np.random.default_rng(8)
WEIGHTS = RNG.normal(size=(V, D))
BIASES = RNG.normal(size=V) * 0.1
X = RNG.normal(size=(4, D))
LABELS = np.array([[2, 9], [0, 3], [9, 9], [29, 4]], np.int64)
SAMPLED = np.array([9, 1, 0, 17, 25], np.int64)  # 9 and 0 are true classes of some rows


def log_uniform_p(k):
    return (np.log(k + 2.0) - np.log(k + 1.0)) / np.log(V + 1.0)


def np_nce(w, b, x, remove_accidental_hits=False):
    true_logits = np.einsum("bd,btd->bt", x, w[LABELS]) + b[LABELS]
    sampled_logits = x @ w[SAMPLED].T + b[SAMPLED]
    if remove_accidental_hits:
        hits = (LABELS[:, :, None] == SAMPLED[None, None, :]).any(axis=1)
        sampled_logits = sampled_logits + hits * -np.finfo(np.float32).max
    logits = np.concatenate([true_logits - np.log(S * log_uniform_p(LABELS)),
                             sampled_logits - np.log(S * log_uniform_p(SAMPLED))], axis=1)
    z = np.concatenate([np.full(LABELS.shape, 0.5), np.zeros((len(x), S))], axis=1)
    xent = np.maximum(logits, 0) - logits * z + np.log1p(np.exp(-np.abs(logits)))
    return xent.sum(axis=1)


def build(remove_accidental_hits=None):
    w = tfc.Variable(WEIGHTS, name="nce_w")
    b = tfc.Variable(BIASES, name="nce_b")
    x = tfc.placeholder(tfc.float64, [None, D], name="x")
    sv = (tfc.constant(SAMPLED), S * log_uniform_p(LABELS), S * log_uniform_p(SAMPLED))
    kw = {} if remove_accidental_hits is None else {
        "remove_accidental_hits": remove_accidental_hits}  # (None: TF's default, False)
    loss = tfc.nn.nce_loss(w, b, LABELS, x, S, V, num_true=2, sampled_values=sv, **kw)
    return w, b, x, loss


@pytest.mark.parametrize("remove", [None, True])
def test_loss_matches_numpy_on_given_samples(remove):
    *_, x, loss = build(remove)
    with tfc.Session() as sess:
        got = sess.run(loss, {x: X})
    assert got.shape == (4,)
    np.testing.assert_allclose(got, np_nce(WEIGHTS, BIASES, X, bool(remove)), rtol=1e-12)
    if remove:  # the hits change it: TF's -FLT_MAX makes those sampled terms vanish
        assert not np.allclose(got, np_nce(WEIGHTS, BIASES, X, False))


def test_gradient_matches_finite_differences():
    w, b, x, loss = build()
    gx, gw, gb = tfc.gradients(tfc.reduce_mean(loss), [x, w, b])
    with tfc.Session() as sess:
        gx, gw, gb = sess.run([gx, gw.to_dense(), gb.to_dense()], {x: X})

    def f(weights=WEIGHTS, biases=BIASES, inputs=X):
        return np_nce(weights, biases, inputs).mean()

    for got, base, make in ((gx, X, lambda v: f(inputs=v)), (gw, WEIGHTS, lambda v: f(weights=v)),
                            (gb, BIASES, lambda v: f(biases=v))):
        num = np.zeros_like(base)
        for i in np.ndindex(base.shape):
            hi, lo = base.copy(), base.copy()
            hi[i] += 1e-6
            lo[i] -= 1e-6
            num[i] = (make(hi) - make(lo)) / 2e-6
        np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-9)


def test_a_seeded_sampler_trains_and_bad_input_is_an_error():
    w = tfc.Variable(WEIGHTS, name="w")
    b = tfc.Variable(BIASES, name="b")
    x = tfc.placeholder(tfc.float64, [None, D], name="x")
    y = tfc.placeholder(tfc.int64, [None, 1], name="y")
    loss = tfc.reduce_mean(tfc.nn.nce_loss(w, b, y, x, S, V, seed=3))
    train = tfc.train.GradientDescentOptimizer(0.5).minimize(loss)
    labels = np.array([[1], [5], [7], [2]], np.int64)
    with tfc.Session() as sess:
        losses = [sess.run([train, loss], {x: X, y: labels})[1] for _ in range(30)]
    assert np.isfinite(losses).all() and np.mean(losses[-5:]) < np.mean(losses[:5])
    with pytest.raises(TypeMismatch, match=r"nce_loss: labels must be integers"):
        tfc.nn.nce_loss(w, b, tfc.placeholder(tfc.int64, [None], name="y1"), x, S, V)
    with pytest.raises(TypeMismatch, match="partition_strategy"):
        tfc.nn.nce_loss(w, b, y, x, S, V, partition_strategy="range")
