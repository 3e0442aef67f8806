"""The whole bot on PostgreSQL, in process: ``create_app`` with
``DATABASE_URL=postgresql+asyncpg://…`` on the suite's own server, the migrations applied
at start on an empty database, the ledger on :class:`budget.storage.postgres.store.PgStore` and
every
bot store (intake, history, profiles, digests, summary cache) through SQLAlchemy's
asyncpg dialect."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import asyncpg

from tests.conftest import PG_PASSWORD
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage
from tests.support.tme import FakeTme, TmePost

ADMIN = 1


async def _ask(tg: FakeTelegram, user: int, text: str, timeout: float = 30.0) -> SentMessage:  # noqa: ASYNC109
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=timeout)
    return reply


async def test_paid_chat_on_postgres_holds_settles_and_refuses_at_the_limit(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    pg_url: str,
) -> None:
    """On an empty PostgreSQL database the bot migrates and answers through the paid
    anchor: the second message carries the first turn as history, a redelivered update
    is dropped (exactly-once intake), the third message is refused naming the global
    limit (two settled answers of 20,480 µUSD leave less than a ceiling of $0.05) with
    no provider call, and the ledger's settled total in PostgreSQL is what the provider
    reported, within the limit. After a restart /reset clears the history."""
    for target in ("groq", "mistral", "cerebras"):
        fake_providers.script(target, *[{"status": 429, "retry_after": "600"}] * 10)
    fake_providers.script("deepseek", *[{"text": "paid answer", "completion_tokens": 1024}] * 3)
    env = dict(
        bot_env,
        DATABASE_URL=pg_url,
        ADMIN_IDS=str(ADMIN),
        BUDGET_GLOBAL_HOURLY_USD="0.05",
        AUTO_KILL_FRACTION="0",
        DEGRADED_MIN_OUTPUT_TOKENS="1024",
        # $10 in / $20 out per 1M tokens: a ceiling of at least 1024 × 20 = 20,480 µUSD
        PRICE_OVERRIDES='{"deepseek:deepseek-chat": '
        '{"input": "10", "cached_input": "1", "output": "20"}}',
    )
    bot = app_factory(env=env)
    await bot.start()
    first = await _ask(fake_telegram, 7, "My name is Ada.")
    assert first.text == "paid answer"
    second = await _ask(fake_telegram, 7, "What is my name?")
    assert second.text == "paid answer"
    history = fake_providers.requests_for("deepseek")[1].body["messages"]
    assert [m["content"] for m in history if m["role"] == "user"] == [
        "My name is Ada.",
        "What is my name?",
    ]

    original = next(
        r for r in fake_telegram.requests("getUpdates") if r.response and r.response.get("result")
    )
    raw = original.response["result"][0] if original.response else {}
    fake_telegram.inject_update({k: v for k, v in raw.items() if k != "update_id"})
    refused = await _ask(fake_telegram, 8, "one more")
    assert "global" in refused.text and "resets at" in refused.text, refused.text
    assert len(fake_providers.requests_for("deepseek")) == 2

    me = await _ask(fake_telegram, 7, "/me")
    assert "$0.04" in me.text or "0.041" in me.text, me.text
    budget = await _ask(fake_telegram, ADMIN, "/budget")
    assert "Outstanding holds: 0" in budget.text, budget.text
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/budget export")
    rows_doc = await fake_telegram.wait_for(
        lambda m: m.chat_id == ADMIN and m.method == "sendDocument", since=mark, timeout=30
    )
    rows = list(csv.DictReader(io.StringIO(fake_telegram.document_bytes(rows_doc).decode())))
    assert len(rows) == 2 and {r["provider"] for r in rows} == {"deepseek"}
    exported = sum(int(r["cost_musd"]) for r in rows)
    assert await bot.stop() == 0

    conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        settled = await conn.fetchval(
            "SELECT sum(settled_musd) FROM budget_buckets WHERE level = 'global' AND win = 'hour'"
        )
        seen = await conn.fetchval("SELECT count(*) FROM seen_messages WHERE user_id = 7")
    finally:
        await conn.close()
    assert 0 < settled == exported <= 50_000
    assert seen == 3  # two chat messages and /me; the redelivery was not recorded again

    again = app_factory(env=env)
    await again.start()
    assert "cleared" in (await _ask(fake_telegram, 7, "/reset")).text
    assert await again.stop() == 0


async def test_a_digest_on_postgres_summarises_each_post_once_across_a_restart(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    pg_password_url: str,
) -> None:
    """Two users follow one channel (profiles, sources and subscriptions in PostgreSQL);
    the first digest costs one LLM request per post; after a restart the second user's
    digest is served from the summary cache (no request); both runs are recorded. The
    bot logs in with a password holding ``@`` and ``/`` (percent-encoded in the URL):
    the migrations, the stores and the ledger's own asyncpg pool all connect, and the
    password is in no log line."""
    now = datetime.now(UTC)
    fake_tme.add_posts(
        "pgnews",
        [
            TmePost(
                post_id=100 + i,
                date=now - timedelta(hours=3 - i),
                text=f"Post {i}: the council approved budget item {i} after a long debate.",
            )
            for i in range(3)
        ],
        title="Pg News",
    )
    env = dict(bot_env, DATABASE_URL=pg_password_url, ADMIN_IDS=str(ADMIN))
    env["DIGEST_STAGGER_SECONDS"] = "0"
    bot = app_factory(env=env)
    await bot.start()
    for uid in (51, 52):
        await _ask(fake_telegram, uid, "/digest_off")
        assert "Subscribed" in (await _ask(fake_telegram, uid, "/sub @pgnews")).text
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/digest_now 51")
    first = await fake_telegram.wait_for(
        lambda m: m.chat_id == 51 and "Pg News" in m.text, since=mark, timeout=60
    )
    assert len(fake_providers.requests) == 3
    assert await bot.stop() == 0

    again = app_factory(env=env)
    await again.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/digest_now 52")
    second = await fake_telegram.wait_for(
        lambda m: m.chat_id == 52 and "Pg News" in m.text, since=mark, timeout=60
    )
    assert len(fake_providers.requests) == 3, "the cache served the second digest"
    bullets = [[ln for ln in m.text.splitlines() if ln.startswith("•")] for m in (first, second)]
    assert len(bullets[0]) == len(bullets[1]) == 3
    await again.stop()

    conn = await asyncpg.connect(pg_password_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        runs = await conn.fetch("SELECT user_id, status FROM digest_runs ORDER BY user_id")
    finally:
        await conn.close()
    assert [(r["user_id"], r["status"]) for r in runs] == [(51, "sent"), (52, "sent")]
    logs = bot.logs() + again.logs()
    assert "kopek started" in logs
    assert PG_PASSWORD not in logs and quote(PG_PASSWORD, safe="") not in logs
