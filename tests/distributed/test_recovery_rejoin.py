"""Elastic all-reduce grows back (``tfc.distributed.rejoin``): an allreduce worker SIGKILLed
mid-run on the session's loopback cluster; the ring shrinks to the workers left, the dead
worker is restarted in the background and rejoins at a step boundary, and the job ends with
the variables of the same shrink/grow schedule run in one process, bit for bit (f64). A
restart that fails or is late leaves the job at N-1, saying why; no actor process of any
ring outlives the job."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tfc.cli import main
from tfc.distributed.cluster import LoopbackCluster
from tfc.distributed.elastic import mirrored_values, replicated_for, unmirrored
from tfc.distributed.recovery import Supervisor
from tfc.distributed.rejoin import rejoin_node
from tfc.pipeline import lower_for_devices
from tfc.runtime import Program

from tests.distributed.test_recovery_elastic import allreduce_module, batch
from tests.passes.test_async_split import classifier

STEPS = 8
KILL = 2  # worker:1 dies just before this step
WAIT_AT = 4  # the test waits for the restart before this step (a job would not)


def schedule_reference(backend: str, rejoined: int) -> dict[str, np.ndarray]:
    """The run's schedule in one process (tasks as threads): 3 workers for steps
    [0, KILL), then worker:0 and worker:2 until ``rejoined``, then 3 again; each ring
    starting from the previous one's worker 0 copy, as the elastic job does."""
    full = allreduce_module(backend)
    three = Program(full, backend=backend, cluster="inprocess")
    for step in range(KILL):
        three.run("train", batch(step))
    values = {n: np.array(three.variables[n]) for n in unmirrored(three.module)}
    ring2 = lower_for_devices(replicated_for(three.module, 2, {1: "/job:worker/task:2/cpu:0"},
                                             backend), backend)
    two = Program(ring2, mirrored_values(ring2, values), backend=backend, step=KILL,
                  cluster="inprocess")
    for step in range(KILL, rejoined):
        two.run("train", batch(step))
    values = {n: np.array(two.variables[n]) for n in unmirrored(two.module)}
    again = Program(three.module, mirrored_values(three.module, values), backend=backend,
                    step=rejoined, cluster="inprocess")
    for step in range(rejoined, STEPS):
        again.run("train", batch(step))
    return {n: np.array(v) for n, v in again.variables.items()}


