"""Elastic all-reduce (``tfc.distributed.elastic``): an allreduce worker SIGKILLed mid-run on
the session's loopback cluster; the job goes on with the workers left, the same global
batch split over them (evenly, or its N shards kept where N-1 do not divide it), and ends
with the variables of an uninterrupted run (f64)."""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from tfc.cli import main
from tfc.distributed.recovery import Supervisor
from tfc.errors import TfcError
from tfc.ir.core import Module
from tfc.ir.printer import print_module
from tfc.runtime import Program

from tests.passes.test_async_split import classifier

STEPS = 6
RNG = np.random.default_rng(8)
X = RNG.normal(size=(12, 5))  # a global batch of 12: 3 shards of 4, then 2 of 6
Y = RNG.integers(0, 3, 12).astype(np.int32)


def batch(step: int) -> dict[str, np.ndarray]:
    """Step ``step``'s global batch (a deterministic order: every run sees the same)."""
    return {"x": X * (1.0 + 0.1 * (step % 4)), "y": np.roll(Y, step)}


def allreduce_module(backend: str, workers: int = 3) -> Module:
    """``tfc compile --cluster workers=3 --strategy allreduce`` of the Adam classifier."""
    from tfc.compiler.driver import compile_model
    from tfc.passes.replicate import ClusterSpec
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.tfir"
        path.write_text(print_module(classifier("adam")))
        return compile_model(path, backend=backend, cluster=ClusterSpec(0, workers, "allreduce"))


def uninterrupted(backend: str) -> tuple[dict[str, np.ndarray], float]:
    one = Program(classifier("adam"), backend=backend)
    for step in range(STEPS):
        loss = float(one.run("train", batch(step))["loss"])
    return {n: np.array(v) for n, v in one.variables.items()}, loss


@pytest.mark.distributed
@pytest.mark.parametrize("backend", ["reference",
                                     pytest.param("llvm", marks=pytest.mark.slow)])
def test_a_killed_worker_leaves_a_ring_of_two_that_ends_as_an_unbroken_run(
        loopback_cluster, backend, tmp_path):
    lines: list[str] = []
    p = Program(allreduce_module(backend), backend=backend, cluster=loopback_cluster.address,
                cluster_timeout_s=30)
    try:
        assert len(p._cluster.tasks) == 3
        nodes = {t: w["node_id"] for t, w in p._cluster.where.items()}
        # worker:0 dies: the step's launch fails at the first task, the others never got
        # it, and the previous step's updates, still pending on them, must be kept (no
        # health checks: the failed step, not a check, finds the death)
        # (rejoin=False: the ring stays at two; test_recovery_rejoin.py grows it back)
        with Supervisor(p, None, "elastic", inject=["worker:0@step=3"], report=lines.append,
                        health_interval_s=None, rejoin=False) as supervisor:
            for _ in range(STEPS):
                out = supervisor.step(lambda: p.run("train", batch(p.step)))
        assert p.step == STEPS
        [event] = supervisor.events
        assert event.elastic is not None
        assert (event.tasks, event.step, event.restored_step, event.lost_steps) == \
            (["worker:0"], 3, 3, 0)
        assert (event.elastic.workers_before, event.elastic.workers_after) == (3, 2)
        assert event.elastic.layout == "even"
        assert event.elastic.source == "worker:1"
        # the new ring runs on the survivors' nodes, not on the dead worker's
        assert event.nodes == [nodes["/job:worker/task:1"], nodes["/job:worker/task:2"]]
        assert lines == [event.line()]
        assert re.match(r"worker:0 died at step 3 \(SIGKILL; found by a failed step in "
                        r"\d+\.\d\d s\); went on with 2 of 3 workers \(elastic: recompiled in "
                        r"\d+\.\d\d s, new ring in \d+\.\d\d s\); variables of "
                        r"step 3 from worker:1 in \d+\.\d\d s; lost 0 steps$", lines[0])
        # two tasks now (the survivors' names kept), each with half of the global batch
        assert p._cluster.tasks == {"/job:worker/task:1": ["/job:worker/task:1/cpu:0"],
                                    "/job:worker/task:2": ["/job:worker/task:2/cpu:0"]}
        stats = p._cluster.last_transfer_stats
        assert stats.feed_bytes == X.nbytes + Y.nbytes
        final = {n: np.array(v) for n, v in p.variables.items()}
        # two mirrors of each variable now, not three
        assert {n for n in final if "/replica_" in n} == \
            {f"{n}/replica_1" for n in final if "/replica_" not in n}
        loss = float(out["loss"])
        p.save_checkpoint(tmp_path / "ck")  # (of 2 workers' copies)
    finally:
        p.close(read_back=False)
    # the checkpoint resumes the job on 3 workers again: the third copy is the variable's
    again = Program(allreduce_module(backend), backend=backend, cluster="inprocess")
    again.restore_checkpoint(tmp_path / "ck")
    np.testing.assert_array_equal(again.variables["w0/replica_2"], final["w0"])
    want, want_loss = uninterrupted(backend)
    assert loss == pytest.approx(want_loss, rel=1e-10)
    for name, value in want.items():
        np.testing.assert_allclose(final[name], value, rtol=1e-10, atol=1e-12, err_msg=name)
        np.testing.assert_array_equal(final.get(f"{name}/replica_1", final[name]), final[name])
    assert int(final["global_step"]) == STEPS


