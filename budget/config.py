"""The ledger's own configuration (filled by the composition root from ``bot.settings``).

Units: every ``*_musd`` is integer µUSD (``None`` = no limit); ``*_s`` seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Literal

from budget.errors import BudgetConfigError
from budget.policy.plans import PlanLimits
from budget.policy.windows import WindowKeys, window_keys, zone
from budget.types import HOLD_ONLY_ORIGINS, Level, Origin, Window

#: PROCESS_DEAD_AFTER_SECONDS must be at least this many heartbeats: with 2 s over a 0.5 s
#: heartbeat a live replica on a loaded machine was taken for dead (its user told to resend
#: mid-answer); three missed beats in a row is what "dead" means here.
DEAD_AFTER_HEARTBEATS = 3
#: A process whose liveness lock is free (its connection is gone) is dead once its last
#: heartbeat is this many heartbeats old: a live process whose connection was cut opens
#: a new one, takes its lock back and beats within one heartbeat (at once, if the server
#: answers), so it is never taken for dead in between
#: (docs/decisions/100-process-liveness-lock.md).
GONE_AFTER_HEARTBEATS = 2

__all__ = ["DEAD_AFTER_HEARTBEATS", "GONE_AFTER_HEARTBEATS", "LedgerConfig", "OperationCaps"]


@dataclass(frozen=True, slots=True)
class OperationCaps:
    """Caps of one operation: max cost (µUSD, held + settled) and max requests."""

    max_musd: int
    max_requests: int


def _default_caps() -> dict[Origin, OperationCaps]:
    return {
        Origin.CHAT: OperationCaps(max_musd=50_000, max_requests=8),
        Origin.DIGEST: OperationCaps(max_musd=20_000, max_requests=40),
    }


@dataclass(frozen=True, slots=True)
class LedgerConfig:
    """Limits and knobs of the ledger.

    Attributes:
        tz: BUDGET_TZ, the IANA zone windows are cut in.
        global_daily_musd .. team_monthly_musd: default limits per level/window
            (``None`` = no limit); runtime overrides in the database win.
        provider_daily_caps_musd: provider account caps per day,
            e.g. ``{"deepseek": 2_000_000}`` (DEEPSEEK_DAILY_CAP_USD);
            provider_monthly_caps_musd the same per month (DEEPSEEK_MONTHLY_CAP_USD).
        month_start_day: BUDGET_MONTH_START_DAY, the billing-cycle day the month
            window starts on (1 = calendar months; :func:`budget.policy.windows.month_bounds`).
        plans: the plans' money limits by name (:class:`budget.policy.plans.PlanLimits`;
            empty: no plan level, as before plans).
        default_plan: the plan of a user without one (or whose plan ended or is no
            longer defined); must be one of ``plans`` when there are plans.
        hold_ttl_s: HOLD_TTL_SECONDS; must exceed ``max_call_s``.
        max_call_s: PROVIDER_TIMEOUT_SECONDS, the longest possible attempt.
        operation_caps: caps per origin (chat: OPERATION_MAX_USD/REQUESTS; digest:
            DIGEST_MAX_USD and a request cap).
        user_max_inflight: USER_MAX_INFLIGHT operations running per user.
        user_max_per_minute: USER_MAX_PER_MINUTE operations started per rolling minute.
        user_daily_messages: USER_DAILY_MESSAGES courtesy cap (``None`` = off).
        auto_kill_window_s: AUTO_KILL_WINDOW_MINUTES × 60.
        auto_kill_fraction: AUTO_KILL_FRACTION of the global daily limit (0 = off).
        auto_kill_musd_per_window: AUTO_KILL_USD_PER_WINDOW in µUSD; when set it
            replaces the fraction (and works without a global limit); 0 = off.
        sweep_interval_s: how often the sweeper expires orphaned holds.
        process_heartbeat_s: PostgreSQL ledger: seconds between this process's
            heartbeats (PROCESS_HEARTBEAT_SECONDS).
        process_dead_after_s: PostgreSQL ledger: a process whose last heartbeat is
            older than this many seconds is dead and its holds are swept
            (PROCESS_DEAD_AFTER_SECONDS; at least :data:`DEAD_AFTER_HEARTBEATS`
            heartbeat intervals). One whose connection is gone is dead sooner:
            :attr:`process_gone_after_s`.
        db_lock_timeout_s: PostgreSQL ledger: the longest a statement waits for a row or
            advisory lock another session holds (PostgreSQL's ``lock_timeout``;
            DATABASE_LOCK_TIMEOUT_SECONDS); then the step fails closed.
        db_pool_timeout_s: PostgreSQL ledger: the longest a step waits for one of its
            process's pool connections (DATABASE_POOL_TIMEOUT_SECONDS); then it fails
            closed.
        synchronous: the SQLite ledger's durability: ``FULL`` (the WAL fsync'd after
            each group with a granted hold or another durable step, as SQLite's
            ``synchronous=FULL``) or ``NORMAL`` (never fsync'd); see
            :mod:`budget.kernel.sqlite_writer` for what each guarantees.
    """

    tz: str = "UTC"
    global_daily_musd: int | None = None
    global_hourly_musd: int | None = None
    user_daily_musd: int | None = None
    user_hourly_musd: int | None = None
    team_daily_musd: int | None = None
    team_hourly_musd: int | None = None
    global_monthly_musd: int | None = None
    user_monthly_musd: int | None = None
    team_monthly_musd: int | None = None
    provider_daily_caps_musd: Mapping[str, int] = field(default_factory=dict)
    provider_monthly_caps_musd: Mapping[str, int] = field(default_factory=dict)
    month_start_day: int = 1
    plans: Mapping[str, PlanLimits] = field(default_factory=dict)
    default_plan: str | None = None
    hold_ttl_s: float = 300.0
    max_call_s: float = 60.0
    operation_caps: Mapping[Origin, OperationCaps] = field(default_factory=_default_caps)
    user_max_inflight: int = 2
    user_max_per_minute: int = 10
    user_daily_messages: int | None = None
    auto_kill_window_s: float = 3600.0
    auto_kill_fraction: Decimal = Decimal("0.5")
    auto_kill_musd_per_window: int | None = None
    sweep_interval_s: float = 30.0
    process_heartbeat_s: float = 2.0
    process_dead_after_s: float = 60.0
    db_lock_timeout_s: float = 2.0
    db_pool_timeout_s: float = 5.0
    synchronous: Literal["FULL", "NORMAL"] = "FULL"

    def __post_init__(self) -> None:
        try:
            zone(self.tz)
        except Exception as exc:
            raise BudgetConfigError(f"unknown BUDGET_TZ {self.tz!r}") from exc
        if self.hold_ttl_s <= self.max_call_s:
            raise BudgetConfigError(
                f"HOLD_TTL_SECONDS ({self.hold_ttl_s}) must exceed the longest call "
                f"PROVIDER_TIMEOUT_SECONDS ({self.max_call_s})"
            )
        for origin in Origin:
            if origin not in HOLD_ONLY_ORIGINS and origin not in self.operation_caps:
                raise BudgetConfigError(f"no operation caps for origin {origin}")
        limits = (
            self.global_daily_musd,
            self.global_hourly_musd,
            self.user_daily_musd,
            self.user_hourly_musd,
            self.team_daily_musd,
            self.team_hourly_musd,
            self.global_monthly_musd,
            self.user_monthly_musd,
            self.team_monthly_musd,
            *self.provider_daily_caps_musd.values(),
            *self.provider_monthly_caps_musd.values(),
        )
        if any(v is not None and v < 0 for v in limits):
            raise BudgetConfigError("limits must be >= 0")
        if self.process_dead_after_s < DEAD_AFTER_HEARTBEATS * self.process_heartbeat_s:
            raise BudgetConfigError(
                f"PROCESS_DEAD_AFTER_SECONDS must be at least {DEAD_AFTER_HEARTBEATS} × "
                "PROCESS_HEARTBEAT_SECONDS"
            )
        if self.auto_kill_fraction < 0:
            raise BudgetConfigError("AUTO_KILL_FRACTION must be >= 0")
        if not 1 <= self.month_start_day <= 31:
            raise BudgetConfigError("BUDGET_MONTH_START_DAY must be 1..31")
        if self.plans and self.default_plan not in self.plans:
            raise BudgetConfigError(f"the default plan {self.default_plan!r} is not defined")
        for name, plan in self.plans.items():
            if plan.name != name:
                raise BudgetConfigError(f"plan {name!r} is filed under another name")

    def keys(self, at: datetime) -> WindowKeys:
        """The windows of ``at`` in BUDGET_TZ, the month from ``month_start_day``."""
        return window_keys(at, self.tz, self.month_start_day)

    def plan(self, name: str | None) -> PlanLimits | None:
        """The plan a user on ``name`` is held on: that plan if defined, else the
        default plan; ``None`` when there are no plans."""
        if not self.plans:
            return None
        if name is not None and name in self.plans:
            return self.plans[name]
        assert self.default_plan is not None  # checked at construction
        return self.plans[self.default_plan]

    @property
    def process_gone_after_s(self) -> float:
        """PostgreSQL ledger: a process whose liveness lock is free (its connection is
        gone) and whose last heartbeat is older than this many seconds is dead
        (:data:`GONE_AFTER_HEARTBEATS` heartbeats)."""
        return GONE_AFTER_HEARTBEATS * self.process_heartbeat_s

    def default_limit(self, level: Level, scope: str, window: Window) -> int | None:
        """The configured default limit (µUSD) of a level/window, ``None`` = no limit."""
        if level is Level.PROVIDER:
            if window is Window.DAY:
                return self.provider_daily_caps_musd.get(scope)
            if window is Window.MONTH:
                return self.provider_monthly_caps_musd.get(scope)
            return None
        if level is Level.WALLET:
            return 0  # its credits are booked as negative spend (budget.storage.sql.wallet)
        if level is Level.PLAN:
            plan = self.plans.get(scope)
            return None if plan is None else plan.total_musd.get(window)
        table: dict[tuple[Level, Window], int | None] = {
            (Level.GLOBAL, Window.DAY): self.global_daily_musd,
            (Level.GLOBAL, Window.HOUR): self.global_hourly_musd,
            (Level.GLOBAL, Window.MONTH): self.global_monthly_musd,
            (Level.USER, Window.DAY): self.user_daily_musd,
            (Level.USER, Window.HOUR): self.user_hourly_musd,
            (Level.USER, Window.MONTH): self.user_monthly_musd,
            (Level.TEAM, Window.DAY): self.team_daily_musd,
            (Level.TEAM, Window.HOUR): self.team_hourly_musd,
            (Level.TEAM, Window.MONTH): self.team_monthly_musd,
        }
        return table.get((level, window))
