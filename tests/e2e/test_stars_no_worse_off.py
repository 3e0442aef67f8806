"""A Stars payment never leaves the user worse off, through the real bot (decision 278):
/buy and the pre-checkout of a plan the user has with no end are refused before any
invoice, and a payment that arrives anyway is booked once and keeps the plan with no
end; a second subscription is refused while one renews; /cancel_renewal stops every
subscription that still renews and says how many, and every /renew and /cancel_renewal
reply says what is stored and what Telegram answered."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
BUYER = 10
DAY_S = 86_400

PLANS = """
default = "free"

[free]
title = "Free"

[pro]
title = "Pro"
day_usd = 1.00
stars = 250
period_days = 30

[max]
title = "Max"
day_usd = 2.00
stars = 300
renews = true
"""


def _env(bot_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "plans.toml"
    path.write_text(PLANS)
    return dict(bot_env, PLANS_FILE=str(path), ADMIN_IDS=str(ADMIN))


def _payments(env: dict[str, str]) -> list[tuple[Any, ...]]:
    path = Path(env["DATABASE_URL"].split("///", 1)[1])
    with sqlite3.connect(path) as db:
        return db.execute(
            "SELECT charge_id, plan, stars, applied_at IS NOT NULL FROM star_payments"
            " ORDER BY paid_at"
        ).fetchall()


async def _handled(env: dict[str, str], message_id: int) -> None:
    """Wait until the bot finished handling the buyer's message ``message_id`` (its
    intake row has an outcome: a payment seen again answers nothing to wait for)."""
    path = Path(env["DATABASE_URL"].split("///", 1)[1])
    for _ in range(400):
        with sqlite3.connect(path) as db:
            row = db.execute(
                "SELECT finished_at FROM seen_messages WHERE chat_id = ? AND message_id = ?",
                (BUYER, message_id),
            ).fetchone()
        if row is not None and row[0] is not None:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"message {message_id} was not handled in 20 s")


async def _send(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    await tg.wait_sent(user, 1, timeout=20, since=mark)
    return next(e.text for e in tg.sent_events(user, since=mark) if not e.is_edit)


async def _refused(tg: FakeTelegram, payload: str, stars: int) -> str:
    """The pre-checkout's refusal (it must be one)."""
    query = tg.inject_pre_checkout_query(BUYER, payload, stars)
    await tg.wait_request(
        "answerPreCheckoutQuery",
        lambda r: str(r.params.get("pre_checkout_query_id")) == query,
        timeout=20,
    )
    answer = tg.pre_checkout_answers[query]
    assert answer["ok"] is False, answer
    return str(answer["error_message"])


async def _pay(tg: FakeTelegram, payload: str, stars: int, expires: int | None = None) -> str:
    """One payment delivered twice (Telegram repeats updates); the bot's one reply."""
    paid = tg.successful_payment_update(
        BUYER, payload, stars, subscription_expiration_date=expires, first_of_subscription=True
    )
    mark = tg.mark()
    tg.inject_update(paid)
    tg.inject_update(dict(paid))
    await tg.wait_sent(BUYER, 1, timeout=20, since=mark)
    [reply] = [e.text for e in tg.sent_events(BUYER, since=mark) if not e.is_edit]
    return reply


