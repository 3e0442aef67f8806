"""Which schema a database is at, against this code's Alembic revisions: the check that
refuses a database behind (not migrated yet) or ahead (a newer version migrated it).

The revision scripts are package data of the ``bot`` package (``bot/migrations``, found
with :mod:`importlib.resources` through Alembic's ``package:path`` script location, so an
installed wheel checks as a checkout does): this module knows them by that location
string (:data:`SCRIPT_LOCATION`) and imports nothing of the project, so ``python -m
budget`` checks the schema without importing the bot (why:
``docs/decisions/010-schema-check-in-the-kernel.md``). Applying the migrations is the
bot's (:mod:`bot.storage.migrate`). Nothing here imports aiogram.
"""

from __future__ import annotations

import asyncio

from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, inspect, text

__all__ = [
    "SCRIPT_LOCATION",
    "SchemaMismatch",
    "alembic_config",
    "check_schema",
    "current_revisions",
    "head_revision",
    "known_revision",
    "read_heads",
    "refuse_unknown",
]

#: Where the migration scripts are: the ``migrations`` folder of the ``bot`` package
#: (package data; Alembic resolves the string, no module of the project is imported here).
SCRIPT_LOCATION = "bot:migrations"


class SchemaMismatch(Exception):
    """The database schema is not the one this code was written for.

    Attributes:
        current: the database's revisions (empty: no schema yet).
        head: this code's newest revision.
        ahead: True when the database has a revision this code does not know (a newer
            version migrated it); False when it is behind (not migrated yet).
    """

    def __init__(self, current: tuple[str, ...], head: str, *, ahead: bool) -> None:
        self.current = current
        self.head = head
        self.ahead = ahead
        at = ", ".join(current) or "no schema"
        if ahead:
            text = (
                f"the database schema is at revision {at}, which this version of Kopek does "
                f"not have (its newest is {head}): a newer version migrated it; run that one"
            )
        else:
            text = (
                f"the database schema is at revision {at}, behind this version's {head}: "
                "apply the migrations (alembic upgrade head)"
            )
        super().__init__(text)


def alembic_config(database_url: str) -> Config:
    """An Alembic config for ``database_url`` with the packaged scripts."""
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    """This code's newest revision (the chain is linear)."""
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None, "the migration chain is empty"
    return head


def known_revision(script: ScriptDirectory, revision: str) -> bool:
    """True when ``revision`` is one of ``script``'s revisions."""
    try:
        return script.get_revision(revision) is not None
    except CommandError:  # alembic's ResolutionError is a CommandError
        return False


def refuse_unknown(script: ScriptDirectory, current: tuple[str, ...]) -> None:
    """Raise :class:`SchemaMismatch` (ahead) when ``current`` names a revision this code
    does not have (called by ``env.py`` under the migration lock, before any change)."""
    if any(not known_revision(script, rev) for rev in current):
        head = script.get_current_head()
        assert head is not None
        raise SchemaMismatch(current, head, ahead=True)


def read_heads(conn: Connection) -> tuple[str, ...]:
    """The revisions in ``alembic_version`` (empty: no such table), read with plain
    queries: Alembic's ``MigrationContext`` logs two INFO lines each time it is made,
    which every ``/readyz`` probe and schema-watch round would add to the log.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    if not inspect(conn).has_table("alembic_version"):
        return ()
    rows = conn.execute(text("SELECT version_num FROM alembic_version"))
    return tuple(str(r[0]) for r in rows)


async def current_revisions(database_url: str) -> tuple[str, ...]:
    """The revisions recorded in the database (``alembic_version``; empty: none).

    Raises:
        OSError, sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    from budget.kernel.db import create_engine

    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            heads = await conn.run_sync(
                lambda sync: MigrationContext.configure(sync).get_current_heads()
            )
    finally:
        await engine.dispose()
    return tuple(heads)


def check_schema(database_url: str) -> None:
    """Refuse a database whose schema is not this code's head (blocking: run in a thread).

    Raises:
        SchemaMismatch: behind (``ahead`` False) or ahead of this code.
        OSError, sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    current = asyncio.run(current_revisions(database_url))
    head = head_revision()
    if current == (head,):
        return
    script = ScriptDirectory.from_config(alembic_config(database_url))
    refuse_unknown(script, current)
    raise SchemaMismatch(current, head, ahead=False)
