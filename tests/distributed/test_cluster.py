"""tfc.distributed.cluster on a real multi-node Ray on loopback: the nodes come up distinct,
tasks are spread over them and their actors run where they were asked, unreachable clusters
and a missing Ray fail fast with one line, and a stopped cluster leaves nothing behind and
touches no other Ray."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tfc.distributed.cluster import (INSTALL_HINT, LOOPBACK, ActorStart, LoopbackCluster,
                                     RayCluster, free_port)
from tfc.errors import TfcError

# tests that need Ray but not the shared cluster (they start or try to reach one of their own)
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason=f"ray is not installed ({INSTALL_HINT})")

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[2]  # the checkout whose tfc the subprocesses import


def _run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


def _where_class() -> type:
    """An actor class that says where it runs (defined in a function: Ray ships it by value,
    so the workers need not import this test module)."""

    class Where:
        def __init__(self, task: str) -> None:
            self.task = task

        def node(self) -> tuple[str, str]:
            import ray
            return self.task, ray.get_runtime_context().get_node_id()

    return Where


@pytest.fixture
def cluster(loopback_cluster: LoopbackCluster) -> Any:
    connected = RayCluster.connect(loopback_cluster.address)
    yield connected
    connected.close()


def test_three_distinct_nodes_come_up(cluster: RayCluster) -> None:
    nodes = cluster.nodes
    assert len(nodes) == 3
    assert len({n.node_id for n in nodes}) == 3
    assert [n.host_index for n in nodes] == [0, 1, 2]
    assert {n.ip for n in nodes} == {LOOPBACK}
    assert all(n.resources[f"host{i}"] == 1 for i, n in enumerate(nodes))


def test_spread_takes_distinct_nodes_then_round_robin(cluster: RayCluster) -> None:
    ids = [n.node_id for n in cluster.nodes]
    assert cluster.spread(3) == ids
    assert cluster.spread(5) == ids + ids[:2]
    assert cluster.spread(1) == ids[:1]
    with pytest.raises(TfcError, match="at least one"):
        cluster.spread(0)


def test_actors_run_on_the_node_asked(cluster: RayCluster) -> None:
    import ray

    # Reversed, so that the placement is the one asked for, not the order Ray would pick.
    nodes = list(reversed(cluster.spread(3))) + cluster.spread(2)
    where = _where_class()
    handles = [cluster.start_actor(where, f"worker:{i}", node_id=node, name=f"worker:{i}")
               for i, node in enumerate(nodes)]
    answers = ray.get([h.node.remote() for h in handles], timeout=30)
    assert answers == [(f"worker:{i}", node) for i, node in enumerate(nodes)]
    assert ray.get(handles[0].tfc_node_id.remote(), timeout=30) == nodes[0]

    cluster.close()  # kills its actors
    with pytest.raises(TfcError, match="closed"):
        cluster.spread(1)


def test_an_actor_that_cannot_start_is_one_line(cluster: RayCluster) -> None:
    class Broken:
        def __init__(self) -> None:
            raise ValueError("no artifact here")

    node = cluster.spread(2)[1]
    with pytest.raises(TfcError) as caught:
        cluster.start_actor(Broken, node_id=node, name="task ps:0", timeout_s=30)
    message = str(caught.value)
    assert "\n" not in message
    assert message == f"task ps:0 could not start on node {node[:12]}: " \
                      f"ValueError: no artifact here"
    with pytest.raises(TfcError, match="not an alive node"):
        cluster.start_actor(Broken, node_id="f" * 56, name="task ps:1")


def _gathering_class() -> type:
    """An actor class whose constructor writes its PID to ``folder``, then waits (at most
    20 s, else it raises) until ``count`` actors have: only actors started together get
    past it."""

    class Gathering:
        def __init__(self, folder: str, count: int) -> None:
            import os
            import time
            Path(folder, str(os.getpid())).write_text("")
            deadline = time.monotonic() + 20
            while len(os.listdir(folder)) < count:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{len(os.listdir(folder))} of {count} actors started")
                time.sleep(0.05)

    return Gathering


def test_actors_start_together(cluster: RayCluster, tmp_path: Path) -> None:
    """``start_actors`` starts every actor before it waits for any (one after another, the
    first would wait for the others forever: here 20 s, then fail)."""
    import ray
    nodes = cluster.spread(3)
    starts = [ActorStart(_gathering_class(), (str(tmp_path), 3), node, f"task worker:{i}")
              for i, node in enumerate(nodes)]
    handles = cluster.start_actors(starts, timeout_s=60)
    assert ray.get([h.tfc_node_id.remote() for h in handles], timeout=30) == nodes
    assert len(list(tmp_path.iterdir())) == 3


def test_one_actor_that_cannot_start_takes_the_others_down(cluster: RayCluster,
                                                           tmp_path: Path) -> None:
    class Broken:
        def __init__(self) -> None:
            raise ValueError("no artifact here")

    nodes = cluster.spread(2)
    starts = [ActorStart(_gathering_class(), (str(tmp_path), 1), nodes[0], "task worker:0"),
              ActorStart(Broken, (), nodes[1], "task ps:0")]
    with pytest.raises(TfcError) as caught:
        cluster.start_actors(starts, timeout_s=60)
    assert str(caught.value) == f"task ps:0 could not start on node {nodes[1][:12]}: " \
                                f"ValueError: no artifact here"
    [started] = [int(f.name) for f in tmp_path.iterdir()]
    deadline = time.monotonic() + 20  # the one that started is killed
    while Path(f"/proc/{started}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{started}").exists()


@needs_ray
def test_an_unreachable_address_fails_fast_in_one_line() -> None:
    address = f"{LOOPBACK}:{free_port()}"  # nothing listens there
    start = time.monotonic()
    with pytest.raises(TfcError) as caught:
        RayCluster.connect(address, timeout_s=5)
    assert time.monotonic() - start < 5
    assert str(caught.value).startswith(f"cannot reach the Ray cluster at {address}: ")
    assert "\n" not in str(caught.value)
    for bad in ("nowhere", "host:notaport", "host:99999"):
        with pytest.raises(TfcError, match="bad cluster address"):
            RayCluster.connect(bad)


@needs_ray
def test_a_port_that_is_not_ray_fails_within_the_timeout() -> None:
    """Something answers TCP there but it is not a Ray cluster: Ray's own connect would retry
    for long; tfc's gives up at the timeout (in a subprocess: Ray's abandoned attempt stays
    out of this one)."""
    with socket.socket() as listener:
        listener.bind((LOOPBACK, 0))
        listener.listen()
        address = f"{LOOPBACK}:{listener.getsockname()[1]}"
        out = _run_python(f"""
            import time
            from tfc.distributed.cluster import RayCluster, require_ray
            from tfc.errors import TfcError
            require_ray()
            start = time.monotonic()
            try:
                RayCluster.connect({address!r}, timeout_s=3)
            except TfcError as e:
                print("ERROR", e)
            print("SECONDS", time.monotonic() - start)
        """)
    lines = dict(ln.split(" ", 1) for ln in out.stdout.splitlines() if " " in ln)
    assert out.returncode == 0, out.stderr
    assert lines["ERROR"].startswith(f"cannot join the Ray cluster at {address}") or \
        lines["ERROR"] == f"could not join the Ray cluster at {address} within 3 s", lines
    assert float(lines["SECONDS"]) < 10


def test_without_ray_the_error_names_the_install_command() -> None:
    """In a subprocess whose ``import ray`` fails (as without the extra installed):
    importing tfc.distributed works and imports no ray; using a cluster is a one-line
    TfcError that says how to install it."""
    out = _run_python("""
        import sys
        sys.modules["ray"] = None  # import ray -> ImportError
        import tfc, tfc.distributed
        from tfc.distributed import RayCluster
        from tfc.errors import TfcError
        try:
            RayCluster.connect("local")
        except TfcError as e:
            print("ERROR", e)
    """)
    assert out.returncode == 0, out.stderr
    error = [ln for ln in out.stdout.splitlines() if ln.startswith("ERROR ")]
    assert len(error) == 1 and INSTALL_HINT in error[0], out.stdout


def test_importing_tfc_distributed_does_not_import_ray() -> None:
    out = _run_python("""
        import sys
        import tfc, tfc.distributed, tfc.distributed.cluster
        print("RAY", sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
    """)
    assert out.returncode == 0, out.stderr
    assert "RAY []" in out.stdout.splitlines()


def _process_tree(roots: list[int]) -> set[int]:
    """The PIDs of ``roots``, their process groups, and their descendants, alive now."""
    parent: dict[int, int] = {}
    group: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z":  # a zombie is gone, only its exit status is left
            continue
        parent[int(entry.name)], group[int(entry.name)] = int(fields[1]), int(fields[2])
    found = {pid for pid in parent if pid in roots or group[pid] in roots}
    grew = True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_stop_ends_its_own_processes_and_no_other_ray(loopback_cluster: LoopbackCluster) -> None:
    others = _process_tree(loopback_cluster.pids)
    own = LoopbackCluster(2).start(timeout_s=60)
    started = _process_tree(own.pids)
    assert len(started) > len(own.pids)  # raylets, object stores, ... under each node
    assert not started & others
    own.stop()
    own.stop()  # idempotent
    assert not _process_tree(list(started))
    assert others <= _process_tree(loopback_cluster.pids)  # the other cluster untouched
    with RayCluster.connect(loopback_cluster.address) as cluster:
        assert len(cluster.nodes) == 3


@needs_ray
def test_local_starts_an_embedded_ray_and_close_shuts_it_down() -> None:
    import ray

    cluster = RayCluster.connect("local")
    try:
        assert cluster.started_ray
        (node,) = cluster.nodes
        assert node.ip == LOOPBACK
        assert node.resources["CPU"] == (os.cpu_count() or 1)
        where = cluster.start_actor(_where_class(), "worker:0", node_id=node.node_id,
                                    name="worker:0")
        assert ray.get(where.node.remote(), timeout=30) == ("worker:0", node.node_id)
        with RayCluster.connect("local") as again:  # shares the one connection
            assert again.gcs_address == cluster.gcs_address
        assert ray.is_initialized()
    finally:
        cluster.close()
    assert not ray.is_initialized()
