"""Telegram Stars through the real bot: /buy → an invoice in XTR → the pre-checkout
answered at once → the successful payment booked once (the same update twice, and the
same charge in another update) → the plan on /me → /refund takes it back; a
pre-checkout for a plan no longer sold on the invoice's terms is refused with an
error_message. The fake's payment updates have the keys of real ones (nutgram's
fixtures, tests/fixtures/media/telegram_updates/)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from aiogram.types import Update

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
BUYER = 10
FIXTURES = Path(__file__).parents[1] / "fixtures" / "media" / "telegram_updates"


def _db(bot_env: dict[str, str]) -> Path:
    return Path(bot_env["DATABASE_URL"].split("///", 1)[1])


async def _send(tg: FakeTelegram, user: int, text: str, replies: int = 1) -> list[str]:
    mark = tg.mark()
    tg.inject_message(user, text)
    await tg.wait_sent(user, replies, timeout=20, since=mark)
    return [e.text for e in tg.sent_events(user, since=mark) if not e.is_edit]


async def _answer(tg: FakeTelegram, query_id: str) -> dict[str, Any]:
    await tg.wait_request(
        "answerPreCheckoutQuery",
        lambda r: str(r.params.get("pre_checkout_query_id")) == query_id,
        timeout=20,
    )
    return tg.pre_checkout_answers[query_id]


def _keys(raw: dict[str, Any]) -> set[str]:
    return {k for k, v in raw.items() if v is not None}


def test_the_fakes_payment_updates_have_the_real_ones_keys(fake_telegram: FakeTelegram) -> None:
    """Every key a real pre-checkout query and successful payment carry (nutgram's
    fixtures, not null there) is in the fake's, and aiogram reads both."""
    real_query = json.loads((FIXTURES / "update.pre_checkout_query.nutgram.json").read_text())
    real_paid = json.loads((FIXTURES / "update.successful_payment.nutgram.json").read_text())
    fake_paid = fake_telegram.successful_payment_update(BUYER, "plan:pro:250:30", 250)
    assert _keys(real_paid["message"]["successful_payment"]) - {"provider_payment_charge_id"} <= (
        _keys(fake_paid["message"]["successful_payment"])
    )
    assert _keys(real_paid["message"]) <= _keys(fake_paid["message"])
    paid = Update.model_validate(fake_paid).message
    assert paid is not None and paid.successful_payment is not None
    assert paid.successful_payment.currency == "XTR"
    assert Update.model_validate(real_query).pre_checkout_query is not None
    assert Update.model_validate(real_paid).message is not None


