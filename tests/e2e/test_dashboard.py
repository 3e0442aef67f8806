"""The operator dashboard through the real bot, over HTTP (the page itself in a browser:
test_dashboard_browser.py): the /dashboard button, the gate on every API request, the
figures against /budget's for the same books, the two-step kill switch, the request
limits, and the same routes beside the webhook."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import ClientSession

from bot.ops.dashboard.api import CSP, MAX_BODY_BYTES
from tests.support.dashboard import (
    ADMIN,
    DASHBOARD_URL,
    MEMBER,
    dashboard_env,
    page_url,
    spend_some,
)
from tests.support.harness import free_port
from tests.support.inprocess import AppFactory, InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram
from tests.support.webapp import signed_init_data

SECRET = "webhook-secret_0123456789abcdef"


async def _ask(tg: FakeTelegram, user: int, text: str, **fields: Any) -> str:
    mark = tg.mark()
    tg.inject_message(user, text, **fields)
    [reply] = await tg.wait_sent(fields.get("chat_id", user), since=mark, timeout=20)
    return reply.text


def _auth(init_data: str) -> dict[str, str]:
    return {"Authorization": f"tma {init_data}"}


async def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    async with ClientSession() as http, http.get(url, headers=headers) as resp:
        body = await resp.json() if resp.content_type == "application/json" else await resp.text()
        return resp.status, resp.headers, body


async def _post(url: str, init_data: str, body: object) -> tuple[int, Any]:
    async with ClientSession() as http, http.post(url, headers=_auth(init_data), json=body) as resp:
        data = await resp.json() if resp.content_type == "application/json" else await resp.text()
        return resp.status, data


async def _started(
    app_factory: AppFactory, tg: FakeTelegram, providers: FakeProviders, tmp_path: Path
) -> tuple[InProcessBot, dict[str, str]]:
    env = dashboard_env(tg, providers, tmp_path / "kopek.db")
    bot = app_factory(env=env)
    await bot.start()
    return bot, env


async def test_dashboard_gives_admins_a_web_app_button_in_private_chats_only(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """An admin's /dashboard carries one web_app button to DASHBOARD_URL; in a group it
    says why not; a non-admin gets the typo reply, as for every admin command."""
    bot, _env = await _started(app_factory, fake_telegram, fake_providers, tmp_path)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/dashboard")
    [reply] = await fake_telegram.wait_sent(ADMIN, since=mark)
    assert "operator dashboard" in reply.text
    [[button]] = reply.reply_markup["inline_keyboard"]
    assert button["web_app"] == {"url": DASHBOARD_URL}
    assert await _ask(fake_telegram, MEMBER, "/dashboard") == "Unknown command. See /help."
    group = await _ask(fake_telegram, ADMIN, "/dashboard", chat_id=-100777, chat_type="supergroup")
    assert "only in a private chat" in group
    assert await bot.stop() == 0


async def test_dashboard_off_says_how_to_turn_it_on(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    assert "set DASHBOARD_URL" in await _ask(fake_telegram, ADMIN, "/dashboard")
    await bot.stop()


async def test_only_fresh_launch_data_of_an_admin_reads_the_api(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """No header, another scheme, a forged hash, another bot's signature, an expired
    launch, a non-admin: 401 with no detail, counted; the admin's fresh launch: 200.
    Every answer, 401 and 404 included, is no-store with the CSP."""
    bot, env = await _started(app_factory, fake_telegram, fake_providers, tmp_path)
    state = page_url(env) + "api/state"
    now = datetime.now(UTC)
    token = fake_telegram.token
    good = signed_init_data(ADMIN, now, token)
    forged = good[:-1] + ("0" if good[-1] != "0" else "1")  # the hash is the last field
    refused = [
        None,
        {"Authorization": good},  # no scheme
        {"Authorization": f"Bearer {good}"},
        _auth(forged),
        _auth(signed_init_data(ADMIN, now, "999:another-bots-token")),
        _auth(signed_init_data(ADMIN, now - timedelta(seconds=3601), token)),
        _auth(signed_init_data(MEMBER, now, token)),
        _auth("user=%7B%7D&hash=" + "é" * 64),
    ]
    for headers in refused:
        status, got, body = await _get(state, headers)
        assert (status, body) == (401, "Unauthorized"), headers
        assert got["Cache-Control"] == "no-store" and got["Content-Security-Policy"] == CSP
    status, got, body = await _get(state, _auth(good))
    assert status == 200 and body["version"] == 1
    assert got["Cache-Control"] == "no-store" and got["Content-Security-Policy"] == CSP
    status, got, _body = await _get(page_url(env) + "static/nothing.js")
    assert status == 404 and got["Cache-Control"] == "no-store"
    status, got, page = await _get(page_url(env))
    assert status == 200 and got["Content-Type"].startswith("text/html")
    assert token not in page and token.split(":")[1] not in page
    _status, _h, metrics = await _get(f"http://127.0.0.1:{env['METRICS_PORT']}/metrics")
    assert f'kopek_dropped_total{{reason="dashboard_auth"}} {float(len(refused))}' in metrics
    assert await bot.stop() == 0


def _budget_line(report: str, start: str) -> str:
    [line] = [ln.removeprefix("• ") for ln in report.splitlines() if ln.startswith("• " + start)]
    return line


async def test_the_panels_show_what_budget_reports_for_the_same_books(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """One free and one paid answer on the books: every bucket line is /budget's word for
    word, and so are the exposure, the providers' spend, the top user and the team; the
    charts' totals are the providers' spend of today, the free call at list price apart."""
    bot, env = await _started(app_factory, fake_telegram, fake_providers, tmp_path)
    await spend_some(fake_telegram, fake_providers)
    report = await _ask(fake_telegram, ADMIN, "/budget")
    auth = _auth(signed_init_data(ADMIN, datetime.now(UTC), fake_telegram.token))
    _s, _h, state = await _get(page_url(env) + "api/state", auth)
    lines = {b["id"]: b["text"]["line"] for b in state["buckets"]}
    for bucket_id, start in [
        ("global//day", "global day"),
        ("global//hour", "global hour"),
        ("team/core/day", "team core day"),
        ("team/core/hour", "team core hour"),
    ]:
        assert lines[bucket_id] == _budget_line(report, start)
    assert f"exposure if killed now: {state['text']['exposure']}" in report
    assert state["kill"]["text"] in report
    providers = {p["name"]: p for p in state["providers"]}
    for name, paid in (("groq", False), ("deepseek", True)):
        p = providers[name]
        assert p["paid"] is paid
        settled = f"settled {p['text']['settled']}, list {p['text']['list']}"
        noun = "call" if p["calls_today"] == 1 else "calls"
        assert f"{name}{' paid' if paid else ''}: {p['calls_today']} {noun}, {settled}" in report
    assert providers["groq"]["quota"]["remaining_requests"] is not None  # Groq's headers
    [top] = state["top_users"]
    assert f"{top['user_id']}: settled {top['text']['settled']}" in report
    assert state["top_teams"][0]["name"] == "core"
    _s, _h, series = await _get(page_url(env) + "api/series", auth)
    for chart in (series["hourly"], series["daily"]):
        assert chart["paid_total_musd"] == providers["deepseek"]["settled_musd"] > 0
        assert chart["free_list_total_musd"] == providers["groq"]["list_musd"] > 0
    assert series["hourly"]["limit_musd"] == 500_000 and series["daily"]["limit_musd"] == 2_000_000
    assert len(series["hourly"]["x"]) == 24 and len(series["daily"]["x"]) == 30
    assert await bot.stop() == 0


async def test_the_kill_switch_takes_two_steps_and_is_the_commands_ledger_call(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """The first POST changes nothing and asks; the second, with its token, trips the
    switch as /kill does (the reason on /budget, the same WARNING, new work refused); a
    token for another reason or action is 409; /unkill's two steps reset it."""
    bot, env = await _started(app_factory, fake_telegram, fake_providers, tmp_path)
    init = signed_init_data(ADMIN, datetime.now(UTC), fake_telegram.token)
    kill, unkill = page_url(env) + "api/kill", page_url(env) + "api/unkill"
    status, asked = await _post(kill, init, {"reason": "runaway\x00 costs"})
    assert status == 200 and "Trip the kill switch (runaway costs)?" in asked["question"]
    assert "Kill switch: off" in await _ask(fake_telegram, ADMIN, "/budget")
    other = {"reason": "another", "confirm": asked["confirm"]}
    assert (await _post(kill, init, other))[0] == 409
    assert (await _post(unkill, init, {"confirm": asked["confirm"]}))[0] == 409
    status, done = await _post(kill, init, {"reason": "runaway costs", "confirm": asked["confirm"]})
    assert status == 200 and done["text"].startswith("⛔ Kill switch ON (runaway costs).")
    assert f"KILLED by admin {ADMIN}: runaway costs" in await _ask(fake_telegram, ADMIN, "/budget")
    assert "kill switch tripped via the dashboard by admin 1: runaway costs" in bot.logs()
    assert "paused by its administrators" in await _ask(fake_telegram, MEMBER, "still there?")
    status, asked = await _post(unkill, init, {})
    assert status == 200 and asked["question"].startswith("Reset the kill switch?")
    status, done = await _post(unkill, init, {"confirm": asked["confirm"]})
    assert status == 200 and done["text"].startswith("✅ Kill switch OFF.")
    assert "kill switch reset via the dashboard by admin 1" in bot.logs()
    assert "Kill switch: off" in await _ask(fake_telegram, ADMIN, "/budget")
    assert await bot.stop() == 0


