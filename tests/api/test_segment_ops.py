"""``tfc.math.unsorted_segment_*`` / ``segment_*``, ``tfc.scatter_nd`` and
``tfc.tensor_scatter_nd_*`` (``tfc.api.segment_ops``) on the llvm backend and the
reference, against numpy written out here (mean/sqrt_n: rtol 1e-6; the scatters exact),
their gradients against finite differences (f64, rtol 1e-6), and the build-time and
run-time errors at the user's line."""

from __future__ import annotations

import inspect
import re
import warnings

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError, TfcError

RNG = np.random.default_rng(4)


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def run_both(outs, feeds=None) -> list:
    got = []
    for backend in ("llvm", "reference"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a fallback to the reference warns
            with tfc.Session(backend=backend) as s:
                got.append([np.asarray(v) for v in s.run(outs, feeds or {})])
    for a, b in zip(*got):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (a, b)
    return got[0]


def here() -> int:
    return inspect.currentframe().f_back.f_lineno  # type: ignore[union-attr]


def test_means_and_sqrt_n() -> None:
    data = RNG.normal(size=(6, 2)).astype(np.float32)
    ids = np.array([3, 0, -1, 3, 3, 0], np.int32)
    sids = np.array([0, 0, 2, 2, 2, 3], np.int32)
    x = tfc.placeholder(tfc.float32, [None, 2])
    i = tfc.placeholder(tfc.int32, [None])
    si = tfc.placeholder(tfc.int32, [None])
    m = tfc.math
    mean, sq = m.unsorted_segment_mean(x, i, 5), m.unsorted_segment_sqrt_n(x, i, 5)
    smean = m.segment_mean(x, si, num_segments=4)
    got = run_both([mean, sq, smean], {x: data, i: ids, si: sids})
    for out, (ii, n, root) in zip(got, [(ids, 5, False), (ids, 5, True), (sids, 4, False)]):
        want = np.zeros((n, 2), np.float32)
        for s in range(n):
            rows = data[ii == s]
            if len(rows):
                want[s] = rows.sum(0) / (np.sqrt(len(rows)) if root else len(rows))
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)


def test_sorted_count_from_constant_ids_or_num_segments() -> None:
    data = np.arange(5, dtype=np.float32)
    out = tfc.math.segment_max(tfc.constant(data), tfc.constant(np.array([0, 0, 1, 3, 3])))
    np.testing.assert_array_equal(run_both([out])[0], [1, 2, 0, 4])
    with pytest.raises(TfcError, match=rf"test_segment_ops.py:{here() + 2}: segment_sum: "
                                       "the number of segments must be static"):
        tfc.math.segment_sum(data, tfc.placeholder(tfc.int32, [5]))
    with pytest.raises(TfcError, match="num_segments must be a Python int"):
        tfc.math.unsorted_segment_sum(data, [0, 0, 1, 1, 2], tfc.placeholder(tfc.int32, []))
    with pytest.raises(TfcError, match="must be a float tensor"):
        tfc.math.unsorted_segment_mean(np.arange(3), [0, 0, 1], 2)


def test_scatter_nd_family_against_numpy() -> None:
    t = RNG.normal(size=(3, 4, 2)).astype(np.float32)
    idx = np.array([[1, 3], [0, 0], [1, 3], [2, 1]], np.int32)  # a duplicate tuple
    u = RNG.normal(size=(4, 2)).astype(np.float32)
    x = tfc.placeholder(tfc.float32, [3, 4, 2])
    i = tfc.placeholder(tfc.int32, [None, 2])
    up = tfc.placeholder(tfc.float32, [None, 2])
    outs = [tfc.scatter_nd(i, up, [3, 4, 2]), tfc.tensor_scatter_nd_add(x, i, up),
            tfc.tensor_scatter_nd_sub(x, i, up), tfc.tensor_scatter_nd_update(x, i, up),
            tfc.tensor_scatter_nd_max(x, i, up), tfc.tensor_scatter_nd_min(x, i, up)]
    got = run_both(outs, {x: t, i: idx, up: u})
    want = [np.zeros_like(t), t.copy(), t.copy(), t.copy(), t.copy(), t.copy()]
    for k, (a, b) in enumerate(idx):  # in order: the last duplicate wins an update
        want[0][a, b] += u[k]
        want[1][a, b] += u[k]
        want[2][a, b] -= u[k]
        want[3][a, b] = u[k]
        want[4][a, b] = np.maximum(want[4][a, b], u[k])
        want[5][a, b] = np.minimum(want[5][a, b], u[k])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_scatter_nd_of_whole_elements_and_an_untouched_minus_inf() -> None:
    """Tuples naming elements (K = rank); max leaves untouched rows exactly as they were
    (-inf stays -inf, not the empty segment's -FLT_MAX)."""
    t = np.array([-np.inf, 1.0, 2.0, 3.0], np.float32)
    got = run_both([tfc.scatter_nd([[3], [1], [3]], [1.0, 2.0, 4.0], [5]),
                    tfc.tensor_scatter_nd_max(t, [[1]], [5.0]),
                    tfc.tensor_scatter_nd_update(t, [[2], [0]], [7.0, 8.0])])
    np.testing.assert_array_equal(got[0], [0, 2, 0, 5, 0])
    np.testing.assert_array_equal(got[1], [-np.inf, 5, 2, 3])
    np.testing.assert_array_equal(got[2], [8, 1, 7, 3])