async def test_a_plan_held_with_no_end_is_not_sold_and_a_payment_anyway_keeps_it(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """An admin put the buyer on Pro with no end: /buy pro and its pre-checkout are
    refused before anything is charged; a payment that arrives anyway (an invoice from
    before the grant) is booked once and the plan stays with no end — never 30 days.
    The same for a subscription's charge of Max, held with no end."""
    env = _env(bot_env, tmp_path)
    bot = app_factory(env=env)
    await bot.start()
    assert "User 10 is on pro" in await _send(fake_telegram, ADMIN, "/plan 10 pro")
    owned = (
        "You already have the Pro plan with no end date: buying it would add nothing, so "
        "nothing is sold or charged."
    )
    assert await _send(fake_telegram, BUYER, "/buy pro") == owned
    assert fake_telegram.invoices == [] and fake_telegram.requests("sendInvoice") == []
    assert await _refused(fake_telegram, "plan:pro:250:30", 250) == owned

    kept = await _pay(fake_telegram, "plan:pro:250:30", 250)
    assert kept == (
        "✅ Thank you! Your payment is booked. You already have the Pro plan with no end "
        "date, and you keep it with no end date."
    )
    assert [row[1:] for row in _payments(env)] == [("pro", 250, 1)]
    me = await _send(fake_telegram, BUYER, "/me")
    assert "Plan: Pro" in me and "Plan: Pro, until" not in me, me

    assert "User 10 is on max" in await _send(fake_telegram, ADMIN, "/plan 10 max")
    assert (await _send(fake_telegram, BUYER, "/buy max")).startswith(
        "You already have the Max plan with no end date"
    )
    assert fake_telegram.invoices == []
    expires = int(time.time()) + 30 * DAY_S
    kept = await _pay(fake_telegram, "sub:max:300:30", 300, expires)
    assert kept.startswith("✅ Thank you! Your payment is booked. You already have the Max")
    assert kept.endswith("Telegram takes Stars again every 30 days until you send /cancel_renewal.")
    assert [row[1:] for row in _payments(env)] == [("pro", 250, 1), ("max", 300, 1)]
    me = await _send(fake_telegram, BUYER, "/me")
    assert "Plan: Max" in me and "Plan: Max, until" not in me, me
    assert fake_telegram.refunds == [] and fake_providers.requests == []
    await bot.stop()


async def test_one_subscription_renews_at_a_time_and_cancel_stops_every_one(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str], tmp_path: Path
) -> None:
    """While a subscription renews, /buy of another and its pre-checkout are refused.
    Two that renew anyway (a second link opened before the first charge): both charges
    booked, the plan extended; /cancel_renewal stops both and says so; sent again it
    calls Telegram no more; /renew turns one back on, and a second /buy is refused
    again."""
    env = _env(bot_env, tmp_path)
    bot = app_factory(env=env)
    await bot.start()
    now = int(time.time())
    assert (await _pay(fake_telegram, "sub:max:300:30", 300, now + 30 * DAY_S)).startswith(
        "✅ Thank you! You are on the Max plan until"
    )
    renewing = await _send(fake_telegram, BUYER, "/buy max")
    assert renewing.startswith(
        "Your subscription to the Max plan already renews: Telegram takes the next Stars at"
    ), renewing
    assert "A second subscription would charge you twice, so nothing is sold or charged." in (
        renewing
    )
    assert fake_telegram.invoices == []
    assert (await _refused(fake_telegram, "sub:max:300:30", 300)).startswith(
        "Your subscription to the Max plan already renews"
    )

    # the second subscription's first charge, paid on a link opened before: booked
    assert "Max plan until" in await _pay(fake_telegram, "sub:max:300:30", 300, now + 20 * DAY_S)
    charges = [row[0] for row in _payments(env)]
    assert len(charges) == 2
    cancelled = await _send(fake_telegram, BUYER, "/cancel_renewal")
    assert cancelled.startswith(
        "Your 2 subscriptions will not renew: no more Stars are taken, and your plan stays until"
    ), cancelled
    assert sorted(fake_telegram.subscription_edits) == sorted(
        (BUYER, charge, True) for charge in charges
    )
    again = await _send(fake_telegram, BUYER, "/cancel_renewal")
    assert again.startswith(
        "Your subscription to the Max plan already will not renew (/cancel_renewal stopped it)"
    ), again
    assert len(fake_telegram.requests("editUserStarSubscription")) == 2

    renewed = await _send(fake_telegram, BUYER, "/renew")
    assert renewed.startswith("Your subscription to the Max plan renews again"), renewed
    assert fake_telegram.subscription_edits[-1] == (BUYER, charges[-1], False)
    assert len(fake_telegram.requests("editUserStarSubscription")) == 3
    assert (await _send(fake_telegram, BUYER, "/buy max")).startswith(
        "Your subscription to the Max plan already renews"
    )
    assert (await _send(fake_telegram, BUYER, "/renew")).startswith(
        "Your subscription to the Max plan was not cancelled with /cancel_renewal"
    )
    assert len(fake_telegram.requests("editUserStarSubscription")) == 3
    assert fake_telegram.invoices == [] and fake_telegram.refunds == []
    await bot.stop()


