"""Data parallelism on the LLVM backend: the replicas' shards (``split`` of the batch,
``?`` rows) run natively in every stage, with no reference fallback, and match the
reference backend."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError
from tfc.runtime import Program

RNG = np.random.default_rng(2)
X = RNG.normal(size=(12, 5)).astype(np.float32)
Y = RNG.integers(0, 3, 12).astype(np.int32)
W0 = RNG.normal(0, 0.5, (5, 7)).astype(np.float32)
W1 = RNG.normal(0, 0.5, (7, 3)).astype(np.float32)
DEVICES = ["/cpu:0", "/cpu:1", "/cpu:2"]


def build(mode):
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 5], name="x")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        w0 = tfc.Variable(W0, name="w0")
        w1 = tfc.Variable(W1, name="w1")

        def loss_fn(xs, ys):
            h = tfc.nn.relu(tfc.matmul(xs, w0))
            return tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
                labels=ys, logits=tfc.matmul(h, w1)))

        loss, train = tfc.train.data_parallel(
            loss_fn, [x, y], tfc.train.MomentumOptimizer(0.1, 0.9), DEVICES, mode=mode)
        tfc.entry("train", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
    m = g.as_module()
    m.devices = list(DEVICES)
    return m


@pytest.mark.parametrize("mode", ["allreduce", "ps"])
def test_replicas_run_natively_and_match_the_reference(mode):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a reference fallback warns
        llvm = Program(build(mode), backend="llvm")
        exe = llvm._executable("train")
    stages = [st.executable for plan in exe.plans for st in plan.stages
              if st.executable is not None]
    assert stages and not any(s.fallback_ops for s in stages)
    ref = Program(build(mode), backend="reference")
    for n in (12, 6, 12):  # a second batch size: a second binding per stage
        a = float(llvm.run("train", x=X[:n], y=Y[:n])["loss"])
        b = float(ref.run("train", x=X[:n], y=Y[:n])["loss"])
        np.testing.assert_allclose(a, b, rtol=2e-6)
    for name in ref.variables:
        np.testing.assert_allclose(llvm.variables[name], ref.variables[name], rtol=1e-5,
                                   atol=1e-6)


def test_a_batch_that_does_not_split_is_a_clear_error_natively():
    p = Program(build("allreduce"), backend="llvm")
    with pytest.raises(ExecutionError, match="split"):
        p.run("train", x=X[:5], y=Y[:5])
