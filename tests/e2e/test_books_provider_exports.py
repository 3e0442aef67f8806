"""/reconcile with the files providers really serve, through the real bot (in-process):
DeepSeek's usage download (the ZIP of its amount and cost sheets) corrects a timed-out
call; a CNY download, an amount in EUR, repeated rows and a tab-separated sheet of
unknown columns are refused in one sentence, and nothing changes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from budget.pricing.prices import PriceCard, ProviderModel
from budget.types import Usage
from tests.support import provider_files as pf
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
USER = 5


async def _ask(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    reply = await tg.wait_for(
        lambda m: m.chat_id == user and m.method == "sendMessage", since=mark, timeout=20.0
    )
    return reply.text


async def _send(tg: FakeTelegram, data: bytes, name: str, caption: str) -> str:
    mark = tg.mark()
    tg.inject_document(ADMIN, data, file_name=name, caption=caption, mime_type="application/zip")
    reply = await tg.wait_for(
        lambda m: m.chat_id == ADMIN and m.method == "sendMessage", since=mark, timeout=20.0
    )
    return reply.text


def _books(db: Path) -> list[tuple[str, int, int]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT hold_id, actual_musd, estimated FROM budget_holds"))


async def test_a_deepseek_download_corrects_a_timed_out_call_and_bad_files_change_nothing(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """One answered and one timed-out DeepSeek call (booked at its ceiling, estimated);
    the account's ZIP download also holds another app's key. Refused, each in one
    sentence and with the ledger as it was: the CNY download (the cost sheet's line),
    a usage CSV in EUR, a sheet repeating a row, a tab-separated sheet of unknown
    columns. Summed over both keys the report differs and says so (the period too:
    the sum is above what the ledger could have booked); with ``apikey=kopek``
    the period matches, the correction is offered and ``/reconcile apply`` books the day
    at the sheet's price × amount."""
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
    [hold_id] = [h for h, _, estimated in _books(db) if estimated]
    card = PriceCard([ProviderModel("deepseek", "deepseek-chat", "paid")])
    days = pf.daily_usage(db, card, "deepseek", real={hold_id: Usage(70, 0, 200)})
    amount = pf.deepseek_amount_sheet(days, api_key_name="kopek", other_key="website")
    first = days[0].start
    served = pf.deepseek_zip(amount, pf.deepseek_cost_sheet(days), first, first)
    before = _books(db)

    cny = pf.deepseek_zip(amount, pf.deepseek_cost_sheet(days, currency="CNY"), first, first)
    refused = await _send(fake_telegram, cny, "usage.zip", "/reconcile")
    assert "line 2: currency is CNY, not USD" in refused and refused.count("changed") == 1
    day = first.date().isoformat()
    eur = (
        "date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd,currency\n"
        f"{day},deepseek-chat,1200,400,300,0.0005,EUR\n"
    ).encode()
    refused = await _send(fake_telegram, eur, "usage.csv", "/reconcile")
    assert "line 2: currency is EUR, not USD" in refused
    repeated = pf.deepseek_amount_sheet(days, repeat_line=2)
    refused = await _send(fake_telegram, repeated, "amount.csv", "/reconcile")
    assert "line 3 repeats line 2 (the same day, model, API key, type and price)" in refused
    tabbed = await _send(fake_telegram, b"Datum\tKosten\n1.7.\t0,5\n", "x.csv", "/reconcile")
    assert "a tab-separated file with columns datum, kosten" in tabbed
    assert _books(db) == before
    assert (await _ask(fake_telegram, ADMIN, "/reconcile apply")).startswith("No reconcile report")

    summed = await _send(fake_telegram, served, "usage.zip", "/reconcile")
    assert "summed over 2 API keys (kopek, website)" in summed
    assert "apply is off for this file: it sums several API keys' rows" in summed
    assert "can be corrected" not in summed
    # both keys' tokens are more than the ledger could have booked (its estimated
    # booking at the tokens its hold was sized on): a difference, not a match
    assert "1. period: ⚠️ differs" in summed and "ledger 2,593 tokens, export 3,540" in summed
    report = await _send(fake_telegram, served, "usage.zip", "/reconcile deepseek apikey=kopek")
    assert "(DeepSeek amount sheet + DeepSeek cost sheet, daily, 1 row," in report
    assert "1. period: ✅ match" in report and "1 estimated bookings can be corrected" in report
    applied = await _ask(fake_telegram, ADMIN, "/reconcile apply")
    assert applied.startswith("✅ 1 estimated bookings corrected")
    booked = sum(cost for _, cost, _ in _books(db))
    assert booked == round(days[0].cost_musd)
    assert await bot.stop() == 0
    assert "Traceback" not in bot.logs()
