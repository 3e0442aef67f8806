"""The whole Alembic chain on both engines (SQLite and PostgreSQL): every revision up,
down, up (stairway); head equals the models; on PostgreSQL concurrent starts migrate once
and a database ahead of the code is refused untouched."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from bot.storage.migrate import migrate
from bot.storage.tables import metadata as bot_metadata
from budget.kernel.db import create_engine
from budget.kernel.schema import SchemaMismatch, alembic_config, check_schema, head_revision
from budget.storage.tables import EpochSeconds
from budget.storage.tables import metadata as budget_metadata
from scheduler.tables import metadata as scheduler_metadata

ROOT = Path(__file__).resolve().parents[2]
METADATA = [budget_metadata, scheduler_metadata, bot_metadata]
TIMESTAMPTZ = importlib.import_module("bot.migrations.versions.0022_ledger_timestamptz")


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database on each engine (PostgreSQL: the suite's server,
    ``tests/support/pg.py``)."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'stairs.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


def _config(url: str) -> Config:
    return alembic_config(url)


def _on(url: str, fn: object) -> object:
    """``fn(sync_connection)`` on ``url`` (through the async engine, as the bot connects)."""

    async def go() -> object:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(fn)  # type: ignore[arg-type]
        finally:
            await engine.dispose()

    return asyncio.run(go())


def _tables(url: str) -> set[str]:
    names = _on(url, lambda conn: set(inspect(conn).get_table_names()))
    assert isinstance(names, set)
    return names - {"alembic_version", "sqlite_sequence"}


def _diff(conn: Connection) -> list[object]:
    # a list, as in env.py's target_metadata: Alembic accepts it, its stub says one
    return list(compare_metadata(MigrationContext.configure(conn), METADATA))  # type: ignore[arg-type]


def _column_types(conn: Connection) -> dict[str, str]:
    """``table.column → information_schema data_type`` (PostgreSQL)."""
    rows = conn.execute(
        text(
            "SELECT table_name || '.' || column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = 'public'"
        )
    )
    return {name: kind for name, kind in rows}


#: The chain's up-down-up walk in this many tests, each on its own database, so xdist runs
#: them side by side (one walk was among the suite's longest tests: 37 s on PostgreSQL,
#: 19 s on SQLite, measured under load). Part ``i`` walks the ``i``-th contiguous slice of
#: the revisions, reached by one ``upgrade`` to the revision before it (one Alembic
#: command); the last part also checks head against the models and the way down to base.
UP_DOWN_UP_PARTS = 3


@pytest.mark.parametrize("part", range(UP_DOWN_UP_PARTS))
def test_every_revision_up_down_up_and_head_matches_models(database_url: str, part: int) -> None:
    """Each revision upgrades, downgrades one step and upgrades again; at head the schema
    has no difference from the three packages' metadata (types included: BIGINT µUSD and
    ids, timestamptz on PostgreSQL); base leaves no table. Split in
    :data:`UP_DOWN_UP_PARTS` contiguous slices of the chain, together every revision."""
    cfg = _config(database_url)
    revisions = list(reversed(list(ScriptDirectory.from_config(cfg).walk_revisions())))
    assert [r.revision for r in revisions] == [
        "0001_ledger",
        "0002_digests",
        "0003_bot",
        "0004_corrections",
        "0005_money",
        "0006_feed_delivered",
        "0007_topics",
        "0008_outbox",
        "0009_outbox_topic",
        "0010_level_user",
        "0011_stopped",
        "0012_processes",
        "0013_turn_tokens",
        "0014_turn_chat",
        "0015_digest_claims",
        "0016_provider_keys",
        "0017_intake_process",
        "0018_call_leases",
        "0019_update_rates",
        "0020_runtime_signals",
        "0021_bucket_margins",
        "0022_ledger_timestamptz",
        "0023_digest_restarts",
        "0032_ops_notices",
        "0036_chat_summaries",
        "0024_process_liveness_lock",
        "0034_retention",
        "0025_ledger_levels",
        "0026_access",
        "0027_star_payments",
        "0038_chat_prefs",
        "0050_wallet",
        "0043_alert_mutes",
        "0044_reconciliations",
        "0051_pending_refunds",
        "0052_plan_refunds",
        "0053_free_shares",
        "0054_call_lease_function",
        "0055_subscription_renewals",
        "0056_admission_at_once",
    ]
    size = -(-len(revisions) // UP_DOWN_UP_PARTS)
    first = part * size
    mine = revisions[first : first + size]
    assert mine, "every part walks some revisions"
    if first:
        command.upgrade(cfg, revisions[first - 1].revision)  # where this slice starts
    for rev in mine:
        command.upgrade(cfg, rev.revision)
        after_up = _tables(database_url)
        down = rev.down_revision
        assert down is None or isinstance(down, str), "the chain has no merge points"
        command.downgrade(cfg, down or "base")
        command.upgrade(cfg, rev.revision)
        assert _tables(database_url) == after_up
    if part < UP_DOWN_UP_PARTS - 1:
        return
    expected = set().union(*(m.tables for m in METADATA))
    assert _tables(database_url) == expected
    assert _on(database_url, _diff) == []
    command.downgrade(cfg, "base")
    assert _tables(database_url) == set()


def test_upgrade_head_twice_is_a_no_op(database_url: str) -> None:
    """``alembic upgrade head`` on an up-to-date database changes nothing (it runs on start)."""
    cfg = _config(database_url)
    command.upgrade(cfg, "head")
    before = _tables(database_url)
    command.upgrade(cfg, "head")
    assert _tables(database_url) == before
    check_schema(database_url)  # at head: no complaint


def test_money_and_ids_are_64_bit_on_postgres(pg_migrated_url: str) -> None:
    """µUSD columns and Telegram ids hold values past 2**31 on PostgreSQL (BIGINT), and the
    scheduler's datetimes are ``timestamptz``."""

    found = _on(pg_migrated_url, _column_types)
    assert isinstance(found, dict)
    for column in (
        "budget_buckets.settled_musd",
        "budget_buckets.held_musd",
        "budget_holds.ceiling_musd",
        "budget_holds.margin_musd",
        "budget_holds.user_id",
        "budget_operations.committed_musd",
        "budget_limits.limit_musd",
        "budget_team_members.user_id",
        "budget_corrections.new_musd",
        "user_profiles.user_id",
        "seen_messages.chat_id",
        "chat_turns.chat_id",
        "chat_turns.thread_id",
    ):
        assert found[column] == "bigint", column
    for column in ("digest_runs.due_at", "user_profiles.created_at", "seen_messages.received_at"):
        assert found[column] == "timestamp with time zone", column
    assert "budget_team_members_user_id_seq" not in str(
        _on(pg_migrated_url, lambda c: c.execute(text("SELECT relname FROM pg_class")).all())
    )


