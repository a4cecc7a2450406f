"""``fit`` under ``tfc.distribute.MirroredStrategy``: data-parallel over two logical CPUs,
with the results of one device on the same global batches (f64 within 1e-10, f32 within
1e-5), on both backends; the session stays the owner of the variables between steps."""

import contextlib

import numpy as np
import pytest

import tfc
from tfc.data import Dataset
from tfc.distribute.fit import ReplicatedStep

RNG = np.random.default_rng(3)
X = RNG.normal(size=(46, 6))
Y = RNG.integers(0, 3, 46).astype(np.int32)
TWO_CPUS = ["/cpu:0", "/cpu:1"]
TOLERANCE = {np.float64: 1e-10, np.float32: 1e-5}


@pytest.fixture(params=["reference", "llvm"])
def backend(request, monkeypatch):
    monkeypatch.setenv("TFC_BACKEND", request.param)
    return request.param


def classifier(dtype, strategy=None, optimizer="adam"):
    """A two-layer classifier, compiled in ``strategy``'s scope when given."""
    with tfc.Graph().as_default():
        tfc.set_random_seed(0)
        with strategy.scope() if strategy is not None else contextlib.nullcontext():
            model = tfc.Sequential([tfc.layers.Dense(8, activation="relu", input_shape=(6,)),
                                    tfc.layers.Dense(3, activation="softmax")],
                                   input_dtype=dtype)
            model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy",
                          metrics=["accuracy"])
            model.build()
    return model


def dataset(dtype, batch):
    return Dataset.from_tensor_slices((X.astype(dtype), Y)).shuffle(46, seed=2).batch(batch)


def assert_same_training(one, many, h1, h2, dtype):
    tol = TOLERANCE[dtype]
    assert list(h1) == list(h2)
    for key in h1:
        np.testing.assert_allclose(h2[key], h1[key], rtol=tol, atol=tol, err_msg=key)
    for a, b in zip(one.get_weights(), many.get_weights()):
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol)
    assert many.session.step == one.session.step


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mirrored_fit_on_a_dataset_gives_the_results_of_one_device(backend, dtype):
    """Batches of 10 split 5 + 5; the epoch's last batch of 6 splits 3 + 3."""
    strategy = tfc.distribute.MirroredStrategy(TWO_CPUS)
    one, many = classifier(dtype), classifier(dtype, strategy)
    h1 = one.fit(dataset(dtype, 10), epochs=3, verbose=0)
    h2 = many.fit(dataset(dtype, 10), epochs=3, verbose=0)
    assert_same_training(one, many, h1, h2, dtype)
    step = many._fit_step
    assert isinstance(step, ReplicatedStep)  # it did run replicated
    assert step.replicas == strategy.num_replicas_in_sync == 2
    assert list(step.program.module.devices) == TWO_CPUS
    copies = step.program.variables
    for name in step.copies:  # the mirrored copies stay bitwise equal
        for copy in step.copies[name][1:]:
            np.testing.assert_array_equal(copies[copy], copies[name])
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(many.predict(X.astype(dtype)), one.predict(X.astype(dtype)),
                               rtol=tol, atol=tol)
    assert many.evaluate(X.astype(dtype), Y) == pytest.approx(one.evaluate(X.astype(dtype), Y),
                                                              rel=tol, abs=tol)


def test_an_uneven_batch_and_changes_between_steps_match_one_device(backend):
    """45 examples in batches of 10: each epoch's last batch (5) does not split over two
    replicas and runs on one device; weights set and a learning rate changed by a
    callback between steps reach the replicas; a second fit goes on from the first."""
    strategy = tfc.distribute.MirroredStrategy(TWO_CPUS)
    models = [classifier(np.float64, s, optimizer="sgd") for s in (None, strategy)]
    results = []
    for model in models:
        schedule = tfc.callbacks.LearningRateScheduler(lambda epoch: 0.1 / (1 + epoch))
        first = model.fit(X[:45], Y[:45], epochs=2, batch_size=10, seed=1, verbose=0,
                          callbacks=[schedule])
        model.set_weights([w * 0.5 for w in model.get_weights()])
        second = model.fit(X[:45], Y[:45], epochs=2, batch_size=10, seed=2, verbose=0)
        results.append((first, second))
    for one, many in zip(*results):
        assert_same_training(models[0], models[1], one, many, np.float64)
    assert models[1].learning_rate == pytest.approx(0.05)
    assert isinstance(models[1]._fit_step, ReplicatedStep)


