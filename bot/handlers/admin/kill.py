"""/kill [hard] [reason] and /unkill: the global kill switch.

``/kill`` refuses new LLM work at once (work in flight finishes) and reports the
exposure (outstanding holds). ``/kill hard`` also cuts every streamed answer in flight
— on every replica, when several share a PostgreSQL database (:mod:`bot.ops.signals`) —
waits up to :data:`CUT_SETTLE_WAIT_S` for them to settle on the tokens received, and
reports the exposure before and after. A second ``/kill`` keeps the first one's reason,
admin and time on the books and only adds its cuts.
"""

from __future__ import annotations

import logging
from zoneinfo import ZoneInfo

from aiogram import Bot
from aiogram.filters import CommandObject
from aiogram.types import Message

from bot.chat.streaming.registry import StreamRegistry
from bot.handlers.admin.base import AdminView, reply
from bot.ops.killswitch import clean_reason, reset_kill, trip_kill
from bot.ops.signals import POLL_S as SIGNAL_POLL_S
from budget.errors import LedgerUnavailable
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.policy.money import usd
from budget.status import KillState

__all__ = ["CUT_SETTLE_WAIT_S", "on_kill", "on_unkill"]

log = logging.getLogger(__name__)

#: Seconds /kill hard waits for the streams it cut to settle before it reports exposure.
CUT_SETTLE_WAIT_S = 5.0


def _kill_origin(state: KillState, tz: str) -> str:
    """Who tripped a kill switch, why and when (``by admin 1 at 2026-12-01 03:00 UTC:
    runaway costs``), for the reply to a second /kill."""
    who = "by the burn-rate trigger" if state.automatic else f"by admin {state.by}"
    when = ""
    if state.changed_at is not None:
        when = f" at {state.changed_at.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M} {tz}"
    return f"{who}{when}: {state.reason}"


async def on_kill(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    ledger: Ledger,
    settings_view: AdminView,
    streams: StreamRegistry | None = None,
) -> None:
    """/kill [hard] [reason]."""
    words = (command.args or "").strip().split(maxsplit=1)
    hard = bool(words) and words[0].lower() == "hard"
    reason = words[1] if hard and len(words) > 1 else "" if hard else (command.args or "")
    reason = clean_reason(reason)  # one line, bounded: it is logged and kept
    by = message.from_user.id if message.from_user else None
    # the first kill's reason, admin and time stay on the books: a second /kill (e.g. a
    # /kill hard after a /kill) only adds its cuts; the dashboard takes the same path
    tripped = await trip_kill(ledger, reason, by=by, hard=hard)
    before, exposure = tripped.already, tripped.exposure_musd
    if before is not None:
        origin = _kill_origin(before, settings_view.tz)
        head = f"⛔ The kill switch was already ON ({origin}); that reason is kept."
    else:
        head = f"⛔ Kill switch ON{', hard' if hard else ''} ({reason})."
    if not hard:
        text = (
            f"{head} New LLM work is refused; work in flight finishes. "
            f"Exposure (outstanding holds): {usd(exposure)}"
        )
    else:
        cuts = await _cut_streams(streams)
        after = await ledger.exposure()
        when = "before the cuts" if before is not None else "when killed"
        text = (
            f"{head} New LLM work is refused; {cuts}. Exposure {when}: {usd(exposure)}; "
            f"now: {usd(after)}"
        )
    await reply(bot, message, text, clock)


async def _cut_streams(streams: StreamRegistry | None) -> str:
    """Cut every streamed answer in flight (and tell the other replicas), wait for the
    cuts to settle; what happened, for the reply."""
    cut, waiting = streams.stop_counted("kill") if streams is not None else (0, 0)
    elsewhere = ""
    if streams is not None and streams.kill_watch is not None:
        try:  # the other replicas cut theirs at their next look (bot.ops.signals)
            await streams.kill_watch.raise_here()
            elsewhere = f"; the other replicas cut theirs within {SIGNAL_POLL_S:g} s"
        except LedgerUnavailable:
            log.warning("/kill hard: the other replicas could not be told")
            elsewhere = "; the other replicas could not be told (database unavailable)"
    unsettled = await streams.wait_stopped(CUT_SETTLE_WAIT_S) if streams is not None else 0
    settled = (
        "settled at the tokens received"
        if not unsettled
        else f"{unsettled} not settled after {CUT_SETTLE_WAIT_S:g} s"
    )
    queued = (
        f"; {waiting} answer(s) still waiting for a model call cancelled (no call made)"
        if waiting
        else ""
    )
    return f"{cut} streamed answer(s) in flight cut ({settled}){queued}{elsewhere}"


async def on_unkill(message: Message, bot: Bot, clock: Clock, ledger: Ledger) -> None:
    """/unkill."""
    by = message.from_user.id if message.from_user else None
    stuck = await reset_kill(ledger, by=by)
    if stuck is None:
        await reply(bot, message, "The kill switch is already off.", clock)
        return
    status = await ledger.status()
    await reply(
        bot,
        message,
        f"✅ Kill switch OFF. Outstanding holds: {status.outstanding_holds} "
        f"({usd(stuck)} held)" + (" — no holds are stuck." if stuck == 0 else "."),
        clock,
    )
