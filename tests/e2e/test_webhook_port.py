"""The webhook port strangers can reach, through the real process (``python -m bot`` in
webhook mode, :class:`tests.support.harness.BotProcess`): idle and slow connections,
secret headers no client library sends, updates no Telegram sends, and a 429 on
``setWebhook`` at start. Each test would fail on the server before these limits: idle
connections used up the descriptors, slow ones stayed open, a non-ASCII secret was a 500
and a traceback, nested JSON and ids beyond 64 bits were 500s Telegram redelivers
forever, one 429 on ``setWebhook`` ended the start with exit 1. See ``docs/webhook.md``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3

import pytest

from tests.support.harness import BotExited, BotFactory, BotProcess, free_port
from tests.support.providers import FakeProviders
from tests.support.strangers import (
    closed_count,
    dropped,
    open_idle,
    raw_request,
    slow_body,
    slow_heads,
)
from tests.support.telegram import FakeTelegram

SECRET = "webhook-port-secret_0123456789"
PATH = "/tg-hook"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: the descriptors a bot keeps for itself below its limit (bot/app/connections.py)
RESERVED = 512


def _env(bot_env: dict[str, str], **extra: str) -> dict[str, str]:
    return dict(
        bot_env,
        WEBHOOK_URL="https://kopek.example.org/tg-hook",
        WEBHOOK_SECRET=SECRET,
        WEBHOOK_LISTEN_HOST="127.0.0.1",
        WEBHOOK_LISTEN_PORT=str(free_port()),
        WEBHOOK_PATH=PATH,
        METRICS_PORT=str(free_port()),
        LOG_LEVEL="INFO",
        **extra,
    )


async def _replica(
    bot_factory: BotFactory, telegram: FakeTelegram, env: dict[str, str], **kwargs: object
) -> BotProcess:
    port = env["WEBHOOK_LISTEN_PORT"]
    bot = bot_factory(env=env, ready_url=f"http://127.0.0.1:{port}/readyz", **kwargs)
    await bot.start()
    telegram.route_webhook([f"http://127.0.0.1:{port}{PATH}"])
    return bot


def _metrics(env: dict[str, str]) -> str:
    return f"http://127.0.0.1:{env['METRICS_PORT']}/metrics"


async def _answered(telegram: FakeTelegram, user_id: int, text: str) -> float:
    """Deliver a message from ``user_id`` (the fake echoes it); the seconds from the
    POST to the answer's sendMessage."""
    loop = asyncio.get_running_loop()
    mark = telegram.mark()
    start = loop.time()
    delivery = await telegram.deliver(telegram.message_update(user_id, text), timeout=30)
    assert delivery.status == 200, delivery
    [reply] = await telegram.wait_sent(user_id, since=mark, timeout=30)
    assert text in reply.text
    return loop.time() - start


