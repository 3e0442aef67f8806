"""What the bot says about access, invites and plans (gettext msgids in English, as in
:mod:`bot.text.templates`; the Russian catalogue translates them).

Each sentence is true whatever the bot's settings: "ask whoever runs it" rather than a
promise of a way in the operator may not offer.
"""

from __future__ import annotations

from aiogram.utils.i18n import gettext as _

from budget.kernel.shown import echoed

__all__ = [
    "group_guest_digests_text",
    "group_not_enabled_text",
    "invite_again_text",
    "invite_invalid_text",
    "invite_not_a_code_text",
    "invite_tries_text",
    "invite_welcome_text",
    "not_allowed_text",
    "plan_feature_text",
    "plan_no_media_text",
    "shown_title",
]

#: The longest plan title the plans file takes (``budget/plans.py``).
TITLE_SHOWN = 64


def shown_title(title: str) -> str:
    """A plan's title from the plans file as replies show it: through
    :func:`budget.kernel.shown.echoed`, like every other name the bot did not write
    (a format character such as U+200D is written ``<U+200D>``)."""
    return echoed(title, TITLE_SHOWN)


def not_allowed_text() -> str:
    """A private chat from someone who may not use the bot (at most once a day)."""
    return _("🔒 This bot is private. If you know who runs it, ask them for an invite link.")


def group_not_enabled_text() -> str:
    """A group the bot is not enabled in, once, before it leaves."""
    return _("🔒 This bot is not enabled in this group, so it is leaving.")


def group_guest_digests_text() -> str:
    """A digest command in an enabled group from a member the bot does not serve in a
    private chat (allowlist mode): a group's allowance covers its members there only,
    and digests go to the private chat (decision 296). Nothing is subscribed or changed."""
    return _(
        "🔒 Digests are sent to your private chat, and this bot is private: in this group "
        "you can talk to it, but digests are only for the people it lets in. Nothing was "
        "changed. If you know who runs it, ask them for an invite link."
    )


def invite_welcome_text(plan: str) -> str:
    """An invite let the user in (or moved them to the invite's plan)."""
    return _("✅ Welcome! You can use this bot now, on the {plan} plan. See /help.").format(
        plan=shown_title(plan)
    )


def invite_again_text() -> str:
    """The user had already used this invite: nothing was taken."""
    return _("You have already used this invite link; nothing changed.")


def invite_invalid_text() -> str:
    """No such invite, expired or used up (one text for all: a guess learns nothing)."""
    return _("This invite link does not work: it may have expired or been used up.")


def invite_not_a_code_text() -> str:
    """``/start <payload>`` whose payload cannot be an invite code (wrong length or
    characters): counted as a wrong try, never looked up."""
    return _(
        "This is not an invite link: its code is not one this bot makes. Ask whoever runs "
        "the bot for an invite link."
    )


def invite_tries_text(reset: str) -> str:
    """The user tried too many wrong invite codes this hour (said once per hour)."""
    return _("Too many invite links tried. You can try again after {reset}.").format(reset=reset)


def plan_feature_text(feature: str, plan: str) -> str:
    """A feature the user's plan does not include (``feature`` already translated)."""
    return _("Your plan ({plan}) does not include {feature}.").format(
        feature=feature, plan=shown_title(plan)
    )


def plan_no_media_text(plan: str) -> str:
    """The user's plan does not include media (``media = false`` in the plans file)."""
    return plan_feature_text(_("voice notes, photos, documents and links"), plan)