def task_actor_pids(cluster: LoopbackCluster) -> set[int]:
    """The task actor processes running on ``cluster``'s nodes (their process trees)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), list(cluster.pids)
    while todo:
        pid = todo.pop()
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith(b"ray::TaskActor"):
            found.add(pid)
        todo += children.get(pid, [])
    return found


def assert_no_task_actor_left(cluster: LoopbackCluster, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (left := task_actor_pids(cluster)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"task actor processes left: {sorted(left)}"


@pytest.mark.distributed
@pytest.mark.parametrize("backend", ["reference",
                                     pytest.param("llvm", marks=pytest.mark.slow)])
def test_a_killed_worker_rejoins_and_the_job_ends_as_its_shrink_and_grow_schedule(
        loopback_cluster, backend):
    lines: list[str] = []
    rings: list[str] = []
    p = Program(allreduce_module(backend), backend=backend, cluster=loopback_cluster.address,
                cluster_timeout_s=30)
    try:
        nodes = {t: w["node_id"] for t, w in p._cluster.where.items()}
        pids = {w["pid"] for w in p._cluster.where.values()}
        with Supervisor(p, None, "elastic", inject=[f"worker:1@step={KILL}"],
                        report=lines.append, health_interval_s=None) as supervisor:
            for _ in range(STEPS):
                if p.step == WAIT_AT:
                    assert supervisor.wait_for_rejoin(60)
                out = supervisor.step(lambda: p.run("train", batch(p.step)))
                rings.append(supervisor.ring())
                pids |= {w["pid"] for w in p._cluster.where.values()}
        assert p.step == STEPS
        [shrunk] = supervisor.events
        [back] = supervisor.rejoins
        assert (shrunk.step, shrunk.lost_steps, shrunk.elastic.workers_after) == (KILL, 0, 2)
        assert (back.tasks, back.workers_before, back.workers_after, back.failed) == \
            (["worker:1"], 2, 3, "")
        assert KILL < back.step <= WAIT_AT and back.source == "worker:0"
        # its node is alive: worker:1 restarted there
        assert back.nodes == [nodes["/job:worker/task:1"]]
        assert sorted(p._cluster.tasks) == sorted(nodes)
        assert {t: w["node_id"] for t, w in p._cluster.where.items()} == nodes
        assert lines[0].endswith("lost 0 steps; restarting worker:1 in the background to "
                                 "rejoin")
        assert re.fullmatch(rf"worker:1 rejoined at step {back.step}: back to 3 workers "
                            rf"\(restarted on node {nodes['/job:worker/task:1'][:12]} in "
                            rf"\d+\.\d\d s, in the background\); variables of step "
                            rf"{back.step} from worker:0 in \d+\.\d\d s; lost 0 steps",
                            lines[1]), lines
        grown = back.step  # (``rings[i]``: after step ``i``)
        assert rings[:KILL] == ["ring 3/3"] * KILL
        assert rings[KILL:grown] == ["ring 2/3, worker:1 rejoining"] * (grown - KILL)
        assert rings[grown:] == ["ring 3/3"] * (STEPS - grown)
        final = {n: np.array(v) for n, v in p.variables.items()}
        loss = float(out["loss"])
    finally:
        p.close(read_back=False)
    assert len(pids) == 3 + 2 + 3  # three rings, every actor new
    assert_no_task_actor_left(loopback_cluster)
    want = schedule_reference(backend, back.step)
    assert sorted(final) == sorted(want)
    for name, value in want.items():
        np.testing.assert_array_equal(final[name], value, err_msg=name)
    # and, to rounding, the run at 3 workers throughout (one global batch, one mean)
    one, one_loss = uninterrupted_steps(backend, STEPS)
    assert loss == pytest.approx(one_loss, rel=1e-10)
    for name, value in one.items():
        np.testing.assert_allclose(final[name], value, rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.distributed
@pytest.mark.parametrize("how", [pytest.param("late", marks=pytest.mark.slow), "failed"])
def test_a_restart_that_fails_or_is_late_leaves_the_ring_at_n_minus_1(
        loopback_cluster, monkeypatch, how):
    if how == "failed":  # the node the worker was to restart on is gone
        monkeypatch.setattr("tfc.distributed.rejoin.rejoin_node", lambda *_: "f" * 56)
    lines: list[str] = []
    p = Program(allreduce_module("reference"), backend="reference",
                cluster=loopback_cluster.address, cluster_timeout_s=30)
    try:
        with Supervisor(p, None, "elastic", inject=[f"worker:1@step={KILL}"],
                        report=lines.append, health_interval_s=None,
                        rejoin_timeout_s=0.0 if how == "late" else 60) as supervisor:
            for _ in range(STEPS):
                if p.step == WAIT_AT and how == "failed":
                    assert supervisor.wait_for_rejoin(60)
                out = supervisor.step(lambda: p.run("train", batch(p.step)))
            ring = supervisor.ring()
        [gave_up] = supervisor.rejoins
        assert gave_up.failed and gave_up.workers_after == 2
        why = ("not ready within 0 s" if how == "late" else
               "the restart failed: cannot start task /job:worker/task:1: node ffffffffffff "
               "is not an alive node of the Ray cluster at ")
        assert lines[1].startswith(f"worker:1 did not rejoin ({why}"), lines
        assert lines[1].endswith("); going on with 2 of 3 workers")
        assert ring == "ring 2/3"
        assert sorted(p._cluster.tasks) == ["/job:worker/task:0", "/job:worker/task:2"]
        final = {n: np.array(v) for n, v in p.variables.items()}
    finally:
        p.close(read_back=False)
    assert_no_task_actor_left(loopback_cluster)  # (the late ring's too)
    want, want_loss = uninterrupted_steps("reference", STEPS)
    assert float(out["loss"]) == pytest.approx(want_loss, rel=1e-10)
    for name, value in want.items():
        np.testing.assert_allclose(final[name], value, rtol=1e-10, atol=1e-12, err_msg=name)


def uninterrupted_steps(backend: str, steps: int) -> tuple[dict[str, np.ndarray], float]:
    one = Program(classifier("adam"), backend=backend)
    for step in range(steps):
        loss = float(one.run("train", batch(step))["loss"])
    return {n: np.array(v) for n, v in one.variables.items()}, loss


def test_a_worker_rejoins_on_its_node_while_alive_else_on_the_least_used():
    alive = ["a", "b", "c"]
    assert rejoin_node(alive, "b", Counter({"a": 1, "c": 1})) == "b"
    assert rejoin_node(alive, "gone", Counter({"a": 2, "b": 1, "c": 1})) == "b"
    assert rejoin_node(alive, None, Counter()) == "a"


def test_no_rejoin_needs_elastic(tmp_path, capsys):
    from tests.distributed.test_runtime import saved_artifact
    path, feeds = saved_artifact(tmp_path)
    assert main(["run", path, "--entry", "sgd", *feeds, "--cluster", "inprocess",
                 "--no-rejoin"]) == 1
    assert capsys.readouterr().err == ("error: --no-rejoin needs --on-failure elastic (only "
                                       "an elastic ring shrinks and grows back)\n")
