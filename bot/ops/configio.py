"""``python -m bot export-config FILE`` / ``import-config FILE``: carry configuration from
one database to another (SQLite → PostgreSQL, or the reverse), not the books.

What moves (:data:`CONFIG_TABLES`, in foreign-key order) is every row of operator or
user state that the new database could not rebuild: runtime limits (``/limit``), teams
and their guarantees, kill switches, the token calibration, user plans (``/plan``, a
bought plan's term), who may use the bot (allowed and banned ids, pending @usernames,
invites and who used them), muted alert types, each chat's persona and model and each
user's cost-footer choice, user profiles (language, timezone, digest time), digest
sources, subscriptions with their cursors and the feed entries each has delivered (so
nothing is sent twice after the move), and the money the bot owes its users: Telegram
Stars payments, wallet credits and refunds, and each wallet's balance — its
``budget_buckets`` row (level ``wallet``) with the settled spend only: holds do not
move, so what was held is not (:data:`_ROWS_OF`, :data:`_RESET`). Not carried: the
ledger's books (holds, spend windows, events, corrections, the attempts' sums — the new
database starts its books empty; export the old books with ``python -m budget export``
first), the record of past ``/reconcile`` runs (they describe the old books), chat
history and summaries, intake, the outbox, digest runs, the summary cache, and what a
process rebuilds by itself: the provider keys' states (circuits, cooldowns, a key
disabled after an authentication failure: its next call finds it again), rate counters,
free-share counters, once-only notices and the processes' leases.

Why a command and not an SQL recipe: the two engines store booleans, datetimes and ids
differently (SQLite 0/1 and naive UTC text; PostgreSQL ``boolean``, ``timestamptz`` and
sequences that must be moved past the copied ids). Reading and writing through the same
SQLAlchemy tables the bot uses converts each value by its column type, on either side.

The file is JSON: ``{"format": "kopek-config", "version": 1, "revision": <schema
revision>, "tables": {name: [row, ...]}}`` with datetimes as ISO 8601 (UTC) and dates
as ``YYYY-MM-DD``. Both commands read ``DATABASE_URL`` only (environment or ``.env``).
Export needs the database at this code's schema head; import migrates the target to head
first (under PostgreSQL's advisory lock) and refuses a target that already holds any
configuration row. Import is one transaction: all rows or none.

Exit codes, as ``python -m budget``'s: 0 done; 2 anything that failed — a file, a schema
behind or ahead of this code, a target the command cannot use, a database that cannot be
opened or reached. Every failure is one ``kopek:`` line on stderr naming what could not
be done ("cannot export from the database …", "cannot reach the database …"), the URL's
password redacted. The export file is written beside its target and renamed over it
once complete (a failure leaves an earlier export as it was).
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Date, DateTime, Select, Table, func, insert, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.ops.logs import redact
from bot.storage.migrate import migrate
from budget.kernel.db import create_engine, failure_reason, location, sqlite_path
from budget.kernel.schema import SchemaMismatch, check_schema, head_revision

__all__ = [
    "CONFIG_TABLES",
    "FORMAT",
    "NOT_CARRIED",
    "ConfigFileError",
    "export_config",
    "failure_line",
    "import_config",
    "main",
]

#: Tables carried over, parents before children.
CONFIG_TABLES = (
    "budget_limits",
    "budget_team_members",
    "budget_kill",
    "budget_calibration",
    "budget_user_plans",
    "budget_wallet_credits",
    "budget_wallet_refunds",
    "budget_buckets",
    "star_payments",
    "access_entries",
    "access_pending",
    "access_invites",
    "access_invite_uses",
    "ops_alert_mutes",
    "chat_prefs",
    "chat_cost_footers",
    "user_profiles",
    "digest_sources",
    "digest_subscriptions",
    "digest_delivered",
)

#: Tables left behind (module docstring): the books, history, and what a process rebuilds.
NOT_CARRIED = frozenset({
    "budget_attempt_sums", "budget_corrections", "budget_event_sums", "budget_events",
    "budget_holds", "budget_messages", "budget_operations", "budget_processes",
    "budget_requests", "budget_retention", "call_leases", "free_share_active",
    "free_share_use", "provider_keys", "runtime_signals", "update_rates",
    "digest_runs", "digest_ticks", "summary_cache", "summary_pending",
    "access_notices", "chat_summaries", "chat_turns", "ops_notices",
    "ops_reconciliations", "outbox", "seen_messages",
})  # fmt: skip

#: Tables of which only some rows are state (the rest are the books): a wallet's balance
#: is its bucket (``docs/decisions/240-the-wallet-is-a-balance-level.md``).
_ROWS_OF: dict[str, tuple[str, str]] = {"budget_buckets": ("level", "wallet")}
#: Columns written as 0: money held by holds, which do not move.
_RESET: dict[str, tuple[str, ...]] = {"budget_buckets": ("held_musd", "margin_musd")}

#: The ``format`` field of the file.
FORMAT = "kopek-config"


class ConfigFileError(Exception):
    """The file, or the target database, cannot be used (message: why, one line)."""


def _tables() -> dict[str, Table]:
    from bot.storage.tables import metadata as bot_metadata
    from budget.storage.tables import metadata as budget_metadata
    from scheduler.tables import metadata as scheduler_metadata

    found: dict[str, Table] = {}
    for metadata in (budget_metadata, scheduler_metadata, bot_metadata):
        found.update(metadata.tables)
    return {name: found[name] for name in CONFIG_TABLES}


def _is_type(table: Table, column: str, kind: type[Any]) -> bool:
    col_type = table.c[column].type
    impl = getattr(col_type, "impl", col_type)  # a TypeDecorator (UTCDateTime)
    return isinstance(col_type, kind) or isinstance(impl, kind)


def _dump(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None:
        # SQLite keeps no offset; every datetime the bot writes is UTC
        value = value.replace(tzinfo=UTC)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def _load(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in row.items():
        if name not in table.c:
            raise ConfigFileError(f"table {table.name} has no column {name!r}")
        if isinstance(value, str) and _is_type(table, name, DateTime):
            value = datetime.fromisoformat(value)
        elif isinstance(value, str) and _is_type(table, name, Date):
            value = date.fromisoformat(value)
        out[name] = value
    return out


def _carried(table: Table, query: Select[Any]) -> Select[Any]:
    """``query`` narrowed to the rows of ``table`` that move (:data:`_ROWS_OF`)."""
    if table.name in _ROWS_OF:
        column, value = _ROWS_OF[table.name]
        query = query.where(table.c[column] == value)
    return query


async def _read(conn: AsyncConnection, table: Table) -> list[dict[str, Any]]:
    query = _carried(table, select(table).order_by(*table.primary_key.columns))
    rows = (await conn.execute(query)).mappings().all()
    reset = _RESET.get(table.name, ())
    return [{k: 0 if k in reset else _dump(v) for k, v in row.items()} for row in rows]


async def export_config(database_url: str, path: Path) -> dict[str, int]:
    """Write the configuration tables of ``database_url`` to ``path`` (JSON).

    Returns:
        rows written per table.

    Raises:
        ConfigFileError: no such SQLite file, or a database without Kopek's tables
            (nothing is created), or ``path`` cannot be written.
        SchemaMismatch: the database is not at this code's schema head.
        OSError, sqlalchemy.exc.SQLAlchemyError: the database cannot be read, the file
            cannot be written.
    """
    file = sqlite_path(database_url)
    if file is not None and not await asyncio.to_thread(file.exists):
        raise ConfigFileError(f"nothing to export: there is no database file {file}")
    try:
        await asyncio.to_thread(check_schema, database_url)
    except SchemaMismatch as exc:
        if exc.current:
            raise
        raise ConfigFileError(
            f"nothing to export: the database {location(database_url)} has no Kopek tables "
            "(is DATABASE_URL the bot's database?)"
        ) from None
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            tables = {name: await _read(conn, t) for name, t in _tables().items()}
    finally:
        await engine.dispose()
    document = {"format": FORMAT, "version": 1, "revision": head_revision(), "tables": tables}
    body = json.dumps(document, ensure_ascii=False, indent=1)
    try:
        await asyncio.to_thread(_write, path, body)
    except OSError as exc:
        raise ConfigFileError(f"cannot write {path}: {exc.strerror}") from None
    return {name: len(rows) for name, rows in tables.items()}


def _write(path: Path, body: str) -> None:
    """Write ``body`` beside ``path`` and rename it over ``path`` once complete."""
    from budget.books.export import ReplacedOnSuccess

    with ReplacedOnSuccess() as files:
        files.open(path).write(body)
        files.commit()


def _parse(path: Path) -> dict[str, list[dict[str, Any]]]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigFileError(f"cannot read {path}: {type(exc).__name__}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ConfigFileError(f"{path} is not a Kopek configuration file (export-config)")
    if document.get("revision") != head_revision():
        raise ConfigFileError(
            f"{path} was exported at schema revision {document.get('revision')!r}, this "
            f"version's is {head_revision()}: export it again with the same version"
        )
    tables = document.get("tables")
    if not isinstance(tables, dict) or set(tables) - set(CONFIG_TABLES):
        raise ConfigFileError(f"{path} names tables this command does not carry")
    out: dict[str, list[dict[str, Any]]] = {}
    for name, rows in tables.items():
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ConfigFileError(f"{path}: table {name} is not a list of rows")
        out[name] = rows
    return out


async def import_config(database_url: str, path: Path) -> dict[str, int]:
    """Migrate ``database_url`` to head and insert the rows of ``path`` (one transaction).

    Returns:
        rows inserted per table.

    Raises:
        ConfigFileError: the file is not an export of this schema version, or the target
            already holds configuration rows (nothing is changed).
        SchemaMismatch: the target is ahead of this code.
        OSError, sqlalchemy.exc.SQLAlchemyError: the database cannot be used.
    """
    rows_by_table = await asyncio.to_thread(_parse, path)
    await asyncio.to_thread(migrate, database_url)
    tables = _tables()
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            for name, table in tables.items():
                if await conn.scalar(_carried(table, select(func.count()).select_from(table))):
                    raise ConfigFileError(
                        f"the target database already has rows in {name}: import into a "
                        "database that has none (a fresh deployment)"
                    )
            for name, table in tables.items():
                rows = [_load(table, row) for row in rows_by_table.get(name, [])]
                if rows:
                    await conn.execute(insert(table), rows)
            if conn.dialect.name == "postgresql":
                await _advance_sequences(conn, tables, rows_by_table)
    finally:
        await engine.dispose()
    return {name: len(rows_by_table.get(name, [])) for name in tables}


async def _advance_sequences(
    conn: AsyncConnection, tables: dict[str, Table], rows: dict[str, list[dict[str, Any]]]
) -> None:
    """Move each ``id`` sequence past the copied ids (PostgreSQL does not, on an insert
    that gives the id; SQLite's rowid does by itself)."""
    for name, table in tables.items():
        if "id" in table.c and rows.get(name):
            # ``name`` is one of CONFIG_TABLES (ours), never input
            sql = f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), (SELECT max(id) FROM {name}))"  # noqa: S608, E501
            await conn.execute(text(sql))


