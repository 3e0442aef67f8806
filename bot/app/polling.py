"""The process's course: checks, instance lock, migrations, :func:`bot.app.factory.create_app`,
long polling — or, with ``WEBHOOK_URL`` set, the webhook server (:mod:`bot.app.webhook`) —
until SIGTERM/SIGINT, and the exit code (:func:`run`).

aiogram (and so :mod:`bot.app.factory`) is imported only once the checks, the lock and the
migrations have passed: its import costs seconds (its types build their pydantic models),
and a setting that cannot work is reported without paying them.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from bot.app.database import start_failure
from bot.app.preflight import check_database, check_settings
from bot.ops.logs import redact
from bot.settings import Settings
from bot.storage.migrate import migrate
from budget.errors import BudgetConfigError, ProcessFenced
from budget.kernel import instance_lock
from budget.kernel.clock import SystemClock
from budget.kernel.db import sqlite_path
from budget.kernel.schema import SchemaMismatch

if TYPE_CHECKING:
    from bot.app.lifecycle import App

__all__ = ["run"]

log = logging.getLogger("bot.app.factory")  # the name before the split: log lines unchanged


def _fail(message: str, settings: Settings) -> None:
    """One line on stderr, with every secret removed (line breaks of a library's
    message become spaces, so the line stays one)."""
    secrets = settings.secret_values()
    line = " ".join(redact(message, secrets).split())
    print(f"kopek: {line}", file=sys.stderr)


async def _migrate_shielded(database_url: str) -> bool:
    """Apply migrations with SIGTERM/SIGINT deferred until they are done (a signal would
    otherwise kill the process mid-migration). Returns True when a stop was requested."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.to_thread(migrate, database_url)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    return stop.is_set()


async def run(settings: Settings) -> int:
    """Migrate, build, poll until SIGTERM/SIGINT; returns the exit code.

    On SQLite the database's instance lock (:mod:`budget.kernel.instance_lock`) is taken first,
    before migrations and before the ledger sweeps holds: a second process on the same
    file exits 2 naming the file and the holder's PID, and touches nothing. On
    PostgreSQL several processes share the database: the migrations run under an
    advisory lock (:mod:`bot.storage.migrate`) and no instance lock is taken.

    Exit codes: 0 after a clean stop; 2 for configuration the bot cannot run with
    (database URL, database in use by another process, a schema ahead of this code, a
    refused database login, token refused by Telegram, prices, a webhook set for the
    token while this process would poll); 1 when Telegram asks the start to wait longer
    than it waits (:mod:`bot.app.start_waits`), when Telegram or the
    PostgreSQL server cannot be reached at start, Telegram answers with something that
    is not a Telegram response, anything unexpected ends the bot, or another process
    took this one for dead (PostgreSQL: its heartbeat late by more than
    ``PROCESS_DEAD_AFTER_SECONDS``; :mod:`bot.session.fence`) — the supervisor restarts it. Each
    failure is
    one line on stderr, secrets redacted (:mod:`bot.app.database`).
    """
    problem = check_settings(settings, SystemClock())
    if problem is not None:
        _fail(problem, settings)
        return 2
    path = sqlite_path(settings.database_url)
    if path is None:  # PostgreSQL (settings accept nothing else): no instance lock
        return await _run_locked(settings)
    problem = await asyncio.to_thread(check_database, path)
    if problem is not None:
        _fail(f"configuration error in DATABASE_URL: cannot write {path}: {problem}", settings)
        return 2
    try:
        lock = instance_lock.acquire(path)
    except instance_lock.InstanceLocked as exc:
        _fail(f"{exc}; only one bot may run on a database file", settings)
        return 2
    except OSError as exc:
        _fail(f"cannot lock the database {path}: {type(exc).__name__}: {exc}", settings)
        return 2
    try:
        return await _run_locked(settings)
    finally:
        lock.release()


