"""``/kill hard`` cuts the streamed answers of every replica, within a second.

The kill switch itself needs no signal: every admission reads it in its own
transaction. What a ``/kill hard`` adds — cutting the answers already streaming — acts
on one process's :class:`bot.chat.streaming.registry.StreamRegistry`. With replicas sharing a
PostgreSQL database the replica that got the command cuts its own streams, then bumps
the ``kill_hard`` row of ``runtime_signals`` (a generation counter); every replica's
:class:`SignalWatcher` reads that row every :data:`POLL_S` seconds and, when the
generation grew since it last looked, cuts its own streams the same way (settled on what
they received, sent marked "stopped by an admin"). A poll that cannot read the database
is logged (once until it can again) and retried at the next poll.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from budget.errors import BudgetError
from budget.kernel.clock import Clock
from budget.kernel.tasks import cancel_and_wait
from llm.keys.postgres import Transactor

__all__ = ["KILL_HARD", "POLL_S", "PgSignals", "SignalWatcher"]

log = logging.getLogger(__name__)

#: Seconds between two reads of a signal: a raised signal acts on every replica within it.
POLL_S = 0.5
#: The signal ``/kill hard`` raises.
KILL_HARD = "kill_hard"

_RAISE = (
    "INSERT INTO runtime_signals (name, generation, raised_at) VALUES ($1, 1, $2)"
    " ON CONFLICT (name) DO UPDATE SET generation = runtime_signals.generation + 1,"
    " raised_at = excluded.raised_at RETURNING generation"
)
_READ = "SELECT generation FROM runtime_signals WHERE name = $1"


class PgSignals:
    """Signal rows on PostgreSQL (module docstring).

    Args:
        db: runs a statement on the ledger's pool.
        clock: the one clock (``raised_at``, epoch seconds).
    """

    __slots__ = ("_clock", "_db")

    def __init__(self, db: Transactor, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    def __repr__(self) -> str:
        return "PgSignals(runtime_signals)"

    async def raise_signal(self, name: str) -> int:
        """Bump ``name``'s generation; returns the new one.

        Raises:
            budget.errors.LedgerUnavailable: the database cannot be written.
        """
        now = self._clock.now()

        async def body(conn: Any) -> int:
            return int(await conn.fetchval(_RAISE, name, now.timestamp()))

        return await self._db.tx(now, body, single=True)

    async def generation(self, name: str) -> int:
        """``name``'s generation (0 before it was ever raised).

        Raises:
            budget.errors.LedgerUnavailable: the database cannot be read.
        """

        async def body(conn: Any) -> int:
            return int(await conn.fetchval(_READ, name) or 0)

        return await self._db.tx(self._clock.now(), body, single=True)


class SignalWatcher:
    """Calls ``on_raise`` in this process when another process raised ``name``.

    Args:
        signals: the rows.
        name: the signal.
        clock: the one clock (its ``sleep`` between reads).
        on_raise: what to do (synchronous, e.g. ``streams.stop_all``).
        poll_s: seconds between reads.
    """

    def __init__(
        self,
        signals: PgSignals,
        name: str,
        clock: Clock,
        on_raise: Callable[[], object],
        *,
        poll_s: float = POLL_S,
    ) -> None:
        self._signals = signals
        self.name = name
        self._clock = clock
        self._on_raise = on_raise
        self.poll_s = poll_s
        self.seen = 0
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def __repr__(self) -> str:
        return f"SignalWatcher({self.name!r}, seen={self.seen})"

    async def raise_here(self) -> None:
        """Raise the signal from this process (which has acted on it already: its own
        raise is not acted on again).

        Raises:
            budget.errors.LedgerUnavailable: the database cannot be written.
        """
        self.seen = max(self.seen, await self._signals.raise_signal(self.name))

    async def start(self) -> None:
        """Take the current generation as seen, then poll (idempotent).

        Raises:
            budget.errors.LedgerUnavailable: the database cannot be read.
        """
        if self._task is not None:
            return
        self.seen = await self._signals.generation(self.name)
        self._task = asyncio.create_task(self._poll(), name=f"signal-{self.name}")

    async def stop(self) -> None:
        """Stop polling (idempotent)."""
        await cancel_and_wait(self._task)
        self._task = None

    async def _poll(self) -> None:
        while True:
            await self._clock.sleep(self.poll_s)
            try:
                generation = await self._signals.generation(self.name)
            except BudgetError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError from None  # stopped mid-read: end here
                if not self._failing:
                    log.warning("signal %s unreadable; retried every %s s", self.name, self.poll_s)
                self._failing = True
                continue
            self._failing = False
            if generation > self.seen:
                self.seen = generation
                log.warning("signal %s raised (generation %d): acting on it", self.name, generation)
                self._on_raise()
