"""The prepaid wallet through the real bot, against the fake Bot API's payment updates
(``docs/access.md#the-wallet``): /topup → an invoice in XTR → the pre-checkout answered
at once → the successful payment credits the wallet once (the same update twice, and
its charge in another update; on PostgreSQL, the same charge reaching two replicas at
once) → a paid answer beyond the plan's allowance is paid by the wallet → /me, the
export's payments file, and a refund of a partly spent top-up.

The only provider is the fake DeepSeek (the paid anchor) and the users' own daily limit
is $0, so every answer is beyond the allowance.
"""

from __future__ import annotations

import asyncio
import csv
import io
import sqlite3
import time
from pathlib import Path
from typing import Any

from aiogram.types import Update

from budget.policy.money import usd, usd_text
from tests.support.harness import paid_only_environment
from tests.support.inprocess import AppFactory, second_replica
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
BUYER = 20
RATE = "9000"  # µUSD per Star: 100 Stars credit $0.900000
BILL = {"prompt_tokens": 1200, "completion_tokens": 300}


def _env(tg: FakeTelegram, providers: FakeProviders, db: Path, **extra: str) -> dict[str, str]:
    return paid_only_environment(
        tg,
        providers,
        db,
        BILL,
        ADMIN_IDS=str(ADMIN),
        BUDGET_USER_DAILY_USD="0",
        WALLET_MUSD_PER_STAR=RATE,
        WALLET_TOPUP_STARS="100,500",
        **extra,
    )


