"""EarlyStopping on scripted metrics: the epoch it stops at, min_delta, mode, baseline,
restore_best_weights."""

import numpy as np
import pytest

import tfc
from tfc.callbacks import Callback, EarlyStopping
from tfc.errors import TfcError


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


class Script(Callback):
    """Replaces the epoch's ``val_loss`` (or ``key``) by the next scripted value and keeps
    each epoch's weights (before callbacks that follow it run)."""

    def __init__(self, values, key="val_loss"):
        super().__init__()
        self.values, self.key, self.weights = list(values), key, []

    def on_epoch_end(self, epoch, logs=None):
        logs[self.key] = self.values[epoch]
        self.weights.append(self.model.get_weights())


def fit(values, stopper, key="val_loss", epochs=None):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 3)).astype(np.float32)
    y = x.sum(axis=1)
    model = tfc.Sequential([tfc.layers.Dense(1, input_shape=(3,))])
    model.compile("sgd", "mse")
    script = Script(values, key)
    history = model.fit(x, y, epochs=epochs or len(values), batch_size=8, verbose=0,
                        callbacks=[script, stopper])
    return model, script, history


@pytest.mark.parametrize("values, patience, min_delta, stops_after", [
    ([1.0, 0.9, 0.95, 0.92, 0.91, 0.5], 2, 0.0, 3),   # two epochs without a new best
    ([1.0, 0.9, 0.95, 0.92, 0.91, 0.5], 3, 0.0, 4),
    ([1.0, 0.9, 0.8, 0.7, 0.6, 0.5], 1, 0.0, None),   # always improving: runs to the end
    ([1.0, 0.95, 0.9, 0.85, 0.8, 0.75], 1, 0.1, 1),   # improvements under min_delta do not count
    ([1.0, 1.2, 0.5, 0.4], 0, 0.0, 1),                # patience 0: the first worse epoch
])
def test_stops_at_the_right_epoch(values, patience, min_delta, stops_after):
    stopper = EarlyStopping(patience=patience, min_delta=min_delta)
    _, _, history = fit(values, stopper)
    ran = len(values) if stops_after is None else stops_after + 1
    assert len(history["loss"]) == ran
    assert stopper.stopped_epoch == (stops_after or 0)
    assert history["val_loss"] == values[:ran]


def test_mode_max_for_accuracy():
    stopper = EarlyStopping(monitor="val_accuracy", patience=1)
    assert stopper.mode == "max"
    _, _, history = fit([0.5, 0.7, 0.6, 0.9], stopper, key="val_accuracy")
    assert len(history["loss"]) == 3 and stopper.best == 0.7 and stopper.best_epoch == 1


def test_improvements_short_of_the_baseline_do_not_restart_the_patience():
    """As Keras: the wait counts on through new bests that do not beat the baseline, so
    the first epoch without a new best ends training."""
    values = [0.9, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6]
    _, _, history = fit(values, EarlyStopping(patience=2))
    assert len(history["loss"]) == 6
    _, _, history = fit(values, EarlyStopping(patience=2, baseline=0.5))
    assert len(history["loss"]) == 5


def test_restore_best_weights_gives_back_the_best_epochs_weights():
    stopper = EarlyStopping(patience=2, restore_best_weights=True)
    model, script, history = fit([1.0, 0.3, 0.6, 0.7, 0.1], stopper)
    assert len(history["loss"]) == 4 and stopper.best_epoch == 1
    for got, want in zip(model.get_weights(), script.weights[1]):
        np.testing.assert_array_equal(got, want)
    assert not all(np.array_equal(a, b) for a, b in zip(script.weights[1], script.weights[3]))


def test_without_restore_the_last_weights_stay():
    stopper = EarlyStopping(patience=2)
    model, script, _ = fit([1.0, 0.3, 0.6, 0.7, 0.1], stopper)
    for got, want in zip(model.get_weights(), script.weights[3]):
        np.testing.assert_array_equal(got, want)


def test_a_missing_metric_warns_and_never_stops():
    stopper = EarlyStopping(monitor="val_nothing", patience=0)
    with pytest.warns(UserWarning, match="'val_nothing' is not in the epoch's logs"):
        _, _, history = fit([1.0, 2.0, 3.0], stopper)
    assert len(history["loss"]) == 3


def test_bad_arguments():
    with pytest.raises(TfcError, match="patience"):
        EarlyStopping(patience=-1)
    with pytest.raises(TfcError, match="mode"):
        EarlyStopping(mode="up")
