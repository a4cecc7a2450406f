"""Cluster programs on a real Ray cluster: one actor per task, values task to task.

The cluster is the session's ``loopback_cluster`` (a head and two more nodes on
127.0.0.1, ``tests/distributed/conftest.py``). The model is a parameter-server step
built by hand: the variables and the optimizer on ``/job:ps/task:0``, each of two workers
computing the gradients of its half of the batch, the PS averaging them and applying
them once. One process running the same graph gives the losses to match (f64).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tfc
from tfc.devices import cpu_count
from tfc.errors import ExecutionError, TfcError
from tfc.ir.printer import print_module
from tfc.runtime import Program
from tfc.runtime.checkpoint import read_checkpoint
from tfc.testing import split_mlp_module

from tests.passes.test_async_split import classifier  # the two-layer model a user writes

PS = "/job:ps/task:0/cpu:0"
WORKERS = ("/job:worker/task:0/cpu:0", "/job:worker/task:1/cpu:0")
TASKS = (PS, *WORKERS)
RNG = np.random.default_rng(3)
HALF = 8
FEEDS = {f"{n}{i}": RNG.normal(size=(HALF, 5 if n == "x" else 3)) for i in range(2)
         for n in ("x", "y")}


def ps_module(devices: tuple[str, ...] | None) -> tfc.ir.core.Module:
    """Entries ``sgd`` and ``adam`` (each on variables of its own): the PS step above,
    on ``devices`` (ps, worker 0, worker 1), or on one device for ``None``; ``predict``
    (worker 0) the model of ``sgd``; ``wnorm`` (the PS alone) its weights' squared norm."""
    ps, *workers = devices or (None, None, None)
    rng = np.random.default_rng(1)
    with tfc.Graph().as_default() as g:
        xs = [tfc.placeholder(tfc.float64, [None, 5], name=f"x{i}") for i in range(2)]
        ys = [tfc.placeholder(tfc.float64, [None, 3], name=f"y{i}") for i in range(2)]
        for name, opt in (("sgd", tfc.train.GradientDescentOptimizer(0.3)),
                          ("adam", tfc.train.AdamOptimizer(0.05))):
            with g.device(ps):
                w = tfc.Variable(rng.normal(0, 0.5, (5, 3)), name=f"{name}_w")
                b = tfc.Variable(np.zeros(3), name=f"{name}_b")
            losses, grads = [], []
            for x, y, dev in zip(xs, ys, workers):
                with g.device(dev):
                    err = tfc.tanh(tfc.matmul(x, w) + b) - y
                    loss = tfc.reduce_mean(err * err)
                    grads.append(tfc.gradients(loss, [w, b]))
                    losses.append(loss)
            with g.device(ps):
                mean = [(ga + gb) * 0.5 for ga, gb in zip(*grads)]
                step = opt.apply_gradients(list(zip(mean, [w, b])))
                total = (losses[0] + losses[1]) * 0.5
            feeds = {f"x{i}": xs[i] for i in range(2)} | {f"y{i}": ys[i] for i in range(2)}
            tfc.entry(name, feeds=feeds, fetches={"loss": total}, targets=[step])
            if name == "sgd":
                with g.device(workers[0]):
                    tfc.entry("predict", feeds={"x0": xs[0]},
                              fetches={"y": tfc.tanh(tfc.matmul(xs[0], w) + b)})
                with g.device(ps):  # an entry of one device: the artifact's object code
                    tfc.entry("wnorm", feeds={}, fetches={"n": tfc.reduce_sum(w * w)})
    module = g.as_module()
    if devices:
        module.devices = list(devices)
    return module


def run_losses(program: Program, steps: int = 3) -> dict[str, list[float]]:
    return {entry: [float(program.run(entry, FEEDS)["loss"]) for _ in range(steps)]
            for entry in ("sgd", "adam")}


