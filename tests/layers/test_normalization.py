"""BatchNormalization, LayerNormalization and Reshape against numpy: forward in training and
inference mode, the moving statistics over several ``fit`` steps computed by hand, weights
and parameter counts as Keras's, gradients against finite differences (f64), errors."""

import numpy as np
import pytest

import tfc
import tfc.keras as K
from tfc.errors import TfcError, TypeMismatch
from tests.layers.gradcheck import assert_model_gradients_match_finite_differences


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


@pytest.fixture(params=["llvm", "reference"])
def backend(request, monkeypatch):
    monkeypatch.setenv("TFC_BACKEND", request.param)
    return request.param


def bn_np(x, mean, var, gamma, beta, eps):
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def random_weights(model, rng):
    """Weights away from the initial ones (gamma 1, beta 0, moving 0 / 1), so a mix-up of
    any two shows; variances positive."""
    return [rng.uniform(0.5, 1.5, size=w.shape) if "gamma" in v.name or "variance" in v.name
            else rng.normal(size=w.shape) for v, w in zip(model.variables, model.get_weights())]


# ---- BatchNormalization ------------------------------------------------------------------------

def test_batch_norm_weights_names_and_counts_as_keras():
    inp = K.Input(shape=(4, 4, 3))
    bn = K.layers.BatchNormalization()
    out = bn(inp)
    model = K.Model(inp, out)
    assert [v.name for v in bn.variables] == [
        "batch_normalization/gamma", "batch_normalization/beta",
        "batch_normalization/moving_mean", "batch_normalization/moving_variance"]
    assert [v.name for v in bn.trainable_variables] == [
        "batch_normalization/gamma", "batch_normalization/beta"]
    assert model.count_params() == 12 and str(out.type) == "f32[B,4,4,3]"
    gamma, beta, mm, mv = model.get_weights()
    for w, want in ((gamma, 1), (beta, 0), (mm, 0), (mv, 1)):
        np.testing.assert_array_equal(w, np.full(3, want, np.float32))
    bare = K.layers.BatchNormalization(center=False, scale=False, name="bare")
    bare(inp)
    assert [v.name for v in bare.variables] == ["bare/moving_mean", "bare/moving_variance"]
    assert bare.trainable_variables == [] and bare.count_params() == 6


@pytest.mark.parametrize("shape, axis", [((5,), -1), ((4, 3, 2), -1), ((4, 3, 2), 1),
                                         ((4, 3, 2), 2)])
def test_batch_norm_forward_in_both_modes(backend, shape, axis):
    """Inference: the moving statistics; training: the batch's mean and biased variance
    over every axis but ``axis``."""
    rng = np.random.default_rng(0)
    x = tfc.placeholder(tfc.float32, [None, *shape], name="x")
    bn = K.layers.BatchNormalization(axis=axis, epsilon=0.01)
    infer, train = bn(x, training=False), bn(x, training=True)
    xs = (rng.normal(size=(6, *shape)) * 2 + 1).astype(np.float32)
    a = axis % (len(shape) + 1)
    n = shape[a - 1]
    weights = [rng.uniform(0.5, 1.5, n), rng.normal(size=n), rng.normal(size=n),
               rng.uniform(0.5, 1.5, n)]
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        for v, w in zip(bn.variables, weights):
            sess.variables[v.name] = w.astype(np.float32)
        got_infer, got_train = sess.run([infer, train], {x: xs})
    bshape = [1] * xs.ndim
    bshape[a] = n
    g, b, mm, mv = (w.reshape(bshape) for w in weights)
    x64 = xs.astype(np.float64)
    axes = tuple(i for i in range(xs.ndim) if i != a)
    np.testing.assert_allclose(got_infer, bn_np(x64, mm, mv, g, b, 0.01), rtol=1e-5,
                               atol=1e-5)
    want = bn_np(x64, x64.mean(axes, keepdims=True), x64.var(axes, keepdims=True), g, b, 0.01)
    np.testing.assert_allclose(got_train, want, rtol=1e-5, atol=1e-5)


