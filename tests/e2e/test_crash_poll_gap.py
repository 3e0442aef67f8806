"""SIGKILL right after a ``getUpdates`` batch was fetched: no message of it is lost
silently (polling's crash gap).

aiogram confirms a batch (the next ``getUpdates``'s ``offset``) as soon as it started the
batch's tasks; Telegram then never sends it again. Kopek holds that ``getUpdates`` until
every update of the batch is taken in (``bot/session/updates.py``, ``ConfirmWhenTakenIn``). To make
the window deterministic the test holds SQLite's write lock from outside while a batch of
:data:`~bot.session.updates.POLL_BATCH` messages arrives, so no intake record can be committed, and
watches both the fake Bot API (a ``getUpdates`` confirming the batch) and the bot's log
(its DEBUG line saying the confirming ``getUpdates`` waits for the batch's intake):

* ``held``: SIGKILL while that ``getUpdates`` waits, nothing taken in. The batch was
  never confirmed: the next start receives it again and answers every message once.
* ``confirmed``: the lock is released, the intake records are committed, and the bot is
  SIGKILLed the moment the confirming ``getUpdates`` reaches Telegram. The next start
  finds the records and sends each unanswered message the resend template.

Before the fix the confirming ``getUpdates`` reached Telegram while no intake record could
be written, and the next start knew nothing of the batch: ten users with neither an
answer nor a notice.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from bot.session.updates import POLL_BATCH
from tests.support.harness import (
    BotFactory,
    BotProcess,
    every_message_closed,
    paid_only_environment,
)
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

FIRST_USER = 8_000
QUESTION = "batch question from user {}"
#: what the fake bills each call: 100 input + 50 output tokens
BILL = {"prompt_tokens": 100, "completion_tokens": 50}
#: the resend template (bot/text/templates.py, lost_text), in English
NOTICE = "🕰 I was interrupted while answering this message. " + (
    "If no answer to it arrived, please send it again."
)
#: the bot's DEBUG line when a confirming getUpdates waits for its batch's intake
HELD = "getUpdates waits for the intake of updates"
#: seconds the test waits for the bot to confirm the batch or hold it (a deadline for a
#: hung bot only: either happens within milliseconds)
DECIDE_TIMEOUT_S = 60.0


def _confirming_poll(telegram: FakeTelegram, last_update_id: int, since: int) -> bool:
    """A getUpdates whose offset confirms the batch reached the fake Bot API."""
    return any(
        int(r.params.get("offset") or 0) > last_update_id
        for r in telegram.requests("getUpdates")
        if r.seq >= since
    )


async def _held_or_confirmed(
    bot: BotProcess, telegram: FakeTelegram, last_update_id: int, since: int
) -> str:
    """``"confirmed"`` once the batch is confirmed, ``"held"`` once the bot logged that
    the confirming getUpdates waits (the log has no change notification: it is read
    every 20 ms, as the harness polls the provider fake).

    Raises:
        TimeoutError: neither within :data:`DECIDE_TIMEOUT_S`.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DECIDE_TIMEOUT_S
    while loop.time() < deadline:
        if _confirming_poll(telegram, last_update_id, since):
            return "confirmed"
        if HELD in bot.stderr():
            return "held"
        await asyncio.sleep(0.02)
    raise TimeoutError(f"the batch was neither confirmed nor held:\n{bot.log_tail()}")


@pytest.mark.parametrize("kill_when", ["held", "confirmed"])
async def test_a_kill_right_after_a_batch_was_fetched_loses_no_message_silently(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
    kill_when: str,
) -> None:
    """A batch of POLL_BATCH messages arrives while no intake record can be committed;
    the bot is SIGKILLed while the confirming getUpdates waits (``held``) or the moment it
    went out (``confirmed``), and restarted: every message is answered or gets the resend
    template, none is answered twice, and the batch was never confirmed before its intake
    records were committed."""
    db = tmp_path / "kopek.db"
    # the wait must not run out while the test holds the lock
    env = paid_only_environment(
        fake_telegram, fake_providers, db, BILL, LOG_LEVEL="DEBUG", POLL_INTAKE_WAIT_SECONDS="3600"
    )
    bot = bot_factory(env=env)
    await bot.start()
    users = [FIRST_USER + i for i in range(POLL_BATCH)]

    lock = sqlite3.connect(db, timeout=60, isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")  # the bot's writer can commit nothing now
        since = len(fake_telegram.requests())
        ids = [fake_telegram.inject_message(u, QUESTION.format(u)) for u in users]
        last = max(ids)
        first = await _held_or_confirmed(bot, fake_telegram, last, since)
        if first == "confirmed" or kill_when == "held":
            await bot.kill()
            lock.execute("ROLLBACK")
        else:
            lock.execute("ROLLBACK")  # the intake records can be committed now
            await fake_telegram.wait_until(
                lambda: _confirming_poll(fake_telegram, last, since), timeout=DECIDE_TIMEOUT_S
            )
            await bot.kill()
    finally:
        lock.close()
    await bot.start()

    await fake_telegram.wait_until(lambda: every_message_closed(fake_telegram, db), timeout=120)
    assert await bot.stop() == 0

    sent = [m for m in fake_telegram.sent_events() if m.method == "sendMessage"]
    answers = Counter(m.chat_id for m in sent if "batch question from user" in (m.text or ""))
    notices = Counter(m.chat_id for m in sent if m.text == NOTICE)
    silent = [u for u in users if not answers[u] and not notices[u]]
    assert not silent, f"{len(silent)} messages lost silently (no answer, no notice): {silent}"
    assert all(n == 1 for n in answers.values()), "a message was answered twice"
    assert all(n == 1 for n in notices.values()), "a notice was sent twice"
    assert first == "held", "the batch was confirmed before its intake records were committed"
    if kill_when == "held":  # nothing was taken in: Telegram sent the batch again
        assert answers == Counter(users) and not notices