@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_scatter_tuples_out_of_range_are_errors(backend: str) -> None:
    x = tfc.placeholder(tfc.float32, [4])
    i = tfc.placeholder(tfc.int32, [None, 1])
    up = tfc.placeholder(tfc.float32, [None])
    add, line = tfc.tensor_scatter_nd_add(x, i, up), here()
    upd, uline = tfc.tensor_scatter_nd_update(x, i, up), here()
    feeds = {x: np.zeros(4, np.float32), i: np.array([[1], [4]], np.int32),
             up: np.ones(2, np.float32)}
    with tfc.Session(backend=backend) as s:
        with pytest.raises(ExecutionError, match=rf"test_segment_ops.py:{line}: " +
                           re.escape("scatter_add: index -1 is out of range [0, 4)")):
            s.run(add, feeds)
        with pytest.raises(ExecutionError, match=rf"test_segment_ops.py:{uline}: " +
                           re.escape("tensor_scatter_nd_update: indices[1] is outside "
                                     "the tensor's shape")):
            s.run(upd, feeds)
        feeds[i] = np.array([[-1], [0]], np.int32)  # negative: an error too (TF's)
        with pytest.raises(ExecutionError, match=re.escape("indices[0] is outside")):
            s.run(upd, feeds)


def test_scatter_build_errors() -> None:
    with pytest.raises(TfcError, match=rf"test_segment_ops.py:{here() + 1}: scatter_nd: "):
        tfc.scatter_nd([[0, 1, 2]], [1.0], [4, 4])
    with pytest.raises(TfcError, match="shape must be a list of Python ints"):
        tfc.scatter_nd([[0]], [1.0], tfc.placeholder(tfc.int32, [1]))
    with pytest.raises(TfcError, match="updates .* must have shape"):
        tfc.tensor_scatter_nd_update(np.zeros((4, 2), np.float32), [[0]], [1.0])


def _finite_difference_check(build, *arrays: np.ndarray, eps: float = 1e-6) -> None:
    """d(sum(out * w))/d(inputs) by ``tfc.gradients`` (reference backend) against central
    differences, for fixed random ``w``; f64, rtol 1e-6, atol 1e-8."""
    phs = [tfc.placeholder(tfc.float64, a.shape) for a in arrays]
    outs = build(*phs)
    rng = np.random.default_rng(0)
    loss = tfc.add_n([tfc.reduce_sum(tfc.multiply(o, tfc.constant(rng.normal(
        size=o.shape)))) for o in outs])
    grads = tfc.gradients(loss, phs)
    with tfc.Session(backend="reference") as s:
        got = s.run(grads, dict(zip(phs, arrays)))
        for k, a in enumerate(arrays):
            want = np.zeros_like(a)
            for j in np.ndindex(a.shape):
                vals = [x.copy() for x in arrays]
                vals[k][j] += eps
                up = s.run(loss, dict(zip(phs, vals)))
                vals[k][j] -= 2 * eps
                want[j] = (up - s.run(loss, dict(zip(phs, vals)))) / (2 * eps)
            np.testing.assert_allclose(got[k], want, rtol=1e-6, atol=1e-8)


