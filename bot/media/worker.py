"""The event loop's side of document extraction: :class:`ExtractionPool`.

Each document is read by a process of its own (``python -m bot.media.child``, see that
module for the protocol), which then exits: a hostile file can exhaust only its own
process's address space (``RLIMIT_AS`` = ``memory_mb``) and time (killed at
``timeout_s``), and whatever it corrupted dies with it. A process costs ~0.7 s of CPU to
start (the interpreter and the extractors' imports), so ``prewarm`` processes are
started ahead and wait, limited and ready, for a job; taking one starts its
replacement. ``concurrency`` bounds the extractions running at once (and so the
memory: at most ``(concurrency + prewarm) × memory_mb`` of address space).

Nothing here blocks the loop: the processes are started in the loop's executor and their
pipes attached to it (:mod:`bot.media.spawn`), the document goes over a pipe, the result
comes back as one JSON line read with a bounded buffer. Why processes and not threads:
``docs/decisions/080-documents-are-read-in-a-worker-process.md``.

The children get a scrubbed environment (``PATH``, locale and the import path of this
package; no token, no provider key) and a temporary working directory, not the bot's
(where ``.env`` is). That is hygiene, not a sandbox: they run as the bot's user.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import sys
import tempfile
from collections import deque
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bot.media.child import NICE
from bot.media.spawn import Worker, spawn
from bot.media.types import (
    DocumentKind,
    ExtractionFailed,
    ExtractionLimits,
    ExtractionResult,
    Refusal,
    result_from_json,
)

__all__ = ["ExtractionPool", "WorkerUnavailable"]

log = logging.getLogger(__name__)

_KEPT_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "PYTHONHASHSEED",
    "PYTHONDONTWRITEBYTECODE",
)
_SIGXCPU = 24


class WorkerUnavailable(RuntimeError):
    """A worker process could not be started or did not become ready in time."""


def _child_env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])  # the directory holding ``bot/``
    env = {k: os.environ[k] for k in _KEPT_ENV if k in os.environ}
    env["PYTHONPATH"] = root
    return env


class ExtractionPool:
    """Reads documents in one-shot worker processes, prewarmed.

    Args:
        limits: the caps of every extraction (:class:`~bot.media.types.ExtractionLimits`).
        concurrency: extractions at once; more wait their turn.
        prewarm: worker processes kept started and ready (0: start one per document).
        python: the interpreter to run the workers with.
        start_timeout_s: how long a worker may take to become ready, seconds.
        nice: how much lower the workers' scheduling priority is than the bot's (0-19;
            19, the lowest, by default: the loop gets the CPU first).

    Lifecycle: :meth:`start` (prewarms), :meth:`extract` any number of times,
    :meth:`close` (kills what is left). :meth:`extract` also works without
    :meth:`start` (its first call starts a worker).
    """

    __slots__ = (
        "_closed",
        "_concurrency",
        "_env",
        "_filling",
        "_idle",
        "_limits",
        "_nice",
        "_prewarm",
        "_python",
        "_slots",
        "_start_timeout_s",
        "_workdir",
        "extractions",
    )

    def __init__(
        self,
        limits: ExtractionLimits,
        *,
        concurrency: int = 2,
        prewarm: int = 1,
        python: str = sys.executable,
        start_timeout_s: float = 60.0,
        nice: int = NICE,
    ) -> None:
        if concurrency < 1 or prewarm < 0 or not 0 <= nice <= 19:
            raise ValueError("concurrency must be >= 1, prewarm >= 0, nice in 0..19")
        self._nice = nice
        self._concurrency = concurrency
        self._limits = limits
        self._prewarm = prewarm
        self._python = python
        self._start_timeout_s = start_timeout_s
        self._slots = asyncio.Semaphore(concurrency)
        self._idle: deque[Worker] = deque()
        self._filling: set[asyncio.Task[None]] = set()
        self._env = _child_env()
        self._workdir = tempfile.mkdtemp(prefix="kopek-extract-")
        self._closed = False
        #: extractions finished, for metrics and tests
        self.extractions = 0

    def __repr__(self) -> str:
        return (
            f"ExtractionPool(idle={len(self._idle)}, starting={len(self._filling)}, "
            f"memory_mb={self._limits.memory_mb}, timeout_s={self._limits.timeout_s})"
        )

    @property
    def concurrency(self) -> int:
        """Extractions at once."""
        return self._concurrency

    @property
    def limits(self) -> ExtractionLimits:
        """The caps of every extraction."""
        return self._limits

    async def start(self) -> None:
        """Start the prewarmed workers (returns at once; they get ready in the background)."""
        self._fill()

    async def wait_ready(self) -> None:
        """Wait until the workers being prewarmed are ready (or failed to start)."""
        while self._filling:
            await asyncio.gather(*set(self._filling), return_exceptions=True)

    @property
    def idle(self) -> int:
        """Workers started and ready, waiting for a document."""
        return len(self._idle)

    def _fill(self) -> None:
        while not self._closed and len(self._idle) + len(self._filling) < self._prewarm:
            task = asyncio.create_task(self._warm_one(), name="kopek-extract-prewarm")
            self._filling.add(task)
            task.add_done_callback(self._filling.discard)

    async def _warm_one(self) -> None:
        try:
            worker = await self._spawn()
        except WorkerUnavailable as exc:
            log.warning("media.prewarm_failed %s", exc)
            return
        if self._closed:
            await _kill(worker)
        else:
            self._idle.append(worker)

    async def _spawn(self) -> Worker:
        """One started, limited worker that said ``ready``.

        Raises:
            WorkerUnavailable: it could not start, or died or hung before ``ready``.
        """
        argv = [self._python, "-m", "bot.media.child", "--memory-mb", str(self._limits.memory_mb)]
        argv += ["--nice", str(self._nice)]
        try:
            proc = await spawn(
                argv, env=self._env, cwd=self._workdir, line_limit=self._line_limit()
            )
        except OSError as exc:
            raise WorkerUnavailable(f"cannot start a worker: {exc}") from None
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(self._start_timeout_s):
                line = await proc.stdout.readline()
        except TimeoutError:
            line = b""
        except BaseException:  # cancelled while it started (a close): never leave it waiting
            await asyncio.shield(_kill(proc))
            raise
        if line != b"ready\n":
            await _kill(proc)
            raise WorkerUnavailable(f"worker not ready (exit {proc.returncode})")
        return proc

    def _line_limit(self) -> int:
        """The longest header line accepted (the text follows it as raw bytes)."""
        return 65_536

    def _text_limit(self) -> int:
        """The most text bytes accepted: every character as 4 bytes of UTF-8."""
        return self._limits.max_chars * 4

    async def _take(self) -> Worker:
        """An idle worker; else the one being prewarmed (started earlier, so ready
        sooner than a new one); else a new one."""
        while True:
            while self._idle:
                worker = self._idle.popleft()
                if worker.returncode is None:
                    return worker
                await _kill(worker)  # it died idle: reaped, its pipes closed
            if not self._filling:
                return await self._spawn()
            await asyncio.wait(set(self._filling), return_when=asyncio.FIRST_COMPLETED)

    async def extract(self, kind: DocumentKind, data: bytes) -> ExtractionResult:
        """Read ``data`` as ``kind`` in a worker process.

        Returns:
            :class:`~bot.media.types.Extracted`, or
            :class:`~bot.media.types.ExtractionFailed` — also for the caps enforced
            here: ``TIMEOUT`` (killed at ``timeout_s``, or its CPU limit hit),
            ``MEMORY`` (its address space exhausted), ``UNREADABLE`` (it died otherwise).

        Raises:
            WorkerUnavailable: no worker process could be started (the machine, not the
                document: the caller answers with a "try later" template).
        """
        async with self._slots:
            worker = await self._take()
            try:
                return await self._run(worker, kind, data)
            finally:
                self.extractions += 1
                if worker.returncode is None:
                    await _kill(worker)
                self._fill()  # after, not during: a start would take this one's CPU

    async def _run(self, worker: Worker, kind: DocumentKind, data: bytes) -> ExtractionResult:
        assert worker.stdin is not None
        job = {"kind": kind.value, "size": len(data), "limits": asdict(self._limits)}
        timeout = self._limits.timeout_s
        try:
            async with asyncio.timeout(timeout):
                worker.stdin.write(json.dumps(job).encode() + b"\n")
                worker.stdin.write(data)
                await worker.stdin.drain()
                worker.stdin.close()
                answer = await self._read_answer(worker)
        except TimeoutError:
            peak = _peak_kb(worker.pid)
            await _kill(worker)
            return ExtractionFailed(
                Refusal.TIMEOUT, kind, limit=math.ceil(timeout), peak_memory_kb=peak
            )
        except (ValueError, TypeError) as exc:  # not a result (a line past the bound too)
            await _kill(worker)
            return ExtractionFailed(
                Refusal.UNREADABLE, kind, detail=f"bad result: {type(exc).__name__}"
            )
        except (asyncio.IncompleteReadError, BrokenPipeError, ConnectionResetError):
            answer = None  # it died reading the document or writing the text
        if answer is None:
            return await self._died(worker, kind)
        try:
            return result_from_json(answer)
        except ValueError as exc:
            return ExtractionFailed(Refusal.UNREADABLE, kind, detail=f"bad result: {exc}"[:200])

    async def _read_answer(self, worker: Worker) -> dict[str, Any] | None:
        """The header line as a dict with the text put back in (``None``: the worker
        ended without a line).

        Raises:
            ValueError: a line past the bound, not JSON, not an object, or a text size
                past the cap.
            asyncio.IncompleteReadError: the text ended early.
        """
        assert worker.stdout is not None
        line = await worker.stdout.readline()
        if not line:
            return None
        answer = json.loads(line)
        if not isinstance(answer, dict):
            raise ValueError("not an object")
        if "text_bytes" in answer:
            size = int(answer.pop("text_bytes"))
            if not 0 <= size <= self._text_limit():
                raise ValueError(f"{size} text bytes")
            text = await worker.stdout.readexactly(size)
            answer["text"] = text.decode("utf-8", errors="replace")
        return answer

    async def _died(self, worker: Worker, kind: DocumentKind) -> ExtractionResult:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await worker.wait()
        code = worker.returncode
        if code == -_SIGXCPU:
            return ExtractionFailed(Refusal.TIMEOUT, kind, limit=math.ceil(self._limits.timeout_s))
        if code is not None and code < 0 and -code == 9:
            return ExtractionFailed(Refusal.MEMORY, kind, limit=self._limits.memory_mb)
        return ExtractionFailed(Refusal.UNREADABLE, kind, detail=f"worker died (exit {code})")

    async def close(self) -> None:
        """Stop prewarming and kill the idle workers (running extractions end by
        themselves: their callers kill their workers)."""
        self._closed = True
        for task in list(self._filling):
            task.cancel()
        await asyncio.gather(*self._filling, return_exceptions=True)
        while self._idle:
            await _kill(self._idle.popleft())
        with contextlib.suppress(OSError):
            os.rmdir(self._workdir)


def _peak_kb(pid: int) -> int:
    """A running process's peak resident set (``VmHWM``), KiB; 0 where ``/proc`` has
    none (not Linux, or it has ended)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:  # procfs: memory, no disk
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


async def _kill(proc: Worker) -> None:
    """Kill ``proc`` (if still running) and reap it."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5):
            await proc.wait()
