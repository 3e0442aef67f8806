"""Runs a bot inside a measuring wrapper (used by ``bench/bot.py``; not a test helper).

``python bench/probe.py OUT -m bot`` or ``python bench/probe.py OUT path/to/script.py``
runs the target as ``__main__`` with two probes installed first:

* **event-loop lag**: the first event loop created gets a task that sleeps 1 ms in a
  loop and records how late it wakes (the same ticker as ``bench/ledger.py``), with
  ``time.monotonic()`` timestamps (one clock for every process on Linux);
  ``KOPEK_PROBE_TICK_S`` sets another pause (``bench/bot_scaling.py``: 10 ms — a 1 ms
  ticker costs each process tens of ms of CPU per second, which a burst that lasts
  longer, or runs in three processes, counts against every message);
* **commits**: every ``sqlite3`` connection the process opens (the ledger's writer,
  aiosqlite's workers) gets a trace callback that counts ``COMMIT`` statements, and
  the *synced* ones: those made while the connection's ``synchronous`` level was
  ``FULL`` (one WAL fsync each; SQLite's default level, changed by a ``PRAGMA
  synchronous=…`` statement, which the same callback sees), plus every ``os.fsync`` or
  ``os.fdatasync`` of a ``-wal`` file (the ledger's writer commits under ``NORMAL`` and
  syncs the WAL itself after a group whose hold was granted, :mod:`budget.kernel.sqlite_writer`).

* **CPU**: the process's CPU time (``time.process_time()``: user + system, all threads),
  a cost that does not grow when other processes load the machine.

On ``SIGUSR1`` the probe writes ``OUT`` (JSON: ``seq``, cumulative ``commits`` and
``synced`` commits, ``cpu_s``, and the ``lags`` ``[[monotonic s, lateness s], ...]`` recorded since
the previous dump), through a temporary file and a rename, so the driver reads whole
files only.
"""

from __future__ import annotations

import asyncio
import json
import os
import runpy
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

_OUT = Path(sys.argv[1])
_lock = threading.Lock()
_state: dict[str, Any] = {"seq": 0, "commits": 0, "synced": 0}
_lags: list[tuple[float, float]] = []
_real_connect = sqlite3.connect


def _tracer() -> Any:
    """A trace callback for one connection (it keeps that connection's level)."""
    full = [True]  # SQLite's default synchronous level is FULL

    def trace(statement: str) -> None:
        head = statement[:24].upper()
        if head.startswith("COMMIT"):
            with _lock:
                _state["commits"] += 1
                _state["synced"] += full[0]
        elif head.startswith("PRAGMA SYNCHRONOUS"):
            level = statement.split("=", 1)[-1].strip().upper()
            if "=" in statement:
                full[0] = level in ("FULL", "2", "EXTRA", "3")

    return trace


_real_fsync = os.fsync
_real_fdatasync = os.fdatasync


def _synced(fd: int) -> None:
    try:
        wal = os.readlink(f"/proc/self/fd/{fd}").endswith("-wal")
    except OSError:
        wal = False
    if wal:
        with _lock:
            _state["synced"] += 1


def _fsync(fd: int) -> None:
    _real_fsync(fd)
    _synced(fd)


def _fdatasync(fd: int) -> None:
    _real_fdatasync(fd)
    _synced(fd)


def _connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    conn: sqlite3.Connection = _real_connect(*args, **kwargs)
    conn.set_trace_callback(_tracer())
    return conn


_TICK_S = float(os.environ.get("KOPEK_PROBE_TICK_S", "0.001"))


async def _ticker() -> None:
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(_TICK_S)
        _lags.append((time.monotonic(), time.perf_counter() - t0 - _TICK_S))


class _Policy(asyncio.DefaultEventLoopPolicy):
    started = False

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        if not _Policy.started:
            _Policy.started = True
            loop.call_soon(lambda: _keep.append(loop.create_task(_ticker())))
        return loop


_keep: list[asyncio.Task[None]] = []


def _dump(_signum: int, _frame: FrameType | None) -> None:
    with _lock:
        _state["seq"] += 1
        body = {
            "seq": _state["seq"],
            "commits": _state["commits"],
            "synced": _state["synced"],
            "cpu_s": time.process_time(),
            "lags": list(_lags),
        }
    _lags.clear()
    tmp = _OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, _OUT)


def main() -> None:
    """Install the probes and run the target as ``__main__``."""
    sqlite3.connect = _connect  # type: ignore[assignment]
    os.fsync = _fsync  # type: ignore[assignment]
    os.fdatasync = _fdatasync  # type: ignore[assignment]
    asyncio.set_event_loop_policy(_Policy())
    signal.signal(signal.SIGUSR1, _dump)
    target = sys.argv[2:]
    sys.path.pop(0)  # bench/ (where this file is): its bot.py must not shadow the package
    if target[0] == "-m":
        sys.argv = [target[1], *target[2:]]
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(target)
        sys.path.insert(0, str(Path(target[0]).resolve().parent))
        runpy.run_path(target[0], run_name="__main__")


if __name__ == "__main__":
    main()
