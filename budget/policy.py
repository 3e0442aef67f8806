"""Pure ledger policy: which levels a hold touches, whether it fits, the hold state
machine, the auto-kill threshold, the interrupted-call rule and user-id checks.

No I/O here: a storage backend (:mod:`budget.sqlite_store`) reads bucket rows inside
its write transaction, asks these functions, and writes the outcome. Money is
integer µUSD.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from budget.config import LedgerConfig
from budget.money import usd_text
from budget.types import Level, Refusal, RefusalReason, Usage, Window
from budget.windows import WindowKeys

__all__ = [
    "USER_ID_MAX",
    "USER_ID_MIN",
    "Bucket",
    "HoldState",
    "Scope",
    "auto_kill_reason",
    "auto_kill_threshold_musd",
    "check_hold",
    "check_user_id",
    "interrupted_usage",
    "release_transition",
    "scopes_for",
    "settle_transition",
]

#: (level, scope name): scope is the user id as text, the team name, "" for global,
#: or the provider name.
Scope = tuple[Level, str]

_LEVEL_ORDER = (Level.PERSONAL, Level.TEAM, Level.GLOBAL, Level.PROVIDER)

_INT_TEXT = re.compile(r"-?[0-9]{1,40}")

#: User ids are stored as SQLite INTEGER (signed 64-bit); Telegram ids fit easily.
USER_ID_MIN = -(2**63)
USER_ID_MAX = 2**63 - 1


def check_user_id(user_id: object, what: str = "user id") -> int:
    """``user_id`` if it is an int in the signed 64-bit range the database stores.

    Args:
        user_id: the value to check (an int, or a user id written as decimal text
            such as a personal-level scope ``"42"``).
        what: how the message names the value (``"user id"``, ``"admin id (by)"``).

    Returns:
        the id as an int.

    Raises:
        ValueError: not an integer (bools included) or outside
            [``USER_ID_MIN``, ``USER_ID_MAX``]; the message names ``what`` and the range.
    """
    if isinstance(user_id, str):
        if _INT_TEXT.fullmatch(user_id) is None:
            raise ValueError(f"{what} must be an integer, got {user_id!r}")
        value = int(user_id)
    elif isinstance(user_id, int) and not isinstance(user_id, bool):
        value = user_id
    else:
        raise ValueError(f"{what} must be an integer, got {user_id!r}")
    if not USER_ID_MIN <= value <= USER_ID_MAX:
        raise ValueError(
            f"{what} {value} is outside the signed 64-bit range [{USER_ID_MIN}, {USER_ID_MAX}]"
        )
    return value


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


def auto_kill_reason(spent_musd: int, threshold_musd: int, window_s: float) -> str:
    """The kill switch's reason when the burn-rate trigger trips, e.g.
    ``"automatic: settled $0.000700 in the last 60 min > threshold $0.000500"``.

    The word "automatic" appears once (callers that also show
    :attr:`budget.status.KillState.automatic` should not prefix it again); money
    as exact dollars with six decimals.
    """
    minutes = int(window_s // 60)
    return (
        f"automatic: settled {usd_text(spent_musd)} in the last {minutes} min"
        f" > threshold {usd_text(threshold_musd)}"
    )


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
    """A hold's life::

        HELD ──settle──▶ SETTLED            actual booked, ceiling returned
        HELD ──release─▶ RELEASED           ceiling returned, nothing booked
        HELD ──expire──▶ EXPIRED            ceiling booked as settled, flagged estimated
        EXPIRED ─settle──▶ SETTLED (late)   booking corrected: − ceiling + actual
        EXPIRED ─release─▶ RELEASED (late)  booked ceiling returned (provider never reached)

    SETTLED and RELEASED are final: a later settle/release/expiry changes nothing.
    An EXPIRED hold (TTL passed, or left by a crashed process) is money that may
    have been spent at the provider, so it is counted at its ceiling — against
    every limit, the provider's spend and calls, and the auto-kill trigger — until
    the caller's own settle or release corrects it (reconciliation).
    """

    HELD = "held"
    SETTLED = "settled"
    RELEASED = "released"
    EXPIRED = "expired"


def settle_transition(state: HoldState) -> tuple[bool, bool]:
    """What a settle does to a hold in ``state``.

    Returns:
        ``(book, late)``: ``book`` — the actual cost is booked now (False: the
        settle is a no-op, the hold already ended); ``late`` — the hold had expired,
        so its ceiling is already booked as settled: the booking is *corrected*
        (− ceiling + actual) and the actual counts as a late settle.
    """
    if state is HoldState.HELD:
        return True, False
    if state is HoldState.EXPIRED:
        return True, True
    return False, False


def release_transition(state: HoldState) -> tuple[bool, bool]:
    """What a release does to a hold in ``state``.

    Returns:
        ``(release, late)``: ``release`` — the hold ends now with 0 µUSD spent
        (False: no-op, it was already settled or released); ``late`` — the hold had
        expired, so the ceiling booked at expiry is taken back out of settled spend
        (a release says the provider was never reached).
    """
    if state is HoldState.HELD:
        return True, False
    if state is HoldState.EXPIRED:
        return True, True
    return False, False
