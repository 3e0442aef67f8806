"""``python -m budget`` checks the schema revision and never leaves a truncated file.

On a database at a revision the code does not know the export reported figures and
exited 0; when the read then failed (a column a newer migration renamed) it left a
header-only ``--out`` CSV and an empty ``.totals.csv`` in place of the previous export.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

import budget.__main__ as budget_cli
from budget.books.export import ReplacedOnSuccess
from budget.kernel.db import create_engine
from budget.storage.tables import create_schema
from tests.budget.ledger_helpers import stamp_head

USAGE = (
    "date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"
    "2026-01-14,deepseek-chat,1000,0,100,0.5\n"
)


def _previous(folder: Path) -> dict[str, str]:
    """The files of an earlier export and reconcile, which a failed run must keep."""
    files = {
        "keep.csv": "precious previous export\n",
        "keep.totals.csv": "precious totals\n",
        "diff.csv": "precious diff\n",
        "usage.csv": USAGE,
    }
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return files


def _listing(folder: Path) -> dict[str, str]:
    return {f.name: f.read_text(encoding="utf-8") for f in folder.iterdir() if f.is_file()}


async def _set_revision(url: str, revision: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                sa.text("UPDATE alembic_version SET version_num = :r"), {"r": revision}
            )
    finally:
        await engine.dispose()


def _run(args: list[str]) -> int:
    return budget_cli.main(args)


@pytest.mark.parametrize(
    ("revision", "needle"),
    [
        ("0099_future", "at revision 0099_future, which this version of Kopek does not have"),
        ("0021_bucket_margins", "at revision 0021_bucket_margins, behind this version's"),
    ],
)
async def test_a_schema_behind_or_ahead_is_refused_and_the_previous_files_stay(
    pg_migrated_url: str,
    revision: str,
    needle: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A PostgreSQL ledger at a revision ahead of (or behind) the code: export and
    reconcile exit 2 with one line — the bot's sentence, host and database — and every
    earlier file is byte for byte as it was, with nothing left beside it."""
    await _set_revision(pg_migrated_url, revision)
    before = _previous(tmp_path)
    monkeypatch.setenv("DATABASE_URL", pg_migrated_url)
    monkeypatch.chdir(tmp_path)
    for args in (
        ["export", "--out", "keep.csv"],
        ["reconcile", "usage.csv", "--provider", "deepseek", "--diff-out", "diff.csv"],
    ):
        assert await asyncio.to_thread(_run, args) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("cannot read the ledger database "), lines
        assert needle in lines[0]
        assert _listing(tmp_path) == before


async def test_a_read_that_fails_keeps_the_previous_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The schema check passes but the read fails (a column is gone, as a future
    migration may do): exit 2, one line, ``keep.csv`` and ``keep.totals.csv`` intact
    (they were a header line and 0 bytes), no temporary file left."""
    db = tmp_path / "kopek.db"
    create_schema(db)
    stamp_head(db)
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE budget_holds DROP COLUMN price_version")
    out = tmp_path / "out"
    out.mkdir()
    before = _previous(out)
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{db}")
    args = ["export", "--out", str(out / "keep.csv")]
    assert await asyncio.to_thread(_run, args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "could not be read" in lines[0] and "price_version" in lines[0]
    assert _listing(out) == before


async def test_a_good_export_replaces_the_files_whole_with_the_usual_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Success renames the new files over the old ones: the new content, the mode a plain
    ``open`` gives (0666 less the umask), no temporary file."""
    db = tmp_path / "kopek.db"
    create_schema(db)
    stamp_head(db)
    out = tmp_path / "out"
    out.mkdir()
    _previous(out)
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{db}")
    args = ["export", "--period", "2026-01", "--tz", "UTC", "--out", str(out / "keep.csv")]
    assert await asyncio.to_thread(_run, args) == 0
    after = _listing(out)
    assert sorted(after) == ["diff.csv", "keep.csv", "keep.totals.csv", "usage.csv"]
    assert after["keep.csv"].startswith("utc_time,")
    assert (
        after["keep.totals.csv"].startswith("group,key,")
        and "all,2026-01,0," in after["keep.totals.csv"]
    )
    umask = os.umask(0o022)
    os.umask(umask)
    assert (out / "keep.csv").stat().st_mode & 0o777 == 0o666 & ~umask


def test_files_left_without_a_commit_are_deleted(tmp_path: Path) -> None:
    """An error inside the block deletes the temporary files; a directory as the
    target is refused before anything is created."""
    target = tmp_path / "a.csv"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError), ReplacedOnSuccess() as files:
        files.open(target).write("new")
        files.open_binary(tmp_path / "b.csv").write(b"new")
        raise RuntimeError
    assert _listing(tmp_path) == {"a.csv": "old"}
    with pytest.raises(IsADirectoryError), ReplacedOnSuccess() as files:
        files.open(tmp_path)
    assert _listing(tmp_path) == {"a.csv": "old"}
