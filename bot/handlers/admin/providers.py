"""/providers: each key in cascade order (model, free or paid, enabled, circuit,
calls today, the last rate-limit headers), and ``/providers enable NAME`` after an auth
or balance failure. ``/providers prices`` is the books router's (:mod:`bot.handlers.books`)."""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.filters import CommandObject
from aiogram.types import Message

from bot.handlers.admin.base import reply
from budget.errors import LedgerUnavailable
from budget.kernel.clock import Clock
from budget.kernel.shown import echoed
from budget.ledger import Ledger
from llm.cascade.cascade import Cascade

__all__ = ["on_providers"]

log = logging.getLogger(__name__)


async def on_providers(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    cascade: Cascade,
    ledger: Ledger,
) -> None:
    """/providers [enable NAME]."""
    args = (command.args or "").split()
    if len(args) == 2 and args[0] == "enable":
        await reply(bot, message, await _enable(cascade, args[1]), clock)
        return
    if args:
        await reply(bot, message, "Usage: /providers [enable NAME | prices]", clock)
        return
    await reply(bot, message, await _report(cascade, ledger), clock)


async def _enable(cascade: Cascade, name: str) -> str:
    known = {p.name for p in cascade.provider_status() if p.present}
    if name not in known:
        return f"Unknown provider '{echoed(name)}'; keys: {', '.join(sorted(known))}."
    if await cascade.enable_key(name):
        return f"{name} enabled."
    return f"{name} is already enabled."


async def _report(cascade: Cascade, ledger: Ledger) -> str:
    lines = ["🔌 Providers (cascade order):"]
    try:
        await cascade.refresh()  # the deployment's circuits, when shared
    except LedgerUnavailable:
        log.warning("/providers: shared key state unreadable; this process's view shown")
    statuses = cascade.provider_status()
    calls_today = {sp.provider: sp.calls for sp in (await ledger.status()).providers}
    for p in statuses:
        if not p.present:
            lines.append(f"• {p.name}: no key")
            continue
        state = "enabled" if p.enabled else "DISABLED (auth failure)"
        cooldown = f", cooldown {p.cooldown_remaining_s:.0f}s" if p.cooldown_remaining_s > 0 else ""
        headers = ", ".join(f"{k}={v}" for k, v in sorted(p.last_rate_limits.items()))
        lines.append(
            f"• {p.name} ({p.model}{', paid' if p.paid else ', free'}): {state}, "
            f"circuit {p.state}{cooldown}, calls today {calls_today.get(p.name, 0)}"
            + (f"\n    last headers: {headers}" if headers else "")
        )
    if not any(p.paid and p.present for p in statuses):
        lines.append("No paid anchor configured: running free-only.")
    return "\n".join(lines)
