"""Asynchronous PS training (``--strategy ps-async``) on the loopback Ray cluster.

One worker: every update has staleness 0 and the run is the single program's, bit for
bit. Several workers: a model whose gradient is its batch (``loss = sum(x * w)``, plain
SGD at rate 1, small integers: every sum exact in any order) shows every update applied
exactly once: the final weights are the initial ones minus the sum of all the batches.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import tfc
from tfc.distributed.async_ps import AsyncPSTrainer
from tfc.errors import ExecutionError
from tfc.passes.replicate import ClusterSpec
from tfc.runtime import Program

from tests.passes.test_async_split import classifier

pytestmark = pytest.mark.distributed


def linear() -> tfc.ir.core.Module:
    """Two variables (one per PS with ps=2), each gradient the step's one-row batch."""
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float64, [1, 4], name="x")
        w = tfc.Variable(np.arange(4.0), name="w")
        v = tfc.Variable(np.ones(4), name="v")
        loss = tfc.reduce_mean(tfc.reduce_sum(x * w, axis=1) + tfc.reduce_sum(x * v, axis=1))
        tfc.entry("train", feeds={"x": x}, fetches={"loss": loss},
                  targets=[tfc.train.GradientDescentOptimizer(1.0).minimize(loss)])
    return g.as_module()


def batch(k: int) -> dict[str, np.ndarray]:
    return {"x": np.asarray([[k + 1, 2 * k, -k, 3]], np.float64)}


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_one_worker_is_the_synchronous_run(loopback_cluster, backend):
    rng = np.random.default_rng(6)
    data = [{"x": rng.normal(size=(12, 5)), "y": rng.integers(0, 3, 12).astype(np.int32)}
            for _ in range(4)]
    one = Program(classifier("adam"), backend=backend)
    want = [one.run("train", f)["loss"] for f in data]
    with AsyncPSTrainer(classifier("adam"), ClusterSpec(2, 1, "ps-async"),
                        loopback_cluster.address, backend=backend) as trainer:
        stats = trainer.train(lambda k: data[k], len(data))
        got = trainer.variables()
    assert [f["loss"] for f in stats.fetches] == want
    assert stats.staleness == [0] * (2 * len(data))  # two PS tasks, each applied each step
    for name, value in one.variables.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_every_update_is_applied_exactly_once(loopback_cluster):
    steps = 24
    with AsyncPSTrainer(linear(), ClusterSpec(2, 3, "ps-async"), loopback_cluster.address,
                        backend="reference") as trainer:
        stats = trainer.train(batch, steps)
        got = trainer.variables()
    total = sum(batch(k)["x"][0] for k in range(steps))
    np.testing.assert_array_equal(got["w"], np.arange(4.0) - total)
    np.testing.assert_array_equal(got["v"], np.ones(4) - total)
    assert stats.steps == steps == sum(stats.worker_steps.values())
    assert len(stats.staleness) == 2 * steps  # one per PS per update
    assert all(0 <= s < steps for s in stats.staleness)
    assert sum(stats.histogram().values()) == 2 * steps
    assert "updates)" in stats.staleness_line()


def test_a_dead_worker_is_one_line_naming_it(loopback_cluster):
    with AsyncPSTrainer(linear(), ClusterSpec(1, 2, "ps-async"), loopback_cluster.address,
                        backend="reference", timeout_s=30) as trainer:
        victim = "/job:worker/task:1/cpu:0"

        def batches(k: int) -> dict[str, np.ndarray]:
            if k == 4:
                os.kill(trainer.pids[victim], signal.SIGKILL)
            return batch(k)

        with pytest.raises(ExecutionError, match=f"task {victim} failed step \\d+: its "
                                                 f"process died") as e:
            trainer.train(batches, 50)
        assert "\n" not in str(e.value)
