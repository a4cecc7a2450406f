"""Surviving the death of a task (``tfc.distributed.recovery``): a worker and a PS are
SIGKILLed mid-run on the session's loopback cluster; the job restarts them, restores every
variable from the latest consistent (sharded) checkpoint and finishes with the variables
of a run resumed from that checkpoint. And the checkpoints themselves: a kill while one is
written leaves the previous one loadable and, after the next save, no stale file.

Every wait is bounded (``cluster_timeout_s``, the health checks' own bound), so a
failure here is an error, never a hang.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tfc.cli import main
from tfc.distributed.recovery import InjectedFailure, Supervisor, kill_task
from tfc.errors import ExecutionError, TfcError
from tfc.runtime import Program
from tfc.runtime.checkpoint import (CheckpointError, latest_checkpoint, read_checkpoint,
                                    read_index, save_sharded_checkpoint)

from tests.distributed.test_runtime import FEEDS, TASKS, ps_module, saved_artifact

STEPS = 12


def batch(step: int) -> dict[str, np.ndarray]:
    """Step ``step``'s feeds: a deterministic data order, so a replayed step sees the
    batch it saw the first time."""
    return {name: value * (1.0 + 0.05 * (step % 5)) for name, value in FEEDS.items()}


def assert_only_named_files(directory: Path) -> None:
    """The directory holds the index, the checkpoints it names and their shards: no temp
    file, no orphan shard."""
    names = read_index(directory) or []
    wanted = {"checkpoint.json", *names}
    for name in names:
        if name.endswith(".tfshards"):
            wanted.update(read_checkpoint_shards(directory / name))
    assert sorted(os.listdir(directory)) == sorted(wanted)


def read_checkpoint_shards(path: Path) -> list[str]:
    import json
    return [i["file"] for i in json.loads(path.read_text())["shards"].values()]


@pytest.mark.distributed
@pytest.mark.parametrize("backend", ["reference",
                                     pytest.param("llvm", marks=pytest.mark.slow)])  # ~15 s
def test_a_killed_worker_and_ps_are_restarted_and_the_job_ends_as_a_resumed_run(
        loopback_cluster, backend, tmp_path):
    ck = tmp_path / "ck"
    lines: list[str] = []
    p = Program(ps_module(TASKS), backend=backend, cluster=loopback_cluster.address,
                cluster_timeout_s=30)
    try:
        died_on = {t: w["node_id"] for t, w in p._cluster.where.items()}

        def one() -> dict[str, np.ndarray]:  # a step, and a checkpoint every 4 steps
            out = p.run("sgd", batch(p.step))
            if p.step % 4 == 0:
                p.save_checkpoint(ck)
            return out

        with Supervisor(p, ck, inject=["worker:1@step=5"], report=lines.append,
                        health_interval_s=0.2) as supervisor:
            for _ in range(9):
                supervisor.step(one)
            # ps:0 dies between steps, not by the driver's hand: the health checks see it
            died_on["/job:ps/task:0"] = p._cluster.where["/job:ps/task:0"]["node_id"]
            os.kill(p._cluster.where["/job:ps/task:0"]["pid"], signal.SIGKILL)
            deadline = time.monotonic() + 20
            while not supervisor.monitor.dead and time.monotonic() < deadline:
                time.sleep(0.05)
            assert supervisor.monitor.dead, "the health checks did not find the dead PS"
            for _ in range(STEPS - 9):
                out = supervisor.step(one)
        assert p.step == STEPS
        # (a task too slow to answer on a loaded host may be restarted once more: the
        # result is the same, so only the two kills' own recoveries are pinned down)
        first, second = [e for e in supervisor.events
                         if not e.cause.startswith("no answer")]
        assert (first.tasks, first.step, first.restored_step, first.lost_steps) == \
            (["worker:1"], 5, 4, 1)
        assert first.cause == "SIGKILL"
        assert (second.tasks, second.step, second.restored_step, second.lost_steps) == \
            (["ps:0"], 9, 8, 1)
        assert second.detected_by == "a health check"
        # (the step launched after the kill fails, or a health check comes first)
        assert re.match(r"worker:1 died at step 5 \(SIGKILL; found by (a failed step|a "
                        r"health check) in \d+\.\d\d s\); restarted on node \w+ ",
                        first.line())
        assert lines[supervisor.events.index(first)] == first.line()
        assert "restored step 4" in first.line() and first.line().endswith("lost 1 step")
        # each restarted on another node than the one it died on (the cluster has three)
        assert first.nodes[0] != died_on["/job:worker/task:1"]
        assert second.nodes[0] != died_on["/job:ps/task:0"]
        final = {n: v.copy() for n, v in p.variables.items()}
        loss = float(out["loss"])
    finally:
        p.close(read_back=False)

    # a run resumed from the checkpoint the second recovery restored, in one process
    resumed = Program(ps_module(None), backend=backend)
    resumed.restore_checkpoint(ck / "ckpt-8.tfshards")
    while resumed.step < STEPS:
        want = resumed.run("sgd", batch(resumed.step))
    assert loss == pytest.approx(float(want["loss"]), rel=1e-10)
    for name in ("sgd_w", "sgd_b"):
        np.testing.assert_allclose(final[name], resumed.variables[name], rtol=1e-10,
                                   atol=1e-12)
    assert_only_named_files(ck)


@pytest.mark.distributed
def test_tfc_run_recovers_from_an_injected_failure(loopback_cluster, tmp_path, capsys):
    path, feeds = saved_artifact(tmp_path)
    ck = tmp_path / "ck"
    code = main(["run", path, "--entry", "adam", *feeds, "--steps", "7",
                 "--cluster", loopback_cluster.address, "--cluster-timeout", "30",
                 "--checkpoint-dir", str(ck), "--checkpoint-every", "2",
                 "--inject-failure", "ps:0@step=5"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert re.search(r"ps:0 died at step 5 \(SIGKILL; found by (a failed step|a health "
                     r"check)", err)
    assert "restored step 4" in err and "lost 1 step" in err
    one = Program(ps_module(None), backend="reference")
    for _ in range(7):
        want = one.run("adam", FEEDS)["loss"]
    assert float(out.splitlines()[-1]) == pytest.approx(float(want), rel=1e-10)
    assert read_checkpoint(ck).step == 7
    assert_only_named_files(ck)


@pytest.mark.distributed
def test_without_health_checks_the_failed_step_finds_the_death(loopback_cluster, tmp_path):
    ck = tmp_path / "ck"
    p = Program(ps_module(TASKS), backend="reference", cluster=loopback_cluster.address,
                cluster_timeout_s=30)
    try:
        lines: list[str] = []
        with Supervisor(p, ck, inject=["worker:0@step=1"], health_interval_s=None,
                        report=lines.append) as supervisor:
            for _ in range(3):
                out = supervisor.step(lambda: p.run("sgd", FEEDS))
            [event] = supervisor.events
            # no checkpoint but the one the supervisor saved as the job began
            assert (event.detected_by, event.restored_step, event.lost_steps) == \
                ("a failed step", 0, 1)
            assert lines == [event.line()]

            def fails() -> None:  # every task alive: the step's own error, raised as it is
                raise ExecutionError("a step that failed on its own")
            with pytest.raises(ExecutionError, match="failed on its own"):
                supervisor.step(fails)
            assert len(supervisor.events) == 1 and p.step == 3
        with pytest.raises(TfcError, match=r"no task 'worker:7' in the program \(its tasks: "
                                           r"ps:0, worker:0, worker:1\)"):
            kill_task(p, "worker:7")
    finally:
        p.close(read_back=False)
    one = Program(ps_module(None), backend="reference")
    for _ in range(3):
        want = one.run("sgd", FEEDS)
    assert float(out["loss"]) == pytest.approx(float(want["loss"]), rel=1e-10)


def test_failure_specs_and_flags_are_checked(tmp_path, capsys):
    assert InjectedFailure.parse("worker:1@step=12") == InjectedFailure("worker:1", 12)
    assert InjectedFailure.parse("ps:0@20") == InjectedFailure("ps:0", 20)
    for bad in ("worker1@step=3", "worker:1", "worker:1@step=-2", "@step=1"):
        with pytest.raises(TfcError, match="expected TASK@step=N"):
            InjectedFailure.parse(bad)
    path, feeds = saved_artifact(tmp_path)
    base = ["run", path, "--entry", "sgd", *feeds, "--steps", "2", "--cluster", "inprocess"]
    assert main([*base, "--inject-failure", "worker:1@step=1"]) == 1
    assert capsys.readouterr().err == ("error: --inject-failure needs a program on a Ray "
                                       "cluster (--cluster local, auto or HOST:PORT)\n")
    assert main([*base, "--on-failure", "restart"]) == 1
    assert "error: --on-failure needs a program on a Ray cluster" in capsys.readouterr().err
    assert main([*base, "--inject-failure", "worker:1@tomorrow"]) == 1
    assert capsys.readouterr().err == ("error: --inject-failure 'worker:1@tomorrow': expected "
                                       "TASK@step=N, e.g. worker:1@step=12 or ps:0@step=20\n")


_KILLED_MID_SAVE = r"""
import os, signal, sys
import numpy as np
import tfc.runtime.checkpoint as ck
d = sys.argv[1]
shards = {"ps:0": {"w": np.arange(6.0)}, "ps:1": {"v": np.ones(3)}}
ck.save_sharded_checkpoint(d, shards, 10)
arrays = []
def dying(member, arr):
    arrays.append(arr)
    if len(arrays) == 2:  # inside the second shard's file: its temp is half written
        member.write(b"half")
        os.kill(os.getpid(), signal.SIGKILL)
    np.save(member, arr, allow_pickle=False)
