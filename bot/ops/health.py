"""``/healthz`` and ``/readyz``: liveness and readiness over HTTP (aiohttp).

Served beside the webhook in webhook mode (:mod:`bot.app.webhook`) and by the metrics server
when ``METRICS_PORT`` is set (:mod:`bot.ops.metrics`), so a container's health check works in
polling mode too (``python -m bot healthcheck``, :func:`main`).

* ``GET /healthz`` — 200 ``ok`` while the event loop answers: the process is alive.
* ``GET /readyz`` — 200 ``ready`` when this process takes updates and its database
  answers with the schema at this code's head revision; else 503 with one short reason
  (``starting``, ``stopping``, ``database unreachable``, ``schema at … not …``). A load
  balancer sends nothing to a replica that is starting or draining.

No reason holds a URL, a host or an exception text (they may hold a password).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import urllib.error
import urllib.request
from collections.abc import Callable

from aiohttp import web
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.cli import config_error
from budget.kernel.schema import head_revision, read_heads

__all__ = ["HealthSettings", "Readiness", "add_health_routes", "main"]

log = logging.getLogger(__name__)

#: Seconds a readiness probe waits for the database before it answers 503.
READY_DB_TIMEOUT_S = 2.0


class Readiness:
    """Whether this process should be sent updates.

    Args:
        engine: the bot's database engine (one short connection per probe).
        head: the schema revision this code needs (default
        :func:`bot.storage.migrate.head_revision`).
        timeout_s: seconds the database gets to answer, then 503.

    The process moves ``starting`` → :meth:`mark_started` → :meth:`mark_stopping`.
    """

    __slots__ = ("_engine", "_head", "_state", "_timeout_s")

    def __init__(
        self, engine: AsyncEngine, head: str | None = None, timeout_s: float = READY_DB_TIMEOUT_S
    ) -> None:
        self._engine = engine
        self._head = head or head_revision()
        self._timeout_s = timeout_s
        self._state = "starting"

    def __repr__(self) -> str:
        return f"Readiness(state={self._state!r}, head={self._head!r})"

    @property
    def state(self) -> str:
        """``starting``, ``started`` or ``stopping``."""
        return self._state

    def mark_started(self) -> None:
        """Start-up is done: updates may come."""
        self._state = "started"

    def mark_stopping(self) -> None:
        """Shutdown began: no new updates (``/readyz`` answers 503 from now on)."""
        self._state = "stopping"

    async def check(self) -> str | None:
        """``None`` when ready, else a short reason (never a URL or an exception text)."""
        if self._state != "started":
            return self._state
        try:
            async with asyncio.timeout(self._timeout_s), self._engine.connect() as conn:
                heads = await conn.run_sync(read_heads)
        except Exception as exc:  # noqa: BLE001 - any failure of the database is "not ready"
            log.debug("readiness: database check failed: %s", type(exc).__name__)
            return "database unreachable"
        if tuple(heads) != (self._head,):
            return f"schema at {', '.join(heads) or 'none'}, not {self._head}"
        return None


def add_health_routes(app: web.Application, readiness: Callable[[], Readiness | None]) -> None:
    """Add ``GET /healthz`` and ``GET /readyz`` to ``app``.

    Args:
        app: the aiohttp application (before it is started).
        readiness: returns the :class:`Readiness` to ask (``None``: not built yet, 503).
    """

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_request: web.Request) -> web.Response:
        probe = readiness()
        reason = "starting" if probe is None else await probe.check()
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(text=f"not ready: {reason}\n", status=503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)


class HealthSettings(BaseSettings):
    """The few settings ``python -m bot healthcheck`` reads (no token or key needed)."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    webhook_url: str | None = None
    webhook_listen_host: str = "127.0.0.1"
    webhook_listen_port: int = Field(8080, ge=1, le=65535)
    metrics_port: int | None = Field(None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"


def _probe_host(host: str) -> str:
    """The address to call a server bound to ``host`` on (a wildcard → loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)  # noqa: S104


def main(timeout_s: float = 5.0) -> int:
    """``python -m bot healthcheck``: GET ``/healthz`` of this container's bot.

    The webhook server's in webhook mode (``WEBHOOK_URL`` set), else the metrics
    server's (``METRICS_PORT`` set). Polling without ``METRICS_PORT`` has no HTTP
    server: the check says so and passes (the container's main process is the bot;
    when it ends, the container ends).

    The probe goes to loopback directly, never through ``HTTP_PROXY``/``http_proxy``. A
    failure prints one line on stderr with the reason (``Connection refused``, ``no
    answer within 5 s``, ``HTTP 503``).

    Returns:
        0 healthy (or nothing to ask), 1 unhealthy or unreachable, 2 unreadable settings.
    """
    try:
        cfg = HealthSettings()
    except ValidationError as exc:  # one line naming the setting, as the bot's own
        print(config_error(exc, "kopek healthcheck"), file=sys.stderr)
        return 2
    if cfg.webhook_url:
        host, port = cfg.webhook_listen_host, cfg.webhook_listen_port
    elif cfg.metrics_port is not None:
        host, port = cfg.metrics_host, cfg.metrics_port
    else:
        print("kopek healthcheck: polling without METRICS_PORT: no health endpoint to ask")
        return 0
    address = _probe_host(host)
    if ":" in address:
        address = f"[{address}]"
    url = f"http://{address}:{port}/healthz"
    # no proxy: HTTP_PROXY (Docker sets it in containers from the client's config) must
    # not carry a probe of this container's own loopback; the bot ignores proxies too
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_s) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        print(f"kopek healthcheck: {url}: {_reason(exc, timeout_s)}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"kopek healthcheck: {url}: HTTP {status}", file=sys.stderr)
        return 1
    return 0


def _reason(exc: OSError, timeout_s: float) -> str:
    """Why the probe got no answer, in a few words (``Connection refused``, ``no answer
    within 5 s``, the resolver's or the socket's message)."""
    reason: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason) or type(reason).__name__
