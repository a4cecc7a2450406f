"""Per-kernel spans in ``tfc bench`` timelines (LLVM backend, ``profile=True``).

Each kernel of a stage is one ``kernel`` span on the device's track, inside its stage's
span, named after the op it computes; as many spans per stage as the stage has kernels.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import tfc
from tfc.cli import main
from tfc.runtime import Program
from tfc.runtime.executor import PartitionedExecutable
from tfc.runtime.profiler import bench_entry
from tfc.runtime.trace import Tracer

RNG = np.random.default_rng(5)
NAME = re.compile(r"^[a-z_.0-9]+#\d+( \([a-z_.0-9,]+\))?( \[\d+/\d+\])?$")


def _module(devices=None):
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 6], name="x")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        w0 = tfc.Variable(RNG.normal(0, 0.5, (6, 8)).astype(np.float32), name="w0")
        w1 = tfc.Variable(RNG.normal(0, 0.5, (8, 3)).astype(np.float32), name="w1")

        def loss_fn(xs, ys):
            h = tfc.nn.relu(tfc.matmul(xs, w0) + 0.1)
            return tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
                labels=ys, logits=tfc.matmul(h, w1)))

        if devices is None:
            loss = loss_fn(x, y)
            train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        else:
            loss, train = tfc.train.data_parallel(
                loss_fn, [x, y], tfc.train.GradientDescentOptimizer(0.1), devices)
        tfc.entry("train", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
    m = g.as_module()
    if devices is not None:
        m.devices = list(devices)
    return m


FEEDS = {"x": RNG.normal(size=(8, 6)).astype(np.float32),
         "y": RNG.integers(0, 3, 8).astype(np.int32)}


def _spans(tracer, cat):
    return [e for e in tracer.events if e["ph"] == "X" and e["cat"] == cat]


def _check_nested(tracer, kernels_of):
    """Every kernel span lies in a stage span of its track; per stage span, the kernel
    spans number ``kernels_of(device, stage name)`` and come in time order."""
    stages, kernels = _spans(tracer, "stage"), _spans(tracer, "kernel")
    device = {tid: d for d, tid in tracer.devices.items()}
    assert stages and kernels
    eps = 1.0  # microseconds: timestamps are floats of a shared clock
    seen = 0
    for st in stages:
        inside = [k for k in kernels if k["tid"] == st["tid"] and k["args"]["step"]
                  == st["args"]["step"] and st["ts"] - eps <= k["ts"]
                  and k["ts"] + k["dur"] <= st["ts"] + st["dur"] + eps]
        assert len(inside) == kernels_of(device[st["tid"]], st["name"]), st["name"]
        starts = [k["ts"] for k in inside]
        assert starts == sorted(starts)
        seen += len(inside)
    assert seen == len(kernels)  # no kernel outside a stage
    for k in kernels:
        assert NAME.match(k["name"]), k["name"]
    return kernels


def test_single_device_bench_has_a_span_per_kernel():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        program = Program(_module(), backend="llvm")
        plain = program._executable("train")
        tracer = Tracer()
        report = bench_entry(program, "train", FEEDS, steps=3, tracer=tracer)
    assert report.steps == 3
    assert program._executable("train") is plain and not plain.profiling  # put back
    n = plain.report.kernels
    kernels = _check_nested(tracer, lambda device, name: n)
    assert len(kernels) == 3 * n
    names = {k["name"] for k in kernels}
    assert any(k.startswith("matmul#") for k in names)
    assert any(k.startswith("fusion#") and "(" in k for k in names)
    assert tracer.stats["/cpu:0"].peak_bytes > 0


def test_data_parallel_bench_nests_kernels_in_their_stages():
    devices = ["/cpu:0", "/cpu:1"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every stage native: no fallback
        program = Program(_module(devices), backend="llvm")
        tracer = Tracer()
        bench_entry(program, "train", FEEDS, steps=2, tracer=tracer)
    exe = program._executable("train")
    assert isinstance(exe, PartitionedExecutable)
    # the profiled twin was compiled from the same module: same stages, same kernels
    counts = {(plan.device, st.graph.name): st.executable.report.kernels
              for plan in exe.plans for st in plan.stages if st.executable is not None}
    assert sum(counts.values()) > 0
    _check_nested(tracer, lambda device, name: counts[device, name])
    assert {e["args"]["name"] for e in tracer.events if e.get("name") == "thread_name"} \
        == set(devices)
    assert all(s.peak_bytes > 0 for s in tracer.stats.values())


def test_kernel_spans_can_be_left_out():
    program = Program(_module(), backend="llvm")
    tracer = Tracer()
    bench_entry(program, "train", FEEDS, steps=1, tracer=tracer, kernels=False)
    assert _spans(tracer, "stage") and not _spans(tracer, "kernel")


def test_reference_backend_traces_stages_only():
    program = Program(_module(), backend="reference")
    tracer = Tracer()
    bench_entry(program, "train", FEEDS, steps=1, tracer=tracer)
    assert _spans(tracer, "stage") and not _spans(tracer, "kernel")


@pytest.fixture
def artifact(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('''
import tfc
x = tfc.placeholder(tfc.float32, [None, 4], name="x")
w = tfc.Variable(tfc.ones([4, 3]), name="w")
y = tfc.nn.relu(tfc.matmul(x, w) + 1.0)
tfc.entry("predict", feeds={"x": x}, fetches={"y": tfc.reduce_sum(y * y)})
''')
    out = tmp_path / "m.tfc"
    assert main(["compile", str(path), "-q", "-o", str(out)]) == 0
    return out


def test_cli_bench_trace_has_kernel_spans(artifact, tmp_path, capsys):
    trace = tmp_path / "trace.json"
    code = main(["bench", str(artifact), "--steps", "2", "--batch", "4", "--trace", str(trace),
                 "--backend", "llvm"])
    out, err = capsys.readouterr()
    assert code == 0, err
    events = json.loads(Path(trace).read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and len(kernels) % 2 == 0
    assert any(e["name"].startswith("matmul#") for e in kernels)
