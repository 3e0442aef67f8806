"""Alembic migrations, shipped inside the package (``bot/migrations``, package data).

The scripts are found with :mod:`importlib.resources` (Alembic's ``package:path``
script location), so an installed wheel migrates exactly as a checkout does; no
``alembic.ini`` is needed. Nothing here imports aiogram.

On PostgreSQL, where several processes may start at once, the whole upgrade runs in one
transaction holding the advisory lock :data:`MIGRATION_LOCK_KEY`
(``pg_advisory_xact_lock``): the first process migrates, the others wait, then find the
schema at head and change nothing. (SQLite has one process per file: the instance lock.)
A database whose revision this code does not know — a newer version migrated it — is
never touched: :class:`~budget.kernel.schema.SchemaMismatch` (``ahead``). The check of
which schema a database is at lives below the bot, in :mod:`budget.kernel.schema`
(``python -m budget`` runs it too).
"""

from __future__ import annotations

from alembic import command

from budget.kernel.schema import alembic_config

__all__ = ["MIGRATION_LOCK_KEY", "migrate"]

#: Key of the PostgreSQL advisory lock the migrations run under ("kopek" in ASCII).
MIGRATION_LOCK_KEY = 0x6B6F70656B


def migrate(database_url: str) -> None:
    """``alembic upgrade head`` on ``database_url`` (idempotent; blocking: run in a thread).

    Raises:
        SchemaMismatch: the database is ahead of this code (nothing was changed).
        OSError, sqlalchemy.exc.SQLAlchemyError: the database cannot be opened or changed.
    """
    command.upgrade(alembic_config(database_url), "head")
