"""SHED_ORDER: the expensive features switched off one by one, in an order set in
advance, as spend nears a global limit — and on again when the window resets
(``docs/decisions/141-shedding-in-a-set-order.md``).

:class:`Shedding` reads ``/budget``'s own figures (:meth:`budget.ledger.Ledger.status`:
the global buckets with a limit) every SHED_CHECK_SECONDS; the *used fraction* is the
largest ``(settled + held) / limit`` over them (hour, day). The first ``n`` features of
SHED_ORDER are off while the fraction is at or above the ``n``-th fraction of SHED_AT.
Each change is told to every admin (which features went off or came back, the window,
its spend, limit and reset). Readers (:meth:`is_off`) do no I/O: they see the last
reading.

The features and where they are switched: ``paid_digests`` (a digest that would need
the paid anchor waits for a free provider or for the step to lift:
:class:`scheduler.job.DigestConfig`'s ``paid_allowed``), ``streaming`` (answers are sent
whole, :class:`bot.chat.streaming.session.StreamConfig`'s ``shed``), ``long_answers``
(chat answers capped at a quarter of CHAT_MAX_OUTPUT_TOKENS, said under the answer),
``media`` (held for the chat path's media inputs: today every non-text message gets
the "text only" template already, and the admin notice says so).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from bot.text.operator import shed_notice_text
from bot.text.templates import format_reset
from budget.kernel.clock import Clock
from budget.kernel.failure_log import FailureLog
from budget.kernel.tasks import cancel_and_wait
from budget.status import LedgerStatus
from budget.types import Level, Window

__all__ = ["LONG_ANSWER_SHARE", "ShedState", "Shedding", "admin_announcer", "shed_state"]

log = logging.getLogger(__name__)

#: A shed ``long_answers`` caps chat answers at this share of CHAT_MAX_OUTPUT_TOKENS.
LONG_ANSWER_SHARE = 4


@dataclass(frozen=True, slots=True)
class ShedState:
    """One reading.

    Attributes:
        off: the features off now, in SHED_ORDER's order.
        fraction: the used fraction of the fullest global window (0 when none has a
            limit).
        window: that window (``None``: no global limit).
        spent_musd, limit_musd: its settled + held and its limit, µUSD.
        resets_at: when it resets (aware UTC; ``None`` without a limit).
    """

    off: tuple[str, ...] = ()
    fraction: Decimal = Decimal(0)
    window: Window | None = None
    spent_musd: int = 0
    limit_musd: int = 0
    resets_at: datetime | None = None


def shed_state(status: LedgerStatus, order: Sequence[str], at: Sequence[Decimal]) -> ShedState:
    """The features off for ``status`` (pure): the first ``n`` of ``order`` where ``n``
    fractions of ``at`` are at or below the fullest global window's used fraction."""
    best: ShedState = ShedState()
    for bucket in status.buckets:
        if bucket.level is not Level.GLOBAL or not bucket.limit_musd:
            continue
        spent = bucket.settled_musd + bucket.held_musd
        fraction = Decimal(spent) / Decimal(bucket.limit_musd)
        if best.window is None or fraction > best.fraction:
            best = ShedState(
                (), fraction, bucket.window, spent, bucket.limit_musd, bucket.resets_at
            )
    steps = sum(1 for f in at if best.window is not None and best.fraction >= f)
    return ShedState(
        tuple(order[:steps]),
        best.fraction,
        best.window,
        best.spent_musd,
        best.limit_musd,
        best.resets_at,
    )


#: ``(state before, state now)`` → told to the admins.
Announce = Callable[[ShedState, ShedState], Awaitable[None]]


def admin_announcer(broadcast: Callable[[str], Awaitable[None]], tz: str) -> Announce:
    """An :data:`Announce` that sends :func:`bot.text.operator.shed_notice_text` (the
    reset in BUDGET_TZ ``tz``) through ``broadcast`` (every admin)."""

    async def announce(before: ShedState, now: ShedState) -> None:
        went = [f for f in now.off if f not in before.off]
        back = [f for f in before.off if f not in now.off]
        text = shed_notice_text(
            went,
            back,
            window=now.window.value if now.window else "",
            spent_musd=now.spent_musd,
            limit_musd=now.limit_musd,
            resets=format_reset(now.resets_at, tz) if now.resets_at else "",
        )
        await broadcast(text)

    return announce


class Shedding:
    """The features shed now (module docstring).

    Args:
        status: ``Ledger.status`` (the figures ``/budget`` prints).
        order: SHED_ORDER.
        at: SHED_AT (as many fractions as ``order`` names features, rising).
        clock: the bot's clock.
        announce: tells the admins of a change.
        every_s: SHED_CHECK_SECONDS.
    """

    def __init__(
        self,
        status: Callable[[], Awaitable[LedgerStatus]],
        order: Sequence[str],
        at: Sequence[Decimal],
        clock: Clock,
        announce: Announce,
        *,
        every_s: float,
    ) -> None:
        self._status = status
        self.order = tuple(order)
        self.at = tuple(at)
        self._clock = clock
        self._announce = announce
        self._every_s = every_s
        self.state = ShedState()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def is_off(self, feature: str) -> bool:
        """``feature`` is shed now (the last reading; no I/O)."""
        return feature in self.state.off

    async def refresh(self) -> ShedState:
        """Read the ledger now; a change is told to the admins before this returns.

        Raises:
            LedgerUnavailable: the ledger could not be read (the last reading stays).
        """
        async with self._lock:
            now = shed_state(await self._status(), self.order, self.at)
            before, self.state = self.state, now
            if now.off != before.off:
                log.warning(
                    "shedding: off %s (was %s), global %s at %.1f%%",
                    ",".join(now.off) or "nothing",
                    ",".join(before.off) or "nothing",
                    now.window.value if now.window else "-",
                    float(now.fraction * 100),
                )
                await self._announce(before, now)
            return now

    def start(self) -> None:
        """Read every SHED_CHECK_SECONDS (idempotent)."""
        if self._task is None and self.order:
            self._task = asyncio.create_task(self._loop(), name="shedding")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _loop(self) -> None:
        failures = FailureLog(log, "shedding check")
        while True:
            try:
                await self.refresh()
            except Exception as exc:  # noqa: BLE001 - logged; the next look tries again
                failures.failed(exc)
            else:
                failures.ok()
            await self._clock.sleep(self._every_s)