def moving_by_hand(xs, batch_size, epochs, momentum, axes=(0,)):
    mm, mv = np.zeros(xs.shape[-1]), np.ones(xs.shape[-1])
    for _ in range(epochs):
        for i in range(0, len(xs), batch_size):
            xb = xs[i:i + batch_size].astype(np.float64)
            mm = mm * momentum + xb.mean(axes) * (1 - momentum)
            mv = mv * momentum + xb.var(axes) * (1 - momentum)  # biased, as Keras 3
    return mm, mv


@pytest.mark.parametrize("kind", ["sequential", "functional", "subclass"])
def test_fit_updates_the_moving_statistics_each_step(backend, kind):
    """BatchNormalization first, so its input is the data: after 2 epochs of 3 batches
    (the last one short) the moving statistics are the hand-computed ones, whatever the
    optimizer did to gamma and beta; ``evaluate`` then normalizes with them."""
    rng = np.random.default_rng(1)
    xs = (rng.normal(size=(10, 4)) * [1, 2, 3, 4] + [0, 1, -1, 5]).astype(np.float32)
    ys = rng.normal(size=(10, 4)).astype(np.float32)
    if kind == "sequential":
        model = K.Sequential([K.Input(shape=(4,)), K.layers.BatchNormalization(momentum=0.8)])
    elif kind == "functional":
        inp = K.Input(shape=(4,))
        model = K.Model(inp, K.layers.BatchNormalization(momentum=0.8)(inp))
    else:
        class Net(tfc.Model):
            def __init__(self):
                super().__init__()
                self.bn = K.layers.BatchNormalization(momentum=0.8)

            def call(self, x, training=False):
                return self.bn(x, training=training)
        model = Net()
        model.build((4,))
    model.compile(K.optimizers.SGD(0.1), "mse")
    model.fit(xs, ys, epochs=2, batch_size=4, shuffle=False, verbose=0)
    gamma, beta, mm, mv = model.get_weights()
    want_mm, want_mv = moving_by_hand(xs, 4, 2, 0.8)
    np.testing.assert_allclose(mm, want_mm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mv, want_mv, rtol=1e-5, atol=1e-6)
    pred = bn_np(xs.astype(np.float64), mm, mv, gamma, beta, 1e-3)
    np.testing.assert_allclose(model.predict(xs), pred, rtol=1e-5, atol=1e-5)
    loss = model.evaluate(xs, ys, batch_size=10)["loss"]
    assert loss == pytest.approx(np.mean((pred - ys) ** 2), rel=1e-5)


def test_fit_trains_gamma_and_beta_through_the_batch_statistics():
    """One SGD step on mse(bn(x), y): the hand-derived gradient of batch normalization
    (through the mean and variance), gamma and beta moved by it."""
    rng = np.random.default_rng(2)
    xs = rng.normal(size=(8, 3))
    ys = rng.normal(size=(8, 3))
    model = K.Sequential([K.Input(shape=(3,), dtype="float64"),
                          K.layers.BatchNormalization(epsilon=0.1)])
    model.compile(K.optimizers.SGD(0.5), "mse")
    model.fit(xs, ys, epochs=1, batch_size=8, verbose=0)
    xhat = (xs - xs.mean(0)) / np.sqrt(xs.var(0) + 0.1)
    dy = 2 * (xhat - ys) / ys.size  # gamma 1, beta 0 before the step
    lr = float(np.float32(0.5))  # Keras's learning rate is a float32
    gamma, beta, _, _ = model.get_weights()
    np.testing.assert_allclose(gamma, 1 - lr * (dy * xhat).sum(0), rtol=1e-12)
    np.testing.assert_allclose(beta, -lr * dy.sum(0), rtol=1e-12, atol=1e-15)


