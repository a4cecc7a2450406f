"""The Ray cluster a distributed program runs on: connecting to one, choosing nodes for tasks,
starting one actor per task on the node chosen, and a real multi-node cluster on 127.0.0.1
for tests and benchmarks.

Ray is imported only here, and only when a cluster is used (``require_ray``): ``import tfc``
and ``import tfc.distributed`` never import it. Before the import the environment is set so
that every Ray process this one starts stays on loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``:
Ray advertises and dials 127.0.0.1 instead of the machine's external address) and sends no usage
statistics; a value the user set already is kept (a driver joining a real multi-host cluster sets
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1``, see README "Clusters").

Every wait here is bounded: connecting (``timeout_s``), an actor's first answer (``timeout_s``),
a node coming up and going down. A cluster that cannot be reached, an actor that cannot start,
a Ray that is not installed: each a one-line :class:`TfcError`.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from tfc.errors import TfcError

LOOPBACK = "127.0.0.1"

# Set (unless already set) before ray is imported, so that every process Ray starts inherits them.
RAY_ENVIRONMENT = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # every Ray socket on 127.0.0.1
    "RAY_USAGE_STATS_ENABLED": "0",
}

INSTALL_HINT = "pip install -e '.[distributed]'"

_PROBE_TIMEOUT_S = 5.0  # the TCP check that a cluster's GCS port answers at all


def _loopback_environment() -> None:
    for key, value in RAY_ENVIRONMENT.items():
        os.environ.setdefault(key, value)


def require_ray() -> types.ModuleType:
    """The ``ray`` module, imported with the loopback environment set; a TfcError naming the
    install command when Ray is not installed."""
    _loopback_environment()
    try:
        import ray
    except ImportError as e:
        raise TfcError(f"running on a cluster needs Ray, and ray is not installed: "
                       f"{INSTALL_HINT} ({_first_line(e)})") from None
    return ray


def _first_line(error: BaseException | str) -> str:
    text = str(error).strip()
    return text.splitlines()[0].strip() if text else type(error).__name__


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (bind port 0 and let the kernel
    choose: two Ray clusters on one machine must not share Ray's fixed default ports)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _parse_address(address: str) -> tuple[str, int]:
    match = re.fullmatch(r"\s*\[?([^\s\[\]]+?)\]?:(\d{1,5})\s*", address)
    if not match or not 0 < int(match.group(2)) < 65536:
        raise TfcError(f"bad cluster address {address!r}: expected 'local', 'auto' or "
                       f"HOST:PORT (the address `ray start --head` printed)")
    host = match.group(1)
    return (LOOPBACK if host == "localhost" else host), int(match.group(2))


def _check_reachable(address: str, timeout_s: float) -> None:
    """A TfcError within ``timeout_s`` when nothing accepts a TCP connection at ``address``
    (Ray's own connect retries for a long time before it gives up)."""
    host, port = _parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or _first_line(e))
        raise TfcError(f"cannot reach the Ray cluster at {address}: {reason} (start one with "
                       f"`ray start --head`, or use --cluster local)") from None


@dataclass(frozen=True)
class NodeInfo:
    """One alive node of the cluster, as Ray reports it."""

    node_id: str
    ip: str
    resources: dict[str, float] = field(hash=False)

    @property
    def host_index(self) -> int | None:
        """``I`` of a ``hostI`` resource (the nodes of a LoopbackCluster carry one), if any."""
        found = [int(m.group(1)) for name in self.resources
                 if (m := re.fullmatch(r"host(\d+)", name))]
        return min(found) if found else None


@dataclass(frozen=True)
class ActorStart:
    """One actor for ``RayCluster.start_actors``: ``cls(*args, **kwargs)`` on node
    ``node_id``, named ``name`` in errors (``task worker:1``)."""

    cls: type
    args: tuple[Any, ...]
    node_id: str
    name: str
    max_concurrency: int = 4
    kwargs: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass
class _Connection:
    """This process's one connection to Ray, shared by the RayClusters that asked for it."""

    address: str  # what was asked: "local", or the GCS address joined
    gcs_address: str
    started_ray: bool  # "local": tfc started the Ray processes (and shuts them down)
    tfc_connected: bool  # tfc called ray.init (False: the user did, tfc never shuts it down)
    temp_dir: str | None = None
    users: int = 0


_CONNECTION: _Connection | None = None
_CONNECTION_LOCK = threading.RLock()