@pytest.mark.distributed
def test_a_batch_that_does_not_split_into_the_workers_left_keeps_its_shards(loopback_cluster):
    """A global batch of 9: 3 shards of 3, never 2 equal ones. The dead worker's shard goes
    to a survivor (a second CPU of its task): the same shards, the same ring sum."""
    p = Program(allreduce_module("reference"), backend="reference",
                cluster=loopback_cluster.address, cluster_timeout_s=30)
    odd = {"x": X[:9], "y": Y[:9]}
    try:
        with Supervisor(p, None, "elastic", inject=["worker:2@step=1"], rejoin=False,
                        health_interval_s=None, report=lambda line: None) as supervisor:
            for _ in range(3):
                out = supervisor.step(lambda: p.run("train", odd))
        [event] = supervisor.events
        assert event.elastic is not None and event.elastic.layout == "shards"
        assert "went on with 2 of 3 workers, the 3 shards of the batch kept" in event.line()
        assert p._cluster.tasks == {"/job:worker/task:0": ["/job:worker/task:0/cpu:0",
                                                           "/job:worker/task:0/cpu:1"],
                                    "/job:worker/task:1": ["/job:worker/task:1/cpu:0"]}
        assert p._cluster.where["/job:worker/task:1"]["node_id"] == event.nodes[1]
        final = {n: np.array(v) for n, v in p.variables.items()}
    finally:
        p.close(read_back=False)
    one = Program(classifier("adam"), backend="reference")
    for _ in range(3):
        want = one.run("train", odd)
    assert float(out["loss"]) == pytest.approx(float(want["loss"]), rel=1e-10)
    for name, value in one.variables.items():
        np.testing.assert_allclose(final[name], value, rtol=1e-10, atol=1e-12, err_msg=name)
        np.testing.assert_array_equal(final[f"{name}/replica_2"], final[name])


@pytest.mark.distributed
@pytest.mark.slow  # (~10 s: two workers restarted)
def test_with_no_worker_left_elastic_falls_back_to_the_restart(loopback_cluster, tmp_path):
    p = Program(allreduce_module("reference", workers=2), backend="reference",
                cluster=loopback_cluster.address, cluster_timeout_s=30)
    lines: list[str] = []
    try:
        with Supervisor(p, tmp_path / "ck", "elastic", inject=["worker:0@step=1",
                                                              "worker:1@step=1"],
                        health_interval_s=None, report=lines.append) as supervisor:
            for _ in range(2):
                out = supervisor.step(lambda: p.run("train", batch(p.step)))
        [event] = supervisor.events
        assert event.elastic is None and event.fell_back == "no worker is left"
        assert sorted(event.tasks) == ["worker:0", "worker:1"]
        assert "(not elastic: no worker is left)" in lines[0]
        assert (event.restored_step, event.lost_steps) == (0, 1)
    finally:
        p.close(read_back=False)
    one = Program(classifier("adam"), backend="reference")
    for step in range(2):
        want = one.run("train", batch(step))
    assert float(out["loss"]) == pytest.approx(float(want["loss"]), rel=1e-10)