def test_batch_norm_gradients_match_finite_differences():
    """f64, in the training graph (batch statistics) after a Dense and on Conv2D outputs:
    every trainable weight's gradient, the layers before the normalization's included."""
    rng = np.random.default_rng(3)
    inp = K.Input(shape=(5, 5, 2), dtype="float64")
    h = K.layers.Conv2D(3, 3)(inp)
    h = K.layers.BatchNormalization()(h)
    h = K.layers.Flatten()(h)
    h = K.layers.Dense(4, activation="tanh")(h)
    out = K.layers.BatchNormalization(momentum=0.5)(h)
    model = K.Model(inp, K.layers.Dense(2)(out))
    model.compile("sgd", "mse")
    model.set_weights(random_weights(model, rng))
    x, y = rng.normal(size=(6, 5, 5, 2)), rng.normal(size=(6, 2))
    tr = model._require_training()
    feeds = model._feed_dict(model._prepare_x(x), model._prepare_y(y))
    assert_model_gradients_match_finite_differences(model, tr.loss, feeds)
    assert_model_gradients_match_finite_differences(model, tr.eval_loss, feeds)


def test_trainable_false_and_inference_graphs_update_nothing():
    """A frozen BatchNormalization (Keras 3: ``training and self.trainable``) normalizes
    with the moving statistics in training too and is not updated; ``predict`` and
    ``evaluate`` never update."""
    rng = np.random.default_rng(4)
    xs = rng.normal(size=(8, 3)).astype(np.float32) + 3
    frozen = K.layers.BatchNormalization(trainable=False)
    model = K.Sequential([K.Input(shape=(3,)), K.layers.Dense(3), frozen])
    model.compile("sgd", "mse")
    before = model.get_weights()
    model.predict(xs)
    model.evaluate(xs, xs)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    model.fit(xs, xs, epochs=1, batch_size=4, verbose=0)
    after = model.get_weights()
    for i in (2, 3, 4, 5):  # gamma, beta, moving mean and variance
        np.testing.assert_array_equal(after[i], before[i])
    assert not np.array_equal(after[0], before[0])  # the Dense trained
    assert frozen.updates == [] and model.count_params() == 24


def test_get_and_set_weights_carry_the_moving_statistics():
    rng = np.random.default_rng(5)
    xs = rng.normal(size=(6, 4)).astype(np.float32) * 3
    model = K.Sequential([K.Input(shape=(4,)), K.layers.BatchNormalization()])
    model.compile("sgd", "mse")
    model.fit(xs, xs, epochs=3, batch_size=2, verbose=0)
    weights = model.get_weights()
    with tfc.Graph().as_default():
        other = K.Sequential([K.Input(shape=(4,)), K.layers.BatchNormalization()])
        other.set_weights(weights)
        np.testing.assert_array_equal(other.predict(xs), model.predict(xs))


def test_batch_norm_updates():
    """A training call's assigns are the layer's ``updates`` (what a model's train op
    runs: ``test_fit_updates_the_moving_statistics_each_step``); an inference call makes
    none."""
    x = tfc.placeholder(tfc.float32, [None, 3])
    bn = K.layers.BatchNormalization()
    bn(x, training=False)
    assert bn.updates == []
    bn(x, training=True)
    assert [op.name for op in bn.updates] == ["batch_normalization/moving_mean/assign",
                                              "batch_normalization/moving_variance/assign"]


def shared_bn_model(bn_first: bool) -> object:
    """Two inputs through one BatchNormalization (on the inputs, or after a Dense each),
    concatenated, then a Dense."""
    a, b = K.Input(shape=(3,)), K.Input(shape=(3,))
    bn = K.layers.BatchNormalization(momentum=0.5)
    da, db = K.layers.Dense(2, name="da"), K.layers.Dense(2, name="db")
    ha, hb = (da(bn(a)), db(bn(b))) if bn_first else (bn(da(a)), bn(db(b)))
    return K.Model([a, b], K.layers.Dense(1, name="out")(K.layers.Concatenate()([ha, hb])))


