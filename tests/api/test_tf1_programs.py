"""The TF1 names that classic programs use (found by tools/conformance_tf1_programs.py):
values against numpy references on both backends, gradients against finite differences,
and the TF1 behaviours the tool found tfc missing (float32 hyperparameters, control
dependencies, a fed keep_prob). No TensorFlow needed."""

import numpy as np
import pytest

import tfc

BACKENDS = ["llvm", "reference"]
RTOL = 1e-12  # float64 throughout: agreement to rounding


def run(backend, fetches, feed=None):
    with tfc.Session(backend=backend) as sess:
        return sess.run(fetches, feed or {})


def fd_check(build, np_fn, *arrays, eps=1e-6, rtol=1e-6, atol=1e-9):
    """tfc.gradients of sum(build(*xs) * c) against central differences of the numpy
    reference ``np_fn`` (float64), for every input."""
    rng = np.random.default_rng(0)
    phs = [tfc.placeholder(tfc.float64, a.shape) for a in arrays]
    out = build(*phs)
    c = rng.uniform(0.5, 1.5, size=np.shape(np_fn(*arrays)))
    loss = tfc.reduce_sum(out * c)
    grads = tfc.gradients(loss, phs)
    got = run("reference", grads, dict(zip(phs, arrays)))
    for i, a in enumerate(arrays):
        want = np.zeros_like(a)
        for idx in np.ndindex(*a.shape):
            up = [x.copy() for x in arrays]
            dn = [x.copy() for x in arrays]
            up[i][idx] += eps
            dn[i][idx] -= eps
            want[idx] = (np.sum(np_fn(*up) * c) - np.sum(np_fn(*dn) * c)) / (2 * eps)
        np.testing.assert_allclose(got[i], want, rtol=rtol, atol=atol,
                                   err_msg=f"gradient w.r.t. input {i}")


# ---- values ------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_nn_helpers_match_numpy(backend):
    rs = np.random.RandomState(0)
    xs = rs.randn(5, 4) * 2.0 + 1.0
    x = tfc.placeholder(tfc.float64, [None, 4])
    mean, var = tfc.nn.moments(x, axes=[0])
    mean_k, var_k = tfc.nn.moments(x, axes=[0, 1], keepdims=True)
    gamma, beta = rs.rand(4) + 0.5, rs.randn(4)
    bn = tfc.nn.batch_normalization(x, mean, var, beta, gamma, 1e-3)
    bn_plain = tfc.nn.batch_normalization(x, mean, var, None, None, 1e-3)
    got = run(backend, [tfc.nn.l2_loss(x), mean, var, mean_k, var_k, bn, bn_plain], {x: xs})
    m, v = xs.mean(0), ((xs - xs.mean(0)) ** 2).mean(0)
    inv = 1.0 / np.sqrt(v + 1e-3)
    want = [np.sum(xs * xs) / 2, m, v, xs.mean(keepdims=True),
            ((xs - xs.mean()) ** 2).mean(keepdims=True),
            xs * (inv * gamma) + (beta - m * inv * gamma), (xs - m) * inv]
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=1e-13)


