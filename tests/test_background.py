"""Cache writes on the worker thread (``tfc.background``): held inside a ``deferred``
block and queued as it ends, run in order, a later write of a file replacing a queued
one, waited for by a lookup of the same file, never raised into the caller, and on disk
when a process that deferred them exits normally."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import tfc
from tfc import background


def test_later_runs_now_outside_a_deferred_block():
    done = []
    background.later("a", lambda: done.append(threading.current_thread()))
    assert done == [threading.current_thread()]


def test_a_deferred_block_holds_its_jobs_then_queues_them_in_order():
    gate = threading.Event()
    done = []
    with background.deferred():
        background.later("a", lambda: (gate.wait(5), done.append("a")))
        background.later("b", lambda: done.append("b"))
        assert done == []  # held
    assert done == []  # queued: the worker waits at the gate
    gate.set()
    background.flush()
    assert done == ["a", "b"]


def test_a_held_given_to_the_block_waits_for_its_owner_and_inner_blocks_join_it():
    done = []
    held = background.Held()
    with background.deferred(held):
        with background.deferred():
            background.later("a", lambda: done.append("a"))
        background.later("b", lambda: done.append("b"))
        background.later("a", lambda: done.append("a again"))  # (replaces "a")
    background.flush()
    assert done == []  # held: its owner has not released it
    held.release()
    held.release()  # (once)
    background.flush()
    assert done == ["a again", "b"]


def test_a_later_write_of_a_file_replaces_the_queued_one_and_keeps_the_order():
    gate = threading.Event()
    done = []
    background.submit("gate", lambda: gate.wait(5))
    background.submit("f", lambda: done.append("first"))
    background.later("f", lambda: done.append("second"))  # queued: "f" is pending
    gate.set()
    background.flush()
    assert done == ["second"]


def test_a_lookup_waits_for_a_pending_write_of_its_file():
    gate = threading.Event()
    done = []
    background.submit("f", lambda: (gate.wait(5), done.append("f")))
    threading.Timer(0.05, gate.set).start()
    background.wait_for("other")  # (nothing pending for it: at once)
    background.wait_for("f")
    assert done == ["f"]


def test_a_failing_job_is_reported_and_the_next_still_runs(capfd):
    done = []

    def boom():
        raise RuntimeError("a bug in a write")
    background.submit("bad", boom)
    background.submit("good", lambda: done.append("good"))
    background.flush()
    assert done == ["good"]
    assert "a bug in a write" in capfd.readouterr().err


_SCRIPT = textwrap.dedent("""
    import numpy as np, tfc
    x = tfc.placeholder(tfc.float32, [2, 3], name="x")
    w = tfc.Variable(np.ones((3, 2), np.float32), name="w")
    loss = tfc.reduce_sum(tfc.matmul(x, w) ** 2)
    train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tfc.Session(backend="llvm") as sess:
        sess.run(tfc.global_variables_initializer())
        print(repr(float(sess.run([loss, train], {x: np.ones((2, 3), np.float32)})[0])))
""")


def _process(cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, TFC_CACHE_DIR=str(cache),
               PYTHONPATH=str(Path(tfc.__file__).parent.parent))
    return subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_process_exit_waits_for_the_deferred_writes(tmp_path):
    """The writes a Session deferred are on disk once its process has exited (the worker
    is joined at exit): the next process finds both the lowered module and the code."""
    first = _process(tmp_path)
    assert first.returncode == 0, first.stderr
    assert len(list((tmp_path / "lowered").glob("*.zip"))) == 2  # the init's, the step's
    assert len(list((tmp_path / "entries").glob("*.zip"))) == 2
    again = _process(tmp_path)
    assert again.returncode == 0 and again.stdout == first.stdout == "36.0\n"


def test_a_write_that_fails_is_a_miss_not_an_error(tmp_path, monkeypatch):
    """A cache directory that cannot be made (a file is in the way): the runs succeed,
    nothing is stored, and the next session lowers again."""
    from tfc.api import lowered_cache
    blocked = tmp_path / "cache"
    blocked.write_text("not a directory")
    monkeypatch.setenv("TFC_CACHE_DIR", str(blocked))
    monkeypatch.setattr(lowered_cache, "_IN_PROCESS", type(lowered_cache._IN_PROCESS)())
    import tfc.pipeline
    lowered = []
    real = tfc.pipeline.lower
    monkeypatch.setattr(tfc.pipeline, "lower",
                        lambda m, *a, **k: lowered.append(1) or real(m, *a, **k))

    def run():
        with tfc.Graph().as_default():
            x = tfc.placeholder(tfc.float32, [2, 3], name="x")
            y = tfc.reduce_sum(x * 2.0)
            with tfc.Session(backend="llvm") as sess:
                out = sess.run(y, {x: np.ones((2, 3), np.float32)})
        background.flush()
        lowered_cache._IN_PROCESS.clear()  # (as another process: it has only the disk)
        return out
    assert run() == run() == 12.0
    assert len(lowered) == 2
    assert blocked.read_text() == "not a directory"


@pytest.fixture(autouse=True)
def _drained():
    yield
    background.flush()


def test_a_forked_child_starts_with_nothing_queued():
    """A child forked while a write is queued neither runs it nor waits for it."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    gate = threading.Event()
    background.submit("gate", lambda: gate.wait(5))
    background.submit("f", lambda: None)
    pid = os.fork()
    if pid == 0:  # (the child: exit at once, saying whether it saw the queue empty)
        ok = not background._jobs and background._worker is None
        background.wait_for("f")  # (nothing pending in the child: returns at once)
        os._exit(0 if ok else 1)
    import time
    deadline = time.monotonic() + 30
    while True:  # (a child that waits for its parent's worker would hang: fail instead)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    gate.set()
    if not done:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert done and os.waitstatus_to_exitcode(status) == 0