def test_gradients_of_the_composites() -> None:
    """Mean, sqrt_n, scatter_nd, the update (to the winning duplicate and the rows it
    leaves), add/sub, max/min into a tensor (values away from ties)."""
    t = RNG.normal(size=(4, 2))
    u = RNG.normal(size=(3, 2))
    idx = np.array([[2], [0], [2]], np.int32)
    ids = np.array([1, 0, 1], np.int32)
    _finite_difference_check(lambda tt, uu: [
        tfc.math.unsorted_segment_mean(uu, ids, 3), tfc.math.unsorted_segment_sqrt_n(uu, ids, 3),
        tfc.math.segment_mean(uu, np.array([0, 0, 1]), num_segments=2),
        tfc.scatter_nd(idx, uu, [4, 2]), tfc.tensor_scatter_nd_update(tt, idx, uu),
        tfc.tensor_scatter_nd_add(tt, idx, uu), tfc.tensor_scatter_nd_sub(tt, idx, uu),
        tfc.tensor_scatter_nd_max(tt, idx, uu), tfc.tensor_scatter_nd_min(tt, idx, uu)],
        t, u)


def test_bincount_and_confusion_matrix() -> None:
    """TF's values (written out): static lengths, weights, maxlength dropping values,
    binary output; a confusion matrix with weights and with num_classes from constants."""
    a = np.array([1, 1, 3], np.int32)
    got = run_both([tfc.math.bincount(a), tfc.math.bincount(a, minlength=6),
                    tfc.math.bincount(a, maxlength=2),
                    tfc.math.bincount(a, weights=np.array([0.5, 0.25, 1], np.float32)),
                    tfc.math.bincount(np.array([[1, 1], [3, 0]], np.int32)),
                    tfc.math.bincount(a, dtype=tfc.float32),
                    tfc.math.bincount(a, binary_output=True),
                    tfc.math.confusion_matrix([0, 1, 2, 1], [0, 2, 2, 1], num_classes=4),
                    tfc.math.confusion_matrix([0, 1, 2, 1], [0, 2, 2, 1], num_classes=3,
                                              weights=np.array([1, 2, 3, 4], np.float32)),
                    tfc.math.confusion_matrix([0, 1], [0, 2], dtype=tfc.float32)])
    want = [[0, 2, 0, 1], [0, 2, 0, 1, 0, 0], [0, 2], [0, 0.75, 0, 1], [1, 2, 0, 1],
            [0, 2, 0, 1], [0, 1, 0, 1],
            [[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0]],
            [[1, 0, 0], [0, 4, 2], [0, 0, 3]], [[1, 0, 0], [0, 0, 1], [0, 0, 0]]]
    dtypes = [np.int32] * 3 + [np.float32, np.int32, np.float32, np.int32, np.int32,
                               np.int32, np.float32]
    for g, w, dt in zip(got, want, dtypes):
        assert g.dtype == dt
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_bincount_and_confusion_matrix_errors(backend: str) -> None:
    x = tfc.placeholder(tfc.int32, [None])
    b, line = tfc.math.bincount(x, minlength=3), here()
    c, cline = tfc.math.confusion_matrix(x, x, num_classes=3), here()
    with tfc.Session(backend=backend) as s:
        for bad in ([1, -1, 2], [1, 3, 2]):
            with pytest.raises(ExecutionError, match=rf"test_segment_ops.py:{line}: " +
                               re.escape("bincount: arr[1] is negative or not below "
                                         "minlength=3")):
                s.run(b, {x: np.array(bad, np.int32)})
            with pytest.raises(ExecutionError, match=rf"test_segment_ops.py:{cline}: " +
                               re.escape("confusion_matrix: labels[1] or predictions[1] is "
                                         "outside [0, 3)")):
                s.run(c, {x: np.array(bad, np.int32)})
    with pytest.raises(TfcError, match="the output length must be static"):
        tfc.math.bincount(x)
    with pytest.raises(TfcError, match="num_classes must be static"):
        tfc.math.confusion_matrix(x, x)


@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_a_batch_of_updates_unlike_constant_indices_is_an_error(backend: str) -> None:
    """Constant indices against a symbolic batch of updates: another size at run time
    fails (TF's shape error) instead of leaving updates out."""
    u = tfc.placeholder(tfc.float32, [None, 2])
    t = np.zeros((4, 2), np.float32)
    outs = [tfc.tensor_scatter_nd_update(t, [[1], [3]], u),
            tfc.tensor_scatter_nd_add(t, [[1], [3]], u)]
    with tfc.Session(backend=backend) as s:
        for y in outs:
            with pytest.raises(ExecutionError, match="reshape|scatter_add"):
                s.run(y, {u: np.ones((3, 2), np.float32)})
            assert s.run(y, {u: np.ones((2, 2), np.float32)}).sum() == 4
