"""``tfc.nn.sampled_softmax_loss`` and its log-uniform candidate sampler: the loss against a
numpy reference of TF's ``_compute_sampled_logits`` on the same samples, the sampler's
distribution, the gradient against finite differences, and a sharded output embedding
that is asked only for the true and sampled classes."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TfcError
from tfc.passes.replicate import ClusterSpec, cluster_report
from tfc.pipeline import Target, lower
from tfc.runtime import Program

V, D, S = 40, 4, 6
RNG = np.random.default_rng(5)
WEIGHTS = RNG.normal(size=(V, D))
BIASES = RNG.normal(size=V)
X = RNG.normal(size=(5, D))
LABELS = np.array([[1, 7], [0, 3], [7, 7], [39, 2], [5, 0]], np.int64)


def log_uniform_p(k: np.ndarray, range_max: int = V) -> np.ndarray:
    return (np.log(k + 2.0) - np.log(k + 1.0)) / np.log(range_max + 1.0)


def np_sampled_loss(w, b, labels, x, sampled, remove_accidental_hits=True):
    """TF's ``_compute_sampled_logits`` + softmax cross entropy, in numpy (f64)."""
    num_true = labels.shape[1]
    true_logits = np.einsum("bd,btd->bt", x, w[labels]) + b[labels]
    sampled_logits = x @ w[sampled].T + b[sampled]
    if remove_accidental_hits:
        hits = (labels[:, :, None] == sampled[None, None, :]).any(axis=1)
        sampled_logits = sampled_logits + hits * -np.finfo(np.float32).max
    true_logits = true_logits - np.log(S * log_uniform_p(labels))
    sampled_logits = sampled_logits - np.log(S * log_uniform_p(sampled))
    logits = np.concatenate([true_logits, sampled_logits], axis=1)
    targets = np.concatenate([np.full_like(true_logits, 1.0 / num_true),
                              np.zeros_like(sampled_logits)], axis=1)
    m = logits.max(axis=1, keepdims=True)
    log_softmax = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
    return -(targets * log_softmax).sum(axis=1)


def build(shards: int = 0, sampled: np.ndarray | None = None):
    e = tfc.Variable(WEIGHTS, name="softmax_w",
                     partitioner=tfc.fixed_size_partitioner(shards) if shards else None)
    b = tfc.Variable(BIASES, name="softmax_b")
    x = tfc.placeholder(tfc.float64, [None, D], name="x")
    y = tfc.placeholder(tfc.int64, [None, 2], name="y")
    if sampled is None:
        sv = tfc.random.log_uniform_candidate_sampler(y, 2, S, False, V, seed=9)
    else:
        p = S * log_uniform_p(np.asarray(sampled))
        sv = (tfc.constant(sampled), S * log_uniform_p(LABELS), tfc.constant(p))
    loss = tfc.nn.sampled_softmax_loss(e, b, y, x, S, V, num_true=2, sampled_values=sv)
    return e, b, x, y, sv, loss


@pytest.mark.parametrize("shards", [0, 3])
def test_loss_matches_numpy_on_the_same_samples(shards):
    e, _, x, y, sv, loss = build(shards)
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        for _ in range(3):  # fresh samples each step
            got, sampled = sess.run([loss, sv[0]], {x: X, y: LABELS})
            assert sampled.dtype == np.int64 and ((0 <= sampled) & (sampled < V)).all()
            want = np_sampled_loss(WEIGHTS, BIASES, LABELS, X, sampled)
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_accidental_hits_are_removed():
    sampled = np.array([7, 0, 11, 2, 7, 30], np.int64)  # 7, 0 and 2 are true classes
    *_, x, y, _, loss = build(sampled=sampled)
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        got = sess.run(loss, {x: X, y: LABELS})
    want = np_sampled_loss(WEIGHTS, BIASES, LABELS, X, sampled)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    kept = np_sampled_loss(WEIGHTS, BIASES, LABELS, X, sampled, remove_accidental_hits=False)
    assert not np.allclose(got, kept)  # the hits made a difference


