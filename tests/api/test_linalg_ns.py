"""tfc.linalg (diagonals, bands, trace, transposes, matvec, inv/det, norm, normalize),
tfc.norm, tfc.clip_by_norm and tfc.math's moments (tfc.api.linalg_ns): values against
numpy on both backends (data movement bit for bit: -0.0, inf and NaN included; arithmetic
within a few ulps of float64), gradients against central finite differences of the numpy
references, and bad input as errors at the user's line."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch

BACKENDS = ["reference", "llvm"]
RNG = np.random.default_rng(25)
A = RNG.normal(size=(2, 3, 4))       # a batch of 3x4 matrices
V = RNG.normal(size=(2, 3))          # a batch of vectors
SPECIAL = np.array([[-0.0, np.inf, np.nan, 1.5], [2.0, -np.inf, -0.0, np.nan],
                    [0.0, 3.0, -1.0, -0.0]])


def np_diag(v: np.ndarray, k: int = 0) -> np.ndarray:
    return np.stack([np.diag(row, k) for row in v])


def np_band(x: np.ndarray, lo: int, up: int) -> np.ndarray:
    i, j = np.ogrid[:x.shape[-2], :x.shape[-1]]
    keep = ((lo < 0) | (i - j <= lo)) & ((up < 0) | (j - i <= up))
    return np.where(keep, x, 0.0)


def np_spd(a: np.ndarray) -> np.ndarray:
    """A well-conditioned SPD matrix from the first 3 columns: ``a a^T / 4 + I``."""
    m = a[..., :3]
    return m @ np.swapaxes(m, -1, -2) / 4 + np.eye(3)


def spd(a):
    m = a[..., :3]
    return tfc.matmul(m, m, transpose_b=True) / 4.0 + np.eye(3)


def np_clip(x: np.ndarray, c: float, axes) -> np.ndarray:
    n = np.sqrt((x * x).sum(axis=None if axes is None else tuple(axes), keepdims=True))
    return x * c / np.maximum(n, c)


# name -> (tfc function of the placeholders (a, v), numpy function of (A, V), exact?)
CASES = {
    "diag_part": (lambda a, v: tfc.linalg.diag_part(a),
                  lambda a, v: np.diagonal(a, 0, -2, -1), True),
    "diag_part k=1": (lambda a, v: tfc.linalg.diag_part(a, k=1),
                      lambda a, v: np.diagonal(a, 1, -2, -1), True),
    "diag_part k=-2": (lambda a, v: tfc.linalg.diag_part(a, k=-2),
                       lambda a, v: np.diagonal(a, -2, -2, -1), True),
    "diag": (lambda a, v: tfc.linalg.diag(v), lambda a, v: np_diag(v), True),
    "diag k=2": (lambda a, v: tfc.linalg.diag(v, k=2), lambda a, v: np_diag(v, 2), True),
    "diag k=-1 rows": (lambda a, v: tfc.linalg.diag(v, k=-1, num_cols=5, padding_value=9),
                       lambda a, v: np.where(np.pad(np_diag(v, -1), [(0, 0), (0, 0), (0, 1)])
                                             == 0, 9.0, np.pad(np_diag(v, -1),
                                                               [(0, 0), (0, 0), (0, 1)])),
                       True),
    "trace": (lambda a, v: tfc.linalg.trace(a[:, :, :3]),
              lambda a, v: np.trace(a[:, :, :3], axis1=1, axis2=2), False),
    "band_part(1,0)": (lambda a, v: tfc.linalg.band_part(a, 1, 0),
                       lambda a, v: np_band(a, 1, 0), True),
    "band_part(-1,1)": (lambda a, v: tfc.linalg.band_part(a, -1, 1),
                        lambda a, v: np_band(a, -1, 1), True),
    "band_part(0,-1)": (lambda a, v: tfc.linalg.band_part(a, 0, -1),
                        lambda a, v: np_band(a, 0, -1), True),
    "matrix_transpose": (lambda a, v: tfc.linalg.matrix_transpose(a),
                         lambda a, v: np.swapaxes(a, -1, -2), True),
    "adjoint": (lambda a, v: tfc.linalg.adjoint(a), lambda a, v: np.swapaxes(a, -1, -2), True),
    "matvec": (lambda a, v: tfc.linalg.matvec(a, v, transpose_a=True),
               lambda a, v: np.einsum("bij,bi->bj", a, v), False),
    "matmul(adjoint_b)": (lambda a, v: tfc.linalg.matmul(a, a, adjoint_b=True),
                          lambda a, v: a @ np.swapaxes(a, -1, -2), False),
    "inv(adjoint)": (lambda a, v: tfc.linalg.inv(a[:, :, :3] + 3 * np.eye(3), adjoint=True),
                     lambda a, v: np.linalg.inv(np.swapaxes(a[:, :, :3] + 3 * np.eye(3), 1, 2)),
                     False),
    "det": (lambda a, v: tfc.linalg.det(a[:, :, 1:]),
            lambda a, v: np.linalg.det(a[:, :, 1:]), False),
    "cholesky_solve": (lambda a, v: tfc.linalg.cholesky_solve(
        tfc.linalg.cholesky(spd(a)), tfc.expand_dims(v, -1)),
        lambda a, v: np.linalg.solve(np_spd(a), v[..., None]), False),
    "logdet": (lambda a, v: tfc.linalg.logdet(spd(a)),
               lambda a, v: np.linalg.slogdet(np_spd(a))[1], False),
    "norm": (lambda a, v: tfc.norm(a), lambda a, v: np.linalg.norm(a.ravel()), False),
    "norm 1 axis=None": (lambda a, v: tfc.norm(a, ord=1),
                         lambda a, v: np.abs(a).sum(), False),
    "norm inf axis=1": (lambda a, v: tfc.linalg.norm(a, ord=np.inf, axis=1),
                        lambda a, v: np.abs(a).max(1), True),
    "norm 3 axis=-1": (lambda a, v: tfc.norm(a, ord=3, axis=-1),
                       lambda a, v: (np.abs(a) ** 3).sum(-1) ** (1 / 3), False),
    "norm fro": (lambda a, v: tfc.norm(a, ord="fro", axis=[1, 2]),
                 lambda a, v: np.linalg.norm(a, "fro", axis=(1, 2)), False),
    "norm 1 matrix": (lambda a, v: tfc.norm(a, ord=1, axis=(-2, -1)),
                      lambda a, v: np.linalg.norm(a, 1, axis=(1, 2)), False),
    "norm inf matrix keepdims": (
        lambda a, v: tfc.norm(a, ord=np.inf, axis=[1, 2], keepdims=True),
        lambda a, v: np.linalg.norm(a, np.inf, axis=(1, 2), keepdims=True), False),
    "norm inf matrix (2, 0)": (lambda a, v: tfc.norm(a, ord=np.inf, axis=(2, 0)),
                               lambda a, v: np.linalg.norm(a, np.inf, axis=(2, 0)), False),
    "normalize": (lambda a, v: tfc.linalg.normalize(a, axis=2)[0],
                  lambda a, v: a / np.linalg.norm(a, axis=2, keepdims=True), False),
    "l2_normalize": (lambda a, v: tfc.linalg.l2_normalize(a, axis=2),
                     lambda a, v: a / np.linalg.norm(a, axis=2, keepdims=True), False),
    "clip_by_norm": (lambda a, v: tfc.clip_by_norm(a, 1.5),
                     lambda a, v: np_clip(a, 1.5, None), False),
    "clip_by_norm axes": (lambda a, v: tfc.clip_by_norm(a, 1.5, axes=[2]),
                          lambda a, v: np_clip(a, 1.5, [2]), False),
    "clip_by_norm negative": (lambda a, v: tfc.clip_by_norm(a, -1.0, axes=[1, 2]),
                              lambda a, v: 0.0 * a, True),
    "reduce_variance": (lambda a, v: tfc.math.reduce_variance(a, axis=[0, 2]),
                        lambda a, v: a.var(axis=(0, 2)), False),
    "reduce_std": (lambda a, v: tfc.math.reduce_std(a, axis=1, keepdims=True),
                   lambda a, v: a.std(axis=1, keepdims=True), False),
    "reduce_euclidean_norm": (lambda a, v: tfc.math.reduce_euclidean_norm(a, -1),
                              lambda a, v: np.sqrt((a * a).sum(-1)), False),
}


def run(backend: str, fns: dict, a: np.ndarray, v: np.ndarray,
        batch: bool = True) -> dict:
    with tfc.Graph().as_default():
        pa = tfc.placeholder(tfc.float64, [None if batch else a.shape[0], *a.shape[1:]])
        pv = tfc.placeholder(tfc.float64, [None if batch else v.shape[0], *v.shape[1:]])
        outs = {k: fn(pa, pv) for k, fn in fns.items()}
        with tfc.Session(backend=backend) as sess:
            return sess.run(outs, {pa: a, pv: v})


NAMES = list(CASES)
CHUNKS = [NAMES[i::4] for i in range(4)]  # (4 graphs: each test well under a second)


@pytest.mark.parametrize("chunk", range(len(CHUNKS)))
@pytest.mark.parametrize("backend", BACKENDS)
def test_values_match_numpy(backend, chunk):
    """f64 with a symbolic batch dim: data movement bit for bit, the rest within 4e-15
    relative (a few roundings; the inverse within 1e-13)."""
    names = CHUNKS[chunk]
    got = run(backend, {k: CASES[k][0] for k in names}, A, V)
    for name in names:
        _, ref, exact = CASES[name]
        want = ref(A, V)
        assert got[name].shape == np.shape(want), name
        if exact:
            np.testing.assert_array_equal(got[name], want, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], want, rtol=1e-13 if "inv" in name or "chol"
                                       in name else 4e-15, atol=1e-15, err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_diagonals_and_bands_move_special_values_exactly(backend):
    """-0.0, inf and NaN come through diag_part, diag and band_part bit for bit (a
    ``gather`` and a ``where``, not a product with a 0/1 mask, which would turn inf into
    NaN and lose -0.0)."""
    s = SPECIAL[None]
    v = SPECIAL[:, :3]
    fns = {"dp": lambda a, _: tfc.linalg.diag_part(a, k=1),
           "d": lambda _, w: tfc.linalg.diag(w, k=1),
           "bp": lambda a, _: tfc.linalg.band_part(a, 0, 1)}
    got = run(backend, fns, s, v, batch=False)
    for name, want in (("dp", np.diagonal(s, 1, -2, -1)), ("d", np_diag(v, 1)),
                       ("bp", np_band(s, 0, 1))):
        g = got[name]
        assert g.tobytes() == np.asarray(want, np.float64).tobytes(), (name, g, want)


def numeric_gradient(f, x: np.ndarray, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """d sum(w * f(x)) / dx by central differences."""
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        out[i] = ((w * f(hi)).sum() - (w * f(lo)).sum()) / (2 * eps)
    return out


GRAD_CASES = ["diag_part k=1", "diag k=-1 rows", "trace", "band_part(-1,1)", "matvec",
              "inv(adjoint)", "det", "norm", "norm 1 axis=None", "norm inf axis=1",
              "norm 3 axis=-1", "norm fro", "norm 1 matrix", "norm inf matrix keepdims",
              "normalize", "clip_by_norm", "clip_by_norm axes", "reduce_variance",
              "reduce_std", "reduce_euclidean_norm", "cholesky_solve", "logdet"]
# llvm: the cases whose gradients differ in kind (a gather's scatter, a where, a max's
# selection, the safe sqrt); every part is a registry op whose llvm gradient kernels
# have their own tests, and the reference checks all of them
LLVM_GRAD_CASES = ["diag_part k=1", "diag k=-1 rows", "band_part(-1,1)", "clip_by_norm axes"]


@pytest.mark.parametrize("backend, names", [("reference", GRAD_CASES[:10]),
                                            ("reference", GRAD_CASES[10:]),
                                            ("llvm", LLVM_GRAD_CASES)])
def test_gradients_match_finite_differences(backend, names):
    """The gradient of sum(w * f) w.r.t. both inputs, against central differences of the
    numpy reference (eps 1e-6, f64: rtol 1e-6)."""
    wa = {k: RNG.uniform(0.5, 1.5, np.shape(CASES[k][1](A, V))) for k in names}
    with tfc.Graph().as_default():
        pa = tfc.placeholder(tfc.float64, [None, 3, 4])
        pv = tfc.placeholder(tfc.float64, [None, 3])
        grads = {}
        for k in names:
            y = CASES[k][0](pa, pv)
            ga, gv = tfc.gradients(tfc.reduce_sum(y * wa[k]), [pa, pv])
            grads[k] = [g if g is not None else tfc.zeros_like(p)
                        for g, p in ((ga, pa), (gv, pv))]
        with tfc.Session(backend=backend) as sess:
            got = sess.run(grads, {pa: A, pv: V})
    for k in names:
        ref, w = CASES[k][1], wa[k]
        want_a = numeric_gradient(lambda a: ref(a, V), A, w)
        want_v = numeric_gradient(lambda v: ref(A, v), V, w)
        np.testing.assert_allclose(got[k][0], want_a, rtol=1e-6, atol=1e-8, err_msg=k)
        np.testing.assert_allclose(got[k][1], want_v, rtol=1e-6, atol=1e-8, err_msg=k)


@pytest.mark.parametrize("backend", BACKENDS)
def test_norm_and_clip_at_zero_have_finite_gradients(backend):
    """clip_by_norm of a zero row: values 0 and the gradient clip/clip = 1 there, not NaN
    (as TF, whose safe sqrt ensures it; tfc's sqrt gradient is 0 where its upstream is 0
    as well); the norm's own gradient at 0 is NaN (sqrt'(0)), as TF's."""
    x = np.array([[0.0, 0.0], [3.0, 4.0]])
    with tfc.Graph().as_default():
        p = tfc.placeholder(tfc.float64, [2, 2])
        c = tfc.clip_by_norm(p, 1.0, axes=[1])
        n = tfc.norm(p, axis=1)
        gc = tfc.gradients(tfc.reduce_sum(c), p)[0]
        gn = tfc.gradients(tfc.reduce_sum(n), p)[0]
        with tfc.Session(backend=backend) as sess:
            vc, vgc, vgn = sess.run([c, gc, gn], {p: x})
    np.testing.assert_allclose(vc, [[0, 0], [0.6, 0.8]], rtol=1e-15)
    np.testing.assert_array_equal(vgc[0], [1.0, 1.0])
    np.testing.assert_allclose(vgc[1], [(1 - 0.36 - 0.48) / 5, (1 - 0.48 - 0.64) / 5],
                               rtol=1e-14)
    assert np.isnan(vgn[0]).all() and np.allclose(vgn[1], [0.6, 0.8])


