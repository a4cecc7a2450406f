"""Atomic file writes, and the clean-up of the temp files a killed writer leaves behind.

``atomic_write`` writes a temp file beside its target and moves it into place with
``os.replace``, so the target holds either its previous content or the complete new one.
A process killed mid-write (SIGKILL, power loss) cannot remove its temp file; the next
write into the same directory does (``remove_stale_temps``).

Temp names are ``.<target>.<host>-<pid>-<random>.tmp``: a temp is tfc's own only if its
name has that form, and stale when the process that wrote it is gone. That is known for
sure only on the writer's own machine (``<host>`` is a short hash of the host name), and
only while the PID has not been reused; so a temp is removed when its writer PID no
longer runs on this host, or, whatever its host (a directory shared over NFS) and for
temps of older tfc versions (``.<target>.<random>.tmp``), when nobody has written to it
for ``STALE_SECONDS``. A live writer's temp is never removed: its PID runs, and it is
being written (a writer that pauses longer than an hour between two writes of one file
is not a case tfc has).

A base module (beside ``errors``): the runtime's artifacts and checkpoints, the device
profile and the cli's outputs all write through it.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import stat
import time
from pathlib import Path
from typing import Any, Callable

STALE_SECONDS = 3600.0

_TEMP = re.compile(r"^\.(?P<target>.+)\.(?:(?P<host>[0-9a-f]{6})-(?P<pid>\d+)-)?[0-9a-f]{8}\.tmp$")


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:6]


def temp_name(target: str) -> str:
    """The name of a fresh temp file for writing ``target`` (a file name, no directory)."""
    return f".{target}.{_host_tag()}-{os.getpid()}-{os.urandom(4).hex()}.tmp"


def temp_target(name: str) -> str | None:
    """The target file name of the tfc temp file ``name``; None for any other name."""
    m = _TEMP.match(name)
    return m.group("target") if m else None


def _pid_running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # someone else's process, or we cannot tell
        return True
    return True


def is_stale(path: Path, now: float | None = None) -> bool:
    """Whether the tfc temp file ``path`` was left by a writer that is gone (see above)."""
    m = _TEMP.match(path.name)
    if m is None:
        return False
    if m.group("pid") is not None and m.group("host") == _host_tag() \
            and not _pid_running(int(m.group("pid"))):
        return True
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except OSError:
        return False
    return age > STALE_SECONDS


def remove_stale_temps(directory: str | os.PathLike[str],
                       targets: Callable[[str], bool]) -> list[Path]:
    """Remove the stale tfc temp files in ``directory`` whose target name ``targets``
    accepts; returns the removed paths. Never fails: clean-up is best effort."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        target = temp_target(entry.name)
        if target is None or not targets(target):
            continue
        path = Path(entry.path)
        try:
            if not entry.is_file(follow_symlinks=False) or not is_stale(path):
                continue
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed


def atomic_write(path: str | os.PathLike[str], write: Any,
                 before_replace: Callable[[], None] | None = None) -> os.stat_result:
    """Call ``write(fileobj)`` on a temp file beside ``path``, then move it into place.

    The temp file is flushed and fsynced before ``os.replace``, so ``path`` holds either
    its previous content or the complete new one, whatever happens; on any failure
    (KeyboardInterrupt included) the temp file is removed and the error re-raised. Stale
    temps of ``path`` that killed writers left are removed first.

    ``before_replace()``, when given, runs after the temp file is complete and just before
    it replaces ``path``, while this process holds an exclusive lock on the directory
    (where the file system has locks) that other tfc writers using ``before_replace``
    take too: a check that ``path`` is still what this process expects it to be, which
    raises to keep it. Returns the written file's ``os.stat_result`` (its identity, to
    tell later whether someone else replaced it).
    """
    path = Path(path)
    remove_stale_temps(path.parent, lambda target: target == path.name)
    tmp = path.with_name(temp_name(path.name))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # mode honours umask
    except OSError as e:  # name the file the user asked for, not the temp file
        raise type(e)(e.errno, e.strerror, str(path)) from None
    try:
        try:  # a replaced file keeps its permissions
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        except FileNotFoundError:
            pass
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            written = os.fstat(f.fileno())  # a rename keeps the inode and the mtime
        if before_replace is None:
            os.replace(tmp, path)
        else:
            with _DirectoryLock(path.parent):
                before_replace()
                os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return written


class _DirectoryLock:
    """An exclusive ``flock`` on a directory, held by one ``with`` block; a no-op where
    directories cannot be opened or locked (the check it guards still runs)."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.fd = directory, -1

    def __enter__(self) -> "_DirectoryLock":
        try:
            import fcntl
            self.fd = os.open(self.directory, os.O_RDONLY)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except (ImportError, OSError):  # no lock, but never a failed save over it
            self._close()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._close()  # closing the descriptor releases the lock

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
