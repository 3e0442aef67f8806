"""What the processes of one deployment share: the composition root's one question about
the engine, answered once (``docs/decisions/130-replicas-part.md``).

:func:`replicas_of` looks at the ledger's store and returns a :class:`Replicas`: either
:class:`LocalReplicas` — one process on a SQLite file (the instance lock keeps it alone),
whose message path rides the ledger's one writer thread and which shares nothing — or
:class:`SharedReplicas` — processes on one PostgreSQL database, which share each
provider key's circuit and paced windows, the call slots, every user's queue, the
update rate, the access lists, ``/kill hard``'s cut of the streams, the digests' and the
outbox's claims, the intake's "whose message was lost", and the fence of a process taken
for dead.

:func:`bot.app.factory.create_app` asks the part for each piece and never asks which
engine it runs on; a piece that one kind does not have is ``None`` there (what the
piece's consumer documents as "one process").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.storage.hot import HotPath
from bot.storage.pg_hot import PgHotPath
from bot.storage.repos import SharedIntake
from bot.storage.sqlite_hot import SqliteHotPath
from scheduler.claims import Claimant

if TYPE_CHECKING:
    from aiogram import Bot

    from bot.app.lifecycle import App
    from bot.chat.lanes import LaneStore
    from bot.chat.streaming.registry import StreamRegistry
    from bot.middlewares.rate import SharedRates
    from budget.kernel.clock import Clock
    from budget.ledger import Ledger
    from budget.storage.store import SharedDatabase
    from llm.keys.admission import KeyStateStore
    from llm.keys.share_counts import ShareStore
    from llm.keys.slots import CallClaimStore

__all__ = ["LocalReplicas", "Replicas", "SharedReplicas", "replicas_of"]


@dataclass(frozen=True, slots=True)
class Replicas:
    """The pieces that depend on whether processes share the database.

    Attributes:
        hot: the message path's statements on the bot's tables (:mod:`bot.storage.hot`):
            on the ledger's writer thread (SQLite: :mod:`bot.storage.sqlite_hot`) or one
            statement each on the ledger's pool (PostgreSQL: :mod:`bot.storage.pg_hot`);
            ``None``: through SQLAlchemy sessions.
        intake: who took each message in, for "lost" messages of dead processes
            (:class:`bot.storage.repos.SharedIntake`); ``None``: one process.
        claimant: the digests' claims on runs and summaries; ``None``: one process.
        outbox_claim_s: seconds an outbox row is claimed before it is sent; ``None``:
            one worker, nothing to claim.
        access_shared: other processes write the access lists too, so each reloads
            them every few seconds (:class:`bot.access.store.AccessBook`).
    """

    hot: HotPath | None = None
    intake: SharedIntake | None = None
    claimant: Claimant | None = None
    outbox_claim_s: float | None = None
    access_shared: bool = False

    def key_states(self, clock: Clock) -> KeyStateStore | None:
        """The provider keys' shared circuits and paced windows (``None``: in memory)."""
        del clock
        return None

    def call_claims(self, clock: Clock, ttl_s: float) -> CallClaimStore | None:
        """GLOBAL_MAX_INFLIGHT_CALLS over every process (``None``: this one's)."""
        del clock, ttl_s
        return None

    def free_shares(self, clock: Clock) -> ShareStore | None:
        """FREE_SHARE_MAX's counts over every process (``None``: this one's)."""
        del clock
        return None

    def lanes(self, clock: Clock) -> LaneStore | None:
        """The other processes' unfinished messages of a user (``None``: none)."""
        del clock
        return None

    def update_rates(self, clock: Clock) -> SharedRates | None:
        """A payer's update rate over every process (``None``: this one's)."""
        del clock
        return None

    def attach(self, app: App, bot: Bot, streams: StreamRegistry) -> None:
        """Tie the built app to the other processes (nothing for one process)."""
        del app, bot, streams


@dataclass(frozen=True, slots=True)
class LocalReplicas(Replicas):
    """One process on one SQLite file: nothing shared; the hot path on the ledger's
    writer (``docs/decisions/061-one-writer-per-sqlite-file.md``)."""


@dataclass(frozen=True, slots=True)
class SharedReplicas(Replicas):
    """Processes on one PostgreSQL database (``docs/postgresql.md``).

    Attributes:
        shared: the database the processes share (the ledger store's).
        dead_after_s: PROCESS_DEAD_AFTER_SECONDS.
    """

    shared: SharedDatabase | None = None
    dead_after_s: float = 60.0

    def _db(self) -> SharedDatabase:
        assert self.shared is not None  # replicas_of always sets it
        return self.shared

    def key_states(self, clock: Clock) -> KeyStateStore | None:
        from llm.keys.postgres import PgKeyStates

        return PgKeyStates(self._db(), clock)

    def call_claims(self, clock: Clock, ttl_s: float) -> CallClaimStore | None:
        from llm.keys.claims import CallClaims  # leases tied to the processes' heartbeats

        db = self._db()
        return CallClaims(db, db.process_id, clock, ttl_s=ttl_s, dead_after_s=self.dead_after_s)

    def free_shares(self, clock: Clock) -> ShareStore | None:
        from llm.keys.share_counts import PgShareCounts

        return PgShareCounts(self._db(), clock)

    def lanes(self, clock: Clock) -> LaneStore | None:
        from bot.chat.lanes import PgLanes

        db = self._db()
        return PgLanes(db, db.process_id, clock, self.dead_after_s)

    def update_rates(self, clock: Clock) -> SharedRates | None:
        from bot.storage.pg_rates import PgUpdateRates

        return PgUpdateRates(self._db(), clock)

    def attach(self, app: App, bot: Bot, streams: StreamRegistry) -> None:
        """``/kill hard`` cuts every process's streams (:mod:`bot.ops.signals`), a Stop press
        reaches the process writing that answer (:mod:`bot.ops.stop_relay`); a process
        taken for dead stops acting (:mod:`bot.session.fence`: the last session
        middleware, and the store's fenced callback)."""
        from bot.ops.signals import KILL_HARD, PgSignals, SignalWatcher
        from bot.ops.stop_relay import StopRelay
        from bot.session.fence import FencedSession

        db = self._db()
        streams.kill_watch = SignalWatcher(
            PgSignals(db.control, app.clock), KILL_HARD, app.clock, lambda: streams.stop_all("kill")
        )
        streams.stop_relay = StopRelay(db.control, app.clock, streams)
        bot.session.middleware(FencedSession(db))
        db.on_fenced.append(app.fence)


def replicas_of(ledger: Ledger, dead_after_s: float) -> Replicas:
    """The part for the ledger's store: :class:`SharedReplicas` when the store offers a
    database other processes share (with the hot path on its pool), else
    :class:`LocalReplicas` (with the SQLite writer's hot path when the store has one).

    Args:
        ledger: the ledger, not started (nothing is connected here).
        dead_after_s: PROCESS_DEAD_AFTER_SECONDS.
    """
    shared = ledger.store.shared
    if shared is None:
        writer = ledger.store.writer
        return LocalReplicas(hot=SqliteHotPath(writer) if writer is not None else None)
    process_id = shared.process_id
    return SharedReplicas(
        hot=PgHotPath(shared, ledger.clock, process_id),
        intake=SharedIntake(process_id, dead_after_s),
        claimant=Claimant(process_id, dead_after_s),
        outbox_claim_s=dead_after_s,
        access_shared=True,
        shared=shared,
        dead_after_s=dead_after_s,
    )
