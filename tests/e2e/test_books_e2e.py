"""The books in-process (create_app): /budget export, /reconcile, /providers prices."""

from __future__ import annotations

import csv
import io
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

from budget.pricing.prices import DEFAULT_OVERRIDES
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage

ADMIN = 1
USER = 5
#: What the fake DeepSeek reports for each answer: (prompt, cached, completion) tokens.
BILLED = [(1200, 400, 300), (2345, 0, 77), (999, 512, 1000)]


async def _ask(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=20.0)
    return reply.text


async def _documents(tg: FakeTelegram, n: int, since: int) -> list[SentMessage]:
    found: list[SentMessage] = []
    for _ in range(n):
        doc = await tg.wait_for(
            lambda m: m.chat_id == ADMIN and m.method == "sendDocument" and m not in found,
            since=since,
        )
        found.append(doc)
    return found


def _list_price_musd(prompt: int, cached: int, completion: int) -> int:
    """DeepSeek's list price of one answer (USD per 1M tokens = µUSD per token)."""
    rates = DEFAULT_OVERRIDES["deepseek:deepseek-chat"]
    exact = (
        Decimal(prompt - cached) * rates.input
        + Decimal(cached) * rates.cached
        + Decimal(completion) * rates.output
    )
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


async def test_budget_export_reconcile_and_prices_through_the_bot(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Three paid answers, then: /budget export sends the attempts CSV whose cost column
    sums to what the fake DeepSeek billed at list price, to the µUSD, and a totals CSV;
    a non-admin gets the unknown-command reply; /reconcile with the matching export
    reports a match, an oversized or foreign file is refused; /providers prices lists the
    card with its source."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ", "MISTRAL", "CEREBRAS"))}
    env["ADMIN_IDS"] = str(ADMIN)
    fake_providers.script(
        "deepseek",
        *[
            {"text": f"answer {i}", "prompt_tokens": p, "cached_tokens": c, "completion_tokens": o}
            for i, (p, c, o) in enumerate(BILLED)
        ],
    )
    bot = app_factory(env=env)
    await bot.start()
    for i in range(len(BILLED)):
        assert await _ask(fake_telegram, USER, f"question {i}") == f"answer {i}"

    unknown = await _ask(fake_telegram, USER, "/frobnicate")
    assert await _ask(fake_telegram, USER, "/budget export") == unknown
    assert await _ask(fake_telegram, USER, "/providers prices") == unknown

    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/budget export")
    rows_doc, totals_doc = await _documents(fake_telegram, 2, mark)
    assert rows_doc.file is not None and rows_doc.file["name"].startswith("kopek-spend-")
    rows = list(csv.DictReader(io.StringIO(fake_telegram.document_bytes(rows_doc).decode())))
    billed = sum(_list_price_musd(*b) for b in BILLED)
    assert len(rows) == len(BILLED)
    assert sum(int(r["cost_musd"]) for r in rows) == billed
    assert sorted(
        (int(r["input_tokens"]), int(r["cached_input_tokens"]), int(r["output_tokens"]))
        for r in rows
    ) == sorted(BILLED)
    assert {r["estimated"] for r in rows} == {"0"} and {r["key_name"] for r in rows} == {"deepseek"}
    totals = fake_telegram.document_bytes(totals_doc).decode()
    assert f"provider,deepseek,{len(BILLED)}," in totals
    assert "attempts" in rows_doc.text and "$" in rows_doc.text

    day = rows[0]["utc_time"][:10]
    model = rows[0]["model"]
    p, c, o = (sum(b[i] for b in BILLED) for i in range(3))
    cost = Decimal(sum(_list_price_musd(*b) for b in BILLED)).scaleb(-6)
    export = (
        "date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"
        f"{day},{model},{p},{c},{o},{cost}\n"
    )
    mark = fake_telegram.mark()
    fake_telegram.inject_document(
        ADMIN, export.encode(), file_name="deepseek.csv", caption="/reconcile"
    )
    [report] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20.0)
    assert "Reconcile deepseek with deepseek.csv" in report.text
    assert "1. period: ✅ match" in report.text and "3. price card: ✅ match" in report.text
    assert "Nothing to correct" in await _ask(fake_telegram, ADMIN, "/reconcile apply")

    mark = fake_telegram.mark()
    fake_telegram.inject_document(
        ADMIN, b"x", file_name="huge.csv", caption="/reconcile", file_size=21 * 1024 * 1024
    )
    [huge] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20.0)
    assert "over the 20 MiB limit" in huge.text and "Nothing was changed" in huge.text

    prices = await _ask(fake_telegram, ADMIN, "/providers prices")
    rates = DEFAULT_OVERRIDES["deepseek:deepseek-chat"]
    assert f"deepseek:deepseek-chat (paid): input ${rates.input}" in prices
    assert "override: api-docs.deepseek.com" in prices
    assert await bot.stop() == 0