def test_clip_by_norm_of_indexed_slices_and_a_tensor_clip():
    """An IndexedSlices keeps its indices (its values clipped); a tensor clip_norm below 0
    counts as 0, as TF's ``maximum(clip_norm, 0)``."""
    emb = tfc.Variable(np.arange(12.0).reshape(4, 3))
    g = tfc.gradients(tfc.reduce_sum(tfc.gather(emb, [1, 3]) * 10.0), emb)[0]
    clipped = tfc.clip_by_norm(g, 2.0, axes=[1])
    assert isinstance(clipped, tfc.IndexedSlices)
    c = tfc.placeholder(tfc.float64, [])
    t = tfc.clip_by_norm(tfc.constant(np.array([3.0, 4.0])), c)
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        vals, idx, neg = sess.run([clipped.values, clipped.indices, t], {c: -1.0})
        half = sess.run(t, {c: 2.5})
    np.testing.assert_allclose(vals, np.full((2, 3), 2.0 / np.sqrt(3)), rtol=1e-15)
    assert list(idx) == [1, 3]
    np.testing.assert_array_equal(neg, [0.0, 0.0])
    np.testing.assert_allclose(half, [1.5, 2.0], rtol=1e-15)


def test_namespaces():
    """tfc.linalg, tfc.norm, tfc.clip_by_norm, tfc.math's moments; ``from tfc.linalg
    import ...`` works as ``from tensorflow.linalg import ...`` does."""
    from tfc.linalg import diag_part, norm
    assert norm is tfc.norm and diag_part is tfc.linalg.diag_part
    assert tfc.linalg.eye is tfc.eye and tfc.linalg.einsum is tfc.einsum
    assert tfc.linalg.l2_normalize is tfc.nn.l2_normalize
    for n in ("reduce_variance", "reduce_std", "reduce_euclidean_norm", "in_top_k"):
        assert n in tfc.math.__all__ and callable(getattr(tfc.math, n))


