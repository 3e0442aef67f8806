"""the call lease in one round trip: a PostgreSQL function that takes it

``kopek_take_call_lease`` runs what ``llm.keys.claims.CallClaims.try_take`` sent as a
transaction of four round trips (``BEGIN``, the advisory lock, the take, ``COMMIT``)
as one statement, its own transaction: the lock, then — a statement of its own inside
the function, so its snapshot sees every lease committed before the lock was granted
— the lapsed and dead processes' leases deleted, the live ones counted and the new one
inserted below the limit. The lock is the same key as before (a replica of the
previous version, mid rolling upgrade, still takes turns with it) and is now held for
the server's few microseconds, not across three round trips (decision 293). PostgreSQL
only (SQLite deployments have no leases); downgrade drops the function.

Revision ID: 0054_call_lease_function
Revises: 0053_free_shares
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0054_call_lease_function"
down_revision: str | None = "0053_free_shares"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: $1 lease id, $2 process id, $3 priority, $4 now and $5 its lapse (epoch seconds), $6
#: the limit, $7 the oldest heartbeat of a live process (``budget_processes`` keeps
#: ``timestamptz``); true when the lease was taken.
_TAKE = """
CREATE OR REPLACE FUNCTION kopek_take_call_lease(
    lease text, process text, prio integer, t double precision,
    lapse double precision, cap integer, live_after timestamptz
) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(hashtextextended('kopek-call-leases', 0));
    WITH gone AS (
        DELETE FROM call_leases WHERE expires_at <= t OR process_id NOT IN
            (SELECT process_id FROM budget_processes WHERE heartbeat_at >= live_after)
    )
    INSERT INTO call_leases (lease_id, process_id, priority, taken_at, expires_at)
    SELECT lease, process, prio, t, lapse
    WHERE (SELECT count(*) FROM call_leases WHERE expires_at > t AND process_id IN
        (SELECT process_id FROM budget_processes WHERE heartbeat_at >= live_after)) < cap;
    RETURN FOUND;
END
$fn$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_TAKE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "DROP FUNCTION IF EXISTS kopek_take_call_lease("
            "text, text, integer, double precision, double precision, integer, timestamptz)"
        )
