"""The suite's fork server (``tests/support/zygote.py``) keeps the promises a test relies on
when it starts a process: every signal sent to a child is delivered, however early, and
children do not outlive the server. Run against a bare server (no preloading) and a
script that sleeps, so each case costs milliseconds."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.forked import ForkedProcess, ForkServer, spawn_bot

SLEEPER = "import time\ntime.sleep(120)\n"


@pytest.fixture
def bare_server() -> Iterator[ForkServer]:
    server = ForkServer(bare=True)
    yield server
    server.close()


async def _spawn(server: ForkServer, tmp_path: Path, run: int = 0) -> tuple[ForkedProcess, Path]:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    err = tmp_path / f"err{run}"
    with tempfile.TemporaryFile() as out, err.open("wb") as errors:
        child = await spawn_bot(
            [],
            env={"PATH": os.environ.get("PATH", "")},
            cwd=tmp_path,
            stdout=out.fileno(),
            stderr=errors.fileno(),
            script=script,
            server=server.path,
        )
    return child, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_signal_sent_at_once_is_never_lost(
    bare_server: ForkServer, tmp_path: Path, sig: signal.Signals
) -> None:
    """A signal sent the moment the pid is known, as a real ``python`` would take it
    at any point of its start: SIGINT is an uncaught KeyboardInterrupt (traceback, exit
    by SIGINT: -2), SIGTERM the default action (-15). A server once lost 3 of 5 early SIGINTs
    (CPython forgets signals that land in the child's after-fork window); ten in a row."""
    for run in range(10):
        child, err = await _spawn(bare_server, tmp_path, run)
        child.send_signal(sig)
        async with asyncio.timeout(30):  # a lost signal leaves the sleeper for 120 s
            code = await child.wait()
        assert code == -sig
        if sig == signal.SIGINT:
            assert "KeyboardInterrupt" in err.read_text()


async def test_children_die_with_the_server_however_it_ends(
    bare_server: ForkServer, tmp_path: Path
) -> None:
    """SIGKILL of the server (as the OOM killer would) ends its children too
    (``PR_SET_PDEATHSIG``), and the harness says so."""
    child, _ = await _spawn(bare_server, tmp_path)
    bare_server.proc.kill()
    assert await child.wait() == -signal.SIGKILL
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while _running(child.pid):
        assert loop.time() < deadline, f"child {child.pid} outlived its server"
        await asyncio.sleep(0.02)


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (one left to a PID 1 that does not reap, as in
    this container, has ended)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return "State:\tZ" not in status.read()
    except FileNotFoundError:
        return False


async def test_a_server_that_is_gone_is_said_at_once(tmp_path: Path) -> None:
    """A socket bound but not listening (its server was killed) is refused at once,
    not waited on for the start deadline (else every later bot test waits 180 s);
    the shared server's clients move to a server of their own on the same sign."""
    dead = tmp_path / "s"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(dead))
        with pytest.raises(RuntimeError, match="is gone"):
            async with asyncio.timeout(5):
                await spawn_bot([], env={}, cwd=tmp_path, stdout=1, stderr=2, server=str(dead))