async def test_cancel_says_how_many_telegram_stopped_and_renew_says_what_it_answered(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str], tmp_path: Path
) -> None:
    """Telegram takes the cancellation of one of two subscriptions: the reply says one
    of two stopped and the other still renews; /cancel_renewal again asks only for the
    other. When Telegram then refuses to turn the renewal back on, /renew says it still
    will not renew — true: the bot stopped it and Telegram kept it stopped."""
    env = _env(bot_env, tmp_path)
    bot = app_factory(env=env)
    await bot.start()
    now = int(time.time())
    await _pay(fake_telegram, "sub:max:300:30", 300, now + 30 * DAY_S)
    await _pay(fake_telegram, "sub:max:300:30", 300, now + 20 * DAY_S)
    first, second = (row[0] for row in _payments(env))
    fake_telegram.subscription_edits_fail_for = {first}
    partly = await _send(fake_telegram, BUYER, "/cancel_renewal")
    assert partly.startswith(
        "Telegram stopped the renewals of 1 of your 2 subscriptions but did not take the "
        "cancellation of the others, which still renew."
    ), partly
    assert fake_telegram.subscription_edits == [(BUYER, second, True)]
    assert (await _send(fake_telegram, BUYER, "/buy max")).startswith(
        "Your subscription to the Max plan already renews"
    )
    fake_telegram.subscription_edits_fail_for = set()
    done = await _send(fake_telegram, BUYER, "/cancel_renewal")
    assert done.startswith("Your subscription to the Max plan will not renew"), done
    assert fake_telegram.subscription_edits == [(BUYER, second, True), (BUYER, first, True)]

    fake_telegram.subscription_edits_fail = True
    failed = await _send(fake_telegram, BUYER, "/renew")
    assert failed.startswith(
        "Telegram did not take the renewal, so nothing changed: the subscription still will "
        "not renew."
    ), failed
    fake_telegram.subscription_edits_fail = False
    assert (await _send(fake_telegram, BUYER, "/cancel_renewal")).startswith(
        "Your subscription to the Max plan already will not renew"
    )
    assert len(fake_telegram.subscription_edits) == 2
    await bot.stop()


async def test_a_payment_seen_again_after_a_later_one_does_not_set_its_end_back(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str], tmp_path: Path
) -> None:
    """Two payments for Pro buy two periods back to back; the first one's update
    delivered again afterwards (a retry, another replica) changes nothing and says
    nothing: the plan keeps the second period's end."""
    env = _env(bot_env, tmp_path)
    bot = app_factory(env=env)
    await bot.start()
    first = fake_telegram.successful_payment_update(BUYER, "plan:pro:250:30", 250)
    mark = fake_telegram.mark()
    fake_telegram.inject_update(first)
    await fake_telegram.wait_sent(BUYER, 1, timeout=20, since=mark)
    second = await _pay(fake_telegram, "plan:pro:250:30", 250)
    assert second.startswith("✅ Thank you! You are on the Pro plan until")
    until = second.removeprefix("✅ Thank you! You are on the Pro plan until ").rstrip(".")
    assert f"Plan: Pro, until {until}" in await _send(fake_telegram, BUYER, "/me")

    mark = fake_telegram.mark()
    again = dict(first["message"], message_id=first["message"]["message_id"] + 1000)
    fake_telegram.inject_update(dict(first, update_id=first["update_id"] + 1000, message=again))
    await _handled(env, again["message_id"])
    me = await _send(fake_telegram, BUYER, "/me")
    assert f"Plan: Pro, until {until}" in me, me
    assert [e.text for e in fake_telegram.sent_events(BUYER, since=mark)] == [me]
    assert [row[1:] for row in _payments(env)] == [("pro", 250, 1), ("pro", 250, 1)]
    await bot.stop()


async def test_a_payment_for_another_plan_paid_anyway_is_refunded_not_put_over_the_plan(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str], tmp_path: Path
) -> None:
    """Two invoices passed their pre-checkouts one after the other: the buyer is on Pro
    for 30 days when a Max subscription's first charge arrives. It would replace Pro and
    lose its days, so it is refunded and cancelled, nothing booked, Pro kept; the same for
    a one-off Pro payment arriving while a Max subscription runs."""
    env = _env(bot_env, tmp_path)
    bot = app_factory(env=env)
    await bot.start()
    assert "Pro plan until" in await _pay(fake_telegram, "plan:pro:250:30", 250)
    now = int(time.time())
    refunded = await _pay(fake_telegram, "sub:max:300:30", 300, now + 30 * DAY_S)
    assert refunded == (
        "You are on the Pro plan: this subscription would have replaced it and lost its "
        "time left, so its 300 ⭐ were refunded, the subscription was cancelled and "
        "nothing changed."
    ), refunded
    [(user, charge)] = fake_telegram.refunds
    assert user == BUYER and fake_telegram.subscription_edits == [(BUYER, charge, True)]
    assert [row[1:] for row in _payments(env)] == [("pro", 250, 1)]
    me = await _send(fake_telegram, BUYER, "/me")
    assert "Plan: Pro, until" in me, me

    assert "User 10 is on max" in await _send(fake_telegram, ADMIN, "/plan 10 max 2099-01-01")
    refunded = await _pay(fake_telegram, "plan:pro:250:30", 250)
    assert refunded == (
        "You are on the Max plan: this payment would have replaced it and lost its time "
        "left, so its 250 ⭐ were refunded and nothing changed."
    ), refunded
    assert len(fake_telegram.refunds) == 2
    assert [row[1:] for row in _payments(env)] == [("pro", 250, 1)]
    assert "Plan: Max, until" in await _send(fake_telegram, BUYER, "/me")
    await bot.stop()