@pytest.mark.parametrize("backend", BACKENDS)
def test_math_helpers_match_numpy(backend):
    xs = np.array([[0.0, -2.0, 3.5], [1e-12, 0.0, -0.5]])
    x = tfc.placeholder(tfc.float64, [None, 3])
    fetches = [tfc.clip_by_value(x, -1.0, 1e-11), tfc.count_nonzero(x),
               tfc.count_nonzero(x, axis=1), tfc.count_nonzero(x > 0.0, axis=0),
               tfc.reduce_any(x > 3.0, axis=1), tfc.reduce_all(x > -3.0),
               tfc.reduce_all(x > -1.0, axis=0, keepdims=True), tfc.size(x),
               tfc.size(tfc.zeros([2, 5]))]
    got = run(backend, fetches, {x: xs})
    want = [np.clip(xs, -1.0, 1e-11), np.int64(4), np.array([2, 2]), np.array([1, 0, 1]),
            np.array([True, False]), np.True_, np.array([[True, False, True]]),
            np.int32(6), np.int32(10)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert np.asarray(g).dtype == np.asarray(w).dtype


def test_reduce_any_of_numbers_is_a_clear_error():
    with pytest.raises(tfc.TfcError, match="reduce_any takes bool"):
        tfc.reduce_any(tfc.constant([1.0, 0.0]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_lookup_is_a_gather_with_sparse_gradient(backend):
    table = np.arange(12.0).reshape(4, 3)
    emb = tfc.Variable(table)
    ids = tfc.placeholder(tfc.int32, [None])
    rows = tfc.nn.embedding_lookup(emb, ids)
    (grad,) = tfc.gradients(tfc.reduce_sum(rows * 2.0), [emb])
    assert isinstance(grad, tfc.IndexedSlices)
    got = run(backend, rows, {ids: np.array([3, 0, 3], np.int32)})
    np.testing.assert_array_equal(got, table[[3, 0, 3]])
    np.testing.assert_array_equal(
        run(backend, tfc.nn.embedding_lookup([emb], [1]), {}), table[[1]])
    with pytest.raises(tfc.TfcError, match="several shards"):
        tfc.nn.embedding_lookup([emb, emb], ids)


def test_softmax_cross_entropy_v2_is_the_same_op():
    labels = tfc.constant(np.array([[0.2, 0.8]]))
    logits = tfc.constant(np.array([[1.0, -1.0]]))
    v2 = tfc.nn.softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits)
    v1 = tfc.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    assert v2.op is not None and v2.value.op.kind == v1.value.op.kind
    np.testing.assert_array_equal(run("reference", v2), run("reference", v1))


# ---- gradients ---------------------------------------------------------------------------

def test_l2_loss_gradient():
    fd_check(tfc.nn.l2_loss, lambda a: np.sum(a * a) / 2, np.random.RandomState(1).randn(3, 2))


def test_moments_gradients():
    xs = np.random.RandomState(2).randn(4, 3)
    fd_check(lambda a: tfc.nn.moments(a, axes=[0])[0], lambda a: a.mean(0), xs)
    fd_check(lambda a: tfc.nn.moments(a, axes=[0])[1],
             lambda a: ((a - a.mean(0)) ** 2).mean(0), xs)


def test_batch_normalization_gradients():
    rs = np.random.RandomState(3)
    xs, m, v, off, sc = rs.randn(3, 2), rs.randn(2), rs.rand(2) + 0.5, rs.randn(2), rs.randn(2)
    fd_check(lambda *a: tfc.nn.batch_normalization(*a, 1e-3),
             lambda x, mu, var, o, s: (x - mu) * s / np.sqrt(var + 1e-3) + o,
             xs, m, v, off, sc)


def test_clip_by_value_gradient():
    xs = np.array([[-2.0, -0.3, 0.1], [0.45, 0.7, 3.0]])  # away from the bounds
    fd_check(lambda a: tfc.clip_by_value(a, -0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5), xs)


# ---- TF1 behaviours ----------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_python_float_learning_rate_is_float32_as_in_tf1(backend):
    # TF1's optimizers make a Python float hyperparameter a float32 tensor and cast it to
    # the variable's dtype: a float64 variable steps by float32(0.1), not 0.1.
    w = tfc.Variable(np.array([1.0, -2.0]))
    loss = tfc.reduce_sum(w * np.array([3.0, 5.0]))
    train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tfc.Session(backend=backend) as sess:
        sess.run(train)
        got = sess.run(w)
    lr = np.float64(np.float32(0.1))
    np.testing.assert_array_equal(got, np.array([1.0, -2.0]) - lr * np.array([3.0, 5.0]))
    assert not np.array_equal(got, np.array([1.0, -2.0]) - 0.1 * np.array([3.0, 5.0]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_float64_learning_rate_stays_exact(backend):
    w = tfc.Variable(np.array([1.0]))
    train = tfc.train.MomentumOptimizer(np.float64(0.1), np.float64(0.9)).minimize(
        tfc.reduce_sum(w * 3.0))
    with tfc.Session(backend=backend) as sess:
        sess.run(train)
        np.testing.assert_array_equal(sess.run(w), np.array([1.0 - 0.1 * 3.0]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_control_dependencies_make_operations_run_their_dependencies(backend):
    counter = tfc.Variable(0, name="counter")
    other = tfc.Variable(10, name="other")
    inc = tfc.assign_add(counter, 1)
    with tfc.control_dependencies([inc]):
        tick = tfc.no_op()
        bump = tfc.assign_sub(other, 2)
        with tfc.control_dependencies(None):
            alone = other.assign_add(100)
        late = tfc.Variable(7, name="late")  # its initializer runs nothing else
    with tfc.control_dependencies([tfc.constant(1.0), other]):  # values: nothing to run
        plain = tfc.no_op()
    with tfc.Session(backend=backend) as sess:
        sess.run(tfc.global_variables_initializer())
        sess.run(tick)
        assert sess.run([counter, other]) == [1, 10]
        sess.run(bump)
        assert sess.run([counter, other]) == [2, 8]
        sess.run(alone)
        assert sess.run([counter, other]) == [2, 108]
        sess.run(late.initializer)
        sess.run(plain)
        assert sess.run([counter, late]) == [2, 7]
        sess.run(tfc.group(tick, bump))  # inc is in both: it runs once
        assert sess.run([counter, other]) == [3, 106]


def test_assign_functions_need_a_variable():
    v = tfc.Variable(np.zeros(2))
    assert tfc.assign(v, np.ones(2)).op.kind == "var.assign"
    with pytest.raises(tfc.TfcError, match="assign_add: ref must be a tfc.Variable"):
        tfc.assign_add(v.value(), 1.0)


def test_global_and_trainable_variables():
    a = tfc.Variable(1.0, name="a")
    b = tfc.Variable(2.0, name="b", trainable=False)
    assert tfc.global_variables() == [a, b]
    assert tfc.trainable_variables() == [a]


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_with_a_fed_keep_prob(backend):
    xs = np.arange(1.0, 201.0).reshape(2, 100)
    x = tfc.placeholder(tfc.float64, [None, 100])
    keep_prob = tfc.placeholder(tfc.float64, [])
    fed = tfc.nn.dropout(x, keep_prob=keep_prob, seed=5)
    fixed = tfc.nn.dropout(x, keep_prob=0.5, seed=5)
    np.testing.assert_array_equal(run(backend, fed, {x: xs, keep_prob: 1.0}), xs)
    a, b = run(backend, [fed, fixed], {x: xs, keep_prob: 0.5})
    np.testing.assert_array_equal(a, b)  # the same mask and scale as a Python keep_prob
    assert set(np.unique(a / xs)) == {0.0, 2.0}
    with pytest.raises(tfc.TfcError, match="must be a scalar"):
        tfc.nn.dropout(x, keep_prob=tfc.placeholder(tfc.float32, []))


# ---- variable scopes ---------------------------------------------------------------------

def test_get_variable_shares_through_reuse():
    with tfc.variable_scope("tower"):
        w = tfc.get_variable("w", [2, 3], dtype=tfc.float64,
                             initializer=tfc.constant_initializer(0.5))
        with tfc.name_scope("ops"):  # name scopes do not name variables
            b = tfc.get_variable("b", initializer=np.zeros(3))
        y = tfc.identity(tfc.matmul(tfc.ones([1, 2], tfc.float64), w), name="y")
    with tfc.variable_scope("tower", reuse=True) as scope:
        assert scope.name == "tower"
        assert tfc.get_variable("w") is w
        assert tfc.get_variable("b", [3]) is b
        with tfc.variable_scope("inner"):  # reuse is inherited
            with pytest.raises(tfc.TfcError, match="tower/inner/v does not exist"):
                tfc.get_variable("v", [1])
        y2 = tfc.identity(y, name="y")
    assert (w.name, b.name) == ("tower/w", "tower/b")
    assert (y.name, y2.name) == ("tower/y", "tower_1/y")  # ops: the name scopes
    with tfc.variable_scope("tower"):
        with pytest.raises(tfc.TfcError, match="tower/w already exists"):
            tfc.get_variable("w", [2, 3])
        tfc.get_variable_scope().reuse_variables()
        assert tfc.get_variable("w") is w
        with pytest.raises(tfc.TfcError, match="specified shape"):
            tfc.get_variable("w", [3, 2])
        with pytest.raises(tfc.TfcError, match="specified dtype"):
            tfc.get_variable("w", dtype=tfc.float32)
    with tfc.variable_scope("auto", reuse=tfc.AUTO_REUSE):
        a1 = tfc.get_variable("a", [2], initializer=tfc.ones_initializer())
        a2 = tfc.get_variable("a", [2])
    assert a1 is a2 and a1.dtype is tfc.float32
    for got, want in zip(run("reference", [w, b, a1]),
                         [np.full((2, 3), 0.5), np.zeros(3), np.ones(2, np.float32)]):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


def test_get_variable_initializers_and_errors():
    g = tfc.get_variable("g", [20, 30])  # default: Glorot uniform, float32
    z = tfc.get_variable("z", [2], dtype=tfc.int32)  # default for ints: zeros
    c = tfc.get_variable("c", [2, 2], dtype=tfc.float64,
                         initializer=tfc.constant_initializer([1.0, 2.0, 3.0, 4.0]))
    f = tfc.get_variable("f", initializer=1.5)  # a Python float: float32, as tfc.constant
    gv, zv, cv, fv = run("reference", [g, z, c, f])
    limit = np.sqrt(6.0 / 50)
    assert gv.dtype == np.float32 and np.all(np.abs(gv) <= limit) and gv.std() > limit / 3
    np.testing.assert_array_equal(zv, np.zeros(2, np.int32))
    np.testing.assert_array_equal(cv, [[1.0, 2.0], [3.0, 4.0]])
    assert fv.dtype == np.float32 and fv == 1.5
    with pytest.raises(tfc.TfcError, match="shape of new variable h must be given"):
        tfc.get_variable("h")
    with pytest.raises(tfc.TfcError, match="not the shape given"):
        tfc.get_variable("k", [3], initializer=np.zeros(2))
    with pytest.raises(tfc.TfcError, match="4 values for shape"):
        tfc.get_variable("m", [3], initializer=tfc.constant_initializer([1, 2, 3, 4]))
    with pytest.raises(tfc.TfcError, match="reuse must be"):
        with tfc.variable_scope("s", reuse="yes"):
            pass
    with pytest.raises(tfc.TfcError, match="regularizer is not supported"):
        tfc.get_variable("r", [1], regularizer=lambda w: w)


# ---- tfc.losses and tfc.math -------------------------------------------------------------

def _np_xent(labels, logits):
    z = logits - logits.max(-1, keepdims=True)
    return -(labels * (z - np.log(np.exp(z).sum(-1, keepdims=True)))).sum(-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_losses_match_numpy_in_float32(backend):
    # TF1's tf.losses weight and reduce in float32 (and cast mean_squared_error's and
    # absolute_difference's inputs to float32): numpy in float32 is the reference.
    rs = np.random.RandomState(4)
    logits_v, p_v = rs.randn(6, 3), rs.rand(6, 3)
    ids = rs.randint(0, 3, 6).astype(np.int32)
    onehot_v = np.eye(3)[ids]
    w_v = np.array([[1.0], [0.0], [2.0], [0.0], [1.0], [0.5]])
    logits = tfc.placeholder(tfc.float64, [None, 3])
    p = tfc.placeholder(tfc.float64, [None, 3])
    y = tfc.placeholder(tfc.int32, [None, 1])
    w = tfc.placeholder(tfc.float64, [None, 1])
    onehot = tfc.constant(onehot_v)
    L = tfc.losses
    fetches = [L.mean_squared_error(onehot, p, weights=w),
               L.mean_squared_error(onehot, p, reduction=L.Reduction.SUM),
               L.absolute_difference(onehot, p, weights=w, reduction=L.Reduction.MEAN),
               L.absolute_difference(onehot, p, reduction=L.Reduction.NONE),
               L.softmax_cross_entropy(onehot, logits, label_smoothing=0.3),
               L.sparse_softmax_cross_entropy(y, logits, weights=w[:, 0]),
               L.sigmoid_cross_entropy(onehot, logits,
                                       reduction=L.Reduction.SUM_OVER_BATCH_SIZE),
               L.mean_squared_error(onehot, p, weights=0.0)]
    got = run(backend, fetches, {logits: logits_v, p: p_v, y: ids[:, None], w: w_v})
    f = np.float32
    sq = (p_v.astype(f) - onehot_v.astype(f)) ** 2
    ab = np.abs(p_v.astype(f) - onehot_v.astype(f))
    wb = np.broadcast_to(w_v.astype(f), (6, 3))
    smooth = onehot_v * 0.7 + 0.1
    sparse = _np_xent(onehot_v, logits_v).astype(f)
    sig = np.maximum(logits_v, 0) - logits_v * onehot_v + np.log1p(np.exp(-abs(logits_v)))
    want = [(sq * wb).sum() / np.count_nonzero(wb), sq.sum(), (ab * wb).sum() / wb.sum(), ab,
            np.float64(_np_xent(smooth, logits_v).astype(f).mean()),
            np.float64((sparse * w_v[:, 0].astype(f)).sum() / np.count_nonzero(w_v)),
            np.float64(sig.astype(f).mean()), np.float32(0.0)]
    dtypes = [np.float32] * 4 + [np.float64] * 3 + [np.float32]
    for i, (g, wv, dt) in enumerate(zip(got, want, dtypes)):
        assert g.dtype == dt, i
        np.testing.assert_allclose(g, wv, rtol=2e-6, atol=1e-7, err_msg=str(i))


def test_loss_gradients_against_finite_differences():
    rs = np.random.RandomState(5)
    lab = np.eye(3)[rs.randint(0, 3, 4)]
    # (float32 inside: a large step and a loose tolerance, as the sums are float32)
    fd_check(lambda z: tfc.losses.softmax_cross_entropy(lab, z, label_smoothing=0.2),
             lambda z: np.mean(_np_xent(lab * 0.8 + 0.2 / 3, z)), rs.randn(4, 3),
             eps=1e-3, rtol=1e-3, atol=1e-5)
    fd_check(lambda q: tfc.losses.mean_squared_error(lab, q, weights=2.0),
             lambda q: np.mean(2.0 * (q - lab) ** 2), rs.rand(4, 3),
             eps=1e-3, rtol=1e-3, atol=1e-5)


def test_loss_errors():
    with pytest.raises(tfc.TfcError, match="unknown reduction"):
        tfc.losses.compute_weighted_loss(tfc.constant([1.0]), reduction="mean")
    with pytest.raises(tfc.TfcError, match="losses must be float"):
        tfc.losses.compute_weighted_loss(tfc.constant([1, 2]))


def test_tfc_math_is_the_op_namespace():
    x = tfc.constant(np.array([1.0, 4.0]))
    got = run("reference", [tfc.math.log(x), tfc.math.sqrt(x), tfc.math.reduce_sum(x)])
    for g, w in zip(got, [np.log([1.0, 4.0]), [1.0, 2.0], 5.0]):
        np.testing.assert_array_equal(g, w)
    assert tfc.math.sigmoid is tfc.nn.sigmoid and tfc.math.log is tfc.log
    assert tfc.math.log1p is tfc.log1p and tfc.math.expm1 is tfc.expm1
    assert tfc.math.softplus is tfc.nn.softplus


def test_softplus_is_an_activation_name():
    from tfc.layers.base import get_activation
    assert get_activation("softplus") is tfc.nn.softplus


def test_a_placeholder_without_shape_says_how_to_write_one():
    with pytest.raises(tfc.TfcError, match=r"write \[\] for a scalar"):
        tfc.placeholder(tfc.float32)


# ---- activations -------------------------------------------------------------------------

ACT_X = np.array([[-30.0, -2.0, -0.5, -1e-3], [0.0, 1e-3, 0.7, 5.9], [6.0, 6.5, 100.0, 800.0]])
SELU_A, SELU_S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
ACTIVATIONS = {  # name: (tfc function, numpy reference)
    "leaky_relu": (lambda x: tfc.nn.leaky_relu(x, alpha=0.1),
                   lambda x: np.where(x > 0, x, float(np.float32(0.1)) * x)),  # TF's f32 attr
    "relu6": (tfc.nn.relu6, lambda x: np.clip(x, 0, 6)),
    "elu": (tfc.nn.elu, lambda x: np.where(x < 0, np.exp(np.minimum(x, 0)) - 1, x)),
    "selu": (tfc.nn.selu,
             lambda x: np.where(x < 0, (np.exp(np.minimum(x, 0)) - 1) * SELU_S * SELU_A,
                                x * SELU_S)),
    "softsign": (tfc.nn.softsign, lambda x: x / (1 + np.abs(x))),
    "softplus": (tfc.nn.softplus, lambda x: np.logaddexp(0.0, x)),
    "l2_normalize": (lambda x: tfc.nn.l2_normalize(x, axis=1),
                     lambda x: x / np.sqrt(np.maximum((x * x).sum(1, keepdims=True), 1e-12))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_match_numpy(backend, name):
    fn, ref = ACTIVATIONS[name]
    x = tfc.placeholder(tfc.float64, [None, 4])
    xs = np.concatenate([ACT_X, [[np.nan, -np.inf, np.inf, -0.0]]])
    got = run(backend, fn(x), {x: xs})
    with np.errstate(invalid="ignore", over="ignore"):
        want = ref(xs)
    if name != "l2_normalize":  # (its last row holds inf: a whole-row NaN either way)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=0, equal_nan=True)
    np.testing.assert_allclose(got[:3], want[:3], rtol=RTOL, atol=0)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_gradients(name):
    fn, ref = ACTIVATIONS[name]
    xs = ACT_X[:, 1:] if name != "l2_normalize" else ACT_X[:2]
    xs = np.where(np.abs(xs) < 1e-2, 0.3, xs)  # away from the kinks
    xs = np.where(np.abs(xs - 6.0) < 1e-2, 5.5, xs)
    fd_check(fn, ref, xs)


def test_activation_gradients_at_kinks_follow_tensorflow():
    x = tfc.constant(np.array([0.0, 6.0, -1e6, 1e6]))
    grads = [tfc.gradients(tfc.reduce_sum(f(x)), [x])[0]
             for f in (lambda t: tfc.nn.leaky_relu(t, 0.1), tfc.nn.relu6, tfc.nn.elu)]
    got = run("reference", grads)
    a = float(np.float32(0.1))
    np.testing.assert_array_equal(got[0], [a, 1.0, a, 1.0])  # LeakyReluGrad: x > 0
    np.testing.assert_array_equal(got[1], [0.0, 0.0, 0.0, 0.0])  # Relu6Grad: 0 < x < 6
    np.testing.assert_array_equal(got[2], [1.0, 1.0, 0.0, 1.0])  # finite: no exp overflow


def test_xw_plus_b():
    xs, ws, bs = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4), np.arange(4.0)
    np.testing.assert_array_equal(run("reference", tfc.nn.xw_plus_b(xs, ws, bs)), xs @ ws + bs)


# ---- collections -------------------------------------------------------------------------

def test_collections_hold_variables_losses_and_update_ops():
    with tfc.variable_scope("net"):
        w = tfc.get_variable("w", initializer=np.ones(2))
    step = tfc.Variable(0, trainable=False, name="step")
    K = tfc.GraphKeys
    assert tfc.get_collection(K.GLOBAL_VARIABLES) == [w, step]
    assert tfc.get_collection(K.TRAINABLE_VARIABLES) == [w]
    assert tfc.get_collection(K.GLOBAL_VARIABLES, scope="net/") == [w]
    assert tfc.get_collection(K.UPDATE_OPS) == []
    inc = tfc.assign_add(step, 1)
    tfc.add_to_collection(K.UPDATE_OPS, inc)
    tfc.add_to_collections([K.TRAINABLE_VARIABLES], w)  # already there: listed once
    assert tfc.get_collection(K.UPDATE_OPS) == [inc]
    assert tfc.get_collection(K.TRAINABLE_VARIABLES) == [w]
    a = tfc.losses.mean_squared_error(np.zeros(2), w)
    b = tfc.losses.absolute_difference(np.zeros(2), w, loss_collection=None)
    assert tfc.losses.get_losses() == [a] and b not in tfc.losses.get_losses()
    reg = tfc.cast(tfc.nn.l2_loss(w) * 0.5, tfc.float32)  # (the losses are float32)
    tfc.add_to_collection(K.REGULARIZATION_LOSSES, reg)
    with tfc.control_dependencies(tfc.get_collection(K.UPDATE_OPS)):
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(
            tfc.cast(tfc.losses.get_total_loss(add_regularization_losses=False), tfc.float64))
    total = tfc.losses.get_total_loss()
    with tfc.Session(backend="reference") as sess:
        sess.run(train)
        assert sess.run(step) == 1  # the update op ran with the training step
        wv = sess.run(w)
        np.testing.assert_allclose(sess.run(tfc.losses.get_regularization_loss()),
                                   0.25 * np.sum(wv ** 2), rtol=1e-6)
        np.testing.assert_allclose(sess.run(total), np.mean(wv ** 2) + 0.25 * np.sum(wv ** 2),
                                   rtol=1e-6)


def test_get_total_loss_without_losses_is_an_error():
    with pytest.raises(tfc.TfcError, match="no losses"):
        tfc.losses.get_total_loss()


def test_tf1_random_names():
    assert tfc.random_normal is tfc.random.normal and tfc.truncated_normal is \
        tfc.random.truncated_normal and tfc.random_shuffle is tfc.random.shuffle
    u = tfc.random_uniform([1000], minval=-2.0, maxval=None, seed=3)  # TF1: maxval 1
    got = run("reference", u)
    assert got.dtype == np.float32 and got.min() >= -2.0 and got.max() < 1.0
    with pytest.raises(tfc.TfcError, match="maxval must be given for i32"):
        tfc.random_uniform([2], maxval=None, dtype=tfc.int32)


def test_interactive_session_is_the_default_until_closed():
    v = tfc.Variable(np.float64(2.0))
    inc = v.assign_add(1.0)
    keeper = tfc.get_default_graph()._session
    sess = tfc.InteractiveSession(backend="reference")
    tfc.initialize_all_variables().run()
    tfc.local_variables_initializer().run()
    inc.run()
    assert v.eval() == 3.0 and sess.run(v) == 3.0  # eval used the interactive session
    sess.close()
    assert tfc.get_default_graph()._session is keeper