def test_legacy_turns_go_to_the_private_chat_and_a_downgrade_keeps_only_those(
    database_url: str,
) -> None:
    """0014_turn_chat: turns stored when history was one per user (no chat) all become
    the user's private chat's (``chat_id = user_id``, no topic), never a group's; the
    downgrade drops group and topic turns, which the older code would carry everywhere."""
    cfg = _config(database_url)
    command.upgrade(cfg, "0013_turn_tokens")

    def legacy(conn: Connection) -> None:
        conn.execute(
            text(
                "INSERT INTO chat_turns (user_id, role, content, tokens, created_at) VALUES"
                " (7, 'user', 'My bank PIN is 4321', 9, '2026-03-01 12:00:00+00:00'),"
                " (5000000000, 'user', 'another user', 4, '2026-03-01 12:00:00+00:00')"
            )
        )
        conn.commit()

    _on(database_url, legacy)
    command.upgrade(cfg, "0014_turn_chat")

    def turns(conn: Connection) -> list[tuple[object, ...]]:
        rows = conn.execute(
            text("SELECT user_id, chat_id, thread_id, content FROM chat_turns ORDER BY id")
        )
        return [tuple(r) for r in rows]

    assert _on(database_url, turns) == [
        (7, 7, None, "My bank PIN is 4321"),
        (5000000000, 5000000000, None, "another user"),
    ]

    def in_groups(conn: Connection) -> None:
        conn.execute(
            text(
                "INSERT INTO chat_turns (user_id, chat_id, thread_id, role, content, tokens,"
                " created_at) VALUES"
                " (7, -1001234567890, NULL, 'user', 'group', 1, '2026-03-01 12:00:00+00:00'),"
                " (7, -1001234567890, 11, 'user', 'topic', 1, '2026-03-01 12:00:00+00:00')"
            )
        )
        conn.commit()

    _on(database_url, in_groups)
    command.downgrade(cfg, "0013_turn_tokens")
    rows = _on(
        database_url,
        lambda c: [
            tuple(r) for r in c.execute(text("SELECT user_id, content FROM chat_turns ORDER BY id"))
        ],
    )
    assert rows == [(7, "My bank PIN is 4321"), (5000000000, "another user")]


