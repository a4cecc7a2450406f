"""Tensors between a cluster's processes over plain TCP: what a step's values travel on,
and how the driver launches a step.

Ray stays the cluster's control plane for what is not per step (starting the tasks,
their health, reporting a process that died); a step's launch, the values it moves (a
task's sends to another task, the driver's feeds) and its fetches go over a TCP
connection per (sender, receiving task) instead of Ray's actor calls and object store.
Measured between two nodes of the loopback cluster (2-core host,
``tools/bench_cluster.py --parts link``): an actor call carrying a scalar 0.8 ms against
0.04 ms on a socket; 1 MiB through the object store (``ray.put``, a call, ``ray.get`` on
the other node) 9.6 ms against 0.3 ms on a socket, 4 MiB 14.7 ms against 1.3 ms. gloo,
which PyTorch DDP uses, is plain TCP too. A Ray call's dispatch also varies by a few ms
on a loaded host, and a step waits for its slowest launch: a frame per task written back
to back starts the tasks of a step together.

A frame is one step's values for one receiving task: a fixed header (the lengths), a JSON
header (the step id; each value's rendezvous keys, dtype and shape), then each value's
bytes. The receiver reads each value straight into an array of its own (aligned, as
the stages' kernels want it) and hands the frame to a callback, the task's rendezvous of
that step (which drops a value whose step is over: ``tfc.distributed.task``). A value
may be a window of rows of a larger array (a worker's shard of the global batch: the
driver sends only those rows); the receiver puts it at its rows of an array of the whole
shape, the other rows zero.

A frame whose JSON header has a ``call`` (a step's launch, ``Link.call``) goes to the
listener's ``calls`` handler instead, which answers with a frame (its ``reply`` and
values) on the same connection; the caller reads it with ``Link.receive``.

Where a connection cannot be made (another host's port not reachable), the sender says
so (``Link.open`` returns None) and the caller keeps using Ray for that peer.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from typing import Any, Callable, Sequence, Union

import numpy as np

from tfc.distributed import steptrace
from tfc.errors import ExecutionError

_PREFIX = struct.Struct("<4sQQ")  # magic, JSON header bytes, value bytes in all
_MAGIC = b"tfcw"

# a frame's values as read: (rendezvous keys, array)
Items = list[tuple[list[str], np.ndarray]]
# (step id, [(keys, array)]) -> None: what a listener does with each frame it reads
FrameHandler = Callable[[int, Items], None]
# (the frame's JSON header, its values) -> (the reply's JSON, the reply's values): a call
CallHandler = Callable[[dict[str, Any], Items], tuple[dict[str, Any], "Sequence[Outgoing]"]]
# a value to send: (keys, array), or (keys, rows of an array, (its rows, the first one's))
Outgoing = Union[tuple[list[str], np.ndarray],
                 tuple[list[str], np.ndarray, tuple[int, int]]]
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


def _checked_window(window: object, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """A value's place in a larger array (its rows, the value's first row), or None; a
    ValueError when the value's rows do not fit there."""
    if window is None:
        return None
    if (not isinstance(window, list) or len(window) != 2 or not shape
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                       for d in window) or window[1] + shape[0] > window[0]):
        raise ValueError(f"a wire frame's value of shape {shape} has the rows {window!r}")
    return window[0], window[1]


