"""One process per SQLite database file: an OS lock on ``<database>.lock``.

A second bot on the same file would fight over ``getUpdates`` and, at start, expire
every hold of the first (live) process. :func:`acquire` takes an exclusive
``flock(2)`` on ``<database file>.lock`` (created next to the database) and keeps the
descriptor open for the life of the process; the kernel releases the lock when the
process exits or dies (``kill -9`` included), so a crash never leaves a stale lock —
unlike a PID file. The holder's PID is written into the file only so that the refused
process can name it; the PID is never what decides.

Take the lock before migrations and before the ledger sweeps holds at start.

Several processes on one database (PostgreSQL, per-process heartbeats) are out of
scope here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

__all__ = ["InstanceLock", "InstanceLocked", "acquire", "lock_path_for"]


class InstanceLocked(Exception):
    """Another live process holds the database's lock.

    Attributes:
        database: the database file.
        holder_pid: the holder's PID as written in the lock file (``None`` if unreadable).
    """

    def __init__(self, database: Path, holder_pid: int | None) -> None:
        self.database = database
        self.holder_pid = holder_pid
        who = f"process {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(f"the database {database} is in use by {who}")


def lock_path_for(database: Path) -> Path:
    """``<database>.lock`` next to the database file the path really names: symlinks
    (of the file or of any folder on the way) and relative parts resolved, so one file
    reached by two spellings has one lock."""
    real = database.resolve()
    return real.with_name(real.name + ".lock")


class InstanceLock:
    """A held lock; :meth:`release` (or process exit) lets another process take it."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def __repr__(self) -> str:
        return f"InstanceLock(path={str(self.path)!r}, held={self._fd is not None})"

    def release(self) -> None:
        """Unlock and close (idempotent). The file stays; it is only ever locked."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        raw = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    return int(raw) if raw.isdigit() else None


def acquire(database: Path) -> InstanceLock:
    """Take the exclusive lock of ``database`` without waiting.

    The database's folder is created if missing (as the engine would).

    Raises:
        InstanceLocked: another process holds it.
        OSError: the lock file cannot be created or locked (unwritable folder).
    """
    database.parent.mkdir(parents=True, exist_ok=True)
    path = lock_path_for(database)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _read_pid(fd)
        os.close(fd)
        raise InstanceLocked(database, pid) from None
    except OSError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return InstanceLock(path, fd)
