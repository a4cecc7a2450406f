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

A frame is one step's values for one receiving task: a fixed header (the lengths, the
step id and, for a step's launch, the program step), a JSON header (each value's
rendezvous keys, dtype and shape; a call's or a reply's plain fields), then each value's
bytes. The JSON header of a sender's frames is the same from step to step (what changes
per step is in the fixed header and the values), so each end does its JSON once: a
sender keeps the encoded header of each kind of frame it sends, a receiver the checked
plan (the arrays to make) of each header it has read. The receiver reads each value
straight into an array of its own (aligned, as the stages' kernels want it) and hands
the frame to a callback, the task's rendezvous of that step (which drops a value whose
step is over: ``tfc.distributed.task``). A value may be a window of rows of a larger
array (a worker's shard of the global batch: the driver sends only those rows); the
receiver puts it at its rows of an array of the whole shape, the other rows zero.

A frame whose JSON header has a ``call`` (a step's launch, ``Link.call``) goes to the
listener's ``calls`` handler instead, which answers with a frame (its ``reply`` and
values) on the same connection; the caller reads it with ``Link.receive``.

Who reads: a task's listener has one thread, which runs the launches (the task's part of
the step) and, between them, reads every connection (``Listener.pump``); while the step
waits for a peer's value, that same thread reads the sockets (the step's ``Rendezvous``
pumps), so a value costs its receiver one wake-up and no hand-off between threads (a
thread per connection that woke the step's thread: 54 thread wake-ups per null step at
4 workers, 23 now; ``tools/bench_cluster.py`` counts them). A frame of up to 64 KiB goes
out in one ``send``. A send that the peer does not take (its buffers full) reads what
comes to its own task meanwhile (``Link`` with ``pump``), so two tasks sending each
other large frames both go on.

Where a connection cannot be made (another host's port not reachable), the sender says
so (``Link.open`` returns None) and the caller keeps using Ray for that peer.
"""

from __future__ import annotations

import collections
import json
import select
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

import numpy as np

from tfc.distributed import steptrace
from tfc.errors import ExecutionError

# magic, JSON header bytes, value bytes in all, step id, the program step of a call
_PREFIX = struct.Struct("<4sQQqq")
_MAGIC = b"tfc2"

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


# How many distinct JSON headers a connection's reader keeps the plans of (a sender's
# frames repeat a few: one per kind of frame; past this the cache starts over)
_CACHED_HEADERS = 64


@dataclass(frozen=True)
class _Plan:
    """A frame's JSON header, read and checked once: its fields (``meta``: not the values'
    list) and each value's keys, dtype, shape, rows window and bytes, their sum."""

    meta: dict[str, Any]
    values: list[tuple[list[str], np.dtype, tuple[int, ...], tuple[int, int] | None, int]]
    value_bytes: int


def _read_plan(header: bytes) -> _Plan:
    """The plan of a frame's JSON header; a ValueError (TypeError, KeyError) when it is
    not one of ours."""
    meta = json.loads(header)
    values = []
    for keys, dtype, shape, *window in meta.pop("values"):
        checked = _checked_shape(shape)
        dtype = _checked_dtype(dtype)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"a wire frame's value has the keys {keys!r}")
        values.append((keys, dtype, checked,
                       _checked_window(window[0] if window else None, checked),
                       int(np.prod(checked)) * dtype.itemsize))
    return _Plan(meta, values, sum(v[4] for v in values))


class _Plans:
    """The plans of the JSON headers one connection's frames had, by their bytes."""

    def __init__(self) -> None:
        self._plans: dict[bytes, _Plan] = {}

    def get(self, header: bytes, value_bytes: int) -> _Plan:
        """``header``'s plan; a ValueError (TypeError, KeyError) when it is not one of
        ours or its values' bytes are not ``value_bytes``."""
        plan = self._plans.get(header)
        if plan is None:
            plan = _read_plan(header)
            if len(self._plans) >= _CACHED_HEADERS:
                self._plans.clear()
            self._plans[header] = plan
        if plan.value_bytes != value_bytes:
            raise ValueError("a wire frame's header and length disagree")
        return plan