def test_the_sampler_draws_log_uniform_classes():
    y = tfc.constant(np.zeros((1, 1), np.int64))
    sampled, true_count, sampled_count = tfc.random.log_uniform_candidate_sampler(
        y, 1, 20000, False, V, seed=1)
    with tfc.Session() as sess:
        s, tc, sc = sess.run([sampled, true_count, sampled_count])
    freq = np.bincount(s, minlength=V) / len(s)
    p = log_uniform_p(np.arange(V))
    assert abs(p.sum() - 1) < 1e-12
    np.testing.assert_allclose(freq[:5], p[:5], atol=4 * np.sqrt(p[0] / len(s)))
    np.testing.assert_allclose(tc, 20000 * p[[0]][None], rtol=1e-12)
    np.testing.assert_allclose(sc, 20000 * p[s], rtol=1e-12)
    with pytest.raises(TfcError, match="unique=True"):
        tfc.random.log_uniform_candidate_sampler(y, 1, 5, True, V)


def test_gradient_matches_finite_differences():
    sampled = np.array([7, 0, 11, 2, 19, 30], np.int64)
    e, b, x, y, _, loss = build(sampled=sampled)
    gx, ge, gb = tfc.gradients(tfc.reduce_mean(loss), [x, e, b])
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        gx, ge, gb = sess.run([gx, ge.to_dense(), gb.to_dense()], {x: X, y: LABELS})

    def f(w=WEIGHTS, bias=BIASES, inputs=X):
        return np_sampled_loss(w, bias, LABELS, inputs, sampled).mean()

    for got, base, make in ((gx, X, lambda v: f(inputs=v)), (ge, WEIGHTS, lambda v: f(w=v)),
                            (gb, BIASES, lambda v: f(bias=v))):
        num = np.zeros_like(base)
        for i in np.ndindex(base.shape):
            hi, lo = base.copy(), base.copy()
            hi[i] += 1e-6
            lo[i] -= 1e-6
            num[i] = (make(hi) - make(lo)) / 2e-6
        np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-8)
    untouched = sorted(set(range(V)) - set(sampled) - set(LABELS.ravel()))
    assert not ge[untouched].any()  # only the true and sampled classes get a gradient


def output_layer(vocab: int):
    """A sampled-softmax output layer over a 2-shard output embedding, for a cluster."""
    rng = np.random.default_rng(0)
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, D], name="x")
        y = tfc.placeholder(tfc.int64, [None, 1], name="y")
        w = tfc.Variable(rng.normal(size=(vocab, D)).astype(np.float32), name="softmax_w",
                         partitioner=tfc.fixed_size_partitioner(2))
        b = tfc.Variable(np.zeros(vocab, np.float32), name="softmax_b")
        loss = tfc.reduce_mean(tfc.nn.sampled_softmax_loss(w, b, y, x, 8, vocab, seed=2))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        tfc.entry("train", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
    return g.as_module()


def test_a_sharded_output_embedding_sends_only_the_sampled_and_true_rows():
    spec = ClusterSpec(2, 2, "ps-sync")
    sent = []
    for vocab in (100, 20000):
        m = lower(output_layer(vocab), Target("reference", tuple(spec.devices), False, spec))
        sent.append(cluster_report(m, spec).transfers["train"][1])
    # the biases are gathered on their PS too: nothing scales with the vocabulary
    assert sent[0] == sent[1] < 20000 * D * 4 // 2
    program = Program(lower(output_layer(100), Target("reference", tuple(spec.devices),
                                                      False, spec)),
                      backend="reference", cluster="inprocess")
    feeds = {"x": RNG.normal(size=(4, D)).astype(np.float32),
             "y": np.array([[1], [2], [3], [50]], np.int64)}
    losses = [float(program.run("train", **feeds)["loss"]) for _ in range(20)]
    assert np.isfinite(losses).all() and np.mean(losses[-5:]) < np.mean(losses[:5])


def test_bad_shapes_are_one_line_errors():
    from tfc.errors import TypeMismatch
    w = tfc.Variable(WEIGHTS, name="w")
    b = tfc.Variable(BIASES, name="b")
    x = tfc.placeholder(tfc.float64, [None, D], name="x")
    with pytest.raises(TypeMismatch, match=r"labels must be integers of shape \[batch, 1\]"):
        tfc.nn.sampled_softmax_loss(w, b, tfc.placeholder(tfc.int64, [None], name="y"), x,
                                    S, V)
    y = tfc.placeholder(tfc.int64, [None, 1], name="y1")
    with pytest.raises(TypeMismatch, match=r"sampled candidates must have shape \[6\]"):
        tfc.nn.sampled_softmax_loss(w, b, y, x, S, V, sampled_values=(
            tfc.constant(np.arange(4, dtype=np.int64)), tfc.constant(np.ones((1, 1))),
            tfc.constant(np.ones(4))))
