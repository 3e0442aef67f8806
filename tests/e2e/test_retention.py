"""RETENTION_DAYS through the real bot (in-process), on SQLite and on PostgreSQL: answers
booked two months ago, then a round of the bot's own retention job — the old intake
records, chat turns and holds go, ``/budget export`` of that month sends the same totals
file as before (its attempts file now empty, its caption saying why), and the old turns
no longer reach the provider as history."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from budget.kernel.db import create_engine
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage

ADMIN = 1
USER = 40
BEHIND = timedelta(days=60)


class _ShiftedClock:
    """The system clock ``shift`` away (changed by the test: the bot's time travels)."""

    def __init__(self, shift: timedelta) -> None:
        self.shift = shift

    def now(self) -> datetime:
        return datetime.now(UTC) + self.shift

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


async def _ask(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=30)
    return reply.text


async def _export(tg: FakeTelegram, month: str) -> tuple[SentMessage, str, str]:
    """``/budget export <month>``: the attempts document, its text, the totals text."""
    mark = tg.mark()
    tg.inject_message(ADMIN, f"/budget export {month}")
    found: list[SentMessage] = []
    for _ in range(2):
        doc = await tg.wait_for(
            lambda m: m.chat_id == ADMIN and m.method == "sendDocument" and m not in found,
            since=mark,
            timeout=30,
        )
        found.append(doc)
    rows, totals = found
    return rows, tg.document_bytes(rows).decode(), tg.document_bytes(totals).decode()


async def _count(url: str, table: str) -> int:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return int(await conn.scalar(sa.text(f"SELECT COUNT(*) FROM {table}")) or 0)  # noqa: S608
    finally:
        await engine.dispose()


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
async def test_old_rows_go_and_the_books_of_their_month_stay(
    engine: str,
    request: pytest.FixtureRequest,
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ", "MISTRAL", "CEREBRAS"))}
    env.update(ADMIN_IDS=str(ADMIN), RETENTION_DAYS="31", RETENTION_BATCH_ROWS="2")
    if engine == "postgres":
        env["DATABASE_URL"] = request.getfixturevalue("pg_url")
    url = env["DATABASE_URL"]
    fake_providers.script(
        "deepseek",
        *[
            {"text": f"answer {i}", "prompt_tokens": 30 + i, "completion_tokens": 9}
            for i in range(3)
        ],
        {"text": "fresh answer"},
    )
    clock = _ShiftedClock(-BEHIND)
    bot = app_factory(env=env, clock=clock)
    await bot.start()
    month = clock.now().strftime("%Y-%m")
    for i in range(3):
        assert await _ask(fake_telegram, USER, f"old question {i}") == f"answer {i}"
    rows_doc, rows, totals = await _export(fake_telegram, month)
    assert len(rows.splitlines()) == 4 and "3 attempts" in rows_doc.text
    assert await _count(url, "chat_turns") == 6

    clock.shift = timedelta(0)  # two months later
    assert bot.app is not None and bot.app.retention is not None
    report = await bot.app.retention.run_round()
    assert report.ledger.rows["budget_holds"] == 3
    assert report.bot_rows == {"seen_messages": 4, "chat_turns": 6}  # 3 questions, 1 export
    assert report.ledger.batches > 5  # two rows a step
    assert await _count(url, "budget_holds") == 0

    after_doc, after_rows, after_totals = await _export(fake_telegram, month)
    assert after_totals == totals
    assert len(after_rows.splitlines()) == 1  # the header: the attempts are in the totals only
    assert "3 attempts (3 older than the retention window: in the totals only)" in after_doc.text
    assert await _ask(fake_telegram, USER, "new question") == "fresh answer"
    history = fake_providers.requests[-1].body["messages"]
    assert [m["content"] for m in history if m["role"] != "system"] == ["new question"]
    assert not (await bot.app.retention.run_round()).ledger.ran  # one round a day
    await bot.stop()
