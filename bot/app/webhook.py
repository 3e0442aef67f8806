"""Webhook mode: Telegram POSTs each update to ``WEBHOOK_URL`` (the operator's TLS reverse
proxy), which forwards it to ``WEBHOOK_LISTEN_HOST:WEBHOOK_LISTEN_PORT`` + ``WEBHOOK_PATH``
of one of several replicas sharing one PostgreSQL database.

The request handler follows aiogram's ``aiogram.webhook.aiohttp_server.SimpleRequestHandler``
(secret check with :func:`secrets.compare_digest`, the update fed to the dispatcher in a
background task, an empty JSON 200), with what Kopek needs on top:

* **Strangers cannot starve the port** (``docs/webhook.md``): connections are capped
  below the descriptor limit and must send their first request head within
  ``WEBHOOK_HEADER_TIMEOUT_SECONDS`` (:mod:`bot.app.connections`); a body must arrive
  within ``WEBHOOK_BODY_TIMEOUT_SECONDS`` (else 408, closed, counted as
  ``kopek_dropped{reason="webhook_body_timeout"}``) and hold at most
  ``WEBHOOK_MAX_BODY_BYTES``; a kept-alive connection waits at most
  ``WEBHOOK_IDLE_TIMEOUT_SECONDS`` for its next request.
* **401 without the secret.** A request whose ``X-Telegram-Bot-Api-Secret-Token`` is not
  ``WEBHOOK_SECRET`` gets 401 and is not read further (counted as
  ``kopek_dropped{reason="webhook_secret"}``; the first one is logged at WARNING). The
  header's bytes are compared, so bytes beyond ASCII are a wrong secret like any other.
* **200 for what no retry can read.** Telegram redelivers anything but a 2xx: a body
  that is not JSON, nested deeper than :data:`bot.session.update_json.MAX_DEPTH`, holding an
  integer beyond 64 bits, longer than ``WEBHOOK_MAX_BODY_BYTES`` or of a shape this
  aiogram rejects is skipped with a 200, counted as
  ``kopek_dropped{reason="undecodable_update"}`` and logged (WARNING) with its id and where.
* **200 once the update is durably taken in.** A chat message's intake row
  (``seen_messages``, unique on ``(chat_id, message_id)``, :meth:`bot.storage.repos.Intake.record`)
  is committed *before* the answer: a duplicate — Telegram retrying, or the same update
  reaching a second replica — finds the row, gets 200 and is not processed (one provider
  call, one answer). The work continues in a task; the intake middleware records its
  outcome (:class:`bot.middlewares.intake.TakenIn`); a message the pipeline dropped before that
  (over the update rate) is recorded ``dropped``, so no one is asked to resend it. When
  the database cannot be written the answer is 503 (Telegram delivers it again later),
  except for a read-only command (``/budget``), which runs as in polling mode.
* **Back-pressure.** At most ``INTAKE_MAX_CONCURRENT`` updates are handled at once, as in
  polling, fewer while the event loop lags (the intake window,
  :mod:`bot.app.intake_window`; waiting requests take their slots in arrival order); a
  request waits for a slot before its intake, so a saturated replica answers
  slowly instead of taking in more than it can handle. A control that only stops work
  (an admin's ``/kill``, ``/stop``, the Stop button: the handlers exempt from the update
  rate) skips that wait, so it is not queued behind the answers it stops.
* **503 while starting or stopping**, and ``/healthz`` / ``/readyz`` on the same server
  (:mod:`bot.ops.health`), and the operator dashboard under DASHBOARD_URL's path when it
  is set (:mod:`bot.ops.dashboard`), behind the same connection limits.

Shutdown (SIGTERM/SIGINT, :func:`serve_webhook`): ``/readyz`` turns 503 and the listening
socket closes (the proxy sends new requests to the other replicas; Telegram retries what
no one took), then the work drains as in polling mode (in-flight chat calls get
``SHUTDOWN_GRACE_SECONDS``, streams still running are stopped, then cancelled), then the
shutdown hooks close the stores. The webhook stays registered with Telegram: stopping
one replica never calls ``deleteWebhook``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import signal
from collections.abc import Coroutine
from typing import Any, Literal

from aiogram.methods import TelegramMethod
from aiogram.types import Message, Update
from aiohttp import web
from pydantic import ValidationError

from bot.app.connections import (
    DROP_LOG_EVERY_S,
    RESERVED_DESCRIPTORS,
    ConnectionGuard,
    DropLog,
    GuardedSite,
    connection_cap,
)
from bot.app.lifecycle import App
from bot.chat.payer import payer_id
from bot.middlewares.context import IntakeStatus
from bot.middlewares.intake import TakenIn, reads_only
from bot.middlewares.topics import topic_of
from bot.ops.health import add_health_routes
from bot.ops.http_log import server_log
from bot.session.fence import FENCED_EXIT
from bot.session.update_json import UndecodableJson, load_checked
from bot.storage.repos import is_storage_failure
from bot.text.i18n import pick_language
from budget.errors import ProcessFenced
from budget.kernel.tasks import ended_within

__all__ = ["SECRET_HEADER", "WebhookServer", "serve_webhook"]

log = logging.getLogger(__name__)

#: a header shaped like a secret_token Telegram accepts (a scanner's request usually
#: sends none): refused with a louder line, see ``WebhookServer._refuse``
_SECRET_SHAPE = re.compile(r"[A-Za-z0-9_-]{16,256}")
#: seconds between two ERROR lines about requests with another secret
OTHER_SECRET_EVERY_S = 60

#: The header Telegram sends ``secret_token`` in.
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 - a header name

#: Seconds the handler tasks still running after the chat drain get before they are
#: cancelled (they are past their provider call: sending a reply, recording an outcome).
TASK_WAIT_S = 5.0


class WebhookServer:
    """The aiohttp server of one replica: the webhook path and the health endpoints.

    Args:
        app: the built bot (:func:`bot.app.factory.create_app`); its settings give the address,
            the path and the secret.

    Use :meth:`start` (bind; the webhook answers 503 until ``app.readiness`` is
    started), then :meth:`drain` on shutdown, or :meth:`close` after a failed start.
    """

    def __init__(self, app: App) -> None:
        settings = app.settings
        if settings.webhook_secret is None:  # settings refuse WEBHOOK_URL without it
            raise ValueError("webhook mode needs WEBHOOK_SECRET")
        self._app = app
        # the validated secret is ASCII: compared as bytes with what the header holds
        self._secret = settings.webhook_secret.get_secret_value().encode()
        self._slots = app.intake_window  # INTAKE_LAG_TARGET_MS, bot/app/intake_window.py
        self._tasks: set[asyncio.Task[None]] = set()
        self._runner: web.AppRunner | None = None
        self._site: GuardedSite | None = None
        self._guard: ConnectionGuard | None = None
        self._slow_bodies = DropLog(
            "webhook requests answered 408: body not read within "
            f"{settings.webhook_body_timeout_seconds:g} s",
            app.clock.monotonic,
            DROP_LOG_EVERY_S,
        )
        self._refused = 0
        self._other_secret_at = -float(OTHER_SECRET_EVERY_S)
        self.taken = 0
        self.duplicates = 0

    def __repr__(self) -> str:
        return (
            f"WebhookServer(state={self._app.readiness.state!r}, taken={self.taken}, "
            f"duplicates={self.duplicates}, refused={self._refused}, tasks={len(self._tasks)})"
        )

    @property
    def port(self) -> int | None:
        """The bound TCP port (after :meth:`start`)."""
        if self._runner is None or not self._runner.addresses:
            return None
        return int(self._runner.addresses[0][1])

    async def start(self) -> None:
        """Bind ``WEBHOOK_LISTEN_HOST:WEBHOOK_LISTEN_PORT`` and serve.

        Raises:
            OSError: the address cannot be bound (the port is taken), or the descriptor
                limit leaves too few connections (:func:`bot.app.connections.connection_cap`).
        """
        settings = self._app.settings
        dropped = self._app.dropped
        self._guard = guard = ConnectionGuard(
            cap=connection_cap(settings.webhook_max_open_connections),
            header_timeout_s=settings.webhook_header_timeout_seconds,
            on_drop=lambda reason: dropped.labels(reason).inc(),
            clock=self._app.clock.monotonic,
        )
        web_app = web.Application(
            client_max_size=settings.webhook_max_body_bytes, middlewares=[guard.middleware]
        )
        web_app.router.add_post(settings.webhook_path, self.handle)
        add_health_routes(web_app, lambda: self._app.readiness)
        if self._app.dashboard is not None:  # DASHBOARD_URL's path (bot/ops/dashboard)
            self._app.dashboard.mount(web_app)
        self._runner = web.AppRunner(
            web_app,
            access_log=None,
            logger=server_log(),  # a stranger's unparsable request: one WARNING line
            shutdown_timeout=TASK_WAIT_S,
            keepalive_timeout=settings.webhook_idle_timeout_seconds,
        )
        await self._runner.setup()
        self._site = GuardedSite(
            self._runner, guard, settings.webhook_listen_host, settings.webhook_listen_port
        )
        try:
            await self._site.start()
        except OSError:
            await self.close()
            raise
        log.info(
            "webhook: at most %d connections open (WEBHOOK_MAX_OPEN_CONNECTIONS %d, "
            "descriptor limit less %d); heads within %g s, bodies within %g s, idle %g s",
            guard.cap,
            settings.webhook_max_open_connections,
            RESERVED_DESCRIPTORS,
            settings.webhook_header_timeout_seconds,
            settings.webhook_body_timeout_seconds,
            settings.webhook_idle_timeout_seconds,
        )

    async def handle(self, request: web.Request) -> web.Response:
        """One delivery from Telegram: see the module docstring."""
        given = request.headers.get(SECRET_HEADER, "")
        # bytes, not str: compare_digest refuses a str beyond ASCII (TypeError, a 500);
        # aiohttp decodes header bytes that are not UTF-8 to surrogates, kept as they are
        if not secrets.compare_digest(given.encode("utf-8", "surrogatepass"), self._secret):
            self._refuse(other_secret=bool(_SECRET_SHAPE.fullmatch(given)))
            return web.Response(status=401, text="Unauthorized")
        if self._app.readiness.state != "started":
            return web.Response(status=503, text="not ready")
        update = await self._read_update(request)
        if isinstance(update, web.Response):
            return update
        # a control that only stops work (/kill from an admin, /stop, Stop) never waits for
        # a slot: with every slot busy it would wait for the very answers it is sent to stop
        slotted = not await self._app.is_control(update)
        if slotted:
            await self._slots.acquire()
        try:
            taken = await self._take_in(update)
        except Exception as exc:
            if slotted:
                self._slots.release()
            if not is_storage_failure(exc):
                raise
            log.error("intake not recorded (storage failure): 503, Telegram delivers it again")
            return web.Response(status=503, text="storage unavailable")
        if taken is False:
            if slotted:
                self._slots.release()
            self.duplicates += 1
            log.info("dropping an update delivered twice (update %s)", update.update_id)
            return web.json_response({})
        task = asyncio.create_task(self._process(update, taken), name="webhook-update")
        self._tasks.add(task)
        task.add_done_callback(self._done if slotted else self._tasks.discard)
        return web.json_response({})

    async def _read_update(self, request: web.Request) -> Update | web.Response:
        """The update a request with the secret carries, or its answer when there is
        none to handle: 408 (closed) for a body slower than WEBHOOK_BODY_TIMEOUT_SECONDS,
        200 for a body no retry could read (skipped, see the module docstring)."""
        settings = self._app.settings
        try:
            async with asyncio.timeout(settings.webhook_body_timeout_seconds):
                body = await request.read()
        except TimeoutError:
            self._app.dropped.labels("webhook_body_timeout").inc()
            self._slow_bodies.dropped()
            late = web.Response(status=408, text="Request Timeout")
            late.force_close()
            return late
        except web.HTTPRequestEntityTooLarge:
            skipped = self._skip(None, f"a body over {settings.webhook_max_body_bytes} bytes")
            skipped.force_close()
            return skipped
        bot = self._app.bot
        raw: Any = None
        try:
            raw = load_checked(body)
            return Update.model_validate(raw, context={"bot": bot})
        except UndecodableJson as exc:  # not JSON, too deep, an integer beyond 64 bits
            return self._skip(exc.update_id, exc.where)
        except ValidationError as exc:  # a shape this aiogram cannot read
            update_id = raw.get("update_id") if isinstance(raw, dict) else None
            where = ".".join(str(p) for p in exc.errors()[0].get("loc", ())) or "top"
            return self._skip(update_id if isinstance(update_id, int) else None, where)

    def _skip(self, update_id: int | None, where: str) -> web.Response:
        """A 200 for an update skipped as undecodable: dropped as polling drops it (a
        retry would fail the same way), logged with its id and where, as polling logs it."""
        self._app.dropped.labels("undecodable_update").inc()
        log.warning(
            "skipped webhook update %s: the client cannot decode it (at %s)",
            "without an id" if update_id is None else update_id,
            where,
        )
        return web.json_response({})

    def _refuse(self, *, other_secret: bool) -> None:
        self._refused += 1
        self._app.dropped.labels("webhook_secret").inc()
        if self._refused == 1:
            log.warning("webhook request without the right secret token: answered 401")
        else:
            log.debug("webhook request without the right secret token: answered 401")
        now = self._app.clock.monotonic()
        if other_secret and now - self._other_secret_at >= OTHER_SECRET_EVERY_S:
            # likely Telegram itself, set up by a replica with another WEBHOOK_SECRET
            self._other_secret_at = now
            log.error(
                "a webhook request carried another secret token (answered 401): if the "
                "replicas have different WEBHOOK_SECRET values, Telegram sends the one of "
                "the replica that started last and the others refuse its updates; give "
                "every replica the same value (logged at most every %d s)",
                OTHER_SECRET_EVERY_S,
            )

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    async def _take_in(self, update: Update) -> TakenIn | Literal[False] | None:
        """Record a chat message before answering Telegram.

        Returns:
            :class:`TakenIn` the first time; ``False`` for a duplicate; ``None`` for an
            update without intake (not a message with a sender; or a read-only command
            while the database cannot be written, which runs without one).
        """
        message = update.message
        if not isinstance(message, Message) or message.from_user is None:
            return None
        language = pick_language(None, message.from_user.language_code)
        try:
            first = await self._app.intake.record(
                status="command" if (message.text or "").startswith("/") else "received",
                chat_id=message.chat.id,
                message_id=message.message_id,
                user_id=payer_id(message) or message.from_user.id,
                language=language,
                now=self._app.clock.now(),
                thread_id=topic_of(message),
            )
        except Exception as exc:
            if is_storage_failure(exc) and reads_only(message):
                return None  # the intake middleware runs it as a read-only command
            raise
        if not first:
            return False
        self.taken += 1
        return TakenIn(language=language)

    async def _process(self, update: Update, taken: TakenIn | None) -> None:
        """Feed ``update`` to the dispatcher; record ``dropped`` when no handler recorded
        an outcome for a taken-in message."""
        app = self._app
        try:
            data: dict[str, Any] = {} if taken is None else {"taken_in": taken}
            result = await app.dispatcher.feed_update(app.bot, update, **data)
            if isinstance(result, TelegramMethod):
                await app.dispatcher.silent_call_request(bot=app.bot, result=result)
        except Exception:  # as aiogram's polling does: logged, the next update goes on
            log.exception("update %s failed", update.update_id)
        finally:
            if taken is not None and not taken.finished:
                await self._finish_dropped(update)

    async def _finish_dropped(self, update: Update) -> None:
        message = update.message
        assert message is not None
        try:
            await self._app.intake.finish(
                chat_id=message.chat.id,
                message_id=message.message_id,
                status=IntakeStatus.DROPPED,
                now=self._app.clock.now(),
            )
        except Exception as exc:
            if not is_storage_failure(exc):
                raise
            log.error("intake outcome dropped not recorded (storage failure)")

    async def stop_listening(self) -> None:
        """No new requests: ``/readyz`` turns 503 and the listening socket closes
        (requests already read go on)."""
        self._app.readiness.mark_stopping()
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def drain(self) -> None:
        """Shut down: stop listening, drain the work as polling mode does, run the
        shutdown hooks (the stores close), close the server and the Bot API session."""
        app = self._app
        await self.stop_listening()
        log.info("stopping: in-flight chat operations=%d", app.chat.in_flight)
        await app.chat.drain(
            # a fenced process drains nothing: its work was taken over (bot/session/fence.py)
            0.0 if app.fenced.is_set() else app.settings.shutdown_grace_seconds,
            stop_streams=lambda: app.streams.stop_all("shutdown"),
        )
        # a grace is policy: on the injected clock (docs/decisions/020-clock-rule.md)
        still = await ended_within(self._tasks, TASK_WAIT_S, app.clock)
        for task in still:
            task.cancel()
        if still:
            await ended_within(still, TASK_WAIT_S, app.clock)
        await app.on_shutdown()
        await self.close()
        await app.bot.session.close()

    async def close(self) -> None:
        """Close the server (idempotent; the Bot API session is left open)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._site = None