def _allocate(plan: _Plan) -> tuple[Items, list[memoryview]]:
    """A frame's values as its plan lists them: the arrays to fill (rows of a larger
    array: the rest of it zero) and the bytes of each still to come, in order."""
    items: Items = []
    targets: list[memoryview] = []
    for keys, dtype, shape, window, nbytes in plan.values:
        if window is None:
            array = part = np.empty(shape, dtype=dtype)
        else:  # rows of a larger array: the rest of it zero
            rows, first = window
            array = np.zeros((rows, *shape[1:]), dtype=dtype)
            part = array[first:first + shape[0]]
        if nbytes:
            targets.append(part.reshape(-1).view(np.uint8).data)
        items.append((keys, array))
    return items, targets


def _copied(plan: _Plan, data: memoryview, at: int) -> Items:
    """A frame's values as its plan lists them, copied from ``data`` (every byte of them
    there, from ``at``) into arrays of their own."""
    items: Items = []
    for keys, dtype, shape, window, nbytes in plan.values:
        value = np.frombuffer(data, dtype, nbytes // dtype.itemsize, at).reshape(shape)
        if window is None:
            array = value.copy()
        else:  # rows of a larger array: the rest of it zero
            rows, first = window
            array = np.zeros((rows, *shape[1:]), dtype=dtype)
            array[first:first + shape[0]] = value
        items.append((keys, array))
        at += nbytes
    return items


# A frame as read: its JSON header's fields with its ``step`` id (and a call's
# ``program_step``) from the fixed header, and its values
Frame = tuple[dict[str, Any], Items]


class _Incoming:
    """One connection's frames, assembled as its bytes come: ``read`` takes what the
    socket has now (one ``recv``, never waiting for the rest of a frame) and returns the
    frames it completed. A small frame comes whole in one ``recv`` into a buffer kept
    for the connection and is parsed there. A thread that waits for a peer's value reads
    the peer's socket itself this way (``Listener.pump``) while it may also be sending:
    two tasks that send each other large frames at once each take in the other's as it
    comes. The values' arrays are read-only unless ``writeable``."""

    SCRATCH = 1 << 16  # one recv of a small frame takes it whole

    def __init__(self, sock: socket.socket, writeable: bool = False) -> None:
        self.sock = sock
        self.writeable = writeable
        self._scratch = bytearray(self.SCRATCH)
        self._view = memoryview(self._scratch)
        self._pending = b""  # bytes read, not yet in a frame's arrays
        self._plans = _Plans()
        self._meta: dict[str, Any] | None = None  # the frame being filled: its header
        self._items: Items = []
        self._targets: list[memoryview] = []  # its arrays' bytes still to come
        self._at = 0  # of targets[0], filled

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> list[Frame] | None:
        """The frames completed by one ``recv`` (its bytes go straight into a large
        array's place); None when the peer closed the connection. ValueError (TypeError,
        KeyError, MemoryError) for a frame that is not ours, OSError from the socket."""
        if self._targets and len(self._targets[0]) - self._at >= self.SCRATCH:
            target = self._targets[0]
            k = self.sock.recv_into(target[self._at:])
            if k == 0:
                return None
            self._at += k
            if self._at < len(target):
                return []
            self._targets.pop(0)
            self._at = 0
            return self._parse(memoryview(b""))
        k = self.sock.recv_into(self._scratch)
        if k == 0:
            return None
        if self._pending:
            data = memoryview(self._pending + self._view[:k])
            self._pending = b""
        else:
            data = self._view[:k]
        return self._parse(data)

    def _parse(self, data: memoryview) -> list[Frame]:
        """The frames that ``data`` (the bytes read, after those pending) completes; what
        is left of it waits for the next read (the rest of a frame's arrays are read into
        them in place)."""
        frames: list[Frame] = []
        at, end = 0, len(data)
        while True:
            if self._meta is not None:  # filling a frame's arrays
                while self._targets and at < end:
                    target = self._targets[0]
                    n = min(len(target) - self._at, end - at)
                    target[self._at:self._at + n] = data[at:at + n]
                    at += n
                    self._at += n
                    if self._at == len(target):
                        self._targets.pop(0)
                        self._at = 0
                if self._targets:
                    return frames
                if not self.writeable:
                    for _, array in self._items:
                        array.flags.writeable = False
                frames.append((self._meta, self._items))
                self._meta, self._items = None, []
                continue
            if end - at < _PREFIX.size:
                break
            magic, header_bytes, value_bytes, step, program_step = _PREFIX.unpack_from(
                data, at)
            if magic != _MAGIC or header_bytes > _MAX_HEADER_BYTES:
                raise ValueError("not a tfc wire frame")
            start = at + _PREFIX.size
            if end - start < header_bytes:
                break
            plan = self._plans.get(bytes(data[start:start + header_bytes]), value_bytes)
            meta = dict(plan.meta, step=step)
            if "call" in meta:
                meta["program_step"] = program_step
            at = start + header_bytes
            if end - at >= value_bytes:  # the whole frame is here: its arrays copied
                items = _copied(plan, data, at)
                at += value_bytes
                if not self.writeable:
                    for _, array in items:
                        array.flags.writeable = False
                frames.append((meta, items))
                continue
            self._meta = meta
            self._items, self._targets = _allocate(plan)
            self._at = 0
        self._pending = bytes(data[at:end])
        return frames


# A frame of at most this many bytes goes out as one buffer (one send, one segment: the
# receiver wakes once for it); a larger one as its header, then each array's own bytes.
_COALESCE_BYTES = 1 << 16
# The encoded JSON headers a sender keeps, by (the header's fields, each value's keys,
# dtype, shape and rows): a sender's frames repeat a few (past this it starts over)
_ENCODED: dict[Any, bytes] = {}


def _frozen_fields(fields: dict[str, Any]) -> Any:
    """``fields`` (a header's plain JSON fields: values, or dicts of values) as a hashable
    key that tells apart what JSON writes differently (``True``, ``1`` and ``1.0`` are
    equal keys in Python); a TypeError for deeper ones (then the header is encoded anew
    each time)."""
    return tuple((k, type(v), tuple((kk, type(vv), vv) for kk, vv in v.items())
                  if type(v) is dict else v) for k, v in fields.items())


def _frame_buffers(step_id: int, header: dict[str, Any], values: Sequence[Outgoing],
                   program_step: int = 0) -> tuple[list[Any], int]:
    """One frame of step ``step_id`` (``header``'s fields, the values' list in its JSON;
    ``program_step`` for a call) as the buffers to send, and the values' bytes."""
    arrays = [a if type(a) is np.ndarray and a.flags.c_contiguous
              else np.require(a, requirements="C") for a in (v[1] for v in values)]
    try:
        signature: Any = (_frozen_fields(header), *(
            (tuple(v[0]), a.dtype.str, a.shape, tuple(v[2]) if len(v) > 2 else None)
            for v, a in zip(values, arrays)))
        encoded = _ENCODED.get(signature)
    except TypeError:  # (fields that are not hashable as they are)
        signature = encoded = None
    if encoded is None:
        encoded = json.dumps(dict(header, values=[
            [list(v[0]), a.dtype.str, list(a.shape), *([list(v[2])] if len(v) > 2 else [])]
            for v, a in zip(values, arrays)]), separators=(",", ":")).encode()
        if signature is not None:
            if len(_ENCODED) >= 4 * _CACHED_HEADERS:
                _ENCODED.clear()
            _ENCODED[signature] = encoded
    total = sum(a.nbytes for a in arrays)
    head = _PREFIX.pack(_MAGIC, len(encoded), total, step_id, program_step) + encoded
    if len(head) + total <= _COALESCE_BYTES:
        return [b"".join([head, *(a.data for a in arrays if a.nbytes)])], total
    return [head, *(a.reshape(-1).view(np.uint8).data for a in arrays if a.nbytes)], total


def _send_frame(sock: socket.socket, step_id: int, header: dict[str, Any],
                values: Sequence[Outgoing], program_step: int = 0) -> int:
    """Write one frame (see ``_frame_buffers``); the values' bytes."""
    buffers, total = _frame_buffers(step_id, header, values, program_step)
    for buffer in buffers:
        sock.sendall(buffer)
    return total


# (seconds, writable socket or None) -> whether this thread pumped: ``Listener.pump``
Pump = Callable[[float, "socket.socket | None"], bool]
_WAKE = object()  # the selector's key data of the listener's wake-up socket
_NO_FIELDS: dict[str, Any] = {}  # (a plain send's header: its values only)


class Listener:
    """A TCP server on ``host`` (an ephemeral port) whose connections' frames are read by
    whichever thread waits for them: a thread of the task that waits for a peer's value
    calls ``pump``, which reads the sockets that have bytes and passes each frame to
    ``handler`` (no hand-off to another thread: the reader is the waiter); between those,
    the listener's own thread pumps. A frame with a ``call`` (a step's launch) is run by
    the listener's thread with ``calls``, whose answer goes back on that connection
    (within ``send_timeout_s``); one that a waiting thread read is run once its step is
    over. ``close`` stops accepting and closes the connections."""

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
        self._selector = selectors.DefaultSelector()
        self._pump_lock = threading.Lock()
        self._pumper: int | None = None  # the thread pumping now
        self._contended = False  # another thread found it pumping since it began
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._accepted: list[socket.socket] = []  # not yet in the selector
        self._queued: list[tuple[socket.socket, dict[str, Any], Items]] = []  # calls
        # after a pump during which another thread found it pumping (that one waits for
        # the values this one reads, or for it to stop)
        self.on_release: Callable[[], None] | None = None
        threading.Thread(target=self._accept, name="tfc-wire-accept", daemon=True).start()
        threading.Thread(target=self._serve, name="tfc-wire", daemon=True).start()

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
                # (a reply's send is bounded; reads happen when the socket has bytes)
                seconds = int(self.send_timeout_s)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack(
                    "ll", seconds, int((self.send_timeout_s - seconds) * 1e6)))
                self._accepted.append(conn)
            self.wake()

    def wake(self) -> None:
        """Make the pumping thread look again (a new connection, a value that came by
        another way, an abort); nothing when called by that thread itself."""
        if self._pumper != threading.get_ident():
            try:
                self._wake_w.send(b"\0")
            except OSError:  # full (a wake-up is pending already) or closed
                pass

    def pump(self, timeout_s: float | None, writable: socket.socket | None = None) -> bool:
        """Read what the connections have, waiting at most ``timeout_s`` (None: no limit)
        for something to happen (bytes, a wake-up, ``writable`` taking bytes again), and
        pass each frame completed to ``handler`` (calls are queued for the listener's
        thread). False at once when another thread is pumping (that one reads; with
        ``writable``, this one then waits for it alone; the pumping one calls
        ``on_release`` when it stops, which a thread that reads alone is spared)."""
        lock = self._pump_lock
        if not lock.acquire(blocking=False):
            if timeout_s is None:
                lock.acquire()
            else:
                self._contended = True  # (set before trying again: the release sees it)
                if not lock.acquire(blocking=False):
                    if writable is not None:
                        select.select([], [writable], [], timeout_s)
                    return False
        self._pumper = threading.get_ident()
        try:
            if writable is not None:
                self._selector.register(writable, selectors.EVENT_WRITE, None)
            try:
                events = self._selector.select(timeout_s)
            finally:
                if writable is not None:
                    self._selector.unregister(writable)
            for key, _ in events:
                if key.data is _WAKE:
                    self._woken()
                elif key.data is not None:
                    self._take(key.data)
        except (OSError, ValueError):  # closed under us
            if not self.closed:
                raise
        finally:
            self._pumper = None
            lock.release()
            if self._contended and self.on_release is not None:
                self._contended = False
                self.on_release()
        return True

    def _woken(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        with self._lock:
            accepted, self._accepted = self._accepted, []
        for conn in accepted:
            self._selector.register(conn, selectors.EVENT_READ, _Incoming(conn))

    def _take(self, incoming: _Incoming) -> None:
        """The frames ``incoming`` completed now: each to ``handler``, or queued (a call);
        a connection that closed or sent garbage is dropped (its step fails on the
        other side)."""
        try:
            frames = incoming.read()
            for meta, items in frames or ():
                if steptrace.ENABLED:
                    steptrace.mark(int(meta["step"]), "rx call" if "call" in meta else
                                   f"rx {items[0][0][0] if items else '-'}")
                if "call" in meta and self.calls is not None:
                    self._queued.append((incoming.sock, meta, items))
                else:
                    self.handler(meta["step"], items)
        except (OSError, ValueError, TypeError, KeyError, MemoryError):
            frames = None
        if frames is None:
            self._selector.unregister(incoming.sock)
            incoming.sock.close()

    def _serve(self) -> None:
        """The listener's thread: pump, and run the calls read."""
        while not self.closed:
            self.pump(None)
            while self._queued and not self.closed:
                conn, meta, items = self._queued.pop(0)
                try:
                    self._answer(conn, meta, items)
                except OSError:  # the caller went away: its side fails the step
                    pass
        with self._pump_lock:
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _answer(self, conn: socket.socket, meta: dict[str, Any], items: Items) -> None:
        """Run a call and send its reply back (its error as the reply when it raised)."""
        assert self.calls is not None
        try:
            reply, values = self.calls(meta, items)
        except Exception as e:  # the caller gets it as the call's error, not a timeout
            reply, values = {"error": f"{type(e).__name__}: {e}"}, []
        _send_frame(conn, meta["step"], {"reply": reply}, values)
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
        self.wake()
        with self._lock:
            for conn in self._connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()


class Link:
    """A connection to one peer's ``Listener``; ``send`` and ``call`` may be called from
    several threads (one frame at a time goes out); one thread reads the replies.

    A task's link to a peer has its own listener's ``pump``: while the peer takes no more
    bytes (its socket buffers full: it is sending a large frame to this task too, say),
    the sending thread reads what comes to its own listener instead of waiting idle,
    so that two tasks sending to each other both go on."""

    def __init__(self, sock: socket.socket, peer: str, timeout_s: float,
                 pump: Pump | None = None) -> None:
        self._sock = sock
        self._pump = pump
        if pump is not None:
            sock.setblocking(False)  # (a send that would wait pumps instead)
        self._lock = threading.Lock()
        self.peer = peer
        self.timeout_s = timeout_s
        self.broken: str | None = None
        self.lost = False  # the connection failed or the peer closed it: its process is gone
        self._incoming = _Incoming(sock, writeable=True)  # (the replies ``receive`` reads)
        self._received: collections.deque[Frame] = collections.deque()

    @classmethod
    def open(cls, address: Sequence[object], peer: str, timeout_s: float,
             connect_timeout_s: float = 5.0, pump: Pump | None = None) -> "Link | None":
        """A link to ``address`` (host, port), or None when it cannot be reached within
        ``connect_timeout_s`` (the caller then goes through Ray); ``pump``: the sender's
        own listener's (see the class docstring)."""
        host, port = str(address[0]), int(address[1])  # type: ignore[call-overload]
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        except OSError:
            return None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(timeout_s)  # every send is bounded
        return cls(sock, peer, timeout_s, pump)

    def fileno(self) -> int:
        """The socket's descriptor (for ``selectors``: a reply is ready to read)."""
        return self._sock.fileno()

    def send(self, step_id: int, values: Sequence[Outgoing]) -> int:
        """Send ``values`` (each with its rendezvous keys) for step ``step_id``; the bytes
        of the values. An ``ExecutionError`` naming the peer when the connection fails
        or the peer takes nothing within the timeout."""
        return self._frame(step_id, _NO_FIELDS, values)

    def call(self, step_id: int, call: dict[str, Any], values: Sequence[Outgoing],
             program_step: int = 0) -> int:
        """Send a call (``call``, plain JSON whose fields repeat from step to step, and
        ``values``) for step ``step_id`` (``program_step``: the program's step count, which
        the peer's handler gets as the frame's ``program_step``): the peer's ``calls``
        handler answers with a frame that ``receive`` reads. Errors as ``send``'s."""
        return self._frame(step_id, {"call": call}, values, program_step)

    def _frame(self, step_id: int, header: dict[str, Any], values: Sequence[Outgoing],
               program_step: int = 0) -> int:
        with self._lock:
            if self.broken is not None:
                raise ExecutionError(f"the connection to {self.peer} is broken ({self.broken})")
            try:
                buffers, sent = _frame_buffers(step_id, header, values, program_step)
                if self._pump is None:
                    for buffer in buffers:
                        self._sock.sendall(buffer)
                else:
                    self._send_pumping(buffers)
                if steptrace.ENABLED:
                    steptrace.mark(step_id, f"tx {self.peer}")
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

    def _send_pumping(self, buffers: list[Any]) -> None:
        """Send ``buffers`` on the non-blocking socket: while the peer takes nothing, pump
        (read what comes to this task); a ``socket.timeout`` after ``timeout_s``."""
        assert self._pump is not None
        deadline = time.monotonic() + self.timeout_s
        for buffer in buffers:
            view = memoryview(buffer)
            while len(view):
                try:
                    view = view[self._sock.send(view):]
                    continue
                except (BlockingIOError, InterruptedError):
                    pass
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout
                self._pump(min(left, 1.0), self._sock)

    @property
    def buffered(self) -> bool:
        """Whether a frame the peer sent is read already (``receive`` returns it without
        reading the socket: a wait for the socket to be readable would not see it)."""
        return bool(self._received)

    def receive(self) -> Frame | None:
        """The next frame the peer sent back (a call's reply; writeable arrays): a small
        one comes whole with one ``recv`` into the link's buffer; each read waits at most
        the timeout. None when the peer closed the connection (its process exited). An
        ``ExecutionError`` naming the peer on a timeout or a frame that is not one of
        ours."""
        try:
            while not self._received:
                frames = self._incoming.read()
                if frames is None:
                    break
                self._received.extend(frames)
            frame = self._received.popleft() if self._received else None
        except socket.timeout:
            self.broken = f"a reply took longer than {self.timeout_s:g} s"
            raise ExecutionError(f"{self.peer} did not finish its reply within "
                                 f"{self.timeout_s:g} s") from None
        except (ValueError, TypeError, KeyError, MemoryError) as e:
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
            steptrace.mark(frame[0]["step"], f"rx reply {self.peer}")
        return frame

    def cut(self, why: str) -> None:
        """End the connection at once from any thread (a peer declared dead: its hung
        process will never answer): a ``receive`` waiting on it returns None now, and
        a ``send`` stuck on it fails."""
        self.broken = self.broken or why
        self.lost = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        with self._lock:
            self.broken = self.broken or "closed"
            try:
                self._sock.close()
            except OSError:
                pass