def test_held_margins_join_their_buckets_on_postgres_and_leave_on_downgrade(
    database_url: str,
) -> None:
    """0021_bucket_margins: the margin of each hold held at upgrade time is added to
    every bucket it touches (user and global × day and hour, provider × day) and the
    hold marked booked — on PostgreSQL, whose ledger keeps margins there; a settled
    hold's margin is not. On SQLite both columns stay 0. The downgrade drops them."""
    cfg = _config(database_url)
    command.upgrade(cfg, "0020_runtime_signals")
    scopes = '[["user", "7"], ["global", ""], ["provider", "deepseek"]]'

    def holds_then(conn: Connection) -> None:
        for hold_id, state, margin in (
            ("h1", "held", 300),
            ("h2", "held", 90),
            ("h3", "settled", 50),
        ):
            conn.execute(
                text(
                    "INSERT INTO budget_holds (hold_id, operation_id, request_id, user_id,"
                    " origin, provider, model, input_tokens, max_tokens, ceiling_musd, state,"
                    " granted_at, expires_at, tz, hour_key, day_key, scopes, process_id,"
                    " margin_musd) VALUES (:h, 'o', 'r', 7, 'chat', 'deepseek', 'm', 1, 1,"
                    " 100, :s, 0, 90, 'UTC', '2026-01-14T12', '2026-01-14', :scopes, 'p', :m)"
                ),
                {"h": hold_id, "s": state, "m": margin, "scopes": scopes},
            )
        conn.execute(
            text(
                "INSERT INTO budget_buckets (level, scope, win, wkey, held_musd) VALUES"
                " ('global', '', 'day', '2026-01-14', 200)"
            )
        )
        conn.commit()

    _on(database_url, holds_then)
    command.upgrade(cfg, "0021_bucket_margins")

    def margins(conn: Connection) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
        buckets = conn.execute(
            text(
                "SELECT level, scope, win, wkey, held_musd, margin_musd FROM budget_buckets"
                " ORDER BY level, scope, win, wkey"
            )
        )
        booked = conn.execute(text("SELECT hold_id, margin_booked FROM budget_holds ORDER BY 1"))
        return [tuple(r) for r in buckets], [tuple(r) for r in booked]

    found = _on(database_url, margins)
    if database_url.startswith("postgresql"):
        assert found == (
            [
                ("global", "", "day", "2026-01-14", 200, 390),
                ("global", "", "hour", "2026-01-14T12", 0, 390),
                ("provider", "deepseek", "day", "2026-01-14", 0, 390),
                ("user", "7", "day", "2026-01-14", 0, 390),
                ("user", "7", "hour", "2026-01-14T12", 0, 390),
            ],
            [("h1", 1), ("h2", 1), ("h3", 0)],
        )
    else:
        assert found == (
            [("global", "", "day", "2026-01-14", 200, 0)],
            [("h1", 0), ("h2", 0), ("h3", 0)],
        )
    command.downgrade(cfg, "0020_runtime_signals")

    def columns(conn: Connection) -> set[str]:
        inspector = inspect(conn)
        return {
            f"{t}.{c['name']}"
            for t in ("budget_buckets", "budget_holds")
            for c in inspector.get_columns(t)
        }

    left = _on(database_url, columns)
    assert isinstance(left, set)
    assert "budget_holds.margin_musd" in left
    assert not {"budget_buckets.margin_musd", "budget_holds.margin_booked"} & left


