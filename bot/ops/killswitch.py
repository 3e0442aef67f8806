"""Tripping and resetting the global kill switch for an admin: the one path both the
``/kill`` and ``/unkill`` commands (:mod:`bot.handlers.admin`) and the dashboard's
controls (:mod:`bot.ops.dashboard.api`) take, so each is the same ledger call and leaves
the same WARNING line, naming where it came from.

Money is integer µUSD. Both functions may raise :class:`budget.errors.LedgerUnavailable`
(the ledger fails closed) and :class:`ValueError` for an admin id outside 64 bits.
"""

from __future__ import annotations

import logging
import unicodedata
from dataclasses import dataclass

from budget.ledger import Ledger
from budget.status import KillState

__all__ = ["MAX_REASON_CHARS", "KillTrip", "clean_reason", "reset_kill", "trip_kill"]

log = logging.getLogger(__name__)

#: A kill reason is kept, logged and shown at most this long (characters).
MAX_REASON_CHARS = 200


def clean_reason(raw: object) -> str:
    """A kill reason as kept: no control or format characters (a newline could forge a
    log line, U+202E reverse the text shown), whitespace folded, at most
    :data:`MAX_REASON_CHARS`; ``manual`` when empty or not text."""
    if not isinstance(raw, str):
        return "manual"
    kept = "".join(" " if unicodedata.category(c).startswith("C") else c for c in raw)
    return " ".join(kept.split())[:MAX_REASON_CHARS] or "manual"


@dataclass(frozen=True, slots=True)
class KillTrip:
    """What tripping the switch did.

    Attributes:
        already: the switch as it was when it was already on (its first reason, admin
            and time are kept); ``None`` when this call tripped it.
        exposure_musd: µUSD held by work already admitted (when tripped, or now when it
            was already on): what the kill cannot stop.
    """

    already: KillState | None
    exposure_musd: int


async def trip_kill(
    ledger: Ledger, reason: str, *, by: int | None, hard: bool = False, via: str = "/kill"
) -> KillTrip:
    """Trip the global kill switch unless it is on already (then the first kill's
    reason stays on the books), and log it at WARNING.

    Args:
        ledger: the bot's ledger.
        reason: the admin's reason as typed (kept as :func:`clean_reason` makes it;
            ``manual`` when they gave none).
        by: the admin's Telegram user id.
        hard: the command's ``hard`` form (streams in flight are cut by the caller).
        via: where it came from, for the log line (``/kill`` or ``the dashboard``).
    """
    reason = clean_reason(reason)
    before = await ledger.kill_state()
    form = " hard" if hard else ""
    if before.killed:
        exposure = await ledger.exposure()
        log.warning("kill switch already on; kill%s via %s by admin %s: %s", form, via, by, reason)
        return KillTrip(before, exposure)
    exposure = await ledger.kill(reason, by=by)
    log.warning("kill switch tripped%s via %s by admin %s: %s", form, via, by, reason)
    return KillTrip(None, exposure)


async def reset_kill(ledger: Ledger, *, by: int | None, via: str = "/unkill") -> int | None:
    """Reset the global kill switch and log it at WARNING.

    Returns:
        the µUSD still held when it was reset (stuck holds: 0 is the good answer), or
        ``None`` when the switch was already off (nothing changed, nothing logged).
    """
    if not (await ledger.kill_state()).killed:
        return None
    stuck = await ledger.unkill(by=by)
    log.warning("kill switch reset via %s by admin %s", via, by)
    return stuck
