"""The ledger's storage, opened from its URL in one place (by scheme, as alisaifee/limits
opens its storages): :func:`open_store`. Every step is
:class:`budget.storage.base.LedgerStore`'s; the values crossing the seam are in
:mod:`budget.storage.store`.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from budget.errors import BudgetConfigError
from budget.kernel.db import sqlite_path
from budget.storage import share_tables  # noqa: F401 - FREE_SHARE_MAX's rows on the metadata

if TYPE_CHECKING:
    from budget.config import LedgerConfig
    from budget.kernel.clock import Clock
    from budget.storage.base import LedgerStore

__all__ = ["POSTGRES_SCHEME", "open_store"]

#: The scheme of a PostgreSQL ``DATABASE_URL`` (SQLAlchemy's form; the store speaks asyncpg).
POSTGRES_SCHEME = "postgresql+asyncpg://"


def open_store(
    url: str, config: LedgerConfig, clock: Clock, *, process_id: str | None = None
) -> LedgerStore:
    """The ledger store ``url`` names (nothing is connected before its ``open()``).

    * a SQLite file (``sqlite+aiosqlite:///data/kopek.db``):
      :class:`~budget.storage.sqlite.store.SqliteStore` — one process per file;
    * ``postgresql+asyncpg://user:pass@host/db``:
      :class:`~budget.storage.postgres.store.PgStore` — shared by several processes,
      its heartbeat in ``clock``'s time (asyncpg is imported only then).

    Args:
        url: the database URL (``DATABASE_URL``); its schema is Alembic's.
        config: limits and knobs (the ledger's own object).
        clock: the ledger's clock.
        process_id: this process's id (32 characters at most); default: a new one.

    Raises:
        BudgetConfigError: any other URL (an in-memory SQLite, another engine).
    """
    process_id = process_id or uuid.uuid4().hex
    path = sqlite_path(url)
    if path is not None:
        from budget.storage.sqlite.store import SqliteStore

        return SqliteStore(path, config, process_id)
    if url.startswith(POSTGRES_SCHEME):
        from budget.storage.postgres.store import PgStore

        return PgStore(url, config, process_id, clock, full_pool=True)
    raise BudgetConfigError(
        "the ledger needs a SQLite file or a postgresql+asyncpg:// DATABASE_URL"
    )
