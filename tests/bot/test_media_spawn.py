"""Worker processes started off the event loop (:mod:`bot.media.spawn`)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import pytest

from bot.media import spawn as spawn_module
from bot.media.spawn import spawn

ECHO = [sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read().upper())"]
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


async def test_a_worker_talks_over_its_pipes_and_its_exit_is_seen(tmp_path: object) -> None:
    worker = await spawn(ECHO, env={}, cwd=str(tmp_path), line_limit=1024)
    worker.stdin.write(b"hello\n")
    await worker.stdin.drain()
    worker.stdin.close()
    assert await worker.stdout.readline() == b"HELLO\n"
    assert await asyncio.wait_for(worker.wait(), 30) == 0
    assert worker.returncode == 0


async def test_a_killed_worker_reports_the_signal_and_starts_no_thread(tmp_path: object) -> None:
    """The exit is watched by the loop (a pidfd on Linux), not by a thread per process."""
    before = threading.active_count()
    worker = await spawn(SLEEP, env={}, cwd=str(tmp_path), line_limit=1024)
    assert worker.returncode is None
    worker.kill()
    assert await asyncio.wait_for(worker.wait(), 30) == -9
    assert worker.returncode == -9
    if hasattr(os, "pidfd_open"):
        assert threading.active_count() <= before + 1  # at most the executor's one thread


async def test_a_start_cancelled_midway_leaves_no_process_behind(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[subprocess.Popen[bytes]] = []
    gate, made = threading.Event(), threading.Event()
    real = spawn_module._popen

    def slow_popen(argv: list[str], env: dict[str, str], cwd: str) -> subprocess.Popen[bytes]:
        gate.wait(30)
        popen = real(argv, env, cwd)
        started.append(popen)
        made.set()
        return popen

    monkeypatch.setattr(spawn_module, "_popen", slow_popen)
    task = asyncio.create_task(spawn(SLEEP, env={}, cwd=str(tmp_path), line_limit=1024))
    await asyncio.sleep(0)
    task.cancel()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(made.wait, 30)
    # killed by the cancelled start: it ends long before its 60 s sleep would
    assert await asyncio.to_thread(started[0].wait, 30) == -9
