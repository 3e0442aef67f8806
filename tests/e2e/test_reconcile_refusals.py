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


#: Characters that must never reach the chat as they are from an echoed input: a bidi
#: override and isolate, a NUL, a control, a zero-width joiner, a line separator.
UNSAFE = "\u202e\u2066\x00\x01\x1f\u200d\u2028"


def _clean(text: str) -> bool:
    return not any(c in text for c in UNSAFE)


async def test_echoed_input_reaches_the_chat_escaped_and_cut(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """A /reconcile caption naming a provider with a bidi override, NUL and control
    characters (and 200 more), a 21 MB export whose file name holds U+202E, a CSV whose
    model (repeated, so refused) holds them, /plan and /providers arguments with them:
    every reply shows them escaped (``<U+202E>``, ``<U+0000>``), none as it is, and the
    caption's echo is cut with ``…``."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ", "MISTRAL", "CEREBRAS"))}
    env["ADMIN_IDS"] = str(ADMIN)
    bot = app_factory(env=env)
    await bot.start()
    evil = "ev\u202eil\x00\x01\u2066\u200d" + "x" * 200  # no \x1f: split() splits on it
    tg = fake_telegram
    replies: list[str] = []

    mark = tg.mark()
    tg.inject_document(ADMIN, b"date\n", file_name="u.csv", caption=f"/reconcile {evil}")
    [reply] = await tg.wait_sent(ADMIN, since=mark, timeout=20.0)
    assert reply.text.startswith("Unknown provider 'ev<U+202E>il<U+0000><U+0001><U+2066>"), (
        reply.text
    )
    assert "x" * 60 not in reply.text and "…'" in reply.text
    replies.append(reply.text)

    mark = tg.mark()
    name = "invoice\u202evsc.exe"
    tg.inject_document(
        ADMIN, b"x", file_name=name, caption="/reconcile deepseek", file_size=21 * 1024 * 1024
    )
    [reply] = await tg.wait_sent(ADMIN, since=mark, timeout=20.0)
    assert "invoice<U+202E>vsc.exe: 21.0 MiB is over the 20 MiB limit" in reply.text, reply.text
    replies.append(reply.text)

    row = '2026-12-01,"m\u202e\x1f\u2028x",1,0,1,0.1\n'
    usage = "date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n" + row * 2
    replies.append(await _reconcile(tg, usage.encode(), "usage.csv"))
    assert "line 3 repeats line 2" in replies[-1] and "m<U+202E><U+001F><U+2028>x" in replies[-1]

    replies.append(await _ask(tg, f"/plan 5 {evil}"))
    assert replies[-1].startswith("No plan 'ev<U+202E>il"), replies[-1]
    replies.append(await _ask(tg, f"/providers enable {evil}"))
    assert replies[-1].startswith("Unknown provider 'ev<U+202E>il"), replies[-1]
    assert [_clean(text) for text in replies] == [True] * len(replies), replies
    assert await bot.stop() == 0
