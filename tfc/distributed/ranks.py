"""A group of ranks for users who bring their own training loop (the Horovod model): ``run``
starts one process per rank on a Ray cluster and runs the user's function in each; inside
it, the ranks talk through collectives (ring all-reduce, broadcast, all-gather) sent rank
to rank through Ray's object store (no torch/gloo: ``ray.util.collective`` needs them).

Each rank is a ``RankActor`` (``max_concurrency`` > 1: the thread that runs the user's
function waits in a collective while other threads of the actor take the peers' chunks).
Every message carries the collective's sequence number (each rank counts the collectives
it called, so ranks calling them in the same order, as Horovod requires, agree) and a tag
(the phase and the ring step), so two collectives never mix; every wait has a timeout, and
a rank that fails makes ``run`` tell the others to abort: their waiting collectives raise.

Outside ``run`` (a plain script) the group is one rank: size 1, rank 0, and every
collective returns its input (Horovod's behaviour without ``horovodrun``).

Ray is imported only when ``run`` or a collective of a group of several ranks needs it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from tfc.errors import ExecutionError, TfcError

DEFAULT_TIMEOUT_S = 120.0
# chunks of at least this many bytes travel as object-store references (zero-copy at the
# receiver); smaller ones by value in the call's message
BY_REFERENCE_BYTES = 64 * 1024
# the thread-count settings a rank's process gets (its share of its host's cores)
THREAD_VARIABLES = ("TFC_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                    "MKL_NUM_THREADS")


class CollectiveError(ExecutionError):
    """A collective could not finish: a peer failed or did not answer in time."""


@dataclass
class _Mailbox:
    """Chunks the peers sent to this rank, by (sequence number, tag), until taken."""

    timeout_s: float
    items: dict[tuple[int, str], np.ndarray] = field(default_factory=dict)
    aborted: str | None = None
    ready: threading.Condition = field(default_factory=threading.Condition)

    def put(self, seq: int, tag: str, value: np.ndarray) -> None:
        with self.ready:
            self.items[(seq, tag)] = value
            self.ready.notify_all()

    def take(self, seq: int, tag: str, what: str) -> np.ndarray:
        deadline = time.monotonic() + self.timeout_s
        with self.ready:
            while (seq, tag) not in self.items:
                if self.aborted is not None:
                    raise CollectiveError(f"{what} aborted: {self.aborted}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CollectiveError(f"{what}: no message from the peer within "
                                          f"{self.timeout_s:g} s")
                self.ready.wait(left)
            return self.items.pop((seq, tag))

    def abort(self, message: str) -> None:
        with self.ready:
            self.aborted = message
            self.ready.notify_all()


class Group:
    """This process's view of its group of ranks: its rank, the size, the peers' actor
    handles, and the collectives over them."""

    def __init__(self, rank: int, size: int, local_rank: int = 0, local_size: int = 1,
                 peers: Sequence[Any] = (), timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.rank, self.size = rank, size
        self.local_rank, self.local_size = local_rank, local_size
        self.peers = list(peers)  # actor handles by rank (this rank's own included)
        self.mailbox = _Mailbox(timeout_s)
        self._seq = 0
        self._sent: list[Any] = []  # this collective's deliveries (their refs)
        self.bytes_sent = 0  # what this rank sent to peers, all collectives together

    # ---- messages --------------------------------------------------------------------------

    def _send(self, to: int, seq: int, tag: str, value: np.ndarray) -> None:
        import ray
        a = np.ascontiguousarray(value)
        # a top-level ObjectRef argument reaches the peer's method as the array (zero-copy)
        message = ray.put(a) if a.nbytes >= BY_REFERENCE_BYTES else a
        self._sent.append(self.peers[to].tfc_deliver.remote(seq, tag, message))
        self.bytes_sent += a.nbytes

    def _finish(self, what: str) -> None:
        """Wait until every message of this collective reached its rank (bounded)."""
        import ray
        refs, self._sent = self._sent, []
        if not refs:
            return
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.mailbox.timeout_s)
        if len(ready) < len(refs):
            raise CollectiveError(f"{what}: a peer did not take its message within "
                                  f"{self.mailbox.timeout_s:g} s")
        try:
            ray.get(refs)
        except Exception as e:
            raise CollectiveError(f"{what}: a peer failed ({type(e).__name__})") from None

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    # ---- collectives -----------------------------------------------------------------------

    def allreduce(self, array: Any, average: bool = True) -> np.ndarray:
        """The sum (``average``: the mean) of ``array`` over the ranks, by a ring: a
        reduce-scatter then an all-gather, each of ``size - 1`` steps over ``size``
        chunks, so each rank sends ``2 (size-1)/size`` of the array. Each chunk is summed
        (and divided) on one rank only and then copied, so every rank gets bitwise the
        same result. Integer arrays are summed exactly; their mean is floor-divided."""
        a = np.asarray(array)
        if self.size == 1:
            return a.copy()
        n, r = self.size, self.rank
        what = f"rank {r}: allreduce #{self._seq + 1}"
        seq = self._next()
        flat = a.reshape(-1)
        bounds = np.linspace(0, flat.size, n + 1).round().astype(int)
        chunks = [flat[bounds[i]:bounds[i + 1]].copy() for i in range(n)]
        right = (r + 1) % n
        try:
            for s in range(n - 1):  # reduce-scatter: chunk (r-s) goes right, (r-s-1) comes
                self._send(right, seq, f"rs{s}", chunks[(r - s) % n])
                c = (r - s - 1) % n
                chunks[c] = self.mailbox.take(seq, f"rs{s}", what) + chunks[c]
            own = (r + 1) % n  # this rank now holds the whole sum of chunk r+1
            if average:
                chunks[own] = (chunks[own] // n if chunks[own].dtype.kind in "iub"
                               else chunks[own] / np.asarray(n, chunks[own].dtype))
            for s in range(n - 1):  # all-gather: the finished chunks go round once
                self._send(right, seq, f"ag{s}", chunks[(r + 1 - s) % n])
                c = (r - s) % n
                chunks[c] = self.mailbox.take(seq, f"ag{s}", what)
            self._finish(what)
        except BaseException:
            self._sent = []
            raise
        out = np.concatenate(chunks) if chunks else flat.copy()
        return out.astype(a.dtype, copy=False).reshape(a.shape)

    def broadcast(self, array: Any, root: int = 0) -> np.ndarray:
        """``root``'s ``array`` on every rank (a copy, writable)."""
        self._check_root(root)
        a = np.asarray(array)
        if self.size == 1:
            return a.copy()
        what = f"rank {self.rank}: broadcast #{self._seq + 1} from rank {root}"
        seq = self._next()
        if self.rank == root:
            for to in range(self.size):
                if to != root:
                    self._send(to, seq, "bc", a)
            self._finish(what)
            return a.copy()
        return np.array(self.mailbox.take(seq, "bc", what))

    def allgather(self, array: Any) -> np.ndarray:
        """The ranks' arrays concatenated along the first axis, in rank order."""
        a = np.atleast_1d(np.asarray(array))
        if self.size == 1:
            return a.copy()
        what = f"rank {self.rank}: allgather #{self._seq + 1}"
        seq = self._next()
        for to in range(self.size):
            if to != self.rank:
                self._send(to, seq, f"from{self.rank}", a)
        parts = [a if i == self.rank else self.mailbox.take(seq, f"from{i}", what)
                 for i in range(self.size)]
        self._finish(what)
        return np.concatenate(parts)

    def _check_root(self, root: int) -> None:
        if not 0 <= root < self.size:
            raise TfcError(f"root rank {root} is not a rank of this group of {self.size}")


