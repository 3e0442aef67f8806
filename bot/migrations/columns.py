"""The column types the migration scripts share, one definition each (the scripts in
``versions/`` import them; what they create is unchanged).

* :data:`BIG` — µUSD amounts and Telegram ids: BIGINT on PostgreSQL (its INTEGER is
  32-bit); INTEGER on SQLite (already 64-bit; existing SQLite files keep the same DDL).
* :data:`TIME` — the ledger's times: ``timestamptz`` on PostgreSQL, REAL epoch seconds
  on SQLite.
* :data:`UTC` — UTC datetimes: ``timestamptz`` on PostgreSQL; SQLite keeps naive UTC.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["BIG", "TIME", "UTC"]

BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIME = sa.Float().with_variant(sa.DateTime(timezone=True), "postgresql")
UTC = sa.DateTime().with_variant(sa.DateTime(timezone=True), "postgresql")
