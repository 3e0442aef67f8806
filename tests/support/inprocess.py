"""In-process end-to-end harness: the bot built by ``create_app`` in the test's own event
loop, against the same loopback fakes as :class:`tests.support.harness.BotProcess`.

A bot subprocess pays 6–9 s of imports (aiogram rebuilds its pydantic models); here the
imports are paid once per pytest worker. Everything past the settings object is the real
bot: the migrations run (a new SQLite file is a copy of one migrated once per worker:
:func:`migrate_at_start`), :func:`bot.app.create_app` wires the real ledger on a SQLite
file, the real cascade talks HTTP to the provider fakes and aiogram long-polls the fake
Bot API. What needs a process stays with :class:`~tests.support.harness.BotProcess`: exit
codes, signals and the shutdown grace, crashes and restarts after a crash, migrations at
start, log redaction on stdout/stderr, ports.

The bot's log records (INFO and up, secrets redacted by :class:`bot.ops.logs.RedactSecrets`
as in a process) are kept for :meth:`InProcessBot.logs`, so a behaviour test can assert
on a log line as it would on a process's output.

:class:`InProcessBot` has the API the behaviour tests use on ``BotProcess`` (``start``,
``stop``, ``restart``, ``running``, ``returncode``), so a test module switches by fixture
(``app_factory`` in ``tests/e2e/conftest.py`` instead of ``bot_factory``)::

    async def test_start(app_factory: AppFactory, fake_telegram: FakeTelegram) -> None:
        bot = app_factory(env=...)
        await bot.start()

A stop is what SIGTERM does to the process (polling ends, the shutdown hooks drain the
work within SHUTDOWN_GRACE_SECONDS); :meth:`InProcessBot.kill` is refused, since a crash
needs a process.

With ``WEBHOOK_URL`` in the environment the bot runs in webhook mode
(:func:`bot.app.webhook.serve_webhook`, no signal handlers): it is ready once its
``/readyz`` answers 200, and :attr:`InProcessBot.webhook_url` is where the fake Bot API
delivers (``FakeTelegram.route_webhook``).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import shutil
import signal
import sqlite3
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource
from sqlalchemy.pool import Pool
from sqlalchemy.util import greenlet_spawn

from bot.app.factory import create_app
from bot.app.lifecycle import App
from bot.app.webhook import serve_webhook
from bot.ops.logs import RedactSecrets
from bot.settings import Settings
from bot.storage.migrate import migrate
from budget.kernel.clock import Clock
from budget.kernel.db import sqlite_path
from tests.support.harness import BotExited, wait_ready_url
from tests.support.telegram import FakeTelegram

__all__ = ["AppFactory", "InProcessBot", "second_replica", "settings_from_env"]


class _EnvSettings(Settings):
    """:class:`Settings` read from the given values only: no ``os.environ``, no ``.env``
    (the test runner's own variables never reach the bot)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def settings_from_env(env: Mapping[str, str]) -> Settings:
    """The settings a bot process would read from ``env`` (variable names as in
    ``.env.example``; variables that are not settings are ignored).

    Raises:
        pydantic.ValidationError: what ``python -m bot`` reports as a configuration error.
    """
    values: dict[str, Any] = {key.lower(): value for key, value in env.items()}
    return _EnvSettings(**values)


_template: Path | None = None
_template_lock = threading.Lock()


@asynccontextmanager
async def second_replica(env: Mapping[str, str]) -> AsyncIterator[App]:
    """Another composition root on ``env``'s (PostgreSQL) database beside the polling
    one, started (``on_startup``) but not polling: updates are fed to its dispatcher.
    Shut down and its bot session closed on the way out."""
    app = create_app(settings_from_env(env))
    await app.on_startup()
    try:
        yield app
    finally:
        await app.on_shutdown()
        await app.bot.session.close()


def _migrated_template() -> Path:
    """A SQLite file migrated to head by :func:`bot.storage.migrate.migrate`, once per process
    (its write-ahead log folded into the file, so the file alone is the database)."""
    global _template
    with _template_lock:
        if _template is None:
            folder = tempfile.mkdtemp(prefix="kopek-template-")
            atexit.register(shutil.rmtree, folder, True)
            path = Path(folder) / "head.db"
            migrate(f"sqlite+aiosqlite:///{path}")
            with sqlite3.connect(path) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()
            _template = path
        return _template


def migrate_at_start(database_url: str) -> None:
    """What the bot does at start, ``alembic upgrade head`` (blocking: run in a thread).

    A SQLite file that does not exist yet gets a copy of a template migrated once per
    worker (the same schema and ``alembic_version``; ~0.25 s of CPU saved a start, and
    ``tests/bot/test_migrations.py`` checks that head matches the models); any other
    database is migrated as the bot does it.
    """
    path = sqlite_path(database_url)
    if path is not None and not path.exists() and not path.with_name(path.name + "-wal").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_migrated_template(), path)
        return
    migrate(database_url)