async def test_a_plan_bought_with_stars_is_booked_once_and_refunded(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """/buy pro → sendInvoice in XTR (one price, no provider token) → the pre-checkout
    answered ok within Telegram's 10 s → the payment delivered twice, and its charge once
    more in another message: one row, one "thank you", /me on Pro until the period's
    end → /refund: refundStarPayment once, the user back on Free and told; a second
    /refund changes nothing. No provider is asked anything."""
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    assert "/buy pro" in (await _send(fake_telegram, BUYER, "/buy"))[0]
    mark = len(fake_telegram.requests("sendInvoice"))
    fake_telegram.inject_message(BUYER, "/buy pro")
    request = await fake_telegram.wait_request("sendInvoice", timeout=20, since=0)
    assert len(fake_telegram.requests("sendInvoice")) == mark + 1
    [invoice] = fake_telegram.invoices
    assert (invoice.currency, invoice.amount, invoice.chat_id) == ("XTR", 250, BUYER)
    assert not request.params.get("provider_token")

    started = time.monotonic()
    query = fake_telegram.inject_pre_checkout_query(BUYER, invoice.payload, 250)
    assert (await _answer(fake_telegram, query))["ok"] is True
    assert time.monotonic() - started < 10

    paid = fake_telegram.successful_payment_update(BUYER, invoice.payload, 250)
    charge = paid["message"]["successful_payment"]["telegram_payment_charge_id"]
    mark = fake_telegram.mark()
    fake_telegram.inject_update(paid)
    fake_telegram.inject_update(dict(paid))  # Telegram repeats the same update
    again = fake_telegram.successful_payment_update(BUYER, invoice.payload, 250, charge_id=charge)
    fake_telegram.inject_update(again)  # the same charge in another update
    await fake_telegram.wait_sent(BUYER, 1, timeout=20, since=mark)
    me = (await _send(fake_telegram, BUYER, "/me"))[0]
    thanks = [e.text for e in fake_telegram.sent_events(BUYER, since=mark) if "Thank" in e.text]
    assert len(thanks) == 1 and "Pro plan until" in thanks[0]
    assert "Plan: Pro, until" in me
    with sqlite3.connect(_db(bot_env)) as conn:
        rows = conn.execute("SELECT charge_id, stars, plan FROM star_payments").fetchall()
    assert rows == [(charge, 250, "pro")]

    assert charge in (await _send(fake_telegram, ADMIN, "/refund"))[0]
    mark = fake_telegram.mark()
    [done] = await _send(fake_telegram, ADMIN, f"/refund {charge}")
    assert "Refunded 250 Stars" in done and "default plan" in done, done
    await fake_telegram.wait_sent(BUYER, 1, timeout=20, since=mark)
    assert fake_telegram.refunds == [(BUYER, charge)]
    assert "refunded" in fake_telegram.sent_events(BUYER, since=mark)[0].text
    assert "Plan: Free" in (await _send(fake_telegram, BUYER, "/me"))[0]
    assert "already" in (await _send(fake_telegram, ADMIN, f"/refund {charge}"))[0]
    assert fake_telegram.refunds == [(BUYER, charge)]
    assert fake_providers.requests == []


async def test_a_pre_checkout_for_a_plan_no_longer_sold_is_refused(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """A plan the file no longer has, another currency, an amount that is not the
    invoice's: each answered ok=false with the error_message Telegram shows (in the
    payer's language); a price or a period that changed since the invoice: the answer
    says which, then and now, and to send /buy again; nothing is booked."""
    bot = app_factory(env=bot_env)
    await bot.start()
    for payload, amount, currency in (
        ("plan:gold:100:30", 100, "XTR"),
        ("plan:pro:250:30", 250, "USD"),
        ("plan:pro:250:30", 1, "XTR"),
    ):
        query = fake_telegram.inject_pre_checkout_query(BUYER, payload, amount, currency)
        answer = await _answer(fake_telegram, query)
        assert answer["ok"] is False
        assert "no longer sold" in answer["error_message"] and "nothing" in answer["error_message"]
    # the plans file changed since the invoice: the answer says what changed
    for payload, change in (
        ("plan:pro:1:30", "The price of this plan changed since this invoice was sent "
         "(1 ⭐ then, 250 ⭐ now)"),
        ("plan:pro:250:7", "The period this plan buys changed since this invoice was sent"),
    ):  # fmt: skip
        query = fake_telegram.inject_pre_checkout_query(BUYER, payload, int(payload.split(":")[2]))
        text = (await _answer(fake_telegram, query))["error_message"]
        assert text.startswith(change), text
        assert "nothing was charged. Send /buy pro again for a new invoice." in text, text
    with sqlite3.connect(_db(bot_env)) as conn:
        assert conn.execute("SELECT count(*) FROM star_payments").fetchone() == (0,)


async def test_a_pre_checkout_for_an_invoice_the_bot_never_issued_says_so(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """A payload that is no plan's or top-up's (garbage, a cut plan payload, a malformed
    top-up) was never sold: answered ok=false with an error_message saying the invoice is
    not recognised, not that it is "no longer sold"; nothing is booked."""
    bot = app_factory(env=bot_env)
    await bot.start()
    for payload in ("garbage", "plan:pro", "wallet:many:stars", "plan:pro:250:30:x"):
        query = fake_telegram.inject_pre_checkout_query(BUYER, payload, 250)
        answer = await _answer(fake_telegram, query)
        assert answer["ok"] is False
        text = answer["error_message"]
        assert "not one this bot recognises" in text and "nothing was charged" in text, text
        assert "no longer sold" not in text
    with sqlite3.connect(_db(bot_env)) as conn:
        assert conn.execute("SELECT count(*) FROM star_payments").fetchone() == (0,)


async def test_a_payment_for_terms_no_longer_sold_is_refunded_or_its_failure_told(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """A payment whose price is not the plan's (paid between a change of the plans file
    and the pre-checkout's answer): refunded at once, the payer told. When Telegram does
    not take the refund (a 500), the payer is told it did not go through and every admin
    gets the charge id: the Stars were taken and nothing was booked for them."""
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    paid = fake_telegram.successful_payment_update(BUYER, "plan:pro:1:30", 1)
    mark = fake_telegram.mark()
    fake_telegram.inject_update(paid)
    [told] = await fake_telegram.wait_sent(BUYER, 1, timeout=20, since=mark)
    assert "⭐ was refunded and nothing changed" in told.text
    assert len(fake_telegram.refunds) == 1

    fake_telegram.hold_refunds(made=False)
    paid = fake_telegram.successful_payment_update(BUYER, "plan:pro:2:30", 2)
    charge = paid["message"]["successful_payment"]["telegram_payment_charge_id"]
    mark = fake_telegram.mark()
    fake_telegram.inject_update(paid)
    await fake_telegram.wait_request(
        "refundStarPayment", lambda r: r.params.get("telegram_payment_charge_id") == charge, 20
    )
    fake_telegram.release_refunds()
    [told] = await fake_telegram.wait_sent(BUYER, 1, timeout=20, since=mark)
    assert "automatic refund of your 2 ⭐ did not go through" in told.text
    [notice] = await fake_telegram.wait_sent(ADMIN, 1, timeout=20, since=mark)
    assert "automatic refund failed" in notice.text and charge in notice.text
    assert len(fake_telegram.refunds) == 1
    with sqlite3.connect(_db(bot_env)) as conn:
        assert conn.execute("SELECT count(*) FROM star_payments").fetchone() == (0,)
    await bot.stop()


async def test_buy_in_a_group_points_to_the_private_chat(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """/buy@bot and /topup@bot in a group each get the template naming the private chat
    and its link (no start payload: those are invites); no invoice is sent."""
    bot = app_factory(env=bot_env)
    await bot.start()
    group = -1001777
    for command in ("/buy", "/topup"):
        mark = fake_telegram.mark()
        fake_telegram.inject_message(
            BUYER, f"{command}@kopek_test_bot pro", chat_id=group, chat_type="supergroup"
        )
        [reply] = await fake_telegram.wait_sent(group, since=mark, timeout=20)
        assert reply.text == (
            f"💳 {command} works in a private chat with me, not in a group: open "
            f"https://t.me/kopek_test_bot and send {command} there. Nothing was charged."
        )
    assert fake_telegram.requests("sendInvoice") == []
    assert await bot.stop() == 0


async def test_a_plan_title_is_shown_as_a_value_not_as_written(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str], tmp_path: Path
) -> None:
    """A plan title with a zero-width joiner (a format character the plans file takes)
    is shown ``<U+200D>`` by /buy and /plan list, as every other name the bot did not
    write (``echoed``), never as the invisible character."""
    plans = tmp_path / "plans.toml"
    plans.write_text(
        'default = "free"\n[free]\ntitle = "Free"\n'
        '[gold]\ntitle = "Gold\u200dPlus"\nstars = 100\nperiod_days = 30\n',
        encoding="utf-8",
    )
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN), PLANS_FILE=str(plans)))
    await bot.start()
    [listing] = await _send(fake_telegram, BUYER, "/buy")
    assert "• gold (Gold<U+200D>Plus): 100 ⭐ for 30 days" in listing, listing
    [admin] = await _send(fake_telegram, ADMIN, "/plan list")
    assert "(Gold<U+200D>Plus," in admin and "\u200d" not in admin + listing
    assert await bot.stop() == 0
