"""``fit`` under ``tfc.distribute.MirroredStrategy``: data-parallel over two logical CPUs,
with the results of one device on the same global batches (f64 within 1e-10, f32 within
1e-5), on both backends; the session stays the owner of the variables between steps."""

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
        scope = strategy.scope() if strategy is not None else None
        if scope is not None:
            scope.__enter__()
        try:
            model = tfc.Sequential([tfc.layers.Dense(8, activation="relu", input_shape=(6,)),
                                    tfc.layers.Dense(3, activation="softmax")],
                                   input_dtype=dtype)
            model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy",
                          metrics=["accuracy"])
            model.build()
        finally:
            if scope is not None:
                scope.__exit__(None, None, None)
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


def test_a_functional_model_under_a_strategy_is_a_clear_error() -> None:
    """Functional models feed lists of inputs and labels, which the replicated step does
    not take yet: fit says so at the user's line instead of training something else."""
    from tfc.keras import Input, Model
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 8)).astype(np.float32)
    y = rng.integers(0, 3, 32)
    with tfc.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
        inp = Input(shape=(8,))
        model = Model(inp, tfc.layers.Dense(3)(inp))
        model.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(tfc.errors.TfcError, match="fed lists") as caught:
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert "test_mirrored_fit.py" in str(caught.value)