async def test_mutations_are_post_only_with_a_small_json_body(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    bot, env = await _started(app_factory, fake_telegram, fake_providers, tmp_path)
    init = signed_init_data(ADMIN, datetime.now(UTC), fake_telegram.token)
    kill = page_url(env) + "api/kill"
    status, got, _body = await _get(kill, _auth(init))
    assert status == 405 and got["Cache-Control"] == "no-store"
    assert (await _post(kill, init, {"reason": "x" * MAX_BODY_BYTES}))[0] == 413
    assert (await _post(kill, init, ["a list"]))[0] == 400
    async with ClientSession() as http:
        deep = b"[" * 2000 + b"]" * 2000  # within the cap, past the parser's depth
        async with http.post(kill, headers=_auth(init), data=deep) as resp:
            assert resp.status == 400
        async with http.post(kill, headers=_auth(init), data=b"\xff\xfe") as resp:
            assert resp.status == 400
    async with ClientSession() as http, http.post(kill, json={"reason": "x"}) as resp:
        assert resp.status == 401  # a POST without launch data reads nothing
    assert "Kill switch: off" in await _ask(fake_telegram, ADMIN, "/budget")
    assert await bot.stop() == 0


async def test_the_dashboard_is_served_beside_the_webhook(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """Webhook mode: the webhook's port serves the page and its API (no metrics port)."""
    env = dashboard_env(fake_telegram, fake_providers, tmp_path / "kopek.db")
    del env["METRICS_PORT"]
    port = free_port()
    env.update(
        WEBHOOK_URL="https://bot.example.org/tg-hook",
        WEBHOOK_SECRET=SECRET,
        WEBHOOK_LISTEN_HOST="127.0.0.1",
        WEBHOOK_LISTEN_PORT=str(port),
        WEBHOOK_PATH="/tg-hook",
    )
    bot = app_factory(env=env)
    await bot.start()
    fake_telegram.route_webhook([bot.webhook_url])
    base = f"http://127.0.0.1:{port}/ops/dashboard/"
    assert (await _get(base))[0] == 200
    init = signed_init_data(ADMIN, datetime.now(UTC), fake_telegram.token)
    status, _h, state = await _get(base + "api/state", _auth(init))
    assert status == 200 and state["kill"]["killed"] is False
    assert "operator dashboard" in await _ask(fake_telegram, ADMIN, "/dashboard")
    assert await bot.stop() == 0
