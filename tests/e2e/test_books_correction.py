"""The books tried as a new operator would, in-process (create_app)."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path

from budget.books.usage_export import parse_export
from budget.pricing.prices import PriceCard, ProviderModel
from budget.types import Usage
from tests.support.inprocess import AppFactory
from tests.support.provider_exports import export_from_ledger
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
USER = 5
HEADER = b"date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"


async def _ask(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    reply = await tg.wait_for(
        lambda m: m.chat_id == user and m.method == "sendMessage", since=mark, timeout=20.0
    )
    return reply.text


async def _send(tg: FakeTelegram, data: bytes, caption: str) -> str:
    mark = tg.mark()
    tg.inject_document(ADMIN, data, file_name="deepseek.csv", caption=caption)
    reply = await tg.wait_for(
        lambda m: m.chat_id == ADMIN and m.method == "sendMessage", since=mark, timeout=20.0
    )
    return reply.text


async def test_a_timed_out_paid_call_is_corrected_from_a_one_row_daily_export(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """One answered and one timed-out DeepSeek call (booked at its ceiling, estimated);
    the provider's daily export (one row) shows the real usage: /reconcile reports the
    period as matching and offers the correction, /reconcile apply books it (the day
    then equals the export), a second apply has nothing left. Bad input on the way gets
    a clear sentence, never "Something went wrong" or "Nothing was changed" twice."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ", "MISTRAL", "CEREBRAS"))}
    env |= {"ADMIN_IDS": str(ADMIN), "PROVIDER_TIMEOUT_SECONDS": "2"}
    fake_providers.script(
        "deepseek",
        {"text": "answer", "prompt_tokens": 1200, "cached_tokens": 400, "completion_tokens": 300},
        {"delay_s": 4, "text": "too late"},
    )
    bot = app_factory(env=env)
    await bot.start()
    assert await _ask(fake_telegram, USER, "question 0") == "answer"
    await _ask(fake_telegram, USER, "question 1")  # times out: booked at the ceiling

    db = Path(env["DATABASE_URL"].removeprefix("sqlite+aiosqlite:///"))
    with sqlite3.connect(db) as conn:
        [(hold_id,)] = conn.execute("SELECT hold_id FROM budget_holds WHERE estimated = 1")
    card = PriceCard([ProviderModel("deepseek", "deepseek-chat", "paid")])
    real = {hold_id: Usage(70, 0, 200)}
    export = export_from_ledger(db, card, "deepseek", granularity="day", real_usage=real)
    assert export.count(b"\n") == 2  # the header and one row

    day_9999 = HEADER + b"9999-12-31,deepseek-chat,1,0,1,0.1\n"
    refused = await _send(fake_telegram, day_9999, "/reconcile")
    assert "line 2: the bucket is not between 1971 and 9998" in refused
    assert refused.count("Nothing was changed") == 1
    foreign = HEADER + b"2026-01-14,gpt-4o,1,0,1,0.1\n"
    assert (await _send(fake_telegram, foreign, "/reconcile")).count("changed") == 1
    two_periods = await _send(fake_telegram, export, "/reconcile deepseek 2026-01 2026-02")
    assert two_periods.startswith("Send the provider's usage export")

    report = await _send(fake_telegram, export, "/reconcile DeepSeek")
    assert "1. period: ✅ match" in report, report
    assert "1 estimated bookings can be corrected" in report
    applied = await _ask(fake_telegram, ADMIN, "/reconcile apply")
    assert applied.startswith("✅ 1 estimated bookings corrected")
    lines = parse_export(export, "deepseek.csv", "UTC").lines
    export_musd = sum((line.cost_musd or Decimal(0) for line in lines), Decimal(0))
    with sqlite3.connect(db) as conn:
        [(booked,)] = conn.execute("SELECT SUM(actual_musd) FROM budget_holds")
        [(events,)] = conn.execute("SELECT COUNT(*) FROM budget_corrections")
    assert booked == export_musd.to_integral_value() and events == 1
    assert (await _ask(fake_telegram, ADMIN, "/reconcile apply")).startswith("No reconcile report")
    assert await bot.stop() == 0
    assert "Traceback" not in bot.logs()


async def test_a_reply_to_the_export_applies_it_on_a_process_that_never_saw_the_report(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """The report lives in the memory of the process that made it: after a restart (or
    on another webhook replica) a bare /reconcile apply finds none and says where to
    look. /reconcile apply sent as a reply to the export compares that export again and
    books its corrections on any process; a second such reply moves no money."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ", "MISTRAL", "CEREBRAS"))}
    env |= {"ADMIN_IDS": str(ADMIN), "PROVIDER_TIMEOUT_SECONDS": "2"}
    fake_providers.script(
        "deepseek",
        {"text": "answer", "prompt_tokens": 1200, "cached_tokens": 400, "completion_tokens": 300},
        {"delay_s": 4, "text": "too late"},
    )
    bot = app_factory(env=env)
    await bot.start()
    assert await _ask(fake_telegram, USER, "question 0") == "answer"
    await _ask(fake_telegram, USER, "question 1")  # times out: booked at the ceiling
    db = Path(env["DATABASE_URL"].removeprefix("sqlite+aiosqlite:///"))
    with sqlite3.connect(db) as conn:
        [(hold_id,)] = conn.execute("SELECT hold_id FROM budget_holds WHERE estimated = 1")
    card = PriceCard([ProviderModel("deepseek", "deepseek-chat", "paid")])
    real = {hold_id: Usage(70, 0, 200)}
    data = export_from_ledger(db, card, "deepseek", granularity="day", real_usage=real)
    upload = fake_telegram.document_update(
        ADMIN, data, file_name="deepseek.csv", caption="/reconcile deepseek"
    )
    mark = fake_telegram.mark()
    fake_telegram.inject_update(upload)
    [report] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20)
    assert "1 estimated bookings can be corrected" in report.text, report.text
    assert await bot.stop() == 0

    bot = app_factory(env=env)  # the same database, a process without the report
    await bot.start()
    bare = await _ask(fake_telegram, ADMIN, "/reconcile apply")
    assert bare.startswith("No reconcile report to apply in this process"), bare
    assert "reply /reconcile apply to the export" in bare

    def reply_apply() -> dict[str, object]:
        update = fake_telegram.message_update(ADMIN, "/reconcile apply")
        update["message"]["reply_to_message"] = upload["message"]
        return update

    mark = fake_telegram.mark()
    fake_telegram.inject_update(reply_apply())
    [applied] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20)
    assert applied.text.startswith("✅ 1 estimated bookings corrected"), applied.text
    lines = parse_export(data, "deepseek.csv", "UTC").lines
    export_musd = sum((line.cost_musd or Decimal(0) for line in lines), Decimal(0))
    with sqlite3.connect(db) as conn:
        [(booked,)] = conn.execute("SELECT SUM(actual_musd) FROM budget_holds")
    assert booked == export_musd.to_integral_value()

    mark = fake_telegram.mark()
    fake_telegram.inject_update(reply_apply())
    [again] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20)
    with sqlite3.connect(db) as conn:
        [(rebooked,)] = conn.execute("SELECT SUM(actual_musd) FROM budget_holds")
    assert rebooked == booked and again.text.startswith("Nothing to correct"), again.text
    assert await bot.stop() == 0
    assert "Traceback" not in bot.logs()
