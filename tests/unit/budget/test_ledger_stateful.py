"""Hypothesis stateful test of the ledger's invariants (sequential steps).

Invariants, for every level and window: settled + held ≤ limit + late settlements
(actuals never exceed ceilings here); buckets equal the exact sums recomputed from
the holds (nothing charged twice, settled = Σ settlements); Σ held returns to 0
once every hold has ended.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Coroutine
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from conftest import BASE_CONFIG, card
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from budget.clock import ManualClock
from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.models import create_schema
from budget.sqlite_store import SqliteStore
from budget.types import Origin, Usage

T = TypeVar("T")
LIMITS: dict[str, Any] = {
    "global_daily_musd": 5_000,
    "global_hourly_musd": 2_000,
    "user_daily_musd": 1_500,
}


class LedgerMachine(RuleBasedStateMachine):
    """Random reserve/settle/release/expire/kill/unkill/advance-clock sequences."""

    holds = Bundle("holds")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory()
        path = Path(self.tmp.name) / "l.db"
        create_schema(path)
        self.clock = ManualClock(datetime(2026, 3, 28, 21, tzinfo=UTC))
        cfg = replace(BASE_CONFIG, tz="Europe/Berlin", auto_kill_fraction=Decimal(0), **LIMITS)
        self.ledger = Ledger(SqliteStore(path, cfg, "p"), cfg, card(), self.clock)
        self.run(self.ledger.start(run_sweeper=False))
        self.settled_total = 0
        self.ceilings: dict[str, int] = {}

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one ledger call to completion on the machine's loop."""
        return self.loop.run_until_complete(coro)

    @rule(target=holds, user=st.integers(1, 3), ceiling=st.integers(2, 900))
    def reserve(self, user: int, ceiling: int) -> str:
        """Try a hold; a refusal holds nothing (checked by the invariants)."""

        async def go() -> str:
            try:
                op = await self.ledger.begin_operation(
                    user, Origin.CHAT, max_musd=10**9, max_requests=10**6
                )
            except HoldRefused:
                return ""
            req = await self.ledger.begin_request(op, str(self.clock.monotonic()) + str(ceiling))
            try:
                h = await self.ledger.reserve(
                    op, req, provider="test", model="m", input_tokens=1, max_tokens=ceiling - 1
                )
            except HoldRefused:
                return ""
            finally:
                await self.ledger.end_operation(op)
            self.ceilings[h.hold_id] = h.ceiling_musd
            return h.hold_id

        return self.run(go())

    @rule(hold_id=holds, fraction=st.floats(0, 1))
    def settle(self, hold_id: str, fraction: float) -> None:
        """Settle at most the ceiling; a repeat settle changes nothing."""
        if not hold_id:
            return
        ceiling = self.ceilings[hold_id]
        out = int((ceiling - 1) * fraction)
        actual = self.run(self.ledger.settle(hold_id, Usage(1, 0, out)))
        self.settled_once(hold_id, actual)

    def settled_once(self, hold_id: str, actual: int) -> None:
        """Track Σ settlements, counting each hold once."""
        if self.ceilings.get(hold_id, -1) >= 0 and hold_id not in getattr(self, "_done", set()):
            self._done = getattr(self, "_done", set()) | {hold_id}
            self.settled_total += actual

    @rule(hold_id=consumes(holds))
    def release(self, hold_id: str) -> None:
        """Release (no-op when already ended)."""
        if hold_id:
            self.run(self.ledger.release(hold_id))
            self._done = getattr(self, "_done", set()) | {hold_id}

    @rule(seconds=st.sampled_from([1, 59, 600, 3600, 7200]))
    def advance_and_sweep(self, seconds: int) -> None:
        """Move time (across the Berlin DST night) and expire overdue holds."""
        self.clock.advance(seconds)
        self.run(self.ledger.sweep())

    @rule()
    def kill(self) -> None:
        """Trip the switch; granted holds still settle."""
        self.run(self.ledger.kill("test", by=1))

    @rule()
    def unkill(self) -> None:
        """Reset the switch."""
        self.run(self.ledger.unkill(by=1))

    @invariant()
    def books_balance(self) -> None:
        """Buckets equal the sums recomputed from holds; settled ≤ limit + late."""
        audit = self.run(self.ledger.store.call(self.ledger.store.audit))
        assert audit["mismatches"] == []
        conn_rows = self.run(self.ledger.store.call(self._bucket_rows))
        for level, win, settled, held, late in conn_rows:
            limit = {
                ("global", "day"): 5_000,
                ("global", "hour"): 2_000,
                ("personal", "day"): 1_500,
            }.get((level, win))
            if limit is not None:
                assert settled + held <= limit + late
        total = sum(r[2] for r in conn_rows if r[0] == "global" and r[1] == "day")
        assert total == self.settled_total

    def _bucket_rows(self) -> list[tuple[str, str, int, int, int]]:
        conn = self.ledger.store._conn
        assert conn is not None
        return conn.execute(
            "SELECT level, win, settled_musd, held_musd, late_musd FROM budget_buckets"
        ).fetchall()

    def teardown(self) -> None:
        """Settle/release everything: held returns to exactly 0; then close."""
        for hold_id in list(self.ceilings):
            self.run(self.ledger.release(hold_id))
        audit = self.run(self.ledger.store.call(self.ledger.store.audit))
        assert audit["held_total"] == 0
        self.run(self.ledger.close())
        self.loop.close()
        self.tmp.cleanup()


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
