"""The plain POST reads at most MAX_RESPONSE_BYTES of an answer: a provider (or a proxy
in between) sending an endless or huge body fails the call as an interrupted transport
failure, whether it declares its length or streams it chunked, and memory stays bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from llm.providers.plain_post import MAX_RESPONSE_BYTES, PlainPost, aiohttp_transport_error

OK_BODY = b'{"choices": []}'


async def _declared(request: web.Request) -> web.Response:
    return web.Response(body=b"x" * (MAX_RESPONSE_BYTES + 1), content_type="application/json")


async def _chunked(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.enable_chunked_encoding()
    await response.prepare(request)
    block = b"[" * 65536
    try:
        for _ in range(MAX_RESPONSE_BYTES // len(block) + 64):
            await response.write(block)
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        pass  # the client stopped reading: the cap worked
    return response


async def _ok(request: web.Request) -> web.Response:
    return web.Response(body=OK_BODY, content_type="application/json")


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/declared", _declared)
    app.router.add_post("/chunked", _chunked)
    app.router.add_post("/ok", _ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.mark.parametrize("path", ["/declared", "/chunked"])
async def test_an_answer_over_the_cap_fails_interrupted(base_url: str, path: str) -> None:
    post = PlainPost({})
    try:
        with pytest.raises(aiohttp.ClientPayloadError) as caught:
            await post.post(base_url + path, {"messages": []})
        error = aiohttp_transport_error("groq", caught.value)
        assert error.interrupted  # the provider may have billed: the hold is booked
        answer = await post.post(base_url + "/ok", {"messages": []})  # the session still works
        assert answer.content == OK_BODY
    finally:
        await post.aclose()
