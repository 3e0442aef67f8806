"""Webhook mode in process: the real bot built by ``create_app`` serves
``WEBHOOK_PATH`` with aiohttp; the fake Bot API POSTs updates to it as Telegram does.
The replica tests (several processes on one PostgreSQL) are in
``test_replicas.py``."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
from pathlib import Path

import pytest
from aiohttp import ClientSession

from bot.app.hookctl import delete_webhook
from bot.app.polling import run
from tests.support.harness import free_port
from tests.support.inprocess import AppFactory, InProcessBot, settings_from_env
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

SECRET = "webhook-secret_0123456789abcdef"


def _webhook_env(bot_env: dict[str, str], **extra: str) -> dict[str, str]:
    return dict(
        bot_env,
        WEBHOOK_URL="https://kopek.example.org/tg-hook",
        WEBHOOK_SECRET=SECRET,
        WEBHOOK_LISTEN_HOST="127.0.0.1",
        WEBHOOK_LISTEN_PORT=str(free_port()),
        WEBHOOK_PATH="/tg-hook",
        WEBHOOK_MAX_CONNECTIONS="7",
        **extra,
    )


def _seen(bot_env: dict[str, str]) -> list[tuple[int, int, str]]:
    path = bot_env["DATABASE_URL"].removeprefix("sqlite+aiosqlite:///")
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT chat_id, message_id, status FROM seen_messages ORDER BY id"
        ).fetchall()
    return [(int(c), int(m), str(s)) for c, m, s in rows]


async def _wait_seen(env: dict[str, str], expected: list[tuple[int, int, str]]) -> None:
    """Wait (asking every 50 ms, 20 s at most) until the intake rows are ``expected``:
    the database changes without the fake Bot API seeing a request."""
    async with asyncio.timeout(20):
        while _seen(env) != expected:  # noqa: ASYNC110 - the database has no event to wait on
            await asyncio.sleep(0.05)


async def _status(url: str) -> tuple[int, str]:
    async with ClientSession() as http, http.get(url) as resp:
        return resp.status, await resp.text()


async def _start(app_factory: AppFactory, tg: FakeTelegram, env: dict[str, str]) -> InProcessBot:
    bot = app_factory(env=env)
    await bot.start()
    tg.route_webhook([bot.webhook_url])
    return bot


async def test_webhook_mode_sets_the_webhook_refuses_a_wrong_secret_and_takes_each_update_once(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """At start the bot calls setWebhook with WEBHOOK_URL, the secret, max_connections,
    the update types its handlers use and pending updates kept — never deleteWebhook or
    getUpdates. /healthz and /readyz answer 200 on the webhook's port. A POST without
    the secret header, or with another secret, gets 401: nothing is recorded, sent or
    asked of a provider. The same update with the secret is answered once; delivered
    again (Telegram retrying) it gets 200 and nothing else happens. After SIGTERM's stop
    the webhook is still registered (no deleteWebhook) and the port is closed."""
    env = _webhook_env(bot_env)
    bot = await _start(app_factory, fake_telegram, env)
    hook = fake_telegram.webhook
    assert hook is not None
    assert hook["url"] == "https://kopek.example.org/tg-hook"
    assert hook["secret_token"] == SECRET and hook["max_connections"] == 7
    assert "message" in hook["allowed_updates"] and "callback_query" in hook["allowed_updates"]
    [call] = fake_telegram.webhook_calls
    assert call["method"] == "setWebhook" and call["drop_pending_updates"] in (False, "false")
    assert not fake_telegram.requests("getUpdates")
    base = bot.webhook_url.removesuffix("/tg-hook")
    assert await _status(f"{base}/healthz") == (200, "ok\n")
    assert await _status(f"{base}/readyz") == (200, "ready\n")

    update = fake_telegram.message_update(31, "hello over the webhook")
    no_header = await fake_telegram.deliver(update, secret=None)
    wrong = await fake_telegram.deliver(update, secret="another-secret-0123456789")
    assert (no_header.status, wrong.status) == (401, 401)
    # another well-formed secret (a replica with another WEBHOOK_SECRET
    # set the webhook last) is one ERROR line a minute, naming the likely cause
    assert (await fake_telegram.deliver(update, secret="another-secret-0123456789")).status == 401
    assert bot.logs().count("carried another secret token") == 1
    assert _seen(env) == []
    assert not fake_telegram.sent_events(31) and not fake_providers.requests

    mark = fake_telegram.mark()
    taken = await fake_telegram.deliver(update)
    assert taken.status == 200
    [reply] = await fake_telegram.wait_sent(31, since=mark, timeout=20)
    assert "hello over the webhook" in reply.text  # the fake provider echoes the prompt
    again = await fake_telegram.deliver(update)
    assert again.status == 200
    message_id = update["message"]["message_id"]
    await _wait_seen(env, [(31, message_id, "answered")])
    assert len(fake_providers.requests) == 1
    assert len([e for e in fake_telegram.sent_events(31) if not e.is_edit]) == 1

    # a message injected while the webhook is set is POSTed to it (as Telegram does)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(32, "/help")
    [help_reply] = await fake_telegram.wait_sent(32, since=mark, timeout=20)
    assert "/me" in help_reply.text

    assert await bot.stop() == 0
    assert [c["method"] for c in fake_telegram.webhook_calls] == ["setWebhook"]
    assert fake_telegram.webhook is not None
    assert "/tg-hook" in bot.logs() and SECRET not in bot.logs()


async def test_a_webhook_message_dropped_over_the_update_rate_is_recorded_dropped(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """With USER_MAX_UPDATES_PER_MINUTE=1 a user's second message is taken in (its row
    committed before the 200) and then dropped by the update rate: it is recorded
    ``dropped`` — never left ``received``, which a restart would take for a message
    lost in a crash and ask the user to resend — and costs no provider call."""
    env = _webhook_env(bot_env, USER_MAX_UPDATES_PER_MINUTE="1")
    await _start(app_factory, fake_telegram, env)
    first = fake_telegram.message_update(41, "first")
    second = fake_telegram.message_update(41, "second")
    mark = fake_telegram.mark()
    assert (await fake_telegram.deliver(first)).status == 200
    await fake_telegram.wait_sent(41, since=mark, timeout=20)
    assert (await fake_telegram.deliver(second)).status == 200
    ids = (first["message"]["message_id"], second["message"]["message_id"])
    await _wait_seen(env, [(41, ids[0], "answered"), (41, ids[1], "dropped")])
    assert len(fake_providers.requests) == 1


async def test_a_taken_webhook_port_exits_2_in_one_line_before_telegram_is_called(
    fake_telegram: FakeTelegram,
    bot_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The process's course (``bot.app.polling.run``, in process): the webhook port is bound
    before the start-up hooks, so a port in use ends the run with exit code 2 and one
    ``kopek:`` line on stderr naming the error, without a setWebhook or any other Bot
    API call, and the secret is not printed."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = _webhook_env(bot_env)
        env["WEBHOOK_LISTEN_PORT"] = str(port)
        code = await run(settings_from_env(env))
    err = capsys.readouterr().err
    assert code == 2
    [line] = [ln for ln in err.splitlines() if ln.startswith("kopek:")]
    assert "cannot start" in line and "OSError" in line, line
    assert SECRET not in err
    assert fake_telegram.requests() == []


async def test_polling_refuses_to_start_while_a_webhook_is_set_and_delete_webhook_removes_it(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A polling process on a token whose webhook a replica set (same
    token, no WEBHOOK_URL) asks getWebhookInfo, ends the run (``bot.app.polling.run``, in
    process) with exit 2 and one ``kopek:`` line naming the webhook's host and both ways
    on, without the token — and calls neither deleteWebhook nor getUpdates, so the
    replica keeps its updates (one delivered afterwards is answered).
    ``python -m bot delete-webhook`` then removes it on purpose, keeping pending updates;
    run again it says there is nothing to remove."""
    replica = await _start(app_factory, fake_telegram, _webhook_env(bot_env))
    before = len(fake_telegram.requests())
    polling = dict(bot_env, DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'polling.db'}")
    capsys.readouterr()
    code = await run(settings_from_env(polling))
    err = capsys.readouterr().err
    assert code == 2
    [line] = [ln for ln in err.splitlines() if ln.startswith("kopek:")]
    assert "a webhook is set" in line and "kopek.example.org" in line, line
    assert "WEBHOOK_URL" in line and "python -m bot delete-webhook" in line
    token = bot_env["BOT_TOKEN"]
    assert token not in err and token.partition(":")[2] not in err
    assert [r.method for r in fake_telegram.requests()[before:]] == ["getWebhookInfo"]
    assert fake_telegram.webhook is not None

    mark = fake_telegram.mark()
    fake_telegram.inject_message(33, "still served by the replica")
    [reply] = await fake_telegram.wait_sent(33, since=mark, timeout=20)
    assert "still served by the replica" in reply.text
    assert await replica.stop() == 0

    settings = settings_from_env(polling)
    assert await delete_webhook(settings) == 0
    out = capsys.readouterr().out
    assert "kopek.example.org" in out and "removed" in out and token not in out
    assert fake_telegram.webhook is None
    assert fake_telegram.webhook_calls[-1] == {
        "method": "deleteWebhook",
        "drop_pending_updates": False,
    }
    assert await delete_webhook(settings) == 0
    assert "nothing to remove" in capsys.readouterr().out
    assert [c["method"] for c in fake_telegram.webhook_calls].count("deleteWebhook") == 1