async def test_1100_idle_connections_at_nofile_1024_leave_room_for_a_real_update(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A replica whose descriptor limit is 1,024 (soft and hard) keeps at most 1,024 −
    512 connections open: 1,100 connections that send nothing (the header timeout is
    set far away, so only the cap acts) close the oldest idle ones, counted as
    ``kopek_dropped{reason="webhook_connection_cap"}``; the process stays below its
    limit, and a real update delivered after them is taken and answered. Before the
    cap, they used up the descriptors and every user got "Something went wrong"."""
    env = _env(bot_env, WEBHOOK_HEADER_TIMEOUT_SECONDS="600")
    bot = await _replica(bot_factory, fake_telegram, env, nofile=1024)
    port = int(env["WEBHOOK_LISTEN_PORT"])
    cap = 1024 - RESERVED
    idle = await open_idle(port, 1100)
    try:
        took = await _answered(fake_telegram, 91, "answered beside 1,100 idle connections")
        assert bot.pid is not None
        descriptors = len(os.listdir(f"/proc/{bot.pid}/fd"))
        # the cap closes the oldest as new ones arrive; on a loaded machine the last
        # closes reach the client a little after the answer: count until they have
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while (closed := await closed_count(idle.streams)) < len(idle) - cap:
            if loop.time() > deadline:
                break
        counts = await dropped(_metrics(env))
        held = len(idle) - closed
        print(
            f"\nidle opened {len(idle)} (refused {idle.refused}), held by the bot {held}, "
            f"closed by the cap {closed}, bot descriptors {descriptors}/1024, "
            f"real update answered in {took:.2f} s"
        )
        assert descriptors < 1024
        assert idle.refused == 0
        assert cap - 10 <= held <= cap  # the newest held, the oldest closed
        assert counts.get("webhook_connection_cap", 0) >= 1100 - cap
    finally:
        await idle.close()
    logs = bot.logs()
    assert "Too many open files" not in logs and "Traceback" not in logs
    assert "webhook connections closed over the cap" in logs
    assert await bot.stop() == 0


async def test_slow_heads_and_a_slow_body_are_closed_by_their_timeouts(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """400 connections sending a request head one header line every 0.5 s (slowloris)
    are closed once WEBHOOK_HEADER_TIMEOUT_SECONDS (2 s) have passed since each opened,
    however many bytes they trickle; a request with the secret whose body comes one
    byte every 0.5 s gets 408 after WEBHOOK_BODY_TIMEOUT_SECONDS (2 s) and is closed. All
    are counted; a real update is answered meanwhile. Before the timeouts, all 401 stayed
    open for an hour."""
    env = _env(bot_env, WEBHOOK_HEADER_TIMEOUT_SECONDS="2", WEBHOOK_BODY_TIMEOUT_SECONDS="2")
    bot = await _replica(bot_factory, fake_telegram, env)
    port = int(env["WEBHOOK_LISTEN_PORT"])
    loop = asyncio.get_running_loop()
    start = loop.time()
    slow = await slow_heads(port, 400, every_s=0.5, path=PATH)
    reader, body_conn = await slow_body(
        port,
        PATH,
        {SECRET_HEADER: SECRET, "Content-Type": "application/json"},
        length=1000,
        every_s=0.5,
    )
    try:
        await _answered(fake_telegram, 92, "answered beside 400 slow heads")
        async with asyncio.timeout(30):
            while (closed := await closed_count(slow.streams)) < len(slow):  # noqa: ASYNC110 - no event tells a socket's close
                await asyncio.sleep(0.1)
        lasted = loop.time() - start
        answer = await asyncio.wait_for(reader.read(), timeout=30)
        print(f"\n{closed} slow heads closed within {lasted:.1f} s; slow body: {answer[:12]!r}")
        assert lasted >= 1.5  # closed by the timeout, not at once
        assert answer.startswith(b"HTTP/1.1 408 ")
        counts = await dropped(_metrics(env))
        assert counts.get("webhook_header_timeout") == 400
        assert counts.get("webhook_body_timeout") == 1
    finally:
        await slow.close()
        await body_conn.close()
    assert "Traceback" not in bot.logs()
    assert await bot.stop() == 0


async def test_a_secret_header_with_non_ascii_bytes_is_401_and_counted_without_a_traceback(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """200 requests whose secret header holds bytes beyond ASCII (UTF-8 ``é``, a bare
    Latin-1 ``\\xe9``, ``\\xff``) each get 401 and are counted as
    ``kopek_dropped{reason="webhook_secret"}``; the log has the one WARNING of the
    first refusal and no traceback; nothing is recorded, sent or asked of a provider.
    Before, ``secrets.compare_digest`` on ``str`` raised: 500 and a traceback each."""
    env = _env(bot_env)
    bot = await _replica(bot_factory, fake_telegram, env)
    port = int(env["WEBHOOK_LISTEN_PORT"])
    body = b'{"update_id": 1}'
    values = ["s\u00e9cret-token-0123456789".encode(), b"secret-\xe9-0123456789", b"\xff" * 20]
    statuses = [
        await raw_request(
            port,
            PATH,
            [(SECRET_HEADER.encode(), values[i % 3]), (b"Content-Type", b"application/json")],
            body,
        )
        for i in range(200)
    ]
    assert statuses == [401] * 200
    counts = await dropped(_metrics(env))
    assert counts.get("webhook_secret") == 200
    logs = bot.logs()
    assert "Traceback" not in logs
    assert logs.count("without the right secret token") == 1
    assert "carried another secret token" not in logs
    assert not fake_telegram.sent_events() and not fake_providers.requests
    assert await bot.stop() == 0


async def test_a_header_over_8_kb_is_a_4xx_and_one_warning_line_without_a_traceback(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A 9 KB header (over aiohttp's 8,190-byte line limit) on the webhook path, on the
    dashboard's port and on the metrics port: each gets a 4xx; the log has one WARNING
    line each naming the parser's error, no ERROR, no traceback and nothing of the
    header's value. Before, aiohttp logged each at ERROR with its parser's traceback."""
    env = _env(bot_env)
    bot = await _replica(bot_factory, fake_telegram, env)
    port, metrics = int(env["WEBHOOK_LISTEN_PORT"]), int(env["METRICS_PORT"])
    big = [(b"X-Stranger", b"v" * 9000), (SECRET_HEADER.encode(), SECRET.encode())]
    statuses = [
        await raw_request(port, PATH, big, b"{}"),
        await raw_request(port, "/dashboard", big, b""),
        await raw_request(metrics, "/metrics", big, b""),
    ]
    assert all(s is not None and 400 <= s < 500 for s in statuses), statuses
    await asyncio.sleep(0.5)  # the child's log lines are flushed
    logs = bot.logs()
    assert logs.count("bad HTTP request from 127.0.0.1 refused with") == 3, logs[-3000:]
    assert "LineTooLong" in logs
    assert "Traceback" not in logs and "vvvvvvvv" not in logs
    assert "Error handling request" not in logs
    assert not fake_telegram.sent_events() and not fake_providers.requests
    assert await bot.stop() == 0


def _nested(depth: int) -> str:
    return '{"message": ' + "[" * depth + "]" * depth + "}"


def _huge_ids(telegram: FakeTelegram, user_id: int) -> dict[str, object]:
    update = telegram.message_update(user_id, "an id beyond 64 bits")
    message = update["message"]
    message["chat"]["id"] = 2**70
    message["from"]["id"] = 2**64 + user_id
    return update


def _seen_chats(env: dict[str, str]) -> set[int]:
    path = env["DATABASE_URL"].removeprefix("sqlite+aiosqlite:///")
    with sqlite3.connect(path) as conn:
        return {int(row[0]) for row in conn.execute("SELECT chat_id FROM seen_messages")}


async def test_nested_json_and_ids_beyond_64_bits_get_200_and_are_skipped(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """An update nested 100,000 deep (``RecursionError`` in the JSON decoder) and one
    whose chat and user ids do not fit 64 bits (``OverflowError`` at the intake) are
    each answered 200 — Telegram would redeliver a 500 forever — and skipped as
    undecodable: counted, one WARNING each naming its update id, no traceback, no
    intake row. The next message is answered."""
    env = _env(bot_env)
    bot = await _replica(bot_factory, fake_telegram, env)
    deep = fake_telegram.raw_update(_nested(100_000))
    huge = _huge_ids(fake_telegram, 93)
    for update in (deep, huge):
        assert (await fake_telegram.deliver(update, timeout=30)).status == 200
    await _answered(fake_telegram, 94, "answered after the odd updates")
    counts = await dropped(_metrics(env))
    assert counts.get("undecodable_update") == 2
    logs = bot.logs()
    assert "Traceback" not in logs
    for update_id in (deep["update_id"], huge["update_id"]):
        [line] = [ln for ln in logs.splitlines() if f"skipped webhook update {update_id}:" in ln]
        assert "WARNING" in line, line
    assert _seen_chats(env) == {94}
    assert await bot.stop() == 0


async def test_polling_skips_nested_json_and_ids_beyond_64_bits_and_goes_on(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """The same two updates in a polling process's getUpdates batch: skipped (logged
    with their ids, counted), the good message in the same batch and the next one are
    answered. Before, the nested one failed the batch's decoding on every poll
    ("Failed to fetch updates", the offset never moved) and the huge ids failed the
    intake."""
    env = dict(bot_env, METRICS_PORT=str(free_port()), LOG_LEVEL="INFO")
    bot = bot_factory(env=env)
    await bot.start()
    deep = fake_telegram.inject_raw_update(_nested(100_000))
    huge = fake_telegram.inject_update(_huge_ids(fake_telegram, 95))
    mark = fake_telegram.mark()
    fake_telegram.inject_message(96, "/help")
    await fake_telegram.wait_sent(96, since=mark, timeout=30)
    fake_telegram.inject_message(97, "/help")
    await fake_telegram.wait_sent(97, since=mark, timeout=30)
    logs = bot.logs()
    for update_id in (deep, huge):
        assert f"skipped update {update_id}: the client cannot decode it" in logs
    assert "Failed to fetch updates" not in logs and "Traceback" not in logs
    counts = await dropped(_metrics(env))
    assert counts.get("undecodable_update") == 2
    assert _seen_chats(env) == {96, 97}
    assert await bot.stop() == 0


async def test_a_429_on_set_webhook_at_start_is_waited_out_and_the_replica_starts(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """Replicas starting together hit Telegram's per-bot limit: one 429 with
    ``retry_after=2`` on setWebhook is waited out (one WARNING), the call is made again
    no sooner and the replica starts and answers. Before, it exited 1."""
    fake_telegram.fail_next("setWebhook", 429, retry_after=2)
    env = _env(bot_env)
    bot = await _replica(bot_factory, fake_telegram, env)
    first, second = fake_telegram.requests("setWebhook")
    assert first.status == 429 and second.status == 200
    assert second.monotonic - first.monotonic >= 2.0
    await _answered(fake_telegram, 98, "answered after a flood wait at start")
    logs = bot.logs()
    assert logs.count("Telegram asked to wait 2 s before setWebhook") == 1
    assert await bot.stop() == 0


async def test_a_429_beyond_the_start_bound_exits_1_in_one_line(
    bot_factory: BotFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """A ``retry_after`` beyond what a start waits in all (60 s) is not slept: exit 1
    at once with one ``kopek:`` line naming the call and the wait asked for."""
    fake_telegram.fail_next("setWebhook", 429, retry_after=3600)
    env = _env(bot_env)
    port = env["WEBHOOK_LISTEN_PORT"]
    bot = bot_factory(env=env, ready_url=f"http://127.0.0.1:{port}/readyz")
    with pytest.raises(BotExited) as exited:
        await bot.start()
    assert exited.value.returncode == 1
    [line] = [ln for ln in bot.stderr().splitlines() if ln.startswith("kopek:")]
    assert "setWebhook" in line and "3600 s" in line and "60 s" in line, line
    assert len(fake_telegram.requests("setWebhook")) == 1
