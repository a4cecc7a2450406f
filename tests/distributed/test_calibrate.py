"""The cluster's own costs for the cost model: ``tfc calibrate --cluster`` measures them
(``tfc.distributed.calibrate``), the profile keeps them (older profiles still load), and
``predict_tasks`` uses them: the driver's launch frames one after another, each with its
task's feeds (a worker's shard of the batch), values between tasks over the measured
link, the driver's round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tfc
from tfc.devices import DeviceProfile, LinkRates
from tfc.passes.replicate import ClusterSpec, predict_tasks
from tfc.pipeline import Target, lower


@pytest.mark.distributed
def test_calibrate_cluster_measures_the_link_the_launch_and_the_round(loopback_cluster):
    from tfc.distributed.calibrate import calibrate_cluster
    costs = calibrate_cluster(loopback_cluster.address, repeats=5)
    assert costs.distinct_nodes
    assert 0 < costs.link.latency_s < 0.05 and costs.link.bytes_per_s > 1e7
    assert 0 < costs.call_s < 0.05 and 0 <= costs.round_s < 0.5
    assert 0 < costs.hop_cpu_s < 0.05  # a frame's CPU, both ends
    profile = DeviceProfile()
    costs.apply(profile)
    again = DeviceProfile.from_json(profile.to_json())
    assert again.cluster_link == costs.link
    assert (again.cluster_call_s, again.cluster_round_s) == (costs.call_s, costs.round_s)
    assert again.cluster_hop_cpu_s == costs.hop_cpu_s


def test_a_profile_without_the_cluster_fields_still_loads():
    data = json.loads(DeviceProfile().to_json())
    for name in ("cluster_link", "cluster_call_s", "cluster_round_s", "cluster_hop_cpu_s"):
        del data[name]
    old = DeviceProfile.from_json(json.dumps(data))
    assert old.cluster_link is None and old.cluster_call_s == old.cluster_round_s == 0.0
    assert old.cluster_hop_cpu_s == 0.0


def null_step_module(workers: int) -> tfc.ir.core.Module:
    """The null step (a scalar on the PS, each worker a row) replicated for ps-sync."""
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 1], name="x")
        v = tfc.Variable(np.float32(0), name="v")
        loss = tfc.reduce_mean(x) + v * 1e-9
        tfc.entry("train", feeds={"x": x}, fetches={"loss": loss},
                  targets=[tfc.train.GradientDescentOptimizer(1.0).minimize(loss)])
    spec = ClusterSpec(1, workers, "ps-sync")
    return lower(g.as_module(), Target("reference", tuple(spec.devices), False, spec))


def test_the_prediction_charges_the_measured_cluster():
    module = null_step_module(4)
    plain = predict_tasks(module, "train", 1, DeviceProfile())
    profile = DeviceProfile()
    profile.cluster_link = LinkRates(1e9, 1e-4)
    profile.cluster_call_s, profile.cluster_round_s = 1e-3, 2e-3
    measured = predict_tasks(module, "train", 1, profile)
    assert sorted(measured.tasks) == sorted(plain.tasks) == [
        "ps:0", "worker:0", "worker:1", "worker:2", "worker:3"]
    # the PS, launched first, waits for the last worker's gradient: launched 4 ms later
    assert measured.tasks["ps:0"] > 4e-3 > plain.tasks["ps:0"]
    # the step: the PS's launch (first) and end, and the driver's round trip after it
    assert measured.step_s >= measured.tasks["ps:0"] + 2e-3
    assert "launches 1000 us a task apart" in measured.assumptions
    # a worker launched last receives what the PS sent before it started: no wait for it
    assert measured.tasks["worker:3"] < measured.tasks["ps:0"]


def test_a_workers_launch_frame_carries_its_shard_of_the_batch():
    """Feeds go in the launch frames, one after another: on a 1 kB/s link a worker's row
    (4 bytes: 4 ms) delays the next worker's launch; the whole batch each would be 16 ms."""
    profile = DeviceProfile()
    profile.cluster_link = LinkRates(1e3, 0.0)
    prediction = predict_tasks(null_step_module(4), "train", 1, profile)
    assert 16e-3 <= prediction.step_s < 32e-3


def test_more_processes_than_cores_take_turns_the_step_is_their_cpu_over_the_cores():
    """Null step at 4 workers: 5 tasks and the driver. On 2 cores the step is at least the
    CPU of its frames (a launch and a reply per task, 11 transfers) and executor steps
    over 2 cores, and every task's span stretches as much; on 8 cores, the path."""
    module = null_step_module(4)
    profile = DeviceProfile()
    profile.cluster_link = LinkRates(1e9, 1e-5)
    profile.cluster_call_s, profile.cluster_round_s = 1e-5, 1e-4
    profile.cluster_hop_cpu_s = 1e-4
    profile.cores = 8
    roomy = predict_tasks(module, "train", 1, profile)
    profile.cores = 2
    crowded = predict_tasks(module, "train", 1, profile)
    frames = 2 * 5 + 11
    assert crowded.cpu_s >= frames * 1e-4 + 5 * profile.executor_step_s
    assert crowded.step_s == pytest.approx(crowded.cpu_s / 2)
    assert crowded.step_s > roomy.step_s
    stretch = crowded.step_s / roomy.step_s
    for task, seconds in roomy.tasks.items():
        assert crowded.tasks[task] == pytest.approx(seconds * stretch)
    assert "6 processes on 2 cores" in crowded.assumptions
    assert "processes on" not in roomy.assumptions
