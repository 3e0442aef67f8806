"""The chat model's tools under the per-operation cap, through the real bot (in process,
DeepSeek's fake answering with function calls): each model call of the loop is a hold
of the one operation, settled; a URL to a private address is refused like a link; the
same calls again are stopped by the fingerprint and a request cap by
OPERATION_MAX_REQUESTS, each with the answer so far and the cap named; the footer's
cost is what the ledger booked."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from budget.policy.money import usd
from tests.e2e.test_provider_usage import DEEPSEEK_KEY, ask, holds, only, started
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram
from tests.support.tme import FakeTme, TmePost


def calls(*pairs: tuple[str, dict[str, Any]], text: str | None = None) -> dict[str, Any]:
    """A DeepSeek answer asking for these function calls (OpenAI shape)."""
    return {
        "raw_body": {
            "id": "x",
            "object": "chat.completion",
            "model": "deepseek-chat",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": text,
                        "tool_calls": [
                            {
                                "id": f"call_{n}",
                                "type": "function",
                                "function": {"name": name, "arguments": json.dumps(args)},
                            }
                            for n, (name, args) in enumerate(pairs)
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140},
        }
    }


def user_turns(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "user"]


async def test_a_tool_step_is_a_second_held_call_of_the_same_operation_and_private_urls_are_refused(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    fake_tme: FakeTme,
) -> None:
    """fetch_url to a loopback address: refused before any connection (the page's
    server saw nothing); the model is asked again with that result; both calls are
    holds of one operation, each settled; the reply carries the answer and a footer
    with 2 model calls and exactly what the ledger booked."""
    secret = fake_tme.add_path("/secret", "top secret", content_type="text/plain")
    env = only(bot_env, fake_providers, "deepseek", CHAT_TOOLS="fetch_url,my_budget")
    fake_providers.script(
        DEEPSEEK_KEY,
        calls(("fetch_url", {"url": secret})),
        {"text": "I could not read that page.", "prompt_tokens": 200, "completion_tokens": 8},
    )
    bot = await started(app_factory, env)
    reply = await ask(fake_telegram, "What does that page say?")
    assert await bot.stop() == 0
    first, second = fake_providers.requests
    assert [t["function"]["name"] for t in first.body["tools"]] == ["my_budget", "fetch_url"]
    assert fake_tme.requests("/secret") == []
    assert "refused: the host is not a public address" in user_turns(second.body)[-1]
    rows = holds(env)
    assert len(rows) == 2 and len({r["operation_id"] for r in rows}) == 1
    assert all(r["state"] == "settled" for r in rows), rows
    booked = sum(r["actual_musd"] for r in rows)
    assert booked > 0
    assert reply.startswith("I could not read that page.")
    assert f"🔧 2 model calls (tools: fetch_url); this answer cost ${usd(booked)}." in reply


async def test_channel_posts_reads_the_digest_source_and_my_budget_the_ledger(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    fake_tme: FakeTme,
) -> None:
    """One answer asking for both tools at once: the results turn holds the channel's
    post (from the fake t.me, as digests read it) and the user's spend from the ledger."""
    fake_tme.add_posts(
        "kopeknews",
        [TmePost(post_id=7, date=datetime(2026, 11, 30, 9, 0, tzinfo=UTC), text="Launch day")],
    )
    env = only(bot_env, fake_providers, "deepseek", CHAT_TOOLS="channel_posts,my_budget")
    fake_providers.script(
        DEEPSEEK_KEY,
        calls(("channel_posts", {"channel": "@kopeknews"}), ("my_budget", {})),
        {"text": "Launch day, and you have money left."},
    )
    bot = await started(app_factory, env)
    reply = await ask(fake_telegram, "News of @kopeknews, and my budget?")
    assert await bot.stop() == 0
    results = user_turns(fake_providers.requests[1].body)[-1]
    assert "Launch day" in results and "spent today: $" in results
    assert reply.startswith("Launch day, and you have money left.")
    assert "(tools: channel_posts, my_budget)" in reply


async def test_the_same_calls_again_are_stopped_by_the_fingerprint_with_the_answer_so_far(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """A model that keeps asking for my_budget: the third request repeats the second's
    fingerprint, the ledger refuses it (loop), and the user gets the text so far, the
    note naming the repeated calls, and the footer: 2 model calls, both settled."""
    env = only(bot_env, fake_providers, "deepseek", CHAT_TOOLS="my_budget")
    fake_providers.default(DEEPSEEK_KEY, calls(("my_budget", {}), text="Checking…"))
    bot = await started(app_factory, env)
    reply = await ask(fake_telegram, "How much is left?")
    assert await bot.stop() == 0
    assert len(fake_providers.requests) == 2
    assert reply.startswith("Checking…")
    assert "Stopped after 2 model calls: the model asked for the same tool calls again" in reply
    rows = holds(env)
    assert len(rows) == 2 and all(r["state"] == "settled" for r in rows)
    assert f"this answer cost ${usd(sum(r['actual_musd'] for r in rows))}" in reply


async def test_operation_max_requests_ends_the_loop_with_the_cap_named(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """Different calls every step and OPERATION_MAX_REQUESTS=3: three model calls, then
    the cap's note; nothing beyond the cap reached the provider."""
    env = only(
        bot_env, fake_providers, "deepseek", CHAT_TOOLS="fetch_url", OPERATION_MAX_REQUESTS="3"
    )
    fake_providers.script(
        DEEPSEEK_KEY,
        *(calls(("fetch_url", {"url": f"https://10.0.0.{n}/"})) for n in range(5)),
    )
    bot = await started(app_factory, env)
    reply = await ask(fake_telegram, "Read them all")
    assert await bot.stop() == 0
    assert len(fake_providers.requests) == 3
    assert "Stopped after 3 model calls: this message reached its cap on model calls" in reply
    assert "🔧 3 model calls (tools: fetch_url)" in reply
