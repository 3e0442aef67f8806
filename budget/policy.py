"""Pure ledger policy: which levels a hold touches, whether it fits, the hold state
machine, the auto-kill threshold and the interrupted-call rule.

No I/O here: a storage backend (:mod:`budget.sqlite_store`) reads bucket rows inside
its write transaction, asks these functions, and writes the outcome. Money is
integer µUSD.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from budget.config import LedgerConfig
from budget.types import Level, Refusal, RefusalReason, Usage, Window
from budget.windows import WindowKeys

__all__ = [
    "Bucket",
    "HoldState",
    "Scope",
    "auto_kill_threshold_musd",
    "check_hold",
    "interrupted_usage",
    "scopes_for",
    "settle_transition",
]

#: (level, scope name): scope is the user id as text, the team name, "" for global,
#: or the provider name.
Scope = tuple[Level, str]

_LEVEL_ORDER = (Level.PERSONAL, Level.TEAM, Level.GLOBAL, Level.PROVIDER)


def scopes_for(
    user_id: int, team: str | None, provider: str, provider_caps: Mapping[str, int]
) -> list[Scope]:
    """Every level a hold of ``user_id`` at ``provider`` is booked on.

    The provider level is included only when the provider has an account cap
    (configured default or runtime override); see ``provider_caps``.
    """
    scopes: list[Scope] = [(Level.PERSONAL, str(user_id))]
    if team:
        scopes.append((Level.TEAM, team))
    scopes.append((Level.GLOBAL, ""))
    if provider in provider_caps:
        scopes.append((Level.PROVIDER, provider))
    return scopes


def windows_for(level: Level) -> tuple[Window, ...]:
    """The windows a level is tracked in (a provider cap is per day only)."""
    return (Window.DAY,) if level is Level.PROVIDER else (Window.DAY, Window.HOUR)


@dataclass(frozen=True, slots=True)
class Bucket:
    """One level/window's current state, as read inside the write transaction.

    Attributes:
        limit_musd: ``None`` = no limit.
        settled_musd: actual cost of settled holds booked in this window.
        held_musd: ceilings of outstanding holds.
        late_musd: settlements that arrived after their hold had expired.
        resets_at: aware UTC reset of the window.
    """

    level: Level
    scope: str
    window: Window
    key: str
    limit_musd: int | None
    settled_musd: int
    held_musd: int
    late_musd: int
    resets_at: datetime

    @property
    def free_musd(self) -> int | None:
        """limit − settled − held (may be negative after late settles); ``None`` = unlimited."""
        if self.limit_musd is None:
            return None
        return self.limit_musd - self.settled_musd - self.held_musd


def check_hold(buckets: Sequence[Bucket], ceiling_musd: int) -> Refusal | None:
    """Would a hold of ``ceiling_musd`` fit on every bucket? ``None`` = yes.

    A hold fits a bucket when ``ceiling ≤ free``. A 0 µUSD hold (free tier)
    spends nothing and always fits. When several buckets refuse, the refusal names
    an *exhausted* one (settled spend alone blocks it) before a *busy* one
    (outstanding holds block it), most personal level first, day before hour.
    ``busy`` is true when ``ceiling ≤ limit − settled``: waiting for holds to
    settle may free the room.
    """
    if ceiling_musd <= 0:
        return None
    refusing: list[tuple[bool, int, int, Bucket]] = []
    for b in buckets:
        free = b.free_musd
        if free is None or ceiling_musd <= free:
            continue
        assert b.limit_musd is not None
        busy = ceiling_musd <= b.limit_musd - b.settled_musd
        refusing.append((busy, _LEVEL_ORDER.index(b.level), 0 if b.window is Window.DAY else 1, b))
    if not refusing:
        return None
    busy, _, _, b = min(refusing, key=lambda r: (r[0], r[1], r[2]))
    return Refusal(
        reason=RefusalReason.BUSY if busy else RefusalReason.LIMIT,
        level=b.level,
        window=b.window,
        resets_at=b.resets_at,
        busy=busy,
        scope=b.scope,
    )


def bucket_key(keys: WindowKeys, window: Window) -> str:
    """The key of ``window`` in ``keys`` (hour/day)."""
    return keys.key(window)


def auto_kill_threshold_musd(
    config: LedgerConfig, global_daily_limit_musd: int | None
) -> int | None:
    """Settled spend within the auto-kill window above which the kill switch trips.

    AUTO_KILL_USD_PER_WINDOW when set (0 disables); otherwise AUTO_KILL_FRACTION ×
    the global daily limit (the effective one, runtime overrides included), rounded
    down; ``None`` when disabled or there is no global daily limit.
    """
    if config.auto_kill_musd_per_window is not None:
        return config.auto_kill_musd_per_window or None
    if config.auto_kill_fraction == 0 or global_daily_limit_musd is None:
        return None
    return int(Decimal(global_daily_limit_musd) * config.auto_kill_fraction)


def interrupted_usage(
    input_tokens: int,
    max_tokens: int,
    reported: Usage | None,
    received_output_tokens: int | None,
) -> Usage:
    """The usage to settle an interrupted call at (shutdown, timeout, cancel, cut stream).

    Rule, in order: the provider's reported usage if any; else the hold's input
    tokens plus the output tokens actually received (counted); else the ceiling
    (input tokens + ``max_tokens``). The caller flags the settlement "estimated".
    """
    if reported is not None:
        return reported
    if received_output_tokens is not None:
        return Usage(input_tokens=input_tokens, output_tokens=max(0, received_output_tokens))
    return Usage(input_tokens=input_tokens, output_tokens=max_tokens)


class HoldState(StrEnum):
    """A hold's life: HELD → SETTLED | RELEASED | EXPIRED; EXPIRED → SETTLED (late)."""

    HELD = "held"
    SETTLED = "settled"
    RELEASED = "released"
    EXPIRED = "expired"


def settle_transition(state: HoldState) -> tuple[bool, bool]:
    """What a settle does to a hold in ``state``.

    Returns:
        ``(book, late)``: ``book`` — the actual cost is booked now (False: the
        settle is a no-op, the hold already ended); ``late`` — the hold had expired,
        so the booking counts as a late settle (its ceiling was already returned).
    """
    if state is HoldState.HELD:
        return True, False
    if state is HoldState.EXPIRED:
        return True, True
    return False, False
