"""What the bot says about the prepaid wallet (gettext msgids in English, as in
:mod:`bot.text.templates`). Every sentence is true of what happened: a credit is named
only once it is booked, a refund says what it took out and what stays spent, a refusal
names the wallet only when the wallet is what stopped the answer
(``docs/decisions/240-the-wallet-is-a-balance-level.md``)."""

from __future__ import annotations

from aiogram.utils.i18n import gettext as _

from budget.policy.money import remaining_usd, usd

__all__ = [
    "topup_invoice_description",
    "topup_invoice_title",
    "topup_line",
    "topup_list_text",
    "topup_none_text",
    "topup_unknown_text",
    "wallet_limit_text",
    "wallet_line",
    "wallet_paid_text",
    "wallet_pre_checkout_refused_text",
    "wallet_refunded_text",
]


def topup_none_text() -> str:
    """/topup when the operator sells no top-ups."""
    return _("The wallet cannot be topped up here.")


def topup_list_text(lines: list[str], example: int) -> str:
    """/topup: the amounts on sale, one ``line`` each (:func:`topup_line`)."""
    head = _(
        "Top up your wallet with Telegram Stars. The wallet pays for answers from paid "
        "models that your plan's allowance does not cover; free models never take from it."
    )
    tail = _("Send /topup and an amount, e.g. /topup {stars}.").format(stars=example)
    return "\n".join([head, *lines, tail])


def topup_line(stars: int, credit_musd: int) -> str:
    """One amount of the /topup list."""
    return _("• {stars} ⭐ → {credit} in your wallet").format(stars=stars, credit=usd(credit_musd))


def topup_unknown_text() -> str:
    """/topup N for an amount not on sale."""
    return _("That amount is not on sale. /topup lists the amounts you can buy.")


def topup_invoice_title() -> str:
    """The invoice's title (at most 32 characters)."""
    return _("Wallet top-up")


def topup_invoice_description(credit_musd: int) -> str:
    """The invoice's description (at most 255 characters)."""
    return _(
        "{credit} in your wallet, for answers from paid models beyond your plan. "
        "/me shows the wallet."
    ).format(credit=usd(credit_musd))


def wallet_pre_checkout_refused_text() -> str:
    """The pre-checkout's ``error_message`` for a top-up no longer on sale."""
    return _(
        "This top-up is no longer sold on these terms, so nothing was charged. "
        "Send /topup to see the amounts now."
    )


def wallet_paid_text(credit_musd: int, left_musd: int) -> str:
    """A top-up booked."""
    return _("✅ Thank you! {credit} was added to your wallet; it has {left} now.").format(
        credit=usd(credit_musd), left=remaining_usd(left_musd)
    )


def wallet_refunded_text(stars: int, removed_musd: int, kept_musd: int, left_musd: int) -> str:
    """A top-up refunded: what left the wallet, what had been spent already."""
    text = _("↩️ Your top-up of {stars} ⭐ was refunded; {removed} left your wallet.").format(
        stars=stars, removed=usd(removed_musd)
    )
    if kept_musd > 0:
        text += " " + _("{kept} of it had already paid for answers.").format(kept=usd(kept_musd))
    return text + " " + _("Your wallet has {left} now.").format(left=remaining_usd(left_musd))


def wallet_line(left_musd: int, spent_musd: int, held_musd: int) -> str:
    """/me's wallet line."""
    left, spent = remaining_usd(left_musd), usd(spent_musd)
    if held_musd:
        return _(
            "Wallet: {left} left, {spent} spent from it, {held} held by answers in flight. "
            "/topup adds to it."
        ).format(left=left, spent=spent, held=usd(held_musd))
    return _("Wallet: {left} left, {spent} spent from it. /topup adds to it.").format(
        left=left, spent=spent
    )


def wallet_limit_text(ceiling_musd: int, left_musd: int | None, reset: str | None) -> str:
    """A paid answer neither the allowance nor the wallet could pay for."""
    text = _(
        "🚫 Your allowance cannot pay for this answer now and your wallet has "
        "{left} left: the answer may cost up to {ceiling}."
    ).format(left=remaining_usd(left_musd), ceiling=usd(ceiling_musd))
    if reset:
        text += " " + _("Your allowance resets at {reset}.").format(reset=reset)
    return text + " " + _("/topup adds to the wallet.")
