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


def np_auc(lab, score, thresholds, w=None, curve="ROC", method="trapezoidal"):
    """TF's ``auc`` in numpy: counts at the thresholds, then a Riemann sum."""
    w = np.ones(len(lab)) if w is None else w.astype(np.float32).astype(np.float64)
    pos = score[:, None] > np.asarray(thresholds, np.float32)[None, :]
    lab = lab.astype(bool)[:, None]
    tp, fn = ((lab & pos) * w[:, None]).sum(0), ((lab & ~pos) * w[:, None]).sum(0)
    tn, fp = ((~lab & ~pos) * w[:, None]).sum(0), ((~lab & pos) * w[:, None]).sum(0)
    rec = (tp + 1e-6) / (tp + fn + 1e-6)
    x, y = (fp / (fp + tn + 1e-6), rec) if curve == "ROC" else (rec, (tp + 1e-6) / (
        tp + fp + 1e-6))
    height = {"trapezoidal": (y[:-1] + y[1:]) / 2, "minoring": np.minimum(y[:-1], y[1:]),
              "majoring": np.maximum(y[:-1], y[1:])}[method]
    return ((x[:-1] - x[1:]) * height).sum()


def test_auc_matches_numpy_over_batches():
    score = np.clip(0.4 * LAB + 0.6 * RNG.random(30), 0, 1).astype(np.float32)
    score[::3] = np.round(score[::3] * 10) / 10  # ties with thresholds: not above them
    labels = tfc.placeholder(tfc.int64, [None])
    scores = tfc.placeholder(tfc.float32, [None])
    w = tfc.placeholder(tfc.float64, [None])
    default = [-1e-7] + [(i + 1) / 199 for i in range(198)] + [1 + 1e-7]
    given = [-1e-7, 0.2, 0.5, 0.7, 1 + 1e-7]
    cases = [(tfc.metrics.auc(labels, scores), dict(thresholds=default)),
             (tfc.metrics.auc(labels, scores, weights=w, curve="PR", num_thresholds=20),
              dict(thresholds=[-1e-7] + [(i + 1) / 19 for i in range(18)] + [1 + 1e-7],
                   curve="PR", w=W)),
             (tfc.metrics.auc(labels, scores, thresholds=[0.7, 0.2, 0.5],
                              summation_method="minoring"),
              dict(thresholds=given, method="minoring")),
             (tfc.metrics.auc(labels, scores, thresholds=[0.7, 0.2, 0.5],
                              summation_method="majoring"),
              dict(thresholds=given, method="majoring"))]
    assert [v.name for v in tfc.local_variables()][:4] == [
        "auc/true_positives", "auc/false_negatives", "auc/true_negatives",
        "auc/false_positives"]
    with tfc.Session() as sess:
        sess.run(tfc.local_variables_initializer())
        for b in BATCHES:
            got = sess.run([u for (_, u), _ in cases],
                           {labels: LAB[b], scores: score[b], w: W[b]})
            for g, (_, kw) in zip(got, cases):
                n = b.stop
                want = np_auc(LAB[:n], score[:n], kw["thresholds"], kw.get("w", W)[:n]
                              if "w" in kw else None, kw.get("curve", "ROC"),
                              kw.get("method", "trapezoidal"))
                np.testing.assert_allclose(g, want, rtol=2e-6)  # float32 sums
        assert 0.5 < sess.run(cases[0][0][0]) <= 1.0
    with pytest.raises(TypeMismatch, match="careful_interpolation"):
        tfc.metrics.auc(labels, scores, curve="PR", summation_method="careful_interpolation")
