"""Tensors between a cluster's processes over plain TCP: what a step's values travel on.

Ray stays the cluster's control plane (starting the tasks, launching each step, reporting
failures); the tensors a step moves (a task's sends to another task, the driver's feeds)
go over a TCP connection per (sender, receiving task) instead of Ray's actor calls and
object store. Measured between two nodes of the loopback cluster (2-core host,
``tools/bench_cluster.py --parts link``): an actor call carrying a scalar 0.8 ms against
0.04 ms on a socket; 1 MiB through the object store (``ray.put``, a call, ``ray.get`` on
the other node) 9.6 ms against 0.3 ms on a socket, 4 MiB 14.7 ms against 1.3 ms. gloo,
which PyTorch DDP uses, is plain TCP too.

A frame is one step's values for one receiving task: a fixed header (the lengths), a JSON
header (the step id; each value's rendezvous keys, dtype and shape), then each value's
bytes. The receiver reads each value straight into an array of its own (aligned, as
the stages' kernels want it) and hands the frame to a callback, the task's rendezvous of
that step (which drops a value whose step is over: ``tfc.distributed.task``).

Where a connection cannot be made (another host's port not reachable), the sender says
so (``Link.open`` returns None) and the caller keeps using Ray for that peer.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from typing import Callable, Sequence

import numpy as np

from tfc.errors import ExecutionError

_PREFIX = struct.Struct("<4sQQ")  # magic, JSON header bytes, value bytes in all
_MAGIC = b"tfcw"

# (step id, [(keys, array)]) -> None: what a listener does with each frame it reads
FrameHandler = Callable[[int, list[tuple[list[str], np.ndarray]]], None]
# A frame's JSON header lists a step's values: far below this for any real step.
_MAX_HEADER_BYTES = 16 << 20


def _checked_dtype(name: object) -> np.dtype:
    """A value's dtype from a frame's header: plain numbers only (never ``object``, whose
    elements would be pointers read off the wire), else ValueError."""
    dtype = np.dtype(str(name))
    if dtype.kind not in "biufc" or dtype.hasobject:
        raise ValueError(f"a wire frame's value has dtype {dtype}")
    return dtype


def _checked_shape(shape: object) -> tuple[int, ...]:
    """A value's shape from a frame's header: non-negative ints, else ValueError."""
    if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ValueError(f"a wire frame's value has shape {shape!r}")
    return tuple(shape)


def _recv_exactly(sock: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` from ``sock``; False when the peer closed the connection first."""
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            return False
        got += k
    return True


class Listener:
    """A TCP server on ``host`` (an ephemeral port): one thread per accepted connection
    reads its frames and passes each to ``handler``. The threads are daemons; ``close``
    stops accepting and closes the connections."""

    def __init__(self, host: str, handler: FrameHandler) -> None:
        self.handler = handler
        self._server = socket.create_server((host, 0))
        self.address: tuple[str, int] = (host, self._server.getsockname()[1])
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, name="tfc-wire-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self._server.accept()
            except OSError:  # closed
                return
            with self._lock:
                if self.closed:
                    conn.close()
                    return
                self._connections.append(conn)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._read, args=(conn,), name="tfc-wire-read",
                             daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        prefix = bytearray(_PREFIX.size)
        try:
            while _recv_exactly(conn, memoryview(prefix)):
                magic, header_bytes, value_bytes = _PREFIX.unpack(prefix)
                if magic != _MAGIC or header_bytes > _MAX_HEADER_BYTES:
                    return  # not one of ours: drop the connection
                header = bytearray(header_bytes)
                if not _recv_exactly(conn, memoryview(header)):
                    return
                meta = json.loads(header)
                values = [(keys, _checked_dtype(dtype), _checked_shape(shape))
                          for keys, dtype, shape in meta["values"]]
                if sum(int(np.prod(shape)) * dtype.itemsize
                       for _, dtype, shape in values) != value_bytes:
                    return  # the header and the frame's length disagree: not one of ours
                items: list[tuple[list[str], np.ndarray]] = []
                for keys, dtype, shape in values:
                    array = np.empty(shape, dtype=dtype)
                    if array.nbytes and not _recv_exactly(
                            conn, array.reshape(-1).view(np.uint8).data):
                        return
                    array.flags.writeable = False
                    items.append((keys, array))
                self.handler(int(meta["step"]), items)
        except (OSError, ValueError, TypeError, KeyError, MemoryError):
            return  # the peer went away (or sent garbage): its step fails on its own side
        finally:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self.closed = True
        try:  # (wakes the accepting thread: a plain close leaves it accepting on Linux)
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.close()
        with self._lock:
            for conn in self._connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()


class Link:
    """A connection to one peer's ``Listener``; ``send`` may be called from several
    threads (one frame at a time goes out)."""

    def __init__(self, sock: socket.socket, peer: str, timeout_s: float) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self.peer = peer
        self.timeout_s = timeout_s
        self.broken: str | None = None

    @classmethod
    def open(cls, address: Sequence[object], peer: str, timeout_s: float,
             connect_timeout_s: float = 5.0) -> "Link | None":
        """A link to ``address`` (host, port), or None when it cannot be reached within
        ``connect_timeout_s`` (the caller then goes through Ray)."""
        host, port = str(address[0]), int(address[1])  # type: ignore[call-overload]
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        except OSError:
            return None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(timeout_s)  # every send is bounded
        return cls(sock, peer, timeout_s)

    def send(self, step_id: int, values: Sequence[tuple[list[str], np.ndarray]]) -> int:
        """Send ``values`` (each with its rendezvous keys) for step ``step_id``; the bytes
        of the values. An ``ExecutionError`` naming the peer when the connection fails
        or the peer takes nothing within the timeout."""
        arrays = [np.require(v, requirements="C") for _, v in values]
        header = json.dumps({"step": step_id, "values": [
            [list(keys), a.dtype.str, list(a.shape)] for (keys, _), a in zip(values, arrays)]},
            separators=(",", ":")).encode()
        total = sum(a.nbytes for a in arrays)
        with self._lock:
            if self.broken is not None:
                raise ExecutionError(f"the connection to {self.peer} is broken ({self.broken})")
            try:
                self._sock.sendall(_PREFIX.pack(_MAGIC, len(header), total) + header)
                for a in arrays:
                    if a.nbytes:
                        self._sock.sendall(a.reshape(-1).view(np.uint8).data)
            except socket.timeout:
                self.broken = f"it took nothing within {self.timeout_s:g} s"
                raise ExecutionError(f"{self.peer} took nothing sent to it within "
                                     f"{self.timeout_s:g} s") from None
            except OSError as e:
                self.broken = str(e) or type(e).__name__
                raise ExecutionError(f"the connection to {self.peer} failed: "
                                     f"{self.broken}") from None
        return total

    def close(self) -> None:
        with self._lock:
            self.broken = self.broken or "closed"
            try:
                self._sock.close()
            except OSError:
                pass
