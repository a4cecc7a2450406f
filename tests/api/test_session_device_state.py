"""``Session`` on the cuda backend keeps its variables on the device across runs
(``tfc.runtime.held.VariableStore``): a training run copies back only its fetches, and
whatever reads the variables (a fetch by another request, ``variable_values``, a
``Saver``) or writes them (``Session.variables[...] =``, ``Saver.restore``, an assign op)
sees exactly what a reference session sees.

Off a GPU these run on the CPU emulator; under ``TFC_BACKEND=cuda`` on a machine with a
GPU they run on it (``emulated_off_the_gpu``), counting its device->host copies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import tfc
from tfc.backends.cuda import device as cuda_device
from tfc.errors import ExecutionError

emulated = pytest.importorskip("tests.backends.cuda.emulated")
Copies, ON_GPU = emulated.Copies, emulated.ON_GPU

RTOL = 1e-5


@pytest.fixture(autouse=True)
def on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    emulated.emulated_off_the_gpu(monkeypatch)


class Model:
    """A two-layer classifier trained with momentum (variables and optimizer slots), and
    a cuda and a reference session of its graph."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        with tfc.Graph().as_default() as g:
            self.x = tfc.placeholder(tfc.float32, [None, 6], name="x")
            self.y = tfc.placeholder(tfc.int32, [None], name="y")
            self.w0 = tfc.Variable(rng.normal(0, 0.5, (6, 8)).astype(np.float32), name="w0")
            self.b0 = tfc.Variable(np.zeros(8, np.float32), name="b0")
            self.w1 = tfc.Variable(rng.normal(0, 0.5, (8, 3)).astype(np.float32), name="w1")
            h = tfc.nn.relu(tfc.matmul(self.x, self.w0) + self.b0)
            logits = tfc.matmul(h, self.w1)
            self.loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
                labels=self.y, logits=logits))
            self.train = tfc.train.MomentumOptimizer(0.1, 0.9).minimize(self.loss)
            self.logits = logits
            self.graph = g
        self.mine = tfc.Session(g, backend="cuda")
        self.ref = tfc.Session(g, backend="reference")

    def feed(self, step: int, batch: int = 4) -> dict[Any, np.ndarray]:
        rng = np.random.default_rng(100 + step)
        return {self.x: rng.normal(size=(batch, 6)).astype(np.float32),
                self.y: rng.integers(0, 3, batch).astype(np.int32)}

    def step(self, k: int) -> None:
        """One training step in both sessions; their losses agree."""
        got = self.mine.run([self.train, self.loss], self.feed(k))[1]
        want = self.ref.run([self.train, self.loss], self.feed(k))[1]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL)

    def assert_same_variables(self) -> None:
        mine, ref = self.mine.variable_values(), self.ref.variable_values()
        assert sorted(mine) == sorted(ref)
        for name, want in ref.items():
            np.testing.assert_allclose(mine[name], want, rtol=RTOL, atol=RTOL, err_msg=name)
        assert self.mine.step == self.ref.step


@pytest.fixture
def model() -> Iterator[Model]:
    m = Model()
    yield m
    m.mine.close()
    m.ref.close()


def test_training_runs_copy_no_variable_back(model: Model) -> None:
    """After the first run, each training run copies back its loss and nothing else;
    ``make_callable`` steps too. The values read afterwards are the reference's."""
    model.step(0)  # uploads the variables, once
    with Copies(cuda_device.cuda_device()) as copies:
        for k in range(1, 4):
            model.step(k)
        assert copies.to_host == [()] * 3  # each run's loss
        if not ON_GPU:  # (a GPU copies feeds through its staging buffers)
            assert copies.uploads == [(4, 6), (4,)] * 3
        copies.clear()
        step = model.mine.make_callable(model.loss, [model.x, model.y])
        ref_step = model.ref.make_callable(model.loss, [model.x, model.y])
        for k in range(4, 6):  # (a loss-only request: no training, same variables)
            f = model.feed(k)
            np.testing.assert_allclose(step(*f.values()), ref_step(*f.values()), rtol=RTOL)
        copies.clear()
        model.step(6)
        assert copies.to_host == [()]
        copies.clear()
        model.assert_same_variables()  # read back: one copy per variable
        assert sorted(copies.to_host) == sorted(
            v.shape for v in model.ref.variable_values().values())
        copies.clear()
        model.step(7)  # the arrays read back are current on the device: no upload
        assert copies.to_host == [()]
        if not ON_GPU:
            assert copies.uploads == [(4, 6), (4,)]
    model.assert_same_variables()


