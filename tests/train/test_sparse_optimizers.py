"""Sparse updates of every optimizer against a numpy reference of TF1's sparse kernels.

A gradient from ``tfc.gather`` of a variable is an ``IndexedSlices``. TF1 first sums its
repeated indices (``Optimizer._apply_sparse_duplicate_indices``), then applies the sparse
kernel: SGD, Momentum, AdaGrad and RMSProp change only the touched rows and their slots;
Adam (``AdamOptimizer._apply_sparse``) decays m and v everywhere, like the dense update.
"""

from __future__ import annotations

import numpy as np
import pytest

import tfc

TOL = 1e-10  # f64


def F32(v):
    """A Python float hyperparameter as TF1's optimizers take it: a float32 tensor."""
    return float(np.float32(v))

ROWS, WIDTH = 7, 3
STEPS = [np.array([1, 4, 1, 3], np.int32), np.array([0, 4, 4, 4], np.int32),
         np.array([6, 1, 2, 1], np.int32)]


def np_momentum(p, g, s, lr=F32(0.1), mu=F32(0.9), nesterov=False):
    s["accum"] = s["accum"] * mu + g
    return p - (g * lr + s["accum"] * mu * lr if nesterov else s["accum"] * lr)


def np_adagrad(p, g, s, lr=F32(0.1)):
    s["acc"] = s["acc"] + g * g
    return p - g * lr / np.sqrt(s["acc"])


def np_rmsprop(p, g, s, lr=F32(0.01), rho=F32(0.9), mu=F32(0.5), eps=F32(1e-10),
               centered=False):
    s["ms"] = s["ms"] + (g * g - s["ms"]) * (1 - rho)
    denom = s["ms"]
    if centered:
        s["mg"] = s["mg"] + (g - s["mg"]) * (1 - rho)
        denom = s["ms"] - s["mg"] ** 2
    s["mom"] = s["mom"] * mu + g * lr / np.sqrt(denom + eps)
    return p - s["mom"]


def np_adam(p, g, s, lr=F32(0.1), b1=F32(0.9), b2=F32(0.999), eps=F32(1e-8)):
    t = s["t"] = s["t"] + 1
    lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    s["m"] = s["m"] + (g - s["m"]) * (1 - b1)
    s["v"] = s["v"] + (g * g - s["v"]) * (1 - b2)
    return p - lr_t * s["m"] / (np.sqrt(s["v"]) + eps)


def np_sgd(p, g, s, lr=F32(0.1)):
    return p - lr * g


# name: (optimizer, numpy step, initial slots, whether only touched rows change)
CASES = {
    "sgd": (lambda: tfc.train.GradientDescentOptimizer(0.1), np_sgd, {}, True),
    "momentum": (lambda: tfc.train.MomentumOptimizer(0.1, 0.9), np_momentum,
                 {"accum": 0.0}, True),
    "nesterov": (lambda: tfc.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
                 lambda p, g, s: np_momentum(p, g, s, nesterov=True), {"accum": 0.0}, True),
    "adagrad": (lambda: tfc.train.AdagradOptimizer(0.1), np_adagrad, {"acc": 0.1}, True),
    "rmsprop": (lambda: tfc.train.RMSPropOptimizer(0.01, momentum=0.5), np_rmsprop,
                {"ms": 1.0, "mom": 0.0}, True),
    "rmsprop_centered": (lambda: tfc.train.RMSPropOptimizer(0.01, momentum=0.5,
                                                            centered=True),
                         lambda p, g, s: np_rmsprop(p, g, s, centered=True),
                         {"ms": 1.0, "mg": 0.0, "mom": 0.0}, True),
    "adam": (lambda: tfc.train.AdamOptimizer(0.1), np_adam, {"m": 0.0, "v": 0.0, "t": 0},
             False),
}


def table0() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(ROWS, WIDTH))


WEIGHTS = np.random.default_rng(4).normal(size=(4, WIDTH))


def np_run(name: str) -> np.ndarray:
    """The reference: per step, the occurrence gradients 2 * row * w summed per unique
    id, then the kernel on those rows (sparse) or on the zero-filled table (Adam)."""
    _, np_step, init, sparse = CASES[name]
    p = table0()
    slots = {k: (np.full_like(p, v) if k != "t" else 0) for k, v in init.items()}
    for ids in STEPS:
        g = np.zeros_like(p)
        np.add.at(g, ids, 2 * p[ids] * WEIGHTS)
        if sparse:
            rows = np.unique(ids)
            sub = {k: (v[rows].copy() if k != "t" else v) for k, v in slots.items()}
            p[rows] = np_step(p[rows], g[rows], sub)
            for k, v in sub.items():
                if k != "t":
                    slots[k][rows] = v
        else:
            p = np_step(p, g, slots)
    return p


def tfc_run(name: str, cluster: str | None = None) -> np.ndarray:
    make = CASES[name][0]
    with tfc.Graph().as_default():
        emb = tfc.Variable(table0(), name="emb")
        ids = tfc.placeholder(tfc.int32, [4], name="ids")
        rows = tfc.gather(emb, ids)
        loss = tfc.reduce_sum(rows * rows * WEIGHTS)
        train = make().minimize(loss)
        with tfc.Session() as sess:
            sess.run(tfc.global_variables_initializer())
            for step_ids in STEPS:
                sess.run(train, {ids: step_ids})
            return sess.run(emb)


@pytest.mark.parametrize("name", list(CASES))
def test_sparse_update_matches_tf1_sparse_kernel(name):
    got = tfc_run(name)
    want = np_run(name)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    if CASES[name][3]:  # row 5 is never touched
        np.testing.assert_array_equal(got[5], table0()[5])