_GROUP: Group | None = None  # this process's group: set in a rank, else made by init()
_GROUP_LOCK = threading.Lock()


def current_group() -> Group:
    """This process's group: the one ``run`` set up in a rank, else a group of one."""
    global _GROUP
    with _GROUP_LOCK:
        if _GROUP is None:
            _GROUP = Group(rank=0, size=1)
        return _GROUP


class RankActor:
    """One rank's process: it holds the group, takes the peers' messages and runs the
    user's function (``run`` wraps it with ``ray.remote``)."""

    def __init__(self, rank: int, size: int, local_rank: int, local_size: int,
                 cores: int, timeout_s: float) -> None:
        # this rank's share of its host's cores, before any library reads the settings
        for name in THREAD_VARIABLES:
            os.environ[name] = str(cores)
        self.cores = cores
        global _GROUP
        with _GROUP_LOCK:
            _GROUP = Group(rank, size, local_rank, local_size, timeout_s=timeout_s)
        self.group = _GROUP

    def connect(self, peers: Sequence[Any]) -> dict[str, Any]:
        import ray
        self.group.peers = list(peers)
        return {"rank": self.group.rank, "pid": os.getpid(), "cores": self.cores,
                "node_id": ray.get_runtime_context().get_node_id()}

    def tfc_deliver(self, seq: int, tag: str, value: np.ndarray) -> None:
        self.group.mailbox.put(seq, tag, value)

    def abort(self, message: str) -> None:
        self.group.mailbox.abort(message)

    def call(self, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
        with _blas_share(self.cores):
            return fn(*args)


@contextlib.contextmanager
def _blas_share(cores: int) -> Iterator[None]:
    """The llvm backend's OpenBLAS on this rank's share of the cores while ``fn`` runs
    (its pool may have been loaded before the environment said so)."""
    from tfc.backends.base import default_backend_name, get_backend
    from tfc.runtime.executor import blas_limited
    try:
        backend = get_backend(default_backend_name())
    except TfcError:
        yield
        return
    with blas_limited(backend, cores):
        yield


def run(fn: Callable[..., Any], np: int = 2, cluster: str = "local", args: Sequence[Any] = (),
        timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Any]:
    """Run ``fn(*args)`` on ``np`` ranks (one process each, on distinct Ray nodes while there
    are enough, as ``horovodrun -np`` / ``horovod.ray.RayExecutor``) of the Ray cluster
    ``cluster`` ("local" | "auto" | "HOST:PORT"); the ranks' return values, in rank order.

    ``fn`` is shipped as Ray ships functions (this is user code run on the user's cluster).
    Inside it, ``tfc.distributed.rank()``, ``size()`` and the collectives work on the group.
    A rank that raises or dies fails ``run`` with one ``ExecutionError`` naming the rank,
    within ``timeout_s``; the other ranks are told to abort (their waiting collectives raise)
    and every rank's process is stopped. The ranks of one host share its cores: each gets
    ``cpu_count() // ranks_on_host`` threads for tfc's kernels and BLAS."""
    from tfc.devices import cpu_count
    from tfc.distributed.cluster import RayCluster, require_ray
    if np < 1:
        raise TfcError(f"tfc.distributed.run: np must be at least 1, not {np}")
    with RayCluster.connect(cluster, timeout_s=min(timeout_s, 30.0)) as ray_cluster:
        ray = require_ray()
        nodes = ray_cluster.spread(np)
        host = {n.node_id: n.ip for n in ray_cluster.nodes}
        on_host = Counter(host[n] for n in nodes)
        seen: Counter[str] = Counter()
        actors = []
        for rank, node in enumerate(nodes):
            local_rank = seen[host[node]]
            seen[host[node]] += 1
            cores = max(1, cpu_count() // on_host[host[node]])
            actors.append(ray_cluster.start_actor(
                RankActor, rank, np, local_rank, on_host[host[node]], cores, timeout_s,
                node_id=node, name=f"rank {rank}", max_concurrency=4, timeout_s=timeout_s))
        _wait_all(ray, [a.connect.remote(actors) for a in actors], actors, "connect",
                  timeout_s)
        return _wait_all(ray, [a.call.remote(fn, tuple(args)) for a in actors], actors,
                         "run", timeout_s)


def _wait_all(ray: Any, refs: list[Any], actors: list[Any], what: str,
              timeout_s: float) -> list[Any]:
    """Each rank's result, in rank order; the first failure (or the timeout) is one
    ``ExecutionError`` naming the rank, after the others were told to abort and given a
    bounded time to end."""
    rank_of = {r: i for i, r in enumerate(refs)}
    results: list[Any] = [None] * len(refs)
    pending = list(refs)
    deadline = time.monotonic() + timeout_s
    while pending:
        ready, pending = ray.wait(pending, num_returns=1,
                                  timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            late = ", ".join(str(rank_of[r]) for r in pending)
            message = f"rank {late} did not {what} within {timeout_s:g} s"
            _abort(ray, actors, pending, message)
            raise ExecutionError(message)
        rank = rank_of[ready[0]]
        try:
            results[rank] = ray.get(ready[0])
        except Exception as e:
            message = _failure(ray, rank, what, e)
            _abort(ray, actors, pending, message)
            raise ExecutionError(message) from None
    return results


def _abort(ray: Any, actors: list[Any], pending: list[Any], message: str) -> None:
    for actor in actors:
        with contextlib.suppress(Exception):
            actor.abort.remote(message)
    if pending:  # the others end once their collectives raise (bounded: then killed)
        ray.wait(pending, num_returns=len(pending), timeout=10.0)


def _failure(ray: Any, rank: int, what: str, e: Exception) -> str:
    """One line saying why ``rank`` failed."""
    if isinstance(e, ray.exceptions.ActorDiedError) or isinstance(
            e, getattr(ray.exceptions, "ActorUnavailableError", ())):
        return f"rank {rank} died (its process exited) and could not {what}"
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        message = getattr(cause, "message", None) or str(cause).strip()
        lines = str(message).splitlines()
        return f"rank {rank} failed: {type(cause).__name__}: {lines[0] if lines else ''}"
    lines = str(e).strip().splitlines()
    return f"rank {rank} failed: {lines[-1] if lines else type(e).__name__}"