ck._write_array = dying
ck.save_sharded_checkpoint(d, {k: {n: v + 1 for n, v in s.items()} for k, s in shards.items()}, 20)
"""


def test_a_kill_while_a_sharded_checkpoint_is_written_leaves_the_previous_one(tmp_path):
    d = tmp_path / "ck"
    run = subprocess.run([sys.executable, "-c", _KILLED_MID_SAVE, str(d)], timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert run.returncode == -signal.SIGKILL
    left = sorted(os.listdir(d))
    assert "ckpt-20.shard.ps-0.tfckpt" in left  # the first shard of step 20: complete, orphaned
    assert any(n.endswith(".tmp") for n in left)  # the second: its temp file
    assert latest_checkpoint(d) == str(d / "ckpt-10.tfshards")
    got = read_checkpoint(d)
    assert got.step == 10
    np.testing.assert_array_equal(got.values["w"], np.arange(6.0))
    np.testing.assert_array_equal(got.values["v"], np.ones(3))
    # the next save removes what the killed one left
    save_sharded_checkpoint(d, {"ps:0": {"w": np.zeros(6)}, "ps:1": {"v": np.zeros(3)}}, 30)
    assert read_checkpoint(d).step == 30
    assert_only_named_files(d)


def test_shards_of_two_steps_do_not_load_as_one_checkpoint(tmp_path):
    a = save_sharded_checkpoint(tmp_path / "a", {"ps:0": {"w": np.zeros(2)},
                                                 "ps:1": {"v": np.zeros(2)}}, 4)
    b = save_sharded_checkpoint(tmp_path / "b", {"ps:0": {"w": np.ones(2)},
                                                 "ps:1": {"v": np.ones(2)}}, 6)
    shard = tmp_path / "a" / "ckpt-4.shard.ps-1.tfckpt"
    shard.write_bytes((tmp_path / "b" / "ckpt-6.shard.ps-1.tfckpt").read_bytes())
    with pytest.raises(CheckpointError, match="digest is not the one its shard list"):
        read_checkpoint(a)
    import json
    listing = json.loads(a.read_text())
    del listing["shards"]["ps:1"]["sha256"]  # (a list without digests: the steps still tell)
    a.write_text(json.dumps(listing))
    with pytest.raises(CheckpointError, match="holds step 6, but its shard list "
                                              "ckpt-4.tfshards is of step 4"):
        read_checkpoint(a)
    assert read_checkpoint(b).step == 6


@pytest.mark.distributed
@pytest.mark.slow  # (~12 s: two bounded health checks, then a restart)
def test_a_hung_task_costs_the_health_checks_verdict_not_the_abort_wait(loopback_cluster,
                                                                        tmp_path):
    """A worker that hangs (SIGSTOP) in the middle of a step: two silent health checks
    (each bounded at 1 s) declare it dead, and the step ends then, not after the
    runtime's 30 s wait for the aborted step's replies; the job goes on."""
    ck = tmp_path / "ck"
    p = Program(ps_module(TASKS), backend="reference", cluster=loopback_cluster.address,
                cluster_timeout_s=60)
    pid = None
    try:
        with Supervisor(p, ck, health_interval_s=0.2, health_timeout_s=1.0,
                        report=lambda line: None) as supervisor:
            supervisor.step(lambda: p.run("sgd", FEEDS))
            pid = p._cluster.where["/job:worker/task:1"]["pid"]
            os.kill(pid, signal.SIGSTOP)
            started = time.monotonic()
            supervisor.step(lambda: p.run("sgd", FEEDS))
            took = time.monotonic() - started
            [event] = supervisor.events
        assert event.tasks == ["worker:1"] and event.detected_by == "a health check"
        assert event.cause.startswith("no answer within 1 s")
        assert took < 20, f"the hung step took {took:.1f} s"  # (30 s more without the cut)
        assert p.step == 2
        deadline = time.monotonic() + 10  # the hung process is killed, not left stopped
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid)
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        p.close(read_back=False)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
