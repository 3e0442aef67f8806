"""``python -m tests.support.pg run`` (``make run-postgres``) stopped by a signal or killed:
SIGTERM left the server and the bot running, reparented to init.

The command run is a small script in place of the bot (the point is the runner's
process handling; the bot's own SIGTERM handling is tested in ``test_foundation``).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The stand-in for the bot: says it runs, then records the signal it gets and exits 0.
CHILD = """
import os, pathlib, signal, sys, time
here = pathlib.Path(sys.argv[1])
def stop(signum, frame):
    (here / "signal").write_text(str(signum))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
(here / "child.pid").write_text(str(os.getpid()))
while True:
    time.sleep(0.1)
"""


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _dead(pid: int) -> bool:
    return not _alive(pid)


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie, dead but not reaped, is not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait(check: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _written(path: Path) -> bool:
    """``path`` exists and holds something."""
    return path.exists() and path.read_text() != ""


def _runner(tmp: Path, data: Path) -> subprocess.Popen[bytes]:
    tmp.mkdir()
    argv = [sys.executable, "-m", "tests.support.pg", "run", "--data", str(data)]
    argv += ["--port", str(_port()), "--", sys.executable, "-c", CHILD, str(tmp)]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_sigterm_stops_the_command_then_the_server_and_sigkill_leaves_nothing(
    tmp_path: Path,
) -> None:
    """SIGTERM to the runner reaches the command once (it exits 0, the runner's code),
    then the server stops. A runner killed with SIGKILL (it cannot forward anything)
    still leaves neither the server nor the command running."""
    # the server's data outside pytest's 0700 folder (as root it runs as another user)
    shared = Path(tempfile.mkdtemp(prefix="kopek-pg-runner-"))
    os.chmod(shared, 0o755)  # noqa: S103 - the server's user must reach its data
    try:
        _signal_and_kill(tmp_path, shared)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _signal_and_kill(tmp_path: Path, shared: Path) -> None:
    term, kill = tmp_path / "term", tmp_path / "kill"
    runners = {term: _runner(term, shared / "term"), kill: _runner(kill, shared / "kill")}
    pids: dict[Path, tuple[int, int]] = {}
    for tmp in runners:
        child = tmp / "child.pid"
        # the file exists before its pid is written (write_text creates, then writes)
        _wait(partial(_written, child), "the command's pid")
        postmaster = int((shared / tmp.name / "data" / "postmaster.pid").read_text().split()[0])
        pids[tmp] = (postmaster, int(child.read_text()))
        assert _alive(pids[tmp][0]) and _alive(pids[tmp][1])

    runners[term].send_signal(signal.SIGTERM)
    runners[kill].kill()
    assert runners[term].wait(120) == 0
    assert (term / "signal").read_text() == str(int(signal.SIGTERM))
    assert not _alive(pids[term][0]) and not _alive(pids[term][1])
    runners[kill].wait(120)
    for pid in pids[kill]:
        _wait(functools.partial(_dead, pid), f"process {pid} to end after its parent died")
    assert (kill / "signal").read_text() == str(int(signal.SIGTERM))
    assert (shared / "kill" / "data" / "PG_VERSION").exists()  # the data is kept
