"""End-to-end harness: the bot as a real subprocess against the loopback fakes.

:class:`BotProcess` starts ``python -m bot`` (or any command, e.g. the tiny aiogram bot in
``tests/support/echo_bot.py``) with an environment built by :func:`bot_environment` that
points every external peer at a fake on 127.0.0.1. Readiness is read from the fake Bot
API, not from the bot's output: the bot is ready once it has asked ``getWebhookInfo`` (the
echo bot: called ``deleteWebhook``) and then ``getUpdates``. stdout/stderr of every run go
to files (see :meth:`BotProcess.logs`) so a test can check, e.g., that the token never
appears in them. ``python -m bot`` runs are forked from a server that has imported the
bot's modules once (:mod:`tests.support.zygote`; ~4.5 s of CPU saved a start),
unless a test asks for a ``fresh`` interpreter.

Typical use goes through the fixtures of ``tests/e2e/conftest.py``::

    async def test_start(bot: BotProcess, fake_telegram: FakeTelegram) -> None:
        mark = fake_telegram.mark()
        fake_telegram.inject_message(42, "/start")
        [reply] = await fake_telegram.wait_sent(42, since=mark)
        assert await bot.stop() == 0
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import socket
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from aiohttp import ClientError, ClientSession, ClientTimeout

from tests.support.forked import ForkedProcess, run_module, spawn_bot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, RecordedRequest

__all__ = [
    "REPO_ROOT",
    "BotExited",
    "BotFactory",
    "BotProcess",
    "bot_environment",
    "every_message_closed",
    "free_port",
    "paid_only_environment",
    "run_bot_to_exit",
    "wait_provider_requests",
    "wait_ready_url",
    "without_sdk_providers",
]

#: The repository root (where ``python -m bot`` is run from).
REPO_ROOT = Path(__file__).resolve().parents[2]

#: the Bot API call made before polling starts: Kopek's check, the echo bot's delete
_WEBHOOK_CHECKS = ("getWebhookInfo", "deleteWebhook")
#: Variables of the test runner's environment the bot may see; everything else
#: (a developer's real provider keys, BOT_TOKEN...) is left out.
_PASSTHROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TEMP", "TMP", "SYSTEMROOT", "TZ")


class BotExited(RuntimeError):
    """The bot process ended before it was ready (its log tail is in the message).

    Attributes:
        returncode: the process exit code.
    """

    def __init__(self, returncode: int, log_tail: str) -> None:
        super().__init__(f"bot exited with code {returncode} before it was ready:\n{log_tail}")
        self.returncode = returncode


#: Deadline for a bot process to start polling or to exit by itself, seconds: a deadline
#: for a hung process only (a healthy start takes ~2-8 s). Measured: with three other
#: full suites on the same 2 cores (load average 14), starts took over 60 and 90 s.
READY_TIMEOUT_S = 180.0


def bot_environment(
    *,
    telegram: FakeTelegram,
    database_path: Path,
    web_base: str | None = None,
    provider_base_urls: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment for a bot run against the fakes (see ``.env.example``).

    Args:
        telegram: the fake Bot API (gives BOT_TOKEN and TELEGRAM_API_BASE).
        database_path: SQLite file for DATABASE_URL (created by the bot's migrations).
        web_base: TELEGRAM_WEB_BASE (the fake t.me), if any.
        provider_base_urls: ``{"groq"|"mistral"|"cerebras"|"deepseek": base URL}`` from the
            provider fake; every provider listed gets a fake key (Groq gets two). Without
            it, one Groq key points at a closed loopback port, so the settings validate
            and every LLM call fails fast.
        extra: more variables (they win), e.g. ``{"ADMIN_IDS": "1"}``.

    Returns:
        A complete environment: only a few neutral variables of the runner pass through.
    """
    env = {k: os.environ[k] for k in _PASSTHROUGH if k in os.environ}
    env.update(
        {
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONUNBUFFERED": "1",
            # PYTHONDONTWRITEBYTECODE is left out: each bot process would compile all of
            # bot/, llm/, budget/ and scheduler/ again (~1 s CPU a start); with it out, the
            # first process writes __pycache__ (git-ignored) and the others read it
            "BOT_TOKEN": telegram.token,
            "TELEGRAM_API_BASE": telegram.base_url,
            "DATABASE_URL": f"sqlite+aiosqlite:///{database_path}",
            "LOG_LEVEL": "DEBUG",
            # answers in one piece unless a test asks for streaming (tests/e2e/test_stream*.py)
            "STREAM_MODE_PRIVATE": "off",
            "STREAM_MODE_GROUP": "off",
            # no extraction worker kept ready (~0.7 s of CPU each): a bot of a test that
            # reads a document starts one for it
            "DOCUMENT_EXTRACT_PREWARM": "0",
            # the operator's alerts and reports only where a test asks for them
            # (tests/e2e/test_ops_*.py): they come on their own timer, and a daily report
            # is due at start after REPORT_TIME, so they would depend on the time of day
            "ALERT_AT": "",
            "REPORT_TIME": "",
            "LOOP_ALERT_CALLS": "0",
            "QUOTA_ALERT_MINUTES": "0",
            "COST_ALERT_RATIO": "0",
        }
    )
    if web_base is not None:
        env["TELEGRAM_WEB_BASE"] = web_base
    urls = dict(provider_base_urls or {})
    if not urls:
        env["GROQ_API_KEY"] = "gsk_fake_groq_key_1"
        env["GROQ_BASE_URL"] = "http://127.0.0.1:9"  # discard port: connection refused
    if "groq" in urls:
        env["GROQ_API_KEY"] = "gsk_fake_groq_key_1"
        env["GROQ_API_KEY_2"] = "gsk_fake_groq_key_2"
        env["GROQ_BASE_URL"] = urls["groq"]
    for name in ("mistral", "cerebras", "deepseek"):
        if name in urls:
            env[f"{name.upper()}_API_KEY"] = f"fake_{name}_key"
            env[f"{name.upper()}_BASE_URL"] = urls[name]
    env.update(extra or {})
    return env


