"""What the bot says about Telegram Stars payments (gettext msgids in English, as in
:mod:`bot.text.templates`; the Russian catalogue translates them). Every sentence is
true of what happened: a refusal before paying says nothing was charged (Telegram takes
the Stars only after the pre-checkout is answered ``ok``)."""

from __future__ import annotations

from aiogram.utils.i18n import gettext as _
from aiogram.utils.i18n import ngettext

from bot.text.access import shown_title

__all__ = [
    "buy_line",
    "buy_list_text",
    "buy_none_text",
    "buy_renews_line",
    "buy_unknown_text",
    "cancel_failed_text",
    "cancel_partly_text",
    "invoice_description",
    "no_subscription_text",
    "no_subscription_to_renew_text",
    "paid_kept_text",
    "paid_text",
    "payment_auto_refunded_text",
    "payment_refunded_text",
    "payment_replaced_refunded_text",
    "payments_private_text",
    "plan_check_failed_text",
    "plan_held_text",
    "plan_owned_text",
    "pre_checkout_period_text",
    "pre_checkout_price_text",
    "pre_checkout_refused_text",
    "pre_checkout_unknown_text",
    "refund_failed_text",
    "renew_failed_text",
    "renew_not_cancelled_text",
    "renewal_already_cancelled_text",
    "renewal_cancelled_text",
    "renewal_refunded_text",
    "renewal_resumed_text",
    "renewals_cancelled_text",
    "subscribe_button",
    "subscribe_failed_text",
    "subscribe_text",
    "subscribed_text",
    "subscription_description",
    "subscription_kept_text",
    "subscription_renewing_text",
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
    ).format(name=name, title=shown_title(title), stars=stars, days=days)


def payments_private_text(command: str, link: str) -> str:
    """/buy (or /topup, /cancel_renewal, /renew) in a group: payments are made in the
    private chat with the bot (``link``: ``https://t.me/<bot>``, no start payload: the
    only deep links the bot makes are invites). Nothing was sent or charged."""
    return _(
        "💳 {command} works in a private chat with me, not in a group: open {link} "
        "and send {command} there. Nothing was charged."
    ).format(command=command, link=link)


def buy_unknown_text() -> str:
    """/buy NAME for a plan that is not for sale."""
    return _("That plan is not for sale. /buy lists the plans you can buy.")


def invoice_description(title: str, days: int) -> str:
    """The invoice's description (at most 255 characters)."""
    return ngettext(
        "The {plan} plan for {days} day: its limits and features. /me shows them.",
        "The {plan} plan for {days} days: its limits and features. /me shows them.",
        days,
    ).format(plan=shown_title(title), days=days)


def pre_checkout_refused_text() -> str:
    """The pre-checkout's ``error_message`` (Telegram shows it; nothing is charged)."""
    return _(
        "This plan is no longer sold on these terms, so nothing was charged. "
        "Send /buy to see the plans now."
    )


def pre_checkout_price_text(name: str, invoiced: int, now: int) -> str:
    """The pre-checkout's ``error_message`` when the plan's price in the plans file
    changed since the invoice was sent (nothing is charged)."""
    return _(
        "The price of this plan changed since this invoice was sent ({invoiced} ⭐ then, "
        "{now} ⭐ now), so nothing was charged. Send /buy {name} again for a new invoice."
    ).format(name=name, invoiced=invoiced, now=now)


def pre_checkout_period_text(name: str) -> str:
    """The pre-checkout's ``error_message`` when the plan's period (days) changed since
    the invoice was sent (nothing is charged)."""
    return _(
        "The period this plan buys changed since this invoice was sent, so nothing was "
        "charged. Send /buy {name} again for a new invoice."
    ).format(name=name)


def pre_checkout_unknown_text() -> str:
    """The pre-checkout's ``error_message`` for an invoice the bot never issued (its
    payload is none of a plan's or a top-up's): nothing was ever sold on it."""
    return _(
        "This invoice is not one this bot recognises, so nothing was charged. "
        "Send /buy to see the plans you can buy."
    )


