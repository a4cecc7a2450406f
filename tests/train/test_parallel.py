"""In-graph data parallelism: all-reduce replicas and parameter servers match one device,
and the replicas' shards (``split`` of the batch, ``?`` rows) run natively on LLVM."""

import warnings

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError, TfcError
from tfc.runtime import Program

RNG = np.random.default_rng(1)
X = RNG.normal(size=(12, 5)).astype(np.float32)
Y = RNG.integers(0, 3, 12).astype(np.int32)
W0 = RNG.normal(0, 0.5, (5, 7)).astype(np.float32)
W1 = RNG.normal(0, 0.5, (7, 3)).astype(np.float32)


def build(devices=None, mode="allreduce", optimizer=lambda: tfc.train.MomentumOptimizer(0.1, 0.9)):
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 5], name="x")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        w0 = tfc.Variable(W0, name="w0")
        w1 = tfc.Variable(W1, name="w1")

        def loss_fn(xs, ys):
            h = tfc.nn.relu(tfc.matmul(xs, w0))
            return tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
                labels=ys, logits=tfc.matmul(h, w1)))

        if devices is None:
            loss = loss_fn(x, y)
            train = optimizer().minimize(loss)
        else:
            loss, train = tfc.train.data_parallel(loss_fn, [x, y], optimizer(), devices,
                                                  mode=mode)
        tfc.entry("train", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
    m = g.as_module()
    if devices is not None:
        m.devices = list(devices)
    return m


def losses(module, backend, steps=4):
    p = Program(module, backend=backend)
    return p, [float(p.run("train", x=X, y=Y)["loss"]) for _ in range(steps)]


@pytest.mark.parametrize("backend", ["reference", "llvm"])
@pytest.mark.parametrize("mode", ["allreduce", "ps"])
def test_synchronous_replicas_match_one_device(mode, backend):
    one, want = losses(build(), backend)
    devices = ["/cpu:0", "/cpu:1", "/cpu:2"]
    many, got = losses(build(devices, mode), backend)
    np.testing.assert_allclose(got, want, rtol=2e-6)  # shard means vs one batch mean
    np.testing.assert_allclose(many.variables["w0"], one.variables["w0"], rtol=1e-5,
                               atol=1e-6)
    if mode == "allreduce":  # the mirrored copies stay bitwise equal
        for i in (1, 2):
            np.testing.assert_array_equal(many.variables[f"w0/replica_{i}"],
                                          many.variables["w0"])
            np.testing.assert_array_equal(many.variables[f"w1/replica_{i}"],
                                          many.variables["w1"])
    else:
        assert set(many.variables) == set(one.variables)  # one copy, on the server


def test_all_reduce_is_in_the_ir_and_replicas_are_placed():
    m = build(["/cpu:0", "/cpu:1"])
    text = str(m)
    assert "all_reduce" in text and '"/cpu:1"' in text
    assert m.variables["w0/replica_1"].device == "/cpu:1"


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_a_batch_that_does_not_split_is_a_clear_error(backend):
    p = Program(build(["/cpu:0", "/cpu:1"]), backend=backend)
    with pytest.raises(ExecutionError, match="split"):
        p.run("train", x=X[:5], y=Y[:5])


@pytest.mark.parametrize("mode", ["allreduce", "ps"])
def test_replicas_run_natively_and_match_the_reference(mode):
    devices = ["/cpu:0", "/cpu:1", "/cpu:2"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a reference fallback warns
        llvm = Program(build(devices, mode), backend="llvm")
        exe = llvm._executable("train")
    stages = [st.executable for plan in exe.plans for st in plan.stages
              if st.executable is not None]
    assert stages and not any(s.fallback_ops for s in stages)
    ref = Program(build(devices, mode), backend="reference")
    for n in (12, 6, 12):  # a second batch size: a second binding per stage
        a = float(llvm.run("train", x=X[:n], y=Y[:n])["loss"])
        b = float(ref.run("train", x=X[:n], y=Y[:n])["loss"])
        np.testing.assert_allclose(a, b, rtol=2e-6)
    for name in ref.variables:
        np.testing.assert_allclose(llvm.variables[name], ref.variables[name], rtol=1e-5,
                                   atol=1e-6)


def test_bad_mode_is_an_error():
    with pytest.raises(TfcError, match="mode must be one of"):
        build(["/cpu:0"], mode="ring")
