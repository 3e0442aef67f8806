"""The whole Alembic chain: every revision up, down, up (stairway); head equals the models."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from bot.migrate import alembic_config
from bot.models import metadata as bot_metadata
from budget.models import metadata as budget_metadata
from scheduler.models import metadata as scheduler_metadata

ROOT = Path(__file__).resolve().parents[2]
METADATA = [budget_metadata, scheduler_metadata, bot_metadata]


def _config(db: Path) -> Config:
    return alembic_config(f"sqlite+aiosqlite:///{db}")


def _tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {r[0] for r in rows} - {"alembic_version", "sqlite_sequence"}


def test_every_revision_up_down_up_and_head_matches_models(tmp_path: Path) -> None:
    """Each revision upgrades, downgrades one step and upgrades again; at head the schema
    has no difference from the three packages' metadata; base leaves no table."""
    db = tmp_path / "stairs.db"
    cfg = _config(db)
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
    ]
    for rev in revisions:
        command.upgrade(cfg, rev.revision)
        after_up = _tables(db)
        down = rev.down_revision
        assert down is None or isinstance(down, str), "the chain has no merge points"
        command.downgrade(cfg, down or "base")
        command.upgrade(cfg, rev.revision)
        assert _tables(db) == after_up
    expected = set().union(*(m.tables for m in METADATA))
    assert _tables(db) == expected
    engine = create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            # a list, as in env.py's target_metadata: Alembic accepts it, its stub says one
            diff = compare_metadata(MigrationContext.configure(conn), METADATA)  # type: ignore[arg-type]
    finally:
        engine.dispose()
    assert diff == []
    command.downgrade(cfg, "base")
    assert _tables(db) == set()


def test_upgrade_head_twice_is_a_no_op(tmp_path: Path) -> None:
    """``alembic upgrade head`` on an up-to-date database changes nothing (it runs on start)."""
    db = tmp_path / "twice.db"
    cfg = _config(db)
    command.upgrade(cfg, "head")
    before = _tables(db)
    command.upgrade(cfg, "head")
    assert _tables(db) == before


async def test_ddl_on_the_migration_engine_rolls_back(tmp_path: Path) -> None:
    """With make_ddl_transactional a CREATE TABLE inside a rolled-back transaction is
    gone — so a migration cut half-way leaves the database as it was."""
    from sqlalchemy import text

    from budget.db import create_engine as create_app_engine
    from budget.db import make_ddl_transactional

    db = tmp_path / "ddl.db"
    engine = create_app_engine(f"sqlite+aiosqlite:///{db}")
    make_ddl_transactional(engine)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
            await conn.rollback()
    finally:
        await engine.dispose()
    assert _tables(db) == set()
