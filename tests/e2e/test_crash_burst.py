"""SIGKILL in the middle of a burst of paid messages: no money lost, nothing asked twice.

The message path's durability rules (docs/decisions/011-sqlite-single-writer.md), on a
real bot process (the crash needs one): a hold is on disk before its provider call
starts; a message's intake record is durable no later than its first hold; settle,
release, the end of an operation, history and counters ride grouped commits that a
crash may lose. A burst of 100 first messages from 100 users on
the paid provider in two halves; the process is SIGKILLed during each half at a seeded
point (after the k-th provider request of that half) and restarted, and finally stopped
once every message taken in got its answer or the resend template. Then the ledger must
book at least what the fake provider billed (an unsettled hold is booked at its ceiling
by the next start), hold nothing, no message may have reached the provider twice or
been answered twice, and every message got its answer or the resend template: none
is lost silently. Polling confirms a batch of updates (the next ``getUpdates`` offset)
only once each of its messages has its intake record committed (``bot/session/updates.py``), so
a kill either leaves the batch unconfirmed (Telegram sends it again) or finds the
records (the next start sends the template). The wait for the records is made
unbounded here (POLL_INTAKE_WAIT_SECONDS): after its default 5 s polling would go on
without them, and a kill could then still lose a message (``test_crash_poll_gap.py``
makes that window deterministic).
"""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from budget.pricing.prices import PriceCard, ProviderModel
from budget.types import Usage
from tests.support.harness import (
    BotFactory,
    every_message_closed,
    paid_only_environment,
    wait_provider_requests,
)
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

USERS = 100
FIRST_USER = 7_000
#: what the fake bills each call: 100 input + 50 output tokens
BILL = {"prompt_tokens": 100, "completion_tokens": 50}
#: the fake's answer echoes the question, so an answer names its question
QUESTION = "paid question from user {}"
#: the resend template (bot/text/templates.py, lost_text), in English
NOTICE = "🕰 I was interrupted while answering this message. " + (
    "If no answer to it arrived, please send it again."
)


async def test_sigkill_during_a_paid_burst_loses_no_money_and_asks_nothing_twice(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """Two SIGKILLs at seeded points of a 100-message paid burst: on restart the
    ledger's settled + booked-at-ceiling money ≥ what the provider billed, no hold is
    left, no message reached the provider twice, none was answered twice, and every
    message got an answer or the resend template."""
    rng = random.Random(10)  # where each burst is cut: after this many of its provider calls
    db = tmp_path / "kopek.db"
    env = paid_only_environment(
        fake_telegram, fake_providers, db, BILL, LOG_LEVEL="INFO", POLL_INTAKE_WAIT_SECONDS="3600"
    )
    bot = bot_factory(env=env)
    await bot.start()
    half = USERS // 2
    for burst in range(2):
        before = len(fake_providers.requests)
        for i in range(burst * half, (burst + 1) * half):
            fake_telegram.inject_message(FIRST_USER + i, QUESTION.format(FIRST_USER + i))
        await wait_provider_requests(fake_providers, before + rng.randint(3, 20), timeout=60)
        await bot.kill()
        await bot.start()

    await fake_telegram.wait_until(lambda: every_message_closed(fake_telegram, db), timeout=120)
    assert await bot.stop() == 0  # a clean stop commits what is grouped

    requests = [r for r in fake_providers.requests if r.provider == "deepseek"]
    asked = Counter(
        next(m["content"] for m in reversed(r.body["messages"]) if m["role"] == "user")
        for r in requests
    )
    assert max(asked.values()) == 1, "a message reached the provider twice"
    card = PriceCard([ProviderModel("deepseek", "deepseek-chat", "paid")])
    per_call = card.actual_musd(
        "deepseek",
        "deepseek-chat",
        Usage(input_tokens=BILL["prompt_tokens"], output_tokens=BILL["completion_tokens"]),
        datetime.now(UTC),
    )
    assert per_call > 0
    billed = per_call * len(requests)

    conn = sqlite3.connect(db)
    try:
        booked, held, holds = conn.execute(
            "SELECT COALESCE(SUM(CASE WHEN state IN ('settled', 'expired') THEN actual_musd"
            " ELSE 0 END), 0),"
            " COALESCE(SUM(CASE WHEN state = 'held' THEN 1 ELSE 0 END), 0), COUNT(*)"
            " FROM budget_holds WHERE provider = 'deepseek'"
        ).fetchone()
    finally:
        conn.close()
    assert holds >= len(requests), "a provider call without a hold on disk"
    assert held == 0, "a hold is still outstanding"
    assert booked >= billed, f"booked {booked} µUSD < billed {billed} µUSD"

    answers = Counter(
        m.chat_id
        for m in fake_telegram.sent_events()
        if m.method == "sendMessage" and "paid question from user" in (m.text or "")
    )
    # (a kill may come before any answer went out: every message then gets the template)
    assert all(n == 1 for n in answers.values()), "a message was answered twice"
    assert sum(answers.values()) <= len(requests)
    notices = {m.chat_id for m in fake_telegram.sent_events() if m.text == NOTICE}
    users = range(FIRST_USER, FIRST_USER + USERS)
    silent = [u for u in users if u not in answers and u not in notices]
    assert not silent, f"{len(silent)} messages lost silently (no answer, no notice): {silent}"
