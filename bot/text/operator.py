"""The texts of the operator's tools: shedding (``bot.ops.shedding``) and the drill
(``bot.handlers.admin.drill``). Users' texts are gettext msgids in English, translated in
``bot/text/locales/ru/LC_MESSAGES/messages.po``; admins' notices are English, like every
admin notice (``bot.ops.admin_notices``).
"""

from __future__ import annotations

from collections.abc import Sequence

from aiogram.utils.i18n import gettext as _

from budget.policy.money import usd_text

__all__ = [
    "FEATURE_NAMES",
    "shed_notice_text",
    "shed_short_note",
    "shed_stop_text",
]

#: SHED_ORDER's names as admins read them.
FEATURE_NAMES = {
    "paid_digests": "paid digests (digests wait for a free provider)",
    "media": "media (no effect yet: the chat path takes text only)",
    "streaming": "streaming (answers are sent whole)",
    "long_answers": "long answers (chat answers capped at a quarter of CHAT_MAX_OUTPUT_TOKENS)",
}


def shed_short_note() -> str:
    """Appended to a chat answer that stopped at the cap a shed ``long_answers`` set."""
    return _("✂️ Answers are kept short for now: the bot's spending is near its global limit.")


def shed_stop_text() -> str:
    """/stop while streaming is shed: answers are sent whole, there is nothing to stop."""
    return _(
        "Answers are sent in one piece for now (the bot's spending is near its global "
        "limit), so /stop cannot stop one: it arrives when it is ready."
    )


def shed_notice_text(
    went_off: Sequence[str],
    came_back: Sequence[str],
    *,
    window: str,
    spent_musd: int,
    limit_musd: int,
    resets: str,
) -> str:
    """The admins' notice of a shedding change (English). ``resets``: when the window
    resets (:func:`bot.text.templates.format_reset`), or ``""`` with no global limit."""
    lines = []
    if went_off:
        lines.append("⚖️ Shedding: switched off " + "; ".join(FEATURE_NAMES[f] for f in went_off))
    if came_back:
        lines.append("✅ Shedding: back on " + "; ".join(FEATURE_NAMES[f] for f in came_back))
    if limit_musd:
        share = spent_musd * 100 / limit_musd
        lines.append(
            f"Global {window} spend {usd_text(spent_musd)} of {usd_text(limit_musd)}"
            f" ({share:.0f} %, held included); the window resets at {resets}."
        )
    else:
        lines.append("No global limit applies now.")
    return "\n".join(lines)