async def _run_locked(settings: Settings) -> int:
    try:
        if await _migrate_shielded(settings.database_url):
            return 0
    except (SchemaMismatch, OSError, SQLAlchemyError) as exc:
        code, line = start_failure(exc, settings.database_url)
        _fail(line, settings)
        return code
    return await _poll(settings)


async def _poll(settings: Settings) -> int:
    """Build the bot, then poll (or serve the webhook) until stopped; the exit code.
    aiogram is imported here, after every check has passed (see the module docstring)."""
    from bot.app.factory import create_app

    try:
        app = create_app(settings)
    except (BudgetConfigError, ValueError) as exc:
        _fail(f"configuration error: {exc}", settings)
        return 2
    try:
        await _serve(app, settings)
    except ProcessFenced as exc:  # taken for dead by another: stopped, nothing drained
        _fail(str(exc), settings)
        return 1
    except Exception as exc:  # noqa: BLE001 - each gets its line; _start_failure logs the unforeseen
        code, line = _start_failure(exc, settings)
        _fail(line, settings)
        await app.close_after_failed_start()
        return code
    return 0


async def _serve(app: App, settings: Settings) -> None:
    """Long polling until SIGTERM/SIGINT, or with ``WEBHOOK_URL`` the webhook server.

    Raises:
        ProcessFenced: polling was stopped by the fence (:mod:`bot.session.fence`).
    """
    if settings.webhook_mode:
        from bot.app.webhook import serve_webhook

        await serve_webhook(app)
        return
    from bot.session.fence import FENCED_EXIT

    dp = app.dispatcher
    dp.startup.register(app.on_startup)
    dp.shutdown.register(app.on_shutdown)
    await dp.start_polling(
        app.bot,
        handle_signals=True,
        close_bot_session=True,
        tasks_concurrency_limit=settings.intake_max_concurrent,
        polling_timeout=30,
    )
    if app.fenced.is_set():
        raise ProcessFenced(FENCED_EXIT)


def _start_failure(exc: Exception, settings: Settings) -> tuple[int, str]:
    """The exit code and the one line for ``exc``, which ended the bot before or while it
    ran: 2 for configuration it cannot run with, 1 for what a restart may cure."""
    from aiogram.exceptions import (
        ClientDecodeError,
        TelegramAPIError,
        TelegramNetworkError,
        TelegramUnauthorizedError,
    )

    from bot.app.lifecycle import WebhookIsSet
    from bot.app.start_waits import StartFloodWait

    api = settings.telegram_api_base
    if isinstance(exc, SchemaMismatch):  # a newer version migrated since this one's migrations
        return 2, start_failure(exc, settings.database_url)[1]
    if isinstance(exc, WebhookIsSet):  # polling would take a webhook fleet's updates
        return 2, str(exc)
    if isinstance(exc, StartFloodWait):  # a 429 beyond what a start waits: the supervisor retries
        return 1, str(exc)
    if isinstance(exc, TelegramUnauthorizedError):
        return 2, "Telegram refused BOT_TOKEN (401 Unauthorized): check it with @BotFather"
    if isinstance(exc, TelegramNetworkError):
        return 1, f"cannot reach the Bot API at {api}: {exc.message}"
    if isinstance(exc, ClientDecodeError):
        # A proxy's error page or a typo'd URL: the body may echo the request path,
        # which holds the token, so none of it is printed.
        return 1, (
            f"the Bot API at {api} answered with something that is "
            "not a Telegram response: check TELEGRAM_API_BASE"
        )
    if isinstance(exc, TelegramAPIError):
        return 1, f"the Bot API at {api} refused to start: {exc.message}"
    if isinstance(exc, OSError):  # the metrics or webhook port cannot be bound
        return 2, f"cannot start: {type(exc).__name__}: {exc}"
    # last resort: one redacted line, not a trace
    log.debug("the bot failed", exc_info=exc)
    return 1, f"failed: {type(exc).__name__} (the redacted trace is logged at DEBUG)"
