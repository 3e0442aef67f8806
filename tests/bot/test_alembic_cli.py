"""The alembic command line, as README's downgrade paragraph runs it:
``alembic downgrade`` / ``upgrade`` printed nothing (exit 0 either way), so an operator
could not tell whether anything happened."""

from __future__ import annotations

import os
from pathlib import Path

from budget.kernel.schema import head_revision
from tests.support.forked import run_module
from tests.support.harness import REPO_ROOT


async def _alembic(db: Path, *argv: str) -> tuple[int, str, str]:
    """``python -m alembic *argv`` forked from the suite's fork server: exit code, stdout,
    stderr."""
    env = {**os.environ, "DATABASE_URL": f"sqlite+aiosqlite:///{db}"}
    return await run_module("alembic", argv, env=env, cwd=REPO_ROOT, timeout=120)


async def test_downgrade_and_upgrade_say_each_step(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    head = head_revision()
    code, _, up = await _alembic(db, "upgrade", "head")
    assert code == 0, up
    assert "Running upgrade 0021_bucket_margins -> 0022_ledger_timestamptz" in up
    assert f" -> {head}" in up
    code, _, down = await _alembic(db, "downgrade", "-1")
    assert code == 0, down
    assert f"Running downgrade {head} -> " in down
    code, _, again = await _alembic(db, "upgrade", "head")
    assert f" -> {head}" in again and "Running upgrade" in again
    code, current, _ = await _alembic(db, "current")
    assert code == 0
    assert f"{head} (head)" in current
