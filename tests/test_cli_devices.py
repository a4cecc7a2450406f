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


WIDE_MLP = '''
import numpy as np
import tfc
rng = np.random.default_rng(0)
x = tfc.placeholder(tfc.float32, [1024, 784], name="x")
y = tfc.placeholder(tfc.int32, [1024], name="y")
h = x
for i, (a, b) in enumerate([(784, 2048), (2048, 2048), (2048, 10)]):
    w = tfc.Variable((rng.normal(0, 0.02, (a, b))).astype(np.float32), name=f"w{i}")
    h = tfc.matmul(h, w)
    if b != 10:
        h = tfc.nn.relu(h)
loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
'''


def test_compile_for_a_cpu_and_a_gpu_places_by_the_cost_model(tmp_path, capsys, monkeypatch):
    """``tfc compile --devices cpu:0,gpu:0``: the cost model (default rates: a 4-core host,
    an H100-class GPU) puts a wide MLP's GEMMs on the GPU; the artifact names both devices.
    The CUDA backend is stood in for by the reference interpreter
    (``tfc.testing.StandInCudaBackend``), so this holds on any machine."""
    from tfc.testing import use_stand_in_cuda
    stand_in = use_stand_in_cuda(monkeypatch)
    src = tmp_path / "wide.py"
    src.write_text(WIDE_MLP)
    out, _ = run_ok(capsys, "compile", src, "--devices", "cpu:0,gpu:0", "--backend",
                    "reference", "-o", tmp_path / "wide.tfc")
    assert "placement @train_step" in out
    program = load(tmp_path / "wide.tfc")
    assert program.module.devices == ["/cpu:0", "/gpu:0"]
    graph = program.module.entries["train_step"]
    assert {op.device for op in graph.ops if op.kind == "matmul"} == {"/gpu:0"}
    stand_in.compiled = []
    loss = program.run("train_step", x=np.zeros((1024, 784), np.float32),
                       y=np.zeros(1024, np.int32))["loss"]
    assert float(loss) == pytest.approx(np.log(10), rel=1e-5)  # zero inputs: uniform logits
    assert stand_in.compiled == ["train_step"]  # the GPU's entry ran on "cuda"


def test_devices_says_what_this_machine_offers(capsys, monkeypatch):
    monkeypatch.setattr("tfc.pipeline.cuda_compile_unavailable", lambda: "no NVRTC here")
    out, _ = run_ok(capsys, "devices")
    lines = out.splitlines()
    assert lines[0].startswith("/cpu:N: ") and "cores" in lines[0]
    assert "CUDA compile: no: no NVRTC here" in out
    assert any(line.startswith("CUDA run: ") for line in lines)
    monkeypatch.setattr("tfc.pipeline.cuda_compile_unavailable", lambda: None)
    out, _ = run_ok(capsys, "devices")
    assert "CUDA compile: yes" in out


CPU_GPU_MODEL = '''
import numpy as np
import tfc
rng = np.random.default_rng(0)
x = tfc.placeholder(tfc.float32, [None, 20], name="x")
y = tfc.placeholder(tfc.int32, [None], name="y")
with tfc.device("/cpu:0"):
    w0 = tfc.Variable(rng.normal(0, 0.3, (20, 16)).astype(np.float32), name="w0")
    h = tfc.nn.relu(tfc.matmul(x, w0))
with tfc.device("/gpu:0"):
    w1 = tfc.Variable(rng.normal(0, 0.3, (16, 5)).astype(np.float32), name="w1")
    logits = tfc.matmul(h, w1)
loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
'''


def _cuda_compiles() -> bool:
    from tfc.pipeline import cuda_compile_unavailable
    return cuda_compile_unavailable() is None


@pytest.mark.skipif(not _cuda_compiles(), reason="no CUDA C compiler (NVRTC) here")
@pytest.mark.parametrize("fp16", [False, True])
def test_a_cpu_gpu_artifact_compiles_without_a_gpu_and_trains_on_the_emulator(
        tmp_path, capsys, monkeypatch, fp16):
    """The real CUDA backend: ``--devices cpu:0,gpu:0`` compiles (kernels through NVRTC)
    on a machine without a GPU; running there says there is no CUDA device; on the CUDA
    emulator the cpu/gpu split trains as one CPU device does (fp16 transfers: close)."""
    from tfc.devices import gpu_count
    src = tmp_path / "split.py"
    src.write_text(CPU_GPU_MODEL)
    run_ok(capsys, "compile", src, "--devices", "cpu:0,gpu:0", "-o", tmp_path / "split.tfc",
           *(["--fp16-transfers"] if fp16 else []))
    one = tmp_path / "one.py"
    one.write_text(CPU_GPU_MODEL.replace('"/gpu:0"', '"/cpu:0"'))
    run_ok(capsys, "compile", one, "-o", tmp_path / "one.tfc")
    rng = np.random.default_rng(1)
    feeds = {"x": rng.normal(size=(8, 20)).astype(np.float32),
             "y": (np.arange(8) % 5).astype(np.int32)}
    split = load(tmp_path / "split.tfc")
    from tfc.backends.base import default_backend_name
    assert split.backend.name == default_backend_name()  # the CPU's part; the GPU's: cuda
    assert split.module.devices == ["/cpu:0", "/gpu:0"]
    if gpu_count() == 0:
        monkeypatch.delenv("TFC_CUDA_DEVICE", raising=False)
        with pytest.raises(Exception, match="no CUDA device: "):
            split.run("train_step", **feeds)
        split = load(tmp_path / "split.tfc")
    monkeypatch.setenv("TFC_CUDA_DEVICE", "emulated")
    reference = load(tmp_path / "one.tfc")
    for _ in range(3):
        got = float(split.run("train_step", **feeds)["loss"])
        want = float(reference.run("train_step", **feeds)["loss"])
        np.testing.assert_allclose(got, want, rtol=2e-3 if fp16 else 1e-5)
    for name in ("w0", "w1"):
        np.testing.assert_allclose(split.variables[name], reference.variables[name],
                                   rtol=2e-3 if fp16 else 1e-5, atol=1e-5)