@pytest.mark.distributed
@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_ps_training_on_three_tasks_matches_one_process(loopback_cluster, backend, tmp_path):
    one = Program(ps_module(None), backend=backend)
    want = run_losses(one)
    saved = tmp_path / "ps.tfc"
    Program(ps_module(TASKS), backend=backend, cluster="inprocess").save(saved)
    with tfc.runtime.load(saved, cluster=loopback_cluster.address) as p:
        nodes = {t: where["node_id"] for t, where in p._cluster.where.items()}
        assert len(set(nodes.values())) == 3, nodes  # one node each (of three)
        # the three nodes are one host (127.0.0.1): its cores are shared, not each task's
        cores = {t: where["cores"] for t, where in p._cluster.where.items()}
        assert cores == {t: max(1, cpu_count() // 3) for t in nodes}, cores
        # each task compiled its stages from the IR; the PS linked wnorm's object code
        made = p._cluster.made_from
        assert made[PS.rsplit("/", 1)[0]] == {
            "sgd": "compiled", "adam": "compiled", "predict": "compiled",
            "wnorm": "object code" if backend == "llvm" else "compiled"}
        assert made[WORKERS[0].rsplit("/", 1)[0]] == {e: "compiled" for e in
                                                      ("sgd", "predict", "adam")}
        got = run_losses(p)
        for entry in want:  # the same graph, task by task: the same numbers
            np.testing.assert_allclose(got[entry], want[entry], rtol=1e-10, atol=0)
        stats = p._executable("adam").last_transfer_stats
        # the workers' gradients went to the PS, the weights to the workers, task to task;
        # the driver saw the feeds and the loss only
        assert stats.tensors >= 8 and stats.bytes > 0
        assert stats.launch == "wire"  # the step's launch and fetches over TCP, not Ray
        assert stats.feed_bytes == sum(a.nbytes for a in FEEDS.values())
        assert stats.fetch_bytes == 8 and stats.stale == 0
        for program in (p, one):  # (making an entry ready reads every variable back)
            program.run("predict", x0=FEEDS["x0"])
        np.testing.assert_allclose(run_losses(p, 1)["sgd"], run_losses(one, 1)["sgd"],
                                   rtol=1e-10)
        np.testing.assert_allclose(p.run("wnorm")["n"], one.run("wnorm")["n"], rtol=1e-10)
        reads = p._cluster.reads
        # the values the sgd step left on the tasks: used there, nothing read back
        np.testing.assert_allclose(p.run("predict", x0=FEEDS["x0"])["y"],
                                   one.run("predict", x0=FEEDS["x0"])["y"], rtol=1e-10)
        assert p._cluster.reads == reads
        for name, value in one.variables.items():  # read back from the PS actor
            np.testing.assert_allclose(p.variables[name], value, rtol=1e-10, atol=1e-12)
        mine = read_checkpoint(p.save_checkpoint(tmp_path / "cluster"))
        theirs = read_checkpoint(one.save_checkpoint(tmp_path / "one"))
        assert mine.step == theirs.step == 11
        for name, value in theirs.values.items():
            np.testing.assert_allclose(mine.values[name], value, rtol=1e-10, atol=1e-12)
        # a value the program sets goes to its task before the next step
        p.restore_checkpoint(tmp_path / "one")
        one.restore_checkpoint(tmp_path / "one")
        np.testing.assert_allclose(run_losses(p, 1)["sgd"], run_losses(one, 1)["sgd"],
                                   rtol=1e-10)
        assert sorted(p.task_states()) == ["ps:0", "worker:0", "worker:1"]


@pytest.mark.distributed
def test_a_failing_task_fails_the_step_on_every_task(loopback_cluster):
    tasks = list(TASKS)
    m = split_mlp_module(tasks)
    m.devices = tasks
    x = RNG.normal(size=(16, 6)).astype(np.float32)
    y = RNG.integers(0, 3, 16).astype(np.int32)
    with Program(m, backend="reference", cluster=loopback_cluster.address,
                 cluster_timeout_s=60) as p:
        before = {k: v.copy() for k, v in p.variables.items()}
        started = time.monotonic()
        with pytest.raises(ExecutionError, match=r"task /job:\w+/task:\d failed to run step 0"):
            p.run("train", x=x, y=np.full(16, 7, np.int32))  # labels out of range
        assert time.monotonic() - started < 30  # aborted, not left to time out
        assert p.step == 0
        for k, v in before.items():  # no task applied its part of the failed step
            np.testing.assert_array_equal(p.variables[k], v)
        p.run("train", x=x, y=y)
        assert p.step == 1


@pytest.mark.distributed
def test_a_killed_task_is_an_error_naming_it(loopback_cluster):
    p = Program(ps_module(TASKS), backend="reference", cluster=loopback_cluster.address)
    try:
        p.run("sgd", FEEDS)
        os.kill(p._cluster.where[WORKERS[1].rsplit("/", 1)[0]]["pid"], signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(ExecutionError, match=r"task /job:worker/task:1 died"):
            p.run("sgd", FEEDS)
        assert time.monotonic() - started < 30
    finally:
        p.close(read_back=False)


def test_a_dead_task_is_named_even_when_a_peers_broken_link_fails_first():
    """The race CI met: a worker is killed, the PS's send to it breaks and its step's error
    arrives first; the error must still name the task that died (its call fails as an
    ActorDiedError), not only the connection."""
    from types import SimpleNamespace

    from tfc.distributed.runtime import ClusterRuntime

    class ActorDiedError(Exception):
        pass

    class Failed:
        def __init__(self, error: Exception) -> None:
            self.error = error

    def get(ref, timeout=None):
        raise ref.error

    def wait(refs, num_returns=1, timeout=None):
        return list(refs)[:num_returns], list(refs)[num_returns:]

    runtime = object.__new__(ClusterRuntime)
    runtime.ray = SimpleNamespace(exceptions=SimpleNamespace(ActorDiedError=ActorDiedError),
                                  wait=wait, get=get)
    runtime.timeout_s = 5.0
    runtime.actors = {}
    broken = Failed(RuntimeError("the connection to task /job:worker/task:1 failed: "
                                 "[Errno 32] Broken pipe"))
    refs = {"/job:ps/task:0": broken, "/job:worker/task:0": Failed(RuntimeError("aborted")),
            "/job:worker/task:1": Failed(ActorDiedError("gone"))}
    with pytest.raises(ExecutionError, match=r"^task /job:worker/task:1 died"):
        runtime._wait(refs, "run step 1 of @sgd", step_id=1)


def test_replies_over_the_wire_name_a_dead_task_and_skip_a_failed_steps_late_reply():
    """The driver's side of a step launched over TCP (socket pairs for the tasks): a
    task's late reply to an earlier step is skipped; a task whose connection closes died,
    and is named also when a peer's error (its link to it broke) came first; a task that
    does not answer is named within the timeout."""
    import socket

    from tfc.distributed.runtime import ClusterRuntime
    from tfc.distributed.task import packed_counters
    from tfc.distributed.wire import Link, _send_frame

    runtime = object.__new__(ClusterRuntime)
    runtime.timeout_s, runtime.actors = 5.0, {}
    ps, w0, w1 = (t.rsplit("/", 1)[0] for t in TASKS)

    def tasks_ends() -> dict:
        ends = {}
        runtime._links = {}
        for t in (ps, w0, w1):
            mine, theirs = socket.socketpair()
            runtime._links[t], ends[t] = Link(mine, f"task {t}", 5.0), theirs
        return ends

    ends = tasks_ends()
    _send_frame(ends[ps], 1, {"reply": {"error": "aborted"}}, [])  # a step before
    for t in (ps, w0, w1):
        _send_frame(ends[t], 2, {"reply": {}},
                    [(["counters"], packed_counters({"tensors": 1, "bytes": len(t)}))]
                    + ([(["fetch:0"], np.float64(len(t)))] if t == w0 else []))
    got = runtime._replies([ps, w0, w1], 2, "run step 1 of @sgd")
    assert got[w0][0] == {0: len(w0)} and got[ps][0] == {}
    assert got[ps][1]["tensors"] == 1 and got[w1][1]["bytes"] == len(w1)

    ends = tasks_ends()
    _send_frame(ends[ps], 3, {"reply": {"error": f"the connection to task {w1} "
                                                f"failed: [Errno 32] Broken pipe"}}, [])
    _send_frame(ends[w0], 3, {"reply": {"error": "aborted"}}, [])
    ends[w1].close()
    with pytest.raises(ExecutionError, match=rf"^task {w1} died \(its process exited\) "
                                             rf"and could not run step 2 of @sgd$"):
        runtime._replies([ps, w0, w1], 3, "run step 2 of @sgd")

    ends = tasks_ends()
    runtime.timeout_s = 0.5
    for t in (ps, w0):
        _send_frame(ends[t], 4, {"reply": {}}, [])
    started = time.monotonic()
    with pytest.raises(ExecutionError, match=rf"^task {w1} did not run step 3 of @sgd within "
                                             rf"0.5 s$"):
        runtime._replies([ps, w0, w1], 4, "run step 3 of @sgd")
    assert time.monotonic() - started < 3


def test_the_driver_watches_its_links_with_one_selector_across_steps(monkeypatch):
    """The driver's wait for replies keeps one selector across steps (not one made and
    filled per step); a link replaced after a task's restart is watched instead of the
    old one, and a late reply on the link of a task the step does not wait for is
    dropped (not read again and again)."""
    import selectors
    import socket

    from tfc.distributed.runtime import ClusterRuntime
    from tfc.distributed.task import packed_counters
    from tfc.distributed.wire import Link, _send_frame

    made = []
    real = selectors.DefaultSelector
    monkeypatch.setattr(selectors, "DefaultSelector", lambda: made.append(1) or real())
    runtime = object.__new__(ClusterRuntime)
    runtime.timeout_s, runtime.actors, runtime._links = 5.0, {}, {}
    ps, w0, w1 = (t.rsplit("/", 1)[0] for t in TASKS)
    ends = {}

    def connect(t):
        mine, theirs = socket.socketpair()
        runtime._links[t], ends[t] = Link(mine, f"task {t}", 5.0), theirs

    def reply(t, step):
        _send_frame(ends[t], step, {"reply": {}},
                    [(["counters"], packed_counters({"tensors": step}))])

    for t in (ps, w0, w1):
        connect(t)
    try:
        for step in (1, 2, 3):
            if step == 2:  # w0 restarted: a new connection
                runtime._links[w0].close()
                connect(w0)
            if step == 3:  # a late reply of step 1 from w1, which step 3 does not wait for
                reply(w1, 1)
            tasks = [ps, w0, w1] if step < 3 else [ps, w0]
            for t in tasks:
                reply(t, step)
            got = runtime._replies(tasks, step, f"run step {step}")
            assert sorted(got) == sorted(tasks)
            assert all(c["tensors"] == step for _, c in got.values())
        reply(w1, 4)
        assert runtime._replies([w1], 4, "run step 4")[w1][1]["tensors"] == 4
        assert len(made) == 1
    finally:
        runtime.close()
        for end in ends.values():
            end.close()


@pytest.mark.distributed
def test_a_task_that_cannot_start_is_an_error_naming_it(loopback_cluster, monkeypatch):
    import tfc.runtime.artifact as artifact
    monkeypatch.setattr(artifact, "artifact_bytes", lambda *a, **k: b"not an artifact")
    with pytest.raises(TfcError, match=r"task /job:\w+/task:\d could not start .* the "
                                       r"artifact sent to /job:\w+/task:\d is not a tfc"):
        Program(ps_module(TASKS), backend="reference", cluster=loopback_cluster.address)


def test_a_module_of_tasks_needs_a_cluster():
    with pytest.raises(TfcError, match=r"compiled for a cluster \(tasks /job:ps/task:0, "
                                       r"/job:worker/task:0, /job:worker/task:1\)"):
        Program(ps_module(TASKS))
    p = Program(ps_module(TASKS), cluster="inprocess")  # threads, as before: explicit
    one = Program(ps_module(None))
    np.testing.assert_allclose(run_losses(p, 2)["adam"], run_losses(one, 2)["adam"],
                               rtol=1e-10)
    with pytest.raises(TfcError, match="no task devices to distribute"):
        Program(ps_module(None), cluster="local")
    with pytest.raises(TfcError, match="expected local, auto, inprocess or HOST:PORT"):
        Program(ps_module(TASKS), cluster="somewhere")


def test_without_ray_the_error_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(TfcError, match=r"pip install -e '\.\[distributed\]'"):
        Program(ps_module(TASKS), cluster="local")


def saved_artifact(tmp_path) -> tuple[str, list[str]]:
    """The PS module saved as an artifact (on the reference backend), and --feed options."""
    path = str(tmp_path / "ps.tfc")
    Program(ps_module(TASKS), backend="reference", cluster="inprocess").save(path)
    feeds = []
    for name, value in FEEDS.items():
        np.save(tmp_path / f"{name}.npy", value)
        feeds += ["--feed", f"{name}={tmp_path / f'{name}.npy'}"]
    return path, feeds


@pytest.mark.distributed
def test_tfc_run_on_the_cluster(loopback_cluster, tmp_path, capsys):
    from tfc.cli import main
    path, feeds = saved_artifact(tmp_path)
    want = run_losses(Program(ps_module(None), backend="reference"))["adam"]
    code = main(["run", path, "--entry", "adam", *feeds, "--steps", "3", "--save",
                 "--cluster", loopback_cluster.address])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert float(out.splitlines()[-1]) == pytest.approx(want[-1], rel=1e-10)
    again = Program(ps_module(None), backend="reference")
    run_losses(again)
    saved = tfc.runtime.load(path, cluster="inprocess")  # the tasks' variables, saved
    assert saved.step == 3
    for name in ("adam_w", "adam_b"):
        np.testing.assert_allclose(saved.variables[name], again.variables[name], rtol=1e-10)


def test_tfc_run_errors_name_the_cluster_problem(tmp_path):
    path, feeds = saved_artifact(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def tfc_run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tfc.cli", "run", path, "--entry", "sgd",
                               *feeds, *args], capture_output=True, text=True, env=env,
                              timeout=120)

    no_cluster = tfc_run()
    assert no_cluster.returncode == 1
    assert no_cluster.stderr.startswith("error: ") and "--cluster" in no_cluster.stderr
    assert len(no_cluster.stderr.strip().splitlines()) == 1
    pytest.importorskip("ray")
    import socket
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    started = time.monotonic()
    unreachable = tfc_run("--cluster", address, "--cluster-timeout", "10")
    assert time.monotonic() - started < 60
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("error: ") and address in unreachable.stderr
    assert len(unreachable.stderr.strip().splitlines()) == 1, unreachable.stderr


def test_values_carry_their_step_id():
    """A task keeps a value that arrives before its step starts there, drops (and counts)
    one whose step is over, and a step aborted before it starts fails at once."""
    pytest.importorskip("ray")
    from tfc.distributed.task import TaskActor
    from tfc.runtime.artifact import artifact_bytes
    p = Program(ps_module(TASKS), backend="reference", cluster="inprocess")
    task = TaskActor("/job:ps/task:0", artifact_bytes(p.module, dict(p.variables)),
                     "reference", 5.0)
    assert sorted(task.variables) == sorted(p.variables)  # the PS holds every variable
    early = np.arange(3.0)
    task.deliver(2, [(["k1", "k2"], early)])  # step 2 has not started here yet
    assert task._rendezvous(2).recv_many(["k1", "k2"]) == [early, early]
    task._end(2)
    task.deliver(1, [(["late"], early)])
    task.deliver(2, [(["later"], early)])
    assert task.stale == 2
    task.abort(3, "worker:1 failed")
    started = time.monotonic()
    with pytest.raises(ExecutionError, match="aborted"):
        task.run_step("sgd", 3, 0, {}, 4, None, {})
    assert time.monotonic() - started < 4  # not the 5 s timeout


@pytest.mark.distributed
@pytest.mark.parametrize("strategy, optimizer, backend", [
    ("ps-sync", "momentum", "llvm"), ("allreduce", "adam", "reference")])
def test_a_cluster_compiled_model_trains_as_one_process(loopback_cluster, tmp_path, strategy,
                                                        optimizer, backend):
    """``tfc compile --cluster``'s module (the replicate pass: PS accumulation, or the ring
    all-reduce between worker tasks) run on Ray gives one process's losses (f64)."""
    from tfc.compiler.driver import compile_to_artifact
    from tfc.passes.replicate import ClusterSpec
    model = tmp_path / "model.tfir"
    model.write_text(print_module(classifier(optimizer)))
    spec = ClusterSpec(1 if strategy == "ps-sync" else 0, 2, strategy)
    compile_to_artifact(model, tmp_path / "m.tfc", backend=backend, cluster=spec)
    rng = np.random.default_rng(6)
    feeds = {"x": rng.normal(size=(12, 5)), "y": rng.integers(0, 3, 12).astype(np.int32)}
    one = Program(classifier(optimizer), backend=backend)
    want = [float(one.run("train", feeds)["loss"]) for _ in range(3)]
    with tfc.runtime.load(tmp_path / "m.tfc", cluster=loopback_cluster.address) as p:
        got = [float(p.run("train", feeds)["loss"]) for _ in range(3)]
        stats = p._executables["train"].last_transfer_stats
        assert stats.tensors > 0 and stats.fetch_bytes == 8  # the workers exchanged values
        # each worker got its half of the global batch only, not the whole of it
        assert stats.feed_bytes == sum(a.nbytes for a in feeds.values())
        np.testing.assert_allclose(got, want, rtol=1e-10)
        for name, value in one.variables.items():
            np.testing.assert_allclose(p.variables[name], value, rtol=1e-10, err_msg=name)


@pytest.mark.distributed
def test_a_task_on_another_cpu_compiles_from_the_ir(loopback_cluster, tmp_path, monkeypatch):
    """The artifact's object code was built for a CPU other than the tasks' (the host key
    its ``host`` member records, as the loader compares it): each task compiles that entry
    from the IR. The stale code is not object code at all, so a task that linked it could
    not start, or would give wrong numbers."""
    from tfc.backends.llvm import backend as llvm_backend
    saved = tmp_path / "ps.tfc"
    Program(ps_module(TASKS), backend="llvm", cluster="inprocess").save(saved)
    real_export = llvm_backend.LLVMBackend.export

    def built_elsewhere(self, executable):  # what the driver sends the tasks
        members = real_export(self, executable)
        if members:
            members[llvm_backend.HOST_MEMBER] = b"x86_64-unknown-linux-gnu|othercpu|+sse2|x"
            members[llvm_backend.OBJECT_MEMBER] = b"stale object code of another CPU"
        return members

    monkeypatch.setattr(llvm_backend.LLVMBackend, "export", built_elsewhere)
    one = Program(ps_module(None), backend="llvm")
    with tfc.runtime.load(saved, cluster=loopback_cluster.address) as p:
        assert p._cluster.made_from[PS.rsplit("/", 1)[0]]["wnorm"] == "compiled"
        np.testing.assert_allclose(p.run("wnorm")["n"], one.run("wnorm")["n"], rtol=1e-10)


@pytest.mark.slow  # (a Ray started and stopped in a fresh process: ~10-15 s)
def test_load_with_cluster_local_starts_and_stops_its_own_ray(tmp_path):
    """``tfc.runtime.load(path, cluster="local").run(...)``, end to end in a fresh process:
    it starts an embedded Ray, trains on it as one process does, and ``close`` stops every
    Ray process it started."""
    pytest.importorskip("ray")
    path, _ = saved_artifact(tmp_path)
    want = run_losses(Program(ps_module(None), backend="reference"), 2)["sgd"]
    np.savez(tmp_path / "feeds.npz", **FEEDS)
    script = f"""
import json, os, time
import numpy as np
import ray
import tfc
feeds = dict(np.load({str(tmp_path / 'feeds.npz')!r}))
p = tfc.runtime.load({path!r}, cluster="local")
losses = [float(p.run("sgd", feeds)["loss"]) for _ in range(2)]
node = ray._private.worker.global_worker.node
pids = [proc.process.pid for procs in node.all_processes.values() for proc in procs]
temp = p._cluster.cluster._connection.temp_dir
p.close()
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{{pid}}/stat") as f:  # a zombie is gone too
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
deadline = time.monotonic() + 20
while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
    time.sleep(0.1)
print(json.dumps({{"losses": losses, "pids": len(pids), "initialized": ray.is_initialized(),
                  "alive": [pid for pid in pids if alive(pid)],
                  "temp_left": os.path.exists(temp)}}))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    import json
    got = json.loads(done.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(got["losses"], want, rtol=1e-10)
    assert got["pids"] > 0 and not got["initialized"]
    assert got["alive"] == [] and not got["temp_left"]


@pytest.mark.distributed
def test_values_go_by_ray_where_no_listener_can_be_reached(loopback_cluster, monkeypatch):
    """Where a task's TCP listener cannot be reached (another host's firewall), its peers
    and the driver send it values by Ray (actor calls, the object store): the same
    numbers."""
    import socket
    import tfc.distributed.runtime as runtime
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        nowhere = s.getsockname()
    monkeypatch.setattr(runtime, "wire_addresses", lambda where: {t: nowhere for t in where})
    want = run_losses(Program(ps_module(None), backend="reference"), 2)
    with Program(ps_module(TASKS), backend="reference", cluster=loopback_cluster.address) as p:
        got = run_losses(p, 2)
        assert [p._cluster._link(t) for t in p._cluster.tasks] == [None] * 3  # the driver's
        assert p._executable("adam").last_transfer_stats.tensors >= 8
        assert p._executable("adam").last_transfer_stats.launch == "ray"
    for entry in want:
        np.testing.assert_allclose(got[entry], want[entry], rtol=1e-10, atol=0)
