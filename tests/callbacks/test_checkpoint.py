"""ModelCheckpoint: the last k checkpoints, the best one, atomic saves (a writer killed
mid-save leaves the previous checkpoint loadable); load_weights(latest_checkpoint(dir))."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tfc
from tfc.callbacks import Callback, ModelCheckpoint
from tfc.errors import TfcError
from tfc.runtime.checkpoint import CheckpointError, read_index


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


class Script(Callback):
    """Sets each epoch's ``val_loss`` to the next scripted value and keeps its weights."""

    def __init__(self, values):
        super().__init__()
        self.values, self.weights = list(values), []

    def on_epoch_end(self, epoch, logs=None):
        logs["val_loss"] = self.values[epoch]
        self.weights.append(self.model.get_weights())


def problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 3)).astype(np.float32)
    return x, x @ np.array([0.5, -1.0, 2.0], np.float32)


def model_of(seed: int = 0) -> tfc.Sequential:
    tfc.set_random_seed(seed)
    model = tfc.Sequential([tfc.layers.Dense(4, activation="relu", input_shape=(3,)),
                            tfc.layers.Dense(1)])
    model.compile("adam", "mse")
    return model


def assert_weights(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_keeps_the_last_k_and_the_best(tmp_path):
    x, y = problem()
    model = model_of()
    script = Script([0.9, 0.4, 0.7, 0.8, 0.6])
    ckpt = ModelCheckpoint(tmp_path, monitor="val_loss", max_to_keep=2)
    model.fit(x, y, epochs=5, batch_size=8, verbose=0, callbacks=[script, ckpt])
    files = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".tfckpt")
    assert files == ["best.tfckpt", "ckpt-12.tfckpt", "ckpt-15.tfckpt"]  # 3 steps an epoch
    assert read_index(tmp_path) == ["ckpt-12.tfckpt", "ckpt-15.tfckpt"]
    assert ckpt.best == 0.4 and ckpt.best_epoch == 1
    assert json.loads((tmp_path / "best.json").read_text()) == {
        "monitor": "val_loss", "value": 0.4, "epoch": 2, "step": 6}
    with tfc.Graph().as_default():  # a new program: variables are matched by name
        fresh = model_of(seed=5)
        fresh.build()
        fresh.load_weights(tfc.train.latest_checkpoint(tmp_path))
        assert_weights(fresh.get_weights(), script.weights[4])
        assert fresh.session.step == 15
        fresh.load_weights(ckpt.best_path)
        assert_weights(fresh.get_weights(), script.weights[1])
        # the optimizer's state came back too: one more step matches the original's
        fresh.fit(x, y, epochs=1, batch_size=24, shuffle=False, verbose=0)
    model.load_weights(ckpt.best_path)
    model.fit(x, y, epochs=1, batch_size=24, shuffle=False, verbose=0)
    assert_weights(fresh.get_weights(), model.get_weights())


def test_save_best_only_and_max_mode(tmp_path):
    x, y = problem()
    script = Script([0.5, 0.7, 0.6, 0.9])
    ckpt = ModelCheckpoint(tmp_path, monitor="val_loss", mode="max", save_best_only=True,
                           max_to_keep=None)
    model_of().fit(x, y, epochs=4, batch_size=8, verbose=0, callbacks=[script, ckpt])
    assert read_index(tmp_path) == ["ckpt-3.tfckpt", "ckpt-6.tfckpt", "ckpt-12.tfckpt"]
    assert ckpt.best == 0.9


def test_a_killed_save_leaves_the_previous_checkpoint_usable(tmp_path):
    """A process SIGKILLed in the middle of writing a checkpoint: the index still names
    the previous one, which loads with the weights it was saved with."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        import numpy as np
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import tfc
        import tfc.runtime.checkpoint as ck
        from test_checkpoint import model_of, problem
        x, y = problem()
        model = model_of()
        cb = tfc.callbacks.ModelCheckpoint(sys.argv[1], monitor=None)
        model.fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[cb])
        np.savez(sys.argv[2], *model.get_weights())
        write = ck._write_array
        def dying(member, arr):  # the first variable written, then the process dies
            write(member, arr)
            member.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        ck._write_array = dying
        model.fit(x, y, epochs=1, batch_size=8, verbose=0, callbacks=[cb])
    """)
    saved = tmp_path / "saved.npz"
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "ck"), str(saved)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == -9, out.stderr
    names = os.listdir(tmp_path / "ck")
    assert any(n.endswith(".tmp") for n in names)  # the killed writer's temp file
    assert tfc.train.latest_checkpoint(tmp_path / "ck").endswith("ckpt-6.tfckpt")
    model = model_of(seed=3)
    model.build()
    model.load_weights(tfc.train.latest_checkpoint(tmp_path / "ck"))
    with np.load(saved) as want:
        assert_weights(model.get_weights(), [want[f"arr_{i}"] for i in range(len(want))])
    # the next save cleans the dead writer's temp file up
    x, y = problem()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0,
              callbacks=[ModelCheckpoint(tmp_path / "ck", monitor=None)])
    assert not any(n.endswith(".tmp") for n in os.listdir(tmp_path / "ck"))


def test_load_weights_errors(tmp_path):
    x, y = problem()
    model = model_of()
    model.fit(x, y, epochs=1, verbose=0, callbacks=[ModelCheckpoint(tmp_path, monitor=None)])
    with pytest.raises(CheckpointError, match="latest_checkpoint find no checkpoint"):
        model.load_weights(tfc.train.latest_checkpoint(tmp_path / "empty"))
    with tfc.Graph().as_default():  # same names, other shapes
        other = tfc.Sequential([tfc.layers.Dense(7, input_shape=(3,))])
        other.build()
        with pytest.raises(CheckpointError, match="has no value for variable|shape"):
            other.load_weights(tfc.train.latest_checkpoint(tmp_path))
    with pytest.raises(TfcError, match="save_best_only needs a monitor"):
        ModelCheckpoint(tmp_path, monitor=None, save_best_only=True)
    (tmp_path / "f").write_text("")
    with pytest.raises(TfcError, match="is a file"):
        ModelCheckpoint(tmp_path / "f")
