"""What strangers do to a webhook port, over raw TCP: connections that send nothing,
request heads or bodies sent a few bytes at a time (slowloris), requests with header
bytes no HTTP client library would send. For the webhook-port tests
(``tests/e2e/test_webhook_port.py``); every function takes the listen address of a bot
process and measures what the bot did, never what it logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiohttp import ClientSession, ClientTimeout

__all__ = [
    "Connections",
    "closed_count",
    "dropped",
    "open_idle",
    "raw_request",
    "slow_body",
    "slow_heads",
]

#: How many connections are opened at once (the listen backlog of the bot is 128).
_BATCH = 100


@dataclass(eq=False)
class Connections:
    """Connections a test holds open; :meth:`close` closes them all.

    Attributes:
        streams: each connection's reader and writer.
        refused: connections the bot's port refused or reset while opening.
        tasks: the tasks writing to them (slowloris), cancelled by :meth:`close`.
    """

    streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(default_factory=list)
    refused: int = 0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.streams)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for _reader, writer in self.streams:
            writer.close()
        for _reader, writer in self.streams:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()


async def open_idle(port: int, count: int, host: str = "127.0.0.1") -> Connections:
    """Open ``count`` TCP connections to ``host:port`` that send nothing."""
    held = Connections()

    async def one() -> None:
        try:
            held.streams.append(await asyncio.open_connection(host, port))
        except OSError:
            held.refused += 1

    for start in range(0, count, _BATCH):
        await asyncio.gather(*(one() for _ in range(min(_BATCH, count - start))))
    return held


async def closed_count(
    streams: Sequence[tuple[asyncio.StreamReader, asyncio.StreamWriter]],
) -> int:
    """How many of ``streams`` the other side has closed (end of stream or reset),
    reading whatever each has received for half a second, all at once (20 ms was too
    short for a loaded loop to read 1,100 ends: closed streams were counted open)."""

    async def closed(reader: asyncio.StreamReader) -> bool:
        try:
            # all wait at once: the whole count takes this long, however many streams
            async with asyncio.timeout(0.5):
                while await reader.read(65536):
                    pass
        except TimeoutError:
            return False  # still open, nothing more to read
        except OSError:
            return True
        return True

    return sum(await asyncio.gather(*(closed(reader) for reader, _writer in streams)))


async def slow_heads(
    port: int, count: int, *, every_s: float, path: str = "/", host: str = "127.0.0.1"
) -> Connections:
    """Open ``count`` connections that send a request head one header line every
    ``every_s`` seconds, never ending it (slowloris)."""
    held = await open_idle(port, count, host)

    async def trickle(writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\n".encode())
            for n in range(10_000):
                await asyncio.sleep(every_s)
                writer.write(f"X-Slow-{n}: {'a' * 8}\r\n".encode())
                await writer.drain()
        except OSError:
            return

    held.tasks = [asyncio.create_task(trickle(w)) for _r, w in held.streams]
    return held


async def slow_body(
    port: int,
    path: str,
    headers: dict[str, str],
    *,
    length: int,
    every_s: float,
    host: str = "127.0.0.1",
) -> tuple[asyncio.StreamReader, Connections]:
    """One request whose head is complete and whose body of ``length`` bytes comes one
    byte every ``every_s`` seconds. Returns its reader (the answer, if any) and the
    connection."""
    held = await open_idle(port, 1, host)
    reader, writer = held.streams[0]
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {length}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())

    async def trickle() -> None:
        try:
            for _ in range(length - 1):
                await asyncio.sleep(every_s)
                writer.write(b" ")
                await writer.drain()
        except OSError:
            return

    held.tasks = [asyncio.create_task(trickle())]
    return reader, held


async def raw_request(
    port: int,
    path: str,
    headers: Sequence[tuple[bytes, bytes]],
    body: bytes,
    *,
    host: str = "127.0.0.1",
    timeout: float = 20.0,  # noqa: ASYNC109 - a test deadline
) -> int | None:
    """POST ``body`` with exactly these header bytes (any bytes: no client library
    checks them) on a new connection; returns the answer's status, ``None`` when the
    connection closed without one."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        head = [f"POST {path} HTTP/1.1".encode(), f"Host: {host}".encode()]
        head += [name + b": " + value for name, value in headers]
        head += [f"Content-Length: {len(body)}".encode(), b"Connection: close"]
        writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        async with asyncio.timeout(timeout):
            status_line = await reader.readline()
            await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    match = re.match(rb"HTTP/1\.[01] (\d{3}) ", status_line)
    return int(match.group(1)) if match else None


async def dropped(metrics_url: str) -> dict[str, float]:
    """``kopek_dropped_total`` by ``reason`` from a bot's ``/metrics``."""
    async with (
        ClientSession(timeout=ClientTimeout(total=10)) as http,
        http.get(metrics_url) as resp,
    ):
        text = await resp.text()
    found = re.findall(r'^kopek_dropped_total\{reason="([^"]+)"\} (\S+)$', text, re.MULTILINE)
    return {reason: float(value) for reason, value in found}
