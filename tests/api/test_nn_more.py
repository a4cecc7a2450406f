"""tf.nn's swish/silu, in_top_k, log_poisson_loss, weighted_cross_entropy_with_logits,
local_response_normalization, sufficient_statistics and normalize_moments, softmax's
``axis=None``/``dim``, and the namespace itself (``__all__``, ``dir``, star import): values
against numpy written from TF's formulas, on both backends; gradients against central
finite differences; bad input as errors at the user's line."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch

BACKENDS = ["reference", "llvm"]
RNG = np.random.default_rng(7)
X = RNG.uniform(-4, 4, (3, 5))
Z = RNG.uniform(0, 1, (3, 5))
IMG = RNG.uniform(-2, 2, (2, 2, 3, 6))
COUNTS = np.array([0.0, 0.5, 1.0, 1.5, 3.0])


def np_lrn(x: np.ndarray, r: int, bias: float, alpha: float, beta: float) -> np.ndarray:
    c = x.shape[-1]
    sq = np.stack([(x[..., max(0, d - r):d + r + 1] ** 2).sum(-1) for d in range(c)], -1)
    return x / (bias + alpha * sq) ** beta


def np_poisson(z: np.ndarray, c: np.ndarray, full: bool) -> np.ndarray:
    out = np.exp(c) - c * z
    if full:
        with np.errstate(divide="ignore", invalid="ignore"):
            st = z * np.log(z) - z + 0.5 * np.log(2 * np.pi * z)
        out = out + np.where((z >= 0) & (z <= 1), 0.0, st)
    return out


def np_wxent(z: np.ndarray, x: np.ndarray, q: float) -> np.ndarray:
    return (1 - z) * x + (1 + (q - 1) * z) * (np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0))


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def np_suff_moments(x: np.ndarray, axes, shift: float):
    n = np.prod([x.shape[a] for a in axes])
    m = (x - shift).sum(tuple(axes)) / n
    return m + shift, ((x - shift) ** 2).sum(tuple(axes)) / n - m * m


# name -> (tfc function of placeholders (x [3,5], z [3,5], img [2,2,3,6]), numpy reference)
CASES = {
    "swish": (lambda x, z, i: tfc.nn.swish(x), lambda x, z, i: x * np_sigmoid(x)),
    "silu beta": (lambda x, z, i: tfc.nn.silu(x, 1.5), lambda x, z, i: x * np_sigmoid(1.5 * x)),
    "swish tensor beta": (lambda x, z, i: tfc.nn.swish(x, tfc.reduce_mean(z)),
                          lambda x, z, i: x * np_sigmoid(z.mean() * x)),
    "log_poisson": (lambda x, z, i: tfc.nn.log_poisson_loss(z * 3.0, x),
                    lambda x, z, i: np_poisson(z * 3, x, False)),
    "log_poisson full": (lambda x, z, i: tfc.nn.log_poisson_loss(z * 3.0, x, True),
                         lambda x, z, i: np_poisson(z * 3, x, True)),
    "weighted xent": (lambda x, z, i: tfc.nn.weighted_cross_entropy_with_logits(z, x, 1.5),
                      lambda x, z, i: np_wxent(z, x, 1.5)),
    "weighted xent targets": (
        lambda x, z, i: tfc.nn.weighted_cross_entropy_with_logits(
            logits=x, pos_weight=0.25, targets=z),
        lambda x, z, i: np_wxent(z, x, 0.25)),
    "lrn": (lambda x, z, i: tfc.nn.lrn(i, 2, 1.0, 0.5, 0.5),
            lambda x, z, i: np_lrn(i, 2, 1.0, 0.5, 0.5)),
    "lrn beta 1": (lambda x, z, i: tfc.nn.local_response_normalization(i, 1, 2.0, 0.25, 1.0),
                   lambda x, z, i: np_lrn(i, 1, 2.0, 0.25, 1.0)),
    "lrn beta 0.75": (lambda x, z, i: tfc.nn.lrn(i, 0, 1.5, 1.0, 0.75),
                      lambda x, z, i: np_lrn(i, 0, 1.5, 1.0, 0.75)),
    "moments shifted": (
        lambda x, z, i: tfc.nn.normalize_moments(*tfc.nn.sufficient_statistics(i, [0, 2],
                                                                               0.25)),
        lambda x, z, i: np_suff_moments(i, [0, 2], 0.25)),
    "moments": (lambda x, z, i: tfc.nn.normalize_moments(*tfc.nn.sufficient_statistics(
        x, [-1])), lambda x, z, i: np_suff_moments(x, [1], 0.0)),
    "softmax axis=None": (lambda x, z, i: tfc.nn.softmax(x, axis=None),
                          lambda x, z, i: np.exp(x) / np.exp(x).sum(-1, keepdims=True)),
    "log_softmax dim=0": (lambda x, z, i: tfc.nn.log_softmax(x, dim=0),
                          lambda x, z, i: x - np.log(np.exp(x).sum(0, keepdims=True))),
}


NAMES = list(CASES)


@pytest.mark.parametrize("names", [NAMES[::2], NAMES[1::2]])
@pytest.mark.parametrize("backend", BACKENDS)
def test_values_match_tf_formulas_in_numpy(backend, names):
    """f64: within 1e-14 relative of TF's formulas evaluated by numpy (a few roundings
    each; LRN's window sums are a matmul with a 0/1 band, numpy's an explicit sum)."""
    with tfc.Graph().as_default():
        px = tfc.placeholder(tfc.float64, [None, 5])
        pz = tfc.placeholder(tfc.float64, [None, 5])
        pi = tfc.placeholder(tfc.float64, [2, 2, 3, 6])
        outs = {k: CASES[k][0](px, pz, pi) for k in names}
        with tfc.Session(backend=backend) as sess:
            got = sess.run(outs, {px: X, pz: Z, pi: IMG})
    for k in names:
        ref = CASES[k][1]
        np.testing.assert_allclose(got[k], ref(X, Z, IMG), rtol=1e-14, atol=1e-15,
                                   err_msg=k)


def test_sufficient_statistics_returns_tfs_four_values():
    """(count in x's dtype, sum(x - shift), sum((x - shift)^2), shift), keepdims kept; a
    symbolic dim among the axes is counted at run time; no shift gives None."""
    x = tfc.placeholder(tfc.float32, [None, 4])
    cnt, s, ss, sh = tfc.nn.sufficient_statistics(x, [0, 1], shift=1.0, keepdims=True)
    cnt2, s2, _, none = tfc.nn.sufficient_statistics(x, [1])
    assert none is None and cnt.dtype == tfc.float32 and s.shape == (1, 1)
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    with tfc.Session() as sess:
        c, vs, vss, vsh, c2, vs2 = sess.run([cnt, s, ss, sh, cnt2, s2], {x: data})
    assert c == 12 and c2 == 4 and vsh == 1.0
    np.testing.assert_array_equal(vs, [[(data - 1).sum()]])
    np.testing.assert_array_equal(vss, [[((data - 1) ** 2).sum()]])
    np.testing.assert_array_equal(vs2, data.sum(1))


def numeric_gradient(f, x: np.ndarray, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        out[i] = ((w * np.asarray(f(hi))).sum() - (w * np.asarray(f(lo))).sum()) / (2 * eps)
    return out


def outputs(y):
    """A function's results as a list (normalize_moments gives two)."""
    return list(y) if isinstance(y, tuple) else [y]


GRAD = ["swish", "silu beta", "swish tensor beta", "log_poisson full", "weighted xent",
        "lrn", "lrn beta 1", "lrn beta 0.75", "moments shifted"]


@pytest.mark.parametrize("backend, names", [("reference", GRAD), ("llvm", ["silu beta",
                                                                          "lrn beta 0.75"])])
def test_gradients_match_finite_differences(backend, names):
    """d sum(w * f) / d(x, z, img) against central differences of the numpy formulas
    (f64, eps 1e-6: rtol 1e-6). llvm: two of them (every part is a registry op whose llvm
    gradient has its own tests; the reference checks them all)."""
    ws = {k: [RNG.uniform(0.5, 1.5, np.shape(r)) for r in outputs(CASES[k][1](X, Z, IMG))]
          for k in names}
    with tfc.Graph().as_default():
        ps = [tfc.placeholder(tfc.float64, s) for s in ([None, 5], [None, 5], [2, 2, 3, 6])]
        fetch = {}
        for k in names:
            ys = outputs(CASES[k][0](*ps))
            loss = tfc.add_n([tfc.reduce_sum(y * wi) for y, wi in zip(ys, ws[k])])
            fetch[k] = [g if g is not None else tfc.zeros_like(p)
                        for g, p in zip(tfc.gradients(loss, ps), ps)]
        with tfc.Session(backend=backend) as sess:
            got = sess.run(fetch, dict(zip(ps, (X, Z, IMG))))
    for k in names:
        def scalar(x, z, i, _ref=CASES[k][1], _w=ws[k]):
            return sum((wi * o).sum() for wi, o in zip(_w, outputs(_ref(x, z, i))))
        for j, base in enumerate((X, Z, IMG)):
            def f(v, _j=j):
                args = [X, Z, IMG]
                args[_j] = v
                return scalar(*args)
            want = numeric_gradient(f, base, np.ones(()))
            np.testing.assert_allclose(got[k][j], want, rtol=1e-6, atol=1e-8,
                                       err_msg=f"{k} d/input{j}")


TOPK_P = np.array([[1.2, -0.3, 2.8, 5.2], [0.1, 0.0, 0.0, 0.0], [0.0, 0.5, 0.3, 0.3],
                   [np.nan, 1, 2, 3], [1, np.inf, 2, 3], [-np.inf, 1, 2, 3], [1, 1, 1, 1],
                   [1, 2, 3, 4]], np.float32)
TOPK_T = np.array([0, 1, 3, 1, 0, 1, 2, 7])
# TF 2.21's answers (tf.compat.v1.nn.in_top_k): ties count in; a row with any non-finite
# score, or a target out of range, is False whatever k
TOPK_WANT = {1: [0, 0, 0, 0, 0, 0, 1, 0], 2: [0, 1, 1, 0, 0, 0, 1, 0],
             3: [1, 1, 1, 0, 0, 0, 1, 0], 0: [0] * 8}


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_top_k_ties_nonfinite_rows_and_both_argument_orders(backend):
    p = tfc.placeholder(tfc.float32, [None, 4])
    t = tfc.placeholder(tfc.int64, [None])
    outs = {k: tfc.nn.in_top_k(p, t, k) for k in TOPK_WANT}
    outs["tf2"] = tfc.math.in_top_k(t, p, 2)              # TF2's (targets, predictions)
    outs["kw"] = tfc.nn.in_top_k(targets=t, predictions=p, k=2)
    with tfc.Session(backend=backend) as sess:
        got = sess.run(outs, {p: TOPK_P, t: TOPK_T})
    for k, want in TOPK_WANT.items():
        np.testing.assert_array_equal(got[k], np.array(want, bool), err_msg=f"k={k}")
    np.testing.assert_array_equal(got["tf2"], np.array(TOPK_WANT[2], bool))
    np.testing.assert_array_equal(got["kw"], np.array(TOPK_WANT[2], bool))


# TF's tf.nn names that tfc has, and names tfc.nn must not show (its own imports)
LEAKED = {"np", "DType", "Sequence", "annotations", "apply", "convert_to_tensor", "Tensor",
          "TensorLike", "TypeMismatch", "Variable"}


def test_nn_namespace_is_tfs_names_only():
    """``dir(tfc.nn)`` and ``from tfc.nn import *`` give the tf.nn names, none of the
    module's helpers; every public function defined in the module is listed (a function
    added without its ``__all__`` entry fails here)."""
    import tfc.api.nn as mod
    assert not LEAKED & set(dir(tfc.nn)), LEAKED & set(dir(tfc.nn))
    assert set(dir(tfc.nn)) == set(mod.__all__)
    public = {n for n, v in vars(mod).items() if not n.startswith("_")
              and inspect.isfunction(v) and v.__module__.startswith("tfc.")
              and n not in LEAKED}
    assert public <= set(mod.__all__), public - set(mod.__all__)
    scope: dict = {}
    exec("from tfc.nn import *", scope)
    names = set(scope) - {"__builtins__"}
    assert names == set(mod.__all__) and not LEAKED & names
    for n in ("relu", "softmax", "swish", "silu", "in_top_k", "lrn", "moments", "top_k"):
        assert scope[n] is getattr(tfc.nn, n)


HERE = os.path.basename(__file__)


@pytest.mark.parametrize("build, message", [
    (lambda x, t: tfc.nn.in_top_k(x, tfc.cast(t, tfc.float32), 1), "targets must be"),
    (lambda x, t: tfc.nn.in_top_k(x[0], t, 1), "predictions must be"),
    (lambda x, t: tfc.nn.in_top_k(x, t, 1.5), "k must be a Python int"),
    (lambda x, t: tfc.nn.in_top_k(tfc.placeholder(tfc.float32, [2, None]), t, 1),
     "must be static"),
    (lambda x, t: tfc.nn.swish(t), "float tensors"),
    (lambda x, t: tfc.nn.log_poisson_loss(x[:, :2], x), "same shape"),
    (lambda x, t: tfc.nn.log_poisson_loss(tfc.cast(x, tfc.float64), x), "one dtype"),
    (lambda x, t: tfc.nn.weighted_cross_entropy_with_logits(x, x), "are required"),
    (lambda x, t: tfc.nn.weighted_cross_entropy_with_logits(x, x[:, :2], 1.0), "same shape"),
    (lambda x, t: tfc.nn.weighted_cross_entropy_with_logits(x, x, 2.0, targets=x),
     "not both"),
    (lambda x, t: tfc.nn.lrn(x), "4-D float"),
    (lambda x, t: tfc.nn.lrn(tfc.reshape(x, [1, 2, 1, 5]), depth_radius=-1),
     "depth_radius"),
    (lambda x, t: tfc.nn.sufficient_statistics(x, [2]), "out of range"),
    (lambda x, t: tfc.nn.softmax(x, axis=0, dim=1), "not both"),
])
def test_bad_input_is_a_clear_error_at_the_users_line(build, message):
    x = tfc.placeholder(tfc.float32, [2, 5])
    t = tfc.placeholder(tfc.int32, [2])
    with pytest.raises(TypeMismatch, match=message) as e:
        build(x, t)
    assert HERE in str(e.value), str(e.value)
