"""The way to TensorBoard end to end: a model file with summaries, compiled for two devices,
trained by ``tfc run --logdir``; the event files read back with TensorBoard's reader (the
loss of every step, the summaries, the placed graph with its devices), then served by a
real TensorBoard server whose HTTP data API is read back."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import tfc
from tfc.cli import main

pytest.importorskip("tensorboard", reason="needs the tensorboard package (the tensorboard "
                                          "extra)")

MODEL = '''
import numpy as np
import tfc
x = tfc.placeholder(tfc.float32, [None, 4], "x")
with tfc.device("/cpu:0"):
    W1 = tfc.Variable(np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8), name="W1")
    h = tfc.nn.relu(tfc.matmul(x, W1))
with tfc.device("/cpu:1"):
    W2 = tfc.Variable(np.linspace(1, -1, 16, dtype=np.float32).reshape(8, 2), name="W2")
    out = tfc.matmul(h, W2)
loss = tfc.reduce_mean(out * out)
tfc.summary.scalar("summary_loss", loss)
tfc.summary.histogram("W2", W2)
train = tfc.train.GradientDescentOptimizer(0.05).minimize(loss)
tfc.entry("train_step", fetches={"loss": loss, "summaries": tfc.summary.merge_all()},
          targets=[train])
'''
STEPS = 5


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(artifact, feed file, logdir) after ``tfc run --steps 5 --logdir``."""
    d = tmp_path_factory.mktemp("tb")
    (d / "model.py").write_text(MODEL)
    np.save(d / "x.npy", np.linspace(0, 1, 24, dtype=np.float32).reshape(6, 4))
    art = d / "model.tfc"
    assert main(["compile", str(d / "model.py"), "--devices", "cpu:0,cpu:1", "-o", str(art),
                 "-q"]) == 0
    assert main(["run", str(art), "--entry", "train_step", "--feed", f"x={d / 'x.npy'}",
                 "--steps", str(STEPS), "--logdir", str(d / "runs")]) == 0
    return art, d / "x.npy", d / "runs"


def test_run_logdir_writes_every_steps_loss_and_summaries(trained, tb_events):
    art, feed, logdir = trained
    program = tfc.runtime.load(str(art))  # the artifact was not saved: the same start
    expect = [float(program.run("train_step", x=np.load(feed))["loss"]) for _ in range(STEPS)]
    got = tb_events.scalars(logdir, "loss")
    assert [s for s, _ in got] == list(range(1, STEPS + 1))  # the program's global step
    np.testing.assert_allclose([v for _, v in got], expect, rtol=1e-6)
    np.testing.assert_allclose([v for _, v in tb_events.scalars(logdir, "summary_loss")],
                               expect, rtol=1e-6)
    times = tb_events.scalars(logdir, "step_time_ms")
    assert len(times) == STEPS and all(t > 0 for _, t in times)
    hist = tb_events.tensors(logdir, "W2")
    assert len(hist) == STEPS and all(h[:, 2].sum() == 16 for _, h in hist)


def test_the_graph_is_the_placed_entry_with_its_devices(trained, tb_events):
    art, _, logdir = trained
    graph = tb_events.accumulator(logdir).Graph()
    nodes = {n.name: n for n in graph.node}
    assert len(nodes) == len(graph.node)  # unique names
    for n in graph.node:
        for inp in n.input:
            assert inp.split(":")[0] in nodes, (n.name, inp)
    assert {n.device for n in graph.node if n.op not in ("Placeholder", "_Retval")} \
        == {"/cpu:0", "/cpu:1"}
    assert nodes["W1"].op == "VariableV2" and nodes["W1"].device == "/cpu:0"
    assert nodes["W2"].device == "/cpu:1"
    assert nodes["W2/read"].input == ["W2"]
    entry = tfc.runtime.load(str(art)).entry("train_step")
    variables = {op.attrs["var"] for op in entry.ops if op.kind.startswith("var.")}
    assert len(graph.node) == (len(entry.args) + len(variables) + len(entry.ops)
                               + len(entry.results))


def test_add_graph_takes_a_program_module_or_graph(tmp_path, tb_events):
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 2], "x")
        tfc.entry("double", fetches={"y": x * 2.0})
        tfc.entry("triple", fetches={"y": x * 3.0})
        with tfc.summary.FileWriter(tmp_path / "a") as w:
            w.add_graph(g, "triple")
            with pytest.raises(tfc.TfcError, match="2 entries"):
                w.add_graph(g)
            with pytest.raises(tfc.TfcError, match="unknown entry 'quad'"):
                w.add_graph(g.as_module(), "quad")
            with pytest.raises(tfc.TfcError, match="expected a Program"):
                w.add_graph(42)
    nodes = [(n.name, n.op) for n in tb_events.accumulator(tmp_path / "a").Graph().node]
    assert ("x", "Placeholder") in nodes and ("fetch/y", "_Retval") in nodes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def test_real_tensorboard_serves_the_scalars_histograms_and_graph(trained, tb_events):
    _, _, logdir = trained
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # python -m tensorboard.main, without importing TensorFlow where it happens to be
    # installed (tb_events.NO_TF_PRELUDE): TensorBoard then reads with its own code
    code = (tb_events.NO_TF_PRELUDE + "import runpy; "
            "runpy.run_module('tensorboard.main', run_name='__main__')")
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--logdir", str(logdir), "--host", "127.0.0.1",
         "--port", str(port), "--reload_interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        tags: object = None
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                tags = get_json(f"{base}/data/plugin/scalars/tags")
                if tags and "loss" in tags.get(".", {}):  # type: ignore[union-attr]
                    break
            except OSError:
                pass
            time.sleep(0.3)
        assert tags and "loss" in tags["."], tags  # type: ignore[index]
        loss = get_json(f"{base}/data/plugin/scalars/scalars?run=.&tag=loss")
        expect = tb_events.scalars(logdir, "loss")
        assert [(s, pytest.approx(v, rel=1e-6)) for _, s, v in loss] == expect  # type: ignore
        hist = get_json(f"{base}/data/plugin/histograms/histograms?run=.&tag=W2")
        assert len(hist) == STEPS  # type: ignore[arg-type]
        assert sum(b[2] for b in hist[0][2]) == 16  # type: ignore[index]
        with urllib.request.urlopen(f"{base}/data/plugin/graphs/graph?run=.&conceptual=false",
                                    timeout=10) as r:
            pbtxt = r.read().decode()
        from google.protobuf import text_format
        from tensorboard.compat.proto.graph_pb2 import GraphDef
        served = text_format.Parse(pbtxt, GraphDef())
        saved = tb_events.accumulator(logdir).Graph()
        assert len(served.node) == len(saved.node)
        assert {n.device for n in served.node} >= {"/cpu:0", "/cpu:1"}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
