"""The TensorBoard callback: fit's loss, metrics, learning rate, step time, weight
histograms and graph, read back with TensorBoard's own reader."""

import numpy as np
import pytest

import tfc
from tfc.callbacks import LearningRateScheduler, TensorBoard
from tfc.errors import TfcError


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def test_epochs_and_batches_read_back(tmp_path, tb_events):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 2)).astype(np.float32)
    y = (x[:, 0] > x[:, 1]).astype(np.int32)
    model = tfc.Sequential([tfc.layers.Dense(5, activation="relu", input_shape=(2,)),
                            tfc.layers.Dense(2, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=3, batch_size=10, verbose=0, validation_data=(x, y),
                        callbacks=[LearningRateScheduler(lambda e: 0.1 / (e + 1)),
                                   TensorBoard(tmp_path, histogram_freq=2, update_freq=2)])
    train, val = tmp_path / "train", tmp_path / "validation"

    def values(logdir, tag):
        return [v for _, v in tb_events.scalars(logdir, tag)]

    assert [s for s, _ in tb_events.scalars(train, "epoch_loss")] == [0, 1, 2]
    np.testing.assert_allclose(values(train, "epoch_loss"), history["loss"], rtol=1e-6)
    np.testing.assert_allclose(values(train, "epoch_accuracy"), history["accuracy"])
    np.testing.assert_allclose(values(val, "epoch_loss"), history["val_loss"], rtol=1e-6)
    np.testing.assert_allclose(values(val, "epoch_accuracy"), history["val_accuracy"])
    np.testing.assert_allclose(values(train, "epoch_learning_rate"), [0.1, 0.05, 0.1 / 3],
                               rtol=1e-6)
    assert all(t > 0 for t in values(train, "epoch_step_time_ms"))
    # 3 batches an epoch, every second global batch
    assert [s for s, _ in tb_events.scalars(train, "batch_loss")] == [2, 4, 6, 8]
    assert len(values(train, "batch_step_time_ms")) == 4
    for var in model.variables:
        hists = tb_events.tensors(train, var.name)
        assert [s for s, _ in hists] == [0, 2]
        assert hists[-1][1][:, 2].sum() == np.prod(var.shape)
    graph = tb_events.accumulator(train).Graph()
    kinds = {n.op for n in graph.node}
    assert {"Placeholder", "VariableV2", "matmul", "var.read", "var.assign_sub"} <= kinds


def test_bad_arguments(tmp_path):
    with pytest.raises(TfcError, match="update_freq"):
        TensorBoard(tmp_path, update_freq="often")
    with pytest.raises(TfcError, match="histogram_freq"):
        TensorBoard(tmp_path, histogram_freq=-1)
