"""Hypothesis stateful test of the ledger's invariants (sequential steps).

The machine keeps a model of every hold (held / settled / released / expired and
its booked µUSD) and checks the ledger against it after every step:

* for every level (user, group chat, plan, team-less global) and window (hour, day,
  month): settled + held ≤ limit (actuals never exceed
  ceilings here, and an expired hold moves its ceiling from held to settled, so
  the stronger form holds; a fortiori ≤ limit + the late settlements, which the
  ledger reports separately in ``late_musd``);
* settled equals the exact sum of what the model says is spent: the actual of each
  settled hold plus the ceiling of each expired, not yet corrected hold — so an
  expired-then-settled hold is counted once, at its actual (nothing charged twice);
* late equals the sum of the actuals of settles that arrived after expiry;
* buckets equal the sums recomputed from the hold rows (``audit``);
* Σ held returns to exactly 0 once every hold has ended.

Steps: reserve (in a private chat or one of two groups, by users on the plans ``free``
and ``pro``), settle, settle_interrupted, release, advance the clock (across the Berlin
DST night and the end of March) and sweep, crash and restart (a new process sweeps the
old one's holds), kill, unkill.

Run over both backends: a fresh SQLite file per example (a copy of the schema file made
once, fixture ``ledger_template``), and a real PostgreSQL database (fewer
examples: each step is a few network round trips; the database is emptied before
each example). On PostgreSQL a closed process has no heartbeat left, so the next
process sweeps its holds at start as on SQLite.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.policy.plans import PlanLimits
from budget.storage.base import LedgerStore
from budget.storage.postgres.rows import asyncpg_dsn
from budget.storage.postgres.store import PgStore
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import metadata
from budget.types import Level, Origin, Usage, Window
from tests.budget.ledger_helpers import BACKENDS, BASE_CONFIG, card
from tests.support.clocks import ManualClock

T = TypeVar("T")
LIMITS: dict[str, Any] = {
    "global_daily_musd": 5_000,
    "global_hourly_musd": 2_000,
    "global_monthly_musd": 9_000,
    "user_daily_musd": 1_500,
    "plans": {
        "free": PlanLimits(
            "free", user_musd={Window.DAY: 800}, total_musd={Window.DAY: 2_500, Window.MONTH: 4_000}
        ),
        "pro": PlanLimits("pro", user_musd={Window.DAY: None, Window.MONTH: 3_000}),
    },
    "default_plan": "free",
}
#: (level, scope, window) → limit µUSD; user 3 is on ``pro``, users 1 and 2 on ``free``;
#: group -100 has a day limit of its own (``/limit chat``), group -200 none.
LIMIT_OF = {
    ("global", "", "day"): 5_000,
    ("global", "", "hour"): 2_000,
    ("global", "", "month"): 9_000,
    ("user", "1", "day"): 800,
    ("user", "2", "day"): 800,
    ("user", "3", "month"): 3_000,
    ("plan", "free", "day"): 2_500,
    ("plan", "free", "month"): 4_000,
    ("chat", "-100", "day"): 1_200,
}


@dataclass
class ModelHold:
    """What the ledger should know about one hold."""

    ceiling: int
    expires_at: datetime
    state: str = "held"
    actual: int = 0  # µUSD counted as spent (settled: actual; expired: ceiling)
    late: bool = False


class LedgerMachine(RuleBasedStateMachine):
    """Random reserve/settle/release/expire/crash/kill/unkill/advance-clock sequences."""

    holds = Bundle("holds")
    #: A PostgreSQL database with the ledger schema, or ``None`` for a SQLite file.
    pg_url: str | None = None
    #: The SQLite file each example copies (fixture ``ledger_template``: the schema, once).
    template: Path | None = None

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory()
        self.path = Path(self.tmp.name) / "l.db"
        if self.pg_url is None:
            assert self.template is not None
            shutil.copyfile(self.template, self.path)
        else:
            self.run(self.empty_pg(self.pg_url))
        self.clock = ManualClock(datetime(2026, 3, 28, 21, tzinfo=UTC))
        self.cfg = replace(BASE_CONFIG, tz="Europe/Berlin", auto_kill_fraction=Decimal(0), **LIMITS)
        self.processes = 0
        self.ledger, _ = self.new_process()
        self.run(self.ledger.set_plan(3, "pro"))
        self.run(self.ledger.set_limit(Level.CHAT, "-100", Window.DAY, 1_200))
        self.model: dict[str, ModelHold] = {}

    @staticmethod
    async def empty_pg(url: str) -> None:
        """Delete every ledger row (the schema stays). ``DELETE``, children first, not
        ``TRUNCATE``: an example leaves a few dozen rows, and a ``TRUNCATE`` of every
        table (new files for each) took about 0.14 s on the loopback server, these
        ``DELETE`` statements (one round trip) about 0.025 s."""
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            tables = reversed(metadata.sorted_tables)
            await conn.execute("; ".join(f"DELETE FROM {t.name}" for t in tables))  # noqa: S608 - the schema's names
        finally:
            await conn.close()

    def new_process(self) -> tuple[Ledger, int]:
        """Start a ledger as a new process on the same database; returns it and how
        many holds of older processes its start swept."""
        self.processes += 1
        name = f"p{self.processes}"
        store: LedgerStore
        if self.pg_url is None:
            store = SqliteStore(self.path, self.cfg, name)
        else:
            store = PgStore(self.pg_url, self.cfg, name, self.clock, run_heartbeat=False)
        ledger = Ledger(store, self.cfg, card(), self.clock)
        return ledger, self.run(ledger.start(run_sweeper=False))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one ledger call to completion on the machine's loop."""
        return self.loop.run_until_complete(coro)

    @rule(
        target=holds,
        user=st.integers(1, 3),
        ceiling=st.integers(2, 900),
        deferred=st.booleans(),
        chat=st.sampled_from([None, -100, -200]),
    )
    def reserve(self, user: int, ceiling: int, deferred: bool, chat: int | None) -> str:
        """Try a hold (its operation admitted at once, or with the hold: ``deferred``),
        in a private chat or a group (``chat``); a refusal holds nothing (checked by the
        invariants)."""

        async def go() -> str:
            try:
                op = await self.ledger.begin_operation(
                    user,
                    Origin.CHAT,
                    max_musd=10**9,
                    max_requests=10**6,
                    deferred=deferred,
                    chat_id=chat,
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
            expires = self.clock.now() + timedelta(seconds=self.cfg.hold_ttl_s)
            self.model[h.hold_id] = ModelHold(h.ceiling_musd, expires)
            return h.hold_id

        return self.run(go())

    def expect_settle(self, hold_id: str, actual: int) -> int:
        """Apply a settle of ``actual`` to the model; returns what the ledger must return."""
        m = self.model[hold_id]
        if m.state in ("held", "expired"):
            m.late = m.state == "expired"
            m.state, m.actual = "settled", actual
        return m.actual

    @rule(hold_id=holds, fraction=st.floats(0, 1))
    def settle(self, hold_id: str, fraction: float) -> None:
        """Settle at most the ceiling; after expiry it corrects the booking; a repeat
        settle (or one after release) changes nothing."""
        if not hold_id:
            return
        out = int((self.model[hold_id].ceiling - 1) * fraction)
        got = self.run(self.ledger.settle(hold_id, Usage(1, 0, out)))
        assert got == self.expect_settle(hold_id, 1 + out)

    @rule(hold_id=holds, received=st.one_of(st.none(), st.integers(0, 2_000)))
    def settle_interrupted(self, hold_id: str, received: int | None) -> None:
        """The interrupted-call rule: input + received output, else the ceiling."""
        if not hold_id:
            return
        m = self.model[hold_id]
        out = m.ceiling - 1 if received is None else received
        if 1 + out > m.ceiling:  # keep actual ≤ ceiling for the ≤-limit invariant
            return
        got = self.run(self.ledger.settle_interrupted(hold_id, None, received))
        assert got == self.expect_settle(hold_id, 1 + out)

    @rule(hold_id=holds)
    def release(self, hold_id: str) -> None:
        """Release: returns a held hold, takes back an expired hold's booked ceiling,
        and is a no-op after a settle or release."""
        if not hold_id:
            return
        self.run(self.ledger.release(hold_id))
        m = self.model[hold_id]
        if m.state in ("held", "expired"):
            m.late = m.state == "expired"
            m.state, m.actual = "released", 0

    @rule(seconds=st.sampled_from([1, 59, 299, 600, 3600, 7200, 86_400]))
    def advance_and_sweep(self, seconds: int) -> None:
        """Move time (across the Berlin DST night and the month's end) and expire
        overdue holds: each is booked at its ceiling."""
        self.clock.advance(seconds)
        due = [
            m for m in self.model.values() if m.state == "held" and m.expires_at <= self.clock.now()
        ]
        assert self.run(self.ledger.sweep()) == len(due)
        for m in due:
            m.state, m.actual = "expired", m.ceiling

    @rule()
    def crash_and_restart(self) -> None:
        """The process dies with holds outstanding; the next one books them at start."""
        self.run(self.ledger.close())  # no settle/release: what a kill -9 leaves
        held = [m for m in self.model.values() if m.state == "held"]
        self.clock.advance(1)
        self.ledger, swept = self.new_process()
        assert swept == len(held)
        assert self.run(self.ledger.status()).outstanding_holds == 0
        for m in held:
            m.state, m.actual = "expired", m.ceiling

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
        """Buckets equal the model and the hold rows; settled + held ≤ limit."""
        audit = self.run(self.ledger.store.audit())
        assert audit["mismatches"] == []
        rows = audit["buckets"]
        for level, scope, win, _, settled, held, late in audit["scoped"]:
            limit = LIMIT_OF.get((level, scope, win))
            if limit is not None:
                assert settled + held <= limit, (level, scope, win)
                assert settled + held <= limit + late  # the (weaker) form
        glob = [r for r in rows if r[0] == "global" and r[1] == "day"]
        months = [r for r in rows if r[0] == "global" and r[1] == "month"]
        assert sum(r[2] for r in months) == sum(r[2] for r in glob)  # each day in one month
        spent = sum(m.actual for m in self.model.values() if m.state in ("settled", "expired"))
        late = sum(m.actual for m in self.model.values() if m.state == "settled" and m.late)
        held = sum(m.ceiling for m in self.model.values() if m.state == "held")
        assert sum(r[2] for r in glob) == spent
        assert sum(r[3] for r in glob) == held
        assert sum(r[4] for r in glob) == late

    def teardown(self) -> None:
        """Settle/release everything: held returns to exactly 0 and settled to the
        model's sum; then close."""
        for hold_id in list(self.model):
            self.release(hold_id)
        audit = self.run(self.ledger.store.audit())
        assert (audit["mismatches"], audit["held_total"]) == ([], 0)
        self.books_balance()
        self.run(self.ledger.close())
        self.loop.close()
        self.tmp.cleanup()


#: Examples per backend: PostgreSQL steps cost network round trips (suite time).
#: Kept as they are (checked for suite time): the failures this machine is for need a
#: long chain in one example — holds, a clock move past their TTL or a crash, then a
#: late settle or release, across the DST night or the month's end — so 30 steps is
#: not more than a chain needs, and 60 SQLite examples are the search for the rare
#: orders (PostgreSQL runs the same rules at 15, the store's queries being the point
#: there). Setup, not search, was the waste: see ``empty_pg``.
#: The search runs in ``PARTS`` tests side by side under xdist (one run was among the
#: suite's longest tests): each part draws its own random examples, and each begins with
#: Hypothesis's same simplest example, so a part runs one more than its share: SQLite
#: 3 × 21 = 63 (61 distinct, was 60), PostgreSQL 2 × 9 = 18 (17 distinct, was 15).
EXAMPLES = {"sqlite": 60, "postgres": 15}
PARTS = {"sqlite": 3, "postgres": 2}


@pytest.mark.parametrize(("backend", "part"), [(b, p) for b in BACKENDS for p in range(PARTS[b])])
def test_ledger_machine(backend: str, part: int, request: pytest.FixtureRequest) -> None:
    """The invariants hold over random step sequences, on every backend (``part``: one
    of the backend's :data:`PARTS` shares of the :data:`EXAMPLES`)."""

    url: str | None = None
    if backend == "postgres":
        url = request.getfixturevalue("pg_ledger_url")

    class Machine(LedgerMachine):
        pg_url = url
        template = request.getfixturevalue("ledger_template") if url is None else None

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=-(-EXAMPLES[backend] // PARTS[backend]) + 1,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
