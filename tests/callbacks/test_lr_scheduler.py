"""LearningRateScheduler: the rate each epoch trains with, set without recompiling."""

import numpy as np
import pytest

import tfc
from tfc.callbacks import Callback, LearningRateScheduler
from tfc.errors import TfcError


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 3)).astype(np.float32)
    return x, x @ np.array([1.0, -1.0, 2.0], np.float32)


class Weights(Callback):
    def __init__(self):
        super().__init__()
        self.begin, self.end, self.compiled = [], [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.begin.append(self.model.get_weights())

    def on_epoch_end(self, epoch, logs=None):
        self.end.append(self.model.get_weights())
        self.compiled.append(len(self.model.session._cache))


def test_each_epoch_trains_with_its_rate_and_nothing_recompiles():
    x, y = problem()
    model = tfc.Sequential([tfc.layers.Dense(1, input_shape=(3,))])
    model.compile(tfc.train.GradientDescentOptimizer(0.5), "mse")
    rates = [0.05, 0.0, 0.02, 0.0]
    weights = Weights()
    history = model.fit(x, y, epochs=4, batch_size=8, shuffle=False, verbose=0,
                        callbacks=[LearningRateScheduler(lambda epoch: rates[epoch]), weights])
    np.testing.assert_allclose(history["learning_rate"], rates, rtol=1e-7)
    for epoch, rate in enumerate(rates):
        same = all(np.array_equal(a, b) for a, b in zip(weights.begin[epoch], weights.end[epoch]))
        assert same == (rate == 0.0), epoch  # a zero rate leaves the weights as they were
    assert len(set(weights.compiled)) == 1  # one compiled training step for every rate
    # the optimizer given keeps its own rate
    assert model.optimizer._learning_rate == 0.5


def test_the_rate_matches_a_run_with_that_constant_rate():
    """Training with the scheduled rate r is the same computation as with r given."""
    x, y = problem()
    out = []
    for opt_rate, schedule in ((0.3, lambda epoch, lr: 0.1), (0.1, None)):
        with tfc.Graph().as_default():
            tfc.set_random_seed(1)
            model = tfc.Sequential([tfc.layers.Dense(1, input_shape=(3,))])
            model.compile(tfc.train.GradientDescentOptimizer(opt_rate), "mse")
            cbs = [LearningRateScheduler(schedule)] if schedule else []
            model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0, callbacks=cbs)
            out.append(model.get_weights())
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_schedule_of_epoch_and_rate():
    x, y = problem()
    model = tfc.Sequential([tfc.layers.Dense(1, input_shape=(3,))])
    model.compile("adam", "mse")
    history = model.fit(x, y, epochs=3, verbose=0,
                        callbacks=[LearningRateScheduler(lambda epoch, lr: lr * 0.5)])
    np.testing.assert_allclose(history["learning_rate"], [0.0005, 0.00025, 0.000125],
                               rtol=1e-6)
    model.learning_rate = 0.01
    assert model.learning_rate == pytest.approx(0.01)


def test_a_tensor_rate_cannot_be_set():
    x, y = problem()
    model = tfc.Sequential([tfc.layers.Dense(1, input_shape=(3,))])
    model.compile(tfc.train.GradientDescentOptimizer(tfc.constant(0.1)), "mse")
    with pytest.raises(TfcError, match="tensor or schedule"):
        model.fit(x, y, verbose=0, callbacks=[LearningRateScheduler(lambda e: 0.1)])


def test_bad_schedules():
    x, y = problem()
    model = tfc.Sequential([tfc.layers.Dense(1, input_shape=(3,))])
    model.compile("sgd", "mse")
    with pytest.raises(TfcError, match="not a number"):
        model.fit(x, y, verbose=0, callbacks=[LearningRateScheduler(lambda e: "fast")])
    with pytest.raises(TfcError, match="one finite number"):
        model.learning_rate = float("nan")
    with pytest.raises(TfcError, match="callable"):
        LearningRateScheduler(0.1)
