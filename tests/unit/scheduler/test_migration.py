"""Alembic revision 0002_digests: up, down, up (stairway) and equal to scheduler.models."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from scheduler.models import metadata

ROOT = Path(__file__).resolve().parents[3]


def _config(db: Path) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", f"sqlite+aiosqlite:///{db}")
    return cfg


def _tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {r[0] for r in rows}


def test_stairway_and_matches_metadata(tmp_path: Path) -> None:
    """0002_digests upgrades from 0001, downgrades to it, upgrades again; no schema diff."""
    db = tmp_path / "m.db"
    cfg = _config(db)
    command.upgrade(cfg, "0001_ledger")
    before = _tables(db)
    command.upgrade(cfg, "0002_digests")
    assert _tables(db) - before == set(metadata.tables)
    command.downgrade(cfg, "0001_ledger")
    assert _tables(db) == before
    command.upgrade(cfg, "0002_digests")
    engine = create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
    finally:
        engine.dispose()
    ours = [
        d
        for d in diff
        if any(f"'{name}'" in repr(d) or f"<{name}>" in repr(d) for name in metadata.tables)
    ]
    assert ours == []
