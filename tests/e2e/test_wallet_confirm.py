"""The price question of a document, through the real bot, when the prepaid wallet would
pay for it (``docs/decisions/240-the-wallet-is-a-balance-level.md``): the user's own
daily limit is $0, so any paid answer is beyond their allowance. Before a top-up the
question names only the allowance; after one it says the wallet would pay, with what is
left in it; Go ahead then holds on the wallet's bucket, not the user's. A wallet with
less than the price left is named too, as not covering it either."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.support.documents import text_pdf
from tests.support.harness import paid_only_environment
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage

BUYER = 20
RATE = "9000"  # µUSD per Star: 100 Stars credit $0.900000
BILL = {"prompt_tokens": 1200, "completion_tokens": 300}


async def _question(tg: FakeTelegram) -> SentMessage:
    mark = tg.mark()
    pdf = text_pdf(3, lines_per_page=40)
    tg.inject_document(BUYER, pdf, file_name="notes.pdf", mime_type="application/pdf")
    [sent] = await tg.wait_sent(BUYER, since=mark, timeout=30)
    return sent


def _scopes(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT scopes FROM budget_holds")]


async def test_the_price_question_says_when_the_wallet_would_pay(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    db = tmp_path / "wallet.db"
    env = paid_only_environment(
        fake_telegram,
        fake_providers,
        db,
        BILL,
        BUDGET_USER_DAILY_USD="0",
        WALLET_MUSD_PER_STAR=RATE,
        WALLET_TOPUP_STARS="100",
        CONFIRM_ABOVE_USD="0",
    )
    bot = app_factory(env=env)
    await bot.start()
    asked = await _question(fake_telegram)
    assert "could cost up to $" in asked.text, asked.text
    assert ", more than the $0.0000 left of your limit today. Go ahead?" in asked.text, asked.text
    assert "wallet" not in asked.text

    mark = fake_telegram.mark()
    fake_telegram.inject_update(
        fake_telegram.successful_payment_update(BUYER, f"wallet:100:{RATE}", 100)
    )
    await fake_telegram.wait_sent(BUYER, 1, timeout=30, since=mark)
    assert _scopes(db) == [] and fake_providers.requests == []

    asked = await _question(fake_telegram)
    assert (
        ", more than the $0.0000 left of your limit today, so your prepaid wallet would pay "
        "for it ($0.9000 left in it). Go ahead? Nothing is held until you press Go ahead."
    ) in asked.text, asked.text
    [[go, _]] = asked.reply_markup["inline_keyboard"]
    mark = fake_telegram.mark()
    fake_telegram.inject_callback_query(BUYER, go["callback_data"], message_id=asked.message_id)
    [answer] = await fake_telegram.wait_sent(BUYER, since=mark, timeout=30)
    assert answer.text and len(fake_providers.requests_for("deepseek")) == 1
    [scopes] = _scopes(db)
    assert '"wallet"' in scopes and '"user"' not in scopes, "the wallet paid, as it said"
    assert await bot.stop() == 0


async def test_the_price_question_says_when_the_wallet_has_too_little(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    db = tmp_path / "wallet.db"
    env = paid_only_environment(
        fake_telegram,
        fake_providers,
        db,
        BILL,
        BUDGET_USER_DAILY_USD="0",
        WALLET_MUSD_PER_STAR="1",  # 100 Stars credit $0.000100, less than any answer here
        WALLET_TOPUP_STARS="100",
        CONFIRM_ABOVE_USD="0",
    )
    bot = app_factory(env=env)
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_update(fake_telegram.successful_payment_update(BUYER, "wallet:100:1", 100))
    await fake_telegram.wait_sent(BUYER, 1, timeout=30, since=mark)

    asked = await _question(fake_telegram)
    assert (
        ", more than the $0.0000 left of your limit today and more than the $0.0001 left "
        "in your prepaid wallet. Go ahead?"
    ) in asked.text, asked.text
    [[go, _]] = asked.reply_markup["inline_keyboard"]
    mark = fake_telegram.mark()
    fake_telegram.inject_callback_query(BUYER, go["callback_data"], message_id=asked.message_id)
    [refused] = await fake_telegram.wait_sent(BUYER, since=mark, timeout=30)
    assert "wallet" in (refused.text or ""), refused.text
    assert fake_providers.requests == [] and _scopes(db) == [], "nothing was held or asked"
    assert await bot.stop() == 0