class RayCluster:
    """A connection to a Ray cluster and the actors a program started on it.

    ``connect("local")`` starts an embedded single-node Ray on 127.0.0.1 (one CPU per core of
    this machine), which ``close()`` shuts down; ``"auto"`` joins the cluster running on this
    machine (or ``RAY_ADDRESS``); ``"HOST:PORT"`` joins that one. Ray allows one connection
    per process: RayClusters asking for the same cluster share it, and the last one closed
    disconnects."""

    def __init__(self, ray: types.ModuleType, connection: _Connection) -> None:
        self._ray = ray
        self._connection: _Connection | None = connection
        self.address = connection.address
        self.gcs_address = connection.gcs_address
        self._actors: list[Any] = []

    # -- connecting ----------------------------------------------------------------------
    @classmethod
    def connect(cls, address: str, *, timeout_s: float = 30.0) -> "RayCluster":
        """Connect to ``address`` ("local" | "auto" | "HOST:PORT"); a one-line TfcError naming
        the address within ``timeout_s`` when the cluster cannot be reached. ("local" starts
        Ray here: Ray bounds the waits for the processes it starts.)"""
        global _CONNECTION
        address = address.strip()
        if address not in ("local", "auto"):
            _parse_address(address)
        ray = require_ray()
        with _CONNECTION_LOCK:
            if ray.is_initialized():
                connection = _shared_connection(ray, address)
            elif address == "local":
                connection = _start_local(ray)
            else:
                connection = _join(ray, address, timeout_s)
            _CONNECTION = connection
            connection.users += 1
            if connection.tfc_connected:
                _route_ray_messages(ray)
            return cls(ray, connection)

    @property
    def started_ray(self) -> bool:
        """Whether this cluster is the embedded Ray that tfc started ("local")."""
        return self._connection is not None and self._connection.started_ray

    @property
    def nodes(self) -> list[NodeInfo]:
        """The alive nodes, in a deterministic order: by ``hostI`` resource index where the
        nodes carry one, then by address and node id."""
        self._check_open()
        found = [NodeInfo(node_id=n["NodeID"], ip=n["NodeManagerAddress"],
                          resources=dict(n.get("Resources", {})))
                 for n in self._ray.nodes() if n.get("Alive")]
        return sorted(found, key=lambda n: (n.host_index is None, n.host_index or 0, n.ip,
                                            n.node_id))

    def spread(self, n: int) -> list[str]:
        """Node ids for ``n`` tasks: distinct nodes while there are enough (so that tasks never
        all land on the head by accident), then round robin over the nodes in order."""
        if n < 1:
            raise TfcError(f"cannot spread {n} tasks over a cluster: need at least one")
        nodes = self.nodes
        if not nodes:
            raise TfcError(f"the Ray cluster at {self.address} has no alive node")
        return [nodes[i % len(nodes)].node_id for i in range(n)]

    # -- actors --------------------------------------------------------------------------
    def start_actor(self, cls: type, *args: Any, node_id: str, name: str,
                    max_concurrency: int = 4, timeout_s: float = 60.0, **kwargs: Any) -> Any:
        """Start ``cls(*args, **kwargs)`` as a Ray actor on node ``node_id`` (pinned there:
        hard node affinity, no CPU reserved, no restarts) and wait until it answers, within
        ``timeout_s``; its handle. ``name`` (e.g. ``task worker:1``) names it in errors.

        The actor answers ``tfc_node_id()`` (the node it runs on) besides ``cls``'s methods;
        the first answer is checked against ``node_id``."""
        start = ActorStart(cls, args, node_id, name, max_concurrency, kwargs)
        return self.start_actors([start], timeout_s)[0]

    def start_actors(self, starts: Sequence["ActorStart"], timeout_s: float = 60.0
                     ) -> list[Any]:
        """Start every actor of ``starts`` at once (each as ``start_actor`` starts one) and
        wait for all their first answers together, within ``timeout_s`` in all: their
        handles, in order. Starting them one after another would add up each one's
        process start (a new ring's actors, a restart of several tasks). The first that
        fails or is late is a ``TfcError`` naming it, and every actor of ``starts`` is
        killed."""
        self._check_open()
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = {node.node_id for node in self.nodes}
        for start in starts:
            if start.node_id not in alive:
                raise TfcError(f"cannot start {start.name}: node {start.node_id[:12]} is not "
                               f"an alive node of the Ray cluster at {self.address}")
        handles: list[Any] = []
        for start in starts:
            remote = ray.remote(_answering(start.cls)).options(
                num_cpus=0, max_restarts=0, max_task_retries=0,
                max_concurrency=start.max_concurrency,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=start.node_id,
                                                                   soft=False))
            handles.append(remote.remote(*start.args, **start.kwargs))
            self._actors.append(handles[-1])
        refs = [h.tfc_node_id.remote() for h in handles]
        deadline = time.monotonic() + timeout_s
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=len(pending),
                                      timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                break
        try:
            for start, ref in zip(starts, refs):
                if ref in pending:
                    raise TfcError(f"{start.name} did not start on node {start.node_id[:12]} "
                                   f"within {timeout_s:g} s")
                try:
                    where = ray.get(ref, timeout=0)
                except ray.exceptions.RayError as e:
                    raise TfcError(f"{start.name} could not start on node "
                                   f"{start.node_id[:12]}: {_actor_failure(e)}") from None
                if where != start.node_id:  # hard affinity makes this impossible: checked
                    raise TfcError(f"{start.name} started on node {where[:12]}, not on "
                                   f"{start.node_id[:12]}")
        except TfcError:
            for handle in handles:
                self._kill(handle)
            raise
        return handles

    def _kill(self, handle: Any) -> None:
        with contextlib.suppress(Exception):
            self._ray.kill(handle, no_restart=True)
        with contextlib.suppress(ValueError):
            self._actors.remove(handle)

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Kill the actors this cluster started; the last RayCluster of the connection
        disconnects from Ray, and shuts the embedded Ray down if tfc started it. Idempotent."""
        global _CONNECTION
        with _CONNECTION_LOCK:
            connection, self._connection = self._connection, None
            if connection is None:
                return
            for handle in list(self._actors):
                self._kill(handle)
            connection.users -= 1
            if connection.users > 0 or _CONNECTION is not connection:
                return
            _CONNECTION = None
            if connection.tfc_connected:
                with contextlib.suppress(Exception):
                    self._ray.shutdown()
                _unroute_ray_messages()
            if connection.temp_dir:
                shutil.rmtree(connection.temp_dir, ignore_errors=True)

    def __enter__(self) -> "RayCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._connection is None:
            raise TfcError(f"the connection to the Ray cluster at {self.address} is closed")


def _shared_connection(ray: types.ModuleType, address: str) -> _Connection:
    """The connection this process has already, when it is to the cluster asked for."""
    current = _CONNECTION
    gcs = _current_gcs_address(ray)
    if current is None:  # the user called ray.init: tfc uses it but never shuts it down
        current = _Connection(address=gcs, gcs_address=gcs, started_ray=False,
                              tfc_connected=False)
    same = (address == "auto"
            or (address == "local" and current.started_ray)
            or (address not in ("local", "auto")
                and _parse_address(address) == _parse_address(current.gcs_address)))
    if not same:
        raise TfcError(f"this process is already connected to the Ray cluster at {gcs}; "
                       f"close the programs using it before connecting to {address}")
    return current


def _current_gcs_address(ray: types.ModuleType) -> str:
    node = ray._private.worker.global_worker.node
    return str(node.gcs_address)


def _start_local(ray: types.ModuleType) -> _Connection:
    """An embedded single-node Ray on 127.0.0.1 in its own temp dir, one CPU per core. Ray
    bounds its own start (it waits for the processes it launched)."""
    temp_dir = tempfile.mkdtemp(prefix="ray-tfc-", dir="/tmp")  # short: Ray's socket paths
    _refresh_authentication(ray)
    try:
        ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False,
                 dashboard_port=free_port(), _node_ip_address=LOOPBACK, _temp_dir=temp_dir,
                 logging_level="warning", log_to_driver=False)
    except Exception as e:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise TfcError(f"could not start a local Ray: {_first_line(e)}") from None
    return _Connection(address="local", gcs_address=_current_gcs_address(ray), started_ray=True,
                       tfc_connected=True, temp_dir=temp_dir)


def _join(ray: types.ModuleType, address: str, timeout_s: float) -> _Connection:
    limit_s, deadline = timeout_s, time.monotonic() + timeout_s
    if address == "auto":
        try:
            from ray._private.services import canonicalize_bootstrap_address_or_die
            gcs = canonicalize_bootstrap_address_or_die("auto")
        except Exception as e:  # Ray says why: none running, several running
            raise TfcError(f"cannot join a Ray cluster (--cluster auto): {_first_line(e)} "
                           f"(start one with `ray start --head`, or use --cluster local)") \
                from None
    else:
        host, port = _parse_address(address)
        gcs = f"{host}:{port}"
    _check_reachable(gcs, min(timeout_s, _PROBE_TIMEOUT_S))
    _refresh_authentication(ray)
    timeout_s = max(0.1, deadline - time.monotonic())
    # Ray retries the GCS once a second this many times before it gives up; the thread
    # below bounds the rest of its connect.
    saved = os.environ.get("RAY_gcs_server_port_wait_time_s")
    os.environ["RAY_gcs_server_port_wait_time_s"] = str(max(1, math.ceil(timeout_s)))
    try:
        joined = _bounded(lambda: ray.init(address=gcs, logging_level="warning",
                                           log_to_driver=False), ray, timeout_s)
    finally:
        if saved is None:
            os.environ.pop("RAY_gcs_server_port_wait_time_s", None)
        else:
            os.environ["RAY_gcs_server_port_wait_time_s"] = saved
    if joined is _TIMED_OUT:
        raise TfcError(f"could not join the Ray cluster at {address} within {limit_s:g} s")
    if isinstance(joined, BaseException):
        raise TfcError(f"cannot join the Ray cluster at {address}: {_first_line(joined)}")
    return _Connection(address=address, gcs_address=_current_gcs_address(ray),
                       started_ray=False, tfc_connected=True)


# Where Ray's own messages to this driver go instead of its stdout (a file in the Ray
# session's log folder): ``ray.init(log_to_driver=False)`` keeps the task processes' output
# in their logs, but the raylet's error messages ("(raylet) A worker died or was killed
# ...", one per dead task process) are printed by a thread of the driver that Ray starts
# unconditionally, through ``ray._private.worker.print_to_stdstream``; that function is
# replaced while tfc's connection lasts. tfc says what happened itself (its recovery line).
RAY_MESSAGES = "tfc-ray-messages.log"
_ROUTED: dict[str, Any] = {}  # the replaced function, while routed


def ray_messages_path(ray: types.ModuleType) -> Path:
    """The file Ray's messages to this driver are written to (``RAY_MESSAGES``)."""
    try:
        logs = Path(ray._private.worker.global_worker.node.get_logs_dir_path())
    except Exception:  # (no session folder known: the temp dir)
        logs = Path(tempfile.gettempdir())
    return logs / RAY_MESSAGES


