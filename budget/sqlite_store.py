"""SQLite storage of the ledger: the ONLY module with SQLite-specific SQL and pragmas.

Design (see issue 3's benchmark notes): one stdlib ``sqlite3`` connection owned by
one dedicated thread — a single writer. Every ledger step (admit an operation,
reserve, settle, release, sweep, kill …) is ONE ``BEGIN IMMEDIATE`` transaction
run on that thread: the write lock is taken before the first read, so the check
("does the ceiling fit on every level?") and the write happen atomically, also
against other processes using the same file. The asyncio event loop only awaits a
future, so it is never blocked by the database.

Durability: WAL journal. ``synchronous=FULL`` (default) fsyncs the WAL on every
commit, so a granted hold or a settlement survives a process crash *and* a power
cut before the caller is told. ``synchronous=NORMAL`` writes the WAL before
``COMMIT`` returns (safe against a process crash, which is what the ledger
promises) but fsyncs only at checkpoints (an OS crash may lose the last commits).

A PostgreSQL store for several bot replicas implements the same methods with
``SELECT … FOR UPDATE`` on the bucket rows; ``tests/unit/budget/test_ledger_contract.py``
is parametrized over stores.

Every public method here runs on the writer thread (called by
:class:`budget.ledger.Ledger` through :meth:`SqliteStore.call`). Times are epoch
seconds from the ledger's clock; money is integer µUSD.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import sqlite3
import statistics
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from budget.config import LedgerConfig
from budget.errors import BudgetError, HoldRefused, LedgerUnavailable, UnknownHold
from budget.policy import (
    Bucket,
    HoldState,
    Scope,
    auto_kill_reason,
    auto_kill_threshold_musd,
    check_hold,
    release_transition,
    scopes_for,
    settle_transition,
    windows_for,
)
from budget.protocol import HoldTicket, OperationTicket
from budget.status import (
    BucketStatus,
    EstimateStats,
    KillState,
    LedgerStatus,
    ProviderSpend,
    TeamStatus,
    UserStatus,
)
from budget.types import Level, Origin, Refusal, RefusalReason, Usage, Window
from budget.windows import WindowKeys, hour_bounds, window_keys

__all__ = ["BUSY_TIMEOUT_S", "SettleOutcome", "SqliteStore", "SweepOutcome", "UnknownOperation"]

T = TypeVar("T")

#: Seconds a connection waits for another process's write lock.
BUSY_TIMEOUT_S = 15.0

#: Prices an actual cost: (provider, model, usage, granted_at) -> (actual, list actual).
Pricer = Callable[[str, str, Usage, datetime], tuple[int, int | None]]


class UnknownOperation(BudgetError):
    """An operation id the ledger has no open record of (ended, expired or never begun)."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"unknown or ended operation {operation_id!r}")
        self.operation_id = operation_id


class _Refused(Exception):
    """Internal: commit what was written (the refusal event), then raise HoldRefused."""

    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal


def _ts(at: datetime) -> float:
    return at.timestamp()


