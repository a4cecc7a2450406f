"""``tfc compile --devices``, ``tfc ir --device``, ``tfc calibrate``, ``tfc bench``, ``tfc viz``."""

import json
from pathlib import Path

import numpy as np
import pytest

from tfc.cli import main
from tfc.runtime import load

MODEL = '''
import numpy as np
import tfc
x = tfc.placeholder(tfc.float32, [None, 4], name="x")
y = tfc.placeholder(tfc.int32, [None], name="y")
with tfc.device("/cpu:0"):
    w0 = tfc.Variable(np.full((4, 8), 0.1, np.float32), name="w0")
    h = tfc.nn.relu(tfc.matmul(x, w0))
with tfc.device("/cpu:1"):
    w1 = tfc.Variable(np.full((8, 3), 0.2, np.float32), name="w1")
    logits = tfc.matmul(h, w1)
loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
'''


@pytest.fixture
def model(tmp_path):
    p = tmp_path / "two.py"
    p.write_text(MODEL)
    return p


def run_ok(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def test_compile_for_two_devices_reports_placement_and_runs(model, tmp_path, capsys):
    out, _ = run_ok(capsys, "compile", model, "--devices", "cpu:0,cpu:1", "--fp16-transfers",
                    "-o", tmp_path / "two.tfc")
    assert "placement @train_step" in out and "round robin" in out
    program = load(tmp_path / "two.tfc")
    assert program.module.devices == ["/cpu:0", "/cpu:1"] and program.module.fp16_transfers
    x = np.ones((6, 4), np.float32)
    y = np.zeros(6, np.int32)
    loss = float(program.run("train_step", x=x, y=y)["loss"])
    assert np.isfinite(loss)


def test_ir_prints_one_devices_partition(model, capsys):
    out, _ = run_ok(capsys, "ir", model, "--devices", "cpu:0,cpu:1", "--device", "cpu:1")
    assert "partitions on /cpu:1" in out and "recv " in out and "send " in out
    assert 'on "/cpu:0"' not in out.split("\n", 1)[1]  # only cpu:1's ops
    code = main(["ir", str(model), "--devices", "cpu:0,cpu:1", "--device", "cpu:3"])
    assert code == 1
    assert "no partition on /cpu:3" in capsys.readouterr().err


def test_fp16_transfers_need_devices(model, tmp_path, capsys):
    assert main(["compile", str(model), "--fp16-transfers", "-o", str(tmp_path / "x.tfc")]) == 1
    assert "--devices" in capsys.readouterr().err


def test_bench_writes_a_chrome_trace(model, tmp_path, capsys):
    run_ok(capsys, "compile", model, "--devices", "cpu:0,cpu:1", "-q", "-o", tmp_path / "t.tfc")
    trace = tmp_path / "trace.json"
    out, err = run_ok(capsys, "bench", tmp_path / "t.tfc", "--steps", "3", "--batch", "8",
                      "--trace", trace, "--backend", "reference")
    assert "steps/s" in out and "/cpu:1" in out and "peak memory" in out
    # in-process transfers are hand-offs by reference, not bytes sent (copied)
    assert "hand-offs" in out and "bytes handed over" in out and "bytes sent" not in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.startswith("/cpu:")}
    assert int(rows["/cpu:0"][5]) + int(rows["/cpu:1"][5]) > 0  # hand-offs per step
    assert "synthetic feeds (batch 8)" in err
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names == {"/cpu:0", "/cpu:1"}
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in spans} >= {"stage", "recv"}
    starts = {e["id"] for e in events if e["ph"] == "s"}
    ends = {e["id"] for e in events if e["ph"] == "f"}
    assert starts and starts == ends  # every send arrow lands on its recv


def test_viz_writes_a_page(model, tmp_path, capsys):
    run_ok(capsys, "viz", model, "-o", tmp_path / "g.html")
    page = (tmp_path / "g.html").read_text()
    assert page.lstrip().lower().startswith("<!doctype html") and "/cpu:1" in page


def test_calibrate_writes_a_profile_placement_reads(tmp_path, capsys, monkeypatch):
    path = tmp_path / "devices.json"
    monkeypatch.setenv("TFC_DEVICE_PROFILE", str(path))
    out, _ = run_ok(capsys, "calibrate", "--devices", "cpu:0,cpu:1", "--backend", "reference")
    assert "GFLOP/s" in out and "GB/s" in out and "hand-off" in out and Path(path).exists()
    assert "a feed" in out and "an update" in out and "vector 1 thread" in out
    assert "serial 1 thread" in out
    from tfc.devices import cpu_count, load_profile
    prof = load_profile()
    assert prof.calibrated and prof.cores == cpu_count()  # the host the devices share
    assert str(path) in out and "calibrated rates" in out


ONE_DEVICE_MODEL = '''
import numpy as np
import tfc
x = tfc.placeholder(tfc.float32, [None, 4], name="x")
y = tfc.placeholder(tfc.int32, [None], name="y")
with tfc.device("/cpu:1"):
    w0 = tfc.Variable(np.full((4, 8), 0.1, np.float32), name="w0")
    w1 = tfc.Variable(np.full((8, 3), 0.2, np.float32), name="w1")
    logits = tfc.matmul(tfc.nn.relu(tfc.matmul(x, w0)), w1)
    loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                           logits=logits))
    train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
'''


@pytest.fixture
def one_device_artifact(tmp_path, capsys):
    """The model, every op pinned to /cpu:1, compiled for two devices with fp16 transfers
    (nothing crosses devices, so nothing is compressed)."""
    p = tmp_path / "solo.py"
    p.write_text(ONE_DEVICE_MODEL)
    out, _ = run_ok(capsys, "compile", p, "--devices", "cpu:0,cpu:1", "--fp16-transfers",
                    "-o", tmp_path / "solo.tfc")
    return tmp_path / "solo.tfc"


def test_an_entry_on_one_device_is_one_program_for_every_command(one_device_artifact,
                                                                  tmp_path, capsys):
    """An entry whose ops all sit on /cpu:1 has no partition table; the commands that read
    tables show it whole on /cpu:1 and bench it as one native call there."""
    from tfc.runtime.executor import PartitionedExecutable
    program = load(one_device_artifact)
    assert program.module.devices == ["/cpu:0", "/cpu:1"] and not program.module.partitions
    assert program.module.fp16_transfers  # compiled so; nothing crosses devices to compress
    assert not isinstance(program._executable("train_step"), PartitionedExecutable)
    out, _ = run_ok(capsys, "ir", one_device_artifact, "--device", "cpu:1")
    assert "@train_step on /cpu:1" in out and "send " not in out and "recv " not in out
    out, _ = run_ok(capsys, "ir", one_device_artifact, "--device", "cpu:0")
    assert "@train_step: nothing runs on /cpu:0" in out
    run_ok(capsys, "viz", one_device_artifact, "-o", tmp_path / "g.html")
    page = (tmp_path / "g.html").read_text()
    assert "/cpu:1" in page and "not partitioned" not in page
    trace = tmp_path / "trace.json"
    out, _ = run_ok(capsys, "bench", one_device_artifact, "--steps", "2", "--batch", "4",
                    "--trace", trace)
    assert "one native call" in trace.read_text()
    rows = [line.split() for line in out.splitlines() if line.startswith("/cpu:")]
    assert [r[0] for r in rows] == ["/cpu:1"]  # the device it runs on, alone