#: Loggers quietened as :func:`bot.ops.logs.setup_logging` does in a process.
_QUIET = ("aiogram.event", "httpx", "alembic.runtime.plugins", "apscheduler")


class _LogCapture(logging.Handler):
    """Root handler that keeps the bot's formatted log lines (the process's stderr).

    Records are kept from INFO up: the root logger is set to INFO while it is installed
    (a process runs at ``LOG_LEVEL``, DEBUG in the tests; no behaviour test needs DEBUG
    lines, and formatting them would cost every test time), the loggers a process
    quietens are quietened, and both are restored by :meth:`uninstall`.
    """

    def __init__(self, lines: list[str], secrets: list[str]) -> None:
        super().__init__(logging.INFO)
        self.lines = lines
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.addFilter(RedactSecrets(secrets))
        self._levels: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def install(self) -> None:
        root = logging.getLogger()
        self._levels[""] = root.level
        root.setLevel(logging.INFO)
        for name in _QUIET:
            self._levels[name] = logging.getLogger(name).level
            logging.getLogger(name).setLevel(logging.WARNING)
        root.addHandler(self)

    def uninstall(self) -> None:
        root = logging.getLogger()
        root.removeHandler(self)
        for name, level in self._levels.items():
            (logging.getLogger(name) if name else root).setLevel(level)
        self._levels.clear()