def test_batch_norm_called_twice_updates_in_turn():
    """One fit step of a BatchNormalization shared by two branches: its moving statistics
    take the update of one call, then the other's from that result (momentum m: m^2 M +
    m (1 - m) s1 + (1 - m) s2), in the order Keras 3 runs the calls: by depth from the
    outputs (Keras's map_graph), here the second branch's first (checked against Keras
    3.15 by tools/conformance_keras.py)."""
    m = shared_bn_model(bn_first=True)
    m.compile(K.optimizers.SGD(0.1), "mse")
    rng = np.random.default_rng(3)
    xa = rng.normal(size=(8, 3)).astype(np.float32)
    xb = (rng.normal(size=(8, 3)) * 3 + 2).astype(np.float32)
    m.fit([xa, xb], np.zeros((8, 1), np.float32), batch_size=8, verbose=0)
    bn = m.layers[0]
    assert isinstance(bn, K.layers.BatchNormalization)
    mean, var = m.session.run([bn.moving_mean, bn.moving_variance])
    np.testing.assert_allclose(mean, 0.25 * 0 + 0.25 * xb.mean(0) + 0.5 * xa.mean(0),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, 0.25 * 1 + 0.25 * xb.var(0) + 0.5 * xa.var(0),
                               rtol=1e-5)


def test_functional_layers_in_keras_order():
    """A Functional model's layers (and so get_weights) in Keras 3's order: by decreasing
    depth from the outputs, not the order the calls were built in (Keras 3.15 lists
    da, db, batch_normalization, concatenate, out here)."""
    m = shared_bn_model(bn_first=False)
    assert [layer.name for layer in m.layers] == ["da", "db", "batch_normalization",
                                                  "concatenate", "out"]
    assert [v.name for v in m.variables][:3] == ["da/kernel", "da/bias", "db/kernel"]


def test_batch_norm_errors():
    x = tfc.placeholder(tfc.float32, [None, 3])
    with pytest.raises(TypeMismatch, match="axis 2 is out of range"):
        K.layers.BatchNormalization(axis=2)(x)
    with pytest.raises(TypeMismatch, match="takes float inputs"):
        K.layers.BatchNormalization()(tfc.placeholder(tfc.int32, [None, 3]))
    with pytest.raises(TypeMismatch, match="must be known statically"):
        K.layers.BatchNormalization()(tfc.placeholder(tfc.float32, [None, None]))
    with pytest.raises(TypeMismatch, match="axis must be one int"):
        K.layers.BatchNormalization(axis=[1, 2])
    with pytest.raises(TypeMismatch, match="epsilon must be positive"):
        K.layers.BatchNormalization(epsilon=0.0)


# ---- LayerNormalization -------------------------------------------------------------------------

@pytest.mark.parametrize("shape, axis", [((5,), -1), ((4, 3), -1), ((4, 3), [1, 2]),
                                         ((4, 3), 1)])
def test_layer_norm_forward(backend, shape, axis):
    rng = np.random.default_rng(6)
    x = tfc.placeholder(tfc.float32, [None, *shape])
    ln = K.layers.LayerNormalization(axis=axis, epsilon=0.01)
    y = ln(x)
    assert ln.uses_training is False and str(y.type) == str(x.type)
    xs = (rng.normal(size=(3, *shape)) * 2 + 1).astype(np.float32)
    axes = sorted(a % xs.ndim for a in ([axis] if isinstance(axis, int) else axis))
    wshape = tuple(xs.shape[a] for a in axes)
    g, b = rng.uniform(0.5, 1.5, wshape), rng.normal(size=wshape)
    assert [v.shape for v in ln.variables] == [wshape, wshape]
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        sess.variables[ln.gamma.name] = g.astype(np.float32)
        sess.variables[ln.beta.name] = b.astype(np.float32)
        got = sess.run(y, {x: xs})
    bshape = [xs.shape[i] if i in axes else 1 for i in range(xs.ndim)]
    x64 = xs.astype(np.float64)
    want = bn_np(x64, x64.mean(tuple(axes), keepdims=True), x64.var(tuple(axes), keepdims=True),
                 g.reshape(bshape), b.reshape(bshape), 0.01)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_layer_norm_gradients_and_options():
    rng = np.random.default_rng(7)
    inp = K.Input(shape=(4, 3), dtype="float64")
    h = K.layers.LayerNormalization(axis=[1, 2])(inp)
    h = K.layers.Dense(3)(h)
    h = K.layers.LayerNormalization(center=False)(h)
    model = K.Model(inp, K.layers.Flatten()(h))
    assert [v.name for v in model.variables][-1] == "layer_normalization_1/gamma"
    assert model.count_params() == 24 + 12 + 3
    model.compile("sgd", "mse")
    model.set_weights(random_weights(model, rng))
    x, y = rng.normal(size=(5, 4, 3)), rng.normal(size=(5, 12))
    tr = model._require_training()
    assert tr.loss is tr.eval_loss  # no training-only behaviour
    feeds = model._feed_dict(model._prepare_x(x), model._prepare_y(y))
    assert_model_gradients_match_finite_differences(model, tr.loss, feeds)
    with pytest.raises(TypeMismatch, match="axis 3 is out of range"):
        K.layers.LayerNormalization(axis=3)(inp)
    with pytest.raises(TypeMismatch, match="distinct axes"):
        K.layers.LayerNormalization(axis=[1, -2])(inp)