def test_more_replicas_than_two_and_the_default_device_alone():
    strategy = tfc.distribute.MirroredStrategy(["/cpu:0", "/cpu:1", "/cpu:2"])
    one, many = classifier(np.float64), classifier(np.float64, strategy)
    h1 = one.fit(X[:45], Y[:45], epochs=2, batch_size=15, verbose=0)
    h2 = many.fit(X[:45], Y[:45], epochs=2, batch_size=15, verbose=0)
    assert_same_training(one, many, h1, h2, np.float64)
    assert many._fit_step.program.module.devices == ["/cpu:0", "/cpu:1", "/cpu:2"]
    # one replica on the session's own device: fit runs in the session, as without a scope
    alone = classifier(np.float64, tfc.distribute.MirroredStrategy(["/cpu:0"]))
    alone.fit(X, Y, epochs=1, verbose=0)
    assert not isinstance(alone._fit_step, ReplicatedStep)
    # one replica on another device: the step runs there (a batch of 7 needs no split)
    other = classifier(np.float64, tfc.distribute.OneDeviceStrategy("/cpu:1"))
    h3 = other.fit(X, Y, epochs=1, batch_size=7, verbose=0)
    h4 = classifier(np.float64).fit(X, Y, epochs=1, batch_size=7, verbose=0)
    np.testing.assert_allclose(h3["loss"], h4["loss"], rtol=1e-10)
    assert other._fit_step.program.module.devices == ["/cpu:1"]


def test_compiled_outside_the_scope_trains_on_one_device():
    strategy = tfc.distribute.MirroredStrategy(TWO_CPUS)
    model = classifier(np.float64)
    with strategy.scope():
        model.fit(X, Y, epochs=1, verbose=0)  # the strategy is the one compile ran in
    assert not isinstance(model._fit_step, ReplicatedStep)


@pytest.mark.parametrize("make", [
    lambda: tfc.distribute.ParameterServerStrategy("ps=1,workers=2", address="inprocess"),
    lambda: tfc.distribute.MultiWorkerMirroredStrategy("workers=2", address="inprocess"),
])
def test_cluster_strategies_on_threads_match_one_device(make):
    """The cluster strategies' replication, its tasks run as threads of this process (the
    same module runs on Ray: tests/distribute/test_cluster_strategies.py)."""
    strategy = make()
    one, many = classifier(np.float64), classifier(np.float64, strategy)
    h1 = one.fit(dataset(np.float64, 10), epochs=2, verbose=0)
    h2 = many.fit(dataset(np.float64, 10), epochs=2, verbose=0)
    assert_same_training(one, many, h1, h2, np.float64)
    assert many._fit_step.program.module.devices == list(strategy.devices)


B = RNG.normal(size=(46, 3))
R = (X[:, :2].sum(axis=1) - B[:, 0])[:, None]  # the regression output's target


