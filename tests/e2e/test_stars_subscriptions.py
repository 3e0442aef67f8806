"""A plan that renews, sold as a Telegram Stars subscription, through the real bot:
/buy gives a createInvoiceLink link with the Bot API's one subscription period; the
first charge and each renewal are booked once by their charge ids and keep the plan at
least until Telegram's ``subscription_expiration_date``; /cancel_renewal asks Telegram
to stop renewing and says until when the plan stays, /renew asks it to renew again; a
renewal of a plan no longer sold as a subscription is refunded and the subscription
cancelled; a plans file with a subscription Telegram would refuse exits 2 in one line."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from budget.plans import PlansFileError, parse_plans
from tests.support.harness import run_bot_to_exit
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
stars = 300
renews = true
"""


def _db(env: dict[str, str]) -> Path:
    return Path(env["DATABASE_URL"].split("///", 1)[1])


async def _send(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    await tg.wait_sent(user, 1, timeout=20, since=mark)
    return next(e.text for e in tg.sent_events(user, since=mark) if not e.is_edit)


async def _pay(tg: FakeTelegram, payload: str, expires: int, *, first: bool) -> str:
    """One charge of the subscription delivered twice; the bot's one reply."""
    paid = tg.successful_payment_update(
        BUYER, payload, 300, subscription_expiration_date=expires, first_of_subscription=first
    )
    mark = tg.mark()
    tg.inject_update(paid)
    tg.inject_update(dict(paid))  # Telegram repeats the same update
    await tg.wait_sent(BUYER, 1, timeout=20, since=mark)
    [reply] = [e.text for e in tg.sent_events(BUYER, since=mark) if not e.is_edit]
    return reply


def _env(bot_env: dict[str, str], tmp_path: Path, plans: str = PLANS) -> dict[str, str]:
    path = tmp_path / "plans.toml"
    path.write_text(plans)
    return dict(bot_env, PLANS_FILE=str(path))


async def test_a_subscription_is_sold_by_link_renewed_once_per_charge_and_cancelled(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    env = _env(bot_env, tmp_path)
    bot = app_factory(env=env)
    await bot.start()
    assert "• pro (Pro): 300 ⭐ every 30 days, until you cancel" in await _send(
        fake_telegram, BUYER, "/buy"
    )
    assert "no Stars subscription" in await _send(fake_telegram, BUYER, "/cancel_renewal")

    offer = await _send(fake_telegram, BUYER, "/buy pro")
    assert "300 ⭐ now and again every 30 days" in offer and "/cancel_renewal" in offer
    [invoice] = fake_telegram.invoices
    assert (invoice.chat_id, invoice.currency, invoice.amount) == (None, "XTR", 300)
    assert invoice.subscription_period == 2_592_000 and invoice.payload == "sub:pro:300:30"
    assert fake_telegram.requests("sendInvoice") == []

    query = fake_telegram.inject_pre_checkout_query(BUYER, invoice.payload, 300)
    await fake_telegram.wait_request("answerPreCheckoutQuery", timeout=20)
    assert fake_telegram.pre_checkout_answers[query]["ok"] is True

    # Telegram's next charge is 31 days away: the plan lasts until then, not 30 days
    first_expiry = int(time.time()) + 31 * DAY_S
    thanks = await _pay(fake_telegram, invoice.payload, first_expiry, first=True)
    assert thanks.startswith("✅ Thank you! You are on the Pro plan until")
    assert "/cancel_renewal" in thanks
    # the renewal, charged by Telegram a month later: booked once, the plan extended
    renewal_expiry = first_expiry + 30 * DAY_S
    assert "Pro plan until" in await _pay(
        fake_telegram, invoice.payload, renewal_expiry, first=False
    )
    with sqlite3.connect(_db(env)) as db:
        rows = db.execute(
            "SELECT charge_id, stars, plan, plan_until FROM star_payments ORDER BY paid_at"
        ).fetchall()
    assert [(stars, plan) for _, stars, plan, _ in rows] == [(300, "pro"), (300, "pro")]
    assert "Plan: Pro, until" in await _send(fake_telegram, BUYER, "/me")

    cancelled = await _send(fake_telegram, BUYER, "/cancel_renewal")
    assert cancelled.startswith(
        "Your subscription to the Pro plan will not renew: no more Stars are taken"
    )
    assert fake_telegram.subscription_edits == [(BUYER, rows[-1][0], True)]
    assert "Plan: Pro, until" in await _send(fake_telegram, BUYER, "/me")

    renewed = await _send(fake_telegram, BUYER, "/renew")
    assert renewed.startswith(
        "Your subscription to the Pro plan renews again: no Stars are taken now; Telegram "
        "takes the next ones when the plan would end,"
    ), renewed
    assert renewed.endswith("and every 30 days after, until you send /cancel_renewal.")
    [*_, edit] = fake_telegram.requests("editUserStarSubscription")
    assert edit.params["user_id"] in (BUYER, str(BUYER))
    assert edit.params["telegram_payment_charge_id"] == rows[-1][0]
    assert str(edit.params["is_canceled"]).lower() == "false", edit.params
    assert fake_telegram.subscription_edits[-1] == (BUYER, rows[-1][0], False)
    assert "Plan: Pro, until" in await _send(fake_telegram, BUYER, "/me")
    assert fake_telegram.refunds == [] and fake_providers.requests == []
    await bot.stop()


async def test_a_renewal_of_a_plan_no_longer_sold_as_a_subscription_is_refunded(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str], tmp_path: Path
) -> None:
    """The operator took ``renews`` off the plan: Telegram's next charge under the old
    subscription is given back and the renewals stopped; the plan is not extended. When
    Telegram will not take the cancellation, /cancel_renewal says nothing changed."""
    env = _env(bot_env, tmp_path, PLANS.replace("renews = true\n", ""))
    bot = app_factory(env=env)
    await bot.start()
    reply = await _pay(fake_telegram, "sub:pro:300:30", int(time.time()) + 30 * DAY_S, first=False)
    assert "refunded and the subscription was cancelled" in reply
    [(user, charge)] = fake_telegram.refunds
    assert user == BUYER and fake_telegram.subscription_edits == [(BUYER, charge, True)]
    with sqlite3.connect(_db(env)) as db:
        assert db.execute("SELECT count(*) FROM star_payments").fetchone() == (0,)
    assert "Plan: Free" in await _send(fake_telegram, BUYER, "/me")
    await bot.stop()


async def test_a_refused_cancel_changes_nothing_and_a_refund_stops_the_renewals(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str], tmp_path: Path
) -> None:
    """Telegram refuses the cancellation: the user is told nothing changed, and /renew
    then says the subscription was never cancelled here (it still renews) without
    asking Telegram. An admin's /refund of the charge gives the Stars back and cancels
    the renewals too."""
    env = dict(_env(bot_env, tmp_path), ADMIN_IDS=str(ADMIN))
    bot = app_factory(env=env)
    await bot.start()
    await _pay(fake_telegram, "sub:pro:300:30", int(time.time()) + 30 * DAY_S, first=True)
    fake_telegram.subscription_edits_fail = True
    assert (await _send(fake_telegram, BUYER, "/cancel_renewal")).startswith(
        "Telegram did not take the cancellation, so nothing changed."
    )
    assert (await _send(fake_telegram, BUYER, "/renew")).startswith(
        "Your subscription to the Pro plan was not cancelled with /cancel_renewal, so there "
        "is nothing to turn back on here: Telegram takes the next Stars at"
    )
    assert fake_telegram.subscription_edits == []
    assert len(fake_telegram.requests("editUserStarSubscription")) == 1  # the cancel only
    fake_telegram.subscription_edits_fail = False
    with sqlite3.connect(_db(env)) as db:
        [(charge,)] = db.execute("SELECT charge_id FROM star_payments").fetchall()
    mark = fake_telegram.mark()
    done = await _send(fake_telegram, ADMIN, f"/refund {charge}")
    await fake_telegram.wait_sent(BUYER, 1, timeout=20, since=mark)  # "was refunded"
    assert done.startswith("Refunded 300 Stars") and "renewals are cancelled" in done, done
    assert fake_telegram.refunds == [(BUYER, charge)]
    assert fake_telegram.subscription_edits == [(BUYER, charge, True)]
    assert "no Stars subscription" in await _send(fake_telegram, BUYER, "/cancel_renewal")
    # a refunded subscription is not renewed again: its renewals stay cancelled
    assert (await _send(fake_telegram, BUYER, "/renew")).startswith(
        "You have no Stars subscription here to renew."
    )
    assert fake_telegram.subscription_edits == [(BUYER, charge, True)]
    await bot.stop()


