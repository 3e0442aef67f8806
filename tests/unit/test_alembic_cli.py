"""The alembic command line, as README's downgrade paragraph runs it (trial 12b, F5):
``alembic downgrade`` / ``upgrade`` printed nothing (exit 0 either way), so an operator
could not tell whether anything happened."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bot.migrate import head_revision
from tests.e2e.harness import REPO_ROOT


def _alembic(db: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": f"sqlite+aiosqlite:///{db}"}
    return subprocess.run(
        [sys.executable, "-m", "alembic", *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_downgrade_and_upgrade_say_each_step(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    head = head_revision()
    up = _alembic(db, "upgrade", "head")
    assert up.returncode == 0, up.stderr
    assert "Running upgrade 0021_bucket_margins -> 0022_ledger_timestamptz" in up.stderr
    assert f" -> {head}" in up.stderr
    down = _alembic(db, "downgrade", "-1")
    assert down.returncode == 0, down.stderr
    assert f"Running downgrade {head} -> " in down.stderr
    again = _alembic(db, "upgrade", "head")
    assert f" -> {head}" in again.stderr and "Running upgrade" in again.stderr
    current = _alembic(db, "current")
    assert f"{head} (head)" in current.stdout
