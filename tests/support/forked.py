"""Client of the fork server (:mod:`tests.support.zygote`): bot processes without import cost.

:func:`spawn_bot` asks the fork server (~5 s of imports, once: one server for all xdist
workers, started by the controller, or one for a lone pytest process on first use) for
a ``python -m bot`` child and returns a :class:`ForkedProcess`, which offers the parts
of :class:`asyncio.subprocess.Process` the harness uses (``pid``, ``returncode``,
``wait``, ``send_signal``, ``terminate``, ``kill``). The child is a separate process, so
signals and exit codes are real; see the server's docstring for what it shares with the
server (the imported modules only).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "SHARED_SERVER_ENV",
    "ForkServer",
    "ForkedProcess",
    "run_module",
    "spawn_bot",
    "start_shared_server",
]

#: Where a fork server shared by every xdist worker listens (set by the controller,
#: :func:`start_shared_server`; without it each worker starts its own on first use).
SHARED_SERVER_ENV = "KOPEK_TEST_FORK_SERVER"

_REPO_ROOT = Path(__file__).resolve().parents[2]
#: seconds the server may take to import (a deadline for a hung server only; measured
#: ~5 s on the 2-core machine, far more when several suites share it)
_START_TIMEOUT_S = 180.0


class ForkServer:
    """A fork server process and its socket path (``wait``: return once it listens;
    ``bare``: it preloads nothing, for scripts)."""

    def __init__(self, *, wait: bool = True, bare: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix="kopek-zygote-")
        self.path = os.path.join(self.dir, "s")
        self.log = open(os.path.join(self.dir, "server.log"), "wb")  # noqa: SIM115 - lives with the server
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(_REPO_ROOT))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.zygote",
                self.path,
                *(["--bare"] if bare else []),
            ],
            cwd=_REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        atexit.register(self.close)
        if not wait:
            return
        assert self.proc.stdout is not None
        ready = _read_line(self.proc.stdout.fileno(), _START_TIMEOUT_S)
        if ready != b"ready\n":
            self.log.flush()
            tail = Path(self.dir, "server.log").read_text(errors="replace")[-2000:]
            self.close()
            raise RuntimeError(f"the fork server did not start ({ready!r}):\n{tail}")

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # the server ends on EOF, killing its children
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _read_line(fd: int, timeout: float) -> bytes:
    """One line from ``fd`` (b"" or a partial line if it closes or ``timeout`` passes)."""
    line = b""
    while not line.endswith(b"\n"):
        readable, _, _ = select.select([fd], [], [], timeout)
        if not readable:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return line


_server: ForkServer | None = None


def start_shared_server() -> ForkServer:
    """Start a fork server for the xdist workers this process is about to start (it
    imports while they collect) and name its socket in :data:`SHARED_SERVER_ENV`, which
    they inherit. The caller closes it after the session."""
    server = ForkServer(wait=False)
    os.environ[SHARED_SERVER_ENV] = server.path
    return server


def _own_server() -> str:
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = ForkServer()
    return _server.path


async def _connect(path: str | None = None) -> socket.socket:
    """A connection to the fork server at ``path``, else the shared one (waiting while it
    imports), else this process's own. A shared server that is gone (its socket refuses:
    killed, say, by the OOM killer) is replaced by one of this process's own."""
    shared = None if path is not None else os.environ.get(SHARED_SERVER_ENV)
    target = path or shared or _own_server()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _START_TIMEOUT_S
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(target)
        except ConnectionRefusedError:  # bound, nobody listening: the server died
            sock.close()
            if target != shared:
                raise RuntimeError(f"the fork server at {target} is gone") from None
            target = _own_server()
        except FileNotFoundError:  # not bound yet: the shared server is still importing
            sock.close()
            if loop.time() > deadline:
                raise RuntimeError(f"no fork server listening at {target}") from None
            await asyncio.sleep(0.05)
        else:
            return sock


class ForkedProcess:
    """A bot child of the fork server, seen from the test.

    Attributes:
        pid: the child's process id.
        returncode: ``None`` while it runs; its exit code after, ``-N`` for a death by
            signal N (as :class:`asyncio.subprocess.Process` gives it).
    """

    def __init__(self, pid: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.pid = pid
        self.returncode: int | None = None
        self._writer = writer
        self._done = asyncio.ensure_future(self._watch(reader))

    async def _watch(self, reader: asyncio.StreamReader) -> int:
        line = await reader.readline()
        self._writer.close()
        if not line:  # the server died: its children were killed with it
            self.returncode = -signal.SIGKILL
        else:
            self.returncode = int(json.loads(line)["exit"])
        return self.returncode

    async def wait(self) -> int:
        """Wait for the exit; returns the exit code."""
        return await asyncio.shield(self._done)

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the child.

        Raises:
            ProcessLookupError: it has ended.
        """
        if self.returncode is not None:
            raise ProcessLookupError(self.pid)
        os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)


async def spawn_bot(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | str,
    stdout: int,
    stderr: int,
    script: Path | str | None = None,
    server: str | None = None,
    module: str = "bot",
    nofile: int | None = None,
) -> ForkedProcess:
    """Start ``python -m bot *args`` (or ``python script *args``) as a child of the fork
    server.

    Args:
        args: the arguments after ``-m bot`` (e.g. ``[]`` or ``["delete-webhook"]``) or
            after the script.
        env: the child's whole environment.
        cwd: its working directory.
        stdout, stderr: open descriptors it gets as 1 and 2 (the caller keeps and closes
            its own); its stdin is ``/dev/null``.
        script: a Python file to run as ``__main__`` instead of ``bot`` (e.g. the echo bot
            of ``tests/support/echo_bot.py``).
        server: the socket path of a fork server to ask (default the shared one, else
            this process's own).
        module: run ``python -m module`` instead of ``python -m bot`` (e.g. ``alembic``,
            or a test's worker module).
        nofile: the child's descriptor limit (``RLIMIT_NOFILE``, soft and hard), if given.

    Raises:
        RuntimeError: no fork server could be started or reached.
    """
    request: dict[str, object] = {"argv": list(args), "env": dict(env), "cwd": str(cwd)}
    if script is not None:
        request["script"] = str(script)
    elif module != "bot":
        request["module"] = module
    if nofile is not None:
        request["nofile"] = nofile
    body = json.dumps(request).encode()
    sock = await _connect(server)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        socket.send_fds(sock, [struct.pack(">I", len(body))], [null, stdout, stderr])
        sock.sendall(body)
        sock.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=sock)
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(null)
    line = await reader.readline()
    if not line:
        writer.close()
        raise RuntimeError("the fork server closed the connection without forking")
    return ForkedProcess(int(json.loads(line)["pid"]), reader, writer)


async def run_module(
    module: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | str,
    timeout: float = _START_TIMEOUT_S,  # noqa: ASYNC109 - test deadline
) -> tuple[int, str, str]:
    """Run ``python -m module *args`` forked from the fork server to its end.

    Returns:
        (exit code, stdout, stderr).

    Raises:
        TimeoutError: still running after ``timeout`` seconds (it is killed).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = await spawn_bot(
            args, env=env, cwd=cwd, stdout=out.fileno(), stderr=err.fileno(), module=module
        )
        try:
            async with asyncio.timeout(timeout):
                code = await child.wait()
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
        out.seek(0)
        err.seek(0)
        return code, out.read().decode(), err.read().decode()