def paid_text(plan: str, until: str) -> str:
    """A payment booked and its plan set."""
    return _("✅ Thank you! You are on the {plan} plan until {until}.").format(
        plan=shown_title(plan), until=until
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


def buy_renews_line(name: str, title: str, stars: int) -> str:
    """One plan of the /buy list that is sold as a subscription."""
    return _("• {name} ({title}): {stars} ⭐ every 30 days, until you cancel").format(
        name=name, title=shown_title(title), stars=stars
    )


def subscribe_text(title: str, stars: int) -> str:
    """/buy NAME for a plan that renews: what the link sells."""
    return _(
        "The {plan} plan is a subscription: {stars} ⭐ now and again every 30 days until "
        "you cancel it with /cancel_renewal. Open the link below to subscribe."
    ).format(plan=shown_title(title), stars=stars)


def subscribe_button(stars: int) -> str:
    """The subscription link's button."""
    return _("Subscribe for {stars} ⭐").format(stars=stars)


def subscribe_failed_text() -> str:
    """/buy NAME for a plan that renews: Telegram gave no link."""
    return _(
        "Telegram could not make the subscription link just now, so nothing was charged. "
        "Send /buy again later."
    )


def subscription_description(title: str) -> str:
    """A subscription invoice's description (at most 255 characters)."""
    return _(
        "The {plan} plan, renewed every 30 days until you cancel: its limits and features. "
        "/me shows them."
    ).format(plan=shown_title(title))


def subscribed_text(plan: str, until: str) -> str:
    """A subscription's payment (the first or a renewal) booked and its plan set."""
    return _(
        "✅ Thank you! You are on the {plan} plan until {until}; then Telegram renews it, "
        "until you send /cancel_renewal."
    ).format(plan=shown_title(plan), until=until)


def renewal_cancelled_text(plan: str, until: str) -> str:
    """/cancel_renewal: Telegram took the cancellation."""
    return _(
        "Your subscription to the {plan} plan will not renew: no more Stars are taken, and "
        "the plan stays until {until}."
    ).format(plan=shown_title(plan), until=until)


def no_subscription_text() -> str:
    """/cancel_renewal without a subscription."""
    return _("You have no Stars subscription here to cancel.")


def cancel_failed_text() -> str:
    """/cancel_renewal: Telegram refused or could not be reached."""
    return _(
        "Telegram did not take the cancellation, so nothing changed. Try again later, or "
        "cancel the subscription in Telegram under My Stars."
    )


def renewal_resumed_text(plan: str, until: str) -> str:
    """/renew: Telegram took the re-enabled renewal (nothing is charged now)."""
    return _(
        "Your subscription to the {plan} plan renews again: no Stars are taken now; "
        "Telegram takes the next ones when the plan would end, {until}, and every 30 days "
        "after, until you send /cancel_renewal."
    ).format(plan=shown_title(plan), until=until)


def no_subscription_to_renew_text() -> str:
    """/renew without a subscription still running."""
    return _("You have no Stars subscription here to renew. /buy shows the plans.")


def renew_failed_text() -> str:
    """/renew: Telegram refused or could not be reached."""
    return _(
        "Telegram did not take the renewal, so nothing changed: the subscription still "
        "will not renew. If you cancelled it in Telegram, turn it back on there under My "
        "Stars; otherwise try /renew again later."
    )


def renewal_refunded_text(stars: int) -> str:
    """A renewal of a subscription whose plan is no longer sold as one: refunded, and
    the subscription cancelled."""
    return _(
        "The plan you subscribed to is no longer sold as a subscription, so this renewal's "
        "{stars} ⭐ were refunded and the subscription was cancelled."
    ).format(stars=stars)


def payment_replaced_refunded_text(current: str, stars: int, *, subscription: bool) -> str:
    """A payment for another plan that passed its pre-checkout while the user's plan
    ``current`` still had time left (two invoices paid one after the other): it would have
    replaced that plan and lost its time, so it was refunded (and, for a subscription,
    cancelled) and nothing changed (decision 278)."""
    if subscription:
        return _(
            "You are on the {plan} plan: this subscription would have replaced it and lost "
            "its time left, so its {stars} ⭐ were refunded, the subscription was cancelled "
            "and nothing changed."
        ).format(plan=shown_title(current), stars=stars)
    return _(
        "You are on the {plan} plan: this payment would have replaced it and lost its time "
        "left, so its {stars} ⭐ were refunded and nothing changed."
    ).format(plan=shown_title(current), stars=stars)


def plan_held_text(current: str, until: str | None) -> str:
    """/buy or the pre-checkout of another plan while the user's plan ``current`` runs
    until ``until`` (``None``: it has no end): refused, nothing charged."""
    if until is None:
        return _(
            "You are on the {plan} plan with no end date: another plan bought now would "
            "replace it, so nothing is sold or charged. An admin can change your plan."
        ).format(plan=shown_title(current))
    return _(
        "You are on the {plan} plan until {until}: another plan bought now would replace "
        "it and lose the days left, so nothing is sold or charged. Buy it after that date, "
        "or buy {plan} again to extend it."
    ).format(plan=shown_title(current), until=until)


def plan_check_failed_text() -> str:
    """The pre-checkout could not read the payer's plan in time: refused."""
    return _("Your plan could not be checked just now, so nothing was charged. Please try again.")


def refund_failed_text(stars: int) -> str:
    """A payment for terms no longer sold whose automatic refund Telegram did not take."""
    return _(
        "This plan is no longer sold on the terms you paid for, and the automatic refund "
        "of your {stars} ⭐ did not go through. Nothing was bought with them; the admins "
        "were told."
    ).format(stars=stars)


def plan_owned_text(plan: str) -> str:
    """/buy or the pre-checkout of the plan the user already has with no end: a
    purchase would add nothing, so it is refused, nothing charged (decision 278)."""
    return _(
        "You already have the {plan} plan with no end date: buying it would add nothing, "
        "so nothing is sold or charged."
    ).format(plan=shown_title(plan))


def subscription_renewing_text(plan: str, until: str) -> str:
    """/buy or the pre-checkout of a subscription while one of the user's renews:
    refused, nothing charged (decision 278)."""
    return _(
        "Your subscription to the {plan} plan already renews: Telegram takes the next "
        "Stars at {until}. A second subscription would charge you twice, so nothing is "
        "sold or charged. /cancel_renewal stops the renewals."
    ).format(plan=shown_title(plan), until=until)


def paid_kept_text(plan: str) -> str:
    """A payment that arrived although the user has its plan with no end: booked, and
    the plan kept with no end (a payment never shortens a plan)."""
    return _(
        "✅ Thank you! Your payment is booked. You already have the {plan} plan with no "
        "end date, and you keep it with no end date."
    ).format(plan=shown_title(plan))


def subscription_kept_text() -> str:
    """After :func:`paid_kept_text`, for a subscription's charge."""
    return _("Telegram takes Stars again every 30 days until you send /cancel_renewal.")


def renewals_cancelled_text(count: int, until: str) -> str:
    """/cancel_renewal: Telegram took the cancellation of each of ``count`` (2 or more)
    subscriptions."""
    return ngettext(
        "Your {count} subscription will not renew: no more Stars are taken, and your plan "
        "stays until {until}.",
        "Your {count} subscriptions will not renew: no more Stars are taken, and your plan "
        "stays until {until}.",
        count,
    ).format(count=count, until=until)


def cancel_partly_text(stopped: int, total: int) -> str:
    """/cancel_renewal: Telegram stopped ``stopped`` of the user's ``total``
    subscriptions and refused the others, which still renew."""
    return ngettext(
        "Telegram stopped the renewals of {stopped} of your {total} subscription but did "
        "not take the cancellation of the others, which still renew. Send /cancel_renewal "
        "again later, or cancel them in Telegram under My Stars.",
        "Telegram stopped the renewals of {stopped} of your {total} subscriptions but did "
        "not take the cancellation of the others, which still renew. Send /cancel_renewal "
        "again later, or cancel them in Telegram under My Stars.",
        total,
    ).format(stopped=stopped, total=total)


def renewal_already_cancelled_text(plan: str, until: str) -> str:
    """/cancel_renewal when the bot already stopped the renewals: nothing to do."""
    return _(
        "Your subscription to the {plan} plan already will not renew (/cancel_renewal "
        "stopped it): no more Stars are taken, and the plan stays until {until}. /renew "
        "turns the renewals back on."
    ).format(plan=shown_title(plan), until=until)


def renew_not_cancelled_text(plan: str, until: str) -> str:
    """/renew when the bot never stopped the renewals: nothing to turn back on here."""
    return _(
        "Your subscription to the {plan} plan was not cancelled with /cancel_renewal, so "
        "there is nothing to turn back on here: Telegram takes the next Stars at {until}, "
        "unless you cancelled it in Telegram; then turn it back on there under My Stars."
    ).format(plan=shown_title(plan), until=until)