async def _send(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    await tg.wait_sent(user, 1, timeout=30, since=mark)
    return next(e.text for e in tg.sent_events(user, since=mark) if not e.is_edit)


async def _invoice_paid(tg: FakeTelegram, user: int, stars: int) -> dict[str, Any]:
    """/topup <stars> → the invoice → its pre-checkout answered ok within 10 s; returns
    the payment's update (not yet delivered)."""
    tg.inject_message(user, f"/topup {stars}")
    await tg.wait_request("sendInvoice", timeout=30, since=0)
    invoice = tg.invoices[-1]
    assert (invoice.currency, invoice.amount, invoice.chat_id) == ("XTR", stars, user)
    assert invoice.payload == f"wallet:{stars}:{RATE}"
    started = time.monotonic()
    query = tg.inject_pre_checkout_query(user, invoice.payload, stars)
    await tg.wait_request(
        "answerPreCheckoutQuery",
        lambda r: str(r.params.get("pre_checkout_query_id")) == query,
        timeout=30,
    )
    assert tg.pre_checkout_answers[query]["ok"] is True
    assert time.monotonic() - started < 10
    return tg.successful_payment_update(user, invoice.payload, stars)


def _thanks(tg: FakeTelegram, user: int, mark: int) -> list[str]:
    return [e.text for e in tg.sent_events(user, since=mark) if "added to your wallet" in e.text]


async def test_a_topup_credits_the_wallet_once_and_pays_beyond_the_plan(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """Before any top-up the answer is refused at the user's limit and no provider is
    asked; /topup lists the amounts; a pre-checkout at another rate, of an amount not on
    sale, or of another total is refused with Telegram's error message; the payment
    delivered twice and its charge once more credits $0.90 once (one row, one
    thank-you); then an answer is paid by the wallet: one DeepSeek request, its hold on
    the wallet's bucket, not the user's; Telegram's own refund, reported twice, takes out
    the unspent credit once."""
    db = tmp_path / "wallet.db"
    bot = app_factory(env=_env(fake_telegram, fake_providers, db))
    await bot.start()
    refused = await _send(fake_telegram, BUYER, "what is a kopek?")
    assert "user limit" in refused and fake_providers.requests == []
    listing = await _send(fake_telegram, BUYER, "/topup")
    assert "/topup 100" in listing and "$0.900000" in listing and "$4.500000" in listing
    assert "not on sale" in await _send(fake_telegram, BUYER, "/topup 7")
    for payload, amount in (("wallet:100:8000", 100), ("wallet:7:9000", 7), ("wallet:100:9000", 5)):
        query = fake_telegram.inject_pre_checkout_query(BUYER, payload, amount)
        await fake_telegram.wait_request(
            "answerPreCheckoutQuery",
            lambda r, q=query: str(r.params.get("pre_checkout_query_id")) == q,  # type: ignore[misc]
            timeout=30,
        )
        refusal = fake_telegram.pre_checkout_answers[query]
        assert refusal["ok"] is False and "nothing was charged" in refusal["error_message"]

    paid = await _invoice_paid(fake_telegram, BUYER, 100)
    charge = paid["message"]["successful_payment"]["telegram_payment_charge_id"]
    mark = fake_telegram.mark()
    fake_telegram.inject_update(paid)
    fake_telegram.inject_update(dict(paid))  # Telegram repeats the same update
    again = fake_telegram.successful_payment_update(
        BUYER, paid["message"]["successful_payment"]["invoice_payload"], 100, charge_id=charge
    )
    fake_telegram.inject_update(again)  # the same charge in another update
    await fake_telegram.wait_sent(BUYER, 1, timeout=30, since=mark)
    answer = await _send(fake_telegram, BUYER, "what is a kopek?")  # after all three
    [thanks] = _thanks(fake_telegram, BUYER, mark)
    assert "$0.900000 was added to your wallet; it has $0.900000 now" in thanks
    assert answer.startswith("echo: what is a kopek?")
    assert len(fake_providers.requests_for("deepseek")) == 1
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT charge_id, stars, credit_musd FROM budget_wallet_credits")
        assert rows.fetchall() == [(charge, 100, 900_000)]
        scopes = conn.execute("SELECT scopes, actual_musd FROM budget_holds").fetchall()
    [(scope_json, actual)] = scopes
    assert '"wallet"' in scope_json and '"user"' not in scope_json and actual > 0

    # Telegram reports a refund of its own (refunded_payment), twice: taken out once
    mark = fake_telegram.mark()
    for _ in range(2):
        fake_telegram.inject_update(_refunded(paid))
    await fake_telegram.wait_sent(BUYER, 1, timeout=30, since=mark)
    await _send(fake_telegram, BUYER, "/me")  # after both
    told = [e.text for e in fake_telegram.sent_events(BUYER, since=mark) if "refunded" in e.text]
    assert len(told) == 1 and f"{usd(900_000 - actual)} left your wallet" in told[0]
    assert await bot.stop() == 0


def _refunded(paid: dict[str, Any]) -> dict[str, Any]:
    """The ``refunded_payment`` service message of the payment ``paid`` (Bot API 7.10)."""
    message = dict(paid["message"])
    payment = message.pop("successful_payment")
    message["message_id"] = int(message["message_id"]) + 1000
    message["refunded_payment"] = {
        "currency": payment["currency"],
        "total_amount": payment["total_amount"],
        "invoice_payload": payment["invoice_payload"],
        "telegram_payment_charge_id": payment["telegram_payment_charge_id"],
    }
    return {"message": message}


async def test_the_same_charge_at_two_replicas_on_postgres_credits_once(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
    pg_migrated_url: str,
) -> None:
    """Two composition roots on one PostgreSQL database: the payment reaches the first
    through polling and, in another update with the same charge id, the second at the
    same moment: one credit, one thank-you."""
    env = _env(fake_telegram, fake_providers, tmp_path / "unused.db")
    env["DATABASE_URL"] = pg_migrated_url
    first = app_factory(env=env)
    await first.start()
    async with second_replica(env) as second:
        paid = await _invoice_paid(fake_telegram, BUYER, 500)
        payment = paid["message"]["successful_payment"]
        again = fake_telegram.successful_payment_update(
            BUYER, payment["invoice_payload"], 500, charge_id=payment["telegram_payment_charge_id"]
        )
        mark = fake_telegram.mark()
        fake_telegram.inject_update(paid)
        await asyncio.gather(
            second.dispatcher.feed_update(second.bot, Update.model_validate(again)),
            fake_telegram.wait_sent(BUYER, 1, timeout=30, since=mark),
        )
        me = await _send(fake_telegram, BUYER, "/me")
        assert len(_thanks(fake_telegram, BUYER, mark)) == 1
        wallet = await second.ledger.wallet(BUYER)
        assert (wallet.credited_musd, wallet.payments) == (4_500_000, 1)
        assert "Wallet: $4.500000 left" in me
    assert await first.stop() == 0


async def test_the_books_and_a_refund_of_a_partly_spent_topup(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """A $0.90 top-up, one answer paid by it: /me shows the wallet; /budget export's
    third file has the credit (+) and the answer's cost (−) beside the attempt (whose
    booked total is the answer alone: a credit is no provider spend); /refund gives the
    Stars back and takes out only the unspent credit, the payer told what left and what
    had been spent; the next answer is refused naming the wallet; a second /refund
    changes nothing."""
    db = tmp_path / "refund.db"
    bot = app_factory(env=_env(fake_telegram, fake_providers, db))
    await bot.start()
    paid = await _invoice_paid(fake_telegram, BUYER, 100)
    charge = paid["message"]["successful_payment"]["telegram_payment_charge_id"]
    mark = fake_telegram.mark()
    fake_telegram.inject_update(paid)
    await fake_telegram.wait_sent(BUYER, 1, timeout=30, since=mark)
    assert (await _send(fake_telegram, BUYER, "tell me")).startswith("echo: tell me")
    with sqlite3.connect(db) as conn:
        [(hold_id, cost)] = conn.execute("SELECT hold_id, actual_musd FROM budget_holds")
    assert cost > 0
    me = await _send(fake_telegram, BUYER, "/me")
    left = usd(900_000 - cost)
    assert f"Wallet: {left} left, {usd(cost)} spent from it." in me
    admin_view = await _send(fake_telegram, ADMIN, f"/budget user {BUYER}")
    assert f"wallet: {left} left of $0.900000 credited by 1 payment(s)" in admin_view

    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/budget export")
    docs = []
    for _ in range(3):
        docs.append(
            await fake_telegram.wait_for(
                lambda m: m.chat_id == ADMIN and m.method == "sendDocument" and m not in docs,
                since=mark,
                timeout=30,
            )
        )
    spend, _totals, payments = docs
    assert f"{usd_text(cost)} booked" in spend.text
    assert payments.file is not None and payments.file["name"].startswith("kopek-payments-")
    rows = list(csv.DictReader(io.StringIO(fake_telegram.document_bytes(payments).decode())))
    assert [(r["kind"], r["wallet_musd"]) for r in rows] == [
        ("wallet_credit", "900000"),
        ("wallet_spend", str(-cost)),
    ]
    assert rows[0]["charge_id"] == charge and rows[1]["hold_id"] == hold_id

    assert charge in await _send(fake_telegram, ADMIN, "/refund")
    mark = fake_telegram.mark()
    done = await _send(fake_telegram, ADMIN, f"/refund {charge}")
    assert f"Refunded 100 Stars to user {BUYER}; {left} left the wallet" in done, done
    assert f"{usd(cost)} of the credit had already been spent" in done
    await fake_telegram.wait_sent(BUYER, 1, timeout=30, since=mark)
    told = fake_telegram.sent_events(BUYER, since=mark)[0].text
    assert f"{left} left your wallet" in told and f"{usd(cost)} of it had already paid" in told
    assert fake_telegram.refunds == [(BUYER, charge)]
    refused = await _send(fake_telegram, BUYER, "and now?")
    assert "your wallet has $0.000000 left" in refused and "/topup" in refused
    assert "already" in await _send(fake_telegram, ADMIN, f"/refund {charge}")
    assert fake_telegram.refunds == [(BUYER, charge)]
    assert len(fake_providers.requests_for("deepseek")) == 1
    assert await bot.stop() == 0
