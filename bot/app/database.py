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

from sqlalchemy.exc import SQLAlchemyError

from budget.kernel.db import failure_reason, location, sqlite_path
from budget.kernel.schema import SchemaMismatch

__all__ = ["location", "start_failure"]


def start_failure(exc: BaseException, database_url: str) -> tuple[int, str]:
    """Exit code and one line for a failure of the start-up migration of ``database_url``.

    Args:
        exc: :class:`bot.storage.migrate.SchemaMismatch`, an ``OSError`` or a SQLAlchemy error.

    Returns:
        ``(code, line)``: see the module docstring for the codes; ``line`` has no line
        break and no credentials of the URL (the caller still redacts it).
    """
    where = location(database_url)
    if isinstance(exc, SchemaMismatch):
        return 2, f"cannot start on the database {where}: {exc}"
    on_sqlite = sqlite_path(database_url) is not None
    reason = failure_reason(exc)
    if not on_sqlite and isinstance(exc, OSError):
        return 1, f"cannot reach the database {where}: {reason}"
    if isinstance(exc, OSError | SQLAlchemyError):
        return 2, f"cannot prepare the database {where}: {reason}"
    return 1, f"cannot prepare the database {where}: {type(exc).__name__}"
