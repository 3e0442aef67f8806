"""Alembic migrations, shipped inside the package (``bot/migrations``, package data).

The scripts are found with :mod:`importlib.resources` (Alembic's ``package:path``
script location), so an installed wheel migrates exactly as a checkout does; no
``alembic.ini`` is needed. Nothing here imports aiogram.
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config

__all__ = ["SCRIPT_LOCATION", "alembic_config", "migrate"]

#: Where the migration scripts are: the ``migrations`` folder of the ``bot`` package.
SCRIPT_LOCATION = "bot:migrations"


def alembic_config(database_url: str) -> Config:
    """An Alembic config for ``database_url`` with the packaged scripts."""
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def migrate(database_url: str) -> None:
    """``alembic upgrade head`` on ``database_url`` (idempotent; blocking: run in a thread).

    Raises:
        OSError, sqlalchemy.exc.SQLAlchemyError: the database cannot be opened or changed.
    """
    command.upgrade(alembic_config(database_url), "head")