def paid_only_environment(
    telegram: FakeTelegram,
    providers: FakeProviders,
    database_path: Path,
    bill: Mapping[str, int],
    **extra: str,
) -> dict[str, str]:
    """The environment of a bot whose only provider is the fake DeepSeek (the paid
    anchor), which reports ``bill`` (``prompt_tokens``, ``completion_tokens``) for every
    call: the crash tests' set-up, where every answer costs money. ``extra``: more
    variables, e.g. ``POLL_INTAKE_WAIT_SECONDS="3600"``."""
    providers.default("deepseek", dict(bill))
    return bot_environment(
        telegram=telegram,
        database_path=database_path,
        provider_base_urls={"deepseek": providers.base_urls["deepseek"]},
        extra=extra,
    )


def every_message_closed(telegram: FakeTelegram, database_path: Path) -> bool:
    """No update waits at the fake Bot API, and every chat with an intake record
    (``seen_messages`` of the SQLite ledger at ``database_path``, read beside the running
    bot) was sent a message: an answer or the resend template. For ``wait_until``."""
    conn = sqlite3.connect(database_path)
    try:
        taken_in = {row[0] for row in conn.execute("SELECT chat_id FROM seen_messages")}
    finally:
        conn.close()
    replied = {m.chat_id for m in telegram.sent_events() if m.method == "sendMessage"}
    return not telegram.pending_updates() and taken_in <= replied


