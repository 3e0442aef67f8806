"""What the ledger reports (``/budget``, ``/me``, metrics). Money is integer µUSD;
times are aware UTC datetimes; "today" is the current day in BUDGET_TZ."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from budget.types import Level, Window

__all__ = [
    "BucketStatus",
    "EstimateStats",
    "HoldEntry",
    "KillState",
    "LedgerStatus",
    "PayerStatus",
    "PlanTally",
    "PlansHeld",
    "ProviderSpend",
    "TeamStatus",
    "UserStatus",
]


@dataclass(frozen=True, slots=True)
class BucketStatus:
    """One level/window now: limit (``None`` = none), settled, held, late, remaining, reset."""

    level: Level
    scope: str
    window: Window
    key: str
    limit_musd: int | None
    settled_musd: int
    held_musd: int
    late_musd: int
    remaining_musd: int | None
    resets_at: datetime


@dataclass(frozen=True, slots=True)
class PlansHeld:
    """The plan every user is held on at one moment, read in one query.

    Attributes:
        by_user: the users held on another plan than ``default``.
        default: every other user's plan (``None``: the ledger has no plans).
    """

    by_user: dict[int, str | None]
    default: str | None

    def of(self, user_id: int) -> str | None:
        """The plan ``user_id`` was held on."""
        return self.by_user.get(user_id, self.default)


@dataclass(frozen=True, slots=True)
class KillState:
    """A kill switch (global, or scoped to a user/team).

    Attributes:
        killed: tripped now.
        reason: the admin's reason, or for the burn-rate trigger e.g.
            ``"automatic: settled $0.000700 in the last 60 min > threshold $0.000500"``
            (already says "automatic": do not prefix it again).
        automatic: tripped by the burn-rate trigger.
        by: admin user id (``None`` for automatic).
        changed_at: when it was last tripped or reset.
        scope_kind: ``"global"``, ``"user"`` or ``"team"``; ``scope`` the user id/team name.
    """

    killed: bool
    reason: str = ""
    automatic: bool = False
    by: int | None = None
    changed_at: datetime | None = None
    scope_kind: str = "global"
    scope: str = ""


@dataclass(frozen=True, slots=True)
class HoldEntry:
    """One hold as the ledger booked it (its export row's money): what ``/cost``
    shows under an answer.

    Attributes:
        hold_id: the hold.
        state: ``held``, ``settled``, ``released`` or ``expired``.
        provider, model: where the attempt went.
        actual_musd: what was booked (µUSD; 0 for a free-tier provider; ``None`` while
            held or after a release).
        list_actual_musd: the same usage at list price (µUSD; ``None`` when the model
            has no list price or nothing was booked).
        estimated: booked on Kopek's own count or at the ceiling (the provider gave no
            usable usage): "about".
    """

    hold_id: str
    state: str
    provider: str
    model: str
    actual_musd: int | None
    list_actual_musd: int | None
    estimated: bool


@dataclass(frozen=True, slots=True)
class ProviderSpend:
    """Per provider, today (the day each hold was granted): calls settled, money
    settled, list-price equivalent (``None`` when some model had no list price and
    nothing known was summed), µUSD held now, and how many of the calls are
    *estimated* (an expired hold booked at its bound — ceiling plus admission margin —, or
    an interrupted call).

    Expired holds count as calls and as spend at their bound until their real
    settle (or release) corrects them. ``calls_by_model``: the same calls per model
    (``(model, calls)``, by model name): what the router sent to the small models.
    """

    provider: str
    calls: int
    settled_musd: int
    list_musd: int | None
    held_musd: int
    estimated_calls: int = 0
    calls_by_model: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class EstimateStats:
    """Estimate error of today's settled attempts (actual − ceiling; ≤ 0 when the
    ceiling held). Token errors cover every attempt, money errors paid ones only;
    ratio = actual ÷ ceiling in tokens. ``None`` when there is nothing to measure."""

    count: int = 0
    median_token_error: int | None = None
    worst_token_error: int | None = None
    median_musd_error: int | None = None
    worst_musd_error: int | None = None
    median_ratio: float | None = None
    worst_ratio: float | None = None
    over_ceiling: int = 0


@dataclass(frozen=True, slots=True)
class PlanTally:
    """Today by plan: settled µUSD of the operations of each plan (their plan at
    admission), and refusals per ``(plan, reason)`` of the users the ledger knew the plan
    of. Is a paid plan mostly refused for money? Then its price, not the code, is the
    problem."""

    spend_musd: dict[str, int] = field(default_factory=dict)
    refusals: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LedgerStatus:
    """The whole ledger now.

    Attributes:
        buckets: global and provider levels, every window, current keys.
        outstanding_holds: holds granted and not yet settled/released/expired.
        exposure_musd: sum of outstanding ceilings — the most that can still be
            spent by work already admitted (what a kill cannot stop).
        kill: the global switch; ``scoped_kills`` the tripped user/team switches.
        providers: today's spend per provider.
        spend_by_origin_musd: today's settled spend per origin (chat, digest).
        refusals_today: count per refusal reason.
        estimate: estimate-error statistics (today).
        operations_today / requests_today: counts; ``requests_per_operation``
            their ratio (``None`` without operations) — a rise without new
            messages is the sign of a loop.
        expired_today / late_settled_musd_today: expiries recorded today (TTL
            sweeper and start-up sweep) and the actual cost of settles that arrived
            after their hold had expired (holds granted today).
        expired_unreconciled_today / expired_booked_musd_today: holds granted today
            that expired and are still booked at their bound (ceiling plus admission
            margin), flagged estimated
            (no settle or release has corrected them yet), and that money; it is
            already part of every ``settled`` figure above.
    """

    at: datetime
    tz: str
    buckets: list[BucketStatus]
    outstanding_holds: int
    exposure_musd: int
    kill: KillState
    scoped_kills: list[KillState]
    providers: list[ProviderSpend]
    spend_by_origin_musd: dict[str, int]
    refusals_today: dict[str, int]
    estimate: EstimateStats
    operations_today: int
    requests_today: int
    requests_per_operation: float | None
    expired_today: int
    late_settled_musd_today: int
    teams: dict[str, list[int]] = field(default_factory=dict)
    expired_unreconciled_today: int = 0
    expired_booked_musd_today: int = 0
    by_plan: PlanTally = field(default_factory=PlanTally)


@dataclass(frozen=True, slots=True)
class UserStatus:
    """One user now: their user, plan, team and global buckets; operations in flight;
    messages counted today and the courtesy cap (``None`` = off); a scoped kill; their
    plan (``None``: no plans) and when it ends (``None``: it does not)."""

    user_id: int
    team: str | None
    buckets: list[BucketStatus]
    inflight: int
    outstanding_holds: int
    messages_today: int
    messages_limit: int | None
    killed: KillState | None
    settled_today_musd: int
    plan: str | None = None
    plan_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class PayerStatus:
    """One group chat or one plan as a payer now.

    Attributes:
        level: :attr:`Level.CHAT` or :attr:`Level.PLAN`.
        scope: the chat id as text, or the plan's name.
        buckets: its buckets (hour, day, month) with their limits.
        spend_today_musd: settled µUSD today per payer whose holds were booked on it:
            a user (a non-negative id) or, in a chat, a chat that wrote as itself
            (``sender_chat``: a channel, the group's anonymous admins; a negative id).
        members: a plan's users with a plan of their own (the default plan's other
            users are not counted); for a chat, the users who spent in it today (never
            a ``sender_chat``: it is not a person).
    """

    level: Level
    scope: str
    buckets: list[BucketStatus]
    spend_today_musd: dict[int, int]
    members: int


@dataclass(frozen=True, slots=True)
class TeamStatus:
    """One team now: members, team buckets, members' spend today (µUSD)."""

    name: str
    members: list[int]
    buckets: list[BucketStatus]
    member_spend_today_musd: dict[int, int]
    killed: KillState | None