HERE = os.path.basename(__file__)


@pytest.mark.parametrize("build, message", [
    (lambda a: tfc.norm(a, ord=2, axis=[0, 1]), "needs an SVD"),
    (lambda a: tfc.norm(a, ord="fro"), "'fro' is a matrix norm"),
    (lambda a: tfc.norm(a, ord=0), "must be a vector norm"),
    (lambda a: tfc.norm(a, ord=-1, axis=1), "must be a vector norm"),
    (lambda a: tfc.norm(a, ord=3, axis=[0, 1]), "must be a matrix norm"),
    (lambda a: tfc.norm(a, axis=[1, 1]), "must differ"),
    (lambda a: tfc.norm(a, axis=[0, 1, 2]), "a pair of distinct ints"),
    (lambda a: tfc.norm(a, axis=5), "out of range"),
    (lambda a: tfc.norm(tfc.cast(a, tfc.int32)), "takes float tensors"),
    (lambda a: tfc.linalg.diag_part(a, k=4), "outside the 3x4 matrices"),
    (lambda a: tfc.linalg.diag_part(a, k=(0, 1)), "a band of diagonals"),
    (lambda a: tfc.linalg.diag_part(a[0, 0]), "rank >= 2"),
    (lambda a: tfc.linalg.diag(a[0, 0], num_rows=2), "needs num_rows=4"),
    (lambda a: tfc.linalg.band_part(a, tfc.constant(1), 0), "Python int"),
    (lambda a: tfc.linalg.matmul(a, a, transpose_a=True, adjoint_a=True), "not both"),
    (lambda a: tfc.clip_by_norm(a, [1.0, 2.0]), "clip_norm must be a scalar"),
    (lambda a: tfc.clip_by_norm(tfc.cast(a, tfc.int32), 1.0), "takes float tensors"),
    (lambda a: tfc.math.reduce_variance(tfc.cast(a, tfc.int32)), "takes float tensors"),
    (lambda a: tfc.math.reduce_euclidean_norm(tfc.cast(a, tfc.int64)), "takes float"),
])
def test_bad_input_is_a_clear_error_at_the_users_line(build, message):
    a = tfc.placeholder(tfc.float32, [2, 3, 4])
    with pytest.raises(TypeMismatch, match=message) as e:
        build(a)
    assert HERE in str(e.value), str(e.value)