async def _first(*waits: Coroutine[Any, Any, object]) -> None:
    """Wait until the first of ``waits`` is done (the others are cancelled)."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def serve_webhook(
    app: App, *, stop: asyncio.Event | None = None, handle_signals: bool = True
) -> None:
    """Run one webhook replica until SIGTERM/SIGINT (or ``stop``), then drain — or
    until this process is fenced (taken for dead by another, :mod:`bot.session.fence`): then
    it stops at once, drains nothing, and :class:`budget.errors.ProcessFenced` is raised.

    Order: bind (a taken port fails before Telegram is called), the start-up hooks
    (``setWebhook``, see :meth:`bot.app.lifecycle.App.on_startup`), ready; on the signal,
    :meth:`WebhookServer.drain`.

    Raises:
        OSError: the listen address cannot be bound.
        aiogram.exceptions.TelegramAPIError: the start-up hooks failed (the server is
            closed; the caller releases what ``create_app`` opened).
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT) if handle_signals else ()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    server = WebhookServer(app)
    try:
        await server.start()
        try:
            await app.on_startup()
        except BaseException:
            await server.close()
            raise
        settings = app.settings
        log.info(
            "webhook: listening on %s:%s%s",
            settings.webhook_listen_host,
            server.port,
            settings.webhook_path,
        )
        await _first(stop.wait(), app.fenced.wait())
        await server.drain()
        if app.fenced.is_set():
            raise ProcessFenced(FENCED_EXIT)
    finally:
        for sig in signals:
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(sig)