def test_a_variable_fetched_mid_training_then_more_steps(model: Model) -> None:
    """Fetching a variable (alone, and beside a training run) gives its current value,
    and the steps after it go on from the device's values."""
    for k in range(3):
        model.step(k)
    np.testing.assert_allclose(model.mine.run(model.w0), model.ref.run(model.w0),
                               rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(model.w1.eval(session=model.mine),
                               model.w1.eval(session=model.ref), rtol=RTOL, atol=RTOL)
    for k in range(3, 5):
        got = model.mine.run([model.train, model.w1], model.feed(k))[1]
        want = model.ref.run([model.train, model.w1], model.feed(k))[1]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL)  # start-of-step value
    np.testing.assert_allclose(model.mine.variables["b0"], model.ref.variables["b0"],
                               rtol=RTOL, atol=RTOL)
    for k in range(5, 7):
        model.step(k)
    model.assert_same_variables()


def test_a_checkpoint_saved_and_restored_mid_training(model: Model, tmp_path: Path) -> None:
    saver = tfc.train.Saver()
    for k in range(3):
        model.step(k)
    path = saver.save(model.mine, str(tmp_path / "mine"))
    saver.save(model.ref, str(tmp_path / "ref"))
    at_ckpt = {n: v.copy() for n, v in model.ref.variable_values().items()}
    for k in range(3, 6):
        model.step(k)
    saver.restore(model.mine, path)  # the device copies go back to the checkpoint's
    saver.restore(model.ref, str(tmp_path / "ref.tfckpt"))
    model.assert_same_variables()
    for k in range(3, 6):  # the same steps again, from the restored values
        model.step(k)
    model.assert_same_variables()
    # a checkpoint of the cuda session restores into a reference session exactly
    other = tfc.Session(model.graph, backend="reference")
    saver.restore(other, path)
    for name, value in other.variable_values().items():
        np.testing.assert_allclose(value, at_ckpt[name], rtol=RTOL, atol=RTOL,
                                   err_msg=name)


def test_writes_from_numpy_and_assign_ops_reach_the_device(model: Model) -> None:
    for k in range(2):
        model.step(k)
    w = np.full((6, 8), 0.01, np.float32)
    for sess in (model.mine, model.ref):
        sess.variables["w0"] = w  # a writeable array the user keeps
    for k in range(2, 4):
        model.step(k)
    w[...] = 5.0  # (the device was given a copy: changing it now changes nothing)
    model.assert_same_variables()
    with model.graph.as_default():
        assign = model.b0.assign(tfc.constant(np.arange(8, dtype=np.float32)))
    for sess in (model.mine, model.ref):
        sess.run(assign)
    for k in range(4, 6):
        model.step(k)
    model.assert_same_variables()
    # re-initializing puts every variable back to its initial value, on the device too
    init = tfc.global_variables_initializer(model.graph)
    for sess in (model.mine, model.ref):
        sess.run(init)
    model.step(6)
    model.assert_same_variables()


def test_a_failed_run_changes_no_variable(model: Model) -> None:
    for k in range(2):
        model.step(k)
    before = {n: v.copy() for n, v in model.mine.variable_values().items()}
    bad = model.feed(2)
    bad[model.y] = np.array([0, 1, 7, 2], np.int32)  # a label out of range
    for sess in (model.mine, model.ref):
        with pytest.raises(ExecutionError, match="label"):
            sess.run([model.train, model.loss], bad)
    for name, want in before.items():
        np.testing.assert_array_equal(model.mine.variable_values()[name], want, err_msg=name)
    model.step(3)
    model.assert_same_variables()
