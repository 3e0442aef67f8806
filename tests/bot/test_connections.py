"""The webhook port's connection cap and header deadline (``bot/app/connections.py``),
without a network: the guard is fed transports as ``loop.create_server`` would."""

from __future__ import annotations

import asyncio
import resource

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from bot.app.connections import (
    MIN_CONNECTIONS,
    RESERVED_DESCRIPTORS,
    ConnectionGuard,
    connection_cap,
)


class _Transport(asyncio.Transport):
    """A transport that remembers whether it was closed."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def __repr__(self) -> str:
        return f"_Transport({self.name})"


class _Inner(asyncio.Protocol):
    """aiohttp's protocol stand-in: records what the guard forwards."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.events.append(f"data {data!r}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")


def _guard(cap: int, header_timeout_s: float = 60.0) -> tuple[ConnectionGuard, list[str]]:
    drops: list[str] = []
    guard = ConnectionGuard(
        cap=cap, header_timeout_s=header_timeout_s, on_drop=drops.append, clock=lambda: 0.0
    )
    return guard, drops


async def _request_on(
    guard: ConnectionGuard, transport: _Transport, release: asyncio.Event
) -> None:
    """A request on ``transport`` whose handler waits for ``release``."""
    request = make_mocked_request("POST", "/hook", transport=transport)

    async def handler(_request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response()

    await guard.middleware(request, handler)


def test_the_cap_is_the_setting_or_the_descriptor_limit_less_the_reserve() -> None:
    assert connection_cap(1000, nofile=1024) == 1024 - RESERVED_DESCRIPTORS
    assert connection_cap(100, nofile=1024) == 100
    assert connection_cap(1000, nofile=resource.RLIM_INFINITY) == 1000
    assert connection_cap(5000, nofile=RESERVED_DESCRIPTORS + MIN_CONNECTIONS) == MIN_CONNECTIONS
    with pytest.raises(OSError, match=r"descriptor limit \(ulimit -n\) is 260"):
        connection_cap(1000, nofile=260)


async def test_over_the_cap_the_oldest_connection_without_a_request_goes_first() -> None:
    """Cap 3: a connection in a request is never closed; a kept-alive idle one only
    when none without a request is left; the newest never while an older one is idle."""
    guard, drops = _guard(cap=3)
    answered, in_request, silent = _Transport("answered"), _Transport("busy"), _Transport("silent")
    inners = {t.name: _Inner() for t in (answered, in_request, silent)}
    for transport in (answered, in_request, silent):
        guard.protocol(inners[transport.name]).connection_made(transport)
    done = asyncio.Event()
    done.set()
    await _request_on(guard, answered, done)  # one request answered: kept alive, idle
    release = asyncio.Event()
    busy = asyncio.create_task(_request_on(guard, in_request, release))
    await asyncio.sleep(0)

    fourth = _Transport("fourth")
    guard.protocol(_Inner()).connection_made(fourth)
    assert (silent.closed, answered.closed, in_request.closed) == (True, False, False)
    fifth = _Transport("fifth")
    guard.protocol(_Inner()).connection_made(fifth)
    assert fourth.closed and not answered.closed  # fourth had sent no request yet
    sixth = _Transport("sixth")
    guard.protocol(_Inner()).connection_made(sixth)
    assert fifth.closed
    assert drops == ["webhook_connection_cap"] * 3
    assert inners["silent"].events == ["made"]  # closed by the guard, lost comes later
    release.set()
    await busy


async def test_with_every_connection_in_a_request_the_new_one_is_closed() -> None:
    guard, drops = _guard(cap=1)
    first = _Transport("first")
    guard.protocol(_Inner()).connection_made(first)
    release = asyncio.Event()
    busy = asyncio.create_task(_request_on(guard, first, release))
    await asyncio.sleep(0)
    inner = _Inner()
    new = guard.protocol(inner)
    second = _Transport("second")
    new.connection_made(second)
    new.data_received(b"GET / HTTP/1.1\r\n")
    new.connection_lost(None)
    assert second.closed and not first.closed
    assert inner.events == []  # aiohttp never saw it
    assert drops == ["webhook_connection_cap"]
    assert guard.open == 1
    release.set()
    await busy


async def test_a_connection_without_a_request_head_is_closed_at_the_deadline() -> None:
    """The deadline counts from the opening: bytes trickled do not move it; a request
    head that arrived in time cancels it."""
    guard, drops = _guard(cap=10, header_timeout_s=0.05)
    slow, quick = _Transport("slow"), _Transport("quick")
    slow_protocol = guard.protocol(_Inner())
    slow_protocol.connection_made(slow)
    guard.protocol(_Inner()).connection_made(quick)
    done = asyncio.Event()
    done.set()
    await _request_on(guard, quick, done)
    for _ in range(3):
        slow_protocol.data_received(b"X-Slow: 1\r\n")
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.05)
    assert slow.closed and not quick.closed
    assert drops == ["webhook_header_timeout"]
    assert guard.open == 1
