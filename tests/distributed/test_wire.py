"""Tensors over TCP between a cluster's processes (``tfc.distributed.wire``): what is sent
arrives whole, with its step id and keys, in frames of several values; a peer that cannot
be reached is None (the caller goes by Ray), one that went away is a one-line error; a
call (a step's launch) is answered on its connection; rows of a batch land in place."""

from __future__ import annotations

import queue
import socket

import numpy as np
import pytest

from tfc.distributed.wire import Link, Listener
from tfc.errors import ExecutionError


def listening() -> tuple[Listener, "queue.Queue[tuple[int, list]]"]:
    frames: "queue.Queue[tuple[int, list]]" = queue.Queue()
    return Listener("127.0.0.1", lambda step, items: frames.put((step, items))), frames


def test_values_arrive_whole_with_their_step_and_keys():
    listener, frames = listening()
    link = Link.open(listener.address, "task t", timeout_s=5.0)
    assert link is not None
    rng = np.random.default_rng(0)
    values = [(["a", "b"], rng.normal(size=(3, 4))), (["c"], np.asarray(7, np.int64)),
              (["d"], np.zeros((0, 5), np.float32)), (["e"], np.asarray([True, False])),
              (["f"], rng.normal(size=(300, 1000)).astype(np.float32)[:, ::2])]  # strided
    try:
        assert link.send(41, values) == sum(np.asarray(v).nbytes for _, v in values)
        link.send(42, [(["g"], np.arange(3.0))])
        step, items = frames.get(timeout=10)
        assert step == 41 and [k for k, _ in items] == [k for k, _ in values]
        for (_, want), (_, got) in zip(values, items):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            assert not got.flags.writeable and got.flags.c_contiguous
            assert got.ctypes.data % 16 == 0  # aligned, as the kernels take it
        assert frames.get(timeout=10)[0] == 42  # in order
    finally:
        link.close()
        listener.close()


def test_an_unreachable_peer_is_none_and_a_gone_one_an_error():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = s.getsockname()
    assert Link.open(address, "task t", timeout_s=5.0, connect_timeout_s=2.0) is None
    listener, _ = listening()
    link = Link.open(listener.address, "task /job:worker/task:1", timeout_s=5.0)
    assert link is not None
    listener.close()
    big = np.zeros(4 << 20, np.float32)  # more than the socket buffers take
    with pytest.raises(ExecutionError, match=r"connection to task /job:worker/task:1"):
        for step in range(20):
            link.send(step, [(["k"], big)])
    with pytest.raises(ExecutionError, match="broken"):
        link.send(99, [(["k"], np.ones(1))])
    link.close()


def test_a_call_is_answered_on_its_connection_and_rows_land_in_place():
    calls = []

    def answer(meta, items):
        calls.append(items)
        if meta["call"].get("fail"):
            raise ValueError("no entry @e")
        return {"entry": meta["call"]["entry"]}, [(["fetch:0"], items[0][1] * 2)]

    listener = Listener("127.0.0.1", lambda step, items: None, calls=answer)
    link = Link.open(listener.address, "task t", timeout_s=5.0)
    assert link is not None
    batch = np.arange(12.0).reshape(6, 2)
    try:
        link.call(7, {"entry": "e"}, [(["feed:0"], batch[2:4], (6, 2))])  # rows 2, 3 of 6
        meta, items = link.receive()
        assert meta["step"] == 7 and meta["reply"] == {"entry": "e"}
        got = calls[0][0][1]
        assert got.shape == (6, 2) and not got.flags.writeable
        np.testing.assert_array_equal(got[2:4], batch[2:4])
        assert not got[:2].any() and not got[4:].any()  # the other rows zero
        np.testing.assert_array_equal(items[0][1], got * 2)
        assert items[0][1].flags.writeable  # (the caller's to keep)
        link.call(8, {"entry": "e", "fail": True}, [])
        assert link.receive()[0]["reply"] == {"error": "ValueError: no entry @e"}
        listener.close()
        assert link.receive() is None and link.lost  # the peer's process went away
    finally:
        link.close()
        listener.close()


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("keys, dtype, shape, stated, rows", [
    (["k"], "|O", [4], 32, None),          # object: pointers read off the wire
    (["k"], "<f8", [-1], 8, None),         # a negative dim
    (["k"], "<f8", [2, "x"], 16, None),    # not an int
    (["k"], "<f8", [1 << 40], 8, None),    # a length the frame does not carry (8 TiB)
    (["k"], "<f8", [2], 16, [2, 1]),       # rows 1, 2 of an array of 2
    (["k"], "<f8", [], 8, [1, 0]),         # rows of a scalar
    ("k", "<f8", [], 8, None),             # keys that are not a list of strings
])
def test_a_frame_that_is_not_ours_is_dropped_and_the_listener_goes_on(keys, dtype, shape,
                                                                      stated, rows):
    import json
    import struct
    listener, frames = listening()
    value = [keys, dtype, shape] + ([rows] if rows is not None else [])
    header = json.dumps({"values": [value]}).encode()
    try:
        with socket.create_connection(listener.address, timeout=5.0) as s:
            s.sendall(struct.pack("<4sQQqq", b"tfc2", len(header), stated, 1, 0) + header
                      + bytes(stated))
            s.settimeout(5.0)
            try:  # the listener closed this connection (a reset when bytes were unread)
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
        assert frames.empty()
        link = Link.open(listener.address, "task t", timeout_s=5.0)
        assert link is not None
        link.send(2, [(["k"], np.arange(3.0))])
        assert frames.get(timeout=10)[0] == 2
        link.close()
    finally:
        listener.close()