def without_sdk_providers(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the Groq and Mistral variables (Cerebras and DeepSeek keep theirs):
    a bot process that ends before any LLM call then never imports those two SDKs, which
    cost ~1.4 s CPU of each start (``llm/cascade/factory.py`` imports a family's SDK only when it
    has a key)."""
    return {k: v for k, v in env.items() if not k.startswith(("GROQ_", "MISTRAL_"))}


class BotProcess:
    """One bot subprocess (restartable) with captured output.

    Args:
        env: the full environment (see :func:`bot_environment`).
        telegram: the fake Bot API the bot talks to (used to detect readiness).
        log_dir: where ``run<N>.stdout`` / ``run<N>.stderr`` are written.
        argv: the command (default ``[sys.executable, "-m", "bot"]``). That command, or
            ``[sys.executable, "SCRIPT.py", ...]``, is forked from the fork server
            (:mod:`tests.support.forked`) unless ``fresh``; any other is exec'd.
        cwd: working directory; default the repository root, or ``log_dir`` when the
            root has a ``.env`` (a developer's settings must never leak into a test).
        ready_timeout: seconds to wait for ``getWebhookInfo`` (or ``deleteWebhook``) +
            ``getUpdates``.
        stop_timeout: seconds :meth:`stop` waits after the signal before SIGKILL.
        ready_url: a webhook replica's ``/readyz``: the bot is ready once it answers 200
            (instead of ``getWebhookInfo`` + ``getUpdates``, which a webhook bot never
            calls).
        fresh: exec a new interpreter instead of forking one that has imported the
            bot's modules (for tests of the start itself; a fresh
            start costs ~4.5 s more CPU).
        nofile: the process's descriptor limit (``RLIMIT_NOFILE``, soft and hard), as
            ``prlimit --nofile=N`` sets it; ``None``: the test runner's.
    """

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        telegram: FakeTelegram,
        log_dir: Path,
        argv: Sequence[str] | None = None,
        cwd: Path | None = None,
        ready_timeout: float = READY_TIMEOUT_S,
        stop_timeout: float = 30.0,
        ready_url: str | None = None,
        fresh: bool = False,
        nofile: int | None = None,
    ) -> None:
        self.env = dict(env)
        self.nofile = nofile
        self.ready_url = ready_url
        self.telegram = telegram
        self.log_dir = log_dir
        self.argv = list(argv) if argv is not None else [sys.executable, "-m", "bot"]
        # ``python -m bot ...`` and ``python SCRIPT.py ...`` are forked unless ``fresh``
        python = not fresh and len(self.argv) >= 2 and self.argv[0] == sys.executable
        self._script = self.argv[1] if python and self.argv[1].endswith(".py") else None
        self.forked = python and (self._script is not None or self.argv[1:3] == ["-m", "bot"])
        if cwd is None:
            cwd = log_dir if (REPO_ROOT / ".env").exists() else REPO_ROOT
        self.cwd = cwd
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.runs = 0
        self._proc: asyncio.subprocess.Process | ForkedProcess | None = None
        self._files: list[IO[bytes]] = []
        self._log_paths: list[tuple[Path, Path]] = []

    def __repr__(self) -> str:
        state = "running" if self.running else f"stopped (rc={self.returncode})"
        return f"BotProcess({' '.join(self.argv[-2:])!r}, runs={self.runs}, {state})"

    @property
    def running(self) -> bool:
        """True while the current process has not exited."""
        return self._proc is not None and self._proc.returncode is None

    @property
    def returncode(self) -> int | None:
        """Exit code of the last run, ``None`` while running or before the first."""
        return None if self._proc is None else self._proc.returncode

    @property
    def pid(self) -> int | None:
        """Process id of the current run."""
        return None if self._proc is None else self._proc.pid

    async def spawn(self) -> None:
        """Start the process without waiting for readiness (for exit-code tests)."""
        if self.running:
            raise RuntimeError("the bot is already running")
        self._close_files()
        self.runs += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        out_path = self.log_dir / f"run{self.runs}.stdout"
        err_path = self.log_dir / f"run{self.runs}.stderr"
        self._log_paths.append((out_path, err_path))
        out, err = out_path.open("wb"), err_path.open("wb")
        self._files = [out, err]
        if self.forked:
            self._proc = await spawn_bot(
                self.argv[2:] if self._script else self.argv[3:],
                env=self.env,
                cwd=self.cwd,
                stdout=out.fileno(),
                stderr=err.fileno(),
                script=self._script,
                nofile=self.nofile,
            )
        else:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                preexec_fn=None if self.nofile is None else self._limit_descriptors,
            )
        self._close_files()  # the child has its own copies of the descriptors

    def _limit_descriptors(self) -> None:
        """In the child, before its exec: the descriptor limit ``nofile``."""
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    async def start(self) -> None:
        """Start the process and wait until it polls the fake Bot API.

        Raises:
            BotExited: the process ended first (the log tail is in the message).
            TimeoutError: not ready within ``ready_timeout`` seconds (the process is killed).
        """
        since = len(self.telegram.requests())
        await self.spawn()
        assert self._proc is not None
        ready = asyncio.ensure_future(self._wait_ready(since))
        exited = asyncio.ensure_future(self._proc.wait())
        try:
            done, _ = await asyncio.wait(
                {ready, exited}, timeout=self.ready_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (ready, exited):
                task.cancel()
            await asyncio.gather(ready, exited, return_exceptions=True)
        if ready in done and not ready.cancelled() and ready.exception() is None:
            return
        if self._proc.returncode is not None:
            raise BotExited(self._proc.returncode, self.log_tail())
        await self.kill()
        raise TimeoutError(f"bot not ready within {self.ready_timeout} s:\n{self.log_tail()}")

    async def _wait_ready(self, since: int) -> None:
        if self.ready_url is not None:
            await wait_ready_url(self.ready_url, self.ready_timeout)
            return

        # Kopek asks getWebhookInfo before polling; the echo bot calls deleteWebhook
        def hook() -> RecordedRequest | None:
            return next(
                (r for r in self.telegram.requests()[since:] if r.method in _WEBHOOK_CHECKS), None
            )

        first = await self.telegram.wait_until(hook, timeout=self.ready_timeout)
        await self.telegram.wait_request("getUpdates", timeout=self.ready_timeout, since=first.seq)

    async def wait_exit(self, timeout: float = 30.0) -> int:  # noqa: ASYNC109 - test deadline
        """Wait for the process to end on its own; returns its exit code.

        Raises:
            TimeoutError: still running after ``timeout`` seconds (it is left running).
        """
        if self._proc is None:
            raise RuntimeError("the bot was never started")
        async with asyncio.timeout(timeout):
            code = await self._proc.wait()
        self._close_files()
        return code

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` and wait for the exit; returns the exit code.

        After ``stop_timeout`` seconds the process is killed and :class:`TimeoutError`
        raised (a bot that ignores SIGTERM is a bug the test should see).
        """
        if self._proc is None:
            raise RuntimeError("the bot was never started")
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)
            try:
                return await self.wait_exit(self.stop_timeout)
            except TimeoutError:
                await self.kill()
                raise TimeoutError(
                    f"bot ignored signal {sig} for {self.stop_timeout} s:\n{self.log_tail()}"
                ) from None
        self._close_files()
        return self._proc.returncode

    async def kill(self) -> None:
        """SIGKILL the process (a crash: no shutdown code runs) and reap it."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self._proc.wait()
        self._close_files()

    async def restart(self, sig: int = signal.SIGTERM) -> int:
        """Stop with ``sig`` (returns that run's exit code) and start again until ready."""
        code = await self.stop(sig)
        await self.start()
        return code

    def stdout(self, run: int | None = None) -> str:
        """Standard output of one run (1-based; default the latest)."""
        return self._read(run, 0)

    def stderr(self, run: int | None = None) -> str:
        """Standard error of one run (1-based; default the latest)."""
        return self._read(run, 1)

    def logs(self) -> str:
        """stdout and stderr of every run so far, concatenated."""
        parts: list[str] = []
        for out, err in self._log_paths:
            for path in (out, err):
                if path.exists():
                    parts.append(path.read_text(encoding="utf-8", errors="replace"))
        return "\n".join(parts)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of :meth:`logs` (for failure messages)."""
        return "\n".join(self.logs().splitlines()[-lines:])

    def _read(self, run: int | None, index: int) -> str:
        if not self._log_paths:
            return ""
        path = self._log_paths[(run or len(self._log_paths)) - 1][index]
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def _close_files(self) -> None:
        for f in self._files:
            f.close()
        self._files = []


#: The ``bot_factory`` fixture: ``(argv=None, env=None, **BotProcess kwargs) -> BotProcess``.
BotFactory = Callable[..., BotProcess]


async def wait_provider_requests(fake: FakeProviders, count: int, timeout: float = 20.0) -> None:  # noqa: ASYNC109 - test deadline
    """Wait until the provider fake has received ``count`` requests.

    The provider fake has no change notification, so this polls every 20 ms.

    Raises:
        TimeoutError: fewer requests arrived within ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(fake.requests) < count:
        if loop.time() > deadline:
            raise TimeoutError(f"{len(fake.requests)} of {count} provider requests arrived")
        await asyncio.sleep(0.02)


async def wait_ready_url(url: str, timeout: float = READY_TIMEOUT_S) -> None:  # noqa: ASYNC109 - test deadline
    """Wait until ``GET url`` answers 200 (a replica's ``/readyz``), asking every 50 ms.

    Raises:
        TimeoutError: no 200 within ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with ClientSession(timeout=ClientTimeout(total=5)) as http:
        while True:
            try:
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return
            except (OSError, ClientError, TimeoutError):
                pass
            if loop.time() > deadline:
                raise TimeoutError(f"{url} did not answer 200 within {timeout} s")
            await asyncio.sleep(0.05)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS's choice; a bot binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def run_bot_to_exit(
    env: Mapping[str, str],
    cwd: Path,
    timeout: float = READY_TIMEOUT_S,  # noqa: ASYNC109 - test deadline
    *,
    fresh: bool = False,
) -> tuple[int, str]:
    """Run ``python -m bot`` expecting it to end by itself (a start-up failure).

    Args:
        env: the environment (``PYTHONPATH`` is set to the repository root).
        cwd: the working directory; an empty folder, so a developer's ``.env`` in the
            repository cannot supply missing settings.
        timeout: seconds before the process is killed and :class:`TimeoutError` raised.
        fresh: exec a new interpreter instead of forking one from the fork server
            (:mod:`tests.support.forked`), for tests of what the start imports.

    Returns:
        (exit code, stdout then stderr, concatenated).
    """
    env = dict(env, PYTHONPATH=str(REPO_ROOT))
    if not fresh:
        code, out, err = await run_module("bot", [], env=env, cwd=cwd, timeout=timeout)
        return code, out + err
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "bot"),
            cwd=str(cwd),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
        try:
            await asyncio.wait_for(proc.wait(), timeout=timeout)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        stdout.seek(0)
        stderr.seek(0)
        output = stdout.read() + stderr.read()
    assert proc.returncode is not None
    return proc.returncode, output.decode()
