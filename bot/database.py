"""What the bot says when its database cannot be used at start (no aiogram here).

:func:`location` names a database without its credentials; :func:`start_failure` turns
an exception from the start-up migration into an exit code and one line. Neither ever
formats the URL itself (it may hold a password); the line is redacted once more by the
caller with every secret of the settings.

Exit codes (as the rest of ``python -m bot``): 2 for a database the bot cannot run
with as configured (a schema ahead of this code, a refused login, a missing database,
a SQLite file that cannot be written); 1 for a PostgreSQL server that cannot be reached
(connection refused, unknown host, timeout) — the same as an unreachable Bot API.
"""

from __future__ import annotations

from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from bot.migrate import SchemaMismatch
from budget.db import sqlite_path

__all__ = ["location", "start_failure"]


def location(database_url: str) -> str:
    """The SQLite file's path, or ``postgresql://host:port/database`` (no user, no
    password) of ``database_url``."""
    path = sqlite_path(database_url)
    if path is not None:
        return str(path)
    url = make_url(database_url)
    port = f":{url.port}" if url.port else ""
    return f"{url.get_backend_name()}://{url.host or ''}{port}/{url.database or ''}"


def _reason(exc: BaseException) -> str:
    """The driver's own sentence (``password authentication failed for user …``), not
    SQLAlchemy's wrapper with its statement, parameters and help link."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        inner: BaseException = exc.orig
        args = inner.args
        text = str(args[0]) if args else ""
        return text or type(inner).__name__
    return f"{type(exc).__name__}: {exc}"


def start_failure(exc: BaseException, database_url: str) -> tuple[int, str]:
    """Exit code and one line for a failure of the start-up migration of ``database_url``.

    Args:
        exc: :class:`bot.migrate.SchemaMismatch`, an ``OSError`` or a SQLAlchemy error.

    Returns:
        ``(code, line)``: see the module docstring for the codes; ``line`` has no line
        break and no credentials of the URL (the caller still redacts it).
    """
    where = location(database_url)
    if isinstance(exc, SchemaMismatch):
        return 2, f"cannot start on the database {where}: {exc}"
    on_sqlite = sqlite_path(database_url) is not None
    reason = " ".join(_reason(exc).split())
    if not on_sqlite and isinstance(exc, OSError):
        return 1, f"cannot reach the database {where}: {reason}"
    if isinstance(exc, OSError | SQLAlchemyError):
        return 2, f"cannot prepare the database {where}: {reason}"
    return 1, f"cannot prepare the database {where}: {type(exc).__name__}"