def test_a_recv_that_waits_in_a_call_reads_the_socket_itself():
    """A task's step runs in its listener's thread, and a value it waits for is read by
    that same thread (``Listener.pump``), not handed over by another one."""
    import threading

    from tfc.runtime.rendezvous import Rendezvous
    table = Rendezvous(timeout_s=10.0)
    readers: list[int] = []

    def arrived(step, items):
        readers.append(threading.get_ident())
        table.send_many([(keys[0], value) for keys, value in items])

    def step(meta, items):
        (value,) = table.recv_many(["k"])
        return {"same_thread": readers == [threading.get_ident()]}, [(["fetch:0"], value)]

    listener = Listener("127.0.0.1", arrived, calls=step)
    table.reader = listener
    driver = Link.open(listener.address, "task t", timeout_s=10.0)
    peer = Link.open(listener.address, "task p", timeout_s=10.0)
    assert driver is not None and peer is not None
    try:
        driver.call(1, {"entry": "e"}, [])
        peer.send(1, [(["k"], np.arange(4.0))])
        meta, items = driver.receive()
        assert meta["reply"] == {"same_thread": True}
        np.testing.assert_array_equal(items[0][1], np.arange(4.0))
    finally:
        driver.close()
        peer.close()
        listener.close()


def test_two_tasks_sending_large_frames_to_each_other_both_go_on():
    """Each task's step sends 32 MiB to the other (more than the sockets buffer) and then
    waits for the other's: a send that cannot go on reads what comes to its own task, so
    neither waits for the other forever (a ring all-reduce's exchange)."""
    from tfc.runtime.rendezvous import Rendezvous
    big = np.ones(8 << 20, np.float32)
    tables = [Rendezvous(timeout_s=20.0), Rendezvous(timeout_s=20.0)]
    listeners: list[Listener] = []
    links: list[Link] = []

    def task(i):
        def arrived(step, items):
            tables[i].send_many([(keys[0], value) for keys, value in items])

        def step(meta, items):
            links[i].send(1, [([f"from{i}"], big)])
            (got,) = tables[i].recv_many([f"from{1 - i}"])
            return {"sum": float(got.sum())}, []
        return Listener("127.0.0.1", arrived, calls=step)

    listeners += [task(0), task(1)]
    for i in (0, 1):
        tables[i].reader = listeners[i]
        link = Link.open(listeners[1 - i].address, f"task {1 - i}", timeout_s=10.0,
                         pump=listeners[i].pump)
        assert link is not None
        links.append(link)
    drivers = [Link.open(lst.address, f"task {i}", timeout_s=30.0)
               for i, lst in enumerate(listeners)]
    try:
        for d in drivers:
            d.call(1, {"entry": "e"}, [])
        for d in drivers:
            assert d.receive()[0]["reply"] == {"sum": float(big.size)}
    finally:
        for link in links + drivers:
            link.close()
        for lst in listeners:
            lst.close()


