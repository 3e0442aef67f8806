"""A wallet top-up's refund that a crash, a lost answer or a repeated command cannot
split (``docs/decisions/300-a-refund-is-pending-until-telegram-answers.md``): the refund
is recorded pending with its booking before ``refundStarPayment``, and completed once —
by the next start after a SIGKILL (a real bot process: the crash needs one), when
Telegram answers ``CHARGE_ALREADY_REFUNDED``, by a second /refund after Telegram did not
answer; on PostgreSQL by one of two replicas.

The wallet: one top-up of 100 Stars at 9,000 µUSD a Star ($0.90), nothing spent.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest

from tests.support.harness import BotFactory, paid_only_environment
from tests.support.inprocess import AppFactory, second_replica
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
BUYER = 20
RATE = "9000"
BILL = {"prompt_tokens": 1200, "completion_tokens": 300}
PAYLOAD = f"wallet:100:{RATE}"
#: the payer's refund notice (bot/text/wallet.py, wallet_refunded_text), in English
TOLD = "↩️ Your top-up of 100 ⭐ was refunded; $0.900000 left your wallet."


def _env(tg: FakeTelegram, providers: FakeProviders, db: Path) -> dict[str, str]:
    return paid_only_environment(
        tg,
        providers,
        db,
        BILL,
        ADMIN_IDS=str(ADMIN),
        WALLET_MUSD_PER_STAR=RATE,
        WALLET_TOPUP_STARS="100",
    )


async def _topped_up(tg: FakeTelegram) -> str:
    """The buyer's payment of 100 Stars, credited (its thank-you seen): its charge id."""
    paid = tg.successful_payment_update(BUYER, PAYLOAD, 100)
    mark = tg.mark()
    tg.inject_update(paid)
    await tg.wait_for(
        lambda m: m.chat_id == BUYER and "added to your wallet" in m.text, since=mark, timeout=60
    )
    return str(paid["message"]["successful_payment"]["telegram_payment_charge_id"])


async def _admin_says(tg: FakeTelegram, text: str, mark: int) -> str:
    sent = await tg.wait_for(
        lambda m: m.chat_id == ADMIN and text in m.text, since=mark, timeout=60
    )
    return sent.text


