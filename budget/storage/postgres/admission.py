"""PostgreSQL SQL of an operation's admission: the kill switches, the operations in flight
and the ones of the last minute (:func:`budget.policy.steps.admission_refusal`), then
the operation's row, which takes an in-flight slot.

One user's admissions take turns under a transaction-scoped advisory lock on the user id
(``'kopek-admission:' || user``), and the counts are read after it is granted, so two
processes never both take the user's last slot. Two ways, the same rule:

* :func:`begin_operation_at_once` (where the database has migration
  ``0056_admission_at_once``'s functions; :data:`ADMISSION_AT_ONCE_OK`) — two
  statements, each its own transaction: the read with the digest of its values
  (``kopek_admission_digest``), no lock; the decision in Python; then the operation's
  ``INSERT`` guarded by ``kopek_admission_unchanged``, which takes the lock and reads
  the digest again in a snapshot taken after it was granted. Inserted only when the
  digest is unchanged: the decision was then made on exactly what the locked read would
  have read, and the lock is held to the insert's commit. Otherwise nothing is written
  and the caller runs the locked transaction (decision 318:
  ``docs/decisions/318-an-admission-is-a-read-and-a-guarded-insert.md``).
* :func:`begin_operation` — ``BEGIN``, the lock, the read, the insert, ``COMMIT``: five
  round trips, the lock held across three of them.

Fencing: the read checks this process's ``budget_processes`` row
(:class:`~budget.errors.ProcessFenced`, nothing written); the digest covers it too.
Times are epoch seconds of the ledger clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from budget.config import LedgerConfig
from budget.errors import ProcessFenced
from budget.policy.rules import pick_kill, plan_now, utc
from budget.policy.steps import admission_caps, admission_refusal
from budget.protocol import OperationTicket
from budget.storage.postgres.rows import KILLS_OF, translate
from budget.storage.sql.rows import kill_state
from budget.storage.sql.statements import OPERATION_INSERT, operation_row
from budget.storage.store import Admission, RefusedStep

__all__ = ["ADMISSION_AT_ONCE_OK", "begin_operation", "begin_operation_at_once"]

_ADMISSION_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('kopek-admission:' || $1, 0))"
_ADMISSION_READ = (
    "SELECT (SELECT team FROM budget_team_members WHERE user_id = $1),"  # noqa: S608 - fixed fragments
    + KILLS_OF.format(
        user="$2",
        team="COALESCE((SELECT team FROM budget_team_members WHERE user_id = $1), '')",
    )
    + ", (SELECT COUNT(*) FROM budget_operations WHERE user_id = $1 AND ended_at IS NULL"
    " AND expires_at > $3), (SELECT COUNT(*) FROM budget_operations WHERE user_id = $1"
    " AND started_at > $4), (SELECT MIN(started_at) FROM budget_operations"
    " WHERE user_id = $1 AND started_at > $4),"
    " EXISTS (SELECT 1 FROM budget_processes WHERE process_id = $5),"
    " (SELECT ROW(plan, until) FROM budget_user_plans WHERE user_id = $1)"
)
#: :data:`_ADMISSION_READ` without a lock or a transaction, with the digest of what it
#: read (``kopek_admission_digest``, migration ``0056_admission_at_once``): the first of
#: the two round trips of an admission (decision 318).
_ADMISSION_PEEK = _ADMISSION_READ + ", kopek_admission_digest($1, $3, $4, $5)"
#: The operation's row (``OPERATION_INSERT``'s values, $1..$12) inserted only when
#: ``kopek_admission_unchanged`` — the user's admission lock taken, then the digest read
#: again ($13 user, $14 now, $15 a minute ago, $16 process) — still gives the digest
#: the client decided on ($17); one statement, its own transaction, the lock released
#: at its commit. Returns a row when it inserted.
_ADMIT_IF_UNCHANGED = (
    "WITH ok AS (SELECT kopek_admission_unchanged($13, $14, $15, $16, $17) AS ok)"
    " INSERT INTO budget_operations (operation_id, user_id, origin, team, started_at,"
    " expires_at, ended_at, max_musd, max_requests, requests, committed_musd, day_key,"
    " process_id, chat_id, plan) SELECT $1::text, $2::bigint, $3::text, $4::text,"
    " $5::timestamptz, $6::timestamptz, NULL, $7::bigint, $8::integer, 0, 0, $9::text,"
    " $10::text, $11::bigint, $12::text FROM ok WHERE ok.ok RETURNING 1"
)
#: Whether the database has ``kopek_admission_unchanged`` (the bot's migrations made it;
#: a ledger on tables made without them admits in the locked transaction).
ADMISSION_AT_ONCE_OK = (
    "SELECT to_regprocedure('kopek_admission_unchanged(bigint, timestamptz, timestamptz,"
    " text, text)') IS NOT NULL"
)


async def begin_operation(
    conn: Any, cfg: LedgerConfig, process_id: str, now: datetime, admission: Admission
) -> OperationTicket:
    """Admit an operation (kill, in-flight, rate) and take an in-flight slot, in a
    transaction on ``conn``. One user's admissions are serialised by an advisory lock on
    the user id (the counts are read after it, so two processes never both take the last
    slot).

    Raises:
        ProcessFenced: this process is not registered (taken for dead).
        RefusedStep: the admission rule refuses.
    """
    t = now.timestamp()
    await conn.execute(_ADMISSION_LOCK, str(admission.user_id))
    read = await conn.fetchrow(_ADMISSION_READ, *_admission_args(admission, t, process_id))
    team, plan = _admitted(cfg, admission.user_id, t, tuple(read))
    await conn.execute(
        translate(OPERATION_INSERT), *operation_row(cfg, process_id, now, admission, team, plan)
    )
    return OperationTicket(
        admission.operation_id, admission.user_id, admission.origin, team, admission.chat_id, plan
    )


async def begin_operation_at_once(
    conn: Any, cfg: LedgerConfig, process_id: str, now: datetime, admission: Admission
) -> OperationTicket | None:
    """:func:`begin_operation` in two statements of their own on ``conn`` (outside any
    transaction; decision 318): the read without a lock, the decision in Python, then
    the insert guarded by ``kopek_admission_unchanged`` (the lock, the same values read
    again). ``None``: something the decision rests on changed between the two (another
    admission of the user, a kill switch, a plan…): nothing written, the caller runs
    :func:`begin_operation`. A refusal is decided on the read, as the locked path would
    have decided a moment earlier; it writes nothing.

    Raises:
        ProcessFenced: this process is not registered (taken for dead).
        RefusedStep: the admission rule refuses.
    """
    t = now.timestamp()
    args = _admission_args(admission, t, process_id)
    *read, seen = tuple(await conn.fetchrow(_ADMISSION_PEEK, *args))
    team, plan = _admitted(cfg, admission.user_id, t, tuple(read))
    row = operation_row(cfg, process_id, now, admission, team, plan)
    user_id, _, since, _, process = args
    if await conn.fetchval(_ADMIT_IF_UNCHANGED, *row, user_id, t, since, process, seen) is None:
        return None
    return OperationTicket(
        admission.operation_id, admission.user_id, admission.origin, team, admission.chat_id, plan
    )


def _admission_args(admission: Admission, t: float, process_id: str) -> tuple[Any, ...]:
    """:data:`_ADMISSION_READ`'s arguments: user, user as text, now, a minute ago, process."""
    return (admission.user_id, str(admission.user_id), t, t - 60.0, process_id)


def _admitted(
    cfg: LedgerConfig, user_id: int, t: float, read: tuple[Any, ...]
) -> tuple[str | None, str | None]:
    """The admission rule on :data:`_ADMISSION_READ`'s row: the user's team and plan.

    Raises:
        ProcessFenced: this process is not registered.
        RefusedStep: the rule refuses.
    """
    team, kills, open_ops, recent, oldest, registered, own = read
    if not registered:
        raise ProcessFenced()
    stored, until = (None, None) if own is None else (own[0], own[1])
    plan = plan_now(cfg, stored, until, t)
    inflight, per_minute = admission_caps(cfg, plan)
    refusal = admission_refusal(
        pick_kill(kill_state(k) for k in kills), open_ops, inflight, recent, per_minute, utc(oldest)
    )
    if refusal is not None:
        raise RefusedStep(refusal, user_id, plan)
    return team, plan
