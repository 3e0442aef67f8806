"""Alembic revision 0001_ledger: up, down, up (stairway) and equal to budget.models."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from budget.models import metadata

ROOT = Path(__file__).resolve().parents[3]


def alembic_config(db: Path) -> Config:
    """Alembic config of the project pointed at ``db``."""
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", f"sqlite+aiosqlite:///{db}")
    return cfg


def tables(db: Path) -> set[str]:
    """Table names in ``db``."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {r[0] for r in rows} - {"alembic_version", "sqlite_sequence"}


def test_stairway_and_matches_metadata(tmp_path: Path) -> None:
    """0001_ledger upgrades, downgrades to nothing, upgrades again; the schema it
    creates has no difference from budget.models.metadata."""
    db = tmp_path / "m.db"
    cfg = alembic_config(db)
    command.upgrade(cfg, "0001_ledger")
    assert tables(db) == set(metadata.tables)
    command.downgrade(cfg, "base")
    assert tables(db) == set()
    command.upgrade(cfg, "0001_ledger")
    engine = create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
    finally:
        engine.dispose()
    assert diff == []