@pytest.mark.parametrize("name", ["momentum", "rmsprop", "adagrad"])
def test_sparse_update_writes_scatters_not_dense_assigns(name):
    emb = tfc.Variable(np.ones((5, 2)), name="emb")
    grad = tfc.IndexedSlices(tfc.constant([3, 0, 3]), tfc.constant(np.ones((3, 2))),
                             emb.value())
    train = CASES[name][0]().apply_gradients([(grad, emb)])
    kinds = {op.kind for op in train.ir_ops()}
    assert kinds == {"var.scatter_add", "var.scatter_sub"}


def test_owned_weights_make_padding_touch_nothing():
    """Entries with owned = 0 (a sharded gather's padding) leave their row alone even for
    Momentum, whose sparse update would otherwise decay and move a touched row."""
    emb = tfc.Variable(np.ones((4, 2)), name="emb")
    opt = tfc.train.MomentumOptimizer(0.1, 0.9)
    grad = tfc.IndexedSlices(tfc.constant([2, 0]), tfc.constant(np.array([[1.0, 1.0],
                                                                          [0.0, 0.0]])),
                             emb.value(), tfc.constant(np.array([1.0, 0.0])))
    train = opt.apply_gradients([(grad, emb)])
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        sess.run(train)
        sess.run(opt.get_slot(emb, "momentum").assign(np.full((4, 2), 5.0)))
        sess.run(train)
        got = sess.run(emb)
    # step 1: row 2 accum = 1, moves 0.1; step 2: accum 5 * 0.9 + 1 = 5.5, moves 0.55
    # (0.1 and 0.9 as float32s: TF1's hyperparameters)
    lr, mu = F32(0.1), F32(0.9)
    np.testing.assert_allclose(got[2], 1 - lr - (5 * mu + 1) * lr, rtol=1e-12)
    np.testing.assert_array_equal(got[[0, 1, 3]], np.ones((3, 2)))


def old_unique_rows(grad, var):
    """The n x n version ``unique_rows`` had (an argmax over an equality matrix): the
    oracle its O(n) replacement must agree with."""
    from tfc.api import ops
    from tfc.train.optimizers import UniqueRows
    row = list(var.shape[1:])
    idx = ops.reshape(grad.indices, [-1])
    values = ops.reshape(grad.values, [-1, *row])
    same = ops.cast(ops.equal(ops.expand_dims(idx, 1), ops.expand_dims(idx, 0)), var.dtype)
    owned = ops.ones_like(ops.cast(idx, var.dtype)) if grad.owned is None else ops.reshape(
        grad.owned, [-1])
    if grad.owned is not None:
        same = same * ops.expand_dims(owned, 0)
    first = ops.argmax(same, axis=1, output_type=idx.dtype)
    summed = ops.gather(tfc.apply("scatter_add", ops.zeros_like(values), first, values), first)
    count = ops.gather(tfc.apply("scatter_add", ops.zeros_like(owned), first, owned), first)
    share = owned / ops.maximum(count, 1.0)
    return UniqueRows(idx, summed, ops.reshape(share, [-1, *([1] * len(row))]))


def np_unique_rows(idx, values, owned):
    """numpy: per position, the owned values of its row summed, and owned / count."""
    same = (idx[:, None] == idx[None, :]) * owned[None, :]
    # a row nobody owns sums into position 0's slot (the old version's argmax of zeros)
    first = np.where(same.any(axis=1), same.argmax(axis=1), 0)
    into = np.zeros_like(values)
    np.add.at(into, first, values)
    summed = into[first]
    count = np.zeros(len(idx))
    np.add.at(count, first, owned)
    return summed, owned / np.maximum(count[first], 1.0)


@pytest.mark.parametrize("backend", ["llvm", "reference"])
@pytest.mark.parametrize("with_owned", [False, True])
def test_unique_rows_agrees_with_the_n_by_n_version(backend, with_owned):
    """f64: the sums and shares of ``unique_rows`` (``first_occurrence``) within 1e-12 of
    the n x n version's and of numpy's, repeated ids and padding (owned = 0) included."""
    from tfc.train.optimizers import unique_rows
    rng = np.random.default_rng(11)
    n = 300
    idx = rng.integers(0, 40, n).astype(np.int32)
    values = rng.normal(size=(n, 3))
    owned = (rng.random(n) < 0.8).astype(np.float64) if with_owned else np.ones(n)
    with tfc.Graph().as_default():
        emb = tfc.Variable(np.zeros((40, 3)), name="emb")
        grad = tfc.IndexedSlices(tfc.constant(idx), tfc.constant(values), emb.value(),
                                 tfc.constant(owned) if with_owned else None)
        new, old = unique_rows(grad, emb), old_unique_rows(grad, emb)
        with tfc.Session(backend=backend) as sess:
            got = sess.run([new.grad, new.share, old.grad, old.share])
    summed, share = np_unique_rows(idx, values, owned)
    for a, b in ((got[0], got[2]), (got[0], summed)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    for a, b in ((got[1], got[3]), (got[1][:, 0], share)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_unique_rows_builds_no_n_by_n_comparison():
    from tfc.train.optimizers import unique_rows
    with tfc.Graph().as_default() as g:
        emb = tfc.Variable(np.zeros((40, 3)), name="emb")
        i, v = tfc.placeholder(tfc.int32, [500]), tfc.placeholder(tfc.float64, [500, 3])
        u = unique_rows(tfc.IndexedSlices(i, v, emb.value()), emb)
        tfc.entry("u", feeds={"i": i, "v": v}, fetches={"g": u.grad, "s": u.share})
        text = str(g.as_module())
    assert "first_occurrence" in text
    assert "[500,500]" not in text.replace(" ", "")
