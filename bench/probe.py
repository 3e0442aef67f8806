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
  a cost that does not grow when other processes load the machine;
* **what a lag was made of**: each ticker sample also records, over its sleep, the loop
  thread's CPU time (``time.thread_time()``), the other threads' (the process's minus
  it) and the loop thread's run-queue wait (ready, but no core: a loaded machine;
  ``/proc/thread-self/schedstat``); the rest of the sample's wall time is the loop
  thread blocked: the sleep itself, or waiting for the GIL (``bench/lag.py`` splits it);
* **the garbage collector**: every pass (``gc.callbacks``), its generation, wall and
  CPU time, whether on the loop thread, and the objects collected.

With ``PROBE_DETAIL=1`` (a diagnosis, not the benchmark: it costs a few µs a loop
iteration) also each loop iteration whose callbacks took ≥ 2 ms (wall, the loop
thread's CPU, the other threads' CPU) and each single callback that did (with its
task's coroutine chain).

On ``SIGUSR1`` the probe writes ``OUT`` (JSON: ``seq``, cumulative ``commits`` and
``synced`` commits, ``cpu_s``, the ``lags`` ``[[monotonic s, lateness s, loop CPU s, other
threads' CPU s, run-queue wait s], ...]``, the collector's ``gcs`` and the detail's
``iters`` and ``callbacks`` recorded since the previous dump), through a temporary file
and a rename, so the driver reads whole files only.
"""

from __future__ import annotations

import asyncio
import gc
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
_lags: list[tuple[float, float, float, float, float]] = []
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

_DETAIL = os.environ.get("PROBE_DETAIL") == "1"
#: an iteration's callbacks taking at least this long (wall, s) are recorded
SLOW_S = 0.002
#: slow iterations since the last dump: [monotonic s at its end, wall s of its callbacks,
#: the loop thread's CPU s in them, the other threads' CPU s meanwhile, callbacks ready
#: before its poll]
_iters: list[tuple[float, float, float, float, int]] = []
#: slow single callbacks: [monotonic s, wall s, CPU s, what]
_callbacks: list[tuple[float, float, float, str]] = []


class _Loop(asyncio.SelectorEventLoop):
    """The default loop, with each iteration's callback part timed: from the selector's
    return to the iteration's end, on the wall clock, the loop thread's CPU clock and
    the process's (the other threads' CPU = the process's − the loop thread's). A wall
    time well above the loop thread's CPU is a wait: for the GIL (another thread runs
    Python) or for a core (the machine is loaded)."""

    def _run_once(self) -> None:
        selector = self._selector  # type: ignore[attr-defined]
        select = selector.select
        marks: list[float] = []

        def timed(timeout: float | None = None) -> Any:
            events = select(timeout)
            marks.extend((time.perf_counter(), time.thread_time(), time.process_time()))
            return events

        selector.select = timed
        waiting = len(self._ready)  # type: ignore[attr-defined]
        try:
            super()._run_once()  # type: ignore[misc]
        finally:
            selector.select = select
        if marks:
            wall = time.perf_counter() - marks[0]
            if wall >= SLOW_S:
                main = time.thread_time() - marks[1]
                others = time.process_time() - marks[2] - main
                _iters.append((time.monotonic(), wall, main, others, waiting))


#: the cyclic garbage collector's passes since the last dump: [monotonic s, generation,
#: wall s, CPU s, on the loop thread, objects collected]
_gcs: list[tuple[float, int, float, float, bool, int]] = []
_gc_start = threading.local()


def _gc_timer(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_start.at = time.perf_counter(), time.thread_time()
    else:
        w0, c0 = _gc_start.at
        wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
        loop_thread = threading.current_thread() is threading.main_thread()
        mark = time.monotonic()
        _gcs.append((mark, info["generation"], wall, cpu, loop_thread, info["collected"]))


def _what(handle: asyncio.Handle) -> str:
    """A callback's name; for a task's step, its coroutine and where it now waits."""
    cb = getattr(handle, "_callback", None)
    task = getattr(cb, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro: Any = task.get_coro()
        chain: list[str] = []
        while coro is not None and len(chain) < 12:
            chain.append(getattr(coro, "__qualname__", type(coro).__name__))
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        return " > ".join(chain)
    return getattr(cb, "__qualname__", repr(cb))


def _time_callbacks() -> None:
    real = asyncio.events.Handle._run

    def run(handle: asyncio.Handle) -> None:
        w0, c0 = time.perf_counter(), time.thread_time()
        real(handle)
        wall = time.perf_counter() - w0
        if wall >= SLOW_S:
            cpu = time.thread_time() - c0
            _callbacks.append((time.monotonic(), wall, cpu, _what(handle)))

    asyncio.events.Handle._run = run  # type: ignore[method-assign,assignment]


def _waited() -> Any:
    """A reader of the calling thread's run-queue wait so far (s): the time it was ready
    to run but had no core (``/proc/thread-self/schedstat``, Linux; 0.0 elsewhere)."""
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        return lambda: 0.0
    return lambda: int(os.pread(fd, 64, 0).split()[1]) / 1e9


async def _ticker() -> None:
    waited = _waited()
    while True:
        t0, c0, p0, q0 = time.perf_counter(), time.thread_time(), time.process_time(), waited()
        await asyncio.sleep(_TICK_S)
        main = time.thread_time() - c0
        others = time.process_time() - p0 - main
        queued = waited() - q0
        _lags.append((time.monotonic(), time.perf_counter() - t0 - _TICK_S, main, others, queued))


class _Policy(asyncio.DefaultEventLoopPolicy):
    started = False

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = _Loop() if _DETAIL else super().new_event_loop()
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
            "iters": list(_iters),
            "callbacks": list(_callbacks),
            "gcs": list(_gcs),
        }
    _gcs.clear()
    _lags.clear()
    _iters.clear()
    _callbacks.clear()
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
    gc.callbacks.append(_gc_timer)
    if _DETAIL:
        _time_callbacks()
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