def two_towers(dtype, strategy=None, kind="functional"):
    """Two inputs (``a``: 6 features, ``b``: 3) and two outputs (``cls``: 3 classes,
    sparse labels; ``reg``: one number, mse), weighted losses and a metric on ``cls``;
    a Functional model or the same network as a subclass; compiled in ``strategy``'s
    scope when given."""
    L = tfc.layers

    class TwoTowers(tfc.Model):
        def __init__(self):
            super().__init__()
            self.tower_a, self.tower_b = L.Dense(8, activation="relu"), L.Dense(4)
            self.cls, self.reg = L.Dense(3, activation="softmax", name="cls"), L.Dense(1)

        def call(self, inputs):
            h = L.Concatenate()([self.tower_a(inputs["a"]), self.tower_b(inputs["b"])])
            return {"cls": self.cls(h), "reg": self.reg(h)}

    with tfc.Graph().as_default():
        tfc.set_random_seed(0)
        with strategy.scope() if strategy is not None else contextlib.nullcontext():
            if kind == "functional":
                a = tfc.keras.Input((6,), dtype=dtype, name="a")
                b = tfc.keras.Input((3,), dtype=dtype, name="b")
                h = L.Concatenate()([L.Dense(8, activation="relu")(a), L.Dense(4)(b)])
                model = tfc.Model([a, b], {"cls": L.Dense(3, activation="softmax")(h),
                                           "reg": L.Dense(1)(h)})
            else:
                model = TwoTowers()
                model.build({"a": (6,), "b": (3,)}, [dtype, dtype])
            model.compile(optimizer="adam",
                          loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                          loss_weights={"cls": 1.0, "reg": 0.5},
                          metrics={"cls": ["accuracy"]})
    return model


def two_tower_data(dtype):
    return ({"a": X.astype(dtype), "b": B.astype(dtype)},
            {"cls": Y, "reg": R.astype(dtype)})


def assert_same_two_towers(one, many, h1, h2, dtype):
    assert_same_training(one, many, h1, h2, dtype)
    assert {"cls_loss", "reg_loss", "cls_accuracy"} <= set(h2)
    tol = TOLERANCE[dtype]
    x, _ = two_tower_data(dtype)
    p1, p2 = one.predict(x), many.predict(x)
    for key in ("cls", "reg"):
        np.testing.assert_allclose(p2[key], p1[key], rtol=tol, atol=tol, err_msg=key)
    step = many._fit_step
    assert isinstance(step, ReplicatedStep) and step.feeds == 4  # it did run replicated


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_two_input_two_output_model_under_mirrored_matches_one_device(backend, dtype):
    """Every input and every label is split over the replicas the same way: arrays fed as
    dicts (46 examples in batches of 10: the last, 6, splits 3 + 3) and a Dataset of
    (x, y) dicts give the results of one device on the same global batches."""
    strategy = tfc.distribute.MirroredStrategy(TWO_CPUS)
    one, many = two_towers(dtype), two_towers(dtype, strategy)
    x, y = two_tower_data(dtype)
    h1 = one.fit(x, y, epochs=2, batch_size=10, seed=1, verbose=0)
    h2 = many.fit(x, y, epochs=2, batch_size=10, seed=1, verbose=0)
    assert_same_two_towers(one, many, h1, h2, dtype)
    def data():
        return Dataset.from_tensor_slices((x, y)).shuffle(46, seed=2).batch(10)
    h1 = one.fit(data(), epochs=1, verbose=0)
    h2 = many.fit(data(), epochs=1, verbose=0)
    assert_same_two_towers(one, many, h1, h2, dtype)
    assert list(many._fit_step.program.module.devices) == TWO_CPUS


@pytest.mark.parametrize("make", [
    lambda: tfc.distribute.ParameterServerStrategy("ps=1,workers=2", address="inprocess"),
    lambda: tfc.distribute.MultiWorkerMirroredStrategy("workers=2", address="inprocess"),
])
def test_a_two_input_two_output_subclass_under_a_cluster_strategy_matches_one_device(make):
    """A subclassed model fed dicts, under the cluster strategies' replications (tasks as
    threads of this process)."""
    one = two_towers(np.float64, kind="subclass")
    many = two_towers(np.float64, make(), kind="subclass")
    x, y = two_tower_data(np.float64)
    h1 = one.fit(x, y, epochs=2, batch_size=10, seed=1, verbose=0)
    h2 = many.fit(x, y, epochs=2, batch_size=10, seed=1, verbose=0)
    assert_same_two_towers(one, many, h1, h2, np.float64)