async def test_an_undecodable_webhook_update_is_logged_with_its_id_and_where(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """An update this aiogram cannot read gets 200 (a retry would fail
    the same way) and is logged with its update id and the field that failed, as polling
    logs it — not a bare "skipped a webhook update"."""
    bot = await _start(app_factory, fake_telegram, _webhook_env(bot_env))
    broken = {"update_id": 424242, "message": {"message_id": "not a number"}}
    assert (await fake_telegram.deliver(broken)).status == 200
    line = "skipped webhook update 424242: the client cannot decode it (at message"
    assert line in bot.logs()
    assert await bot.stop() == 0


async def test_an_admins_kill_skips_the_intake_slot_the_answers_it_stops_hold(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """With every INTAKE_MAX_CONCURRENT slot taken by slow answers, a
    webhook request waited for a slot before its 200 — a user's /stop waited 15.9 s, and
    an admin's /kill would wait for the very answers it is sent to stop. A control (the
    handlers exempt from the update rate) now skips that wait; other messages still
    queue for a slot."""
    admin = 1
    env = _webhook_env(
        bot_env, ADMIN_IDS=str(admin), INTAKE_MAX_CONCURRENT="1", AUTO_KILL_FRACTION="0"
    )
    for name in ("GROQ_API_KEY", "GROQ_API_KEY_2", "MISTRAL_API_KEY", "CEREBRAS_API_KEY"):
        env.pop(name, None)
    fake_providers.script("deepseek", {"text": "slow answer", "delay_s": 6.0})
    bot = await _start(app_factory, fake_telegram, env)
    mark = fake_telegram.mark()
    assert (await fake_telegram.deliver(fake_telegram.message_update(21, "slow"))).status == 200
    async with asyncio.timeout(20):
        while not fake_providers.requests:  # noqa: ASYNC110 - the fake has no event for it
            await asyncio.sleep(0.02)
    # the one slot is busy: another user's message waits for it before its 200
    queued = asyncio.create_task(fake_telegram.deliver(fake_telegram.message_update(22, "next")))
    kill = await fake_telegram.deliver(fake_telegram.message_update(admin, "/kill drill"))
    assert kill.status == 200
    kill_reply = await fake_telegram.wait_for(
        lambda m: m.chat_id == admin and "Kill switch ON" in m.text, since=mark, timeout=5
    )
    assert not queued.done()  # still waiting for the slot the slow answer holds
    assert "slow answer" not in [m.text for m in fake_telegram.sent_events(21, since=mark)]
    assert "Kill switch ON" in kill_reply.text
    assert (await queued).status == 200
    paused = await fake_telegram.wait_for(lambda m: m.chat_id == 22, since=mark, timeout=20)
    assert "paused" in paused.text
    assert len(fake_providers.requests) == 1
    assert await bot.stop() == 0