def _recv_exactly(sock: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` from ``sock``; False when the peer closed the connection first."""
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            return False
        got += k
    return True


def read_frame(sock: socket.socket, writeable: bool = False
               ) -> tuple[dict[str, Any], Items] | None:
    """The next frame on ``sock``: its JSON header and its values (read-only arrays unless
    ``writeable``); None when the peer closed the connection. A ValueError (or a
    TypeError, KeyError) when the frame is not one of ours, an OSError from the socket."""
    prefix = bytearray(_PREFIX.size)
    if not _recv_exactly(sock, memoryview(prefix)):
        return None
    magic, header_bytes, value_bytes = _PREFIX.unpack(prefix)
    if magic != _MAGIC or header_bytes > _MAX_HEADER_BYTES:
        raise ValueError("not a tfc wire frame")
    header = bytearray(header_bytes)
    if not _recv_exactly(sock, memoryview(header)):
        return None
    meta = json.loads(header)
    values = []
    for keys, dtype, shape, *window in meta["values"]:
        checked = _checked_shape(shape)
        values.append((keys, _checked_dtype(dtype), checked,
                       _checked_window(window[0] if window else None, checked)))
    if sum(int(np.prod(shape)) * dtype.itemsize
           for _, dtype, shape, _ in values) != value_bytes:
        raise ValueError("a wire frame's header and length disagree")
    items: Items = []
    for keys, dtype, shape, window in values:
        if window is None:
            array = part = np.empty(shape, dtype=dtype)
        else:  # rows of a larger array: the rest of it zero
            rows, first = window
            array = np.zeros((rows, *shape[1:]), dtype=dtype)
            part = array[first:first + shape[0]]
        if part.nbytes and not _recv_exactly(sock, part.reshape(-1).view(np.uint8).data):
            return None
        array.flags.writeable = writeable
        items.append((keys, array))
    return meta, items


def _send_frame(sock: socket.socket, header: dict[str, Any], values: Sequence[Outgoing]
                ) -> int:
    """Write one frame (``header`` and the values' list in its JSON); the values' bytes."""
    arrays = [np.require(v[1], requirements="C") for v in values]
    header = dict(header, values=[
        [list(v[0]), a.dtype.str, list(a.shape), *([list(v[2])] if len(v) > 2 else [])]
        for v, a in zip(values, arrays)])
    encoded = json.dumps(header, separators=(",", ":")).encode()
    total = sum(a.nbytes for a in arrays)
    sock.sendall(_PREFIX.pack(_MAGIC, len(encoded), total) + encoded)
    for a in arrays:
        if a.nbytes:
            sock.sendall(a.reshape(-1).view(np.uint8).data)
    return total


class Listener:
    """A TCP server on ``host`` (an ephemeral port): one thread per accepted connection
    reads its frames and passes each to ``handler``, or, for a frame with a ``call``, to
    ``calls``, whose answer goes back on that connection (within ``send_timeout_s``).
    The threads are daemons; ``close`` stops accepting and closes the connections."""

    def __init__(self, host: str, handler: FrameHandler, calls: CallHandler | None = None,
                 send_timeout_s: float = 120.0) -> None:
        self.handler = handler
        self.calls = calls
        self.send_timeout_s = send_timeout_s
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
            # (a reply's send is bounded; the reads wait for the next frame as long as
            # the connection lives)
            seconds = int(self.send_timeout_s)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack(
                "ll", seconds, int((self.send_timeout_s - seconds) * 1e6)))
            threading.Thread(target=self._read, args=(conn,), name="tfc-wire-read",
                             daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        try:
            while True:
                frame = read_frame(conn)
                if frame is None:
                    return
                meta, items = frame
                if steptrace.ENABLED:
                    steptrace.mark(int(meta["step"]), "rx call" if "call" in meta else
                                   f"rx {items[0][0][0] if items else '-'}")
                if "call" in meta and self.calls is not None:
                    self._answer(conn, meta, items)
                else:
                    self.handler(int(meta["step"]), items)
        except (OSError, ValueError, TypeError, KeyError, MemoryError):
            return  # the peer went away (or sent garbage): its step fails on its own side
        finally:
            conn.close()

    def _answer(self, conn: socket.socket, meta: dict[str, Any], items: Items) -> None:
        """Run a call and send its reply back (its error as the reply when it raised)."""
        assert self.calls is not None
        try:
            reply, values = self.calls(meta, items)
        except Exception as e:  # the caller gets it as the call's error, not a timeout
            reply, values = {"error": f"{type(e).__name__}: {e}"}, []
        _send_frame(conn, {"step": meta["step"], "reply": reply}, values)
        if steptrace.ENABLED:
            steptrace.mark(int(meta["step"]), "tx reply")

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
    """A connection to one peer's ``Listener``; ``send`` and ``call`` may be called from
    several threads (one frame at a time goes out); one thread reads the replies."""

    def __init__(self, sock: socket.socket, peer: str, timeout_s: float) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self.peer = peer
        self.timeout_s = timeout_s
        self.broken: str | None = None
        self.lost = False  # the connection failed or the peer closed it: its process is gone

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

    def fileno(self) -> int:
        """The socket's descriptor (for ``selectors``: a reply is ready to read)."""
        return self._sock.fileno()

    def send(self, step_id: int, values: Sequence[Outgoing]) -> int:
        """Send ``values`` (each with its rendezvous keys) for step ``step_id``; the bytes
        of the values. An ``ExecutionError`` naming the peer when the connection fails
        or the peer takes nothing within the timeout."""
        return self._frame({"step": step_id}, values)

    def call(self, step_id: int, call: dict[str, Any], values: Sequence[Outgoing]) -> int:
        """Send a call (``call``, plain JSON, and ``values``) for step ``step_id``: the
        peer's ``calls`` handler answers with a frame that ``receive`` reads. Errors as
        ``send``'s."""
        return self._frame({"step": step_id, "call": call}, values)

    def _frame(self, header: dict[str, Any], values: Sequence[Outgoing]) -> int:
        with self._lock:
            if self.broken is not None:
                raise ExecutionError(f"the connection to {self.peer} is broken ({self.broken})")
            try:
                sent = _send_frame(self._sock, header, values)
                if steptrace.ENABLED:
                    steptrace.mark(int(header["step"]), f"tx {self.peer}")
                return sent
            except socket.timeout:
                self.broken = f"it took nothing within {self.timeout_s:g} s"
                raise ExecutionError(f"{self.peer} took nothing sent to it within "
                                     f"{self.timeout_s:g} s") from None
            except OSError as e:
                self.broken = str(e) or type(e).__name__
                self.lost = True
                raise ExecutionError(f"the connection to {self.peer} failed: "
                                     f"{self.broken}") from None

    def receive(self) -> tuple[dict[str, Any], Items] | None:
        """The next frame the peer sent back (a call's reply; writeable arrays), waiting at
        most the timeout for each part of it; None when the peer closed the connection
        (its process exited). An ``ExecutionError`` naming the peer on a timeout or a
        frame that is not one of ours."""
        try:
            frame = read_frame(self._sock, writeable=True)
        except socket.timeout:
            self.broken = f"a reply took longer than {self.timeout_s:g} s"
            raise ExecutionError(f"{self.peer} did not finish its reply within "
                                 f"{self.timeout_s:g} s") from None
        except (ValueError, TypeError, KeyError) as e:
            self.broken = f"it sent a frame that is not tfc's ({e})"
            raise ExecutionError(f"{self.peer} {self.broken}") from None
        except OSError as e:  # reset: the peer's process is gone
            self.broken = str(e) or type(e).__name__
            self.lost = True
            return None
        if frame is None:
            self.broken = "closed by the peer"
            self.lost = True
        elif steptrace.ENABLED:
            steptrace.mark(int(frame[0].get("step", -1)), f"rx reply {self.peer}")
        return frame

    def close(self) -> None:
        with self._lock:
            self.broken = self.broken or "closed"
            try:
                self._sock.close()
            except OSError:
                pass
