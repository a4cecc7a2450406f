"""fit's callback hooks: their order, their logs, stop_training; validation metrics in the
progress line."""

import numpy as np
import pytest

import tfc
from tfc.errors import TfcError


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def data(n: int = 40):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    return x, (x @ np.array([[1.0], [-2.0], [0.5]], np.float32)).ravel()


def regressor() -> tfc.Sequential:
    model = tfc.Sequential([tfc.layers.Dense(1, input_shape=(3,))])
    model.compile("sgd", "mse", metrics=["mae"])
    return model


class Recorder(tfc.callbacks.Callback):
    def __init__(self, stop_at_batch: int | None = None) -> None:
        super().__init__()
        self.calls: list[tuple] = []
        self.stop_at_batch = stop_at_batch

    def on_train_begin(self, logs=None):
        self.calls.append(("train_begin", self.params))

    def on_train_end(self, logs=None):
        self.calls.append(("train_end",))

    def on_epoch_begin(self, epoch, logs=None):
        self.calls.append(("epoch_begin", epoch))

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(("epoch_end", epoch, dict(logs)))

    def on_batch_begin(self, batch, logs=None):
        self.calls.append(("batch_begin", batch))

    def on_batch_end(self, batch, logs=None):
        self.calls.append(("batch_end", batch, dict(logs)))
        if batch == self.stop_at_batch:
            self.model.stop_training = True


def test_hooks_run_in_order_with_their_logs():
    x, y = data()
    model = regressor()
    rec = Recorder()
    history = model.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0,
                        validation_data=(x, y), callbacks=[rec])
    kinds = [c[0] for c in rec.calls]
    per_epoch = ["epoch_begin"] + ["batch_begin", "batch_end"] * 3 + ["epoch_end"]
    assert kinds == ["train_begin", *per_epoch, *per_epoch, "train_end"]
    assert rec.calls[0][1] == {"epochs": 2, "steps": 3, "verbose": 0}
    assert rec.model is model
    batch_ends = [c for c in rec.calls if c[0] == "batch_end"]
    assert [c[2]["size"] for c in batch_ends[:3]] == [16, 16, 8]
    assert set(batch_ends[0][2]) == {"batch", "size", "loss", "mae"}
    epoch_ends = [c for c in rec.calls if c[0] == "epoch_end"]
    assert set(epoch_ends[0][2]) == {"loss", "mae", "val_loss", "val_mae"}
    assert [e[2]["loss"] for e in epoch_ends] == history["loss"]
    # the running mean after the last batch is the epoch's mean
    assert batch_ends[2][2]["loss"] == pytest.approx(epoch_ends[0][2]["loss"])


def test_stop_training_ends_fit_after_that_batch():
    x, y = data()
    model = regressor()
    rec = Recorder(stop_at_batch=1)
    history = model.fit(x, y, epochs=5, batch_size=16, verbose=0, callbacks=[rec])
    assert [c[0] for c in rec.calls].count("batch_end") == 2
    assert len(history["loss"]) == 1
    assert rec.calls[-1] == ("train_end",)
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)  # a new fit starts afresh
    assert not model.stop_training


def test_a_non_callback_is_a_clear_error():
    x, y = data()
    with pytest.raises(TfcError, match="tfc.callbacks.Callback"):
        regressor().fit(x, y, verbose=0, callbacks=[lambda: None])


def test_validation_metrics_show_in_each_epochs_progress_line(capsys):
    x, y = data()
    history = regressor().fit(x, y, epochs=2, batch_size=16, verbose=2,
                              validation_data=(x[:8], y[:8]))
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Epoch")]
    assert len(lines) == 2
    for line, val in zip(lines, history["val_loss"]):
        assert f"val_loss: {val:.4f}" in line and "val_mae:" in line
