"""an operation admitted in two round trips: PostgreSQL functions that check the read

``kopek_admission_digest`` is the md5 of what an admission decides on for a user — the
team, the tripped kill switches that cover the user or the team, the operations in
flight, the ones started in the last minute and the oldest of them, whether the process
is registered, the user's plan — read in the caller's snapshot.
``kopek_admission_unchanged`` takes the user's admission lock (the advisory key
``budget.storage.postgres.holds`` has always taken, so a replica of the previous
version, mid rolling upgrade, still takes turns with it), then, in a statement of its
own whose snapshot sees every operation committed before the lock was granted, compares
that digest with the one the client decided on. An ``INSERT`` of the operation guarded
by it is the admission as one statement: the lock is held for the server's work, not
across the four round trips of the old transaction (decision 318). PostgreSQL only
(SQLite admits under its writer); downgrade drops the functions.

Revision ID: 0056_admission_at_once
Revises: 0055_subscription_renewals
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0056_admission_at_once"
down_revision: str | None = "0055_subscription_renewals"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: uid the user, t now (in flight: not lapsed by then), since a minute ago, process this
#: process's id: the md5 of the values ``budget.storage.postgres.admission`` decides on.
_DIGEST = """
CREATE OR REPLACE FUNCTION kopek_admission_digest(
    uid bigint, t timestamptz, since timestamptz, process text
) RETURNS text LANGUAGE sql STABLE AS $fn$
SELECT md5(ROW(
    (SELECT team FROM budget_team_members WHERE user_id = uid),
    ARRAY(SELECT ROW(killed, reason, automatic, by_user, changed_at, scope_kind, scope)
        FROM budget_kill WHERE killed = 1 AND (scope_kind = 'global'
        OR (scope_kind = 'user' AND scope = uid::text) OR (scope_kind = 'team' AND scope =
        COALESCE((SELECT team FROM budget_team_members WHERE user_id = uid), '')))
        ORDER BY scope_kind, scope),
    (SELECT COUNT(*) FROM budget_operations WHERE user_id = uid AND ended_at IS NULL
        AND expires_at > t),
    (SELECT COUNT(*) FROM budget_operations WHERE user_id = uid AND started_at > since),
    (SELECT MIN(started_at) FROM budget_operations WHERE user_id = uid AND started_at > since),
    EXISTS (SELECT 1 FROM budget_processes WHERE process_id = process),
    (SELECT ROW(plan, until) FROM budget_user_plans WHERE user_id = uid)
)::text)
$fn$
"""
#: The same arguments and ``seen``, the digest the client decided on: true when it is
#: still the digest after the user's admission lock was granted (held to the commit).
_UNCHANGED = """
CREATE OR REPLACE FUNCTION kopek_admission_unchanged(
    uid bigint, t timestamptz, since timestamptz, process text, seen text
) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    now_seen text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('kopek-admission:' || uid::text, 0));
    SELECT kopek_admission_digest(uid, t, since, process) INTO now_seen;
    RETURN now_seen = seen;
END
$fn$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_DIGEST)
        op.execute(_UNCHANGED)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "DROP FUNCTION IF EXISTS kopek_admission_unchanged("
            "bigint, timestamptz, timestamptz, text, text)"
        )
        op.execute(
            "DROP FUNCTION IF EXISTS kopek_admission_digest(bigint, timestamptz, timestamptz, text)"
        )
