"""The webhook port's connections: a cap below the descriptor limit, and a deadline for
each connection's first request head (``docs/webhook.md``).

aiohttp's server has neither. Every open connection is a file descriptor; at the
process's limit (``ulimit -n``, often 1,024) ``accept()`` fails, and so does every
SQLite file, Bot API and provider connection the bot opens: 1,100 connections that sent
nothing had every user answered "Something went wrong". And its only timer on a
connection waiting for a request is the keep-alive timeout, an hour by default, so 400
connections sending their headers a byte at a time (slowloris) stayed open.

:class:`ConnectionGuard` wraps aiohttp's protocol factory (an ``AppRunner``'s server) and
sees every connection open and close:

* **Cap.** At most :func:`connection_cap` connections are open: ``WEBHOOK_MAX_OPEN_CONNECTIONS``
  and never more than the soft ``RLIMIT_NOFILE`` less :data:`RESERVED_DESCRIPTORS`
  (the bot's own files and connections). A connection over the cap closes the oldest
  open connection that is not in a request — one that never completed a request head
  first (a stranger's, or one about to time out anyway), else the oldest idle kept-alive
  one; Telegram and the proxy open a new one when they need it. When every connection
  is inside a request the new one is closed instead. nginx does the same when it runs
  out of ``worker_connections`` ("reusing connections": idle and waiting ones first).
  So an update arriving after any number of idle connections finds room.
* **Header deadline.** A connection that has not completed its first request head
  ``WEBHOOK_HEADER_TIMEOUT_SECONDS`` after it opened is closed, however many bytes it
  trickled. Later heads on a kept-alive connection are bounded by aiohttp's keep-alive
  timer (``WEBHOOK_IDLE_TIMEOUT_SECONDS`` from the previous answer, the head included).

Each closed connection is counted (``kopek_dropped{reason="webhook_connection_cap"}`` or
``{reason="webhook_header_timeout"}``) and logged at WARNING at most once every
:data:`DROP_LOG_EVERY_S` seconds per reason, with the count since the last line.
The body's deadline and size are the request handler's (:mod:`bot.app.webhook`).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler

__all__ = [
    "ACCEPT_BACKLOG",
    "DROP_LOG_EVERY_S",
    "RESERVED_DESCRIPTORS",
    "ConnectionGuard",
    "DropLog",
    "GuardedSite",
    "connection_cap",
]

log = logging.getLogger(__name__)

#: Descriptors kept below the limit for the bot's own use: the database (SQLite file and
#: WAL, or the PostgreSQL pool), the Bot API session's connections, the providers'
#: connection pools, the metrics port, logs. Measured: a replica on SQLite holding 767
#: webhook connections had 786 descriptors open (its own ~20, without provider traffic).
RESERVED_DESCRIPTORS = 512

#: The webhook's listen backlog (aiohttp's default). asyncio accepts up to this many
#: sockets per ready event and runs their ``connection_made`` on a later loop iteration,
#: and a connection closed over the cap frees its descriptor one iteration after that:
#: under a flood, two or three accept batches are open beyond the cap at once, so
#: :data:`RESERVED_DESCRIPTORS` keeps 3 × 128 plus the bot's own ~30 files (at 256,
#: ``EMFILE`` in ``accept`` at 1,100 idle connections on a loaded machine). A smaller
#: backlog is no answer: the kernel's accept queue overflows and clients hold
#: connections the bot has not accepted yet.
ACCEPT_BACKLOG = 128
#: Fewest connections a replica runs with: a limit that leaves fewer is refused at start.
MIN_CONNECTIONS = 16
#: Seconds between two WARNING lines about closed connections of one reason.
DROP_LOG_EVERY_S = 60.0


def connection_cap(max_open: int, nofile: int | None = None) -> int:
    """How many connections the webhook port keeps open at once.

    Args:
        max_open: ``WEBHOOK_MAX_OPEN_CONNECTIONS``.
        nofile: the soft descriptor limit; ``None``: this process's (``getrlimit``).

    Returns:
        ``min(max_open, nofile - RESERVED_DESCRIPTORS)`` (``max_open`` without a limit).

    Raises:
        OSError: the limit leaves fewer than :data:`MIN_CONNECTIONS` (one line for the
            operator: raise ``ulimit -n``).
    """
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if nofile is None else nofile
    if soft == resource.RLIM_INFINITY:
        return max_open
    room = soft - RESERVED_DESCRIPTORS
    if room < MIN_CONNECTIONS:
        raise OSError(
            f"the descriptor limit (ulimit -n) is {soft}: a webhook replica needs at least "
            f"{RESERVED_DESCRIPTORS + MIN_CONNECTIONS} ({RESERVED_DESCRIPTORS} for itself, "
            f"{MIN_CONNECTIONS} connections); raise it (LimitNOFILE=, ulimit -n, --ulimit)"
        )
    return min(max_open, room)


class _Connection:
    """One open connection as the guard sees it."""

    __slots__ = ("busy", "head_timer", "requests", "transport")

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.requests = 0  # request heads completed (handlers entered)
        self.busy = 0  # requests inside a handler now
        self.head_timer: asyncio.TimerHandle | None = None

    def close(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        self.transport.close()


class DropLog:
    """Counts drops of one reason; one WARNING line at most every ``every_s`` seconds.

    Args:
        text: what was dropped, e.g. ``"webhook connections closed over the cap"``;
            the line adds the count since the last line.
        clock: monotonic seconds.
        every_s: seconds between two lines.
    """

    __slots__ = ("_clock", "_every_s", "_last_at", "_text", "_unlogged")

    def __init__(self, text: str, clock: Callable[[], float], every_s: float) -> None:
        self._text = text
        self._clock = clock
        self._every_s = every_s
        self._last_at = -float("inf")
        self._unlogged = 0

    def __repr__(self) -> str:
        return f"DropLog({self._text!r}, unlogged={self._unlogged})"

    def dropped(self) -> None:
        """One more dropped: logged now unless a line went out less than ``every_s`` ago."""
        self._unlogged += 1
        now = self._clock()
        if now - self._last_at >= self._every_s:
            log.warning(
                "%s: %d since the last line (logged at most every %g s)",
                self._text,
                self._unlogged,
                self._every_s,
            )
            self._last_at, self._unlogged = now, 0


class ConnectionGuard:
    """The cap and the header deadline (see the module docstring).

    Args:
        cap: connections open at most (:func:`connection_cap`).
        header_timeout_s: seconds from a connection's opening to its first request
            head (``WEBHOOK_HEADER_TIMEOUT_SECONDS``).
        on_drop: called with the reason of each connection closed
            (``"webhook_connection_cap"``, ``"webhook_header_timeout"``): a metric.
        clock: monotonic seconds for the log's pace (the bot's one clock).

    Serve through a :class:`GuardedSite`, and put :meth:`middleware` on the application:
    it tells the guard when a connection's request is inside a handler.
    """

    __slots__ = ("_logs", "_on_drop", "_open", "cap", "header_timeout_s")

    def __init__(
        self,
        *,
        cap: int,
        header_timeout_s: float,
        on_drop: Callable[[str], None],
        clock: Callable[[], float],
    ) -> None:
        self.cap = cap
        self.header_timeout_s = header_timeout_s
        self._on_drop = on_drop
        self._open: dict[asyncio.BaseTransport, _Connection] = {}  # oldest first
        self._logs = {
            "webhook_connection_cap": DropLog(
                f"webhook connections closed over the cap of {cap} open at once",
                clock,
                DROP_LOG_EVERY_S,
            ),
            "webhook_header_timeout": DropLog(
                f"webhook connections closed without a request head within {header_timeout_s:g} s",
                clock,
                DROP_LOG_EVERY_S,
            ),
        }

    def __repr__(self) -> str:
        busy = sum(1 for c in self._open.values() if c.busy)
        return f"ConnectionGuard(open={len(self._open)}, cap={self.cap}, busy={busy})"

    @property
    def open(self) -> int:
        """Connections open now."""
        return len(self._open)

    def protocol(self, inner: asyncio.Protocol) -> asyncio.Protocol:
        """``inner`` (aiohttp's protocol of one new connection) behind the guard."""
        return _GuardedProtocol(self, inner)

    def _drop(self, conn: _Connection, reason: str) -> None:
        conn.close()
        self._on_drop(reason)
        self._logs[reason].dropped()

    def opened(self, transport: asyncio.BaseTransport) -> bool:
        """A connection opened; False when it was closed at once (over the cap with
        every open connection inside a request)."""
        conn = _Connection(transport)
        if len(self._open) >= self.cap:
            victim = self._idlest()
            if victim is None:
                self._drop(conn, "webhook_connection_cap")
                return False
            del self._open[victim.transport]
            self._drop(victim, "webhook_connection_cap")
        self._open[transport] = conn
        loop = asyncio.get_running_loop()
        conn.head_timer = loop.call_later(self.header_timeout_s, self._head_late, conn)
        return True

    def _idlest(self) -> _Connection | None:
        """The oldest connection without a request head, else the oldest idle one."""
        idle = None
        for conn in self._open.values():
            if conn.busy:
                continue
            if not conn.requests:
                return conn
            if idle is None:
                idle = conn
        return idle

    def _head_late(self, conn: _Connection) -> None:
        conn.head_timer = None
        if not conn.requests and self._open.get(conn.transport) is conn:
            del self._open[conn.transport]
            self._drop(conn, "webhook_header_timeout")

    def closed(self, transport: asyncio.BaseTransport) -> None:
        """A connection closed (by either side)."""
        conn = self._open.pop(transport, None)
        if conn is not None and conn.head_timer is not None:
            conn.head_timer.cancel()
            conn.head_timer = None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """aiohttp middleware: the request's connection is busy while its handler runs
        (its head is complete: the header deadline no longer applies)."""
        conn = self._open.get(request.transport) if request.transport is not None else None
        if conn is None:
            return await handler(request)
        conn.requests += 1
        conn.busy += 1
        if conn.head_timer is not None:
            conn.head_timer.cancel()
            conn.head_timer = None
        try:
            return await handler(request)
        finally:
            conn.busy -= 1


class _GuardedProtocol(asyncio.Protocol):
    """aiohttp's protocol for one connection, told to the guard first."""

    __slots__ = ("_guard", "_inner", "_served", "_transport")

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self._served = False
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if self._guard.opened(transport):
            self._served = True
            self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._served:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._served else None

    def pause_writing(self) -> None:
        if self._served:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._served:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._guard.closed(self._transport)
        if self._served:
            self._inner.connection_lost(exc)


class GuardedSite(web.BaseSite):
    """A TCP site whose connections go through a :class:`ConnectionGuard`.

    Args:
        runner: the set-up ``AppRunner``.
        guard: the cap and deadline every connection goes through.
        host, port: the listen address.
    """

    __slots__ = ("_guard", "_host", "_port")

    def __init__(self, runner: web.AppRunner, guard: ConnectionGuard, host: str, port: int) -> None:
        super().__init__(runner, backlog=ACCEPT_BACKLOG)
        self._guard = guard
        self._host = host
        self._port = port

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        """Bind and listen.

        Raises:
            OSError: the address cannot be bound.
        """
        await super().start()
        server = self._runner.server
        assert server is not None  # BaseSite refuses a runner that is not set up
        guard = self._guard
        self._server = await asyncio.get_running_loop().create_server(
            lambda: guard.protocol(server()), self._host, self._port, backlog=self._backlog
        )
