"""Who is due for a digest at a given instant (pure functions, no I/O).

A user's digest for local date *D* is due at :func:`due_instant` — their ``HH:MM`` on
*D* in their own IANA zone, as a UTC instant:

* normal day: the wall time, converted (09:00 Europe/Berlin in winter → 08:00 UTC);
* spring-forward gap (the wall time does not exist, e.g. 02:30 Europe/Berlin on
  2026-03-29): the first valid minute after it — 03:00 CEST = 01:00 UTC;
* fall-back fold (the wall time happens twice, e.g. 02:30 on 2026-10-25): the first
  occurrence (``fold=0``, 02:30 CEST = 00:30 UTC). The run table's unique
  (user, local date) key makes the second occurrence a no-op.

Worked timeline (Europe/Berlin, digest 02:30, spring-forward day 2026-03-29)::

    00:59 UTC  local 01:59 CET   not due
    01:00 UTC  local 03:00 CEST  due (first valid minute after 02:30) → one digest
    01:01 UTC  …                 the run for 2026-03-29 exists → nothing more

A digest is *late* when it goes out more than ``late_after_s`` after its due instant
(the bot was down at that time, or the ledger deferred it).

Which digests a tick queues (:func:`due_jobs`; ``docs/decisions/031-digests-across-restarts.md``):

* today's (the user's current local date), once due, unless its run has ended;
* the previous local date's, within the catch-up window (its due instant at most
  ``catch_up_hours`` ago), when its run is still open (deferred past midnight, say) or
  when it has no run and its due instant fell after the last tick of any process — no
  process was looking then: the bot was down across the user's midnight. A user who
  subscribed, or set that time, after the instant while the bot ran gets nothing extra;
* every ``ready`` run of any date whose flood wait is over: it was generated (its posts
  taken off the cursors), so it is delivered, whoever's timer it was.

Worked timeline (Europe/Berlin, digest 23:50, window 6 h, the bot stopped for a deploy)::

    21:40 UTC  local 22:40  last tick before the stop (digest_ticks)
    22:50 UTC  local 23:50  2026-03-05's digest due — no process is running
    23:10 UTC  local 00:10  start: today is 03-06 (due at 23:50, not yet); 03-05's due
                            instant is 20 min ago (≤ 6 h) and after the last tick → sent,
                            after the late notice that names 03-05; its run is unique
    23:11 UTC  …            the run for 03-05 is sent → nothing more

An older date (down for longer than the window) is not sent on its own; the next digest
covers its posts, because cursors are per subscription.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from budget.policy.windows import local_instant
from scheduler.job import DueCandidates, Job, RunKey
from scheduler.profiles import parse_digest_time
from scheduler.tables import DigestRun, RunStatus

__all__ = [
    "Due",
    "DueJobs",
    "catch_up_due",
    "due_instant",
    "due_jobs",
    "is_late",
    "local_date",
    "todays_due",
]

#: Statuses of a run that has not ended (it may be worked on).
_OPEN = frozenset({RunStatus.PENDING, RunStatus.DEFERRED, RunStatus.READY})


@dataclass(frozen=True, slots=True)
class Due:
    """A local date's digest and when it is due.

    Attributes:
        day: the local date in the user's zone.
        at: the aware UTC instant it is due (:func:`due_instant`).
    """

    day: date
    at: datetime


def due_instant(day: date, at: time, tz: ZoneInfo) -> datetime:
    """The UTC instant of local ``at`` on ``day`` in ``tz`` (gap → next valid minute; fold → first).

    Args:
        day: the local date.
        at: local wall time (seconds are ignored).
        tz: the user's zone.

    Returns:
        An aware UTC datetime (see :func:`budget.policy.windows.local_instant`).
    """
    return local_instant(day, at, tz)


def local_date(now: datetime, tz: ZoneInfo) -> date:
    """The local date in ``tz`` at the aware instant ``now``."""
    return now.astimezone(tz).date()


def todays_due(now: datetime, at: time, tz: ZoneInfo) -> Due | None:
    """Today's (local) digest if it is due at ``now``.

    Args:
        now: aware current instant.
        at: the user's local digest time.
        tz: the user's zone.

    Returns:
        Today's digest when its due instant has passed, else ``None``.
    """
    day = local_date(now, tz)
    due = due_instant(day, at, tz)
    return Due(day, due) if now >= due else None


def catch_up_due(now: datetime, at: time, tz: ZoneInfo, window_s: float) -> Due | None:
    """The previous local date's digest if its due instant is at most ``window_s``
    seconds before ``now`` (``window_s`` 0: never).

    Args:
        now: aware current instant.
        at: the user's local digest time.
        tz: the user's zone.
        window_s: the catch-up window, seconds.
    """
    if window_s <= 0:
        return None
    day = local_date(now, tz) - timedelta(days=1)
    due = due_instant(day, at, tz)
    return Due(day, due) if 0 <= (now - due).total_seconds() <= window_s else None


@dataclass(frozen=True, slots=True)
class DueJobs:
    """What a tick queues (:func:`due_jobs`).

    Attributes:
        jobs: one per run, in the order found.
        opened: the catch-ups among them that have no run yet (the tick creates their
            runs ``pending`` before it records itself, so a stop right after loses none).
    """

    jobs: list[Job] = field(default_factory=list)
    opened: list[Job] = field(default_factory=list)


def _may_go(run: DigestRun, now: datetime) -> bool:
    """The run has not ended and waits for nothing (no retry time in the future)."""
    return RunStatus(run.status) in _OPEN and (
        run.retry_not_before is None or run.retry_not_before <= now
    )


def due_jobs(now: datetime, found: DueCandidates, *, default_tz: str, catch_up_s: float) -> DueJobs:
    """The digests to queue at ``now`` (the rules in the module docstring).

    Args:
        now: aware current instant.
        found: the profiles, runs and last tick read for this tick.
        default_tz: the zone of users without one.
        catch_up_s: the catch-up window for the previous local date, seconds.
    """
    due = DueJobs()
    seen: set[RunKey] = set(found.held)  # a live other process is making or delivering those

    def add(job: Job) -> bool:
        if job.key in seen:
            return False
        seen.add(job.key)
        due.jobs.append(job)
        return True

    for profile in found.profiles:
        at = parse_digest_time(profile.digest_time)
        tz = ZoneInfo(profile.tz or default_tz)
        today = todays_due(now, at, tz)
        if today is not None:
            run = found.runs.get(RunKey(profile.user_id, today.day))
            if run is None or _may_go(run, now):
                add(Job(profile.user_id, today.day, today.at))
        missed = catch_up_due(now, at, tz, catch_up_s)
        if missed is not None:
            run = found.runs.get(RunKey(profile.user_id, missed.day))
            job = Job(profile.user_id, missed.day, missed.at)
            if run is not None:
                if _may_go(run, now):
                    add(job)
            elif (found.last_tick is None or missed.at > found.last_tick) and add(job):
                due.opened.append(job)
    for run in found.ready:
        add(Job(run.user_id, run.local_date, run.due_at))
    return due


def is_late(sent_at: datetime, due: datetime, late_after_s: float) -> bool:
    """True when ``sent_at`` is more than ``late_after_s`` seconds after ``due``."""
    return (sent_at - due).total_seconds() > late_after_s
