"""Alembic environment: async engine from DATABASE_URL; metadata of every package."""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy import MetaData, text
from sqlalchemy.engine import Connection

from bot.storage.migrate import MIGRATION_LOCK_KEY
from budget.kernel.db import create_engine, make_ddl_transactional
from budget.kernel.schema import refuse_unknown

config = context.config

if config.config_file_name is not None:  # the alembic command line with alembic.ini: say
    # each step it runs ("Running downgrade 0022_… -> 0021_…"); the bot passes no file
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _metadata() -> list[MetaData]:
    # Each package owns its tables; Alembic compares against all of them.
    from bot.storage.tables import metadata as bot_metadata
    from budget.storage.tables import metadata as budget_metadata
    from scheduler.tables import metadata as scheduler_metadata

    return [budget_metadata, scheduler_metadata, bot_metadata]


target_metadata = _metadata()


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if not url:  # the alembic command line: DATABASE_URL from the environment or .env
        from bot.settings import DatabaseSettings

        url = DatabaseSettings().database_url
    return url


def _run(connection: Connection) -> None:
    postgres = connection.dialect.name == "postgresql"
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=not postgres,  # SQLite ALTER TABLE support; plain ALTER elsewhere
        transactional_ddl=True,  # see make_ddl_transactional: all or nothing
    )
    with context.begin_transaction():
        if postgres:
            # processes starting at once: one migrates, the others wait, then see head
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        refuse_unknown(context.script, tuple(context.get_context().get_current_heads()))
        context.run_migrations()


async def _run_async() -> None:
    engine = create_engine(_url())
    make_ddl_transactional(engine)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_run)
            await conn.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_async())