class InProcessBot:
    """One in-process bot run (restartable: each start builds a new app on the same
    database, as a process restart does).

    Args:
        env: the environment a process would get (see
        :func:`~tests.support.harness.bot_environment`).
        telegram: the fake Bot API (readiness: ``getWebhookInfo`` then ``getUpdates``).
        log_dir: unused (kept for the factory's signature); logs go to pytest's capture.
        ready_timeout: seconds to wait for readiness.
        stop_timeout: seconds :meth:`stop` waits for polling and the shutdown hooks.
        clock: the bot's one clock (``None``: the system clock, as a process has), e.g.
            a clock running hours behind to play a process that ran before a downtime.
    """

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        telegram: FakeTelegram,
        log_dir: Path | None = None,
        ready_timeout: float = 30.0,
        stop_timeout: float = 30.0,
        clock: Clock | None = None,
    ) -> None:
        self.env = dict(env)
        self.clock = clock
        self.telegram = telegram
        self.log_dir = log_dir
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.runs = 0
        self.app: App | None = None
        self._task: asyncio.Task[None] | None = None
        self._returncode: int | None = None
        self._lines: list[str] = []
        self._capture: _LogCapture | None = None
        self._stop_webhook: asyncio.Event | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else f"stopped (rc={self.returncode})"
        return f"InProcessBot(runs={self.runs}, {state})"

    @property
    def running(self) -> bool:
        """True while polling has not ended."""
        return self._task is not None and not self._task.done()

    @property
    def returncode(self) -> int | None:
        """0 after a clean stop, 1 when polling ended with an error; ``None`` while running."""
        return None if self.running else self._returncode

    async def idle(self, timeout: float = 20.0) -> None:  # noqa: ASYNC109 - test deadline
        """Wait until every injected update was confirmed by an ``offset`` (so polling
        has made a handler task of each) and no update handler is running: a barrier
        after which whatever those updates were going to send was sent (polling mode;
        an answer kept for a flood wait is in the outbox, not covered). Polls every
        10 ms.

        Raises:
            TimeoutError: not idle within ``timeout`` seconds.
        """
        if self.app is None:
            raise RuntimeError("the bot was never started")
        tasks = self.app.dispatcher._handle_update_tasks  # aiogram's only handle on them
        async with asyncio.timeout(timeout):
            while self.telegram.pending_updates() or tasks:  # noqa: ASYNC110 - aiogram sets no event
                await asyncio.sleep(0.01)

    async def start(self) -> None:
        """Migrate, build the app and poll until the fake sees ``getUpdates``.

        Raises:
            BotExited: polling ended (with an error) before the bot was ready.
            TimeoutError: not ready within ``ready_timeout`` seconds (the bot is stopped).
        """
        if self.running:
            raise RuntimeError("the bot is already running")
        settings = settings_from_env(self.env)
        self.runs += 1
        if self._capture is None:
            self._capture = _LogCapture(self._lines, settings.secret_values())
            self._capture.install()
        self._returncode = None
        since = len(self.telegram.requests())
        await asyncio.to_thread(migrate_at_start, settings.database_url)
        app = create_app(settings, self.clock)
        self.app = app
        dp = app.dispatcher
        if settings.webhook_mode:
            self._stop_webhook = asyncio.Event()
            self._task = asyncio.create_task(
                serve_webhook(app, stop=self._stop_webhook, handle_signals=False)
            )
            ready = asyncio.ensure_future(
                wait_ready_url(f"{self._listen_url(settings)}/readyz", self.ready_timeout)
            )
        else:
            self._stop_webhook = None
            dp.startup.register(app.on_startup)
            dp.shutdown.register(app.on_shutdown)
            self._task = asyncio.create_task(
                dp.start_polling(
                    app.bot,
                    handle_signals=False,
                    close_bot_session=True,
                    tasks_concurrency_limit=settings.intake_max_concurrent,
                    polling_timeout=30,
                )
            )
            ready = asyncio.ensure_future(self._wait_ready(since))
        try:
            done, _ = await asyncio.wait(
                {ready, self._task},
                timeout=self.ready_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            ready.cancel()
            await asyncio.gather(ready, return_exceptions=True)
        if ready in done and not ready.cancelled() and ready.exception() is None:
            return
        if self._task.done():
            error = self._task.exception()
            self._returncode = 1
            raise BotExited(1, repr(error))
        await self.stop()
        raise TimeoutError(f"bot not ready within {self.ready_timeout} s")

    @staticmethod
    def _listen_url(settings: Settings) -> str:
        return f"http://{settings.webhook_listen_host}:{settings.webhook_listen_port}"

    @property
    def webhook_url(self) -> str:
        """Where this bot takes webhook deliveries (its listen address and path)."""
        settings = settings_from_env(self.env)
        return f"{self._listen_url(settings)}{settings.webhook_path}"

    async def _wait_ready(self, since: int) -> None:
        hook = await self.telegram.wait_request(
            "getWebhookInfo", timeout=self.ready_timeout, since=since
        )
        await self.telegram.wait_request("getUpdates", timeout=self.ready_timeout, since=hook.seq)

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stop as SIGTERM/SIGINT would (``sig`` is accepted for the process API: both
        mean the same); returns 0 after a clean stop, 1 when polling raised.

        Raises:
            TimeoutError: polling and the shutdown hooks took over ``stop_timeout`` seconds.
        """
        if self._task is None or self.app is None:
            raise RuntimeError("the bot was never started")
        pool = self.app.engine.pool  # the shutdown's dispose replaces it; see _exit
        if self._stop_webhook is not None:
            self._stop_webhook.set()
        elif not self._task.done():
            await self.app.dispatcher.stop_polling()
        try:
            async with asyncio.timeout(self.stop_timeout):
                await asyncio.gather(self._task, return_exceptions=True)
        except TimeoutError:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            raise TimeoutError(f"bot did not stop within {self.stop_timeout} s") from None
        failed = self._task.cancelled() or self._task.exception() is not None
        await self._exit(pool)
        self._stop_capture()
        self._returncode = 1 if failed else 0
        return self._returncode

    async def _exit(self, pool: Pool) -> None:
        """What the end of the process does: update handlers still running after the
        shutdown hooks are cancelled (aiogram does not await them; its private set is
        the only handle on them), and the connections they returned — to the pool the
        shutdown disposed, or to the fresh one — are closed (a process just exits)."""
        assert self.app is not None
        leftover = list(self.app.dispatcher._handle_update_tasks)
        for task in leftover:
            task.cancel()
        await asyncio.gather(*leftover, return_exceptions=True)
        await greenlet_spawn(pool.dispose)
        await self.app.engine.dispose()

    async def restart(self, sig: int = signal.SIGTERM) -> int:
        """Stop (returns that run's code) and start again until ready."""
        code = await self.stop(sig)
        await self.start()
        return code

    async def kill(self) -> None:
        """Refused: a crash (no shutdown code at all) needs a process; use
        ``process_factory``."""
        raise TypeError("an in-process bot cannot crash; use process_factory for kill tests")

    def logs(self) -> str:
        """The log lines of every run so far (INFO and up, secrets redacted), one a line:
        what a process would have written to stderr."""
        return "\n".join(self._lines)

    async def aclose(self) -> None:
        """Stop if still running and stop capturing logs (fixture teardown)."""
        try:
            if self.running:
                await self.stop()
        finally:
            self._stop_capture()

    def _stop_capture(self) -> None:
        if self._capture is not None:
            self._capture.uninstall()
            self._capture = None


#: The ``app_factory`` fixture: ``(env=None, **InProcessBot kwargs) -> InProcessBot``.
AppFactory = Callable[..., InProcessBot]
