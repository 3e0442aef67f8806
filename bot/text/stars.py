"""What the bot says about Telegram Stars payments (gettext msgids in English, as in
:mod:`bot.text.templates`; the Russian catalogue translates them). Every sentence is
true of what happened: a refusal before paying says nothing was charged (Telegram takes
the Stars only after the pre-checkout is answered ``ok``)."""

from __future__ import annotations

from aiogram.utils.i18n import gettext as _
from aiogram.utils.i18n import ngettext

__all__ = [
    "buy_line",
    "buy_list_text",
    "buy_none_text",
    "buy_unknown_text",
    "invoice_description",
    "paid_text",
    "payment_auto_refunded_text",
    "payment_refunded_text",
    "pre_checkout_refused_text",
]


def buy_none_text() -> str:
    """/buy when no plan has a price."""
    return _("No plan can be bought here.")


def buy_list_text(lines: list[str], example: str) -> str:
    """/buy: the plans for sale, one ``line`` each (:func:`buy_line`); ``example``: the
    name of one of them."""
    head = _("Plans you can buy with Telegram Stars:")
    tail = _("Send /buy and the plan's name, e.g. /buy {plan}.")
    return "\n".join([head, *lines, tail.format(plan=example)])


def buy_line(name: str, title: str, stars: int, days: int) -> str:
    """One plan of the /buy list."""
    return ngettext(
        "• {name} ({title}): {stars} ⭐ for {days} day",
        "• {name} ({title}): {stars} ⭐ for {days} days",
        days,
    ).format(name=name, title=title, stars=stars, days=days)


def buy_unknown_text() -> str:
    """/buy NAME for a plan that is not for sale."""
    return _("That plan is not for sale. /buy lists the plans you can buy.")


def invoice_description(title: str, days: int) -> str:
    """The invoice's description (at most 255 characters)."""
    return ngettext(
        "The {plan} plan for {days} day: its limits and features. /me shows them.",
        "The {plan} plan for {days} days: its limits and features. /me shows them.",
        days,
    ).format(plan=title, days=days)


def pre_checkout_refused_text() -> str:
    """The pre-checkout's ``error_message`` (Telegram shows it; nothing is charged)."""
    return _(
        "This plan is no longer sold on these terms, so nothing was charged. "
        "Send /buy to see the plans now."
    )


def paid_text(plan: str, until: str) -> str:
    """A payment booked and its plan set."""
    return _("✅ Thank you! You are on the {plan} plan until {until}.").format(
        plan=plan, until=until
    )


def payment_auto_refunded_text(stars: int) -> str:
    """A payment for a plan that stopped being sold between the pre-checkout and the
    payment: refunded at once."""
    return ngettext(
        "This plan is no longer sold, so your {stars} ⭐ was refunded and nothing changed.",
        "This plan is no longer sold, so your {stars} ⭐ were refunded and nothing changed.",
        stars,
    ).format(stars=stars)


def payment_refunded_text(stars: int) -> str:
    """A payment refunded (by an admin, or by Telegram)."""
    return _("↩️ Your payment of {stars} ⭐ was refunded. /me shows your plan now.").format(
        stars=stars
    )
