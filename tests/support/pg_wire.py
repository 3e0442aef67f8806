"""A loopback TCP proxy in front of the suite's PostgreSQL server that counts the round
trips its clients make (a test helper; ``tests/support/pg.py`` runs the server).

Counted on the wire, so it is the same for every client library (asyncpg directly,
SQLAlchemy's asyncpg dialect): the frontend messages that make the server answer and
the client wait — ``Sync`` (the end of an extended-protocol exchange: Parse/Bind/
Execute…) and ``Query`` (a simple-protocol statement, e.g. ``BEGIN``/``COMMIT`` as
asyncpg sends them). One such message is one round trip. For each, the statements it
ran are kept (the text of the ``Query``, or of the prepared statements the ``Bind``
messages before the ``Sync`` named), so a test that counts can say which ones.

The frontend stream (PostgreSQL protocol 3.0): untyped packets first (an
``SSLRequest`` — the server here has no TLS and answers ``N`` — then the
``StartupMessage``), typed messages after (one type byte, an ``Int32`` length that
counts itself, the body).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["RoundTrip", "WireCounter"]

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """One exchange the client waited for: the statements it ran, in order (none for a
    ``prepare``: asyncpg's Parse/Describe of a statement new to its connection), on
    client connection number ``connection``."""

    statements: tuple[str, ...]
    connection: int


@dataclass
class _Parser:
    """The frontend stream of one client connection."""

    counter: WireCounter
    connection: int
    buffer: bytearray = field(default_factory=bytearray)
    started: bool = False
    prepared: dict[str, str] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while True:
            if not self.started:
                if len(self.buffer) < 8:
                    return
                length, code = struct.unpack("!ii", self.buffer[:8])
                if len(self.buffer) < length:
                    return
                del self.buffer[:length]
                self.started = code not in (_SSL_REQUEST, _GSS_REQUEST)
                continue
            if len(self.buffer) < 5:
                return
            kind = bytes(self.buffer[0:1])
            (length,) = struct.unpack("!i", self.buffer[1:5])
            if len(self.buffer) < 1 + length:
                return
            body = bytes(self.buffer[5 : 1 + length])
            del self.buffer[: 1 + length]
            self._message(kind, body)

    def _message(self, kind: bytes, body: bytes) -> None:
        if kind == b"P":  # Parse: name, query, parameter types
            raw_name, raw_query = body.split(b"\0", 2)[:2]
            self.prepared[raw_name.decode()] = raw_query.decode()
            if not raw_name:
                self.pending.append(raw_query.decode())
        elif kind == b"B":  # Bind: portal, statement name, …
            name = body.split(b"\0", 2)[1].decode()
            if name:
                self.pending.append(self.prepared.get(name, f"<prepared {name}>"))
        elif kind == b"S":  # Sync
            self.counter.add(RoundTrip(tuple(self.pending), self.connection))
            self.pending.clear()
        elif kind == b"Q":  # Query
            self.counter.add(RoundTrip((body.rstrip(b"\0").decode(),), self.connection))


class WireCounter:
    """A TCP proxy on ``127.0.0.1`` to ``host:port`` counting round trips (module
    docstring). ``async with WireCounter(host, port) as wire:`` then connect to
    ``wire.port``; :attr:`trips` lists every round trip so far, of all connections."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self.trips: list[RoundTrip] = []
        self.port = 0
        self._connections = 0
        self._grew = asyncio.Event()

    async def __aenter__(self) -> WireCounter:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def add(self, trip: RoundTrip) -> None:
        """Record one round trip (the parsers call this)."""
        self.trips.append(trip)
        self._grew.set()

    async def wait_for(self, found: Callable[[], bool], timeout: float = 10.0) -> None:  # noqa: ASYNC109 - test deadline
        """Wait (woken by each new round trip) until ``found()``.

        Raises:
            TimeoutError: not found within ``timeout`` seconds.
        """
        async with asyncio.timeout(timeout):
            while not found():
                self._grew.clear()
                await self._grew.wait()

    def mark(self) -> int:
        """The number of round trips so far (for :meth:`since`)."""
        return len(self.trips)

    def since(self, mark: int) -> list[RoundTrip]:
        """The round trips after :meth:`mark` gave ``mark``."""
        return self.trips[mark:]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._connections += 1
        parser = _Parser(self, self._connections)
        tasks = [
            asyncio.create_task(self._pipe(reader, up_writer, parser)),
            asyncio.create_task(self._pipe(up_reader, writer, None)),
        ]
        self._pipes.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._pipes.difference_update(tasks)
            for w in (writer, up_writer):
                w.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, parser: _Parser | None
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if parser is not None:
                    parser.feed(data)
                writer.write(data)
                await writer.drain()
