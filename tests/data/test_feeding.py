"""``tfc run --batch N --epochs E --shuffle --seed S``: mini-batch training from the command
line, and its position in checkpoints (``tfc.data.feeding``)."""

import numpy as np
import pytest

from tfc.cli import main
from tfc.runtime.checkpoint import read_checkpoint

TRAINER = """\
import numpy as np
import tfc

x = tfc.placeholder(tfc.float32, [None, 3], name="x")
y = tfc.placeholder(tfc.float32, [None], name="y")
lr = tfc.placeholder(tfc.float32, [], name="lr")
w = tfc.Variable(np.array([0.5, -0.25, 1.0], np.float32), name="w")
seen = tfc.Variable(np.float32(0), name="seen")   # sum of the labels of every batch fed
loss = tfc.reduce_mean(tfc.square(tfc.reduce_sum(x * w, axis=1) - y))
grad = tfc.gradients(loss, [w.value()])[0]
tfc.entry("train", feeds={"x": x, "y": y, "lr": lr}, fetches={"loss": loss},
          targets=[w.assign(w.value() - lr * grad), seen.assign_add(tfc.reduce_sum(y))])
"""


@pytest.fixture
def setup(tmp_path, capsys):
    (tmp_path / "m.py").write_text(TRAINER)
    art = tmp_path / "m.tfc"
    assert main(["compile", str(tmp_path / "m.py"), "-o", str(art), "-q"]) == 0
    rng = np.random.default_rng(1)
    np.save(tmp_path / "x.npy", rng.normal(size=(64, 3)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.normal(size=64).astype(np.float32))
    capsys.readouterr()
    feeds = ["--feed", f"x={tmp_path / 'x.npy'}", "--feed", f"y={tmp_path / 'y.npy'}",
             "--feed", "lr=0.1"]
    return art, feeds


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return err


def values(directory):
    ckpt = read_checkpoint(directory)
    return ckpt.step, ckpt.values


def test_run_batches_every_example_once_per_epoch(setup, tmp_path, capsys):
    art, feeds = setup
    run(capsys, "run", art, *feeds, "--batch", 16, "--epochs", 3, "--shuffle", "--seed", 7,
        "--checkpoint-dir", tmp_path / "ck")
    step, vals = values(tmp_path / "ck")
    assert step == 12  # 3 epochs of 64 / 16
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(vals["seen"], 3 * y.sum(dtype=np.float32), rtol=1e-5)


def test_run_same_seed_same_batches_and_other_seed_differs(setup, tmp_path, capsys):
    art, feeds = setup
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        run(capsys, "run", art, *feeds, "--batch", 16, "--steps", 3, "--shuffle", "--seed",
            seed, "--checkpoint-dir", tmp_path / name)
    a, b, c = (values(tmp_path / n)[1]["w"] for n in "abc")
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_run_resume_mid_epoch_equals_an_unbroken_run_bit_for_bit(setup, tmp_path, capsys):
    art, feeds = setup
    common = [*feeds, "--batch", 16, "--shuffle", "--seed", 3]
    run(capsys, "run", art, *common, "--epochs", 2, "--checkpoint-dir", tmp_path / "whole")
    # 1.5 epochs (6 of 8 batches), then a new process resumes and runs to the end of epoch 2
    run(capsys, "run", art, *common, "--steps", 6, "--checkpoint-dir", tmp_path / "parts")
    err = run(capsys, "run", art, *common, "--epochs", 2, "--checkpoint-dir",
              tmp_path / "parts", "--resume")
    assert "(step 6)" in err
    whole, parts = values(tmp_path / "whole"), values(tmp_path / "parts")
    assert whole[0] == parts[0] == 8
    for name in ("w", "seen"):
        assert whole[1][name].tobytes() == parts[1][name].tobytes(), name
    extra = read_checkpoint(tmp_path / "parts").extra
    assert int(extra["data/batches"]) == 8 and int(extra["data/batch_size"]) == 16


def test_run_batch_errors(setup, tmp_path, capsys):
    art, feeds = setup

    def err(*argv):
        assert main([str(a) for a in argv]) == 1
        return capsys.readouterr()[1]

    assert err("run", art, *feeds, "--shuffle") == "error: --shuffle needs --batch N\n"
    assert err("run", art, *feeds, "--batch", 0) == "error: --batch must be at least 1, not 0\n"
    assert err("run", art, *feeds, "--batch", 4, "--seed", 1) == "error: --seed needs --shuffle\n"
    assert err("run", art, *feeds, "--batch", 4, "--steps", 2, "--epochs", 1) == \
        "error: give --steps or --epochs, not both\n"
    np.save(tmp_path / "short.npy", np.zeros(10, np.float32))
    assert "different first dims (x: 64, y: 10)" in err(
        "run", art, feeds[0], feeds[1], "--feed", f"y={tmp_path / 'short.npy'}",
        "--feed", "lr=0.1", "--batch", 4)
    run(capsys, "run", art, *feeds, "--batch", 16, "--steps", 2, "--checkpoint-dir",
        tmp_path / "ck")
    assert "was saved with --batch 16, not 8" in err(
        "run", art, *feeds, "--batch", 8, "--checkpoint-dir", tmp_path / "ck", "--resume")
    assert "does not fit this --batch pipeline" in err(
        "run", art, *feeds, "--batch", 16, "--shuffle", "--checkpoint-dir", tmp_path / "ck",
        "--resume")
    run(capsys, "run", art, *feeds, "--batch", 16, "--epochs", 1, "--checkpoint-dir",
        tmp_path / "ck", "--resume")
    assert "already past epoch 1" in err(
        "run", art, *feeds, "--batch", 16, "--epochs", 1, "--checkpoint-dir",
        tmp_path / "ck", "--resume")