async def test_a_subscription_telegram_would_refuse_exits_2_in_one_line(
    bot_env: dict[str, str], tmp_path: Path
) -> None:
    """Telegram renews every 30 days, at most 10,000 Stars: a plan that renews on other
    terms, or without a price, is refused at start, naming the plan and the field."""
    cases = {
        "period_days": PLANS.replace("renews = true", "renews = true\nperiod_days = 7"),
        "stars": PLANS.replace("stars = 300", "stars = 20000"),
        "renews": PLANS.replace("stars = 300\n", ""),
    }
    for field, plans in cases.items():
        with pytest.raises(PlansFileError, match=f"plan 'pro', field '{field}'"):
            parse_plans(plans, "plans.toml")
    env = dict(_env(bot_env, tmp_path, cases["period_days"]), LOG_LEVEL="INFO")
    code, output = await run_bot_to_exit(env, tmp_path)
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "field 'period_days'" in lines[0], output


async def test_another_plan_is_not_sold_over_one_with_days_left(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str], tmp_path: Path
) -> None:
    """On Pro for 30 paid days, /buy monthly and a pre-checkout of its subscription are
    refused (the days left would be lost), nothing charged; /buy pro again still sells
    the extension."""
    plans = PLANS.replace("renews = true", "period_days = 30") + (
        '\n[monthly]\ntitle = "Monthly"\nday_usd = 0.50\nstars = 100\nrenews = true\n'
    )
    env = _env(bot_env, tmp_path, plans)
    bot = app_factory(env=env)
    await bot.start()
    paid = fake_telegram.successful_payment_update(BUYER, "plan:pro:300:30", 300)
    mark = fake_telegram.mark()
    fake_telegram.inject_update(paid)
    await fake_telegram.wait_sent(BUYER, 1, timeout=20, since=mark)
    refused = await _send(fake_telegram, BUYER, "/buy monthly")
    assert refused.startswith("You are on the Pro plan until") and "nothing is sold" in refused
    assert fake_telegram.invoices == []
    query = fake_telegram.inject_pre_checkout_query(BUYER, "sub:monthly:100:30", 100)
    await fake_telegram.wait_request("answerPreCheckoutQuery", timeout=20)
    answer = fake_telegram.pre_checkout_answers[query]
    assert answer["ok"] is False and "Pro plan until" in answer["error_message"]
    mark = len(fake_telegram.requests("sendInvoice"))
    fake_telegram.inject_message(BUYER, "/buy pro")
    await fake_telegram.wait_request("sendInvoice", timeout=20, since=0)
    assert len(fake_telegram.requests("sendInvoice")) == mark + 1
    assert "Plan: Pro, until" in await _send(fake_telegram, BUYER, "/me")
    await bot.stop()