def test_a_senders_json_header_is_encoded_once_and_read_once_per_kind_of_frame(monkeypatch):
    """The step id and a call's program step travel in the fixed header, so the JSON of a
    sender's frames repeats: each end does its JSON once per kind of frame (the values
    of each frame still arrive as sent, under their own step id)."""
    import json
    from types import SimpleNamespace

    from tfc.distributed import wire
    counts = {"dumps": 0, "loads": 0}

    def counted(name):
        real = getattr(json, name)

        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(wire, "_ENCODED", {})
    monkeypatch.setattr(wire, "json", SimpleNamespace(dumps=counted("dumps"),
                                                      loads=counted("loads")))
    listener, frames = listening()
    link = Link.open(listener.address, "task t", timeout_s=5.0)
    assert link is not None
    try:
        for step in range(5):
            link.send(step, [(["a"], np.full((2, 3), step, np.float32))])
        link.send(5, [(["a"], np.full((3, 3), 5, np.float32))])  # another shape
        for step in range(6):
            got_step, items = frames.get(timeout=10)
            assert got_step == step and items[0][0] == ["a"]
            np.testing.assert_array_equal(items[0][1], np.full((2 + step // 5, 3), step))
        assert counts == {"dumps": 2, "loads": 2}
    finally:
        link.close()
        listener.close()


def test_a_known_header_with_values_of_another_length_is_dropped():
    """A header read before (its plan kept) still has its frame's length checked."""
    import json
    import struct
    listener, frames = listening()
    header = json.dumps({"values": [[["k"], "<f8", [2]]]}).encode()
    frame = struct.pack("<4sQQqq", b"tfc2", len(header), 16, 1, 0) + header + bytes(16)
    liar = struct.pack("<4sQQqq", b"tfc2", len(header), 8, 2, 0) + header + bytes(8)
    try:
        with socket.create_connection(listener.address, timeout=5.0) as s:
            s.sendall(frame)
            assert frames.get(timeout=10)[0] == 1
            s.sendall(liar)
            s.settimeout(5.0)
            try:  # the listener closed this connection
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
        assert frames.empty()
    finally:
        listener.close()


def test_a_reply_is_read_with_one_recv():
    """The driver reads a small reply whole with one ``recv`` into its link's buffer (not
    one for the fixed header, one for the JSON and one per value)."""
    from tfc.distributed.wire import _send_frame

    class Counting(socket.socket):
        recvs = 0

        def recv_into(self, *args, **kwargs):  # type: ignore[override]
            type(self).recvs += 1
            return super().recv_into(*args, **kwargs)

    mine, theirs = socket.socketpair()
    link = Link(Counting(fileno=mine.detach()), "task t", 5.0)
    try:
        _send_frame(theirs, 3, {"reply": {}}, [(["counters"], np.arange(9.0)),
                                               (["fetch:0"], np.float32(2.5))])
        meta, items = link.receive()
        assert meta == {"step": 3, "reply": {}} and Counting.recvs == 1
        assert [k for k, _ in items] == [["counters"], ["fetch:0"]]
        assert items[1][1] == np.float32(2.5) and items[1][1].flags.writeable
    finally:
        link.close()
        theirs.close()


def test_fields_that_json_writes_differently_are_not_taken_for_each_other():
    """A sender's kept headers tell ``True`` from ``1`` and ``1.0`` (equal in Python)."""
    listener = Listener("127.0.0.1", lambda step, items: None,
                        calls=lambda meta, items: (dict(meta["call"]), []))
    link = Link.open(listener.address, "task t", timeout_s=5.0)
    assert link is not None
    try:
        for settle in (True, 1, 1.0, None, False, 0):
            link.call(1, {"settle": settle}, [])
            got = link.receive()[0]["reply"]["settle"]
            assert got == settle and type(got) is type(settle)
    finally:
        link.close()
        listener.close()
