"""The texts of an answer that used tools: how many model calls it took and what it
cost (from the ledger's booking of the whole operation), and the note when a cap ended
the tool loop (docs/decisions/162-tools-under-the-step-cap.md)."""

from __future__ import annotations

from aiogram.utils.i18n import ngettext

from budget.policy.money import usd
from budget.types import Refusal, RefusalReason

__all__ = ["tool_footer", "tool_stop_note"]


def tool_footer(steps: int, tools: tuple[str, ...], charged_musd: int | None) -> str:
    """One line: the model calls, the tools called and the operation's cost as booked
    (``None``: the ledger could not say, so no figure)."""
    names = ", ".join(dict.fromkeys(tools))
    if charged_musd is None:
        return ngettext(
            "🔧 {steps} model call (tools: {tools}).",
            "🔧 {steps} model calls (tools: {tools}).",
            steps,
        ).format(steps=steps, tools=names)
    return ngettext(
        "🔧 {steps} model call (tools: {tools}); this answer cost ${cost}.",
        "🔧 {steps} model calls (tools: {tools}); this answer cost ${cost}.",
        steps,
    ).format(steps=steps, tools=names, cost=usd(charged_musd))


def tool_stop_note(stop: Refusal, steps: int) -> str:
    """Why the tool loop ended before the model answered; the text above is the answer so
    far."""
    if stop.reason is RefusalReason.LOOP:
        return ngettext(
            "🛑 Stopped after {steps} model call: the model asked for the same tool calls "
            "again. This is the answer so far.",
            "🛑 Stopped after {steps} model calls: the model asked for the same tool calls "
            "again. This is the answer so far.",
            steps,
        ).format(steps=steps)
    if stop.reason is RefusalReason.OPERATION_CAP:
        return ngettext(
            "🛑 Stopped after {steps} model call: this message reached its cap on model "
            "calls or on cost per message. This is the answer so far.",
            "🛑 Stopped after {steps} model calls: this message reached its cap on model "
            "calls or on cost per message. This is the answer so far.",
            steps,
        ).format(steps=steps)
    return ngettext(
        "🛑 Stopped after {steps} model call: a budget limit was reached. "
        "This is the answer so far.",
        "🛑 Stopped after {steps} model calls: a budget limit was reached. "
        "This is the answer so far.",
        steps,
    ).format(steps=steps)
