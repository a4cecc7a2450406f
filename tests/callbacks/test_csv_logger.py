"""CSVLogger: a header and one row per epoch, appended on request."""

import csv

import numpy as np
import pytest

import tfc
from tfc.callbacks import CSVLogger
from tfc.errors import TfcError


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def test_rows_per_epoch_and_append(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 2)).astype(np.float32)
    y = x.sum(axis=1)
    model = tfc.Sequential([tfc.layers.Dense(1, input_shape=(2,))])
    model.compile("sgd", "mse", metrics=["mae"])
    path = tmp_path / "log.csv"
    h1 = model.fit(x, y, epochs=2, verbose=0, validation_data=(x, y),
                   callbacks=[CSVLogger(path)])
    h2 = model.fit(x, y, epochs=1, verbose=0, validation_data=(x, y),
                   callbacks=[CSVLogger(path, append=True)])
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["epoch", "loss", "mae", "val_loss", "val_mae"]
    assert [r[0] for r in rows[1:]] == ["0", "1", "0"]
    assert [float(r[1]) for r in rows[1:]] == [*h1["loss"], *h2["loss"]]
    assert [float(r[4]) for r in rows[1:]] == [*h1["val_mae"], *h2["val_mae"]]
    model.fit(x, y, epochs=1, verbose=0, callbacks=[CSVLogger(path)])  # replaces the file
    assert len(list(csv.reader(path.open()))) == 2


def test_a_directory_is_a_clear_error(tmp_path):
    with pytest.raises(TfcError, match="is a directory"):
        CSVLogger(tmp_path)
