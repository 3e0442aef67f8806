"""``python -m bot export-config`` / ``import-config``: limits, teams, profiles
and subscriptions move from a SQLite file to PostgreSQL unchanged, the books do not, a
second import changes nothing, and the new database keeps numbering after the copied
ids."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.ops.configio import CONFIG_TABLES, NOT_CARRIED, main
from bot.storage.migrate import migrate
from bot.storage.tables import ChatTurn
from budget.kernel.db import create_engine
from budget.storage.tables import limits, teams
from budget.storage.tables import metadata as budget_metadata
from scheduler.tables import DeliveredEntry, DigestSource, DigestSubscription, UserProfile

T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
bucket_table = budget_metadata.tables["budget_buckets"]


async def _fill(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            insert(limits),
            [
                {"level": "global", "scope": "*", "win": "day", "limit_musd": 5_000_000,
                 "updated_at": 1.5, "updated_by": 42},
                {"level": "team", "scope": "ops", "win": "hour", "limit_musd": None,
                 "updated_at": 2.5, "updated_by": None},
            ],
        )  # fmt: skip
        await conn.execute(insert(teams), [{"user_id": 7, "team": "ops", "added_at": 3.0}])
        await conn.execute(
            insert(UserProfile),
            [
                {"user_id": 7, "chat_id": 7, "language": "ru", "tz": "Europe/Berlin",
                 "digest_time": "08:15", "digest_enabled": False, "active": True,
                 "created_at": T0, "last_seen_at": T0},
                {"user_id": 9_000_000_001, "chat_id": 9_000_000_001, "language": "en",
                 "tz": None, "digest_time": "09:00", "digest_enabled": True, "active": False,
                 "created_at": T0, "last_seen_at": T0},
            ],
        )  # fmt: skip
        await conn.execute(
            insert(DigestSource),
            [{"id": 5, "kind": "feed", "key": "https://example.org/f.xml", "title": "F",
              "last_seen_post_id": 9_000_000_000_000, "preview_lost": True, "checked_at": T0}],
        )  # fmt: skip
        await conn.execute(
            insert(DigestSubscription),
            [{"id": 3, "user_id": 7, "source_id": 5, "created_at": T0, "last_post_id": 12,
              "last_digest_at": None, "lost_notified": True}],
        )  # fmt: skip
        await conn.execute(
            insert(DeliveredEntry), [{"id": 4, "subscription_id": 3, "post_id": 77, "seen_at": T0}]
        )
        await conn.execute(
            insert(ChatTurn),
            [{"user_id": 7, "chat_id": 7, "role": "user", "content": "not carried",
              "tokens": 3, "created_at": T0}],
        )  # fmt: skip


async def _fill_state(engine: AsyncEngine) -> None:
    """A row in each table of user and operator state beside the limits: a plan, a
    wallet (credit, a refund, its balance bucket with money held), a Stars payment, the
    access lists and an invite with its use, a muted alert, a chat's persona, a cost
    footer; and a user's day bucket (the books: not carried)."""
    from bot.ops.configio import _tables

    t = _tables()
    rows: dict[str, list[dict[str, Any]]] = {
        "budget_user_plans": [{"user_id": 7, "plan": "pro", "until": 1.9e9, "set_at": 4.0,
                               "set_by": 42}],
        "budget_wallet_credits": [
            {"charge_id": "c" * 128, "user_id": 7, "stars": 100, "musd_per_star": 9000,
             "credit_musd": 900_000, "credited_at": 5.0, "refunded_at": None,
             "refunded_by": None, "removed_musd": 0},
            {"charge_id": "paid-2", "user_id": 7, "stars": 10, "musd_per_star": 9000,
             "credit_musd": 90_000, "credited_at": 6.0, "refunded_at": 7.0,
             "refunded_by": 42, "removed_musd": 90_000},
        ],
        "budget_wallet_refunds": [
            {"charge_id": "paid-2", "user_id": 7, "requested_by": 42, "requested_at": 7.0,
             "state": "done", "removed_musd": 90_000, "claimed_by": None, "telegram": "ok",
             "finished_at": 7.5, "kind": "wallet", "stars": None}
        ],
        "budget_buckets": [
            {"level": "wallet", "scope": "7", "win": "balance", "wkey": "", "settled_musd":
             -800_000, "held_musd": 30_000, "late_musd": 0, "margin_musd": 1_000},
            {"level": "user", "scope": "7", "win": "day", "wkey": "2026-03-01",
             "settled_musd": 100_000, "held_musd": 0, "late_musd": 0, "margin_musd": 0},
        ],
        "star_payments": [
            {"charge_id": "plan-1", "user_id": 7, "stars": 250, "payload": "plan:pro:30",
             "plan": "pro", "plan_from": T0, "plan_until": T0, "plan_before": None,
             "plan_before_until": None, "paid_at": T0, "applied_at": T0,
             "refunded_at": None, "refunded_by": None}
        ],
        "access_entries": [
            {"subject_id": 7, "allowed": 1, "banned": 0, "source": "admin", "reason": None,
             "updated_at": T0, "updated_by": 42},
            {"subject_id": -1001234567890, "allowed": 0, "banned": 1, "source": "admin",
             "reason": "spam", "updated_at": T0, "updated_by": 42},
        ],
        "access_pending": [{"username": "alice", "created_at": T0, "created_by": 42}],
        "access_invites": [{"code_sha256": "a" * 64, "plan": "pro", "max_uses": 5,
                            "uses_left": 4, "expires_at": T0, "created_at": T0,
                            "created_by": 42}],
        "access_invite_uses": [{"code_sha256": "a" * 64, "user_id": 7, "used_at": T0}],
        "ops_alert_mutes": [{"alert_type": "loop", "muted_by": 42, "muted_at": T0}],
        "chat_prefs": [{"chat_id": -1001234567890, "persona": "custom",
                        "persona_text": "Speak like a pirate.", "model": "deepseek-chat",
                        "changed_by": 42, "changed_at": T0}],
        "chat_cost_footers": [{"user_id": 7, "changed_at": T0}],
    }  # fmt: skip
    async with engine.begin() as conn:
        for name, table_rows in rows.items():
            await conn.execute(insert(t[name]), table_rows)


