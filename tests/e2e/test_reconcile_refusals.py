"""/reconcile's refusals through the bot: a money value beyond the range Kopek reads is
refused in one line naming the field as the file writes it and the limit (never cut to
20 digits and shown as if it were the value), and nothing is kept to apply."""

from __future__ import annotations

import json

from tests.support.inprocess import AppFactory
from tests.support.telegram import FakeTelegram

ADMIN = 1
BIG = "12345678901234567890123456789"  # 29 digits
NO_REPORT = "No reconcile report to apply in this process"


async def _reconcile(tg: FakeTelegram, data: bytes, file_name: str) -> str:
    mark = tg.mark()
    tg.inject_document(ADMIN, data, file_name=file_name, caption="/reconcile deepseek")
    [reply] = await tg.wait_sent(ADMIN, since=mark, timeout=20.0)
    return reply.text


async def _ask(tg: FakeTelegram, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(ADMIN, text)
    [reply] = await tg.wait_sent(ADMIN, since=mark, timeout=20.0)
    return reply.text


def _openai_costs(value: object) -> bytes:
    result = {
        "object": "organization.costs.result",
        "amount": {"value": value, "currency": "usd"},
        "line_item": "gpt-4o, input",
        "project_id": None,
    }
    bucket = {
        "object": "bucket",
        "start_time": 1764547200,
        "end_time": 1764633600,
        "results": [result],
    }
    return json.dumps({"object": "page", "data": [bucket], "has_more": False}).encode()


async def test_a_money_value_beyond_the_range_is_refused_naming_its_field_and_the_limit(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """A 29-digit cost in a CSV whose header writes ``Cost_USD``, and in an OpenAI JSON
    page (as a number and as a string): each reply is one line that names ``Cost_USD`` /
    ``amount.value`` as written, says the $1,000,000,000 limit, shows no 20-digit cut of
    the value, and ``/reconcile apply`` then has nothing to book."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ", "MISTRAL", "CEREBRAS"))}
    env["ADMIN_IDS"] = str(ADMIN)
    bot = app_factory(env=env)
    await bot.start()
    csv_file = (
        "date,model,input_tokens,cached_input_tokens,output_tokens,Cost_USD\n"
        f"2026-12-01,deepseek-chat,1200,0,300,{BIG}\n"
    ).encode()
    replies = {
        "Cost_USD": await _reconcile(fake_telegram, csv_file, "usage.csv"),
        "amount.value": await _reconcile(fake_telegram, _openai_costs(int(BIG)), "costs.json"),
        "amount.value ": await _reconcile(fake_telegram, _openai_costs(BIG), "costs.json"),
    }
    for field, text in replies.items():
        assert "\n" not in text, text
        assert f": {field.strip()} is over $1,000,000,000" in text, text
        assert "Nothing was changed" in text, text
        assert BIG[:20] not in text and "≥ 0" not in text, text
    assert (await _ask(fake_telegram, "/reconcile apply")).startswith(NO_REPORT)
    assert await bot.stop() == 0