def _books(db: Path) -> tuple[list[tuple[object, ...]], int, int, int]:
    """The refund rows, the wallet bucket's settled µUSD, the refund events, what the
    credit row says was removed."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT charge_id, state, removed_musd, telegram, claimed_by FROM budget_wallet_refunds"
        ).fetchall()
        (settled,) = conn.execute(
            "SELECT settled_musd FROM budget_buckets WHERE level = 'wallet' AND scope = ?",
            (str(BUYER),),
        ).fetchone()
        (events,) = conn.execute(
            "SELECT COUNT(*) FROM budget_events WHERE kind = 'wallet_refund'"
        ).fetchone()
        (removed,) = conn.execute("SELECT removed_musd FROM budget_wallet_credits").fetchone()
    return rows, int(settled), int(events), int(removed)


@pytest.mark.parametrize("made", [False, True], ids=["call-lost", "answer-lost"])
async def test_sigkill_after_a_refund_is_recorded_completes_it_once_at_the_next_start(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
    made: bool,
) -> None:
    """/refund records the refund pending (its $0.90 already out of the wallet) and calls
    refundStarPayment; the bot is SIGKILLed before Telegram's answer — the call never got
    through (``call-lost``), or it did and only its answer was lost (``answer-lost``).
    The next start completes it: Telegram gives the Stars back once (or answers
    CHARGE_ALREADY_REFUNDED), the refund is booked once, the admin is told which, the
    payer once."""
    db = tmp_path / "kopek.db"
    bot = bot_factory(env=_env(fake_telegram, fake_providers, db))
    await bot.start()
    charge = await _topped_up(fake_telegram)
    fake_telegram.hold_refunds(made=made)
    fake_telegram.inject_message(ADMIN, f"/refund {charge}")
    await fake_telegram.wait_request("refundStarPayment", timeout=60)
    rows, settled, events, _ = _books(db)
    assert [(r[0], r[1], r[2]) for r in rows] == [(charge, "pending", 900_000)]
    assert (settled, events) == (0, 1), "recorded with its booking: the credit is out"
    await bot.kill()
    fake_telegram.release_refunds()
    assert fake_telegram.refunds == ([(BUYER, charge)] if made else [])

    mark = fake_telegram.mark()
    await bot.start()
    # the start's round completes it (or, had Telegram's offset not been confirmed, the
    # /refund delivered again does: the round then finds it under way or done)
    said = await _admin_says(fake_telegram, "$0.900000 left the wallet", mark)
    await fake_telegram.wait_for(
        lambda m: m.chat_id == BUYER and TOLD in m.text, since=mark, timeout=60
    )
    assert await bot.stop() == 0

    assert "the wallet has $0.000000 now" in said, said
    if made:
        assert "already (CHARGE_ALREADY_REFUNDED): the refund is booked once" in said, said
    else:
        assert f"Refunded 100 Stars to user {BUYER}" in said, said
    assert fake_telegram.refunds == [(BUYER, charge)]
    assert len(fake_telegram.requests("refundStarPayment")) == 2
    rows, settled, events, removed = _books(db)
    answer = "CHARGE_ALREADY_REFUNDED" if made else "refunded"
    assert rows == [(charge, "done", 900_000, answer, None)]
    assert (settled, events, removed) == (0, 1, 900_000), "booked once"
    told = [m for m in fake_telegram.sent_events(BUYER) if TOLD in m.text]
    assert len(told) == 1


async def test_telegrams_answers_each_leave_the_books_as_they_say(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """Refused (CHARGE_NOT_FOUND): nothing changed, the credit is back. No answer (a
    500): pending, the credit out, and the admin told so; /refund again completes it
    (Telegram now answers CHARGE_ALREADY_REFUNDED: booked once); once more: already
    refunded, nothing changed. Telegram is asked three times, the wallet booked once."""
    db = tmp_path / "kopek.db"
    bot = app_factory(env=_env(fake_telegram, fake_providers, db))
    await bot.start()
    charge = await _topped_up(fake_telegram)

    async def refund() -> str:
        mark = fake_telegram.mark()
        fake_telegram.inject_message(ADMIN, f"/refund {charge}")
        return await _admin_says(fake_telegram, "", mark)

    fake_telegram.fail_next("refundStarPayment", 400, "Bad Request: CHARGE_NOT_FOUND")
    said = await refund()
    assert "Telegram refused the refund (Bad Request: CHARGE_NOT_FOUND)" in said, said
    assert f"nothing changed: user {BUYER}'s wallet has $0.900000" in said, said
    rows, settled, _, removed = _books(db)
    assert (rows, settled, removed) == ([], -900_000, 0)

    fake_telegram.fail_next("refundStarPayment", 500, "Internal Server Error")
    said = await refund()
    assert "Telegram did not answer the refund" in said and "it stays pending" in said, said
    assert "$0.900000 is out of user 20's wallet, which has $0.000000 now" in said, said
    rows, settled, _, _ = _books(db)
    assert [(r[1], r[4]) for r in rows] == [("pending", None)] and settled == 0
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/refund")
    listing = await _admin_says(fake_telegram, charge, mark)
    assert "(refund pending: its credit is out of the wallet)" in listing, listing

    fake_telegram.fail_next("refundStarPayment", 400, "Bad Request: CHARGE_ALREADY_REFUNDED")
    said = await refund()
    assert "already (CHARGE_ALREADY_REFUNDED): the refund is booked once" in said, said
    assert "$0.900000 left the wallet" in said, said
    assert await refund() == "That payment was refunded already; nothing changed."
    assert await bot.stop() == 0

    assert fake_telegram.refunds == []  # every call was answered by a failure rule
    assert len(fake_telegram.requests("refundStarPayment")) == 3
    rows, settled, events, removed = _books(db)
    assert rows == [(charge, "done", 900_000, "CHARGE_ALREADY_REFUNDED", None)]
    # booked at the refusal's try and undone, then once more: two refunds, one standing
    assert (settled, events, removed) == (0, 2, 900_000)
    assert len([m for m in fake_telegram.sent_events(BUYER) if TOLD in m.text]) == 1


async def test_the_same_refund_twice_refunds_once(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """/refund of a top-up twice, the second sent while the first waits for Telegram:
    the second is told the refund is under way, nothing more; one refundStarPayment, one
    booking; a third, after: already refunded."""
    db = tmp_path / "kopek.db"
    bot = app_factory(env=_env(fake_telegram, fake_providers, db))
    await bot.start()
    charge = await _topped_up(fake_telegram)
    fake_telegram.hold_refunds(made=True)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, f"/refund {charge}")
    await fake_telegram.wait_request("refundStarPayment", timeout=60)
    fake_telegram.inject_message(ADMIN, f"/refund {charge}")
    second = await _admin_says(fake_telegram, "under way", mark)
    assert "nothing more was done" in second
    fake_telegram.release_refunds()
    first = await _admin_says(fake_telegram, "Refunded", mark)
    assert f"Refunded 100 Stars to user {BUYER}; $0.900000 left the wallet" in first
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, f"/refund {charge}")
    assert "refunded already" in await _admin_says(fake_telegram, "", mark)
    assert await bot.stop() == 0
    assert fake_telegram.refunds == [(BUYER, charge)]
    assert len(fake_telegram.requests("refundStarPayment")) == 1
    _, settled, events, _ = _books(db)
    assert (settled, events) == (0, 1)


async def test_a_pending_refund_is_completed_by_one_of_two_replicas_on_postgres(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
    pg_migrated_url: str,
) -> None:
    """Two composition roots on one PostgreSQL database. Telegram does not answer the
    first replica's /refund (pending, free); then both replicas' rounds run at once:
    one claims it, Telegram is asked once more, the admin told once, the wallet booked
    once."""
    env = _env(fake_telegram, fake_providers, tmp_path / "unused.db")
    env["DATABASE_URL"] = pg_migrated_url
    first = app_factory(env=env)
    await first.start()
    async with second_replica(env) as second:
        charge = await _topped_up(fake_telegram)
        fake_telegram.fail_next("refundStarPayment", 502, "Bad Gateway")
        mark = fake_telegram.mark()
        fake_telegram.inject_message(ADMIN, f"/refund {charge}")
        assert "stays pending" in await _admin_says(fake_telegram, "", mark)
        assert second.refunds is not None and first.app is not None
        assert first.app.refunds is not None
        ended = await asyncio.gather(first.app.refunds.run_round(), second.refunds.run_round())
        assert sorted(ended) == [0, 1]
        said = await _admin_says(fake_telegram, "Pending refund", mark)
        assert f"Refunded 100 Stars to user {BUYER}; $0.900000 left the wallet" in said
        wallet = await second.ledger.wallet(BUYER)
        assert (wallet.left_musd, wallet.credited_musd) == (0, 0)
        row = await second.ledger.refund_state(charge)
        assert row is not None and (row.state, row.telegram) == ("done", "refunded")
    assert await first.stop() == 0
    assert fake_telegram.refunds == [(BUYER, charge)]
    assert len(fake_telegram.requests("refundStarPayment")) == 2
    admin = [m for m in fake_telegram.sent_events(ADMIN) if "Pending refund" in m.text]
    assert len(admin) == 1


#: the payer's refund notice of a plan payment (bot/text/stars.py), in English
PLAN_TOLD = "Your payment of 250 ⭐ was refunded"


def _plan_books(db: Path) -> tuple[list[tuple[object, ...]], object, object]:
    """The refund rows (charge, state, kind, stars, telegram, claim), the payment's
    refunded_at, and the buyer's plan in the ledger."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT charge_id, state, kind, stars, telegram, claimed_by FROM budget_wallet_refunds"
        ).fetchall()
        (refunded,) = conn.execute("SELECT refunded_at FROM star_payments").fetchone()
        plan = conn.execute(
            "SELECT plan FROM budget_user_plans WHERE user_id = ?", (BUYER,)
        ).fetchone()
    return rows, refunded, None if plan is None else plan[0]