def _utc(value: Any) -> Any:
    """A datetime as an aware UTC one (SQLite gives the bot tables' back naive: UTC)."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


async def _rows(engine: AsyncEngine) -> dict[str, list[dict[str, Any]]]:
    """Every carried row (a wallet's bucket, not the books' buckets) by table."""
    from bot.ops.configio import _carried, _tables

    out: dict[str, list[dict[str, Any]]] = {}
    async with engine.connect() as conn:
        for name, table in _tables().items():
            query = _carried(table, select(table).order_by(*table.primary_key.columns))
            rows = (await conn.execute(query)).mappings().all()
            out[name] = [{k: _utc(v) for k, v in r.items()} for r in rows]
    return out


def _on(url: str, work: Any) -> Any:
    async def go() -> Any:
        engine = create_engine(url)
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    return asyncio.run(go())


@pytest.mark.parametrize("target", ["sqlite", "postgresql"])
def test_configuration_moves_from_sqlite_to_a_fresh_database_once(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    target: str,
) -> None:
    """Export from a SQLite file, import into an empty database of either engine
    (migrated by the import): every row of state reads back equal through the bot's own
    tables (booleans, aware datetimes, 64-bit ids) — the plans, the wallets and Stars
    payments, the access lists and invites, the chats' personas among them; a wallet's
    balance moves without the money its holds had held; the books (a user's day
    bucket) and chat history are not carried; importing again is refused with one line
    and changes nothing; a new source after the import gets the next id, not a copied
    one."""
    monkeypatch.chdir(tmp_path)  # no .env here: DATABASE_URL from the environment only
    sqlite_url = f"sqlite+aiosqlite:///{tmp_path / 'kopek.db'}"
    migrate(sqlite_url)
    _on(sqlite_url, _fill)
    _on(sqlite_url, _fill_state)
    before = _on(sqlite_url, _rows)
    [wallet] = before["budget_buckets"]
    assert (wallet["level"], wallet["settled_musd"]) == ("wallet", -800_000)
    before["budget_buckets"] = [dict(wallet, held_musd=0, margin_musd=0)]
    path = tmp_path / "config.json"
    if target == "sqlite":
        new_url = f"sqlite+aiosqlite:///{tmp_path / 'new.db'}"
    else:
        new_url = str(request.getfixturevalue("pg_url"))

    monkeypatch.setenv("DATABASE_URL", sqlite_url)
    assert main("export-config", [str(path)]) == 0
    assert "22 rows exported to" in capsys.readouterr().out
    document = json.loads(path.read_text())
    assert set(document["tables"]) == set(CONFIG_TABLES)
    assert "not carried" not in path.read_text()

    monkeypatch.setenv("DATABASE_URL", new_url)
    assert main("import-config", [str(path)]) == 0
    assert "22 rows imported from" in capsys.readouterr().out
    after = _on(new_url, _rows)
    assert after == before

    async def buckets(engine: AsyncEngine) -> int:
        async with engine.connect() as conn:
            counted = await conn.scalar(select(func.count()).select_from(bucket_table))
            return int(counted or 0)

    assert _on(new_url, buckets) == 1, "the user's day bucket is the books: not carried"
    assert after["user_profiles"][1]["user_id"] == 9_000_000_001
    assert after["user_profiles"][0]["digest_enabled"] is False

    assert main("import-config", [str(path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("kopek: the target database already has rows in budget_limits")
    assert _on(new_url, _rows) == before

    async def add_source(engine: AsyncEngine) -> int:
        async with engine.begin() as conn:
            result = await conn.execute(
                insert(DigestSource)
                .values(kind="channel", key="news", title="N", preview_lost=False)
                .returning(DigestSource.id)
            )
            return int(result.scalar_one())

    assert _on(new_url, add_source) == 6


def test_a_file_that_is_not_an_export_is_refused_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not JSON, another format, or another schema revision: exit 2, one line, and the
    target database is not even created."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'new.db'}")
    bad = tmp_path / "bad.json"
    for body, says in (
        ("not json", "cannot read"),
        ('{"format": "other"}', "not a Kopek configuration file"),
        ('{"format": "kopek-config", "revision": "0001_ledger", "tables": {}}', "export it"),
    ):
        bad.write_text(body)
        assert main("import-config", [str(bad)]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith("kopek: ") and says in line, line
    assert not (tmp_path / "new.db").exists()


def test_exporting_a_database_that_is_not_there_says_so_and_creates_nothing(
    tmp_path: Path,
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A mistyped SQLite path was created empty and answered "cannot start … at revision
    no schema … apply the migrations (alembic upgrade head)": nothing
    was started, and migrating a wrong database is the wrong advice. Expected: one
    line, exit 2, no file left behind; the same for an empty PostgreSQL database."""
    missing = tmp_path / "nothere.db"
    for url, says in (
        (
            f"sqlite+aiosqlite:///{missing}",
            f"nothing to export: there is no database file {missing}",
        ),
        (pg_url, "nothing to export: the database postgresql://127.0.0.1:"),
    ):
        monkeypatch.setenv("DATABASE_URL", url)
        assert main("export-config", [str(tmp_path / "out.json")]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"kopek: {says}"), line
    assert not missing.exists() and not (tmp_path / "out.json").exists()


