"""The wallet's "never resets" (``NEVER``, the latest aware instant) in a zone east of
UTC, where it has no local time: every text that names a reset says the wallet does
not reset instead of raising OverflowError."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aiogram.utils.i18n import I18n

from bot.handlers.admin.budget import render_user
from bot.ops.dashboard.view import bucket_json
from bot.text import templates
from bot.text.i18n import create_i18n
from budget.policy.windows import BALANCE_KEY, NEVER
from budget.status import BucketStatus, UserStatus
from budget.types import Level, Refusal, RefusalReason, Window

EAST = "Europe/Moscow"
WALLET = BucketStatus(
    Level.WALLET, "20", Window.BALANCE, BALANCE_KEY, 0, -900_000, 0, 0, 900_000, NEVER
)


@pytest.fixture
def i18n() -> Iterator[I18n]:
    """aiogram I18n over the committed catalogues, as the bot uses it."""
    i18n = create_i18n()
    with i18n.context():
        yield i18n


def test_never_in_a_zone_east_of_utc_says_the_wallet_does_not_reset(i18n: I18n) -> None:
    """``NEVER`` in Moscow (UTC+3), with and without a date, in English and Russian."""
    with i18n.use_locale("en"):
        assert templates.format_reset(NEVER, EAST) == "never (the wallet does not reset)"
        assert templates.format_reset(NEVER, EAST, with_date=True).startswith("never")
    with i18n.use_locale("ru"):
        assert templates.format_reset(NEVER, EAST) == "никогда (кошелёк не обнуляется)"


def test_a_wallet_refusal_and_bucket_with_never_render_in_moscow(i18n: I18n) -> None:
    """A wallet refusal whose reset is ``NEVER`` names the wallet and no reset time; the
    wallet's bucket in the dashboard and in ``/budget user`` says it does not reset."""
    refusal = Refusal(
        RefusalReason.LIMIT,
        Level.WALLET,
        Window.BALANCE,
        NEVER,
        ceiling_musd=5_000,
        remaining_musd=0,
    )
    with i18n.use_locale("en"):
        text = templates.refusal_text(refusal, tz=EAST)
        assert "your wallet has $0.000000 left" in text and "resets" not in text, text
        assert bucket_json(WALLET, EAST)["text"]["resets"] == "never (the wallet does not reset)"
        status = UserStatus(20, None, [WALLET], 0, 0, 0, None, None, 0)
        assert "resets never (the wallet does not reset)" in render_user(status, EAST)
