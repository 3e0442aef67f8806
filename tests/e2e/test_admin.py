"""Admin commands, per-user queue, provider auth failures, metrics (crash
recovery is with the process tests, in test_instance_lock.py)."""

from __future__ import annotations

import asyncio
import signal
import socket
import urllib.request
from contextlib import closing

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1


def _free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _ask(tg: FakeTelegram, user: int, text: str, timeout: float = 20.0) -> str:  # noqa: ASYNC109
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=timeout)
    return reply.text


async def test_limits_teams_budget_report_and_chart(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """/limit and /team change persisted state; bad arguments get a usage line; /budget
    shows teams and the limit; /budget chart sends a PNG photo; /me names the new limit."""
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    assert "The amount is USD" in await _ask(fake_telegram, ADMIN, "/limit global day lots")
    assert (await _ask(fake_telegram, ADMIN, "/limit planet day 1")).startswith("Usage: /limit")
    assert "Limit set" in await _ask(fake_telegram, ADMIN, "/limit user 50 day 0.25")
    assert "in team core" in await _ask(fake_telegram, ADMIN, "/team core add 50")
    assert "Limit set" in await _ask(fake_telegram, ADMIN, "/limit team core hour 1.5")
    assert (await _ask(fake_telegram, ADMIN, "/team core promote 50")).startswith("Usage: /team")
    assert "user id" in await _ask(fake_telegram, ADMIN, "/team core add 99999999999999999999999")
    assert "Team names" in await _ask(fake_telegram, ADMIN, "/team list add 5")
    assert "No team" in await _ask(fake_telegram, ADMIN, "/budget team nosuch")
    assert "core: 50" in await _ask(fake_telegram, ADMIN, "/team list")
    report = await _ask(fake_telegram, ADMIN, "/budget")
    assert "Teams: core (1)" in report and "Kill switch: off" in report
    assert "team core hour" in report and "limit $1.500000" in report
    user = await _ask(fake_telegram, ADMIN, "/budget user 50")
    assert "team core" in user and "$0.250000" in user
    me = await _ask(fake_telegram, 50, "/me")
    assert "$0.250000" in me and "Team: core" in me

    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/budget chart")
    photo = await fake_telegram.wait_for(
        # the first chart imports matplotlib and renders off the loop: seconds on a
        # loaded machine (10 s was too short at load average 15)
        lambda m: m.chat_id == ADMIN and m.method == "sendPhoto",
        since=mark,
        timeout=60,
    )
    assert photo.file is not None and photo.file["size"] > 1000
    assert await bot.stop() == 0

    again = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await again.start()
    assert "core: 50" in await _ask(fake_telegram, ADMIN, "/team list")
    await again.stop()


async def test_user_queue_answers_in_order_and_refuses_overflow(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """USER_MAX_INFLIGHT=2, USER_QUEUE_MAX=3: of a burst of seven messages, the first
    five are answered in the order sent and the two newest get the 'too many at once'
    template, with no provider call for them."""
    # Distinct finish times (slot A: 0.3 s, then q2 0.3 s, then q3 0.2 s; slot B: 1.0 s), so
    # one slot frees at a time and the provider sees the queued prompts in queue order;
    # two slots freeing at the same instant would make the arrival order a race.
    delays = [0.3, 1.0, 0.3, 0.2, 0.3]
    fake_providers.script(
        "groq", *[{"text": f"answer {i}", "delay_s": d} for i, d in enumerate(delays)]
    )
    bot = app_factory(env=dict(bot_env, USER_MAX_INFLIGHT="2", USER_QUEUE_MAX="3"))
    await bot.start()
    mark = fake_telegram.mark()
    for i in range(7):
        fake_telegram.inject_message(32, f"q{i}")
    replies = await fake_telegram.wait_sent(32, 7, since=mark, timeout=30)
    refused = [r for r in replies if "Too many messages at once" in r.text]
    assert len(refused) == 2
    answers = [r.text for r in replies if r not in refused]
    assert sorted(answers) == [f"answer {i}" for i in range(5)]
    prompts = [r.body["messages"][-1]["content"] for r in fake_providers.requests]
    assert prompts[:2] and set(prompts[:2]) == {"q0", "q1"}
    assert prompts[2:] == ["q2", "q3", "q4"]  # the newest two, q5 and q6, were refused
    await bot.stop()


async def test_auth_failure_disables_key_notifies_admins_once_and_enable_restores(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """Groq key 1 answers 401: key 2 answers; admins are told once; key 1 gets no more
    requests; /providers shows it disabled; /providers enable groq brings it back."""
    fake_providers.script("gsk_fake_groq_key_1", {"status": 401})
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    mark = fake_telegram.mark()
    assert (await _ask(fake_telegram, 40, "first")).endswith("first")
    assert (await _ask(fake_telegram, 40, "second")).endswith("second")
    notices = [e for e in fake_telegram.sent_events(ADMIN, since=mark) if "disabled" in e.text]
    assert len(notices) == 1 and "groq" in notices[0].text
    assert "gsk_fake" not in notices[0].text
    keys = [r.key for r in fake_providers.requests_for("groq")]
    assert keys == ["gsk_fake_groq_key_1", "gsk_fake_groq_key_2", "gsk_fake_groq_key_2"]
    providers = await _ask(fake_telegram, ADMIN, "/providers")
    assert "groq (" in providers and "DISABLED" in providers
    assert "gsk_fake" not in providers
    assert "enabled" in await _ask(fake_telegram, ADMIN, "/providers enable groq")
    await _ask(fake_telegram, 40, "third")
    assert fake_providers.requests_for("groq")[-1].key == "gsk_fake_groq_key_1"
    assert await bot.stop(signal.SIGINT) == 0


async def test_metrics_endpoint_serves_ledger_and_cascade_figures(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """METRICS_PORT set: /metrics on 127.0.0.1 has provider calls and budget gauges."""
    port = _free_port()
    bot = app_factory(env=dict(bot_env, METRICS_PORT=str(port), BUDGET_GLOBAL_DAILY_USD="1"))
    await bot.start()
    await _ask(fake_telegram, 41, "count me")

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    body = await asyncio.to_thread(scrape)
    assert 'kopek_llm_calls_total{provider="groq"} 1.0' in body
    assert "kopek_budget_utilisation_ratio" in body
    assert "kopek_budget_exposure_musd 0.0" in body
    assert "kopek_llm_paid_anchor_calls_total 0.0" in body
    assert "kopek_budget_operations_today 1.0" in body
    await bot.stop()