def failure_line(command: str, exc: BaseException, database_url: str) -> str:
    """One line for a database failure of ``command`` (``export-config`` or
    ``import-config``): the schema check's sentence, or the driver's reason, after what
    could not be done and where (host and database only; the caller redacts again)."""
    where = location(database_url)
    verb = "export from" if command == "export-config" else "import into"
    if isinstance(exc, SchemaMismatch):
        return f"cannot {verb} the database {where}: {exc}"
    reason = failure_reason(exc)
    if isinstance(exc, OSError) and sqlite_path(database_url) is None:
        return f"cannot reach the database {where}: {reason}"  # refused, unknown host, timeout
    return f"cannot {verb} the database {where}: {reason}"


def main(command: str, argv: list[str]) -> int:
    """``python -m bot export-config FILE`` / ``import-config FILE``; returns the exit code."""
    from bot.cli import config_error, prog
    from bot.settings import DatabaseSettings, database_url_passwords

    if len(argv) != 1:
        print(f"usage: {prog()} {command} FILE", file=sys.stderr)
        return 2
    path = Path(argv[0])
    try:
        url = DatabaseSettings().database_url
    except ValidationError as exc:
        print(config_error(exc), file=sys.stderr)
        return 2
    secrets = database_url_passwords(url)
    run = export_config if command == "export-config" else import_config
    try:
        counts = asyncio.run(run(url, path))
    except ConfigFileError as exc:
        print(redact(f"kopek: {exc}", secrets), file=sys.stderr)
        return 2
    except (SchemaMismatch, OSError, SQLAlchemyError) as exc:
        print(redact(f"kopek: {failure_line(command, exc, url)}", secrets), file=sys.stderr)
        return 2
    done = "exported to" if command == "export-config" else "imported from"
    summary = ", ".join(f"{name} {n}" for name, n in counts.items())
    print(f"kopek: {sum(counts.values())} rows {done} {path} ({summary})")
    return 0
