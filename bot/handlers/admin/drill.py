"""/drill: the ledger's guards pressed on the live bot by a canary payer, at no cost
(:mod:`bot.ops.drill`); the reply lists each check, passed, failed or skipped, with its
time. The first filter is the admin router's (ADMIN_IDS)."""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.types import Message

from bot.handlers.admin.base import reply
from bot.ops.drill import Drill
from budget.errors import LedgerUnavailable
from budget.kernel.clock import Clock

__all__ = ["on_drill"]

log = logging.getLogger(__name__)


async def on_drill(message: Message, bot: Bot, clock: Clock, drill: Drill) -> None:
    """/drill."""
    assert message.from_user is not None  # the admin filter passed
    try:
        report = await drill.run(by=message.from_user.id)
    except LedgerUnavailable:
        log.exception("drill: the ledger failed")
        await reply(bot, message, "⚠️ Drill stopped: the ledger could not be written.", clock)
        return
    log.warning("drill by admin %s: %s", message.from_user.id, report.text().splitlines()[0])
    await reply(bot, message, report.text(), clock)