@pytest.mark.distributed
def test_elastic_needs_an_allreduce_program(loopback_cluster, tmp_path, capsys):
    from tests.distributed.test_runtime import saved_artifact
    path, feeds = saved_artifact(tmp_path)  # a parameter-server program
    code = main(["run", path, "--entry", "sgd", *feeds, "--steps", "1", "--cluster",
                 loopback_cluster.address, "--on-failure", "elastic"])
    assert code == 1
    assert capsys.readouterr().err == (
        "error: --on-failure elastic goes on with the allreduce workers left; this program "
        "was not compiled with --strategy allreduce (use --on-failure restart)\n")
    with pytest.raises(TfcError, match="expected one of restart, elastic, fail"):
        Supervisor(Program(classifier("adam"), backend="reference"), None, "bounce")


@pytest.mark.distributed
def test_tfc_run_goes_on_elastically_and_keeps_rays_messages_off_stdout(
        loopback_cluster, tmp_path, capsys):
    """The CLI end to end: the artifact carries the unreplicated step; mini-batches of 9
    and 3 rows (no 2 equal shards: the shards are kept), the failed step tried again on
    the batch it had; stdout has the fetches only, stderr tfc's line, and Ray's own
    "(raylet) A worker died" message goes to a file in the Ray session's logs."""
    from tfc.data.feeding import MiniBatches
    from tfc.distributed.cluster import RAY_MESSAGES
    model = tmp_path / "model.tfir"
    model.write_text(print_module(classifier("adam")))
    art = tmp_path / "m.tfc"
    assert main(["compile", str(model), "--backend", "reference", "--cluster", "workers=3",
                 "--strategy", "allreduce", "-o", str(art)]) == 0
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y)
    messages = list(Path(loopback_cluster.temp_dir).rglob(RAY_MESSAGES))
    before = sum(p.read_text().count("A worker died") for p in messages)
    capsys.readouterr()
    code = main(["run", str(art), "--feed", f"x={tmp_path / 'x.npy'}", "--feed",
                 f"y={tmp_path / 'y.npy'}", "--batch", "9", "--shuffle", "--steps", "5",
                 "--cluster",
                 loopback_cluster.address, "--cluster-timeout", "30",
                 "--on-failure", "elastic", "--no-rejoin", "--inject-failure",
                 "worker:1@step=2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert re.search(r"^worker:1 died at step 2 \(SIGKILL; found by .*\); went on with 2 of 3 "
                     r"workers, the 3 shards of the batch kept \(elastic: .* lost 0 steps$",
                     err, re.M), err
    assert "(ring 2/3)" in err  # the progress line: 2 of the 3 workers (--no-rejoin)
    one = Program(classifier("adam"), backend="reference")
    batches = MiniBatches({"x": X, "y": Y}, 9, True, 0)
    for _ in range(5):
        want = float(one.run("train", batches.next_feeds())["loss"])
    assert float(out.splitlines()[-1]) == pytest.approx(want, rel=1e-10)
    assert "(raylet)" not in out and "(raylet)" not in err
    # Ray's message did come (in its own time), to the file
    deadline = time.monotonic() + 10
    while True:
        messages = list(Path(loopback_cluster.temp_dir).rglob(RAY_MESSAGES))
        after = sum(p.read_text().count("A worker died") for p in messages)
        if after > before or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert after > before