def _route_ray_messages(ray: types.ModuleType) -> None:
    """Send what Ray's driver threads would print (``print_to_stdstream``) to
    ``ray_messages_path`` instead (idempotent; a Ray without that function: unchanged)."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    printer = getattr(worker, "print_to_stdstream", None)
    if worker is None or printer is None or "printer" in _ROUTED:
        return
    path = ray_messages_path(ray)

    def to_file(data: Any, ignore_prefix: bool = False, **_: Any) -> None:
        with contextlib.suppress(Exception):
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            source = data.get("pid", "")
            with open(path, "a", encoding="utf-8") as f:
                for line in data.get("lines", []):
                    f.write(f"{stamp} ({source}) {line}\n")

    _ROUTED.update(printer=printer, worker=worker)
    worker.print_to_stdstream = to_file


def _unroute_ray_messages() -> None:
    if "printer" in _ROUTED:
        _ROUTED["worker"].print_to_stdstream = _ROUTED.pop("printer")
        _ROUTED.clear()


def _refresh_authentication(ray: types.ModuleType) -> None:
    """Make Ray read the token settings (``RAY_AUTH_MODE``, ``RAY_AUTH_TOKEN_PATH``) from the
    environment as it is now: Ray caches them in-process, and a LoopbackCluster started after
    this process first used Ray sets them for the driver that joins it."""
    with contextlib.suppress(Exception):
        raylet = importlib.import_module("ray._raylet")
        raylet.Config.initialize("")
        raylet.AuthenticationTokenLoader.instance().reset_cache()


_TIMED_OUT = object()


def _bounded(start: Any, ray: types.ModuleType, timeout_s: float) -> Any:
    """``start()`` (a ``ray.init``) in a thread, waited for at most ``timeout_s``: its result,
    or the exception it raised, or ``_TIMED_OUT``; then the thread is left to finish, and
    disconnects what it connected."""
    outcome: list[Any] = []
    abandoned = False
    lock = threading.Lock()  # the caller gives up, or the thread finishes: one of the two first

    def run() -> None:
        try:
            result = start()
        except BaseException as e:  # handed to the caller
            result = e
        with lock:
            outcome.append(result)
            too_late = abandoned
        if too_late and not isinstance(result, BaseException):
            with contextlib.suppress(Exception):
                ray.shutdown()

    thread = threading.Thread(target=run, name="tfc: join a Ray cluster", daemon=True)
    # Ray warns from a thread that it leaves SIGTERM's handler alone: this process keeps the
    # default (exit), which is what a tfc driver wants.
    quiet = _DropMessage("SIGTERM handler is not set")
    worker_log = logging.getLogger("ray._private.worker")
    worker_log.addFilter(quiet)
    try:
        thread.start()
        thread.join(timeout_s)
    finally:
        worker_log.removeFilter(quiet)
    with lock:
        if not outcome:
            abandoned = True
            return _TIMED_OUT
        return outcome[0]


class _DropMessage(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def _actor_failure(error: BaseException) -> str:
    """The one line that says why an actor died: the exception its constructor raised when
    there is one (Ray wraps it with a traceback), else Ray's own first line."""
    cause = getattr(error, "cause", None) or getattr(error, "__cause__", None)
    for candidate in (cause, getattr(cause, "cause", None)):
        if isinstance(candidate, BaseException) and not type(candidate).__module__.startswith(
                "ray"):
            return f"{type(candidate).__name__}: {_first_line(candidate)}"
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    raised = [ln for ln in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception)\b.*:", ln)]
    return raised[-1] if raised else (lines[0] if lines else type(error).__name__)


