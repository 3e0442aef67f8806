"""A message that met a ledger failing closed before any provider call is tried again
when the ledger answers, not bounced to its user.

The ledger fails closed whenever it cannot write (PostgreSQL away or restarting, a lock
held past ``DATABASE_LOCK_TIMEOUT_SECONDS``, a full disk): no hold, no provider call.
A message taken in just before — its intake recorded, its hold refused as
``unavailable`` before any hold was granted for it (:attr:`ChatRefused.retry`) — is
tried again whole every :data:`RETRY_PAUSE_S` seconds while it is younger than
``STALE_MESSAGE_SECONDS`` (older, it was sent while the bot could not answer, and its
user is told so); the first try that meets a working ledger answers it as any other
message. Past that age, or when the bot stops, the last refusal is its reply (the
ledger-unavailable template, which says to retry). A message whose provider call was
made (a hold was granted) is never tried again: it may have been billed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from bot.chat.outcome import ChatOutcome, ChatRefused
from budget.kernel.clock import Clock

__all__ = ["RETRY_PAUSE_S", "until_ledger_answers"]

log = logging.getLogger(__name__)

#: Seconds between two tries of a message that met a ledger failing closed.
RETRY_PAUSE_S = 2.0


async def until_ledger_answers(
    attempt: Callable[[], Awaitable[ChatOutcome]],
    *,
    clock: Clock,
    sent_at: datetime,
    stale_after: timedelta,
    closing: Callable[[], bool],
) -> ChatOutcome:
    """Run ``attempt`` (one whole try of the message) until its outcome is not a
    retryable refusal, the message (sent at ``sent_at``, aware) would be older than
    ``stale_after`` at the next try, or ``closing()``; returns the last outcome."""
    tries = 0
    while True:
        outcome = await attempt()
        if not (isinstance(outcome, ChatRefused) and outcome.retry):
            if tries:
                log.info("message answered after %d tries on a failing ledger", tries + 1)
            return outcome
        next_try = clock.now() + timedelta(seconds=RETRY_PAUSE_S)
        if closing() or next_try - sent_at > stale_after:
            return outcome
        if not tries:
            log.info("ledger failing closed; the message is tried again every %g s", RETRY_PAUSE_S)
        tries += 1
        await clock.sleep(RETRY_PAUSE_S)