def test_failures_exit_2_like_the_books_and_name_what_could_not_be_done(
    tmp_path: Path,
    pg_migrated_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An unreachable server exited 1 where ``python -m budget`` exits 2, and a schema a
    newer version migrated read "cannot start on the database". Now:
    exit 2 for both commands, "cannot reach …" / "cannot export from …" / "cannot import
    into …", and an earlier export file is left as it was."""
    earlier = tmp_path / "conf.json"
    earlier.write_text("earlier export", encoding="utf-8")
    unreachable = "postgresql+asyncpg://kopek:s3cr3t-pw@127.0.0.1:1/kopek"
    ahead = tmp_path / "ahead.db"
    migrate(f"sqlite+aiosqlite:///{ahead}")
    with sqlite3.connect(ahead) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099_future'")
    cases = [
        ("export-config", unreachable, "cannot reach the database postgresql://127.0.0.1:1/kopek"),
        ("import-config", unreachable, "cannot reach the database postgresql://127.0.0.1:1/kopek"),
        ("export-config", f"sqlite+aiosqlite:///{ahead}", "cannot export from the database "),
        ("import-config", f"sqlite+aiosqlite:///{ahead}", "cannot import into the database "),
    ]
    good = tmp_path / "good.json"
    monkeypatch.setenv("DATABASE_URL", pg_migrated_url)
    assert main("export-config", [str(good)]) == 0
    capsys.readouterr()
    for command, url, says in cases:
        monkeypatch.setenv("DATABASE_URL", url)
        file = earlier if command == "export-config" else good
        assert main(command, [str(file)]) == 2, (command, url)
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"kopek: {says}"), line
        assert "cannot start" not in line and "s3cr3t-pw" not in line
        if "ahead" in url:
            assert "0099_future" in line and "a newer version migrated it" in line
    assert earlier.read_text(encoding="utf-8") == "earlier export"
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(".tmp")]


def test_every_table_is_carried_or_left_behind_on_purpose() -> None:
    """A new table is a decision: state an operator moves (:data:`CONFIG_TABLES`) or
    books, history and what a process rebuilds (:data:`NOT_CARRIED`)."""
    from bot.storage.tables import metadata as bot_metadata
    from scheduler.tables import metadata as scheduler_metadata

    every = {*budget_metadata.tables, *scheduler_metadata.tables, *bot_metadata.tables}
    assert not set(CONFIG_TABLES) & NOT_CARRIED
    assert every == set(CONFIG_TABLES) | NOT_CARRIED, every ^ (set(CONFIG_TABLES) | NOT_CARRIED)