def test_the_ledgers_times_are_timestamptz_on_postgres(pg_migrated_url: str) -> None:
    """0022_ledger_timestamptz: every time column of the ledger's tables (the sixteen
    :class:`budget.storage.tables.EpochSeconds` columns then, the two of
    ``budget_user_plans`` from ``0025_ledger_levels``, ``budget_processes.locked_on``,
    added so by 0024_process_liveness_lock, the two of ``budget_wallet_credits``
    from ``0050_wallet`` and the two of ``budget_wallet_refunds`` from
    ``0051_pending_refunds``) is ``timestamptz`` at head; the replicas'
    shared-state tables keep epoch seconds (``double precision``)."""
    found = _on(pg_migrated_url, _column_types)
    assert isinstance(found, dict)
    times = [
        f"{table.name}.{column.name}"
        for table in budget_metadata.sorted_tables
        for column in table.columns
        if isinstance(column.type, EpochSeconds)
    ]
    assert len(times) == 23
    assert {found[c] for c in times} == {"timestamp with time zone"}, times
    for column in ("call_leases.expires_at", "provider_keys.open_until", "update_rates.last_at"):
        assert found[column] == "double precision", column
    later = {"budget_user_plans.until", "budget_user_plans.set_at"}
    later |= {"budget_wallet_credits.credited_at", "budget_wallet_credits.refunded_at"}
    later |= {"budget_wallet_refunds.requested_at", "budget_wallet_refunds.finished_at"}
    assert set(times) == later | {
        f"{table}.{column}" for table, columns in TIMESTAMPTZ.COLUMNS.items() for column in columns
    } | {"budget_processes.locked_on"}


#: Epoch seconds an older version wrote (instants of its clock, to the microsecond).
GRANTED = datetime(2026, 1, 14, 23, 59, 59, 999_999, tzinfo=UTC)
BEAT = datetime(2026, 1, 15, 0, 0, 0, 1, tzinfo=UTC)


def test_existing_epochs_become_the_same_instants_and_back(database_url: str) -> None:
    """Rows written at 0021 (epoch doubles): after 0022 PostgreSQL holds the same
    instants, to the microsecond (NULL stays NULL, indexes answer range queries); after
    the downgrade the very same epoch floats. SQLite keeps its REAL values throughout."""
    cfg = _config(database_url)
    command.upgrade(cfg, "0021_bucket_margins")
    g, b = GRANTED.timestamp(), BEAT.timestamp()

    def old_rows(conn: Connection) -> None:
        conn.execute(
            text(
                "INSERT INTO budget_holds (hold_id, operation_id, request_id, user_id, origin,"
                " provider, model, input_tokens, max_tokens, ceiling_musd, state, granted_at,"
                " expires_at, ended_at, tz, hour_key, day_key, scopes, process_id) VALUES"
                " ('h1', 'o', 'r', 7, 'chat', 'test', 'm', 1, 1, 100, 'held', :g, :e, NULL,"
                " 'UTC', '2026-01-14T23:00Z', '2026-01-14', '[]', 'p'),"
                " ('h2', 'o', 'r', 7, 'chat', 'test', 'm', 1, 1, 100, 'settled', :g, :e, :b,"
                " 'UTC', '2026-01-14T23:00Z', '2026-01-14', '[]', 'p')"
            ),
            {"g": g, "e": g + 300.0, "b": b},
        )
        conn.execute(
            text(
                "INSERT INTO budget_kill (scope_kind, scope, killed, changed_at, unkilled_at)"
                " VALUES ('global', '', 0, :g, :b)"
            ),
            {"g": g, "b": b},
        )
        conn.execute(
            text(
                "INSERT INTO budget_processes (process_id, started_at, heartbeat_at)"
                " VALUES ('p', :g, :b)"
            ),
            {"g": g, "b": b},
        )
        conn.commit()

    def read(conn: Connection) -> list[tuple[object, ...]]:
        queries = (
            "SELECT granted_at, expires_at, ended_at FROM budget_holds ORDER BY hold_id",
            "SELECT changed_at, unkilled_at FROM budget_kill",
            "SELECT started_at, heartbeat_at FROM budget_processes",
        )
        return [tuple(r) for q in queries for r in conn.execute(text(q))]

    def ended_after(conn: Connection, at: object) -> list[str]:
        rows = conn.execute(
            text("SELECT hold_id FROM budget_holds WHERE ended_at > :at"), {"at": at}
        )
        return [r[0] for r in rows]

    _on(database_url, old_rows)
    epochs = [(g, g + 300.0, None), (g, g + 300.0, b), (g, b), (g, b)]
    assert _on(database_url, read) == epochs
    command.upgrade(cfg, "0022_ledger_timestamptz")
    if database_url.startswith("postgresql"):
        e = GRANTED + timedelta(seconds=300)
        assert _on(database_url, read) == [
            (GRANTED, e, None),
            (GRANTED, e, BEAT),
            (GRANTED, BEAT),
            (GRANTED, BEAT),
        ]
        after = GRANTED + timedelta(microseconds=1)
        assert _on(database_url, lambda c: ended_after(c, after)) == ["h2"]
        assert _on(database_url, lambda c: ended_after(c, BEAT)) == []
    else:
        assert _on(database_url, read) == epochs
    command.downgrade(cfg, "0021_bucket_margins")
    assert _on(database_url, read) == epochs
    if database_url.startswith("postgresql"):
        found = _on(database_url, _column_types)
        assert isinstance(found, dict)
        kinds = {found[f"{t}.{c}"] for t, cs in TIMESTAMPTZ.COLUMNS.items() for c in cs}
        assert kinds == {"double precision"}


