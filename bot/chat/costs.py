"""The ``/cost on`` footer: what one answer cost, read from the ledger's settled entry of
its answering attempt (docs/decisions/153-the-cost-footer.md).

Never the estimate presented as fact: the amount is the hold's booked ``actual_musd``
(a paid answer) or its ``list_actual_musd`` (a free one: "free tier" with the list-price
equivalent), "about" when the ledger booked its own count because the provider reported
no usage, and what else the message was charged (a history summary, a provider tried
first) is the operation's booked total minus that entry.
"""

from __future__ import annotations

import logging
from typing import Protocol

from bot.chat.outcome import ChatAnswer
from bot.text import conversation
from budget.status import HoldEntry

__all__ = ["HoldReader", "cost_footer"]

log = logging.getLogger(__name__)


class HoldReader(Protocol):
    """What the footer needs of the ledger."""

    async def hold_entry(self, hold_id: str) -> HoldEntry | None: ...


async def cost_footer(answer: ChatAnswer, ledger: HoldReader) -> str | None:
    """The footer for ``answer``, ``None`` when the ledger cannot say (no footer is
    better than a guess): the entry is missing, unreadable or not booked yet."""
    completion = answer.completion
    if not completion.hold_id:
        return None
    try:
        entry = await ledger.hold_entry(completion.hold_id)
    except Exception:  # an unreadable ledger costs the footer, not the answer
        log.warning("cost footer: hold %s unreadable", completion.hold_id, exc_info=True)
        return None
    if entry is None or entry.actual_musd is None:
        return None
    paid = entry.actual_musd > 0 or completion.paid
    extra = 0
    if answer.charged_musd is not None:
        extra = max(0, answer.charged_musd - entry.actual_musd)
    return conversation.cost_footer(
        entry.actual_musd,
        paid=paid,
        list_musd=entry.list_actual_musd,
        estimated=entry.estimated,
        extra_musd=extra,
    )