# ---- Reshape ------------------------------------------------------------------------------------

def test_reshape(backend):
    x = tfc.placeholder(tfc.float32, [None, 12])
    a = K.layers.Reshape((3, -1))(x)
    b = K.layers.Reshape((2, 2, 3))(x)
    assert str(a.type) == "f32[B,3,4]" and str(b.type) == "f32[B,2,2,3]"
    xs = np.arange(24, dtype=np.float32).reshape(2, 12)
    with tfc.Session() as sess:
        got_a, got_b = sess.run([a, b], {x: xs})
    np.testing.assert_array_equal(got_a, xs.reshape(2, 3, 4))
    np.testing.assert_array_equal(got_b, xs.reshape(2, 2, 2, 3))
    with pytest.raises(TypeMismatch, match="cannot reshape its input"):
        K.layers.Reshape((5, -1))(x)
    with pytest.raises(TypeMismatch, match="cannot reshape its input"):
        K.layers.Reshape((5,))(x)
    with pytest.raises(TypeMismatch, match="at most one -1"):
        K.layers.Reshape((-1, -1))
    with pytest.raises(TypeMismatch, match="must be known statically"):
        K.layers.Reshape((-1,))(tfc.placeholder(tfc.float32, [None, None, 2]))


def test_exported_train_step_updates_the_moving_statistics():
    """A model file's ``train_step`` entry (``export``) is ``fit``'s step: it runs the
    moving-statistic updates too."""
    from tfc.runtime import Program
    rng = np.random.default_rng(8)
    xs = (rng.normal(size=(8, 3)) * 2 + 1).astype(np.float32)
    model = K.Sequential([K.Input(shape=(3,)), K.layers.BatchNormalization(momentum=0.5)])
    model.compile(K.optimizers.SGD(0.1), "mse")
    model.build()
    model.export()
    program = Program(tfc.get_default_graph().as_module())
    for i in (0, 4):
        program.run("train_step", x=xs[i:i + 4], y=xs[i:i + 4])
    want_mm, want_mv = moving_by_hand(xs, 4, 1, 0.5)
    values = program.variables
    np.testing.assert_allclose(values["batch_normalization/moving_mean"], want_mm, rtol=1e-5)
    np.testing.assert_allclose(values["batch_normalization/moving_variance"], want_mv,
                               rtol=1e-5)


def test_data_parallel_fit_refuses_batch_statistics_clearly():
    """Under a MirroredStrategy each replica would see its own part of the batch, so the
    moving statistics would disagree: ``fit`` says so (no silent per-replica update)."""
    strategy = tfc.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = K.Sequential([K.Input(shape=(3,)), K.layers.BatchNormalization()])
        model.compile("sgd", "mse")
    xs = np.ones((4, 3), np.float32)
    with pytest.raises(TfcError, match="moving_mean.*depends on the batch"):
        model.fit(xs, xs, epochs=1, batch_size=4, verbose=0)
