"""Compiling for a cluster: ``compile_*(..., cluster=ClusterSpec(...))`` and
``tfc compile --cluster``: the artifact runs (in-process) as one process would, the report
says where the variables went, ``tfc ir --task`` shows one task, bad specs are one-line
errors."""

import re

import numpy as np
import pytest

from tfc.cli import main
from tfc.compiler.driver import compile_to_artifact, compile_with_report
from tfc.errors import TfcError
from tfc.passes.replicate import ClusterSpec
from tfc.runtime import load

MODEL_PY = """\
import numpy as np
import tfc

rng = np.random.default_rng(0)
x = tfc.placeholder(tfc.float64, [None, 4], name="x")
y = tfc.placeholder(tfc.float64, [None], name="y")
w = tfc.Variable(rng.normal(size=(4, 3)), name="w")
v = tfc.Variable(rng.normal(size=(3,)), name="v")
step = tfc.Variable(np.int64(0), trainable=False, name="global_step")
pred = tfc.reduce_sum(tfc.tanh(tfc.matmul(x, w)) * v, axis=1)
loss = tfc.reduce_mean(tfc.square(pred - y))
train = tfc.train.AdamOptimizer(0.1).minimize(loss, global_step=step)
tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
tfc.entry("predict", feeds={"x": x}, fetches={"pred": pred})
"""

RNG = np.random.default_rng(3)
X = RNG.normal(size=(8, 4))
Y = RNG.normal(size=(8,))


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL_PY)
    return path


def inprocess(path, backend):
    """The one place the tests build a program of a cluster artifact: every task's
    devices as threads of this process."""
    return load(path, backend=backend, cluster="inprocess")


@pytest.mark.parametrize("backend", ["reference", "llvm"])
@pytest.mark.parametrize("cluster", ["ps=2,workers=2", "ps=0,workers=4"])
def test_a_cluster_artifact_trains_as_one_process(model, tmp_path, backend, cluster):
    single = compile_to_artifact(model, tmp_path / "one.tfc", backend=backend)
    want = [float(single.run("train_step", x=X, y=Y)["loss"]) for _ in range(3)]
    out = tmp_path / "cluster.tfc"
    compile_to_artifact(model, out, backend=backend, cluster=ClusterSpec.parse(cluster))
    p = inprocess(out, backend)
    assert {d.split("/cpu")[0] for d in p.module.devices} >= {"/job:worker/task:1"}
    got = [float(p.run("train_step", x=X, y=Y)["loss"]) for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_allclose(p.run("predict", x=X)["pred"],
                               single.run("predict", x=X)["pred"], rtol=1e-10)
    assert int(p.variables["global_step"]) == 3


def test_the_report_says_where_variables_went(model):
    module, report = compile_with_report(model, backend="reference",
                                         cluster=ClusterSpec(2, 3, "ps-sync", "round-robin"))
    assert module.devices[:2] == ["/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0"]
    assert "replicate" in report.pipeline[3]
    text = "\n".join(report.cluster.lines())
    assert "cluster: 2 ps, 3 workers, strategy ps-sync, variables by round-robin" in text
    # round robin in creation order: w (+ slots) on ps 0, v (+ slots) on ps 1, then ps 0
    assert "ps:0: 5 variables" in text and "ps:1: 4 variables" in text
    assert "@train_step:" in text and "transfers across tasks per step" in text
    assert report.cluster.transfers["train_step"][0] > 0


def test_cli_compile_and_ir_task(model, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")  # what rich would fold a table to
    out = tmp_path / "m.tfc"
    assert main(["compile", str(model), "--cluster", "ps=1,workers=2", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "cluster: 1 ps, 2 workers, strategy ps-sync, variables by greedy placement" in text
    # a report that goes to a pipe or a file keeps its rows whole (not folded to 80 columns)
    assert re.search(r"^@\S+ .* /job:ps/task:0/cpu:0 ", text, re.MULTILINE), text
    assert main(["ir", str(out), "--task", "worker:1"]) == 0
    ir = capsys.readouterr().out
    assert "partitions on /job:worker/task:1/cpu:0" in ir and "split %x" in ir
    assert set(re.findall(r' on "([^"]+)"', ir)) == {"/job:worker/task:1/cpu:0"}
    assert main(["ir", str(out), "--task", "worker:7"]) == 1
    assert "no task worker:7 (its tasks: ps:0, worker:0, worker:1)" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--cluster", "ps=x,workers=2"], "ps='x' must be a whole number"),
    (["--cluster", "ps=1,workers=0"], "at least one worker"),
    (["--cluster", "ps=0,workers=2", "--strategy", "ps-sync"], "ps=0"),
    (["--strategy", "allreduce"], "--strategy applies to a cluster"),
    (["--cluster", "ps=1,workers=2", "--devices", "cpu:0,cpu:1"], "give one"),
])
def test_cli_bad_cluster_options_are_one_line_errors(model, tmp_path, capsys, argv, message):
    code = main(["compile", str(model), "-o", str(tmp_path / "m.tfc"), *argv])
    err = capsys.readouterr().err
    assert code == 1 and message in err and err.count("\n") == 1, err


def test_unknown_strategy_is_a_usage_error(model, tmp_path, capsys):
    assert main(["compile", str(model), "--cluster", "ps=1,workers=2", "--strategy",
                 "async"]) == 2
    assert "invalid choice: 'async'" in capsys.readouterr().err


def test_a_model_without_an_optimizer(tmp_path, capsys):
    path = tmp_path / "serve.py"
    path.write_text("import tfc\nx = tfc.placeholder(tfc.float32, [None], name='x')\n"
                    "tfc.entry('predict', feeds={'x': x}, fetches={'y': x * 2.0})\n")
    code = main(["compile", str(path), "--cluster", "ps=0,workers=2", "-o",
                 str(tmp_path / "s.tfc")])
    err = capsys.readouterr().err
    assert code == 1 and "no entry applies an optimizer" in err and err.count("\n") == 1


def test_python_api_errors(model):
    with pytest.raises(TfcError, match="has one task"):
        compile_with_report(model, cluster=ClusterSpec(0, 1), fp16_transfers=True)
