"""Texts of conversations that stay cheap: the history-fold note, the duplicate-message
notices, the cost footer and ``/cost`` (gettext msgids in English, translated in
``bot/text/locales/ru``). Call inside an active locale, as :mod:`bot.text.templates`."""

from __future__ import annotations

from aiogram.utils.i18n import gettext as _
from aiogram.utils.i18n import ngettext

from bot.text.limits import limit_short
from bot.text.templates import format_reset, reset_sentence
from budget.policy.money import usd
from budget.types import Refusal, RefusalReason, Window

__all__ = [
    "cost_footer",
    "cost_set_text",
    "cost_usage_text",
    "duplicate_joined_text",
    "duplicate_recent_text",
    "history_summarised_line",
    "regenerate_button_text",
    "regenerate_denied_text",
    "regenerate_gone_text",
    "summary_cut_note",
]


def summary_cut_note(refusal: Refusal | None, *, tz: str) -> str:
    """The note under an answer whose older turns were cut because their summary could
    not be made: which limit refused its hold (and when it resets), or that no provider
    made it."""
    if refusal is None:
        return _(
            "ℹ️ Older turns of this conversation were dropped, not summarised: "
            "no provider could make the summary."
        )
    if refusal.reason in (RefusalReason.LIMIT, RefusalReason.BUSY):
        parts = [
            _(
                "ℹ️ Older turns of this conversation were dropped, not summarised: "
                "there was no room for the summary."
            ),
            limit_short(refusal.level, refusal.window, refusal.scope),
        ]
        if refusal.resets_at is not None:
            monthly = refusal.window is Window.MONTH
            parts.append(reset_sentence(format_reset(refusal.resets_at, tz, with_date=monthly)))
        return " ".join(parts)
    return _(
        "ℹ️ Older turns of this conversation were dropped, not summarised: "
        "this message's cost cap had no room for the summary."
    )


def history_summarised_line(summarised: int, dropped: int) -> str:
    """``/me``: what became of this conversation's older turns."""
    if dropped:
        return _(
            "🗂 Older turns here: {summarised} summarised, {dropped} dropped "
            "(no summary could be made then). /reset clears both."
        ).format(summarised=summarised, dropped=dropped)
    return ngettext(
        "🗂 {summarised} older turn here is summarised; the summary is sent with your "
        "messages instead of it. /reset clears it.",
        "🗂 {summarised} older turns here are summarised; the summary is sent with your "
        "messages instead of them. /reset clears it.",
        summarised,
    ).format(summarised=summarised)


def cost_footer(
    settled_musd: int, *, paid: bool, list_musd: int | None, estimated: bool, extra_musd: int
) -> str:
    """The ``/cost on`` footer: what the answering attempt was settled at (``about``
    when the provider reported no usage and the ledger booked its own count), "free
    tier" with the list-price equivalent, and what else this message was charged (a
    history summary, a provider tried first)."""
    about = _("about ") if estimated else ""
    if paid:
        text = _("💰 This answer cost {about}{amount}.").format(
            about=about, amount=usd(settled_musd)
        )
    elif list_musd is not None:
        text = _("💰 Free tier: {about}{amount} at list prices.").format(
            about=about, amount=usd(list_musd)
        )
    else:
        text = _("💰 Free tier (no list price known for this model).")
    if extra_musd > 0:
        text += " " + _("Other steps of this message: {amount}.").format(amount=usd(extra_musd))
    return text


def cost_set_text(on: bool) -> str:
    """``/cost on`` / ``/cost off`` done."""
    if on:
        return _("💰 Each answer now ends with what it cost. /cost off turns it off.")
    return _("💰 Answers no longer show their cost.")


def cost_usage_text(on: bool) -> str:
    """``/cost`` without a valid argument."""
    state = _("on") if on else _("off")
    return _("Usage: /cost on or /cost off (now {state}).").format(state=state)


def duplicate_joined_text() -> str:
    """The same text again while its first copy is being answered."""
    return _("⏳ Answering your message above.")


def duplicate_recent_text() -> str:
    """The same text again just after its answer: not answered (nor paid) again. Whether
    a new answer would cost anything is not known here (the cascade picks a free or a
    paid key when it is asked), so the sentence says only what is true of both."""
    return _(
        "↩️ You asked this just now: the answer is above. Press the button for a new "
        "answer: it is a new request, charged as any question is."
    )


def regenerate_button_text() -> str:
    """The button under :func:`duplicate_recent_text`."""
    return _("🔄 Regenerate")


def regenerate_denied_text() -> str:
    """A regenerate button pressed by someone other than the person who asked."""
    return _("Only the person who asked can get a new answer to it.")


def regenerate_gone_text() -> str:
    """A regenerate button pressed too late (or by someone else)."""
    return _("This button has expired: send the question again.")
