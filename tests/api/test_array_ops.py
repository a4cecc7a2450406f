"""The array ops of ``tfc.api.array_ops`` through ``Session`` (the LLVM backend): values
against numpy, gradients against finite differences or closed forms, symbolic batch dims,
and errors at the user's line. Exact (``assert_array_equal``) unless a tolerance is
stated: moving data, scans in order and sorts compute what numpy does bit for bit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError, TfcError

RNG = np.random.default_rng(11)
HERE = "test_array_ops.py"


def run(fetches, feeds=None):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to the reference warns: not here
        with tfc.Session() as s:
            return s.run(fetches, feeds or {})


def test_scans_on_a_symbolic_batch() -> None:
    x = tfc.placeholder(tfc.float32, [None, 7])
    xv = RNG.normal(size=(5, 7)).astype(np.float32)
    got = run([tfc.cumsum(x, axis=1), tfc.math.cumprod(x, axis=0, exclusive=True),
               tfc.cumsum(x, axis=1, exclusive=True, reverse=True)], {x: xv})
    np.testing.assert_array_equal(got[0], np.cumsum(xv, axis=1))
    want = np.concatenate([np.ones((1, 7), np.float32), np.cumprod(xv, axis=0)[:-1]])
    np.testing.assert_array_equal(got[1], want)
    rev = np.flip(np.cumsum(np.flip(xv, 1), axis=1), 1)
    np.testing.assert_array_equal(got[2], np.concatenate([rev[:, 1:], np.zeros((5, 1))], 1)
                                  .astype(np.float32))


def test_cumsum_of_negative_zero_is_plus_zero_natively() -> None:
    x = tfc.placeholder(tfc.float32, [None])
    got = run(tfc.cumsum(x), {x: np.array([-0.0, -0.0], np.float32)})
    assert not np.signbit(got).any(), got


def test_cumprod_gradient_with_a_zero() -> None:
    x = tfc.constant(np.array([2.0, 0.0, 3.0, 4.0]))
    (g,) = tfc.gradients(tfc.reduce_sum(tfc.math.cumprod(x)), [x])
    # d/dx_k sum_i prod_{j<=i} x_j: x1 = 0 kills every product through it but its own term
    np.testing.assert_allclose(run(g), [1.0, 2 + 6 + 24, 0.0, 0.0], rtol=1e-15)


def test_sort_argsort_and_top_k_order_ties_and_nan() -> None:
    xv = np.array([[3, np.nan, 1, 3, -0.0, 0.0, np.nan, -np.inf, np.inf, 1],
                   [5, 5, 5, 5, 5, 5, 5, 5, 5, 5]], np.float32)
    x = tfc.placeholder(tfc.float32, [None, 10])
    top = tfc.nn.top_k(x, k=4)
    got = run([tfc.sort(x), tfc.argsort(x, direction="DESCENDING"), top.values, top.indices],
              {x: xv})
    np.testing.assert_array_equal(got[0], np.sort(xv, axis=1))  # NaN last, as numpy
    desc = [[1, 6, 8, 0, 3, 2, 9, 4, 5, 7], list(range(10))]
    np.testing.assert_array_equal(got[1], desc)
    np.testing.assert_array_equal(got[3], np.array(desc)[:, :4])
    np.testing.assert_array_equal(got[2], np.take_along_axis(xv, got[3], axis=1))
    assert got[1].dtype == np.int32


def test_top_k_gradient_goes_to_the_chosen() -> None:
    x = tfc.constant(np.array([[1.0, 4.0, 2.0, 8.0]]))
    (g,) = tfc.gradients(tfc.reduce_sum(tfc.multiply(tfc.math.top_k(x, 2).values,
                                                     tfc.constant(np.array([[10.0, 1.0]])))), [x])
    np.testing.assert_array_equal(run(g), [[0, 1, 0, 10]])


def test_reverse_unstack_eye_sequence_mask() -> None:
    xv = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    x = tfc.placeholder(tfc.float32, [None, 3, 4])
    parts = tfc.unstack(x, axis=1)
    got = run([tfc.reverse(x, [0, 2]), tfc.reverse(x, -2), *parts,
               tfc.eye(2, 3, batch_shape=[2], dtype=tfc.int32),
               tfc.sequence_mask(tfc.constant([0, 2, 3]), 4, dtype=tfc.float32),
               tfc.sequence_mask([1, 3])], {x: xv})
    np.testing.assert_array_equal(got[0], xv[::-1, :, ::-1])
    np.testing.assert_array_equal(got[1], xv[:, ::-1])
    for i in range(3):
        np.testing.assert_array_equal(got[2 + i], xv[:, i])
    np.testing.assert_array_equal(got[5], np.broadcast_to(np.eye(2, 3, dtype=np.int32),
                                                          (2, 2, 3)))
    np.testing.assert_array_equal(got[6], [[0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])
    np.testing.assert_array_equal(got[7], [[True, False, False], [True, True, True]])


def test_linspace_is_tfs_formula() -> None:
    got = run([tfc.linspace(0.1, 1.7, 7), tfc.linspace(tfc.constant(0.1), 1.7, 7),
               tfc.linspace(2.0, 3.0, 1), tfc.linspace(2.0, 3.0, 0)])
    s, e = np.float32(0.1), np.float32(1.7)
    d = (e - s) / np.float32(6)
    want = np.array([s, *(s + d * np.arange(1, 6, dtype=np.float32)), e], np.float32)
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(got[1], want)
    np.testing.assert_allclose(got[0], np.linspace(0.1, 1.7, 7), rtol=2e-7)
    assert got[2].tolist() == [2.0] and got[3].shape == (0,)


def test_gather_nd_values_gradient_and_bad_index() -> None:
    pv = RNG.normal(size=(3, 4, 2))
    p = tfc.placeholder(tfc.float64, [3, 4, 2])
    idx = tfc.placeholder(tfc.int32, [None, 2])
    iv = np.array([[2, 3], [0, 1], [2, 3]], np.int32)
    y = tfc.gather_nd(p, idx)
    (g,) = tfc.gradients(tfc.reduce_sum(tfc.multiply(y, y)), [p])
    got = run([y, g, tfc.gather_nd(p, [[1, 0, 1]])], {p: pv, idx: iv})
    np.testing.assert_array_equal(got[0], pv[iv[:, 0], iv[:, 1]])
    want = np.zeros_like(pv)
    np.add.at(want, (iv[:, 0], iv[:, 1]), 2 * pv[iv[:, 0], iv[:, 1]])
    np.testing.assert_allclose(got[1], want, rtol=1e-15)
    np.testing.assert_array_equal(got[2], [pv[1, 0, 1]])
    with pytest.raises(ExecutionError, match="index -1"):  # [0, 5] would be row 5: valid
        run(y, {p: pv, idx: np.array([[0, 5]], np.int32)})


def test_reduce_logsumexp_as_tf() -> None:
    xv = np.array([[1.0, 2.0, 3.0], [-np.inf, -np.inf, -np.inf], [1000.0, 1000.0, -5.0],
                   [np.inf, 0.0, 1.0]], np.float32)
    x = tfc.placeholder(tfc.float32, [None, 3])
    lse = tfc.reduce_logsumexp(x, axis=1)
    got = run([lse, tfc.math.reduce_logsumexp(x, axis=1, keepdims=True)], {x: xv})
    with np.errstate(all="ignore"):
        m = np.where(np.isfinite(xv.max(1)), xv.max(1), 0)
        want = np.log(np.exp(xv - m[:, None]).sum(1)) + m
    np.testing.assert_allclose(got[0], want, rtol=1e-6)
    assert got[0][1] == -np.inf and got[0][3] == np.inf
    assert got[1].shape == (4, 1)
    xd = tfc.constant(RNG.normal(size=(2, 5)))
    (g,) = tfc.gradients(tfc.reduce_sum(tfc.reduce_logsumexp(xd, axis=1)), [xd])
    v, gv = run([xd, g])
    e = np.exp(v - v.max(1, keepdims=True))
    np.testing.assert_allclose(gv, e / e.sum(1, keepdims=True), rtol=1e-14)


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,jk->bki", [(2, 3, 4), (4, 5)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,kj", [(2, 3), (4, 3)]),
    ("abc,cd->", [(2, 3, 4), (4, 2)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij->ji", [(2, 3)]),
    ("ijk->j", [(2, 3, 4)]),
])
def test_einsum_matches_numpy(eq, shapes) -> None:
    arrays = [RNG.normal(size=s) for s in shapes]
    got = run(tfc.einsum(eq, *[tfc.constant(a) for a in arrays]))
    np.testing.assert_allclose(got, np.einsum(eq, *arrays), rtol=1e-12, atol=1e-12)


def test_einsum_and_tensordot_on_a_symbolic_batch_with_gradients() -> None:
    x = tfc.placeholder(tfc.float64, [None, 3, 4])
    w = tfc.constant(RNG.normal(size=(4, 5)))
    xv = RNG.normal(size=(6, 3, 4))
    y = tfc.einsum("bij,jk->bik", x, w)
    t = tfc.tensordot(x, w, axes=[[2], [0]])
    t1 = tfc.tensordot(x, w, 1)
    (g,) = tfc.gradients(tfc.reduce_sum(y), [x])
    got = run([y, t, t1, g, w], {x: xv})
    want = np.einsum("bij,jk->bik", xv, got[4])
    for v in got[:3]:
        np.testing.assert_allclose(v, want, rtol=1e-12)
    np.testing.assert_allclose(got[3], np.broadcast_to(got[4].sum(1), (6, 3, 4)), rtol=1e-12)
    a, b = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(4, 3, 5))
    got = run(tfc.tensordot(tfc.constant(a), tfc.constant(b), axes=([1, 2], [1, 0])))
    np.testing.assert_allclose(got, np.tensordot(a, b, axes=([1, 2], [1, 0])), rtol=1e-12)


def test_bad_input_names_the_users_line() -> None:
    x = tfc.constant(np.zeros((2, 3), np.float32))
    cases = [
        (lambda: tfc.einsum("ijk,jk->i", x, x), "rank 2"),
        (lambda: tfc.einsum("ii->i", tfc.constant(np.zeros((3, 3)))), "trace or diagonal"),
        (lambda: tfc.einsum("...i,i->...", x, x), "ellipsis"),
        (lambda: tfc.einsum("ij,ij->i", x, tfc.constant(np.zeros((2, 4), np.float32))),
         "same size"),
        (lambda: tfc.math.top_k(x, 4), "k=4 is larger"),
        (lambda: tfc.cumsum(x, axis=2), "axis"),
        (lambda: tfc.reverse(x, [2]), "out of range"),
        (lambda: tfc.reverse(x, [1, -1]), "twice"),
        (lambda: tfc.reverse(x, tfc.constant([1])), "must be a Python int"),
        (lambda: tfc.gather_nd(x, [[0, 1, 2]]), "last dim of indices"),
        (lambda: tfc.tensordot(x, x, 3), "axes=3"),
        (lambda: tfc.sort(x, direction="UP"), "direction"),
        (lambda: tfc.unstack(tfc.placeholder(tfc.float32, [None, 2])), "pass num"),
        (lambda: tfc.sequence_mask(tfc.constant([1, 2])), "pass maxlen"),
    ]
    for make, text in cases:
        with pytest.raises(TfcError, match=text) as e:
            make()
        assert HERE in str(e.value), (text, str(e.value))


def test_top_k_larger_than_a_symbolic_axis_is_a_run_time_error() -> None:
    x = tfc.placeholder(tfc.float32, [2, None])
    y = tfc.math.top_k(x, 3).values
    with pytest.raises(TfcError, match="k=3"):
        run(y, {x: np.zeros((2, 2), np.float32)})
