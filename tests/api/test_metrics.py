"""``tfc.metrics`` (TF1's streaming metrics): values and ``update_op`` results over several
batches against numpy, local variables (named as TF's, reset by
``local_variables_initializer``, left out of the global ones and a default Saver)."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch

RNG = np.random.default_rng(3)
LAB = RNG.integers(0, 2, 30)
PRED = np.where(RNG.random(30) < 0.7, LAB, 1 - LAB)
T, P = RNG.normal(size=30), RNG.normal(size=30)
W = RNG.random(30)
BATCHES = [slice(0, 10), slice(10, 25), slice(25, 30)]


def f32_mean(v, w=None):
    v = v.astype(np.float32).astype(np.float64)
    if w is None:
        return v.mean()
    w = w.astype(np.float32).astype(np.float64)
    return (v * w).sum() / w.sum()


def references(n):
    """Each metric over the first ``n`` examples (float64, of float32-rounded values)."""
    lab, pred, t, p, w = LAB[:n], PRED[:n], T[:n], P[:n], W[:n]
    tp = ((lab == 1) & (pred == 1)).sum()
    return [f32_mean(lab == pred), f32_mean(lab == pred, w), f32_mean(p),
            f32_mean((t - p) ** 2), f32_mean(np.abs(p - t)),
            tp / ((pred == 1).sum()), tp / ((lab == 1).sum())]


def build():
    labels = tfc.placeholder(tfc.int64, [None], name="labels")
    preds = tfc.placeholder(tfc.int64, [None], name="preds")
    t = tfc.placeholder(tfc.float64, [None], name="t")
    p = tfc.placeholder(tfc.float64, [None], name="p")
    w = tfc.placeholder(tfc.float64, [None], name="w")
    pairs = [tfc.metrics.accuracy(labels, preds),
             tfc.metrics.accuracy(labels, preds, weights=w),
             tfc.metrics.mean(p),
             tfc.metrics.mean_squared_error(t, p),
             tfc.metrics.mean_absolute_error(t, p, name="mae"),
             tfc.metrics.precision(labels, preds),
             tfc.metrics.recall(labels, preds)]

    def feed(b):
        return {labels: LAB[b], preds: PRED[b], t: T[b], p: P[b], w: W[b]}
    return [v for v, _ in pairs], [u for _, u in pairs], feed


def test_streaming_values_match_numpy_and_reset():
    values, updates, feed = build()
    with tfc.Session() as sess:
        sess.run([tfc.global_variables_initializer(), tfc.local_variables_initializer()])
        np.testing.assert_array_equal(sess.run(values), 0.0)  # nothing seen: 0, not NaN
        for _ in range(2):
            for b in BATCHES:
                got = sess.run(updates, feed(b))  # each update_op returns the new value
                # float32 sums of at most 30 values of magnitude < 4: 1e-6 absolute
                np.testing.assert_allclose(got, references(b.stop), rtol=1e-6, atol=1e-6)
                np.testing.assert_allclose(sess.run(values), got, rtol=0)
            sess.run(tfc.local_variables_initializer())
            np.testing.assert_array_equal(sess.run(values), 0.0)


def test_local_variables_are_named_as_tf_and_not_global():
    values, updates, feed = build()
    tfc.Variable(np.zeros(2), name="model_w")
    local = [v.name for v in tfc.local_variables()]
    assert local == [
        "accuracy/total", "accuracy/count", "accuracy_1/total", "accuracy_1/count",
        "mean/total", "mean/count", "mean_squared_error/total", "mean_squared_error/count",
        "mae/total", "mae/count", "precision/true_positives/count",
        "precision/false_positives/count", "recall/true_positives/count",
        "recall/false_negatives/count"]
    assert local == [v.name for v in tfc.get_collection(tfc.GraphKeys.METRIC_VARIABLES)]
    assert [v.name for v in tfc.global_variables()] == ["model_w"]
    assert [v.name for v in tfc.get_collection(tfc.GraphKeys.GLOBAL_VARIABLES)] == ["model_w"]
    assert tfc.trainable_variables() == tfc.global_variables()


def test_a_default_saver_leaves_the_metrics_out(tmp_path):
    with tfc.Graph().as_default():  # training: no metrics
        tfc.Variable(np.arange(3.0), name="w")
        with tfc.Session() as sess:
            path = tfc.train.Saver().save(sess, str(tmp_path / "ckpt"))
    w = tfc.Variable(np.zeros(3), name="w")  # evaluation: the model and a metric
    acc, acc_op = tfc.metrics.accuracy(tfc.constant([1, 2]), tfc.constant([1, 3]))
    with tfc.Session() as sess:
        tfc.train.Saver().restore(sess, path)  # (the checkpoint has no accuracy/total)
        sess.run(tfc.local_variables_initializer())
        np.testing.assert_array_equal(sess.run(w), np.arange(3.0))
        assert sess.run(acc_op) == 0.5


def test_update_op_is_an_operation_for_group_and_control_dependencies():
    x = tfc.placeholder(tfc.float32, [None])
    m, update = tfc.metrics.mean(x, metrics_collections=["my_metrics"],
                                 updates_collections=[tfc.GraphKeys.UPDATE_OPS])
    assert tfc.get_collection("my_metrics") == [m]
    assert tfc.get_collection(tfc.GraphKeys.UPDATE_OPS) == [update]
    both = tfc.group(update)
    with tfc.Session() as sess:
        sess.run(tfc.local_variables_initializer())
        assert sess.run(both, {x: [1.0, 2.0]}) is None
        assert sess.run(update, {x: [6.0]}) == 3.0
        assert sess.run(m) == 3.0


def test_mismatched_shapes_are_clear_errors():
    with pytest.raises(TypeMismatch, match="labels .* and predictions .* same shape"):
        tfc.metrics.accuracy(tfc.constant([1, 2, 3]), tfc.constant([1, 2]))
    # a trailing axis of 1 is squeezed, as TF does
    acc, update = tfc.metrics.accuracy(tfc.constant([[1], [2]]), tfc.constant([1, 3]))
    with tfc.Session() as sess:
        sess.run(tfc.local_variables_initializer())
        assert sess.run(update) == 0.5