@pytest.mark.parametrize("made", [False, True], ids=["call-lost", "answer-lost"])
async def test_sigkill_during_a_plan_refund_completes_it_once_at_the_next_start(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    bot_env: dict[str, str],
    made: bool,
) -> None:
    """A plan payment's /refund is recorded pending (the payment marked refunded, the
    plan still the buyer's) before refundStarPayment; the bot is SIGKILLed before
    Telegram's answer. The next start completes it: the Stars given back once (or
    CHARGE_ALREADY_REFUNDED), the plan taken back once, the admin told once, the payer
    once."""
    db = Path(bot_env["DATABASE_URL"].split("///", 1)[1])
    bot = bot_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    paid = fake_telegram.successful_payment_update(BUYER, "plan:pro:250:30", 250)
    charge = str(paid["message"]["successful_payment"]["telegram_payment_charge_id"])
    mark = fake_telegram.mark()
    fake_telegram.inject_update(paid)
    await fake_telegram.wait_for(
        lambda m: m.chat_id == BUYER and "Thank" in m.text, since=mark, timeout=60
    )
    fake_telegram.hold_refunds(made=made)
    fake_telegram.inject_message(ADMIN, f"/refund {charge}")
    await fake_telegram.wait_request("refundStarPayment", timeout=60)
    rows, refunded, plan = _plan_books(db)
    assert [r[:4] for r in rows] == [(charge, "pending", "plan", 250)]
    assert refunded is not None and plan == "pro", "recorded; the plan goes once Telegram says"
    await bot.kill()
    fake_telegram.release_refunds()
    assert fake_telegram.refunds == ([(BUYER, charge)] if made else [])

    mark = fake_telegram.mark()
    await bot.start()
    said = await _admin_says(fake_telegram, "default plan", mark)
    await fake_telegram.wait_for(
        lambda m: m.chat_id == BUYER and PLAN_TOLD in m.text, since=mark, timeout=60
    )
    assert await bot.stop() == 0

    assert said.startswith(f"Pending refund {charge}: "), said
    if made:
        assert "already (CHARGE_ALREADY_REFUNDED): the plan is taken back once" in said, said
    else:
        assert f"Refunded 250 Stars to user {BUYER}; the user is back on the default" in said
    assert fake_telegram.refunds == [(BUYER, charge)]
    assert len(fake_telegram.requests("refundStarPayment")) == 2
    rows, refunded, plan = _plan_books(db)
    answer = "CHARGE_ALREADY_REFUNDED" if made else "refunded"
    assert rows == [(charge, "done", "plan", 250, answer, None)]
    assert refunded is not None and plan is None
    admin = [m for m in fake_telegram.sent_events(ADMIN) if "default plan" in m.text]
    assert len(admin) == 1, [m.text for m in admin]
    told = [m for m in fake_telegram.sent_events(BUYER, since=mark) if PLAN_TOLD in m.text]
    assert len(told) == 1
