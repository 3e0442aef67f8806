"""The savepoint and rollback helpers of :mod:`budget.kernel.sqlite_writer` (one step is
one ``SAVEPOINT step`` inside its group's transaction). They run on the writer thread,
on its connection; a failure rolls the whole transaction back rather than raising.
This module imports nothing of the project."""

from __future__ import annotations

import contextlib
import sqlite3

__all__ = ["release", "rollback", "undo"]


def release(conn: sqlite3.Connection) -> bool:
    """Release the step's savepoint: ``False`` when that failed (the transaction is then
    rolled back whole)."""
    try:
        conn.execute("RELEASE step")
    except sqlite3.Error:
        rollback(conn)
        return False
    return True


def undo(conn: sqlite3.Connection) -> None:
    """Roll back one step's savepoint (or the whole transaction if that fails)."""
    if not conn.in_transaction:
        return
    try:
        conn.execute("ROLLBACK TO step")
        conn.execute("RELEASE step")
    except sqlite3.Error:
        rollback(conn)


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open (SQLite may have rolled it back itself,
    e.g. on SQLITE_FULL: that error must not replace the real failure)."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