def _dt(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


class SettleOutcome:
    """Result of a settle: the actual cost booked and whether the kill switch tripped."""

    __slots__ = ("actual_musd", "auto_killed", "booked")

    def __init__(self, actual_musd: int, booked: bool, auto_killed: KillState | None) -> None:
        self.actual_musd = actual_musd
        self.booked = booked
        self.auto_killed = auto_killed


class SweepOutcome:
    """Result of a sweep: holds expired (each booked at its ceiling, estimated), the
    µUSD booked, and whether that booking tripped the kill switch."""

    __slots__ = ("auto_killed", "booked_musd", "expired")

    def __init__(self, expired: int, booked_musd: int, auto_killed: KillState | None) -> None:
        self.expired = expired
        self.booked_musd = booked_musd
        self.auto_killed = auto_killed


class SqliteStore:
    """The single-writer SQLite ledger store.

    Args:
        path: the database file (schema created by Alembic, or
            :func:`budget.models.create_schema` in tests).
        config: limits and knobs.
        process_id: identifies this process's holds (swept by the next start).
    """

    name = "sqlite"

    def __init__(self, path: str | Path, config: LedgerConfig, process_id: str) -> None:
        self.path = Path(path)
        self.config = config
        self.process_id = process_id
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._thread_id: int | None = None
        self._identity: tuple[int, int] | None = None
        #: set once the path stops naming the open file (deleted or replaced):
        #: every later write fails closed with LedgerUnavailable
        self.lost: str = ""

    # -- thread plumbing --------------------------------------------------------
    def open(self) -> None:
        """Start the writer thread and open its connection (idempotent)."""
        if self._executor is not None:
            return
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ledger-writer"
        )
        self._executor.submit(self._connect).result()

    def _connect(self) -> None:
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=True
        )
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.config.synchronous}")
        self._conn = conn
        self._thread_id = threading.get_ident()
        st = os.stat(self.path)
        self._identity = (st.st_dev, st.st_ino)

    def check_file(self) -> None:
        """Fail closed when the path no longer names the open database file.

        A file deleted (or replaced) under a running process keeps working on the
        unlinked inode, and everything booked there is gone at the next start. So
        before each hold batch and in every sweep the path is stat-ed and compared
        with the (device, inode) opened.

        Raises:
            LedgerUnavailable: the file is gone or replaced (sticky: :attr:`lost`).
        """
        if self.lost:
            raise LedgerUnavailable()
        try:
            st = os.stat(self.path)
        except OSError:
            self.lost = "deleted"
            raise LedgerUnavailable() from None
        if self._identity is not None and (st.st_dev, st.st_ino) != self._identity:
            self.lost = "replaced"
            raise LedgerUnavailable()

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Close the connection and stop the writer thread (idempotent)."""
        if self._executor is None:
            return
        self._executor.submit(self._disconnect).result()
        self._executor.shutdown(wait=True)
        self._executor = None

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the writer thread and await its result.

        Raises:
            LedgerUnavailable: the store is closed, or any storage failure (SQLite
                error, OS error such as a full disk) — never a raw ``sqlite3`` error.
        """
        if self._executor is None:
            raise LedgerUnavailable()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except RuntimeError as exc:  # executor shut down under us
            raise LedgerUnavailable() from exc
        except (sqlite3.Error, OSError) as exc:
            raise LedgerUnavailable() from exc

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        """Roll back if a transaction is still open (SQLite may already have rolled
        it back itself, e.g. on SQLITE_FULL: "cannot rollback - no transaction is
        active" must not replace the real failure)."""
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def _txn(self, body: Callable[[sqlite3.Cursor], T]) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction; fail closed on any DB error."""
        conn = self._conn
        if conn is None:
            raise LedgerUnavailable()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise LedgerUnavailable() from exc
        cur = conn.cursor()
        try:
            result = body(cur)
        except _Refused as refused:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise LedgerUnavailable() from exc
            raise HoldRefused(refused.refusal) from None
        except (sqlite3.Error, OSError) as exc:
            self._rollback(conn)
            raise LedgerUnavailable() from exc
        except BaseException:
            self._rollback(conn)
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise LedgerUnavailable() from exc
        return result

    def _read(self, body: Callable[[sqlite3.Cursor], T]) -> T:
        """Run a read-only ``body`` in one deferred transaction (a consistent snapshot)."""
        conn = self._conn
        if conn is None:
            raise LedgerUnavailable()
        try:
            conn.execute("BEGIN")
            try:
                return body(conn.cursor())
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise LedgerUnavailable() from exc

    # -- shared helpers (inside a transaction) ------------------------------------
    def _event(
        self,
        cur: sqlite3.Cursor,
        now: datetime,
        kind: str,
        *,
        reason: str | None = None,
        level: str | None = None,
        window: str | None = None,
        scope: str | None = None,
        user_id: int | None = None,
        hold_id: str | None = None,
        detail: str | None = None,
    ) -> None:
        day = window_keys(now, self.config.tz).day_key
        cur.execute(
            "INSERT INTO budget_events (at, day_key, kind, reason, level, win, scope, user_id,"
            " hold_id, detail) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (_ts(now), day, kind, reason, level, window, scope, user_id, hold_id, detail),
        )

    def _refuse(
        self, cur: sqlite3.Cursor, now: datetime, refusal: Refusal, user_id: int | None
    ) -> _Refused:
        self._event(
            cur,
            now,
            "refusal",
            reason=refusal.reason.value,
            level=None if refusal.level is None else refusal.level.value,
            window=None if refusal.window is None else refusal.window.value,
            scope=refusal.scope,
            user_id=user_id,
        )
        return _Refused(refusal)

    def _kill_of(
        self, cur: sqlite3.Cursor, user_id: int | None, team: str | None
    ) -> KillState | None:
        """The tripped switch that applies (global first), or ``None``."""
        cur.execute(
            "SELECT scope_kind, scope, reason, automatic, by_user, changed_at FROM budget_kill"
            " WHERE killed = 1 AND ((scope_kind = 'global')"
            " OR (scope_kind = 'user' AND scope = ?) OR (scope_kind = 'team' AND scope = ?))",
            ("" if user_id is None else str(user_id), team or ""),
        )
        rows = cur.fetchall()
        if not rows:
            return None
        order = {"global": 0, "team": 1, "user": 2}
        kind, scope, reason, auto, by, at = min(rows, key=lambda r: order.get(r[0], 9))
        return KillState(True, reason, bool(auto), by, _dt(at), kind, scope)

    def _kill_refusal(self, ks: KillState) -> Refusal:
        level = {"global": Level.GLOBAL, "team": Level.TEAM, "user": Level.PERSONAL}[ks.scope_kind]
        return Refusal(reason=RefusalReason.KILL, level=level, scope=ks.scope, note=ks.reason)

    def _team_of(self, cur: sqlite3.Cursor, user_id: int) -> str | None:
        cur.execute("SELECT team FROM budget_team_members WHERE user_id = ?", (user_id,))
        row = cur.fetchone()
        return None if row is None else str(row[0])

    def _overrides(self, cur: sqlite3.Cursor) -> dict[tuple[str, str, str], int | None]:
        cur.execute("SELECT level, scope, win, limit_musd FROM budget_limits")
        return {(r[0], r[1], r[2]): r[3] for r in cur.fetchall()}

    def _limit(
        self,
        overrides: dict[tuple[str, str, str], int | None],
        level: Level,
        scope: str,
        window: Window,
    ) -> int | None:
        key = (level.value, scope, window.value)
        if key in overrides:
            return overrides[key]
        # a team-wide default override ("team", "*") applies to every team without its own
        if level in (Level.TEAM, Level.PERSONAL) and (level.value, "*", window.value) in overrides:
            return overrides[(level.value, "*", window.value)]
        return self.config.default_limit(level, scope, window)

    def _provider_caps(self, overrides: dict[tuple[str, str, str], int | None]) -> dict[str, int]:
        caps = dict(self.config.provider_daily_caps_musd)
        for (level, scope, win), value in overrides.items():
            if level == Level.PROVIDER.value and win == Window.DAY.value:
                if value is None:
                    caps.pop(scope, None)
                else:
                    caps[scope] = value
        return caps

    def _buckets(
        self,
        cur: sqlite3.Cursor,
        scopes: Sequence[Scope],
        keys: WindowKeys,
        overrides: dict[tuple[str, str, str], int | None],
    ) -> list[Bucket]:
        wanted = [(lvl, sc, w, keys.key(w)) for lvl, sc in scopes for w in windows_for(lvl)]
        rows: dict[tuple[str, str, str, str], tuple[int, int, int]] = {}
        for lvl, sc, w, k in wanted:
            cur.execute(
                "SELECT settled_musd, held_musd, late_musd FROM budget_buckets"
                " WHERE level = ? AND scope = ? AND win = ? AND wkey = ?",
                (lvl.value, sc, w.value, k),
            )
            row = cur.fetchone()
            if row is not None:
                rows[(lvl.value, sc, w.value, k)] = (row[0], row[1], row[2])
        out = []
        for lvl, sc, w, k in wanted:
            settled, held, late = rows.get((lvl.value, sc, w.value, k), (0, 0, 0))
            out.append(
                Bucket(
                    lvl,
                    sc,
                    w,
                    k,
                    self._limit(overrides, lvl, sc, w),
                    settled,
                    held,
                    late,
                    keys.resets_at(w),
                )
            )
        return out

    @staticmethod
    def _with_margins(cur: sqlite3.Cursor, buckets: list[Bucket]) -> list[Bucket]:
        """``buckets`` with the margins of outstanding holds counted as held: each
        hold granted at its estimated ceiling keeps its provable bound's excess
        (``margin_musd``) out of every bucket it touches until it ends."""
        cur.execute(
            "SELECT scopes, hour_key, day_key, margin_musd FROM budget_holds"
            " WHERE state = 'held' AND margin_musd > 0"
        )
        extra: dict[tuple[str, str, str, str], int] = {}
        for scopes_json, hour_key, day_key, margin in cur.fetchall():
            for lvl, sc in json.loads(scopes_json):
                for w in windows_for(Level(lvl)):
                    k = hour_key if w is Window.HOUR else day_key
                    key = (lvl, sc, w.value, k)
                    extra[key] = extra.get(key, 0) + int(margin)
        if not extra:
            return buckets
        return [
            dataclasses.replace(
                b,
                held_musd=b.held_musd
                + extra.get((b.level.value, b.scope, b.window.value, b.key), 0),
            )
            for b in buckets
        ]

    @staticmethod
    def _book(
        cur: sqlite3.Cursor,
        scopes: Sequence[Scope],
        hour_key: str,
        day_key: str,
        *,
        held: int = 0,
        settled: int = 0,
        late: int = 0,
    ) -> None:
        if held == 0 and settled == 0 and late == 0:
            return
        params = []
        for lvl, sc in scopes:
            for w in windows_for(lvl):
                k = hour_key if w is Window.HOUR else day_key
                params.append((lvl.value, sc, w.value, k, settled, held, late))
        cur.executemany(
            "INSERT INTO budget_buckets (level, scope, win, wkey, settled_musd, held_musd,"
            " late_musd) VALUES (?,?,?,?,?,?,?) ON CONFLICT (level, scope, win, wkey) DO UPDATE"
            " SET settled_musd = settled_musd + excluded.settled_musd,"
            " held_musd = held_musd + excluded.held_musd,"
            " late_musd = late_musd + excluded.late_musd",
            params,
        )

    def _open_op(self, cur: sqlite3.Cursor, operation_id: str, now: datetime) -> tuple[Any, ...]:
        cur.execute(
            "SELECT user_id, origin, team, max_musd, max_requests, requests, committed_musd,"
            " expires_at FROM budget_operations WHERE operation_id = ? AND ended_at IS NULL",
            (operation_id,),
        )
        row = cur.fetchone()
        if row is None:
            raise UnknownOperation(operation_id)
        return tuple(row)

    # -- operations ------------------------------------------------------------
    def begin_operation(
        self,
        now: datetime,
        user_id: int,
        origin: Origin,
        max_musd: int,
        max_requests: int,
    ) -> OperationTicket:
        """Admit an operation (kill, in-flight, rate) and take an in-flight slot."""
        cfg = self.config

        def body(cur: sqlite3.Cursor) -> OperationTicket:
            t = _ts(now)
            team = self._team_of(cur, user_id)
            ks = self._kill_of(cur, user_id, team)
            if ks is not None:
                raise self._refuse(cur, now, self._kill_refusal(ks), user_id)
            cur.execute(
                "SELECT COUNT(*) FROM budget_operations WHERE user_id = ? AND ended_at IS NULL"
                " AND expires_at > ?",
                (user_id, t),
            )
            if cur.fetchone()[0] >= cfg.user_max_inflight:
                raise self._refuse(cur, now, Refusal(RefusalReason.INFLIGHT), user_id)
            cur.execute(
                "SELECT COUNT(*), MIN(started_at) FROM budget_operations WHERE user_id = ?"
                " AND started_at > ?",
                (user_id, t - 60.0),
            )
            count, oldest = cur.fetchone()
            if count >= cfg.user_max_per_minute:
                refusal = Refusal(
                    RefusalReason.RATE,
                    window=Window.MINUTE,
                    resets_at=_dt(oldest + 60.0),
                )
                raise self._refuse(cur, now, refusal, user_id)
            op_id = uuid.uuid4().hex
            cur.execute(
                "INSERT INTO budget_operations (operation_id, user_id, origin, team, started_at,"
                " expires_at, ended_at, max_musd, max_requests, requests, committed_musd,"
                " day_key, process_id) VALUES (?,?,?,?,?,?,NULL,?,?,0,0,?,?)",
                (
                    op_id,
                    user_id,
                    origin.value,
                    team,
                    t,
                    t + cfg.hold_ttl_s,
                    max_musd,
                    max_requests,
                    window_keys(now, cfg.tz).day_key,
                    self.process_id,
                ),
            )
            return OperationTicket(op_id, user_id, origin, team)

        return self._txn(body)

    def end_operation(self, now: datetime, operation_id: str) -> None:
        """Free the operation's slot (idempotent)."""

        def body(cur: sqlite3.Cursor) -> None:
            cur.execute(
                "UPDATE budget_operations SET ended_at = ? WHERE operation_id = ?"
                " AND ended_at IS NULL",
                (_ts(now), operation_id),
            )

        self._txn(body)

    def operation_booked_musd(self, operation_id: str) -> int:
        """``committed_musd`` of an operation (ended or not): settled actuals plus the
        ceilings of holds held or booked at expiry (releases take theirs back out)."""

        def body(cur: sqlite3.Cursor) -> int:
            cur.execute(
                "SELECT committed_musd FROM budget_operations WHERE operation_id = ?",
                (operation_id,),
            )
            row = cur.fetchone()
            if row is None:
                raise UnknownOperation(operation_id)
            return int(row[0] or 0)

        return self._read(body)

    def begin_request(self, now: datetime, operation_id: str, fingerprint: str) -> str:
        """Count a request in the operation; refuse a repeat fingerprint or too many."""

        def body(cur: sqlite3.Cursor) -> str:
            user_id, _, _, _, max_requests, n, _, _ = self._open_op(cur, operation_id, now)
            cur.execute(
                "SELECT 1 FROM budget_requests WHERE operation_id = ? AND fingerprint = ?",
                (operation_id, fingerprint),
            )
            if cur.fetchone() is not None:
                raise self._refuse(cur, now, Refusal(RefusalReason.LOOP), user_id)
            if n >= max_requests:
                raise self._refuse(
                    cur, now, Refusal(RefusalReason.OPERATION_CAP, note="requests"), user_id
                )
            req_id = uuid.uuid4().hex
            cur.execute(
                "INSERT INTO budget_requests (request_id, operation_id, fingerprint, created_at,"
                " day_key) VALUES (?,?,?,?,?)",
                (
                    req_id,
                    operation_id,
                    fingerprint,
                    _ts(now),
                    window_keys(now, self.config.tz).day_key,
                ),
            )
            cur.execute(
                "UPDATE budget_operations SET requests = requests + 1 WHERE operation_id = ?",
                (operation_id,),
            )
            return req_id

        return self._txn(body)

    # -- holds -------------------------------------------------------------------
    def reserve(
        self,
        now: datetime,
        operation_id: str,
        request_id: str,
        provider: str,
        model: str,
        input_tokens: int,
        max_tokens: int,
        ceiling_musd: int,
        list_ceiling_musd: int | None,
        price_version: str,
        margin_musd: int = 0,
    ) -> HoldTicket:
        """Grant a hold on every level/window at once, or refuse with nothing held.

        The hold fits when ``ceiling + margin`` (its provable bound) fits every
        bucket after the margins of the other outstanding holds; only ``ceiling``
        is held (and booked at expiry), ``margin`` is kept out while it is held.
        """
        cfg = self.config
        self.check_file()

        def body(cur: sqlite3.Cursor) -> HoldTicket:
            t = _ts(now)
            user_id, origin, team, max_musd, _, _, committed, op_exp = self._open_op(
                cur, operation_id, now
            )
            ks = self._kill_of(cur, user_id, team)
            if ks is not None:
                raise self._refuse(cur, now, self._kill_refusal(ks), user_id)
            if committed + ceiling_musd > max_musd:
                raise self._refuse(
                    cur, now, Refusal(RefusalReason.OPERATION_CAP, note="cost"), user_id
                )
            overrides = self._overrides(cur)
            scopes = scopes_for(user_id, team, provider, self._provider_caps(overrides))
            keys = window_keys(now, cfg.tz)
            if ceiling_musd + margin_musd > 0:
                buckets = self._with_margins(cur, self._buckets(cur, scopes, keys, overrides))
                refusal = check_hold(buckets, ceiling_musd + margin_musd)
                if refusal is not None:
                    raise self._refuse(cur, now, refusal, user_id)
            hold_id = uuid.uuid4().hex
            expires = t + cfg.hold_ttl_s
            self._book(cur, scopes, keys.hour_key, keys.day_key, held=ceiling_musd)
            cur.execute(
                "INSERT INTO budget_holds (hold_id, operation_id, request_id, user_id, team,"
                " origin, provider, model, input_tokens, max_tokens, ceiling_musd,"
                " list_ceiling_musd, state, granted_at, expires_at, tz, hour_key, day_key,"
                " scopes, process_id, estimated, late, price_version, margin_musd)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,'held',?,?,?,?,?,?,?,0,0,?,?)",
                (
                    hold_id,
                    operation_id,
                    request_id,
                    user_id,
                    team,
                    origin,
                    provider,
                    model,
                    input_tokens,
                    max_tokens,
                    ceiling_musd,
                    list_ceiling_musd,
                    t,
                    expires,
                    cfg.tz,
                    keys.hour_key,
                    keys.day_key,
                    json.dumps([[lvl.value, sc] for lvl, sc in scopes]),
                    self.process_id,
                    price_version,
                    margin_musd,
                ),
            )
            cur.execute(
                "UPDATE budget_operations SET committed_musd = committed_musd + ?,"
                " expires_at = ? WHERE operation_id = ?",
                (ceiling_musd, max(op_exp, expires), operation_id),
            )
            return HoldTicket(hold_id, provider, model, ceiling_musd, list_ceiling_musd, now)

        return self._txn(body)

    def free_musd(self, now: datetime, operation_id: str, provider: str) -> int | None:
        """Smallest free amount over the levels a hold at ``provider`` would touch."""

        def body(cur: sqlite3.Cursor) -> int | None:
            user_id, _, team, max_musd, _, _, committed, _ = self._open_op(cur, operation_id, now)
            overrides = self._overrides(cur)
            scopes = scopes_for(user_id, team, provider, self._provider_caps(overrides))
            buckets = self._buckets(cur, scopes, window_keys(now, self.config.tz), overrides)
            frees = [
                b.free_musd for b in self._with_margins(cur, buckets) if b.free_musd is not None
            ]
            frees.append(max_musd - committed)
            return max(0, min(frees))

        return self._read(body)

    def _hold_row(self, cur: sqlite3.Cursor, hold_id: str) -> tuple[Any, ...]:
        cur.execute(
            "SELECT state, operation_id, user_id, provider, model, input_tokens, max_tokens,"
            " ceiling_musd, granted_at, hour_key, day_key, scopes, actual_musd FROM budget_holds"
            " WHERE hold_id = ?",
            (hold_id,),
        )
        row = cur.fetchone()
        if row is None:
            raise UnknownHold(hold_id)
        return tuple(row)

    def settle(
        self,
        now: datetime,
        hold_id: str,
        usage: Usage | Callable[[int, int], Usage],
        estimated: bool,
        pricer: Pricer,
    ) -> SettleOutcome:
        """Book the actual cost of a hold (idempotent).

        A held hold: − ceiling from held, + actual to settled. An expired hold (its
        ceiling already booked as settled by the sweep): settled is corrected by
        actual − booked, and the actual is added to ``late_musd`` (a late settle).
        A settled or released hold: nothing; returns the first actual (0 if released).

        ``usage`` may be a function of the hold's (input_tokens, max_tokens) — the
        interrupted-call rule needs the hold's own figures.
        """
        cfg = self.config

        def body(cur: sqlite3.Cursor) -> SettleOutcome:
            (
                state,
                op_id,
                user_id,
                provider,
                model,
                in_tok,
                max_tok,
                ceiling,
                granted,
                hour_key,
                day_key,
                scopes_json,
                booked_at_expiry,
            ) = self._hold_row(cur, hold_id)
            book, late = settle_transition(HoldState(state))
            if not book:
                cur.execute("SELECT actual_musd FROM budget_holds WHERE hold_id = ?", (hold_id,))
                return SettleOutcome(int(cur.fetchone()[0] or 0), False, None)
            u = usage(in_tok, max_tok) if callable(usage) else usage
            granted_at = _dt(granted)
            assert granted_at is not None
            actual, list_actual = pricer(provider, model, u, granted_at)
            scopes = [(Level(lvl), sc) for lvl, sc in json.loads(scopes_json)]
            # what this hold already counts for: its ceiling, held or booked at expiry
            counted = int(booked_at_expiry or 0) if late else ceiling
            self._book(
                cur,
                scopes,
                hour_key,
                day_key,
                held=0 if late else -ceiling,
                settled=actual - counted if late else actual,
                late=actual if late else 0,
            )
            cur.execute(
                "UPDATE budget_holds SET state = 'settled', ended_at = ?, actual_musd = ?,"
                " list_actual_musd = ?, usage_input = ?, usage_cached_input = ?,"
                " usage_output = ?, usage_reasoning = ?, estimated = ?, late = ?"
                " WHERE hold_id = ?",
                (
                    _ts(now),
                    actual,
                    list_actual,
                    u.input_tokens,
                    u.cached_input_tokens,
                    u.output_tokens,
                    u.reasoning_tokens,
                    int(estimated),
                    int(late),
                    hold_id,
                ),
            )
            cur.execute(
                "UPDATE budget_operations SET committed_musd = committed_musd + ?"
                " WHERE operation_id = ?",
                (actual - counted, op_id),
            )
            if late:
                self._event(
                    cur,
                    now,
                    "late_settle",
                    user_id=user_id,
                    hold_id=hold_id,
                    detail=f"{actual} (booked {counted} at expiry)",
                )
            if actual > ceiling:
                self._event(
                    cur,
                    now,
                    "over_ceiling",
                    user_id=user_id,
                    hold_id=hold_id,
                    detail=f"{actual}>{ceiling}",
                )
            grew = actual > counted if late else actual > 0
            tripped = self._auto_kill(cur, now) if grew else None
            return SettleOutcome(actual, True, tripped)

        del cfg
        return self._txn(body)

    def _auto_kill(self, cur: sqlite3.Cursor, now: datetime) -> KillState | None:
        cfg = self.config
        overrides = self._overrides(cur)
        threshold = auto_kill_threshold_musd(
            cfg, self._limit(overrides, Level.GLOBAL, "", Window.DAY)
        )
        if threshold is None:
            return None
        cur.execute(
            "SELECT killed, unkilled_at FROM budget_kill WHERE scope_kind = 'global' AND scope = ''"
        )
        row = cur.fetchone()
        if row is not None and row[0]:
            return None
        since = _ts(now) - cfg.auto_kill_window_s
        if row is not None and row[1] is not None:
            since = max(since, row[1])
        cur.execute(
            "SELECT COALESCE(SUM(actual_musd), 0) FROM budget_holds WHERE ended_at > ?"
            " AND state IN ('settled', 'expired') AND actual_musd > 0",
            (since,),
        )
        spent = int(cur.fetchone()[0])
        if spent <= threshold:
            return None
        reason = auto_kill_reason(spent, threshold, cfg.auto_kill_window_s)
        self._set_kill(cur, now, "global", "", True, reason, True, None)
        return KillState(True, reason, True, None, now, "global", "")

    def release(self, now: datetime, hold_id: str) -> bool:
        """Return a hold that spent nothing. ``False`` = no-op (already settled/released).

        A held hold: − ceiling from held. An expired hold (its ceiling booked as
        settled by the sweep): the booked ceiling is taken back out of settled
        spend, recorded as a ``late_release`` event.
        """

        def body(cur: sqlite3.Cursor) -> bool:
            row = self._hold_row(cur, hold_id)
            state, op_id, user_id, ceiling = row[0], row[1], row[2], row[7]
            hour_key, day_key, scopes_json, booked = row[9:13]
            release, late = release_transition(HoldState(state))
            if not release:
                return False
            counted = int(booked or 0) if late else ceiling
            scopes = [(Level(lvl), sc) for lvl, sc in json.loads(scopes_json)]
            if late:
                self._book(cur, scopes, hour_key, day_key, settled=-counted)
            else:
                self._book(cur, scopes, hour_key, day_key, held=-ceiling)
            cur.execute(
                "UPDATE budget_holds SET state = 'released', ended_at = ?, actual_musd = 0,"
                " list_actual_musd = NULL, estimated = 0, late = ? WHERE hold_id = ?",
                (_ts(now), int(late), hold_id),
            )
            cur.execute(
                "UPDATE budget_operations SET committed_musd = committed_musd - ?"
                " WHERE operation_id = ?",
                (counted, op_id),
            )
            if late:
                self._event(
                    cur,
                    now,
                    "late_release",
                    user_id=user_id,
                    hold_id=hold_id,
                    detail=f"returned {counted} booked at expiry",
                )
            return True

        return self._txn(body)

    def sweep(self, now: datetime, previous_processes: bool = False) -> SweepOutcome:
        """Expire holds past their TTL (and, with ``previous_processes``, every hold
        and operation of another process).

        Each expired hold is booked as settled at its ceiling, flagged estimated,
        in the windows fixed at its grant (− ceiling from held, + ceiling to
        settled on every level), with usage = input tokens + max_tokens and the
        list-price ceiling as its list equivalent; its expiry is recorded now
        (``ended_at`` and an ``expiry`` event). The booking counts for the
        auto-kill trigger, which may trip.
        """

        self.check_file()

        def body(cur: sqlite3.Cursor) -> SweepOutcome:
            t = _ts(now)
            cols = (
                "SELECT hold_id, operation_id, user_id, ceiling_musd, list_ceiling_musd,"
                " input_tokens, max_tokens, hour_key, day_key, scopes, margin_musd"
                " FROM budget_holds"
            )
            if previous_processes:
                cur.execute(
                    f"{cols} WHERE state = 'held' AND (expires_at <= ? OR process_id <> ?)",
                    (t, self.process_id),
                )
            else:
                cur.execute(f"{cols} WHERE state = 'held' AND expires_at <= ?", (t,))
            rows = cur.fetchall()
            booked_total = 0
            for (
                hold_id,
                _op_id,
                user_id,
                ceiling,
                list_ceiling,
                in_tok,
                max_tok,
                hour_key,
                day_key,
                scopes_json,
                margin,
            ) in rows:
                scopes = [(Level(lvl), sc) for lvl, sc in json.loads(scopes_json)]
                # booked at its provable bound (ceiling + margin): a late settle can
                # then only correct it downwards, never past what was admitted
                booked = int(ceiling) + int(margin)
                self._book(cur, scopes, hour_key, day_key, held=-ceiling, settled=booked)
                # the operation's committed money keeps the ceiling: it now counts as spent
                cur.execute(
                    "UPDATE budget_holds SET state = 'expired', ended_at = ?, actual_musd = ?,"
                    " list_actual_musd = ?, usage_input = ?, usage_cached_input = 0,"
                    " usage_output = ?, usage_reasoning = 0, estimated = 1 WHERE hold_id = ?",
                    (t, booked, list_ceiling, in_tok, max_tok, hold_id),
                )
                self._event(
                    cur,
                    now,
                    "expiry",
                    user_id=user_id,
                    hold_id=hold_id,
                    detail=f"booked {booked} at ceiling, estimated",
                )
                booked_total += booked
            if previous_processes:
                cur.execute(
                    "UPDATE budget_operations SET ended_at = ? WHERE ended_at IS NULL"
                    " AND process_id <> ?",
                    (t, self.process_id),
                )
            cur.execute(
                "UPDATE budget_operations SET ended_at = expires_at WHERE ended_at IS NULL"
                " AND expires_at <= ?",
                (t,),
            )
            tripped = self._auto_kill(cur, now) if booked_total > 0 else None
            return SweepOutcome(len(rows), booked_total, tripped)

        return self._txn(body)

    # -- estimate calibration ----------------------------------------------------
    def calibration(self) -> dict[tuple[str, str], tuple[int, int]]:
        """``(provider, model) → (ratio ppm, samples)`` of reported ÷ counted input tokens."""

        def body(cur: sqlite3.Cursor) -> dict[tuple[str, str], tuple[int, int]]:
            cur.execute("SELECT provider, model, ratio_ppm, samples FROM budget_calibration")
            return {(p, m): (int(r), int(n)) for p, m, r, n in cur.fetchall()}

        return self._read(body)

    def record_calibration(
        self, now: datetime, provider: str, model: str, ratio_ppm: int, samples: int
    ) -> None:
        """Persist one model's calibration (upsert)."""

        def body(cur: sqlite3.Cursor) -> None:
            cur.execute(
                "INSERT INTO budget_calibration (provider, model, ratio_ppm, samples, updated_at)"
                " VALUES (?,?,?,?,?) ON CONFLICT (provider, model) DO UPDATE SET"
                " ratio_ppm = excluded.ratio_ppm, samples = excluded.samples,"
                " updated_at = excluded.updated_at",
                (provider, model, ratio_ppm, samples, _ts(now)),
            )

        self._txn(body)

    # -- kill switch -------------------------------------------------------------
    def _set_kill(
        self,
        cur: sqlite3.Cursor,
        now: datetime,
        kind: str,
        scope: str,
        killed: bool,
        reason: str,
        automatic: bool,
        by: int | None,
    ) -> None:
        t = _ts(now)
        cur.execute(
            "INSERT INTO budget_kill (scope_kind, scope, killed, reason, automatic, by_user,"
            " changed_at, unkilled_at) VALUES (?,?,?,?,?,?,?,?)"
            " ON CONFLICT (scope_kind, scope) DO UPDATE SET killed = excluded.killed,"
            " reason = excluded.reason, automatic = excluded.automatic,"
            " by_user = excluded.by_user, changed_at = excluded.changed_at,"
            " unkilled_at = COALESCE(excluded.unkilled_at, budget_kill.unkilled_at)",
            (kind, scope, int(killed), reason, int(automatic), by, t, None if killed else t),
        )
        self._event(
            cur,
            now,
            "kill" if killed else "unkill",
            scope=f"{kind}:{scope}",
            user_id=by,
            detail=reason,
        )

    def set_kill(
        self, now: datetime, kind: str, scope: str, killed: bool, reason: str, by: int | None
    ) -> int:
        """Trip or reset a switch; returns the exposure (µUSD held, in that scope)."""

        def body(cur: sqlite3.Cursor) -> int:
            self._set_kill(cur, now, kind, scope, killed, reason, False, by)
            return self._exposure(cur, kind, scope)

        return self._txn(body)

    @staticmethod
    def _exposure(cur: sqlite3.Cursor, kind: str = "global", scope: str = "") -> int:
        where, args = "state = 'held'", ()
        if kind == "user":
            where, args = "state = 'held' AND user_id = ?", (int(scope),)  # type: ignore[assignment]
        elif kind == "team":
            where, args = "state = 'held' AND team = ?", (scope,)  # type: ignore[assignment]
        cur.execute(f"SELECT COALESCE(SUM(ceiling_musd), 0) FROM budget_holds WHERE {where}", args)  # noqa: S608 - fixed fragments
        return int(cur.fetchone()[0])

    def kill_states(self) -> list[KillState]:
        """Every switch row (tripped or not)."""

        def body(cur: sqlite3.Cursor) -> list[KillState]:
            cur.execute(
                "SELECT killed, reason, automatic, by_user, changed_at, scope_kind, scope"
                " FROM budget_kill"
            )
            return [
                KillState(bool(r[0]), r[1], bool(r[2]), r[3], _dt(r[4]), r[5], r[6])
                for r in cur.fetchall()
            ]

        return self._read(body)

    # -- limits and teams ----------------------------------------------------------
    def set_limit(
        self,
        now: datetime,
        level: Level,
        scope: str,
        window: Window,
        limit_musd: int | None,
        by: int | None,
        clear: bool,
    ) -> None:
        """Persist a runtime limit (``None`` = no limit); ``clear`` restores the default."""

        def body(cur: sqlite3.Cursor) -> None:
            if clear:
                cur.execute(
                    "DELETE FROM budget_limits WHERE level = ? AND scope = ? AND win = ?",
                    (level.value, scope, window.value),
                )
            else:
                cur.execute(
                    "INSERT INTO budget_limits (level, scope, win, limit_musd, updated_at,"
                    " updated_by) VALUES (?,?,?,?,?,?) ON CONFLICT (level, scope, win)"
                    " DO UPDATE SET limit_musd = excluded.limit_musd,"
                    " updated_at = excluded.updated_at, updated_by = excluded.updated_by",
                    (level.value, scope, window.value, limit_musd, _ts(now), by),
                )
            self._event(
                cur,
                now,
                "limit",
                level=level.value,
                window=window.value,
                scope=scope,
                user_id=by,
                detail="default" if clear else str(limit_musd),
            )

        self._txn(body)

    def team_add(self, now: datetime, name: str, user_id: int) -> str | None:
        """Put ``user_id`` in team ``name``; returns the team they left, if any."""

        def body(cur: sqlite3.Cursor) -> str | None:
            prev = self._team_of(cur, user_id)
            cur.execute(
                "INSERT INTO budget_team_members (user_id, team, added_at) VALUES (?,?,?)"
                " ON CONFLICT (user_id) DO UPDATE SET team = excluded.team,"
                " added_at = excluded.added_at",
                (user_id, name, _ts(now)),
            )
            return prev if prev != name else None

        return self._txn(body)

    def team_remove(self, now: datetime, name: str, user_id: int) -> bool:
        """Remove ``user_id`` from team ``name``; ``False`` if they were not in it."""

        def body(cur: sqlite3.Cursor) -> bool:
            cur.execute(
                "DELETE FROM budget_team_members WHERE user_id = ? AND team = ?", (user_id, name)
            )
            return cur.rowcount > 0

        del now
        return self._txn(body)

    def teams(self) -> dict[str, list[int]]:
        """Team name → sorted member ids."""

        def body(cur: sqlite3.Cursor) -> dict[str, list[int]]:
            return self._teams(cur)

        return self._read(body)

    @staticmethod
    def _teams(cur: sqlite3.Cursor) -> dict[str, list[int]]:
        cur.execute("SELECT team, user_id FROM budget_team_members ORDER BY team, user_id")
        out: dict[str, list[int]] = {}
        for team, uid in cur.fetchall():
            out.setdefault(team, []).append(uid)
        return out

    def record_message(self, now: datetime, user_id: int) -> int:
        """Count a message against USER_DAILY_MESSAGES; returns today's count.

        Raises (via the transaction): HoldRefused(messages) when the cap is reached;
        the refused message is not counted.
        """
        cfg = self.config

        def body(cur: sqlite3.Cursor) -> int:
            keys = window_keys(now, cfg.tz)
            cur.execute(
                "SELECT count FROM budget_messages WHERE user_id = ? AND day_key = ?",
                (user_id, keys.day_key),
            )
            row = cur.fetchone()
            n = 0 if row is None else int(row[0])
            if cfg.user_daily_messages is not None and n >= cfg.user_daily_messages:
                refusal = Refusal(
                    RefusalReason.MESSAGES,
                    level=Level.PERSONAL,
                    window=Window.DAY,
                    resets_at=keys.day_resets_at,
                    scope=str(user_id),
                )
                raise self._refuse(cur, now, refusal, user_id)
            cur.execute(
                "INSERT INTO budget_messages (user_id, day_key, count) VALUES (?,?,1)"
                " ON CONFLICT (user_id, day_key) DO UPDATE SET count = count + 1",
                (user_id, keys.day_key),
            )
            return n + 1

        return self._txn(body)

    # -- status --------------------------------------------------------------------
    def _bucket_status(
        self,
        cur: sqlite3.Cursor,
        scopes: Sequence[Scope],
        keys: WindowKeys,
        overrides: dict[tuple[str, str, str], int | None],
    ) -> list[BucketStatus]:
        return [
            BucketStatus(
                b.level,
                b.scope,
                b.window,
                b.key,
                b.limit_musd,
                b.settled_musd,
                b.held_musd,
                b.late_musd,
                b.free_musd,
                b.resets_at,
            )
            for b in self._buckets(cur, scopes, keys, overrides)
        ]

    def status(self, now: datetime) -> LedgerStatus:
        """The whole ledger now (see :class:`budget.status.LedgerStatus`)."""
        cfg = self.config

        def body(cur: sqlite3.Cursor) -> LedgerStatus:
            keys = window_keys(now, cfg.tz)
            day = keys.day_key
            overrides = self._overrides(cur)
            caps = self._provider_caps(overrides)
            scopes: list[Scope] = [(Level.GLOBAL, "")]
            scopes += [(Level.PROVIDER, p) for p in sorted(caps)]
            buckets = self._bucket_status(cur, scopes, keys, overrides)
            cur.execute(
                "SELECT COUNT(*), COALESCE(SUM(ceiling_musd), 0) FROM budget_holds"
                " WHERE state = 'held'"
            )
            outstanding, exposure = cur.fetchone()
            kills = [
                KillState(bool(r[0]), r[1], bool(r[2]), r[3], _dt(r[4]), r[5], r[6])
                for r in cur.execute(
                    "SELECT killed, reason, automatic, by_user, changed_at, scope_kind, scope"
                    " FROM budget_kill"
                ).fetchall()
            ]
            glob = next((k for k in kills if k.scope_kind == "global"), KillState(False))
            scoped = [k for k in kills if k.scope_kind != "global" and k.killed]
            cur.execute(
                "SELECT provider, SUM(CASE WHEN state IN ('settled', 'expired') THEN 1 ELSE 0 END),"
                " COALESCE(SUM(CASE WHEN state IN ('settled', 'expired') THEN actual_musd END), 0),"
                " SUM(CASE WHEN state IN ('settled', 'expired') THEN list_actual_musd END),"
                " COALESCE(SUM(CASE WHEN state = 'held' THEN ceiling_musd END), 0),"
                " SUM(CASE WHEN state IN ('settled', 'expired') AND estimated = 1"
                " THEN 1 ELSE 0 END)"
                " FROM budget_holds WHERE day_key = ? OR state = 'held' GROUP BY provider"
                " ORDER BY provider",
                (day,),
            )
            providers = [
                ProviderSpend(
                    r[0],
                    int(r[1] or 0),
                    int(r[2]),
                    None if r[3] is None else int(r[3]),
                    int(r[4]),
                    int(r[5] or 0),
                )
                for r in cur.fetchall()
            ]
            cur.execute(
                "SELECT origin, COALESCE(SUM(actual_musd), 0) FROM budget_holds"
                " WHERE day_key = ? AND state IN ('settled', 'expired') GROUP BY origin",
                (day,),
            )
            by_origin = {o.value: 0 for o in Origin}
            by_origin.update({r[0]: int(r[1]) for r in cur.fetchall()})
            cur.execute(
                "SELECT reason, COUNT(*) FROM budget_events WHERE day_key = ?"
                " AND kind = 'refusal' GROUP BY reason",
                (day,),
            )
            refusals = {r[0]: int(r[1]) for r in cur.fetchall()}
            estimate = self._estimate(cur, day)
            cur.execute("SELECT COUNT(*) FROM budget_operations WHERE day_key = ?", (day,))
            ops = int(cur.fetchone()[0])
            cur.execute("SELECT COUNT(*) FROM budget_requests WHERE day_key = ?", (day,))
            reqs = int(cur.fetchone()[0])
            cur.execute(
                "SELECT COUNT(*) FROM budget_events WHERE day_key = ? AND kind = 'expiry'",
                (day,),
            )
            expired = int(cur.fetchone()[0])
            cur.execute(
                "SELECT COALESCE(SUM(actual_musd), 0) FROM budget_holds WHERE late = 1"
                " AND day_key = ?",
                (day,),
            )
            late = int(cur.fetchone()[0])
            cur.execute(
                "SELECT COUNT(*), COALESCE(SUM(actual_musd), 0) FROM budget_holds"
                " WHERE state = 'expired' AND day_key = ?",
                (day,),
            )
            unreconciled, booked_at_ceiling = cur.fetchone()
            return LedgerStatus(
                at=now,
                tz=cfg.tz,
                buckets=buckets,
                outstanding_holds=int(outstanding),
                exposure_musd=int(exposure),
                kill=glob,
                scoped_kills=scoped,
                providers=providers,
                spend_by_origin_musd=by_origin,
                refusals_today=refusals,
                estimate=estimate,
                operations_today=ops,
                requests_today=reqs,
                requests_per_operation=(reqs / ops) if ops else None,
                expired_today=expired,
                late_settled_musd_today=late,
                teams=self._teams(cur),
                expired_unreconciled_today=int(unreconciled),
                expired_booked_musd_today=int(booked_at_ceiling),
            )

        return self._read(body)

    @staticmethod
    def _estimate(cur: sqlite3.Cursor, day: str) -> EstimateStats:
        cur.execute(
            "SELECT input_tokens + max_tokens, usage_input + usage_output, ceiling_musd,"
            " actual_musd FROM budget_holds WHERE day_key = ? AND state = 'settled'",
            (day,),
        )
        rows = cur.fetchall()
        if not rows:
            return EstimateStats()
        tok_err = [int(r[1]) - int(r[0]) for r in rows]
        ratios = [int(r[1]) / int(r[0]) for r in rows if r[0]]
        paid = [int(r[3]) - int(r[2]) for r in rows if r[2] > 0]
        return EstimateStats(
            count=len(rows),
            median_token_error=int(statistics.median(tok_err)),
            worst_token_error=max(tok_err),
            median_musd_error=int(statistics.median(paid)) if paid else None,
            worst_musd_error=max(paid) if paid else None,
            median_ratio=statistics.median(ratios) if ratios else None,
            worst_ratio=max(ratios) if ratios else None,
            over_ceiling=sum(1 for r in rows if r[3] > r[2] or int(r[1]) > int(r[0])),
        )

    def user_status(self, now: datetime, user_id: int) -> UserStatus:
        """One user now (see :class:`budget.status.UserStatus`)."""
        cfg = self.config

        def body(cur: sqlite3.Cursor) -> UserStatus:
            t = _ts(now)
            keys = window_keys(now, cfg.tz)
            team = self._team_of(cur, user_id)
            overrides = self._overrides(cur)
            scopes: list[Scope] = [(Level.PERSONAL, str(user_id))]
            if team:
                scopes.append((Level.TEAM, team))
            scopes.append((Level.GLOBAL, ""))
            buckets = self._bucket_status(cur, scopes, keys, overrides)
            cur.execute(
                "SELECT COUNT(*) FROM budget_operations WHERE user_id = ? AND ended_at IS NULL"
                " AND expires_at > ?",
                (user_id, t),
            )
            inflight = int(cur.fetchone()[0])
            cur.execute(
                "SELECT COUNT(*) FROM budget_holds WHERE user_id = ? AND state = 'held'",
                (user_id,),
            )
            holds_n = int(cur.fetchone()[0])
            cur.execute(
                "SELECT count FROM budget_messages WHERE user_id = ? AND day_key = ?",
                (user_id, keys.day_key),
            )
            row = cur.fetchone()
            ks = self._kill_of(cur, user_id, team)
            cur.execute(
                "SELECT COALESCE(SUM(actual_musd), 0) FROM budget_holds WHERE user_id = ?"
                " AND day_key = ? AND state IN ('settled', 'expired')",
                (user_id, keys.day_key),
            )
            spent = int(cur.fetchone()[0])
            return UserStatus(
                user_id,
                team,
                buckets,
                inflight,
                holds_n,
                0 if row is None else int(row[0]),
                cfg.user_daily_messages,
                ks,
                spent,
            )

        return self._read(body)

    def team_status(self, now: datetime, name: str) -> TeamStatus:
        """One team now (see :class:`budget.status.TeamStatus`)."""
        cfg = self.config

        def body(cur: sqlite3.Cursor) -> TeamStatus:
            keys = window_keys(now, cfg.tz)
            members = self._teams(cur).get(name, [])
            buckets = self._bucket_status(cur, [(Level.TEAM, name)], keys, self._overrides(cur))
            spend: dict[int, int] = {}
            for uid in members:
                cur.execute(
                    "SELECT COALESCE(SUM(actual_musd), 0) FROM budget_holds WHERE user_id = ?"
                    " AND day_key = ? AND state IN ('settled', 'expired')",
                    (uid, keys.day_key),
                )
                spend[uid] = int(cur.fetchone()[0])
            cur.execute(
                "SELECT killed, reason, automatic, by_user, changed_at FROM budget_kill"
                " WHERE scope_kind = 'team' AND scope = ? AND killed = 1",
                (name,),
            )
            r = cur.fetchone()
            ks = (
                None
                if r is None
                else KillState(True, r[1], bool(r[2]), r[3], _dt(r[4]), "team", name)
            )
            return TeamStatus(name, members, buckets, spend, ks)

        return self._read(body)

    def top_users(self, now: datetime, n: int) -> list[tuple[int, int, int]]:
        """Top ``n`` users today by settled + held µUSD: ``(user_id, settled, held)``."""
        day = window_keys(now, self.config.tz).day_key

        def body(cur: sqlite3.Cursor) -> list[tuple[int, int, int]]:
            cur.execute(
                "SELECT user_id,"
                " COALESCE(SUM(CASE WHEN state IN ('settled', 'expired') AND day_key = ?"
                " THEN actual_musd END), 0) AS s,"
                " COALESCE(SUM(CASE WHEN state = 'held' THEN ceiling_musd END), 0) AS h"
                " FROM budget_holds WHERE day_key = ? OR state = 'held' GROUP BY user_id"
                " HAVING s + h > 0 ORDER BY s + h DESC, user_id LIMIT ?",
                (day, day, n),
            )
            return [(int(r[0]), int(r[1]), int(r[2])) for r in cur.fetchall()]

        return self._read(body)

    def spend_per_hour(self, now: datetime, hours: int) -> dict[str, list[tuple[datetime, int]]]:
        """Settled µUSD per local hour for the last ``hours`` hours, by series:
        ``"global"``, ``"team:<name>"``, ``"provider:<name>"`` (zero-filled, oldest first)."""
        cfg = self.config

        def body(cur: sqlite3.Cursor) -> dict[str, list[tuple[datetime, int]]]:
            _, current, _ = hour_bounds(now, cfg.tz)
            starts = [current - timedelta(hours=h) for h in range(hours - 1, -1, -1)]
            first = starts[0].strftime("%Y-%m-%dT%H:%MZ")
            cur.execute(
                "SELECT level, scope, wkey, settled_musd FROM budget_buckets WHERE win = 'hour'"
                " AND wkey >= ? AND level IN ('global', 'team', 'provider')",
                (first,),
            )
            raw: dict[str, dict[str, int]] = {"global": {}}
            for level, scope, wkey, settled in cur.fetchall():
                name = "global" if level == "global" else f"{level}:{scope}"
                raw.setdefault(name, {})[wkey] = int(settled)
            return {
                name: [(s, series.get(s.strftime("%Y-%m-%dT%H:%MZ"), 0)) for s in starts]
                for name, series in raw.items()
            }

        return self._read(body)

    # -- invariants (tests) ------------------------------------------------------------
    def audit(self) -> dict[str, Any]:
        """Recompute bucket totals from the holds (tests/reconciliation): returns
        ``{"mismatches": [...], "held_total": int}``; empty mismatches = consistent."""

        def body(cur: sqlite3.Cursor) -> dict[str, Any]:
            expect: dict[tuple[str, str, str, str], list[int]] = {}
            cur.execute(
                "SELECT state, ceiling_musd, actual_musd, late, hour_key, day_key, scopes"
                " FROM budget_holds"
            )
            for state, ceiling, actual, late, hk, dk, scopes_json in cur.fetchall():
                for lvl, sc in json.loads(scopes_json):
                    for w in windows_for(Level(lvl)):
                        k = hk if w is Window.HOUR else dk
                        e = expect.setdefault((lvl, sc, w.value, k), [0, 0, 0])
                        if state == "held":
                            e[1] += ceiling
                        elif state == "expired":  # booked at the ceiling by the sweep
                            e[0] += actual or 0
                        elif state == "settled":
                            e[0] += actual or 0
                            if late:
                                e[2] += actual or 0
            cur.execute(
                "SELECT level, scope, win, wkey, settled_musd, held_musd, late_musd"
                " FROM budget_buckets"
            )
            got = {(r[0], r[1], r[2], r[3]): [r[4], r[5], r[6]] for r in cur.fetchall()}
            mismatches = [
                (k, expect.get(k, [0, 0, 0]), got.get(k, [0, 0, 0]))
                for k in set(expect) | set(got)
                if expect.get(k, [0, 0, 0]) != got.get(k, [0, 0, 0])
            ]
            cur.execute("SELECT COALESCE(SUM(held_musd), 0) FROM budget_buckets")
            return {"mismatches": mismatches, "held_total": int(cur.fetchone()[0])}

        return self._read(body)
