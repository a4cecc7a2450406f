"""``tfc compile --strategy ps-async`` and ``tfc run`` of what it stores: asynchronous
training, and synchronous training with backup workers and injected stragglers, from the
command line (``tfc.cli_ps``). One worker reproduces the single program's numbers; the
progress output shows the staleness and the dropped gradients."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.cli import main
from tfc.compiler.ps_training import ps_training_spec
from tfc.ir.printer import print_module
from tfc.ops.optimizer import GRAD_MARKER
from tfc.runtime import Program
from tfc.runtime.artifact import read_artifact

from tests.passes.test_async_split import classifier

N, BATCH = 24, 4


@pytest.fixture
def model(tmp_path):
    """The two-layer classifier (Momentum) as IR, and its feeds as .npy files."""
    path = tmp_path / "m.tfir"
    path.write_text(print_module(classifier("momentum")))
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(N, 5)), rng.integers(0, 3, N).astype(np.int32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    feeds = ["--feed", f"x={tmp_path / 'x.npy'}", "--feed", f"y={tmp_path / 'y.npy'}"]
    return path, feeds, x, y


def compiled(tmp_path, model, capsys, cluster="ps=2,workers=1"):
    out = tmp_path / "m.tfc"
    assert main(["compile", str(model[0]), "--cluster", cluster, "--strategy", "ps-async",
                 "-o", str(out)]) == 0
    return out, capsys.readouterr().out


def single_program_loss(x, y, steps):
    """The last loss of ``steps`` steps on the --batch mini-batches, in one process."""
    one = Program(classifier("momentum"), backend="reference")
    for k in range(steps):
        s = slice((k * BATCH) % N, (k * BATCH) % N + BATCH)
        loss = one.run("train", x=x[s], y=y[s])["loss"]
    return float(loss), one


def test_compile_stores_the_step_uncut_for_the_trainers(tmp_path, model, capsys):
    out, report = compiled(tmp_path, model, capsys, "ps=2,workers=3")
    assert "strategy ps-async" in report and "ps:0:" in report and "ps:1:" in report
    module, _, _ = read_artifact(out)
    spec = ps_training_spec(module)
    assert (spec.ps, spec.workers, spec.strategy) == (2, 3, "ps-async")
    assert any(op.kind == GRAD_MARKER for op in module.graphs["train"].ops)  # uncut
    assert {d.device for d in module.variables.values()} == {"/job:ps/task:0/cpu:0",
                                                             "/job:ps/task:1/cpu:0"}


def test_ps_training_flags_are_clear_errors(tmp_path, model, capsys):
    out, _ = compiled(tmp_path, model, capsys)
    feeds = model[1]
    assert main(["run", str(out), *feeds, "--steps", "2"]) == 1
    assert "give --cluster local, auto or HOST:PORT" in capsys.readouterr().err
    assert main(["run", str(out), *feeds, "--cluster", "local", "--checkpoint-dir",
                 str(tmp_path / "ck")]) == 1
    assert "--checkpoint-dir is not supported for a ps-async" in capsys.readouterr().err
    assert main(["run", str(out), *feeds, "--cluster", "local",
                 "--straggler", "gaussian:1"]) == 1
    assert "error: --straggler 'gaussian:1'" in capsys.readouterr().err
    plain = tmp_path / "plain.tfc"
    assert main(["compile", str(model[0]), "-o", str(plain), "-q"]) == 0
    assert main(["run", str(plain), *feeds, "--backup-workers", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --backup-workers") and "--strategy ps-async" in err
    no_optimizer = tmp_path / "predict.tfir"
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 2], name="x")
        w = tfc.Variable(np.ones((2, 2), np.float32), name="w")
        tfc.entry("predict", feeds={"x": x}, fetches={"y": tfc.matmul(x, w)})
    no_optimizer.write_text(print_module(g.as_module()))
    assert main(["compile", str(no_optimizer), "--cluster", "ps=1,workers=2",
                 "--strategy", "ps-async", "-o", str(tmp_path / "p.tfc")]) == 1
    assert "no entry applies an optimizer" in capsys.readouterr().err


@pytest.mark.distributed
def test_tfc_run_trains_asynchronously_and_shows_the_staleness(loopback_cluster, tmp_path,
                                                                model, capsys):
    out, _ = compiled(tmp_path, model, capsys)  # one worker: the single program's steps
    steps = 8
    code = main(["run", str(out), *model[1], "--batch", str(BATCH), "--steps", str(steps),
                 "--cluster", loopback_cluster.address, "--save",
                 "--straggler", "lognormal:sigma=0.5,median=1ms,seed=1"])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    assert "staleness: median 0, p90 0, max 0" in err  # one worker: never stale
    assert "staleness histogram (updates): 0: 16" in err  # 8 steps x 2 PS tasks
    assert f"step {steps}/{steps}" in err
    want, one = single_program_loss(model[2], model[3], steps)
    assert float(stdout.split()[-1]) == pytest.approx(want, rel=1e-12)
    module, values, manifest = read_artifact(out)  # --save: the PS tasks' variables
    assert manifest["step"] == steps and ps_training_spec(module) is not None
    for name, value in one.variables.items():
        np.testing.assert_allclose(values[name], value, rtol=1e-12, err_msg=name)


@pytest.mark.distributed
def test_tfc_run_with_backup_workers_drops_the_stragglers_gradients(loopback_cluster,
                                                                     tmp_path, model, capsys):
    out, _ = compiled(tmp_path, model, capsys)
    code = main(["run", str(out), *model[1], "--batch", str(BATCH), "--steps", "6",
                 "--cluster", loopback_cluster.address, "--backup-workers", "1",
                 "--straggler", "worker:1=150ms"])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    assert "synchronous steps of 1 gradients on 1 + 1 workers" in err
    dropped = int(err.split(" dropped (late)")[0].split()[-1])
    assert dropped >= 1  # the slow worker's offers came late
    assert "step 6/6" in err and "loss: f64[]" in stdout
