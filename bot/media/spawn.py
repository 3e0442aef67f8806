"""A worker process started off the event loop: :func:`spawn` and :class:`Worker`.

``asyncio.create_subprocess_exec`` runs ``fork``/``exec`` on the loop's thread and, with
Python 3.11's default child watcher, starts a waiting thread per process and waits for
that thread to run: a few ms of the loop per document, more on a loaded machine. Here
:class:`subprocess.Popen` runs in the loop's default executor, the pipes are then
attached to the loop as streams, and the exit is seen through a pidfd the loop watches
(Linux ≥ 5.3: :func:`os.pidfd_open`, no thread) or, elsewhere, through a thread that
waits for it.

:class:`Worker` offers what :class:`bot.media.worker.ExtractionPool` used of
:class:`asyncio.subprocess.Process`: ``pid``, ``returncode``, ``stdin``/``stdout``
streams, ``kill`` and ``wait``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Sequence

__all__ = ["Worker", "spawn"]


class Worker:
    """One started process: its standard input and output as :mod:`asyncio` streams.

    Args:
        popen: the process (``stdin`` and ``stdout`` pipes).
        stdin: its standard input, attached to the loop.
        stdout: its standard output, attached to the loop.
        reading: the transport that feeds ``stdout`` (closed by :meth:`wait`).
    """

    __slots__ = ("_exited", "_popen", "_reading", "stdin", "stdout")

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        reading: asyncio.BaseTransport,
    ) -> None:
        self._popen = popen
        self._reading = reading
        self.stdin = stdin
        self.stdout = stdout
        self._exited: asyncio.Future[int] | None = None

    @property
    def pid(self) -> int:
        """The process id."""
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status (``-N``: killed by signal N); ``None`` while it runs (a
        non-blocking ``waitpid`` each look, which also reaps it)."""
        return self._popen.poll()

    def kill(self) -> None:
        """Send ``SIGKILL`` (nothing when it has already ended)."""
        with contextlib.suppress(ProcessLookupError):
            self._popen.kill()

    async def wait(self) -> int:
        """Wait for the exit, reap it, close the pipes; returns the exit status."""
        if self._exited is None:
            self._exited = _exit_future(self._popen)
        code = await asyncio.shield(self._exited)
        self.stdin.close()
        self._reading.close()
        return code


def _exit_future(popen: subprocess.Popen[bytes]) -> asyncio.Future[int]:
    """A future of ``popen``'s exit status: a pidfd watched by the loop, else a thread."""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):  # not Linux, an old kernel, or already reaped
        return asyncio.ensure_future(asyncio.to_thread(popen.wait))
    exited: asyncio.Future[int] = loop.create_future()

    def readable() -> None:
        code = popen.poll()
        if code is None:  # readable only once it has exited; never spin on a surprise
            return
        loop.remove_reader(fd)
        os.close(fd)
        if not exited.done():
            exited.set_result(code)

    loop.add_reader(fd, readable)
    readable()  # it may have ended before the reader was added
    return exited


async def spawn(argv: Sequence[str], *, env: dict[str, str], cwd: str, line_limit: int) -> Worker:
    """Start ``argv`` (standard error to ``/dev/null``) without blocking the loop.

    Args:
        argv: the command.
        env: its whole environment.
        cwd: its working directory.
        line_limit: the longest line its output stream buffers, bytes.

    Raises:
        OSError: it could not be started. Cancelled while it starts, the process
            started is killed and reaped.
    """
    loop = asyncio.get_running_loop()
    started = loop.run_in_executor(None, _popen, list(argv), env, cwd)
    try:
        popen = await asyncio.shield(started)
    except asyncio.CancelledError:
        started.add_done_callback(_kill_started)
        raise
    assert popen.stdin is not None and popen.stdout is not None
    reader = asyncio.StreamReader(limit=line_limit)
    reading: asyncio.BaseTransport | None = None
    try:
        reading, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), popen.stdout
        )
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), popen.stdin
        )
    except BaseException:  # cancelled (a close) or refused between the start and the pipes
        if reading is not None:
            reading.close()
        _discard(popen)
        raise
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return Worker(popen, writer, reader, reading)


def _popen(argv: list[str], env: dict[str, str], cwd: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )


def _kill_started(started: asyncio.Future[subprocess.Popen[bytes]]) -> None:
    """A start whose caller was cancelled: kill and reap the process it made."""
    if started.cancelled() or started.exception() is not None:
        return
    _discard(started.result())


def _discard(popen: subprocess.Popen[bytes]) -> None:
    """Kill ``popen``, close its pipes and reap it (on the calling thread: a killed
    process is reaped within milliseconds, and an executor may already be shutting down
    when a cancelled start ends, which would leave it unreaped)."""
    with contextlib.suppress(ProcessLookupError):
        popen.kill()
    for pipe in (popen.stdin, popen.stdout):
        if pipe is not None:
            pipe.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=1)