def _answering(cls: type) -> type:
    """``cls`` with a ``tfc_node_id()`` method (the node the actor runs on): the round trip
    ``start_actor`` waits for, and where it checks the placement."""
    if "tfc_node_id" in vars(cls):
        return cls

    def tfc_node_id(self: Any) -> str:
        import ray
        return str(ray.get_runtime_context().get_node_id())

    return type(cls.__name__, (cls,), {"tfc_node_id": tfc_node_id, "tfc_kill": _tfc_kill,
                                       "__doc__": cls.__doc__,
                                       "__module__": cls.__module__})


def _tfc_kill(self: Any, signum: int = int(signal.SIGKILL)) -> None:
    """Send ``signum`` (SIGKILL: no clean-up, no exception) to the actor's own process: the
    failure injection of ``tfc.distributed.recovery``, which works wherever the task runs
    (its PID means nothing on the driver's host of a real cluster)."""
    os.kill(os.getpid(), signum)


# -- a real multi-node cluster on loopback ---------------------------------------------------
def _has_ray_client() -> bool:
    """Whether Ray's client extra (``ray[client]``) is installed: a head then serves Ray Client
    (on port 10001 unless told otherwise); without it, a port for it is an error."""
    try:
        utils = importlib.import_module("ray._private.utils")
        return utils.get_ray_client_dependency_error() is None
    except Exception:
        return False