def test_a_database_ahead_of_the_code_is_refused_untouched(database_url: str) -> None:
    """A revision this code does not know (a newer version migrated): ``migrate`` and
    ``check_schema`` raise :class:`SchemaMismatch` (ahead) and change nothing; a database
    behind is reported behind."""
    migrate(database_url)
    tables = _tables(database_url)

    def set_future(conn: Connection) -> None:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
        conn.commit()

    _on(database_url, set_future)
    with pytest.raises(SchemaMismatch) as ahead:
        migrate(database_url)
    assert ahead.value.ahead
    assert "9999_future" in str(ahead.value)
    assert head_revision() in str(ahead.value)
    with pytest.raises(SchemaMismatch):
        check_schema(database_url)
    assert _tables(database_url) == tables

    def set_old(conn: Connection) -> None:
        conn.execute(text("UPDATE alembic_version SET version_num = '0008_outbox'"))
        conn.commit()

    _on(database_url, set_old)
    with pytest.raises(SchemaMismatch) as behind:
        check_schema(database_url)
    assert not behind.value.ahead


def test_processes_starting_at_once_migrate_once_on_postgres(pg_url: str) -> None:
    """Three processes run the migrations on one new PostgreSQL database at the same
    moment: all succeed (the advisory lock serialises them; without it the second
    CREATE TABLE fails) and the schema is at head once."""
    code = "import sys; from bot.storage.migrate import migrate; migrate(sys.argv[1])"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, pg_url],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=120)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    versions = _on(
        pg_url, lambda c: c.execute(text("SELECT version_num FROM alembic_version")).all()
    )
    assert isinstance(versions, list)
    assert [v[0] for v in versions] == [head_revision()]


async def test_ddl_on_the_migration_engine_rolls_back(tmp_path: Path) -> None:
    """With make_ddl_transactional a CREATE TABLE inside a rolled-back transaction is
    gone — so a migration cut half-way leaves the database as it was."""
    from budget.kernel.db import make_ddl_transactional

    db = tmp_path / "ddl.db"
    url = f"sqlite+aiosqlite:///{db}"
    engine = create_engine(url)
    make_ddl_transactional(engine)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
            await conn.rollback()
    finally:
        await engine.dispose()
    assert await asyncio.to_thread(_tables, url) == set()
