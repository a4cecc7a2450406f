"""Atomic writes and the clean-up of the temp files killed writers leave behind: only
tfc's own temp names, only when their writer is gone."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tfc import atomic
from tfc.atomic import (STALE_SECONDS, atomic_write, is_stale, remove_stale_temps, temp_name,
                        temp_target)
from tfc.runtime.checkpoint import read_checkpoint, save_checkpoint


@pytest.fixture(scope="module")
def dead_pid():
    """The PID of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def dead_temp(directory, target, pid):
    """A temp file as a writer with ``pid`` on this host leaves it when killed."""
    name = temp_name(target).replace(f"-{os.getpid()}-", f"-{pid}-")
    path = directory / name
    path.write_bytes(b"half a file")
    return path


def age(path, seconds):
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_temp_names_round_trip():
    name = temp_name("ckpt-3.tfckpt")
    assert name.startswith(".ckpt-3.tfckpt.") and name.endswith(".tmp")
    assert temp_target(name) == "ckpt-3.tfckpt"
    assert temp_target(".model.tfc.0badc0de.tmp") == "model.tfc"  # older tfc versions
    for other in ("model.tfc", "notes.tmp", ".model.tfc.tmp", "model.tfc.0badc0de.tmp",
                  ".model.tfc.XYZ.tmp", ".model.tfc.0badc0de.tmp.bak"):
        assert temp_target(other) is None, other


def test_stale_means_the_writer_is_gone(tmp_path, dead_pid):
    dead = dead_temp(tmp_path, "a.tfc", dead_pid)
    assert is_stale(dead)
    mine = tmp_path / temp_name("a.tfc")  # this process: alive, writing it now
    mine.write_bytes(b"")
    assert not is_stale(mine)
    parent = dead_temp(tmp_path, "b.tfc", os.getppid())  # alive: kept however old...
    assert not is_stale(parent)
    age(parent, STALE_SECONDS + 60)  # ...until nobody has written it for an hour
    assert is_stale(parent)
    elsewhere = tmp_path / (".c.tfc.abcdef-" + str(dead_pid) + "-0badc0de.tmp")
    elsewhere.write_bytes(b"")  # another host's writer: its PID says nothing here
    assert atomic._host_tag() != "abcdef" or pytest.skip("host tag collision")
    assert not is_stale(elsewhere)
    age(elsewhere, STALE_SECONDS + 60)
    assert is_stale(elsewhere)
    old = tmp_path / ".d.tfc.0badc0de.tmp"  # an older tfc: no PID
    old.write_bytes(b"")
    assert not is_stale(old)
    age(old, STALE_SECONDS + 60)
    assert is_stale(old)


def test_remove_stale_temps_touches_only_stale_tfc_temps_of_its_targets(tmp_path, dead_pid):
    keep = [tmp_path / n for n in ("notes.tmp", ".x.tmp", "a.tfc", ".a.tfc.tmp")]
    for p in keep:
        p.write_bytes(b"user data")
        age(p, STALE_SECONDS * 10)
    dead_a = dead_temp(tmp_path, "a.tfc", dead_pid)
    dead_b = dead_temp(tmp_path, "b.tfc", dead_pid)
    live = tmp_path / temp_name("a.tfc")
    live.write_bytes(b"")
    assert remove_stale_temps(tmp_path, lambda t: t == "a.tfc") == [dead_a]
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in [*keep, dead_b, live])


def test_atomic_write_removes_its_targets_stale_temps(tmp_path, dead_pid):
    dead = dead_temp(tmp_path, "out.json", dead_pid)
    other = dead_temp(tmp_path, "other.json", dead_pid)
    atomic_write(tmp_path / "out.json", lambda f: f.write(b"{}"))
    assert not dead.exists() and other.exists()
    assert (tmp_path / "out.json").read_bytes() == b"{}"


def test_next_checkpoint_save_removes_a_killed_saves_temps(tmp_path, dead_pid):
    """A run killed while checkpointing leaves temps of a checkpoint file and of the
    index; the next save into the directory removes both, and no other file."""
    save_checkpoint(tmp_path, {"v": np.zeros(3)}, 1)
    leftovers = [dead_temp(tmp_path, "ckpt-2.tfckpt", dead_pid),
                 dead_temp(tmp_path, "checkpoint.json", dead_pid)]
    unrelated = [dead_temp(tmp_path, "notes.txt", dead_pid), tmp_path / "my.tmp"]
    unrelated[1].write_bytes(b"")
    save_checkpoint(tmp_path, {"v": np.ones(3)}, 3)
    assert not any(p.exists() for p in leftovers)
    assert all(p.exists() for p in unrelated)
    assert read_checkpoint(tmp_path).step == 3


def test_before_replace_can_keep_the_target(tmp_path):
    target = tmp_path / "a.txt"
    target.write_bytes(b"theirs")

    def refuse():
        raise RuntimeError("changed")
    with pytest.raises(RuntimeError, match="changed"):
        atomic_write(target, lambda f: f.write(b"mine"), refuse)
    assert target.read_bytes() == b"theirs" and os.listdir(tmp_path) == ["a.txt"]
    st = atomic_write(target, lambda f: f.write(b"mine"), lambda: None)
    assert target.read_bytes() == b"mine"
    assert (st.st_ino, st.st_mtime_ns) == (os.stat(target).st_ino, os.stat(target).st_mtime_ns)