@dataclass
class _Node:
    index: int
    process: subprocess.Popen
    log: Path


class LoopbackCluster:
    """A real multi-node Ray cluster on 127.0.0.1: a head and ``nodes - 1`` more nodes, each a
    ``ray start --block`` process of its own (``python -m tfc.distributed._node``) with one CPU
    and a resource ``{"hostI": 1}`` (I = 0 for the head), in its own temp dir, on free ports,
    with its own authentication token. For tests and benchmarks: each node is a separate
    raylet and object store, so tasks on different nodes talk as they would across hosts.

    ``start()`` brings the nodes up one at a time (two at once collide on a shared socket
    name) and returns when Ray reports them all alive; it also sets the token variables
    (``RAY_AUTH_MODE``, ``RAY_AUTH_TOKEN_PATH``) in this process, so that
    ``RayCluster.connect(cluster.address)`` here joins it; ``stop()`` restores them and
    SIGTERMs the node processes it started, by PID (never ``ray stop``, which would stop every
    Ray on the machine)."""

    def __init__(self, nodes: int = 3, *, temp_dir: str | None = None,
                 object_store_bytes: int = 400_000_000) -> None:
        if nodes < 1:
            raise TfcError(f"a loopback cluster needs at least one node, not {nodes}")
        self.node_count = nodes
        self.object_store_bytes = object_store_bytes
        self._given_temp_dir = temp_dir
        self.temp_dir: str | None = None
        self.address = ""
        self._nodes: list[_Node] = []
        self._saved_environment: dict[str, str | None] | None = None

    @property
    def pids(self) -> list[int]:
        """The PIDs of the node processes this cluster started (each the root of its node's
        process tree)."""
        return [node.process.pid for node in self._nodes]

    def start(self, timeout_s: float = 90.0) -> "LoopbackCluster":
        if self._nodes:
            raise TfcError("this loopback cluster is started already")
        deadline = time.monotonic() + timeout_s
        ray = require_ray()
        self.temp_dir = self._given_temp_dir or tempfile.mkdtemp(prefix="ray-tfc-", dir="/tmp")
        os.makedirs(self.temp_dir, exist_ok=True)
        port = free_port()
        self.address = f"{LOOPBACK}:{port}"
        token = Path(self.temp_dir) / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        self._export_environment({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
        _refresh_authentication(ray)
        atexit.register(self.stop)  # never leave node processes behind this one
        try:
            for index in range(self.node_count):
                self._nodes.append(self._launch(index, port))
                self._wait_alive(index + 1, deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _node_environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(RAY_ENVIRONMENT)
        # The nodes, and the actor processes they start, import this same tfc.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        return env

    def _launch(self, index: int, port: int) -> _Node:
        assert self.temp_dir is not None
        args = [sys.executable, "-m", "tfc.distributed._node", "start", "--block",
                f"--node-ip-address={LOOPBACK}", "--num-cpus=1",
                f"--resources={json.dumps({f'host{index}': 1})}",
                f"--object-store-memory={self.object_store_bytes}",
                f"--dashboard-agent-listen-port={free_port()}",
                "--include-log-monitor=false", "--disable-usage-stats"]
        if index == 0:
            args += ["--head", f"--port={port}", f"--temp-dir={self.temp_dir}",
                     "--include-dashboard=false", f"--dashboard-port={free_port()}"]
            if _has_ray_client():  # then Ray serves it, by default on the fixed port 10001
                args.append(f"--ray-client-server-port={free_port()}")
        else:
            args += [f"--address={self.address}"]
        log = Path(self.temp_dir) / f"node{index}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=self._node_environment(),
                                       start_new_session=True)
        return _Node(index, process, log)

    def _wait_alive(self, count: int, deadline: float) -> None:
        """Until Ray reports ``count`` alive nodes (asking the head's GCS directly: this process
        need not be a Ray driver), or a TfcError at the deadline or when a node exits."""
        gcs_client = importlib.import_module("ray._raylet").GcsClient
        alive_state = importlib.import_module(
            "ray.core.generated.gcs_pb2").GcsNodeInfo.GcsNodeState.ALIVE

        host, port = _parse_address(self.address)
        client = None
        last = ""
        while time.monotonic() < deadline:
            for node in self._nodes:
                if node.process.poll() is not None:
                    tail = node.log.read_text(errors="replace").strip().splitlines()[-1:]
                    raise TfcError(f"loopback Ray node {node.index} exited with status "
                                   f"{node.process.returncode}: "
                                   f"{tail[0] if tail else 'no output'} (log: {node.log})")
            try:
                if client is None:  # a GcsClient waits ~30 s for a port that is not open yet
                    with socket.create_connection((host, port), timeout=1.0):
                        pass
                    client = gcs_client(address=self.address)
                alive = client.get_all_node_info(timeout=2, state_filter=alive_state)
                if len(alive) >= count:
                    return
            except Exception as e:  # not up yet
                last = _first_line(e)
            time.sleep(0.1)
        raise TfcError(f"loopback Ray cluster at {self.address}: {count} node(s) not alive "
                       f"in time ({last or 'still starting'}; logs in {self.temp_dir})")

    def _export_environment(self, values: dict[str, str]) -> None:
        self._saved_environment = {key: os.environ.get(key) for key in values}
        os.environ.update(values)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM each node process this cluster started (last first), by PID; each takes its
        node's process tree down. A node that outlives ``timeout_s`` is killed with its process
        group (its own session, created at launch). Idempotent."""
        nodes, self._nodes = self._nodes, []
        atexit.unregister(self.stop)
        for node in reversed(nodes):
            if node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node in nodes:
            try:
                node.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait(5)
        for node in nodes:  # what a node left behind in its own process group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(node.process.pid, signal.SIGKILL)
        if self._saved_environment is not None:
            for key, value in self._saved_environment.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            self._saved_environment = None
            if "ray" in sys.modules:
                _refresh_authentication(sys.modules["ray"])
        if self.temp_dir and not self._given_temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> "LoopbackCluster":
        return self.start() if not self._nodes else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
